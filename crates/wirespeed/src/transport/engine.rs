//! The engine every backend shares: a [`Session`] behind a lock, driven by whichever waiting
//! thread gets there first (leader/follower), so one reader needs no hand-off between threads.
//! [`Connection`](super::Connection) and [`Stream`](super::Stream) are its API.

use std::io::{self, IoSlice};

use bytes::Bytes;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use super::NativeRma;
use super::{Config, Fill, FrameRx, FrameTx};
use crate::error::{Error, Result};
use crate::mem::{Recycler, RegionMem};
use crate::proto::frame::Touched;
use crate::proto::frame::{FrameHeader, HEADER_LEN, Kind};
use crate::proto::handshake::{Peer, error_frame};
use crate::proto::session::{Role, Session};
use crate::sync::Unpoison;

pub(crate) struct Inner {
    pub(super) state: Mutex<Shared>,
    pub(super) rx: Mutex<Box<dyn FrameRx>>,
    pub(super) tx: Mutex<Box<dyn FrameTx>>,
    /// One-sided transfers done by the fabric itself; otherwise they travel as frames.
    pub(super) native_rma: Option<Box<dyn NativeRma>>,
    pub(super) timeout: Duration,
    pub(super) max_chunk: u64,
    pub(super) zero_copy_limit: u64,
    /// The last body too big to lend, gathered on the heap, once its reader dropped it: the
    /// next such body reuses its pages instead of faulting in fresh ones, which costs more
    /// than the copy itself. Freed after ten idle seconds.
    pub(super) gathered: Recycler,
    /// The backend lets senders fill frames in place ([`FrameTx::fills_in_place`]).
    pub(super) fills_in_place: bool,
    pub(super) name: String,
    pub(super) peer: Peer,
}

pub(super) struct Shared {
    pub(super) session: Session,
    /// A thread is inside `rx.read_frame`.
    pub(super) driving: bool,
    /// Parked threads and what each waits for, so a frame wakes only those it concerns.
    pub(super) waiters: Vec<(Waiting, Thread)>,
    /// Live `Stream` handles.
    pub(super) handles: usize,
    /// Frames read so far; tells an accepting thread whether anyone else is reading.
    pub(super) drives: u64,
    /// Dropped regions a fabric exposed. Some fabrics (cma) cannot revoke a peer's access,
    /// so their memory stays ours, unused, until the connection goes.
    pub(super) retired: Vec<Arc<RegionMem>>,
}

/// What a waiting thread waits for. A thread waiting to accept reads the connection only
/// when no stream could have a reader of its own, or nobody read for a whole slice: it must
/// never sit between a stream and its reader, or every frame would cost a thread wake-up.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Waiting {
    OnStream(u32),
    /// The replies to one of our gets.
    OnGet(u32),
    ForAccept,
    /// [`Connection::next_ready`]: any stream, or a stream to accept.
    ForAny,
}

/// How long an accepting thread lets other readers be before it reads itself.
const ACCEPT_SLICE: Duration = Duration::from_millis(1);

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    pub(super) fn stream_waiters(&self) -> usize {
        self.waiters.iter().filter(|(w, _)| *w != Waiting::ForAccept).count()
    }

    /// Wakes the parked threads a frame concerns.
    pub(super) fn wake(&self, touched: Touched) {
        for (w, t) in &self.waiters {
            let concerned = match touched {
                Touched::Nobody => false,
                Touched::Stream(id) => *w == Waiting::OnStream(id) || *w == Waiting::ForAny,
                Touched::Accept => *w == Waiting::ForAccept || *w == Waiting::ForAny,
                Touched::Get(id) => *w == Waiting::OnGet(id),
                Touched::All => true,
            };
            if concerned {
                t.unpark();
            }
        }
    }

    /// Someone stops reading: wake one stream waiter to read next. Accepting threads are not
    /// woken for this; they look for themselves every slice.
    pub(super) fn hand_on_reading(&self) {
        if let Some((_, t)) = self.waiters.iter().find(|(w, _)| *w != Waiting::ForAccept) {
            t.unpark();
        }
    }
}

impl Inner {
    pub(super) fn new(
        role: Role,
        peer: Peer,
        rx: Box<dyn FrameRx>,
        tx: Box<dyn FrameTx>,
        native_rma: Option<Box<dyn NativeRma>>,
        config: &Config,
        name: String,
    ) -> Self {
        let session = Session::new(role, super::handshake::our_params(config, peer.params.fabric), peer.params);
        let max_chunk = config.max_chunk.min(tx.max_payload()) as u64;
        let zero_copy_limit = rx.zero_copy_limit();
        let fills_in_place = tx.fills_in_place();
        Inner {
            state: Mutex::new(Shared {
                session,
                driving: false,
                waiters: Vec::new(),
                handles: 0,
                drives: 0,
                retired: Vec::new(),
            }),
            rx: Mutex::new(rx),
            tx: Mutex::new(tx),
            native_rma,
            timeout: config.timeout,
            max_chunk,
            zero_copy_limit,
            gathered: Recycler::cooling(1),
            fills_in_place,
            name,
            peer,
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Shared> {
        self.state.lock().unpoison()
    }

    pub(super) fn tx(&self) -> MutexGuard<'_, Box<dyn FrameTx>> {
        self.tx.lock().unpoison()
    }

    pub(super) fn close(&self) {
        let mut g = self.lock();
        if g.session.terminal_error().is_some() {
            return;
        }
        g.session.close_locally();
        drop(g);
        let frame = FrameHeader::new(Kind::Close, 0).encode();
        let mut tx = self.tx();
        let _ = tx.write_frame(&frame, &[], Duration::from_secs(1));
        tx.shutdown(true);
        drop(tx);
        self.wake_all();
    }

    pub(super) fn wake_all(&self) {
        self.lock().wake(Touched::All);
    }

    /// Waits until `ready` yields, reading frames meanwhile if no other thread is.
    pub(super) fn wait_for<R>(
        &self,
        timeout: Duration,
        who: Waiting,
        mut ready: impl FnMut(&mut Session) -> Option<Result<R>>,
    ) -> Result<R> {
        // The clock is read only once we actually have to wait.
        let mut deadline = None;
        let mut idle_slices = 0;
        let mut g = self.lock();
        loop {
            if let Some(r) = ready(&mut g.session) {
                if !g.driving {
                    g.hand_on_reading();
                }
                let flush = g.session.has_transmit();
                drop(g);
                if flush {
                    self.flush_control();
                }
                return r;
            }
            if let Some(e) = g.session.terminal_error() {
                return Err(e);
            }
            if g.session.has_transmit() {
                // Credit for what `ready` took so far: a wait for a whole body larger than the
                // stream's window would otherwise hold back what lets the rest come.
                drop(g);
                self.flush_control();
                g = self.lock();
                continue;
            }
            let now = Instant::now();
            let deadline = *deadline.get_or_insert(now + timeout);
            if now >= deadline {
                if !g.driving {
                    g.hand_on_reading();
                }
                return Err(Error::Timeout(timeout));
            }
            let may_drive = match who {
                Waiting::OnStream(_) | Waiting::OnGet(_) | Waiting::ForAny => true,
                Waiting::ForAccept => g.stream_waiters() == 0 && (g.handles == 0 || idle_slices > 0),
            };
            if !g.driving && may_drive {
                g.driving = true;
                drop(g);
                let res = self.drive_once(deadline);
                g = self.lock();
                g.driving = false;
                g.drives += 1;
                let touched = match res {
                    Ok(t) => t,
                    Err(e) => {
                        drop(g);
                        self.fail(e);
                        g = self.lock();
                        Touched::All
                    }
                };
                if g.session.rma.has_jobs() {
                    drop(g);
                    serve_gets(self);
                    g = self.lock();
                }
                g.wake(touched);
            } else {
                let slice = if who == Waiting::ForAccept { ACCEPT_SLICE } else { deadline - now };
                let drives = g.drives;
                let me = thread::current();
                g.waiters.push((who, me.clone()));
                drop(g);
                thread::park_timeout(slice.min(deadline - now));
                g = self.lock();
                if let Some(i) = g.waiters.iter().position(|(_, t)| t.id() == me.id()) {
                    g.waiters.swap_remove(i);
                }
                idle_slices = if g.drives == drives && !g.driving { idle_slices + 1 } else { 0 };
            }
        }
    }

    /// Reads one frame (or times out) and says whom it concerns.
    pub(super) fn drive_once(&self, deadline: Instant) -> Result<Touched> {
        let mut rx = self.rx.lock().unpoison();
        let mut touched = Touched::Nobody;
        rx.read_frame(deadline, &mut |h, meta, payload| {
            touched = self.lock().session.on_frame(h, meta, payload)?;
            Ok(())
        })?;
        Ok(touched)
    }

    /// Fails the connection: every stream sees `e`, and the peer gets an Error frame if it
    /// broke the protocol.
    pub(super) fn fail(&self, e: Error) {
        let report = matches!(e, Error::Frame(_) | Error::PeerMisbehaved(_) | Error::Limit(_));
        let frame = report.then(|| error_frame(e.code(), &e.to_string()));
        self.lock().session.fail(e);
        let mut tx = self.tx();
        if let Some(frame) = frame {
            let _ = tx.write_frame(&frame, &[], Duration::from_secs(1));
        }
        tx.shutdown(false);
        drop(tx);
        self.wake_all();
    }

    /// Sends the control frames (credit, reset) the session has queued; they have no meta.
    pub(super) fn flush_control(&self) {
        let bytes = self.lock().session.poll_transmit();
        for frame in bytes.chunks_exact(HEADER_LEN) {
            if self.write(frame, &[]).is_err() {
                return; // `write` failed the connection
            }
        }
    }

    pub(super) fn write(&self, head: &[u8], payload: &[IoSlice<'_>]) -> Result<()> {
        let res = self.tx().write_frame(head, payload, self.timeout);
        self.check_write(res)
    }

    /// Writes a frame of `len` payload bytes that `fill` writes: in place where the backend
    /// can, else into `scratch` first, outside the send lock so other streams' fills overlap.
    /// A failed fill writes nothing and comes back inside; the connection stays up.
    pub(super) fn write_filled(
        &self,
        head: &[u8],
        len: usize,
        fill: &mut Fill<'_>,
        scratch: &mut Vec<u8>,
    ) -> Result<io::Result<()>> {
        if self.fills_in_place {
            let res = self.tx().write_frame_filled(head, len, fill, self.timeout);
            return self.check_write(res);
        }
        scratch.resize(len, 0);
        if let Err(e) = fill(&mut scratch[..len]) {
            return Ok(Err(e));
        }
        self.write(head, &[IoSlice::new(&scratch[..len])]).map(Ok)
    }

    pub(super) fn write_owned(&self, head: &[u8], payload: &[Bytes]) -> Result<()> {
        let res = self.tx().write_frame_owned(head, payload, self.timeout);
        self.check_write(res)
    }

    /// A failed write fails the connection.
    pub(super) fn check_write<T>(&self, res: Result<T>) -> Result<T> {
        res.map_err(|e| {
            let copy = e.clone();
            self.fail(e);
            copy
        })
    }
}

/// Answers the gets the peer asked for (emulated transfers), from the thread that read them.
fn serve_gets(inner: &Inner) {
    let chunk = inner.max_chunk as usize;
    let mut scratch = Vec::new();
    while let Some(job) = inner.lock().session.rma.next_job() {
        let mut done = 0;
        while done < job.len {
            let n = (job.len - done).min(chunk as u64) as usize;
            scratch.resize(n, 0);
            // Checked when the Get arrived; a copy, since the owner may be writing meanwhile.
            if job.mem.read(job.offset + done, &mut scratch).is_err() {
                return;
            }
            let head = crate::proto::rma::get_reply_head(job.request, n as u64);
            if inner.write(&head, &[IoSlice::new(&scratch)]).is_err() {
                return; // `write` failed the connection
            }
            done += n as u64;
        }
    }
}
