//! One UCP worker per connection: its life, our endpoint to the peer, and sends.
//!
//! Every frame travels as one Active Message: the frame header (and meta, when it fits) is the
//! AM header, the payload is the AM data. Arrivals go to the connection's `Inbox`; waiting
//! and the progress thread are in `progress`. Only the thread holding the `Core` lock calls
//! into UCX, so callbacks run under that lock.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ucx_sys::*;

use super::context::{check, complete, context, lifecycle, posted, status_string};
use super::inbox::{Inbox, on_am};
use crate::error::{Error, Result};
use crate::mem::Buf;
use crate::proto::frame::{FrameHeader, HEADER_LEN, Limits};
use crate::transport::progress::{Driver, Meta};

/// Active Message id of wirespeed frames.
const AM_ID: u32 = 0x77;
/// Owned sends in flight at most, by count and by bytes, before a sender waits.
const MAX_INFLIGHT: usize = 64;
const MAX_INFLIGHT_BYTES: usize = 16 << 20;

/// One-sided operations.
#[derive(Clone, Copy)]
pub(super) enum RmaOp {
    Put,
    Get,
    Flush,
}

/// What the UCX lock protects: the worker, our endpoint to the peer, and what has arrived.
pub(super) struct Core {
    worker: ucp_worker_h,
    ep: ucp_ep_h,
    pub(super) inbox: Box<Inbox>,
    max_am_header: usize,
    /// Borrowed-buffer sends whose sender is still waiting for them (see `UcxTx::write_frame`).
    pub(super) sends_in_flight: usize,
    /// Sends whose buffers UCX may still read, oldest first (see `post_owned`).
    inflight: VecDeque<InFlight>,
    inflight_bytes: usize,
}

/// A send that owns what UCX reads: the frame head, the payload and the gather list.
struct InFlight {
    head: Vec<u8>,
    payload: Vec<Bytes>,
    iov: Vec<ucp_dt_iov_t>,
    done: Box<Option<ucs_status_t>>,
    bytes: usize,
}

// SAFETY: the worker is created SERIALIZED and only touched with the Core lock held.
unsafe impl Send for Core {}

impl Core {
    /// Creates a worker whose arrivals are checked against `limits`.
    pub(super) fn new(limits: Limits) -> Result<Core> {
        let ctx = context()?;
        let params = ucp_worker_params_t {
            field_mask: UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64,
            thread_mode: UCS_THREAD_MODE_SERIALIZED,
            ..Default::default()
        };
        let mut worker = std::ptr::null_mut();
        let _one_at_a_time = lifecycle();
        // SAFETY: valid context and params; out-pointer to a local.
        check("creating a worker", unsafe { lib().ucp_worker_create(ctx, &params, &mut worker) })?;
        let inbox = Inbox::new(worker, limits);
        // From here on, dropping `core` destroys the worker.
        let mut core = Core {
            worker,
            ep: std::ptr::null_mut(),
            inbox,
            max_am_header: 0,
            sends_in_flight: 0,
            inflight: VecDeque::new(),
            inflight_bytes: 0,
        };
        let mut attr =
            ucp_worker_attr_t { field_mask: UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER as u64, ..Default::default() };
        // SAFETY: live worker, out-pointer to a local.
        check("querying the worker", unsafe { lib().ucp_worker_query(worker, &mut attr) })?;
        core.max_am_header = attr.max_am_header;
        let handler = ucp_am_handler_param_t {
            field_mask: (UCP_AM_HANDLER_PARAM_FIELD_ID
                | UCP_AM_HANDLER_PARAM_FIELD_FLAGS
                | UCP_AM_HANDLER_PARAM_FIELD_CB
                | UCP_AM_HANDLER_PARAM_FIELD_ARG) as u64,
            id: AM_ID,
            flags: UCP_AM_FLAG_WHOLE_MSG,
            cb: Some(on_am),
            arg: (&mut *core.inbox as *mut Inbox).cast(),
        };
        // SAFETY: the inbox is boxed, so `arg` stays valid as long as the worker.
        check("setting the message handler", unsafe { lib().ucp_worker_set_am_recv_handler(worker, &handler) })?;
        Ok(core)
    }

    /// Our worker's address, for the peer to connect its endpoint to.
    pub(super) fn address(&self) -> Result<Vec<u8>> {
        let (mut addr, mut len) = (std::ptr::null_mut(), 0usize);
        // SAFETY: live worker; out-pointers to locals.
        check("getting the worker address", unsafe { lib().ucp_worker_get_address(self.worker, &mut addr, &mut len) })?;
        // SAFETY: UCX returned `len` readable bytes at `addr`, released right after the copy.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len).to_vec() };
        // SAFETY: returned by ucp_worker_get_address on this worker.
        unsafe { lib().ucp_worker_release_address(self.worker, addr) };
        Ok(bytes)
    }

    /// Connects our endpoint to the peer's worker.
    /// `peer_failure`: ask UCX to report a failed peer through the endpoint's error handler.
    /// Shared-memory transports cannot, so UCX would pick a slower one when it is asked.
    pub(super) fn connect(&mut self, peer: &[u8], peer_failure: bool) -> Result<()> {
        let params = ucp_ep_params_t {
            field_mask: (UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                | UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64,
            address: peer.as_ptr().cast(),
            err_mode: if peer_failure { UCP_ERR_HANDLING_MODE_PEER } else { UCP_ERR_HANDLING_MODE_NONE },
            err_handler: ucp_err_handler_t { cb: Some(on_ep_error), arg: (&mut *self.inbox as *mut Inbox).cast() },
            ..Default::default()
        };
        let mut ep = std::ptr::null_mut();
        // SAFETY: UCX parses the address bytes we pass (it validates them); out-pointer to a
        // local; the inbox outlives the endpoint.
        check("connecting to the peer's worker", unsafe { lib().ucp_ep_create(self.worker, &params, &mut ep) })?;
        self.ep = ep;
        let lanes = self.describe_ep();
        self.inbox.size_window(lanes.as_deref());
        Ok(())
    }

    /// UCX's description of our endpoint: its lanes, and what each carries.
    fn describe_ep(&self) -> Option<String> {
        let (mut text, mut len) = (std::ptr::null_mut(), 0usize);
        // SAFETY: out-pointers to locals; the stream owns `text` until closed, we free it after.
        unsafe {
            let stream = libc::open_memstream(&mut text, &mut len);
            if stream.is_null() {
                return None;
            }
            lib().ucp_ep_print_info(self.ep, stream.cast());
            libc::fclose(stream);
            if text.is_null() {
                return None;
            }
            let out = std::ffi::CStr::from_ptr(text).to_string_lossy().into_owned();
            libc::free(text.cast());
            Some(out)
        }
    }

    /// Forgets owned sends that completed; a failed one fails the connection.
    pub(super) fn reap(&mut self) {
        while let Some(f) = self.inflight.front()
            && let Some(status) = *f.done
        {
            if status != UCS_OK {
                self.inbox.fail(Error::ConnectionLost(format!("sending: {}", status_string(status))));
            }
            self.inflight_bytes -= f.bytes;
            self.inflight.pop_front();
        }
    }

    /// Whether an owned send of `bytes` fits under the in-flight limits.
    pub(super) fn has_room(&self, bytes: usize) -> bool {
        self.inflight.is_empty()
            || (self.inflight.len() < MAX_INFLIGHT && self.inflight_bytes + bytes <= MAX_INFLIGHT_BYTES)
    }

    /// Starts sending a frame whose payload we keep until UCX is done with it; returns
    /// without waiting for that.
    pub(super) fn post_owned(&mut self, head: &[u8], payload: &[Bytes]) -> Result<()> {
        let bytes = payload.iter().map(|b| b.len()).sum();
        let mut f =
            InFlight { head: head.to_vec(), payload: payload.to_vec(), iov: Vec::new(), done: Box::new(None), bytes };
        let slices: Vec<std::io::IoSlice<'_>> = f.payload.iter().map(|b| std::io::IoSlice::new(b)).collect();
        let slot: *mut Option<ucs_status_t> = &mut *f.done;
        // SAFETY: the head, payload, gather list and slot are heap memory owned by `f`, which
        // stays in `inflight` (moving it does not move them) until the send completes or the
        // worker is destroyed.
        let pending = unsafe { self.start_send(&f.head, &slices, &mut f.iov, slot)? };
        drop(slices);
        if pending {
            self.inflight_bytes += f.bytes;
            self.inflight.push_back(f);
        }
        Ok(())
    }

    /// Starts sending one frame. `None`: sent already; otherwise the request to wait for,
    /// whose completion lands in `done`.
    ///
    /// # Safety
    /// `head`, the payload, `iov` (scratch for the gather list) and `done` must stay valid
    /// and untouched until the request completes.
    pub(super) unsafe fn start_send(
        &mut self,
        head: &[u8],
        payload: &[std::io::IoSlice<'_>],
        iov: &mut Vec<ucp_dt_iov_t>,
        done: *mut Option<ucs_status_t>,
    ) -> Result<bool> {
        let ep = self.usable_ep()?;
        // Meta too big for the AM header goes at the start of the data instead.
        let (am_header, data_meta) =
            if head.len() <= self.max_am_header { (head, &[][..]) } else { head.split_at(HEADER_LEN) };
        iov.clear();
        for s in std::iter::once(data_meta).chain(payload.iter().map(|s| &s[..])) {
            if !s.is_empty() {
                iov.push(ucp_dt_iov_t { buffer: s.as_ptr() as *mut c_void, length: s.len() });
            }
        }
        let (buffer, count, datatype) = match iov.len() {
            0 => (std::ptr::null(), 0, UCP_DT_BYTES),
            1 => (iov[0].buffer as *const c_void, iov[0].length, UCP_DT_BYTES),
            n => (iov.as_ptr().cast(), n, UCP_DT_IOV),
        };
        let mut params = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_DATATYPE,
            datatype,
            user_data: done.cast(),
            ..Default::default()
        };
        params.cb.send = Some(on_send_done);
        // SAFETY: live endpoint; the caller keeps the buffers and the gather list valid until
        // completion.
        let req = unsafe {
            lib().ucp_am_send_nbx(ep, AM_ID, am_header.as_ptr().cast(), am_header.len(), buffer, count, &params)
        };
        posted(req, "sending")
    }

    /// Starts a one-sided operation on our endpoint (a flush ignores `buf` and `remote`, and
    /// completes once everything issued before it is complete at the peer). Returns whether
    /// a request is pending, whose completion lands in `done`.
    ///
    /// # Safety
    /// `buf` (and `done`) must stay valid and untouched until the request completes; `rkey`
    /// must come from `unpack_rkey` on this worker and be alive.
    pub(super) unsafe fn start_rma(
        &mut self,
        op: RmaOp,
        buf: *mut u8,
        len: usize,
        remote: (u64, ucp_rkey_h),
        done: *mut Option<ucs_status_t>,
    ) -> Result<bool> {
        let ep = self.usable_ep()?;
        let mut params = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            user_data: done.cast(),
            ..Default::default()
        };
        params.cb.send = Some(on_send_done);
        let (addr, rkey) = remote;
        // SAFETY: live endpoint; the caller keeps `buf` valid until completion and `rkey` alive.
        let req = unsafe {
            match op {
                RmaOp::Put => lib().ucp_put_nbx(ep, buf.cast(), len, addr, rkey, &params),
                RmaOp::Get => lib().ucp_get_nbx(ep, buf.cast(), len, addr, rkey, &params),
                RmaOp::Flush => lib().ucp_ep_flush_nbx(ep, &params),
            }
        };
        posted(req, "one-sided transfer")
    }

    /// Our endpoint, unless the connection failed or closed.
    fn usable_ep(&self) -> Result<ucp_ep_h> {
        if let Some(e) = self.inbox.failure() {
            return Err(e.clone());
        }
        if self.ep.is_null() {
            return Err(Error::Closed);
        }
        Ok(self.ep)
    }

    /// Makes a peer's packed memory key usable on our endpoint.
    pub(super) fn unpack_rkey(&mut self, packed: &[u8]) -> Result<ucp_rkey_h> {
        let ep = self.usable_ep()?;
        let mut rkey = std::ptr::null_mut();
        // SAFETY: live endpoint; UCX reads the packed key (from our authenticated peer).
        check("unpacking a remote key", unsafe { lib().ucp_ep_rkey_unpack(ep, packed.as_ptr().cast(), &mut rkey) })?;
        Ok(rkey)
    }

    /// Closes our endpoint: `force` drops what is in flight (failing those requests),
    /// otherwise it is flushed first, for at most `limit`.
    pub(super) fn close_ep(&mut self, force: bool, limit: Duration) {
        if self.ep.is_null() {
            return;
        }
        let params = ucp_request_param_t {
            op_attr_mask: UCP_OP_ATTR_FIELD_FLAGS,
            flags: if force { UCP_EP_CLOSE_FLAG_FORCE } else { 0 },
            ..Default::default()
        };
        // SAFETY: live endpoint, closed once (the pointer is cleared below).
        let req = unsafe { lib().ucp_ep_close_nbx(self.ep, &params) };
        self.ep = std::ptr::null_mut();
        if ucs_ptr_is_ptr(req) {
            let deadline = Instant::now() + limit;
            // SAFETY: `req` is a live request until freed below.
            while unsafe { lib().ucp_request_check_status(req) } == UCS_INPROGRESS && Instant::now() < deadline {
                self.progress();
            }
            // SAFETY: as above; freed once.
            unsafe { lib().ucp_request_free(req) };
        }
    }
}

impl Driver for Core {
    fn progress(&mut self) -> u32 {
        // SAFETY: live worker, lock held.
        unsafe { lib().ucp_worker_progress(self.worker) }
    }

    fn arm(&mut self) -> Result<bool> {
        // SAFETY: live worker, lock held.
        match unsafe { lib().ucp_worker_arm(self.worker) } {
            UCS_OK => Ok(true),
            UCS_ERR_BUSY => Ok(false),
            s => check("arming the worker", s).map(|_| false),
        }
    }

    fn wait_fds(&mut self, fds: &mut Vec<libc::pollfd>) -> Result<()> {
        let mut efd: RawFd = -1;
        // SAFETY: live worker; out-pointer to a local.
        check("getting the worker's event fd", unsafe { lib().ucp_worker_get_efd(self.worker, &mut efd) })?;
        fds.push(libc::pollfd { fd: efd, events: libc::POLLIN, revents: 0 });
        Ok(())
    }

    fn outstanding(&self) -> bool {
        self.sends_in_flight > 0 || !self.inflight.is_empty() || self.inbox.receiving()
    }

    fn events(&self) -> u64 {
        self.inbox.events()
    }

    fn failure(&self) -> Option<&Error> {
        self.inbox.failure()
    }

    fn fail(&mut self, e: Error) {
        self.inbox.fail(e)
    }

    fn peer_going(&mut self, why: String) {
        self.inbox.peer_going(why)
    }

    fn expire_peer_gone(&mut self) {
        self.inbox.expire_peer_gone()
    }

    fn give_up_at(&self) -> Option<Instant> {
        self.inbox.give_up_at()
    }

    fn pop_frame(&mut self) -> Option<Result<(FrameHeader, Meta, Buf)>> {
        self.inbox.pop_frame()
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        self.inbox.release_deferred();
        self.close_ep(true, Duration::from_secs(1));
        // A forced close fails what was in flight, but the requests only complete (and go
        // back to UCX's pool) through progress: give them a moment before the worker goes.
        let deadline = Instant::now() + Duration::from_millis(100);
        while (self.sends_in_flight > 0 || !self.inflight.is_empty()) && Instant::now() < deadline {
            self.progress();
            self.reap();
        }
        let _one_at_a_time = lifecycle();
        // SAFETY: created in `Core::new`, destroyed once. The inbox and the buffers of
        // receives still in flight drop after this, once UCX can no longer write to them.
        unsafe { lib().ucp_worker_destroy(self.worker) };
    }
}

unsafe extern "C" fn on_send_done(request: *mut c_void, status: ucs_status_t, user_data: *mut c_void) {
    // SAFETY: `user_data` is the request's completion slot, which its owner keeps until this
    // has run; our caller holds the Core lock.
    unsafe { complete(request, status, user_data) }
}

unsafe extern "C" fn on_ep_error(arg: *mut c_void, _ep: ucp_ep_h, status: ucs_status_t) {
    // SAFETY: `arg` is the connection's inbox, and our caller holds the Core lock.
    let inbox = unsafe { &mut *(arg as *mut Inbox) };
    // Our endpoint failing does not stop the peer's frames already on their way to us.
    inbox.peer_going(format!("the UCX endpoint failed: {}", status_string(status)));
}
