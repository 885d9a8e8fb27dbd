//! ZeroMQ's wire protocol (ZMTP 3.0, NULL mechanism) for one connection, sans-IO: bytes in,
//! messages and bytes out. FLESnet's consumers connect with libzmq's REQ socket; the node
//! speaks ROUTER to them, and our own receiver speaks REQ. Written here rather than bound from
//! libzmq because a ROUTER learns of a peer's going only through a draft option that Debian's
//! libzmq lacks, while one connection per socket makes it plain.
//!
//! A connection starts with a 64-byte greeting each way, then a READY command each way
//! (naming the socket type), then frames: a flags byte (1 more, 2 long, 4 command), a size
//! (one byte, or eight big-endian when long), the body. A REQ socket puts an empty delimiter
//! frame before each message, and expects one before each reply.

use std::collections::VecDeque;

use crate::error::{FlesError, Result, Violation};

const GREETING_LEN: usize = 64;
const MORE: u8 = 1;
const LONG: u8 = 2;
const COMMAND: u8 = 4;

/// A message: its frames, the REQ delimiter taken off.
pub type Parts = Vec<Vec<u8>>;

fn violation(what: impl Into<String>) -> FlesError {
    Violation::Zmtp(what.into()).into()
}

/// A ZeroMQ socket type this end speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketType {
    /// A REQ socket: a worker's.
    Req,
    /// A ROUTER socket: the distributor's.
    Router,
}

impl SocketType {
    fn name(self) -> &'static [u8] {
        match self {
            SocketType::Req => b"REQ",
            SocketType::Router => b"ROUTER",
        }
    }

    /// The peer types ZeroMQ lets this one talk to.
    fn accepts(self, peer: &[u8]) -> bool {
        match self {
            SocketType::Req => peer == b"ROUTER" || peer == b"REP",
            SocketType::Router => peer == b"REQ" || peer == b"DEALER" || peer == b"ROUTER",
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    Greeting,
    Ready,
    Open,
}

/// One ZMTP connection's protocol state.
pub struct Zmtp {
    own: SocketType,
    state: State,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Frames of a message not yet complete.
    partial: Parts,
    messages: VecDeque<Parts>,
    /// Frames larger than this are refused.
    max_frame: usize,
}

impl Zmtp {
    /// A connection of socket type `own`; its greeting is ready to send.
    pub fn new(own: SocketType, max_frame: usize) -> Self {
        let mut greeting = [0u8; GREETING_LEN];
        greeting[0] = 0xFF;
        greeting[9] = 0x7F;
        greeting[10] = 3; // version 3.0
        greeting[12..16].copy_from_slice(b"NULL");
        Zmtp {
            own,
            state: State::Greeting,
            input: Vec::new(),
            output: greeting.to_vec(),
            partial: Vec::new(),
            messages: VecDeque::new(),
            max_frame,
        }
    }

    /// Whether both sides have said READY.
    pub fn is_open(&self) -> bool {
        self.state == State::Open
    }

    /// Bytes from the peer.
    pub fn receive(&mut self, bytes: &[u8]) -> Result<()> {
        self.input.extend_from_slice(bytes);
        loop {
            let used = match self.state {
                State::Greeting => self.greeting()?,
                State::Ready | State::Open => self.frame()?,
            };
            if used == 0 {
                return Ok(());
            }
            self.input.drain(..used);
        }
    }

    fn greeting(&mut self) -> Result<usize> {
        // Refuse a peer that is not ZMTP 3 as soon as its first bytes show it.
        if self.input.first().is_some_and(|&b| b != 0xFF) || self.input.get(9).is_some_and(|&b| b & 1 == 0) {
            return Err(violation("not a ZMTP greeting"));
        }
        if self.input.len() < GREETING_LEN {
            return Ok(0);
        }
        if self.input[10] < 3 {
            return Err(violation(format!("ZMTP version {} (3 needed)", self.input[10])));
        }
        if &self.input[12..32] != b"NULL\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0" {
            return Err(violation("a security mechanism other than NULL"));
        }
        self.state = State::Ready;
        let mut ready = vec![5];
        ready.extend_from_slice(b"READY");
        property(&mut ready, b"Socket-Type", self.own.name());
        if self.own == SocketType::Req {
            property(&mut ready, b"Identity", b"");
        }
        self.write_frame(COMMAND, &ready);
        Ok(GREETING_LEN)
    }

    /// Takes one whole frame off the input, if there is one.
    fn frame(&mut self) -> Result<usize> {
        let Some(&flags) = self.input.first() else { return Ok(0) };
        if flags & !(MORE | LONG | COMMAND) != 0 {
            return Err(violation(format!("frame flags {flags:#x}")));
        }
        let (head, size) = if flags & LONG != 0 {
            match self.input.get(1..9) {
                Some(b) => (9, u64::from_be_bytes(b.try_into().expect("8 bytes"))),
                None => return Ok(0),
            }
        } else {
            match self.input.get(1) {
                Some(&b) => (2, u64::from(b)),
                None => return Ok(0),
            }
        };
        if size > self.max_frame as u64 {
            return Err(violation(format!("a {size}-byte frame (at most {})", self.max_frame)));
        }
        let end = head + size as usize;
        if self.input.len() < end {
            return Ok(0);
        }
        let body = self.input[head..end].to_vec();
        if flags & COMMAND != 0 {
            self.command(&body)?;
        } else if self.state != State::Open {
            return Err(violation("a message before READY"));
        } else {
            self.partial.push(body);
            if flags & MORE == 0 {
                let parts = std::mem::take(&mut self.partial);
                self.messages.push_back(self.unwrap_envelope(parts)?);
            }
        }
        Ok(end)
    }

    fn command(&mut self, body: &[u8]) -> Result<()> {
        let name_len = *body.first().ok_or_else(|| violation("an empty command"))? as usize;
        let name = body.get(1..1 + name_len).ok_or_else(|| violation("a truncated command"))?;
        match name {
            b"READY" if self.state == State::Ready => {
                let peer = properties(&body[1 + name_len..])?
                    .into_iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case(b"Socket-Type"))
                    .map(|(_, v)| v)
                    .ok_or_else(|| violation("READY without a socket type"))?;
                if !self.own.accepts(peer) {
                    return Err(violation(format!(
                        "a {} socket cannot talk to this one",
                        String::from_utf8_lossy(peer)
                    )));
                }
                self.state = State::Open;
                Ok(())
            }
            b"PING" => {
                // PONG carries back the ping's context, after its 2-byte TTL.
                let context = body.get(1 + name_len + 2..).unwrap_or_default();
                let mut pong = vec![4];
                pong.extend_from_slice(b"PONG");
                pong.extend_from_slice(context);
                self.write_frame(COMMAND, &pong);
                Ok(())
            }
            b"PONG" => Ok(()),
            other => Err(violation(format!("unexpected command {}", String::from_utf8_lossy(other)))),
        }
    }

    /// A REQ socket's messages (and the replies to it) start with an empty delimiter.
    fn unwrap_envelope(&self, mut parts: Parts) -> Result<Parts> {
        if parts.first().is_none_or(|d| !d.is_empty()) {
            return Err(violation("a message without its empty delimiter"));
        }
        parts.remove(0);
        Ok(parts)
    }

    fn write_frame(&mut self, flags: u8, body: &[u8]) {
        write_frame(&mut self.output, flags, body);
    }

    /// Queues a message; it goes once the connection is open.
    pub fn send(&mut self, parts: &[&[u8]]) {
        self.output.extend_from_slice(&message_bytes(parts));
    }

    /// Bytes to write to the peer.
    pub fn transmit(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.output)
    }

    /// The next whole message from the peer.
    pub fn message(&mut self) -> Option<Parts> {
        self.messages.pop_front()
    }
}

/// A message on the wire, its delimiter first, for a connection that is open.
pub fn message_bytes(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + parts.iter().map(|p| p.len() + 9).sum::<usize>());
    write_frame(&mut out, MORE, &[]);
    for (i, p) in parts.iter().enumerate() {
        write_frame(&mut out, if i + 1 < parts.len() { MORE } else { 0 }, p);
    }
    out
}

fn write_frame(out: &mut Vec<u8>, flags: u8, body: &[u8]) {
    if body.len() > 255 {
        out.push(flags | LONG);
        out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    } else {
        out.push(flags);
        out.push(body.len() as u8);
    }
    out.extend_from_slice(body);
}

fn property(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&(value.len() as u32).to_be_bytes());
    out.extend_from_slice(value);
}

fn properties(mut b: &[u8]) -> Result<Vec<(&[u8], &[u8])>> {
    let mut out = Vec::new();
    while let Some(&n) = b.first() {
        let name = b.get(1..1 + n as usize).ok_or_else(|| violation("a truncated property"))?;
        let at = 1 + n as usize;
        let len = b.get(at..at + 4).ok_or_else(|| violation("a truncated property"))?;
        let len = u32::from_be_bytes(len.try_into().expect("4 bytes")) as usize;
        let value = b.get(at + 4..at + 4 + len).ok_or_else(|| violation("a truncated property"))?;
        out.push((name, value));
        b = &b[at + 4 + len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two ends talking to each other, bytes handed across by hand.
    fn open_pair() -> (Zmtp, Zmtp) {
        let (mut req, mut router) = (Zmtp::new(SocketType::Req, 1 << 20), Zmtp::new(SocketType::Router, 1 << 20));
        for _ in 0..2 {
            router.receive(&req.transmit()).unwrap();
            req.receive(&router.transmit()).unwrap();
        }
        assert!(req.is_open() && router.is_open());
        (req, router)
    }

    #[test]
    fn req_and_router_exchange_messages() {
        let (mut req, mut router) = open_pair();
        req.send(&[b"REGISTER 1 0 0 0 test"]);
        router.receive(&req.transmit()).unwrap();
        assert_eq!(router.message(), Some(vec![b"REGISTER 1 0 0 0 test".to_vec()]));
        let big = vec![7u8; 300];
        router.send(&[b"WORK_ITEM 5", &big]);
        let bytes = router.transmit();
        // Byte by byte: frames split anywhere reassemble.
        for b in bytes.chunks(1) {
            req.receive(b).unwrap();
        }
        assert_eq!(req.message(), Some(vec![b"WORK_ITEM 5".to_vec(), big]));
        assert_eq!(req.message(), None);
    }

    #[test]
    fn the_wire_is_zmtp_3() {
        let mut z = Zmtp::new(SocketType::Router, 64);
        let g = z.transmit();
        assert_eq!(g.len(), 64);
        assert_eq!((g[0], g[9], g[10], &g[12..16]), (0xFF, 0x7F, 3, &b"NULL"[..]));
        let (mut req, _) = open_pair();
        req.send(&[b"HI"]);
        assert_eq!(req.transmit(), [MORE, 0, 0, 2, b'H', b'I']);
    }

    #[test]
    fn bad_peers_are_refused() {
        let mut http = Zmtp::new(SocketType::Router, 64);
        assert!(http.receive(b"GET / HTTP/1.1\r\n").is_err());

        let mut curve = Zmtp::new(SocketType::Router, 64);
        let mut greeting = Zmtp::new(SocketType::Req, 64).transmit();
        greeting[12..17].copy_from_slice(b"CURVE");
        assert!(curve.receive(&greeting).is_err());

        let mut pub_peer = Zmtp::new(SocketType::Router, 64);
        let mut hello = Zmtp::new(SocketType::Req, 64).transmit();
        let mut ready = vec![5];
        ready.extend_from_slice(b"READY");
        property(&mut ready, b"Socket-Type", b"PUB");
        hello.extend_from_slice(&[COMMAND, ready.len() as u8]);
        hello.extend_from_slice(&ready);
        assert!(pub_peer.receive(&hello).is_err());

        let open = || {
            let (mut req, mut router) = (Zmtp::new(SocketType::Req, 64), Zmtp::new(SocketType::Router, 64));
            for _ in 0..2 {
                router.receive(&req.transmit()).unwrap();
                req.receive(&router.transmit()).unwrap();
            }
            router
        };
        assert!(open().receive(&[LONG, 0, 0, 0, 0, 0, 0, 1, 0]).is_err(), "oversized");
        assert!(open().receive(&[0, 1, b'x']).is_err(), "no delimiter");
        assert!(open().receive(&[0x80, 0]).is_err(), "unknown flags");
        assert!(
            Zmtp::new(SocketType::Router, 64).receive(&[0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 2]).is_ok(),
            "not yet whole"
        );
    }
}
