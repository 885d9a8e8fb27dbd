//! What the connection's lock protects: the endpoint, the operations posted on it, arrivals
//! in order, and sends waiting for the provider or for the peer.
//!
//! Frames up to `EAGER_MAX` bytes travel whole (`wire::Msg::Frame`), copied into the message.
//! Larger ones, where the provider has one-sided access, travel by rendezvous: the sender
//! registers the payload where it lies and sends its address and key; the receiver reads it
//! into a buffer of its own, which the application then gets without a further copy, and
//! answers Done. Without one-sided access, large frames travel in pieces.
//!
//! At most `SENDS_IN_FLIGHT` messages that need a completion are with the provider at once;
//! small frames sent meanwhile wait in the outbox, where each joins the one before it into a
//! Batch (up to a receive buffer), so frames that pile up behind a busy provider cost one
//! message, one completion and one receive between them. A lone frame goes at once.

use std::collections::VecDeque;

use ahash::AHashMap as HashMap;
use std::ffi::c_void;
use std::io::IoSlice;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ofi_sys::{FI_READ, FI_RECV, FI_REMOTE_READ, fi_context2, fi_cq_msg_entry};
use smallvec::SmallVec;

mod receive;
mod send;

use super::endpoint::{Completions, Endpoint, Registration};
use super::wire::{self, MAX_SEGMENTS, Msg, PREFIX_LEN, SEGMENT_LEN, Segment};
use crate::error::{Error, FrameError, Result, Violation};
use crate::fabric::Provider;
use crate::mem::Buf;
use crate::proto::frame::{FrameHeader, HEADER_LEN, Limits};
use crate::transport::pool::{Pool, PoolBuf};
use crate::transport::progress::{Driver, Meta};

/// Receive buffers kept posted, and their size: every message but a rendezvous body fits one.
const POSTED: usize = 32;
const RECV_BYTES: usize = 32 << 10;
/// Frames up to this many bytes (with the prefix) travel whole even where rendezvous could.
const EAGER_MAX: usize = 8 << 10;
/// Bytes queued or in flight on our side at most before a sender waits (one frame always may).
const MAX_INFLIGHT_BYTES: usize = 16 << 20;
/// Rendezvous bodies read ahead of the reader at most, by count and by bytes (see the UCX
/// inbox: a reused buffer is still in cache). Copies by our own CPU (shm) get the small window.
const RECV_AHEAD: usize = 8;
pub(super) const RECV_WINDOW_COPY: usize = 256 << 10;
pub(super) const RECV_WINDOW_FABRIC: usize = 16 << 20;
/// Receive buffers kept for reuse, per connection.
const POOL_KEEP: usize = 64 << 20;
/// Payloads start on this boundary in receive buffers (Arrow wants 64-byte alignment).
const PAYLOAD_ALIGN: usize = 64;
/// Messages held at most while an earlier one is still arriving.
const MAX_EARLY: usize = 1024;
/// Completions taken per read of the queue.
const CQ_BATCH: usize = 16;
/// Messages with the provider at once, not counting those it took whole (injected).
const SENDS_IN_FLIGHT: usize = 2;

/// An operation's context: what libfabric hands back on completion. Boxed, so it stays put;
/// providers that need FI_CONTEXT(2) space use the first field.
#[repr(C)]
struct OpCtx {
    space: fi_context2,
    id: u64,
}

/// Operation ids with this bit are posted receives, the rest their slot: they stay posted for
/// the connection's life, so their contexts live in `recv_ctx`, not in `ops`.
const RECV_ID: u64 = 1 << 63;

enum Op {
    /// A message being sent; its bytes go when it completes.
    Send { _msg: Vec<u8> },
    /// One read of a rendezvous body into arrival `arrival`.
    Read { arrival: u64 },
    /// An application's one-sided transfer; its outcome goes to `finished`.
    User,
}

/// A rendezvous send waiting for the peer's Done: the registrations it reads through, and
/// the bytes when we own them.
struct Pending {
    _registrations: Vec<Registration>,
    _owned: Vec<Bytes>,
    /// Bytes counted in flight (owned sends; a waiting caller holds its own).
    bytes: usize,
    /// A caller waits for the Done (`finished`); otherwise the Done ends the send.
    waited: bool,
    done: bool,
}

struct Arrival {
    id: u64,
    header: FrameHeader,
    meta: Meta,
    /// Meta bytes at the start of the buffer's data (read with the payload).
    data_meta: usize,
    pad: usize,
    buf: Option<PoolBuf>,
    /// Or the payload of a frame that came whole.
    copied: Buf,
    /// The registration of `buf` for reads into it, where the provider needs one.
    local: Option<Registration>,
    /// Reads posted and still to complete, segments posted so far, and the token to answer
    /// Done to once every segment has been read.
    reads_left: usize,
    posted: usize,
    token: u64,
    /// The segments, while some are still to be posted (the window or a busy provider).
    deferred: Option<Vec<Segment>>,
}

impl Arrival {
    fn held_bytes(&self) -> usize {
        if self.buf.is_none() && self.copied.is_empty() {
            0
        } else {
            self.pad + self.data_meta + self.header.payload_len() as usize
        }
    }
}

/// A large frame arriving in pieces (no one-sided access).
struct Assembly {
    buf: PoolBuf,
    pad: usize,
    filled: usize,
    total: usize,
    header: FrameHeader,
}

/// Fields drop in order: the endpoint first, after which the provider no longer touches our
/// buffers, registered memory or operation contexts.
pub(super) struct Core {
    pub(super) ep: Endpoint,
    limits: Limits,
    pool: Arc<Pool>,
    /// The posted receive buffers, one slab, registered once where the provider needs it.
    slab: Vec<u8>,
    slab_registration: Option<Registration>,
    /// The posted receives' contexts, by slot (a boxed slice: they never move).
    recv_ctx: Box<[OpCtx]>,
    /// Every other operation in flight, by id.
    ops: HashMap<u64, (Box<OpCtx>, Op)>,
    next_id: u64,
    /// Messages for the peer, in the order sent, that the provider has not taken yet.
    outbox: VecDeque<Vec<u8>>,
    /// Sends posted and not yet complete.
    sends_in_flight: usize,
    /// Where completions are read (kept, not zeroed on every look at the queue).
    cq_entries: [fi_cq_msg_entry; CQ_BATCH],
    /// Where a small message is built when it can be injected at once, so it needs no buffer
    /// of its own.
    scratch: Vec<u8>,
    /// Messages numbered so far, each way (wrapping).
    sent: u32,
    received: u32,
    /// Messages that arrived ahead of their turn, by number.
    early: HashMap<u32, Vec<u8>>,
    /// Bytes in the outbox, in sends not yet complete, and in owned rendezvous sends.
    inflight_bytes: usize,
    pending: HashMap<u64, Pending>,
    next_token: u64,
    arrivals: VecDeque<Arrival>,
    /// Arrivals with reads still to post, oldest first, by id.
    to_pull: VecDeque<u64>,
    assembly: Option<Assembly>,
    held: usize,
    arrivals_held: usize,
    recv_window: usize,
    /// Outcomes of the application's one-sided transfers, by operation id.
    finished: HashMap<u64, std::result::Result<(), String>>,
    /// Borrowed-buffer sends and one-sided transfers whose caller still waits.
    pub(super) waiting: usize,
    events: u64,
    failure: Option<Error>,
    peer_gone: Option<(Instant, String)>,
}

// SAFETY: the raw pointers inside (operation contexts' provider space, registrations) belong
// to a FI_THREAD_SAFE domain, and everything here is used with the connection's lock held.
unsafe impl Send for Core {}

impl Core {
    /// Takes over a connected endpoint and posts its receive buffers.
    pub(super) fn new(ep: Endpoint, limits: Limits, recv_window: usize) -> Result<Core> {
        let mut core = Core {
            ep,
            limits,
            pool: Pool::new(POOL_KEEP),
            slab: vec![0u8; POSTED * RECV_BYTES],
            slab_registration: None,
            recv_ctx: (0..POSTED as u64)
                .map(|slot| OpCtx { space: fi_context2::default(), id: RECV_ID | slot })
                .collect(),
            ops: HashMap::new(),
            next_id: 1,
            outbox: VecDeque::new(),
            sends_in_flight: 0,
            cq_entries: [fi_cq_msg_entry::default(); CQ_BATCH],
            scratch: Vec::with_capacity(EAGER_MAX),
            sent: 0,
            received: 0,
            early: HashMap::new(),
            inflight_bytes: 0,
            pending: HashMap::new(),
            next_token: 1,
            arrivals: VecDeque::new(),
            to_pull: VecDeque::new(),
            assembly: None,
            held: 0,
            arrivals_held: 0,
            recv_window,
            finished: HashMap::new(),
            waiting: 0,
            events: 0,
            failure: None,
            peer_gone: None,
        };
        if core.ep.abilities.mr_local {
            // SAFETY: the slab lives in `core`, and `Drop` closes the endpoint before it goes.
            let r = unsafe { core.ep.register(core.slab.as_ptr(), core.slab.len(), FI_RECV as u64)? };
            core.slab_registration = Some(r);
        }
        for slot in 0..POSTED {
            core.post_recv(slot)?;
        }
        Ok(core)
    }

    fn new_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn post_recv(&mut self, slot: usize) -> Result<()> {
        let desc = self.slab_registration.as_ref().map_or(std::ptr::null_mut(), |r| r.desc);
        let buf = &mut self.slab[slot * RECV_BYTES..(slot + 1) * RECV_BYTES];
        let ctx_ptr: *mut OpCtx = &mut self.recv_ctx[slot];
        // SAFETY: the slab and the boxed context live until the endpoint closes (`Drop`).
        // A receive is only ever refused as busy while the queue is full, which 32 receives
        // never make it.
        if !unsafe { self.ep.recv(buf, desc, ctx_ptr.cast())? } {
            return Err(Error::Fabric { op: "posting a receive", status: "the provider is busy".into() });
        }
        Ok(())
    }

    /// Whether a frame of `bytes` goes whole, or (false) by rendezvous or in pieces.
    pub(super) fn eager(bytes: usize) -> bool {
        PREFIX_LEN + bytes <= EAGER_MAX
    }

    /// Whether everything sent has left: the provider holds no message of ours.
    pub(super) fn drained(&self) -> bool {
        self.outbox.is_empty() && self.sends_in_flight == 0
    }

    /// Whether `bytes` more fit under the in-flight limit.
    pub(super) fn has_room(&self, bytes: usize) -> bool {
        self.inflight_bytes == 0 || self.inflight_bytes + bytes <= MAX_INFLIGHT_BYTES
    }

    pub(super) fn usable(&self) -> Result<()> {
        match &self.failure {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    /// Starts an application's one-sided transfer; its outcome shows in `take_finished(id)`.
    ///
    /// # Safety
    /// `buf` stays valid until the outcome is taken (or the endpoint closes).
    pub(super) unsafe fn start_user_rma(
        &mut self,
        write: bool,
        buf: *mut u8,
        len: usize,
        desc: *mut c_void,
        remote: (u64, u64),
    ) -> Result<Option<u64>> {
        self.usable()?;
        let id = self.new_id();
        let mut ctx = Box::new(OpCtx { space: fi_context2::default(), id });
        let ctx_ptr: *mut OpCtx = &mut *ctx;
        // SAFETY: as the caller promises; the context is kept in `ops` until completion.
        if !unsafe { self.ep.rma(write, buf, len, desc, remote, ctx_ptr.cast())? } {
            return Ok(None); // busy: progress, then try again
        }
        self.ops.insert(id, (ctx, Op::User));
        Ok(Some(id))
    }

    pub(super) fn take_finished(&mut self, id: u64) -> Option<std::result::Result<(), String>> {
        self.finished.remove(&id)
    }

    /// Handles one completion.
    fn complete(&mut self, ctx: *mut c_void, len: usize) -> Result<()> {
        // SAFETY: every context we post is a live OpCtx in `ops` or `recv_ctx`.
        let id = unsafe { (*ctx.cast::<OpCtx>()).id };
        if id & RECV_ID != 0 {
            // Handled where it landed: the slab's Vec moves out for the call, its bytes (where
            // the provider writes the other posted receives) stay put.
            let slot = (id & !RECV_ID) as usize;
            let slab = std::mem::take(&mut self.slab);
            let outcome = self.arrive_in_order(&slab[slot * RECV_BYTES..][..len.min(RECV_BYTES)]);
            self.slab = slab;
            self.post_recv(slot)?;
            return outcome;
        }
        let Some((_, op)) = self.ops.remove(&id) else { return Ok(()) };
        match op {
            Op::Send { _msg } => {
                self.inflight_bytes -= _msg.len();
                self.sends_in_flight -= 1;
            }
            Op::Read { arrival } => self.read_done(arrival),
            Op::User => {
                self.finished.insert(id, Ok(()));
            }
        }
        Ok(())
    }

    fn complete_failed(&mut self, ctx: *mut c_void, why: String) {
        // SAFETY: every context we post is a live OpCtx in `ops` or `recv_ctx`.
        let op = (!ctx.is_null()).then(|| unsafe { (*ctx.cast::<OpCtx>()).id }).and_then(|id| self.ops.remove(&id));
        match op {
            Some((c, Op::User)) => {
                self.finished.insert(c.id, Err(why));
            }
            Some((_, Op::Send { .. })) => {
                self.sends_in_flight -= 1;
                self.fail(Error::ConnectionLost(why));
            }
            _ => self.fail(Error::ConnectionLost(why)),
        }
    }
}

impl Driver for Core {
    fn progress(&mut self) -> u32 {
        self.flush();
        let mut events = 0;
        loop {
            match self.ep.read_cq(&mut self.cq_entries) {
                Completions::Empty => break,
                Completions::Some(n) => {
                    for i in 0..n {
                        let e = self.cq_entries[i];
                        if let Err(err) = self.complete(e.op_context, e.len) {
                            self.fail(err);
                        }
                    }
                    events += n as u32;
                }
                Completions::Failed(ctx, why) => {
                    self.complete_failed(ctx, why);
                    events += 1;
                }
            }
        }
        if events > 0 {
            self.events += 1;
            self.pull_deferred();
            self.flush();
        }
        events
    }

    fn arm(&mut self) -> Result<bool> {
        if !self.outbox.is_empty() {
            return Ok(false);
        }
        self.ep.try_wait()
    }

    fn wait_fds(&mut self, fds: &mut Vec<libc::pollfd>) -> Result<()> {
        self.ep.wait_fds(fds)
    }

    fn progress_is_a_syscall(&self) -> bool {
        // tcp's progress polls its sockets (an `epoll_wait`) on every look at the queue.
        self.ep.provider == Provider::Tcp
    }

    fn outstanding(&self) -> bool {
        self.waiting > 0 || !self.outbox.is_empty() || !self.pending.is_empty() || !self.ops.is_empty()
    }

    fn events(&self) -> u64 {
        self.events
    }

    fn failure(&self) -> Option<&Error> {
        self.failure.as_ref()
    }

    fn fail(&mut self, e: Error) {
        self.events += 1;
        if self.failure.is_none() {
            self.failure = Some(e);
        }
    }

    fn peer_going(&mut self, why: String) {
        self.events += 1;
        self.peer_gone.get_or_insert((Instant::now(), why));
    }

    fn expire_peer_gone(&mut self) {
        if let Some((t, why)) = &self.peer_gone
            && self.failure.is_none()
            && t.elapsed() >= super::HANGUP_GRACE
        {
            let e = Error::ConnectionLost(why.clone());
            self.fail(e);
        }
    }

    fn give_up_at(&self) -> Option<Instant> {
        self.peer_gone.as_ref().map(|(t, _)| *t + super::HANGUP_GRACE)
    }

    fn pop_frame(&mut self) -> Option<Result<(FrameHeader, Meta, Buf)>> {
        self.take_arrival()
    }
}
