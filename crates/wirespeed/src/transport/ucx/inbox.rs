//! The receive side of a UCX connection: arrivals queued in order as frames, rendezvous
//! bodies pulled into pooled buffers no further ahead than the reader (the receive window),
//! and the Active Message callback that feeds it all. Only the thread holding the `Core` lock
//! touches it, callbacks included.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ucx_sys::*;

use super::context::{complete, posted, status_string};
use crate::error::{Error, FrameError, Result};
use crate::mem::Buf;
use crate::proto::frame::{FrameHeader, HEADER_LEN, Limits};
use crate::transport::pool::{Pool, PoolBuf};
use crate::transport::progress::Meta;

/// Received bodies waiting to be read, at most, before further rendezvous bodies wait at the
/// sender: the receiver pulls no further ahead than it reads, like a socket buffer, so buffers
/// stay few and warm in cache however many streams have credit.
const RECV_AHEAD: usize = 8;
/// Bytes of those bodies, at most, when our own CPU copies them out of the peer's memory
/// (CMA, KNEM, XPMEM) or out of shared-memory fragments. Pulling further ahead then buys no
/// overlap and only pushes buffers out of cache: one 1 MiB body, or two 128 KiB ones, at a
/// time. A reused buffer is still in cache, and CMA then copies about 15 % faster; two 128 KiB
/// bodies at a time made 2.6 % more than eight (0.90 against 0.88 × perftest, 8 runs in turns).
const RECV_WINDOW_COPY: usize = 256 << 10;
/// Bytes of those bodies, at most, when a fabric moves them (RDMA, or TCP even on loopback,
/// where the sender's kernel copies into the socket while ours copies out): a deeper window
/// keeps it busy, and spares each body a round trip between the receive and the sender's put.
const RECV_WINDOW_FABRIC: usize = 16 << 20;
/// Receive buffers kept for reuse, per connection.
const POOL_KEEP: usize = 64 << 20;
/// Payloads start on this boundary in receive buffers (Arrow wants 64-byte alignment).
const PAYLOAD_ALIGN: usize = 64;
/// After the bootstrap socket hangs up, how long frames already on their way may still arrive.
pub(super) const HANGUP_GRACE: Duration = Duration::from_millis(250);

/// Where a receive reports its completion: boxed, so that it stays put while its arrival moves.
type Slot = Box<Option<ucs_status_t>>;

/// Arrivals in order. Callbacks reach it through a raw pointer while their caller holds the
/// Core lock, so it is never touched concurrently.
pub(super) struct Inbox {
    worker: ucp_worker_h,
    pool: Arc<Pool>,
    limits: Limits,
    arrivals: VecDeque<Arrival>,
    /// Payload bytes of `arrivals` being or already received (not deferred ones), and how
    /// many arrivals hold them.
    held: usize,
    arrivals_held: usize,
    /// Bytes of rendezvous bodies pulled ahead of the reader, at most (one body always may).
    recv_window: usize,
    /// Arrivals whose rendezvous body waits for room under `recv_window`.
    deferred: usize,
    /// Bumped by every callback, so progress can tell whether to wake parked threads.
    events: u64,
    /// Completion slots of finished rendezvous receives, for the next ones.
    spare_slots: Vec<Slot>,
    /// The first failure; later arrivals are dropped.
    failure: Option<Error>,
    /// When and why the peer seemed to go (its socket hung up, or our endpoint failed).
    /// Frames already on their way may still arrive for `HANGUP_GRACE`, then this fails.
    peer_gone: Option<(Instant, String)>,
}

struct Arrival {
    header: FrameHeader,
    /// Meta that came in the AM header.
    meta: Meta,
    /// Meta bytes at the start of the AM data (when it was too big for the AM header).
    data_meta: usize,
    /// Offset of the data in `buf`, so that the payload starts aligned.
    pad: usize,
    buf: Option<PoolBuf>,
    /// For a rendezvous body, where its receive reports completion (`None` while in flight);
    /// eager data is complete on arrival and needs no slot.
    rndv: Option<Slot>,
    /// A rendezvous body not pulled yet: UCX's descriptor for it, and its length.
    deferred: Option<(*mut c_void, usize)>,
}

impl Arrival {
    /// Bytes of receive buffer it counts against `recv_window`.
    fn held_bytes(&self) -> usize {
        if self.buf.is_none() { 0 } else { self.pad + self.data_meta + self.header.payload_len() as usize }
    }

    /// The receive's status: `None` while a rendezvous body is still arriving.
    fn status(&self) -> Option<ucs_status_t> {
        self.rndv.as_deref().map_or(Some(UCS_OK), |s| *s)
    }
}

impl Inbox {
    /// An empty inbox for `worker`'s arrivals, checked against `limits`; boxed, because UCX
    /// callbacks reach it by address.
    pub(super) fn new(worker: ucp_worker_h, limits: Limits) -> Box<Inbox> {
        Box::new(Inbox {
            worker,
            pool: Pool::new(POOL_KEEP),
            limits,
            arrivals: VecDeque::new(),
            held: 0,
            arrivals_held: 0,
            recv_window: RECV_WINDOW_FABRIC,
            deferred: 0,
            spare_slots: Vec::new(),
            events: 0,
            failure: None,
            peer_gone: None,
        })
    }

    /// Sizes the receive window for how bodies travel, from UCX's description of the
    /// endpoint's lanes (see `bulk_by_fabric`).
    pub(super) fn size_window(&mut self, lanes: Option<&str>) {
        let fabric = lanes.is_some_and(bulk_by_fabric);
        self.recv_window = if fabric { RECV_WINDOW_FABRIC } else { RECV_WINDOW_COPY };
    }

    /// Callbacks so far: a change means something arrived or failed.
    pub(super) fn events(&self) -> u64 {
        self.events
    }

    pub(super) fn failure(&self) -> Option<&Error> {
        self.failure.as_ref()
    }

    /// When a peer that seemed to go is given up on, if it seemed to.
    pub(super) fn give_up_at(&self) -> Option<Instant> {
        self.peer_gone.as_ref().map(|(t, _)| *t + HANGUP_GRACE)
    }

    /// Whether a rendezvous body is still arriving.
    pub(super) fn receiving(&self) -> bool {
        self.arrivals.iter().any(|a| a.status().is_none())
    }

    pub(super) fn fail(&mut self, e: Error) {
        self.events += 1;
        if self.failure.is_none() {
            self.failure = Some(e);
        }
        self.release_deferred();
    }

    pub(super) fn peer_going(&mut self, why: String) {
        self.events += 1;
        self.peer_gone.get_or_insert((Instant::now(), why));
    }

    pub(super) fn expire_peer_gone(&mut self) {
        if let Some((t, why)) = &self.peer_gone
            && self.failure.is_none()
            && t.elapsed() >= HANGUP_GRACE
        {
            let e = Error::ConnectionLost(why.clone());
            self.fail(e);
        }
    }

    /// Queues one arriving message as a frame; true if UCX must keep its rendezvous
    /// descriptor for later (the body waits for room).
    ///
    /// # Safety
    /// `data` holds `length` bytes (or is a rendezvous descriptor when `rndv`).
    unsafe fn arrive(&mut self, header: &[u8], data: *mut c_void, length: usize, rndv: bool) -> Result<bool> {
        let fixed: &[u8; HEADER_LEN] =
            header.get(..HEADER_LEN).and_then(|h| h.try_into().ok()).ok_or(FrameError::Malformed("UCX message"))?;
        let h = FrameHeader::decode(fixed, &self.limits)?;
        if h.flags != 0 {
            return Err(FrameError::Reserved.into()); // flags belong to rings
        }
        let meta_len = h.meta_len as usize;
        let data_meta = match header.len() - HEADER_LEN {
            0 => meta_len,
            n if n == meta_len => 0,
            _ => return Err(FrameError::Malformed("UCX message header").into()),
        };
        if length as u64 != data_meta as u64 + h.payload_len() {
            return Err(FrameError::Malformed("UCX message length").into());
        }
        let pad = (PAYLOAD_ALIGN - data_meta % PAYLOAD_ALIGN) % PAYLOAD_ALIGN;
        let mut a = Arrival {
            header: h,
            meta: header[HEADER_LEN..].into(),
            data_meta,
            pad,
            buf: None,
            rndv: None,
            deferred: None,
        };
        if rndv {
            let mut slot = self.spare_slots.pop().unwrap_or_default();
            *slot = None;
            a.rndv = Some(slot);
            a.deferred = Some((data, length));
            self.deferred += 1;
            self.arrivals.push_back(a);
            if let Err(e) = self.pull_deferred() {
                self.fail(e); // releases every descriptor still deferred, this one too
            }
            // UCX keeps the descriptor unless we handed it to ucp_am_recv_data_nbx (which
            // sets the buffer); one we deferred, or released on failure, counts as kept.
            return Ok(self.arrivals.back().is_some_and(|a| a.buf.is_none()));
        }
        if length > 0 {
            let mut buf = self.pool.take(pad + length)?;
            // SAFETY: eager data is `length` readable bytes for the callback's duration, and
            // the buffer holds at least pad + length bytes.
            unsafe { std::ptr::copy_nonoverlapping(data as *const u8, buf.as_mut_ptr().add(pad), length) };
            self.held += pad + length;
            self.arrivals_held += 1;
            a.buf = Some(buf);
        }
        self.arrivals.push_back(a);
        Ok(false)
    }

    /// Starts pulling deferred rendezvous bodies, oldest first, while they fit under
    /// `RECV_AHEAD` and `recv_window`. The oldest arrival always may, so a larger body still
    /// moves, and so do bodies behind eager messages that filled the window after them.
    fn pull_deferred(&mut self) -> Result<()> {
        let worker = self.worker;
        for (i, a) in self.arrivals.iter_mut().enumerate() {
            let Some((desc, length)) = a.deferred else { continue };
            let full = self.arrivals_held >= RECV_AHEAD || self.held + a.pad + length > self.recv_window;
            if i > 0 && self.held > 0 && full {
                break;
            }
            // Before the descriptor leaves `deferred`: on failure it is still ours to release.
            let mut buf = self.pool.take(a.pad + length)?;
            a.deferred = None;
            self.deferred -= 1;
            self.held += a.pad + length;
            self.arrivals_held += 1;
            let slot: *mut Option<ucs_status_t> = &mut **a.rndv.as_mut().expect("rendezvous slot");
            let mut params = ucp_request_param_t {
                op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE,
                datatype: UCP_DT_BYTES,
                user_data: slot.cast(),
                ..Default::default()
            };
            params.cb.recv_am = Some(on_recv_done);
            // SAFETY: `desc` is the descriptor UCX handed us and kept for us (the callback
            // returned INPROGRESS); the destination has room for `length` bytes and, like the
            // slot, lives until the worker is destroyed. UCX owns `desc` from here on.
            let req = unsafe {
                lib().ucp_am_recv_data_nbx(worker, desc, buf.as_mut_ptr().add(a.pad).cast(), length, &params)
            };
            a.buf = Some(buf);
            if !posted(req, "receiving a message body")? {
                a.rndv = None; // done already
            }
        }
        Ok(())
    }

    /// Hands deferred descriptors back to UCX (the connection is failing or going away).
    pub(super) fn release_deferred(&mut self) {
        for a in self.arrivals.iter_mut() {
            if let Some((desc, _)) = a.deferred.take() {
                // SAFETY: a descriptor UCX kept for us and we never passed on; released once.
                unsafe { lib().ucp_am_data_release(self.worker, desc) };
            }
        }
        self.deferred = 0;
    }

    /// Takes the oldest arrival if it is complete: header, meta and payload.
    /// Bodies that waited for room are pulled here, when the reader comes back for more, not
    /// when it takes a frame: by then it has mostly dropped that frame's buffer, which the next
    /// body reuses while it is still in cache.
    pub(super) fn pop_frame(&mut self) -> Option<Result<(FrameHeader, Meta, Buf)>> {
        if self.deferred > 0
            && let Err(e) = self.pull_deferred()
        {
            self.fail(e);
        }
        match self.arrivals.front()?.status() {
            None => return None,
            Some(UCS_OK) => {}
            Some(s) => {
                let e = Error::ConnectionLost(format!("receiving a message body: {}", status_string(s)));
                self.fail(e.clone());
                return Some(Err(e));
            }
        }
        let mut a = self.arrivals.pop_front()?;
        if let Some(slot) = a.rndv.take() {
            self.spare_slots.push(slot); // complete: UCX no longer writes it
        }
        self.held -= a.held_bytes();
        self.arrivals_held -= usize::from(a.held_bytes() > 0);
        let payload_len = a.header.payload_len() as usize;
        let (meta, payload) = match a.buf {
            None => (a.meta, Buf::empty()),
            Some(buf) => {
                let meta = if a.data_meta > 0 { buf.as_slice(a.pad, a.data_meta).into() } else { a.meta };
                let payload = if payload_len > 0 { buf.lend(a.pad + a.data_meta, payload_len) } else { Buf::empty() };
                (meta, payload)
            }
        };
        Some(Ok((a.header, meta, payload)))
    }
}

/// Whether bulk data (rendezvous bodies) travels over a fabric rather than being copied by the
/// receiving CPU: some lane UCX describes as `rma_bw` (the lanes bodies use) is on a device other
/// than "memory", the name UCX gives the same-host single-copy transports (cma, knem, xpmem).
fn bulk_by_fabric(lanes: &str) -> bool {
    lanes.lines().any(|l| l.contains("lane[") && l.contains(" rma_bw") && !l.contains("/memory"))
}

/// UCX's Active Message handler: queues each arrival in the inbox `arg` points to.
pub(super) unsafe extern "C" fn on_am(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const ucp_am_recv_param_t,
) -> ucs_status_t {
    // SAFETY: `arg` is the connection's inbox, and our caller holds the Core lock.
    let inbox = unsafe { &mut *(arg as *mut Inbox) };
    inbox.events += 1;
    if inbox.failure.is_some() {
        return UCS_OK; // the connection is failing; drop what still comes
    }
    let header: &[u8] = if header_length == 0 {
        &[]
    } else {
        // SAFETY: UCX passes `header_length` readable bytes.
        unsafe { std::slice::from_raw_parts(header as *const u8, header_length) }
    };
    // SAFETY: UCX passes a valid param.
    let rndv = unsafe { (*param).recv_attr } & UCP_AM_RECV_ATTR_FLAG_RNDV as u64 != 0;
    // SAFETY: `data` and `length` as UCX passed them.
    match unsafe { inbox.arrive(header, data, length, rndv) } {
        Ok(true) => UCS_INPROGRESS,
        Ok(false) => UCS_OK,
        Err(e) => {
            inbox.fail(e);
            UCS_OK
        }
    }
}

unsafe extern "C" fn on_recv_done(request: *mut c_void, status: ucs_status_t, _len: usize, user_data: *mut c_void) {
    // SAFETY: `user_data` is the arrival's slot, which lives until the worker is destroyed;
    // our caller holds the Core lock.
    unsafe { complete(request, status, user_data) }
}

#[cfg(test)]
mod tests {
    use super::bulk_by_fabric;

    /// Endpoint descriptions as UCX 1.13 prints them.
    const TCP: &str =
        "#                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0
#                 lane[1]:  1:tcp/eth0.0 md[0]              -> md[0]/tcp/sysdev[255] rma_bw#1 wireup
#                  rma_bw: mds [0] rndv_rkey_size 10";
    const CMA: &str =
        "#                 lane[0]:  0:posix/memory.0 md[0]          -> md[0]/posix/sysdev[255] am am_bw#0
#                 lane[1]:  2:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] rma_bw#0
#                  rma_bw: mds rndv_rkey_size 9";
    const RC: &str =
        "#                 lane[0]:  1:rc_mlx5/mlx5_0:1.0 md[1]      -> md[1]/ib/sysdev[0] rma_bw#0 am am_bw#0";
    const SHM_ONLY: &str =
        "#                 lane[0]:  0:posix/memory.0 md[0]          -> md[0]/posix/sysdev[255] am am_bw#0";

    #[test]
    fn bodies_over_a_fabric_get_the_deep_window_and_copies_the_shallow_one() {
        assert!(bulk_by_fabric(TCP));
        assert!(bulk_by_fabric(RC));
        assert!(!bulk_by_fabric(CMA));
        assert!(!bulk_by_fabric(SHM_ONLY), "fragments copied through shared memory");
        assert!(!bulk_by_fabric(""), "nothing described");
    }
}
