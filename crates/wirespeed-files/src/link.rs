//! Copy-protocol messages over one wirespeed stream, wrapped as the transfer asks
//! ([`crate::envelope`]): compressed, sealed, or as they are.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use wirespeed::{Buf, Bytes, Connection, Stream};

use crate::envelope::{self, Place, SEALED, SealKey};
use crate::error::Class;
use crate::error::{FilesError, Result};
use crate::proto::{Msg, Violation};
use wirespeed::sync::Unpoison;

/// Largest body a control message may unwrap to: a batch of entries is far smaller.
const CONTROL_BODY_MAX: u64 = 64 << 20;

/// Which end of the transfer we are; each direction seals with its own key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    Source,
    Sink,
}

/// What one end of a transfer does to the messages it sends, and insists on in those it
/// receives. Shared by all the transfer's streams.
pub(crate) struct Wrapping {
    compress: Option<i32>,
    /// Seal everything we send, and refuse anything the peer does not seal.
    encrypt: bool,
    /// `None` before a transfer has a connection to derive keys from.
    keys: Option<(SealKey, SealKey)>,
}

impl Wrapping {
    pub(crate) fn new(conn: &Connection, end: End, compress: Option<i32>, encrypt: bool) -> Arc<Self> {
        let to_sink = SealKey::new(&conn.derive_key(b"wirespeed-files v1 source to sink"));
        let to_source = SealKey::new(&conn.derive_key(b"wirespeed-files v1 sink to source"));
        let keys = match end {
            End::Source => (to_sink, to_source),
            End::Sink => (to_source, to_sink),
        };
        Arc::new(Wrapping { compress, encrypt, keys: Some(keys) })
    }

    fn plain() -> Arc<Self> {
        Arc::new(Wrapping { compress: None, encrypt: false, keys: None })
    }

    fn send_key(&self) -> Option<&SealKey> {
        self.keys.as_ref().map(|k| &k.0)
    }

    fn recv_key(&self) -> Option<&SealKey> {
        self.keys.as_ref().map(|k| &k.1)
    }
}

/// One stream of a transfer.
pub(crate) struct Link {
    stream: Stream,
    wrapping: Arc<Wrapping>,
    /// Sealed messages sent so far; held while sending so counters go out in order.
    sent: Mutex<u64>,
    /// Sealed messages received so far.
    received: Mutex<u64>,
    /// We seal what we send: asked for, or the peer sealed what it sent us.
    sealing: AtomicBool,
}

/// A received message's body, still on the stream; read it with [`Link::read_body`].
pub(crate) struct Body {
    /// Length on the wire.
    pub wire_len: u64,
    flags: u8,
    at: Place,
}

impl Link {
    pub(crate) fn new(stream: Stream, wrapping: &Arc<Wrapping>) -> Self {
        Link {
            sealing: AtomicBool::new(wrapping.encrypt),
            stream,
            wrapping: wrapping.clone(),
            sent: Mutex::new(0),
            received: Mutex::new(0),
        }
    }

    /// A link that neither wraps nor accepts wrapped messages (before a transfer starts).
    pub(crate) fn plain(stream: Stream) -> Self {
        Link::new(stream, &Wrapping::plain())
    }

    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.stream.set_timeout(timeout);
    }

    /// True when messages go as they are, neither compressed nor sealed.
    fn unwrapped(&self) -> bool {
        !self.sealing.load(Ordering::Relaxed) && self.wrapping.compress.is_none()
    }

    pub(crate) fn send(&self, msg: &Msg, body: &[&[u8]]) -> Result<()> {
        let header = msg.encode();
        if self.unwrapped() {
            return Ok(self.stream.send(&header, body)?);
        }
        let sealing = self.sealing.load(Ordering::Relaxed);
        let mut sent = self.sent.lock().unpoison();
        let seal = match (sealing, self.wrapping.send_key()) {
            (true, Some(key)) => Some((key, Place { stream: self.stream.id(), counter: *sent })),
            _ => None,
        };
        let (header, new_body) = envelope::wrap(&header, body, self.wrapping.compress, seal)?;
        match &new_body {
            Some(b) => self.stream.send(&header, &[b])?,
            None => self.stream.send(&header, body)?,
        }
        if seal.is_some() {
            *sent += 2;
        }
        Ok(())
    }

    /// Like [`Link::send`], but hands `body` to the transport, which may keep it instead of
    /// copying it (an in-process peer then reads these very bytes).
    pub(crate) fn send_owned(&self, msg: &Msg, body: Bytes) -> Result<()> {
        if self.unwrapped() {
            return Ok(self.stream.send_bytes(&msg.encode(), &[body])?);
        }
        self.send(msg, &[&body])
    }

    /// Sends `msg` with a body of `len` bytes that `fill` writes piece by piece, in place in
    /// transport memory when the message goes as it is (see [`Stream::send_filled`]), else
    /// into `scratch` first. The inner error is `fill`'s, and ends the transfer.
    pub(crate) fn send_filled(
        &self,
        msg: &Msg,
        len: usize,
        scratch: &mut Vec<u8>,
        mut fill: impl FnMut(&mut [u8]) -> std::io::Result<()>,
    ) -> Result<std::io::Result<()>> {
        if self.unwrapped() {
            return Ok(self.stream.send_filled(&msg.encode(), len as u64, fill)?);
        }
        scratch.resize(len, 0);
        if let Err(e) = fill(scratch) {
            return Ok(Err(e));
        }
        self.send(msg, &[scratch]).map(Ok)
    }

    /// [`Link::recv_start`], waiting on as long as `moving` says the transfer still moves
    /// (see [`Link::recv_while`]).
    pub(crate) fn recv_start_while(&self, mut moving: impl FnMut() -> bool) -> Result<Option<(Msg, Body)>> {
        loop {
            match self.recv_start() {
                Err(FilesError::Connection(wirespeed::Error::Timeout(_))) if moving() => continue,
                r => return r,
            }
        }
    }

    /// The next message's header, with its body left on the stream, or `None` when the peer
    /// finished the stream. A `Fail` from the peer becomes [`FilesError::Remote`].
    pub(crate) fn recv_start(&self) -> Result<Option<(Msg, Body)>> {
        let Some(inc) = self.stream.recv_start()? else { return Ok(None) };
        let mut received = self.received.lock().unpoison();
        let at = Place { stream: self.stream.id(), counter: *received };
        let opened = envelope::open_header(&inc.header, self.wrapping.recv_key(), at)?;
        if opened.flags & SEALED != 0 {
            *received += 2;
            self.sealing.store(true, Ordering::Relaxed);
        } else if self.wrapping.encrypt {
            return Err(FilesError::Sealing(
                "the other end sends unencrypted data, and this end was asked to --encrypt".into(),
            ));
        }
        let msg = check(Msg::decode(&opened.header)?)?;
        Ok(Some((msg, Body { wire_len: inc.body_len, flags: opened.flags, at })))
    }

    /// Reads `body` (of the message [`Link::recv_start`] just returned), handing it to `f`
    /// piece by piece; returns its length. A body that would exceed `max` bytes is refused.
    pub(crate) fn read_body(&self, body: Body, max: u64, mut f: impl FnMut(&[u8]) -> Result<()>) -> Result<u64> {
        if body.flags != 0 {
            // Sealed bodies are whole before they open; compressed ones before they inflate.
            let data = self.read_whole(body, max)?;
            f(&data)?;
            return Ok(data.len() as u64);
        }
        check_len(body.wire_len, max)?;
        while let Some(buf) = self.stream.read_chunk()? {
            f(&buf)?;
        }
        Ok(body.wire_len)
    }

    /// Reads `body` whole and unwraps it; a plain body that arrived in one piece is not copied.
    fn read_whole(&self, body: Body, max: u64) -> Result<Buf> {
        // A wrapped body is at most the compressed bound of `max` plus its tag.
        check_len(body.wire_len, if body.flags == 0 { max } else { max + max / 64 + 1024 })?;
        let mut chunks = Vec::new();
        while let Some(buf) = self.stream.read_chunk()? {
            chunks.push(buf);
        }
        let wire = wirespeed::Body::new(chunks).into_contiguous();
        if body.flags == 0 {
            return Ok(wire);
        }
        let data = envelope::open_body(body.flags, wire.into_vec(), self.wrapping.recv_key(), body.at, max)?;
        check_len(data.len() as u64, max)?;
        Ok(Buf::from(data))
    }

    /// The next whole message, or `None` when the peer finished the stream.
    pub(crate) fn recv(&self) -> Result<Option<(Msg, Buf)>> {
        self.recv_while(|| false)
    }

    /// [`Link::recv`] on a control stream, which stays quiet while the data streams carry a
    /// large file: a wait that times out starts again as long as `moving` says the transfer
    /// still moves, so only a stalled transfer times out, however long a moving one takes.
    pub(crate) fn recv_while(&self, moving: impl FnMut() -> bool) -> Result<Option<(Msg, Buf)>> {
        let Some((msg, body)) = self.recv_start_while(moving)? else { return Ok(None) };
        Ok(Some((msg, self.read_whole(body, CONTROL_BODY_MAX)?)))
    }

    /// Ends the stream from the side that spoke last: finish, then wait for the peer to
    /// finish its side too, so dropping the stream is clean (a stream dropped while open is
    /// reset).
    pub(crate) fn close(&self) -> Result<()> {
        self.stream.finish()?;
        match self.stream.recv()? {
            None => Ok(()),
            Some(_) => Err(Violation::MoreAfter("the end").into()),
        }
    }

    /// Ends our side of the stream.
    pub(crate) fn finish(&self) -> Result<()> {
        Ok(self.stream.finish()?)
    }

    /// Tells the peer why we stop; best effort, as the link may be what failed.
    pub(crate) fn fail(&self, e: &FilesError) {
        let _ = self.send(&Msg::Fail { class: e.class().number(), message: e.to_string() }, &[]);
    }
}

fn check_len(len: u64, max: u64) -> Result<()> {
    if len > max {
        return Err(Violation::BodyTooLarge { len, max }.into());
    }
    Ok(())
}

fn check(msg: Msg) -> Result<Msg> {
    match msg {
        Msg::Fail { class, message } => Err(FilesError::Remote { class: Class::from_number(class), message }),
        m => Ok(m),
    }
}

pub(crate) fn unexpected(context: &'static str, msg: &Msg) -> FilesError {
    Violation::Unexpected { got: msg.name(), context }.into()
}
