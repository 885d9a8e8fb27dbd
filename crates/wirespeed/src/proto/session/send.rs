//! The sending half of a session: a message cut into Message and Data frames as the peer's
//! credit allows, and the Finish that ends a direction. The session writes every frame's head
//! through the codec; the driver only waits for it and writes the head and the body bytes it
//! names.

use super::Session;
use crate::error::{Error, Limit};
use crate::proto::codec::Writer;
use crate::proto::frame::{FrameHeader, HEADER_LEN, Kind};

/// A message on its way out on one stream: what [`Session::next_frame`] has not cut yet.
#[derive(Debug, Clone)]
pub struct Outgoing {
    stream: u32,
    body_len: u64,
    left: u64,
    started: bool,
}

impl Outgoing {
    /// A message of `body_len` body bytes on stream `stream`.
    pub fn new(stream: u32, body_len: u64) -> Self {
        Outgoing { stream, body_len, left: body_len, started: false }
    }

    /// Whether every frame of the message has been cut (a message with an empty body has one).
    pub fn is_done(&self) -> bool {
        self.started && self.left == 0
    }
}

impl Session {
    /// The next frame of `msg`, whose message header is `header`: its head (the frame header
    /// and, on the first frame, the body length and `header`) replaces what `head` held, and
    /// the return is how many body bytes follow it on the wire, the next ones in order.
    /// `None`: wait for credit. Frames carry at most `max_chunk` body bytes.
    pub fn next_frame(
        &mut self,
        msg: &mut Outgoing,
        header: &[u8],
        max_chunk: u64,
        head: &mut Vec<u8>,
    ) -> Result<Option<usize>, Error> {
        let meta_len = if msg.started { 0 } else { 8 + header.len() as u64 };
        let Some(take) = self.take_send_credit(msg.stream, meta_len, msg.left, max_chunk)? else {
            return Ok(None);
        };
        let mut h = FrameHeader::new(if msg.started { Kind::Data } else { Kind::Message }, msg.stream);
        h.meta_len = meta_len as u32; // at most the window, checked to fit
        h.len = take;
        let mut w = Writer(std::mem::take(head));
        w.0.clear();
        w.bytes(&h.encode());
        if !msg.started {
            w.u64(msg.body_len);
            w.bytes(header);
        }
        *head = w.into_inner();
        msg.left -= take;
        msg.started = true;
        Ok(Some(take as usize))
    }

    /// Payload bytes the caller may now send on `id` in one frame whose meta is `meta_len`
    /// bytes; `None` means wait for credit. Chunks are at most `max_chunk` bytes.
    fn take_send_credit(
        &mut self,
        id: u32,
        meta_len: u64,
        remaining: u64,
        max_chunk: u64,
    ) -> Result<Option<u64>, Error> {
        if let Some(e) = self.terminal_error() {
            return Err(e);
        }
        let window = self.peer.stream_window;
        if meta_len > window || meta_len > u32::MAX.into() {
            return Err(Error::Limit(Limit::HeaderOverWindow { header: meta_len, window }));
        }
        let s = self.streams.get_mut(&id).ok_or(Error::Closed)?;
        if let Some(code) = s.reset {
            return Err(Error::Reset { stream: id, code });
        }
        if !s.send_open {
            return Err(Error::Usage("send on a stream after its finish"));
        }
        // Wait for a worthwhile chunk; credit always comes back to at least half a window.
        let need = meta_len + remaining.min(max_chunk).min(window / 2);
        if s.send_credit < need {
            return Ok(None);
        }
        let take = remaining.min(max_chunk).min(s.send_credit - meta_len);
        s.send_credit -= meta_len + take;
        Ok(Some(take))
    }

    /// Ends our direction of `id`: the Finish frame to send, or `None` when it had ended
    /// already (a second Finish would be a violation to the peer).
    pub fn finish(&mut self, id: u32) -> Result<Option<[u8; HEADER_LEN]>, Error> {
        if let Some(e) = self.terminal_error() {
            return Err(e);
        }
        let s = self.streams.get_mut(&id).ok_or(Error::Closed)?;
        if let Some(code) = s.reset {
            return Err(Error::Reset { stream: id, code });
        }
        Ok(std::mem::replace(&mut s.send_open, false).then(|| FrameHeader::new(Kind::Finish, id).encode()))
    }
}
