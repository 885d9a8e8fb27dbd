//! The engine every backend shares: a [`Session`] behind a lock, driven by whichever waiting
//! thread gets there first (leader/follower), so one reader needs no hand-off between threads.

use std::io::{self, IoSlice};

use bytes::Bytes;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use super::NativeRma;
use super::{Config, Fill, FrameRx, FrameTx};
use crate::error::{Error, ErrorCode, Result};
use crate::mem::{Body, Buf, Chunks, RegionMem};
use crate::proto::frame::Touched;
use crate::proto::frame::{FrameHeader, HEADER_LEN, Kind};
use crate::proto::handshake::{Peer, error_frame};
use crate::proto::session::{Ready, RecvEvent, Role, Session};

/// An authenticated connection carrying many concurrent streams. Cheap to clone; the
/// connection closes when the last clone and stream are gone.
#[derive(Clone)]
pub struct Connection {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    state: Mutex<Shared>,
    rx: Mutex<Box<dyn FrameRx>>,
    tx: Mutex<Box<dyn FrameTx>>,
    /// One-sided transfers done by the fabric itself; otherwise they travel as frames.
    pub(super) native_rma: Option<Box<dyn NativeRma>>,
    pub(super) timeout: Duration,
    pub(super) max_chunk: u64,
    zero_copy_limit: u64,
    /// The backend lets senders fill frames in place ([`FrameTx::fills_in_place`]).
    fills_in_place: bool,
    name: String,
    peer: Peer,
}

pub(super) struct Shared {
    pub(super) session: Session,
    /// A thread is inside `rx.read_frame`.
    driving: bool,
    /// Parked threads and what each waits for, so a frame wakes only those it concerns.
    waiters: Vec<(Waiting, Thread)>,
    /// Live `Stream` handles.
    handles: usize,
    /// Frames read so far; tells an accepting thread whether anyone else is reading.
    drives: u64,
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

/// A message received whole.
#[derive(Debug)]
pub struct Message {
    pub header: Vec<u8>,
    pub body: Body,
}

/// The start of a message whose body is read chunk by chunk ([`Stream::read_chunk`]).
#[derive(Debug)]
pub struct Incoming {
    pub header: Vec<u8>,
    pub body_len: u64,
}

impl Connection {
    pub(crate) fn new(
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
        Connection {
            inner: Arc::new(Inner {
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
                fills_in_place,
                name,
                peer,
            }),
        }
    }

    /// Whether messages are written straight into transport memory (a shared ring) rather
    /// than copied from the sender's buffers: see [`Stream::send_filled`].
    pub fn fills_in_place(&self) -> bool {
        self.inner.fills_in_place
    }

    /// Who is on the other end, for messages.
    pub fn peer(&self) -> &str {
        &self.inner.name
    }

    /// A 32-byte key for `label` that both ends of this connection derive alike from its
    /// handshake, and no other connection shares: keys for layers above (encryption of a
    /// transfer, say) that never travel.
    pub fn derive_key(&self, label: &[u8]) -> [u8; 32] {
        self.inner.peer.derive_key(label)
    }

    /// Opens a new stream; the peer sees it with its first message.
    pub fn open_stream(&self) -> Result<Stream> {
        let id = self.inner.lock().session.open_stream()?;
        Ok(Stream::new(self.inner.clone(), id))
    }

    /// Waits for a stream the peer opened.
    pub fn accept_stream(&self) -> Result<Stream> {
        self.accept_stream_timeout(self.inner.timeout)
    }

    pub fn accept_stream_timeout(&self, timeout: Duration) -> Result<Stream> {
        let id = self.inner.wait_for(timeout, Waiting::ForAccept, |s| s.poll_accept())?;
        Ok(Stream::new(self.inner.clone(), id))
    }

    /// Waits until a receive would not wait: one thread can serve many streams this way
    /// instead of a thread per stream. [`Ready::Stream`] names a stream with a message, body
    /// bytes, its end or a reset waiting; receive from it, and drop it once it is finished.
    /// [`Ready::Accept`] means [`Connection::accept_stream`] returns at once. Streams take
    /// turns, so a busy one does not starve the rest.
    pub fn next_ready(&self) -> Result<Ready> {
        self.next_ready_timeout(self.inner.timeout)
    }

    pub fn next_ready_timeout(&self, timeout: Duration) -> Result<Ready> {
        self.inner.wait_for(timeout, Waiting::ForAny, |s| s.poll_ready())
    }

    /// Closes gracefully: the peer reads what was sent, then sees the connection closed.
    pub fn close(&self) {
        self.inner.close();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    fn stream_waiters(&self) -> usize {
        self.waiters.iter().filter(|(w, _)| *w != Waiting::ForAccept).count()
    }

    /// Wakes the parked threads a frame concerns.
    fn wake(&self, touched: Touched) {
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
    fn hand_on_reading(&self) {
        if let Some((_, t)) = self.waiters.iter().find(|(w, _)| *w != Waiting::ForAccept) {
            t.unpark();
        }
    }
}

impl Inner {
    pub(super) fn lock(&self) -> MutexGuard<'_, Shared> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn tx(&self) -> MutexGuard<'_, Box<dyn FrameTx>> {
        self.tx.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn close(&self) {
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

    fn wake_all(&self) {
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
    fn drive_once(&self, deadline: Instant) -> Result<Touched> {
        let mut rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        let mut touched = Touched::Nobody;
        rx.read_frame(deadline, &mut |h, meta, payload| {
            touched = self.lock().session.on_frame(h, meta, payload)?;
            Ok(())
        })?;
        Ok(touched)
    }

    /// Fails the connection: every stream sees `e`, and the peer gets an Error frame if it
    /// broke the protocol.
    fn fail(&self, e: Error) {
        let report = matches!(e, Error::Frame(_) | Error::Protocol(_) | Error::Limit(_));
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
    fn flush_control(&self) {
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
    fn write_filled(
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

    fn write_owned(&self, head: &[u8], payload: &[Bytes]) -> Result<()> {
        let res = self.tx().write_frame_owned(head, payload, self.timeout);
        self.check_write(res)
    }

    /// A failed write fails the connection.
    fn check_write<T>(&self, res: Result<T>) -> Result<T> {
        res.map_err(|e| {
            let copy = e.duplicate();
            self.fail(e);
            copy
        })
    }
}

/// One ordered sequence of messages in each direction. Dropping a stream that is still open
/// resets it (the peer sees it cancelled).
pub struct Stream {
    inner: Arc<Inner>,
    id: u32,
    /// Serialises senders so a message's frames stay together; holds their scratch.
    send: Mutex<Scratch>,
    /// Body bytes of the message being read that the application has not taken yet.
    body_left: Mutex<u64>,
    timeout: Duration,
}

impl Stream {
    fn new(inner: Arc<Inner>, id: u32) -> Self {
        inner.lock().handles += 1;
        let timeout = inner.timeout;
        Stream { inner, id, send: Mutex::new(Scratch::default()), body_left: Mutex::new(0), timeout }
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// Sets how long each wait on this stream may last.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Sends one message: `header` plus a body made of `body` buffers, written straight from
    /// them (no concatenation). Blocks while the peer has granted no credit, and until the
    /// transport is done with the buffers.
    pub fn send(&self, header: &[u8], body: &[&[u8]]) -> Result<()> {
        let total = body.iter().map(|b| b.len() as u64).sum();
        let mut cursor = BodyCursor { bufs: body, index: 0, offset: 0 };
        let mut slices = Vec::new();
        self.send_frames(header, total, |head, take, _| {
            cursor.take(take, &mut slices);
            let r = self.inner.write(head, &slices);
            slices.clear();
            r
        })
    }

    /// Like [`Stream::send`], but the transport may hold on to the body (it is reference
    /// counted) and return before it is on the wire, so several frames can be in flight at
    /// once. Still zero-copy: wrap existing memory with [`Bytes::from_owner`].
    pub fn send_bytes(&self, header: &[u8], body: &[Bytes]) -> Result<()> {
        let total = body.iter().map(|b| b.len() as u64).sum();
        let (mut index, mut offset) = (0, 0);
        let mut parts = Vec::new();
        self.send_frames(header, total, |head, mut take, _| {
            while take > 0 {
                let b = &body[index];
                let k = (b.len() - offset).min(take);
                if k > 0 {
                    parts.push(b.slice(offset..offset + k));
                }
                (offset, take) = (offset + k, take - k);
                if offset == b.len() {
                    (index, offset) = (index + 1, 0);
                }
            }
            let r = self.inner.write_owned(head, &parts);
            parts.clear();
            r
        })
    }

    /// Sends one message of `len` body bytes that `fill` writes, piece after piece in order,
    /// straight into transport memory where the transport has it (shared memory), so a body
    /// read from a file is copied once instead of twice. The outer error is the connection's;
    /// the inner one is `fill`'s, after which the stream is reset (the peer sees the message
    /// cut short).
    pub fn send_filled(
        &self,
        header: &[u8],
        len: u64,
        mut fill: impl FnMut(&mut [u8]) -> io::Result<()>,
    ) -> Result<io::Result<()>> {
        let mut failed = None;
        let sent = self.send_frames(header, len, |head, take, scratch| {
            let filled = self.inner.write_filled(head, take, &mut fill, scratch)?;
            filled.map_err(|e| {
                failed = Some(e);
                Error::Reset { stream: self.id, code: ErrorCode::CANCELLED }
            })
        });
        if let Some(e) = failed {
            self.reset(ErrorCode::CANCELLED);
            return Ok(Err(e));
        }
        sent.map(Ok)
    }

    /// Splits a message of `total` body bytes into frames as credit allows; `write` sends one
    /// frame given its encoded head, how many body bytes follow the previous ones, and a
    /// scratch buffer.
    fn send_frames(
        &self,
        header: &[u8],
        total: u64,
        mut write: impl FnMut(&[u8], usize, &mut Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        let mut scratch = self.send.lock().unwrap_or_else(|p| p.into_inner());
        let Scratch { meta, body } = &mut *scratch;
        meta.clear();
        meta.extend_from_slice(&[0; HEADER_LEN]);
        meta.extend_from_slice(&total.to_le_bytes());
        meta.extend_from_slice(header);
        let mut remaining = total;
        let mut first = true;
        loop {
            let meta_len = if first { (meta.len() - HEADER_LEN) as u64 } else { 0 };
            let take = self.inner.wait_for(self.timeout, Waiting::OnStream(self.id), |s| {
                s.take_send_credit(self.id, meta_len, remaining, self.inner.max_chunk).transpose()
            })?;
            let mut h = FrameHeader::new(if first { Kind::Message } else { Kind::Data }, self.id);
            h.meta_len = meta_len as u32;
            h.len = take;
            meta[..HEADER_LEN].copy_from_slice(&h.encode());
            let head = if first { &meta[..] } else { &meta[..HEADER_LEN] };
            write(head, take as usize, body)?;
            remaining -= take;
            first = false;
            if remaining == 0 {
                return Ok(());
            }
        }
    }

    /// Tells the peer no more messages follow on this stream. Finishing again does nothing.
    pub fn finish(&self) -> Result<()> {
        let _serialised = self.send.lock().unwrap_or_else(|p| p.into_inner());
        if !self.inner.lock().session.finish(self.id)? {
            return Ok(());
        }
        self.inner.write(&FrameHeader::new(Kind::Finish, self.id).encode(), &[])
    }

    /// Aborts the stream in both directions with `code`.
    pub fn reset(&self, code: ErrorCode) {
        self.inner.lock().session.reset(self.id, code);
        self.inner.flush_control();
    }

    /// Receives the next whole message, or `None` once the peer finished the stream.
    /// Bodies up to the transport's zero-copy limit stay views of transport memory.
    pub fn recv(&self) -> Result<Option<Message>> {
        let mut left = self.body_left.lock().unwrap_or_else(|p| p.into_inner());
        self.skip_rest(&mut left)?;
        // One wait takes the message and as much of its body as has arrived: a small message
        // costs one lock, not one per event.
        let limit = self.inner.zero_copy_limit;
        let mut start: Option<(Vec<u8>, u64)> = None;
        let mut chunks = Chunks::new();
        let mut got = 0u64;
        let waited = self.inner.wait_for(self.timeout, Waiting::OnStream(self.id), |s| {
            loop {
                if let Some((_, len)) = &start
                    && (got == *len || *len > limit)
                {
                    return Some(Ok(()));
                }
                match s.poll_recv(self.id)? {
                    Err(e) => return Some(Err(e)),
                    Ok(RecvEvent::Message { header, body_len }) if start.is_none() => start = Some((header, body_len)),
                    Ok(RecvEvent::Chunk(b)) if start.is_some() => {
                        got += b.len() as u64;
                        chunks.push(b);
                    }
                    Ok(RecvEvent::Finished) if start.is_none() => return Some(Ok(())),
                    Ok(_) => return Some(Err(Error::Protocol("message events out of order".into()))),
                }
            }
        });
        if let Err(e) = waited {
            // A message cut short by a timeout is dropped; the next recv skips its rest.
            if let Some((_, len)) = start {
                *left = len - got;
            }
            return Err(e);
        }
        let Some((header, body_len)) = start else { return Ok(None) };
        if got < body_len {
            // Too big to hold as lent views: gather on the heap, giving transport memory back
            // as we go.
            let mut v = Vec::new();
            v.try_reserve_exact(body_len as usize)
                .map_err(|_| Error::Limit(format!("cannot hold a {body_len}-byte body in memory")))?;
            *left = body_len;
            for c in chunks.drain(..) {
                *left -= c.len() as u64;
                v.extend_from_slice(&c);
            }
            while *left > 0 {
                let c = self.next_chunk_locked()?;
                *left -= c.len() as u64;
                v.extend_from_slice(&c);
            }
            chunks.push(Buf::from(v));
        }
        Ok(Some(Message { header, body: Body::from_chunks(chunks) }))
    }

    fn skip_rest(&self, left: &mut u64) -> Result<()> {
        while *left > 0 {
            *left -= self.next_chunk_locked()?.len() as u64;
        }
        Ok(())
    }

    /// Receives the next message's header; read its body with [`Stream::read_chunk`].
    pub fn recv_start(&self) -> Result<Option<Incoming>> {
        let mut left = self.body_left.lock().unwrap_or_else(|p| p.into_inner());
        self.skip_rest(&mut left)?;
        match self.next_event()? {
            RecvEvent::Message { header, body_len } => {
                *left = body_len;
                Ok(Some(Incoming { header, body_len }))
            }
            RecvEvent::Finished => Ok(None),
            RecvEvent::Chunk(_) => Err(Error::Protocol("body bytes without a message".into())),
        }
    }

    /// The next piece of the current message's body, or `None` when it is complete.
    pub fn read_chunk(&self) -> Result<Option<Buf>> {
        let mut left = self.body_left.lock().unwrap_or_else(|p| p.into_inner());
        if *left == 0 {
            return Ok(None);
        }
        let chunk = self.next_chunk_locked()?;
        *left -= chunk.len() as u64;
        Ok(Some(chunk))
    }

    fn next_chunk_locked(&self) -> Result<Buf> {
        match self.next_event()? {
            RecvEvent::Chunk(b) => Ok(b),
            _ => Err(Error::Protocol("message body ended early".into())),
        }
    }

    fn next_event(&self) -> Result<RecvEvent> {
        self.inner.wait_for(self.timeout, Waiting::OnStream(self.id), |s| s.poll_recv(self.id))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let mut g = self.inner.lock();
        g.handles -= 1;
        g.session.release(self.id);
        drop(g);
        self.inner.flush_control();
    }
}

/// What a stream's sender reuses from one message to the next.
#[derive(Default)]
struct Scratch {
    /// The frame header and message meta.
    meta: Vec<u8>,
    /// A body being filled, where the transport cannot fill in place.
    body: Vec<u8>,
}

/// Walks a list of buffers, handing out the next `n` bytes as slices.
struct BodyCursor<'a> {
    bufs: &'a [&'a [u8]],
    index: usize,
    offset: usize,
}

impl<'a> BodyCursor<'a> {
    fn take(&mut self, mut n: usize, out: &mut Vec<IoSlice<'a>>) {
        while n > 0 {
            let buf = self.bufs[self.index];
            let k = (buf.len() - self.offset).min(n);
            if k > 0 {
                out.push(IoSlice::new(&buf[self.offset..self.offset + k]));
            }
            self.offset += k;
            n -= k;
            if self.offset == buf.len() {
                self.index += 1;
                self.offset = 0;
            }
        }
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
