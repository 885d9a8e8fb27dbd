//! Streams and credits of an authenticated connection, as a sans-IO state machine, in both
//! directions.
//!
//! The driver feeds it received frames ([`Session::on_frame`]) and asks it for the next frame
//! of a message to send ([`Session::next_frame`], which cuts it as credit allows and writes its
//! head through the codec) and for a stream's Finish ([`Session::finish`]); the application
//! pops what arrived ([`Session::poll_recv`]). Control frames it wants sent (credit grants,
//! resets) wait in [`Session::poll_transmit`]. The driver only locks, waits and writes.

use std::collections::VecDeque;

use super::codec::Reader;
use super::frame::{FrameHeader, Kind, Touched, encode_control};
use super::handshake::Params;
use super::rma::Rma;
use crate::error::{Error, ErrorCode, Limit, Violation};
use crate::mem::Buf;

/// Stream ids index every frame: ahash is several times faster than the standard SipHash on
/// them and keeps its random keys, so a peer cannot pick ids that collide.
type HashMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
type HashSet<K> = std::collections::HashSet<K, ahash::RandomState>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Opens odd stream ids.
    Client,
    /// Opens even stream ids.
    Server,
}

/// What [`Session::poll_ready`] reports: where a receive would not wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ready {
    /// The peer opened a stream that waits to be accepted.
    Accept,
    /// This stream has something to receive: a message, body bytes, its end, or a reset.
    Stream(u32),
}

/// What the application receives on a stream, in order.
#[derive(Debug)]
pub enum RecvEvent {
    /// A new message: its header and the total length of its body, whose chunks follow.
    Message { header: Vec<u8>, body_len: u64 },
    /// The next piece of the current message's body.
    Chunk(Buf),
    /// The peer will send nothing more on this stream.
    Finished,
}

#[derive(Debug)]
struct StreamState {
    send_credit: u64,
    send_open: bool,
    recv_open: bool,
    reset: Option<ErrorCode>,
    /// The peer finished sending before it reset: what it sent stays readable, then `Finished`.
    finished_before_reset: bool,
    queue: VecDeque<RecvEvent>,
    /// Body bytes of the current incoming message that have not arrived yet.
    body_left: u64,
    /// Bytes the peer may still send before it needs more credit.
    recv_window: u64,
    /// Bytes the application consumed that we have not granted back yet.
    unacked: u64,
    /// Listed in `Session::ready`.
    listed: bool,
}

pub struct Session {
    role: Role,
    ours: Params,
    peer: Params,
    streams: HashMap<u32, StreamState>,
    next_local: u32,
    /// The lowest peer stream id not seen yet.
    next_peer: u32,
    /// Peer ids below `next_peer` not seen yet: streams the peer opened whose first frame
    /// was overtaken by a later stream's (threads race to the socket).
    skipped: HashSet<u32>,
    accept_queue: VecDeque<u32>,
    /// Streams that received something since [`Session::poll_ready`] last found them empty.
    ready: VecDeque<u32>,
    transmit: Vec<u8>,
    /// Emulated one-sided transfers.
    pub(crate) rma: Rma,
    failed: Option<Error>,
    peer_closed: bool,
    local_closed: bool,
}

impl Session {
    pub fn new(role: Role, ours: Params, peer: Params) -> Self {
        Session {
            role,
            ours,
            peer,
            streams: HashMap::default(),
            next_local: if role == Role::Client { 1 } else { 2 },
            next_peer: if role == Role::Client { 2 } else { 1 },
            skipped: HashSet::default(),
            accept_queue: VecDeque::new(),
            ready: VecDeque::new(),
            transmit: Vec::new(),
            rma: Rma::default(),
            failed: None,
            peer_closed: false,
            local_closed: false,
        }
    }

    pub fn peer_params(&self) -> Params {
        self.peer
    }

    fn new_stream(&self) -> StreamState {
        StreamState {
            send_credit: self.peer.stream_window,
            send_open: true,
            recv_open: true,
            reset: None,
            finished_before_reset: false,
            queue: VecDeque::new(),
            body_left: 0,
            recv_window: self.ours.stream_window,
            unacked: 0,
            listed: false,
        }
    }

    fn is_local(&self, id: u32) -> bool {
        (id % 2 == 1) == (self.role == Role::Client)
    }

    /// The error every operation reports once the connection is gone.
    pub fn terminal_error(&self) -> Option<Error> {
        if let Some(e) = &self.failed {
            return Some(e.clone());
        }
        if self.local_closed {
            return Some(Error::Closed);
        }
        None
    }

    /// Whether stream `id` was reset (by either side) or the connection failed.
    pub fn is_reset(&self, id: u32) -> bool {
        self.terminal_error().is_some() || self.streams.get(&id).is_some_and(|s| s.reset.is_some())
    }

    /// Marks the connection failed; the first error wins.
    pub fn fail(&mut self, e: Error) {
        if self.failed.is_none() {
            self.failed = Some(e);
        }
    }

    pub fn is_failed(&self) -> bool {
        self.failed.is_some()
    }

    pub fn close_locally(&mut self) {
        self.local_closed = true;
    }

    pub fn open_stream(&mut self) -> Result<u32, Error> {
        if let Some(e) = self.terminal_error() {
            return Err(e);
        }
        if self.peer_closed {
            return Err(Error::Closed);
        }
        let open = self.streams.keys().filter(|&&id| self.is_local(id)).count();
        if open >= self.peer.max_streams as usize {
            return Err(Limit::Streams(self.peer.max_streams).into());
        }
        let id = self.next_local;
        self.next_local = id.checked_add(2).ok_or(Limit::IdsExhausted("stream"))?;
        let s = self.new_stream();
        self.streams.insert(id, s);
        Ok(id)
    }

    /// Pops a stream the peer opened, if any.
    pub fn poll_accept(&mut self) -> Option<Result<u32, Error>> {
        if let Some(id) = self.accept_queue.pop_front() {
            return Some(Ok(id));
        }
        if let Some(e) = self.terminal_error() {
            return Some(Err(e));
        }
        if self.peer_closed {
            return Some(Err(Error::Closed));
        }
        None
    }

    /// Where a receive would not wait, level-triggered: a stream stays ready, taking its turn
    /// with the others, until a receive finds it empty; a finished or reset stream stays ready
    /// until it is released. Errors once the connection is gone and nothing is left.
    pub fn poll_ready(&mut self) -> Option<Result<Ready, Error>> {
        if !self.accept_queue.is_empty() {
            return Some(Ok(Ready::Accept));
        }
        while let Some(id) = self.ready.pop_front() {
            let Some(s) = self.streams.get_mut(&id) else { continue };
            if s.queue.is_empty() && s.recv_open && s.reset.is_none() {
                s.listed = false;
                continue;
            }
            self.ready.push_back(id);
            return Some(Ok(Ready::Stream(id)));
        }
        if let Some(e) = self.terminal_error() {
            return Some(Err(e));
        }
        if self.peer_closed {
            return Some(Err(Error::Closed));
        }
        None
    }

    /// Feeds one received frame. An error is fatal: report it to the peer and close.
    pub fn on_frame(&mut self, h: &FrameHeader, meta: &[u8], payload: Buf) -> Result<Touched, Error> {
        if self.peer_closed {
            return Err(Violation::FrameAfterClose(h.kind.name()).into());
        }
        match h.kind {
            Kind::Error => {
                let message = String::from_utf8_lossy(meta).into_owned();
                self.fail(Error::Remote { code: ErrorCode(h.aux), message });
                return Ok(Touched::All);
            }
            Kind::Close => {
                self.peer_closed = true;
                return Ok(Touched::All);
            }
            Kind::Put | Kind::Get | Kind::GetReply => return self.rma.on_frame(h, meta, payload),
            Kind::Message | Kind::Data | Kind::Credit | Kind::Finish | Kind::Reset => {}
            other => return Err(Violation::UnexpectedFrame(other.name()).into()),
        }
        let accepted = self.accept_queue.len();
        let Some(s) = self.stream_for_frame(h.stream)? else {
            return Ok(Touched::Nobody); // a stream we already closed: late frames are dropped
        };
        // So are those the peer sent before our reset reached it.
        if s.reset.is_some() && h.kind != Kind::Reset {
            return Ok(Touched::Nobody);
        }
        match h.kind {
            Kind::Message => {
                if !s.recv_open {
                    return Err(Violation::MessageAfterFinish(h.stream).into());
                }
                if s.body_left != 0 {
                    return Err(Violation::MessageInMessage(h.stream).into());
                }
                let mut r = Reader::new(meta);
                let body_len = r.u64().map_err(|_| Violation::MessageWithoutLength)?;
                let header = r.rest();
                if payload.len() as u64 > body_len {
                    return Err(Violation::PayloadOverBody.into());
                }
                charge(s, h.stream, meta.len() as u64 + payload.len() as u64)?;
                s.body_left = body_len - payload.len() as u64;
                s.queue.push_back(RecvEvent::Message { header: header.to_vec(), body_len });
                if !payload.is_empty() {
                    s.queue.push_back(RecvEvent::Chunk(payload));
                }
            }
            Kind::Data => {
                if s.body_left == 0 {
                    return Err(Violation::DataWithoutMessage(h.stream).into());
                }
                if payload.len() as u64 > s.body_left {
                    return Err(Violation::DataOverBody(h.stream).into());
                }
                if payload.is_empty() || !meta.is_empty() {
                    return Err(Violation::Malformed("data frame").into());
                }
                charge(s, h.stream, payload.len() as u64)?;
                s.body_left -= payload.len() as u64;
                s.queue.push_back(RecvEvent::Chunk(payload));
            }
            Kind::Credit => {
                s.send_credit = s.send_credit.checked_add(h.len).ok_or(Violation::CreditOverflow)?;
            }
            Kind::Finish => {
                if !s.recv_open {
                    return Err(Violation::FinishedTwice(h.stream).into());
                }
                if s.body_left != 0 {
                    return Err(Violation::FinishMidMessage(h.stream).into());
                }
                s.recv_open = false;
            }
            Kind::Reset => {
                // A peer that finished and then let go (it will not read our side) sent
                // everything it meant to: only what was cut off mid-stream is discarded. A
                // reset of ours that crossed it already closed both directions.
                if s.reset.is_none() {
                    s.finished_before_reset = !s.recv_open;
                }
                if !s.finished_before_reset {
                    s.queue.clear();
                }
                s.reset = Some(ErrorCode(h.aux));
                s.recv_open = false;
                s.send_open = false;
            }
            _ => unreachable!("filtered above"),
        }
        if h.kind != Kind::Credit && !s.listed {
            s.listed = true;
            self.ready.push_back(h.stream);
        }
        Ok(if self.accept_queue.len() > accepted { Touched::Accept } else { Touched::Stream(h.stream) })
    }

    /// Starts a get of `len` bytes; the caller then sends the Get frame with this id.
    pub fn start_get(&mut self, len: u64) -> Result<u32, Error> {
        if let Some(e) = self.terminal_error() {
            return Err(e);
        }
        self.rma.start_get(len)
    }

    /// The bytes of get `id` once all have come, in order.
    pub fn poll_get(&mut self, id: u32) -> Option<Result<Vec<Buf>, Error>> {
        if let Some(parts) = self.rma.take_get(id) {
            return Some(Ok(parts));
        }
        if let Some(e) = self.terminal_error() {
            return Some(Err(e));
        }
        if self.peer_closed {
            return Some(Err(Error::ConnectionLost("the peer closed the connection during a get".into())));
        }
        None
    }

    /// Finds or opens the stream a frame belongs to; `None` for streams already closed.
    fn stream_for_frame(&mut self, id: u32) -> Result<Option<&mut StreamState>, Error> {
        if id == 0 {
            return Err(Violation::StreamZero.into());
        }
        if self.is_local(id) {
            if id >= self.next_local {
                return Err(Violation::UnopenedStream(id).into());
            }
            return Ok(self.streams.get_mut(&id));
        }
        if id < self.next_peer {
            if self.skipped.is_empty() || !self.skipped.remove(&id) {
                return Ok(self.streams.get_mut(&id));
            }
        } else {
            let gap = (id - self.next_peer) / 2;
            if self.skipped.len() as u64 + gap as u64 > self.ours.max_streams as u64 {
                return Err(Violation::StreamIdGap(id).into());
            }
            self.skipped.extend((self.next_peer..id).step_by(2));
            self.next_peer = id.checked_add(2).ok_or(Violation::StreamIdsExhausted)?;
        }
        let peer_open = self.streams.keys().filter(|&&k| !self.is_local(k)).count();
        if self.local_closed || peer_open >= self.ours.max_streams as usize {
            self.queue_control(Kind::Reset, id, ErrorCode::REFUSED.0, 0);
            return Ok(None);
        }
        let s = self.new_stream();
        self.streams.insert(id, s);
        self.accept_queue.push_back(id);
        Ok(self.streams.get_mut(&id))
    }

    /// Aborts `id` in both directions and tells the peer.
    pub fn reset(&mut self, id: u32, code: ErrorCode) {
        if let Some(s) = self.streams.get_mut(&id)
            && s.reset.is_none()
        {
            s.reset = Some(code);
            s.queue.clear();
            s.send_open = false;
            s.recv_open = false;
            self.queue_control(Kind::Reset, id, code.0, 0);
        }
    }

    /// The application is done with `id`: forget it, resetting it if it is still open.
    pub fn release(&mut self, id: u32) {
        let Some(s) = self.streams.get(&id) else { return };
        let clean = s.reset.is_some() || (!s.send_open && !s.recv_open && s.queue.is_empty());
        if !clean && self.failed.is_none() {
            self.reset(id, ErrorCode::CANCELLED);
        }
        self.streams.remove(&id);
    }

    /// Whether [`Session::poll_recv`] would return something for `id` now, without taking it.
    pub fn recv_ready(&self, id: u32) -> bool {
        self.streams.get(&id).is_some_and(|s| !s.queue.is_empty()) || self.nothing_queued(id).is_some()
    }

    /// The next event on `id`, an error, or `None` if nothing has arrived yet.
    pub fn poll_recv(&mut self, id: u32) -> Option<Result<RecvEvent, Error>> {
        let threshold = (self.ours.stream_window / 4).max(1);
        if let Some(s) = self.streams.get_mut(&id)
            && let Some(ev) = s.queue.pop_front()
        {
            s.unacked += match &ev {
                RecvEvent::Message { header, .. } => 8 + header.len() as u64,
                RecvEvent::Chunk(b) => b.len() as u64,
                RecvEvent::Finished => 0,
            };
            if s.unacked >= threshold && s.recv_open {
                let grant = std::mem::take(&mut s.unacked);
                s.recv_window += grant;
                self.queue_control(Kind::Credit, id, 0, grant);
            }
            return Some(Ok(ev));
        }
        self.nothing_queued(id)
    }

    /// What `poll_recv` returns for `id` with nothing queued: its end, an error, or `None`
    /// while more may come.
    fn nothing_queued(&self, id: u32) -> Option<Result<RecvEvent, Error>> {
        let Some(s) = self.streams.get(&id) else {
            return Some(Err(Error::Closed));
        };
        if let Some(code) = s.reset
            && !s.finished_before_reset
        {
            return Some(Err(Error::Reset { stream: id, code }));
        }
        if !s.recv_open {
            return Some(Ok(RecvEvent::Finished));
        }
        if let Some(e) = self.terminal_error() {
            return Some(Err(e));
        }
        if self.peer_closed {
            return Some(Err(Error::ConnectionLost("the peer closed the connection with the stream open".into())));
        }
        None
    }

    fn queue_control(&mut self, kind: Kind, stream: u32, aux: u32, len: u64) {
        let mut h = FrameHeader::new(kind, stream);
        h.aux = aux;
        h.len = len;
        encode_control(&mut self.transmit, h, &[]);
    }

    pub fn has_transmit(&self) -> bool {
        !self.transmit.is_empty()
    }

    /// Encoded control frames to send, in order: header-only frames of `HEADER_LEN` bytes.
    pub fn poll_transmit(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.transmit)
    }
}

fn charge(s: &mut StreamState, id: u32, cost: u64) -> Result<(), Error> {
    if cost > s.recv_window {
        return Err(Violation::CreditExceeded { stream: id, sent: cost, credit: s.recv_window }.into());
    }
    s.recv_window -= cost;
    Ok(())
}

mod send;
#[cfg(test)]
mod tests;

pub use send::Outgoing;
