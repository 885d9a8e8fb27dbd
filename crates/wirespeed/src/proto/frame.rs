//! The fixed 24-byte frame header and its kinds. See docs/PROTOCOL.md for the byte layout.

use super::codec::{self, Reader};
use crate::error::FrameError;

/// Bytes in every frame header.
pub const HEADER_LEN: usize = 24;

/// Shared-memory rings only, on Message and Data frames: the receiver pulls the payload's tail
/// from the sender's memory (see docs/PROTOCOL.md); `aux` holds the number of segments.
pub const FLAG_PULL: u8 = 1;
/// Shared-memory rings only, on Message and Data frames: the payload lies in a sealed region
/// the sender has handed over, and the ring holds a reference to it instead (see
/// docs/PROTOCOL.md).
pub const FLAG_SHARED: u8 = 2;

/// What a frame carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Handshake: magic, version, parameters, nonce (and the server's proof).
    Hello = 1,
    /// Handshake: the client's proof.
    Auth = 2,
    /// Handshake: the server accepted the client.
    AuthOk = 3,
    /// Starts a message: meta = total body length (u64) + message header; payload = first body bytes.
    Message = 4,
    /// Continues the current message's body.
    Data = 5,
    /// Grants the peer `len` more bytes on a stream.
    Credit = 6,
    /// The sender will send no more messages on the stream.
    Finish = 7,
    /// Aborts a stream in both directions; `aux` holds the code.
    Reset = 8,
    /// Fatal connection error; `aux` holds the code, meta a UTF-8 message.
    Error = 9,
    /// Graceful end of the connection: nothing follows.
    Close = 10,
    /// Shared-memory rings only: skip `len` bytes to the end of the ring.
    Pad = 11,
    /// One-sided write: meta = region id (u32) + offset (u64); payload = the bytes.
    Put = 12,
    /// One-sided read request: meta = region id + offset + request id (u32); `len` = bytes.
    Get = 13,
    /// Bytes answering a Get, in order: meta = request id; payload = the next bytes.
    GetReply = 14,
}

impl Kind {
    pub fn from_u8(v: u8) -> Result<Kind, FrameError> {
        Ok(match v {
            1 => Kind::Hello,
            2 => Kind::Auth,
            3 => Kind::AuthOk,
            4 => Kind::Message,
            5 => Kind::Data,
            6 => Kind::Credit,
            7 => Kind::Finish,
            8 => Kind::Reset,
            9 => Kind::Error,
            10 => Kind::Close,
            11 => Kind::Pad,
            12 => Kind::Put,
            13 => Kind::Get,
            14 => Kind::GetReply,
            other => return Err(FrameError::UnknownKind(other)),
        })
    }

    /// The kind's name, as error messages show it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Hello => "Hello",
            Kind::Auth => "Auth",
            Kind::AuthOk => "AuthOk",
            Kind::Message => "Message",
            Kind::Data => "Data",
            Kind::Credit => "Credit",
            Kind::Finish => "Finish",
            Kind::Reset => "Reset",
            Kind::Error => "Error",
            Kind::Close => "Close",
            Kind::Pad => "Pad",
            Kind::Put => "Put",
            Kind::Get => "Get",
            Kind::GetReply => "GetReply",
        }
    }

    /// Frames whose `len` counts payload bytes that follow the meta.
    pub fn has_payload(self) -> bool {
        matches!(self, Kind::Message | Kind::Data | Kind::Put | Kind::GetReply)
    }
}

/// Size limits a receiver enforces before it allocates anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest meta section (message header + 8 bytes, or handshake fields).
    pub max_meta: u32,
    /// Largest payload in one frame (a message body may span many frames).
    pub max_payload: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_meta: 1 << 20, max_payload: 64 << 20 }
    }
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: Kind,
    pub flags: u8,
    pub stream: u32,
    pub meta_len: u32,
    /// Kind-specific: the code of Reset and Error frames.
    pub aux: u32,
    /// Payload bytes after the meta (Message, Data), credit bytes (Credit), or skip bytes (Pad).
    pub len: u64,
}

impl FrameHeader {
    pub fn new(kind: Kind, stream: u32) -> Self {
        FrameHeader { kind, flags: 0, stream, meta_len: 0, aux: 0, len: 0 }
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0] = self.kind as u8;
        b[1] = self.flags;
        b[4..8].copy_from_slice(&self.stream.to_le_bytes());
        b[8..12].copy_from_slice(&self.meta_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.aux.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b
    }

    /// Parses and validates a header against `limits`; never panics on any input.
    pub fn decode(b: &[u8; HEADER_LEN], limits: &Limits) -> Result<Self, FrameError> {
        let fields = |r: &mut Reader| Ok((r.u8()?, r.u8()?, r.u16()?, r.u32()?, r.u32()?, r.u32()?, r.u64()?));
        // Never short: the fields fill the array.
        let (kind, flags, reserved, stream, meta_len, aux, len) =
            codec::read_all(b, fields).ok_or(FrameError::Malformed("header"))?;
        let kind = Kind::from_u8(kind)?;
        let flags_ok = flags == 0 || ((flags == FLAG_PULL || flags == FLAG_SHARED) && kind.has_payload());
        if !flags_ok || reserved != 0 {
            return Err(FrameError::Reserved);
        }
        let h = FrameHeader { kind, flags, stream, meta_len, aux, len };
        if h.meta_len > limits.max_meta {
            return Err(FrameError::HeaderTooLarge { got: h.meta_len.into(), limit: limits.max_meta.into() });
        }
        if kind.has_payload() && h.len > limits.max_payload {
            return Err(FrameError::PayloadTooLarge { got: h.len, limit: limits.max_payload });
        }
        Ok(h)
    }

    /// An encoded header (the first `HEADER_LEN` bytes of `encoded`) with its flags, and its
    /// aux when given, replaced: how the shared-memory ring marks a frame it carries by
    /// reference or splits.
    pub fn reflag(encoded: &[u8], flags: u8, aux: Option<u32>) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b.copy_from_slice(&encoded[..HEADER_LEN]);
        b[1] = flags;
        if let Some(aux) = aux {
            b[12..16].copy_from_slice(&aux.to_le_bytes());
        }
        b
    }

    /// Payload bytes that follow the meta on the wire.
    pub fn payload_len(&self) -> u64 {
        if self.kind.has_payload() { self.len } else { 0 }
    }
}

/// Encodes a control frame (no payload) with its meta into `out`.
pub fn encode_control(out: &mut Vec<u8>, mut header: FrameHeader, meta: &[u8]) {
    header.meta_len = meta.len() as u32;
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(meta);
}

/// Whom a received frame concerns, so the driver wakes only the threads that care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Touched {
    /// Nothing anyone waits for (a late frame for a closed stream).
    Nobody,
    /// Readers or senders of this stream.
    Stream(u32),
    /// The peer opened a stream: whoever waits to accept.
    Accept,
    /// Bytes answering this get request.
    Get(u32),
    /// The whole connection (an error or a close).
    All,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflag_changes_only_flags_and_aux() {
        let mut h = FrameHeader::new(Kind::Data, 5);
        (h.meta_len, h.aux, h.len) = (3, 9, 70_000);
        let mut wire = h.encode().to_vec();
        wire.extend_from_slice(b"met");
        let shared = FrameHeader::decode(&FrameHeader::reflag(&wire, FLAG_SHARED, None), &Limits::default()).unwrap();
        assert_eq!(shared, FrameHeader { flags: FLAG_SHARED, ..h });
        let pulled = FrameHeader::decode(&FrameHeader::reflag(&wire, FLAG_PULL, Some(4)), &Limits::default()).unwrap();
        assert_eq!(pulled, FrameHeader { flags: FLAG_PULL, aux: 4, ..h });
    }

    #[test]
    fn header_round_trip() {
        let h = FrameHeader { kind: Kind::Message, flags: 0, stream: 7, meta_len: 9, aux: 3, len: u64::MAX >> 1 };
        let l = Limits { max_meta: 100, max_payload: u64::MAX };
        assert_eq!(FrameHeader::decode(&h.encode(), &l).unwrap(), h);
    }

    #[test]
    fn test_vector_credit() {
        // Kept in step with docs/PROTOCOL.md.
        let mut h = FrameHeader::new(Kind::Credit, 3);
        h.len = 0x0010_0000;
        assert_eq!(h.encode(), [6, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn rejects_oversized_and_unknown() {
        let l = Limits { max_meta: 16, max_payload: 1024 };
        let mut h = FrameHeader::new(Kind::Message, 1);
        h.meta_len = 17;
        assert!(matches!(FrameHeader::decode(&h.encode(), &l), Err(FrameError::HeaderTooLarge { .. })));
        h.meta_len = 8;
        h.len = 1025;
        assert!(matches!(FrameHeader::decode(&h.encode(), &l), Err(FrameError::PayloadTooLarge { .. })));
        let mut b = h.encode();
        b[0] = 200;
        assert_eq!(FrameHeader::decode(&b, &l), Err(FrameError::UnknownKind(200)));
        let mut b = FrameHeader::new(Kind::Close, 0).encode();
        b[2] = 1;
        assert_eq!(FrameHeader::decode(&b, &l), Err(FrameError::Reserved));
    }
}
