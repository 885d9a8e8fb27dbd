//! One stream of a connection: messages sent whole, in place or chunk by chunk, and received
//! whole or read chunk by chunk.

use std::io::{self, IoSlice};

use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::engine::{Inner, Waiting};
use crate::error::{Error, ErrorCode, Limit, Result, Violation};
use crate::mem::{Body, Buf, Chunks};
use crate::proto::session::{Outgoing, RecvEvent, Session};
use crate::sync::Unpoison;

/// A message received whole.
#[derive(Debug)]
pub struct Message {
    /// The message's header, as the sender gave it.
    pub header: Vec<u8>,
    /// The body: views of the memory it arrived in, where it could stay there.
    pub body: Body,
}

/// The start of a message whose body is read chunk by chunk ([`Stream::read_chunk`]).
#[derive(Debug)]
pub struct Incoming {
    /// The message's header, as the sender gave it.
    pub header: Vec<u8>,
    /// How many body bytes follow ([`Stream::read_chunk`]).
    pub body_len: u64,
}

/// One ordered sequence of messages in each direction. Dropping a stream that is still open
/// resets it (the peer sees it cancelled).
///
/// A body need not fit in memory at once: the receiver may take it piece by piece, each piece
/// a view of where it arrived, while the sender is still writing it.
///
/// ```
/// use wirespeed::{Config, Key, connect, listen};
///
/// # fn main() -> wirespeed::Result<()> {
/// let key = Key::new("a shared secret")?;
/// let listener = listen("tcp://127.0.0.1:0", &key, &Config::default())?;
/// let client = connect(listener.url(), &key, &Config::default())?;
/// let server = listener.accept()?;
/// let out = client.open_stream()?;
/// let sender = std::thread::spawn(move || -> wirespeed::Result<()> {
///     let body = vec![7u8; 64 << 20]; // more than one credit window
///     out.send(b"weights", &[&body])?;
///     out.finish()
/// });
/// let incoming = server.accept_stream()?;
/// let start = incoming.recv_start()?.expect("a message");
/// assert_eq!(start.header, b"weights");
/// let mut received = 0;
/// while let Some(piece) = incoming.read_chunk()? {
///     received += piece.len() as u64;
/// }
/// assert_eq!(received, start.body_len);
/// assert!(incoming.recv_start()?.is_none()); // the sender finished the stream
/// sender.join().unwrap()?;
/// # Ok(())
/// # }
/// ```
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
    pub(super) fn new(inner: Arc<Inner>, id: u32) -> Self {
        inner.lock().handles += 1;
        let timeout = inner.timeout;
        Stream { inner, id, send: Mutex::new(Scratch::default()), body_left: Mutex::new(0), timeout }
    }

    /// The stream's id on its connection.
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

    /// Sends a message of `total` body bytes in the frames the session cuts as credit allows;
    /// `write` sends one frame given its head, how many body bytes follow the previous ones,
    /// and a scratch buffer.
    fn send_frames(
        &self,
        header: &[u8],
        total: u64,
        mut write: impl FnMut(&[u8], usize, &mut Vec<u8>) -> Result<()>,
    ) -> Result<()> {
        let mut scratch = self.send.lock().unpoison();
        let Scratch { head, body } = &mut *scratch;
        let mut msg = Outgoing::new(self.id, total);
        while !msg.is_done() {
            let take = self.inner.wait_for(self.timeout, Waiting::OnStream(self.id), |s| {
                s.next_frame(&mut msg, header, self.inner.max_chunk, head).transpose()
            })?;
            write(head, take, body)?;
        }
        Ok(())
    }

    /// Tells the peer no more messages follow on this stream. Finishing again does nothing.
    pub fn finish(&self) -> Result<()> {
        let _serialised = self.send.lock().unpoison();
        let frame = self.inner.lock().session.finish(self.id)?;
        frame.map_or(Ok(()), |frame| self.inner.write(&frame, &[]))
    }

    /// Aborts the stream in both directions with `code`.
    pub fn reset(&self, code: ErrorCode) {
        self.inner.lock().session.reset(self.id, code);
        self.inner.flush_control();
    }

    /// Receives the next whole message, or `None` once the peer finished the stream.
    /// Bodies up to the transport's zero-copy limit stay views of transport memory.
    pub fn recv(&self) -> Result<Option<Message>> {
        self.recv_gathering(false)
    }

    /// As [`Stream::recv`], with the body in one piece. One that arrived in several (over tcp,
    /// ucx or ofi, a chunk per frame) is gathered into the buffer the connection reuses for
    /// bodies too big to lend, so a reader of one large message after another copies into
    /// pages already faulted in.
    pub fn recv_contiguous(&self) -> Result<Option<Message>> {
        self.recv_gathering(true)
    }

    fn recv_gathering(&self, whole: bool) -> Result<Option<Message>> {
        let mut left = self.body_left.lock().unpoison();
        self.skip_rest(&mut left)?;
        // A body wanted whole and longer than one chunk is gathered as its chunks come, so
        // each goes back to the transport at once instead of all waiting for the last.
        let limit =
            if whole { self.inner.zero_copy_limit.min(self.inner.max_chunk) } else { self.inner.zero_copy_limit };
        // One wait takes the message and as much of its body as has arrived: a small message
        // costs one lock, not one per event.
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
                    Ok(_) => return Some(Err(Violation::EventsOutOfOrder.into())),
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
        if got < body_len || (whole && chunks.len() > 1) {
            // Too big to hold as lent views (or wanted whole): gather on the heap, giving
            // transport memory back as we go.
            let mut v = self.inner.gathered.try_take_empty(body_len as usize).map_err(|_| Limit::Memory(body_len))?;
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
            chunks.push(Buf::from(self.inner.gathered.lend(v)));
        }
        Ok(Some(Message { header, body: Body::from_chunks(chunks) }))
    }

    /// Waits up to `within` until the next message, the end of the stream or an error is
    /// there, without taking it; false if nothing came. A caller that must stay responsive
    /// between waits (to a Python Ctrl-C) waits in slices, then calls [`Stream::recv`].
    pub fn wait_readable(&self, within: Duration) -> Result<bool> {
        if *self.body_left.lock().unpoison() > 0 {
            return Ok(true); // the rest of a message recv will skip
        }
        let ready = |s: &mut Session| s.recv_ready(self.id).then_some(Ok(()));
        match self.inner.wait_for(within, Waiting::OnStream(self.id), ready) {
            Ok(()) => Ok(true),
            Err(Error::Timeout(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Whether the stream was reset (by either side: a peer that gave up on it) or its
    /// connection failed, from what has arrived within a moment's wait.
    pub fn is_reset(&self) -> bool {
        let reset = |s: &mut Session| s.is_reset(self.id).then_some(Ok(()));
        match self.inner.wait_for(Duration::from_millis(1), Waiting::OnStream(self.id), reset) {
            Ok(()) => true,
            Err(Error::Timeout(_)) => false,
            Err(_) => true,
        }
    }

    /// How long each wait on this stream may last.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn skip_rest(&self, left: &mut u64) -> Result<()> {
        while *left > 0 {
            *left -= self.next_chunk_locked()?.len() as u64;
        }
        Ok(())
    }

    /// Receives the next message's header; read its body with [`Stream::read_chunk`].
    pub fn recv_start(&self) -> Result<Option<Incoming>> {
        let mut left = self.body_left.lock().unpoison();
        self.skip_rest(&mut left)?;
        match self.next_event()? {
            RecvEvent::Message { header, body_len } => {
                *left = body_len;
                Ok(Some(Incoming { header, body_len }))
            }
            RecvEvent::Finished => Ok(None),
            RecvEvent::Chunk(_) => Err(Violation::EventsOutOfOrder.into()),
        }
    }

    /// The next piece of the current message's body, or `None` when it is complete.
    pub fn read_chunk(&self) -> Result<Option<Buf>> {
        let mut left = self.body_left.lock().unpoison();
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
            _ => Err(Violation::EventsOutOfOrder.into()),
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
    /// The head of the frame being sent, as the session wrote it.
    head: Vec<u8>,
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
