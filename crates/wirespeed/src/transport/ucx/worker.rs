//! One UCP worker per connection, and the waiting around it.
//!
//! Every frame travels as one Active Message: the frame header (and meta, when it fits) is the
//! AM header, the payload is the AM data. A callback turns each arrival into a queued frame;
//! rendezvous bodies are pulled with `ucp_am_recv_data_nbx` straight into pooled buffers.
//!
//! Only the thread holding the `Core` lock calls into UCX, so callbacks run under that lock.
//! A waiting thread spins on progress for a bounded time, then parks; a background progress
//! thread then sleeps on the worker's event fd and wakes it. The same thread keeps
//! rendezvous transfers moving while the application is busy elsewhere, and watches the
//! bootstrap socket, whose hang-up means the peer is gone.

use std::collections::VecDeque;
use std::ffi::c_void;
use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use smallvec::SmallVec;
use ucx_sys::*;

use super::context::{check, context, status_string};
use super::pool::{Pool, PoolBuf};
use crate::error::{Error, FrameError, Result};
use crate::mem::Buf;
use crate::proto::frame::{FrameHeader, HEADER_LEN, Limits};
use crate::transport::sys::ms_until;

/// Active Message id of wirespeed frames.
const AM_ID: u32 = 0x77;
/// How long a waiting thread drives progress itself after the last event before it parks.
const SPIN: Duration = Duration::from_micros(500);
/// Turns at progress between clock reads.
const CLOCK_EVERY: u32 = 32;
/// How long a waiting thread spins without an event before it starts yielding its CPU (once
/// every `CLOCK_EVERY` turns) until the next event or `SPIN` runs out. A spinning thread that
/// shares its CPU with the thread it waits for (the peer process, on a busy or small host)
/// would otherwise hold it for a whole time slice at a time, and the scheduler may take 100 ms
/// or more to move one of them: 128 KiB messages over cma ran at a fifth of their speed then.
/// Yielding at once, every few turns, costs the peer: a million yields a second at the sender
/// made the receiver's `process_vm_readv` slower, through the sender's task it looks up.
const YIELD_AFTER: Duration = Duration::from_micros(10);
/// How long, at least, the progress thread stays out of the way once it sees an application
/// thread driving; it takes over at a look that finds none drove since the last.
const HANDOVER: Duration = Duration::from_millis(2);
/// How long the progress thread sleeps, at most, while application threads keep driving: each
/// look that finds them still at it doubles its next sleep, from `HANDOVER` up to this. Waking
/// every `HANDOVER` would preempt a busy application thread 500 times a second.
const HANDOVER_MAX: Duration = Duration::from_millis(16);
/// After the bootstrap socket hangs up, how long frames already on their way may still arrive.
const HANGUP_GRACE: Duration = Duration::from_millis(250);
/// How long the progress thread pauses after a pass that moved nothing while UCX still had
/// work: doubling from `STALL_BACKOFF_MIN / 2` each pass in a row, up to `MIN << (STEPS-1)`.
const STALL_BACKOFF_MIN: Duration = Duration::from_micros(20);
const STALL_BACKOFF_STEPS: u32 = 6;
/// Bounds on how long the progress thread sleeps between looks at the worker.
const MIN_POLL: Duration = Duration::from_millis(1);
const MAX_POLL: Duration = Duration::from_secs(1);
/// Owned sends in flight at most, by count and by bytes, before a sender waits.
const MAX_INFLIGHT: usize = 64;
const MAX_INFLIGHT_BYTES: usize = 16 << 20;
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

/// A frame's meta; a message's (8 bytes of body length, then its header) mostly fits inline.
pub(super) type Meta = SmallVec<[u8; 32]>;

/// Where a receive reports its completion: boxed, so that it stays put while its arrival moves.
type Slot = Box<Option<ucs_status_t>>;

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
    inbox: Box<Inbox>,
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

/// Arrivals in order. Callbacks reach it through a raw pointer while their caller holds the
/// Core lock, so it is never touched concurrently.
struct Inbox {
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

/// State shared by the connection's halves and its progress thread.
pub(super) struct Shared {
    core: Mutex<Core>,
    wake: Condvar,
    /// Threads parked on `wake`.
    parked: AtomicUsize,
    /// Counts application threads' turns at driving progress (one per wait, and one per
    /// `CLOCK_EVERY` turns within it), so the progress thread can tell whether they still drive.
    app_turns: AtomicU64,
    /// Wakes the progress thread.
    kick: EventFd,
    kicked: AtomicBool,
    efd: RawFd,
    /// `RUN`, `LINGER` (the application is gone but the peer may still be reading what we
    /// sent: keep serving it until it hangs up) or `STOP`.
    state: AtomicU8,
    sock: TcpStream,
}

const RUN: u8 = 0;
const LINGER: u8 = 1;
const STOP: u8 = 2;
/// How long a closed connection keeps its worker for a peer still reading.
pub(super) const LINGER_LIMIT: Duration = Duration::from_secs(5);

impl Shared {
    /// Wraps a connected `core`; `sock` is the authenticated bootstrap socket.
    pub(super) fn new(core: Core, sock: TcpStream) -> Result<Arc<Self>> {
        let mut efd = -1;
        // SAFETY: live worker; out-pointer to a local. The fd belongs to the worker.
        check("getting the worker's event fd", unsafe { lib().ucp_worker_get_efd(core.worker, &mut efd) })?;
        let kick = EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(io::Error::from)?;
        sock.set_nonblocking(true)?;
        Ok(Arc::new(Shared {
            core: Mutex::new(core),
            wake: Condvar::new(),
            parked: AtomicUsize::new(0),
            app_turns: AtomicU64::new(0),
            kick,
            kicked: AtomicBool::new(false),
            efd,
            state: AtomicU8::new(RUN),
            sock,
        }))
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until `ready` yields something, `deadline` passes (`Ok(None)`), or, if
    /// `stop_on_failure`, the connection fails. Spins on progress first, then parks.
    pub(super) fn wait<T>(
        &self,
        deadline: Option<Instant>,
        stop_on_failure: bool,
        mut ready: impl FnMut(&mut Core) -> Option<T>,
    ) -> Result<Option<T>> {
        self.app_turns.fetch_add(1, Ordering::Relaxed);
        let mut core = self.lock();
        // The clock is read only every few turns: a wait that progress answers at once (most
        // of them, under load) never reads it, and reading it costs more than a turn.
        let mut spin_end = None;
        let mut turns = 0u32;
        loop {
            if let Some(t) = ready(&mut core) {
                return Ok(Some(t));
            }
            core.inbox.expire_peer_gone();
            if stop_on_failure && let Some(e) = &core.inbox.failure {
                return Err(e.duplicate());
            }
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(CLOCK_EVERY) {
                self.app_turns.fetch_add(1, Ordering::Relaxed);
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    return Ok(None);
                }
                let end = *spin_end.get_or_insert(now + SPIN);
                if end <= now {
                    self.parked.fetch_add(1, Ordering::SeqCst);
                    self.kick();
                    let slice = deadline.map_or(Duration::from_secs(1), |d| d.saturating_duration_since(now));
                    core = self.wake.wait_timeout(core, slice).unwrap_or_else(|p| p.into_inner()).0;
                    self.parked.fetch_sub(1, Ordering::SeqCst);
                    spin_end = None;
                    continue;
                }
                if end - now <= SPIN - YIELD_AFTER {
                    // Nothing happened for YIELD_AFTER: let a thread that shares our CPU run.
                    drop(core);
                    std::thread::yield_now();
                    core = self.lock();
                    continue;
                }
            }
            if core.progress() > 0 {
                spin_end = None; // spin on for a whole SPIN after the last event
                // What we just progressed may be what a parked thread waits for.
                if self.parked.load(Ordering::SeqCst) > 0 {
                    self.wake.notify_all();
                }
            } else {
                drop(core);
                std::hint::spin_loop();
                core = self.lock();
            }
        }
    }

    /// Fails the connection: parked threads wake and see `e`.
    pub(super) fn fail(&self, e: Error) {
        let mut core = self.lock();
        core.inbox.fail(e);
        self.wake.notify_all();
    }

    pub(super) fn sock(&self) -> &TcpStream {
        &self.sock
    }

    fn kick(&self) {
        if !self.kicked.swap(true, Ordering::SeqCst) {
            let _ = self.kick.write(1);
        }
    }

    /// Ends the progress thread: at once, or (`linger`) once the peer hangs up.
    pub(super) fn stop(&self, linger: bool) {
        self.state.store(if linger { LINGER } else { STOP }, Ordering::SeqCst);
        self.kick();
    }

    /// The progress thread: drives the worker whenever no application thread does, sleeping
    /// on the worker's event fd, the kick fd and the bootstrap socket.
    pub(super) fn run_progress(&self) {
        let mut sock_open = true;
        let mut linger_end = None;
        let mut last_event = Instant::now();
        let mut seen_turns = self.app_turns.load(Ordering::Relaxed);
        let mut stay_out = HANDOVER;
        let mut stalled = 0;
        loop {
            let now = Instant::now();
            match self.state.load(Ordering::SeqCst) {
                RUN => {}
                LINGER if sock_open && now < *linger_end.get_or_insert(now + LINGER_LIMIT) => {}
                _ => return,
            }
            // Application threads count their turns at driving: any since our last look means
            // one is at it, so stay out of its way unless kicked.
            let turns = self.app_turns.load(Ordering::Relaxed);
            let app_driving = turns != seen_turns;
            seen_turns = turns;
            if self.parked.load(Ordering::SeqCst) == 0 && app_driving {
                self.sleep(false, false, now + stay_out);
                stay_out = (stay_out * 2).clamp(HANDOVER, HANDOVER_MAX);
                continue;
            }
            stay_out = HANDOVER;
            let until = {
                let mut core = self.lock();
                let before = core.inbox.events;
                let mut events = 0;
                loop {
                    match core.progress() {
                        0 => break,
                        n => events += n,
                    }
                }
                core.inbox.expire_peer_gone();
                let armed = core.arm();
                // Send completions show only in the event count, arrivals in the inbox's.
                let active = events > 0 || core.inbox.events != before;
                if active && self.parked.load(Ordering::SeqCst) > 0 {
                    self.wake.notify_all();
                }
                if active {
                    stalled = 0;
                }
                match armed {
                    // Busy after a pass that moved something: more events are pending.
                    Ok(false) if active => continue,
                    // Busy with nothing moving: UCX waits on the peer (a full FIFO to a reader
                    // that has not caught up), and only progress can tell when it has. Turning
                    // at once took a third of a 2-core host from 16 busy readers.
                    Ok(false) => {
                        drop(core);
                        stalled = (stalled + 1).min(STALL_BACKOFF_STEPS);
                        std::thread::sleep(STALL_BACKOFF_MIN * (1 << stalled) / 2);
                        continue;
                    }
                    Ok(true) => {}
                    Err(e) => {
                        core.inbox.fail(e);
                        self.wake.notify_all();
                    }
                }
                if active || core.outstanding() {
                    last_event = now;
                }
                // UCX may hold work of its own (a queued acknowledgement, say) that no event
                // fd announces, so never sleep long after activity: poll at 1 ms, backing
                // off as the connection stays quiet.
                let quiet = now.saturating_duration_since(last_event);
                let mut wake_at = now + (quiet / 8).clamp(MIN_POLL, MAX_POLL);
                if let Some((t, _)) = &core.inbox.peer_gone {
                    wake_at = wake_at.min(*t + HANGUP_GRACE);
                }
                linger_end.map_or(wake_at, |l| l.min(wake_at))
            };
            if self.sleep(true, sock_open, until) {
                match (&self.sock).read(&mut [0u8; 64]) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                    Ok(0) | Err(_) => {
                        sock_open = false;
                        self.lock().inbox.peer_going("the peer hung up".into());
                    }
                    Ok(_) => self.fail(Error::Protocol("unexpected bytes on the bootstrap socket".into())),
                }
            }
        }
    }

    /// Sleeps on the kick fd, and optionally on the worker's event fd and the bootstrap
    /// socket, until one fires or `until`; true if the socket has something.
    fn sleep(&self, worker: bool, sock: bool, until: Instant) -> bool {
        // SAFETY: the worker's fd lives as long as the worker, which outlives this call.
        let efd = unsafe { BorrowedFd::borrow_raw(self.efd) };
        let mut fds = vec![PollFd::new(self.kick.as_fd(), PollFlags::POLLIN)];
        if worker {
            fds.push(PollFd::new(efd, PollFlags::POLLIN));
        }
        if sock {
            fds.push(PollFd::new(self.sock.as_fd(), PollFlags::POLLIN));
        }
        let _ = poll(&mut fds, PollTimeout::from(ms_until(until, 1000)));
        let sock_ready = sock && fds.last().and_then(|f| f.revents()).is_some_and(|r| !r.is_empty());
        if fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN)) {
            self.kicked.store(false, Ordering::SeqCst);
            let _ = self.kick.read();
        }
        sock_ready
    }
}

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
        // SAFETY: valid context and params; out-pointer to a local.
        check("creating a worker", unsafe { lib().ucp_worker_create(ctx, &params, &mut worker) })?;
        let inbox = Box::new(Inbox {
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
        });
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
        let fabric = self.describe_ep().is_some_and(|lanes| bulk_by_fabric(&lanes));
        self.inbox.recv_window = if fabric { RECV_WINDOW_FABRIC } else { RECV_WINDOW_COPY };
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

    fn progress(&mut self) -> u32 {
        // SAFETY: live worker, lock held.
        unsafe { lib().ucp_worker_progress(self.worker) }
    }

    /// Arms the event fd; false if events are pending (progress again first).
    fn arm(&mut self) -> Result<bool> {
        // SAFETY: live worker, lock held.
        match unsafe { lib().ucp_worker_arm(self.worker) } {
            UCS_OK => Ok(true),
            UCS_ERR_BUSY => Ok(false),
            s => check("arming the worker", s).map(|_| false),
        }
    }

    /// Transfers in flight: a send not yet complete, or a rendezvous body still arriving.
    fn outstanding(&self) -> bool {
        self.sends_in_flight > 0
            || !self.inflight.is_empty()
            || self.inbox.arrivals.iter().any(|a| a.status().is_none())
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

    pub(super) fn failure(&self) -> Option<Error> {
        self.inbox.failure.as_ref().map(Error::duplicate)
    }

    /// Takes the oldest arrival if it is complete: header, meta and payload.
    /// Bodies that waited for room are pulled here, when the reader comes back for more, not
    /// when it takes a frame: by then it has mostly dropped that frame's buffer, which the next
    /// body reuses while it is still in cache.
    pub(super) fn pop_frame(&mut self) -> Option<Result<(FrameHeader, Meta, Buf)>> {
        if self.inbox.deferred > 0
            && let Err(e) = self.inbox.pull_deferred()
        {
            self.inbox.fail(e);
        }
        match self.inbox.arrivals.front()?.status() {
            None => return None,
            Some(UCS_OK) => {}
            Some(s) => {
                let e = Error::ConnectionLost(format!("receiving a message body: {}", status_string(s)));
                self.inbox.fail(e.duplicate());
                return Some(Err(e));
            }
        }
        let mut a = self.inbox.arrivals.pop_front()?;
        if let Some(slot) = a.rndv.take() {
            self.inbox.spare_slots.push(slot); // complete: UCX no longer writes it
        }
        self.inbox.held -= a.held_bytes();
        self.inbox.arrivals_held -= usize::from(a.held_bytes() > 0);
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
        if let Some(e) = self.failure() {
            return Err(e);
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

impl Drop for Core {
    fn drop(&mut self) {
        self.inbox.release_deferred();
        self.close_ep(true, Duration::from_secs(1));
        // SAFETY: created in `Core::new`, destroyed once. The inbox and the buffers of
        // receives still in flight drop after this, once UCX can no longer write to them.
        unsafe { lib().ucp_worker_destroy(self.worker) };
    }
}

impl Inbox {
    fn fail(&mut self, e: Error) {
        self.events += 1;
        if self.failure.is_none() {
            self.failure = Some(e);
        }
        self.release_deferred();
    }

    fn peer_going(&mut self, why: String) {
        self.events += 1;
        self.peer_gone.get_or_insert((Instant::now(), why));
    }

    fn expire_peer_gone(&mut self) {
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
    fn release_deferred(&mut self) {
        for a in self.arrivals.iter_mut() {
            if let Some((desc, _)) = a.deferred.take() {
                // SAFETY: a descriptor UCX kept for us and we never passed on; released once.
                unsafe { lib().ucp_am_data_release(self.worker, desc) };
            }
        }
        self.deferred = 0;
    }
}

/// Whether bulk data (rendezvous bodies) travels over a fabric rather than being copied by the
/// receiving CPU: some lane UCX describes as `rma_bw` (the lanes bodies use) is on a device other
/// than "memory", the name UCX gives the same-host single-copy transports (cma, knem, xpmem).
fn bulk_by_fabric(lanes: &str) -> bool {
    lanes.lines().any(|l| l.contains("lane[") && l.contains(" rma_bw") && !l.contains("/memory"))
}

/// What a non-blocking call returned: done already (false), a request to wait for (true), or
/// an error. The endpoint refusing a request means it cannot carry any more, its peer gone,
/// most often.
fn posted(req: ucs_status_ptr_t, what: &str) -> Result<bool> {
    if ucs_ptr_is_err(req) {
        return Err(Error::ConnectionLost(format!("{what}: {}", status_string(ucs_ptr_status(req)))));
    }
    Ok(!req.is_null())
}

unsafe extern "C" fn on_am(
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
    // SAFETY: as `on_send_done`; the arrival's slot lives until the worker is destroyed.
    unsafe { on_send_done(request, status, user_data) }
}

unsafe extern "C" fn on_send_done(request: *mut c_void, status: ucs_status_t, user_data: *mut c_void) {
    // SAFETY: `user_data` is the request's completion slot, which its owner keeps until this
    // has run; our caller holds the Core lock. The request is ours to free.
    unsafe {
        *(user_data as *mut Option<ucs_status_t>) = Some(status);
        lib().ucp_request_free(request);
    }
}

unsafe extern "C" fn on_ep_error(arg: *mut c_void, _ep: ucp_ep_h, status: ucs_status_t) {
    // SAFETY: `arg` is the connection's inbox, and our caller holds the Core lock.
    let inbox = unsafe { &mut *(arg as *mut Inbox) };
    // Our endpoint failing does not stop the peer's frames already on their way to us.
    inbox.peer_going(format!("the UCX endpoint failed: {}", status_string(status)));
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
