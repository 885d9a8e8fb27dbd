//! The data-plane call protocol (sans-IO): what travels on one wirespeed stream per call.
//!
//! ```text
//! OPEN  = 1 | method u8 | expiry u64 | mac [32] | target (the rest: ticket or descriptor)
//! DATA  = 2 | app_metadata_len u32 | app_metadata | IPC Message flatbuffer (the rest)
//!         body: the IPC body
//! ERROR = 3 | code i32 | message (the rest, UTF-8)
//! ERROR WITH DETAILS = 4 | code i32 | message_len u32 | message | details (the rest)
//! ```
//! The client opens the stream with OPEN; each side ends its direction by finishing the stream.
//! Integers are little-endian.

use bytes::Bytes;
use wirespeed::proto::codec::{Reader, Truncated, Writer};

use crate::error::{Result, Violation};

/// A data-plane call's Flight method.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// DoGet.
    Get = 1,
    /// DoPut.
    Put = 2,
    /// DoExchange.
    Exchange = 3,
}

impl Method {
    /// Every method.
    pub const ALL: [Method; 3] = [Method::Get, Method::Put, Method::Exchange];

    /// The gRPC method it stands for (`DoGet`).
    pub fn grpc_name(self) -> &'static str {
        match self {
            Method::Get => "DoGet",
            Method::Put => "DoPut",
            Method::Exchange => "DoExchange",
        }
    }

    fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(Method::Get),
            2 => Some(Method::Put),
            3 => Some(Method::Exchange),
            _ => None,
        }
    }

    /// The method called `name` ("get", "put", "exchange").
    pub fn named(name: &str) -> Option<Self> {
        Method::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The method's name: `get`, `put` or `exchange`.
    pub fn name(self) -> &'static str {
        match self {
            Method::Get => "get",
            Method::Put => "put",
            Method::Exchange => "exchange",
        }
    }
}

/// One data-plane message (see docs/PROTOCOL.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Starts a call: its method and the capability the server granted for it.
    Open {
        /// The call's method.
        method: Method,
        /// When the capability expires (seconds since the epoch).
        expiry: u64,
        /// The capability's HMAC.
        mac: [u8; 32],
        /// What the call is for: the ticket or descriptor.
        target: Bytes,
    },
    /// One IPC message: application metadata, and the flatbuffer `Message`; the body follows.
    Data {
        /// Application metadata, empty for none.
        app_metadata: Bytes,
        /// The IPC message's flatbuffer, empty for metadata alone.
        meta: Bytes,
    },
    /// `details` are the error's binary details (pyarrow's `extra_info`), often none.
    Error {
        /// The Flight status code.
        code: i32,
        /// The message.
        message: String,
        /// See the variant's docs.
        details: Bytes,
    },
}

const OPEN: u8 = 1;
const DATA: u8 = 2;
const ERROR: u8 = 3;
const ERROR_WITH_DETAILS: u8 = 4;

impl Msg {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Msg::Open { method, expiry, mac, target } => {
                w.u8(OPEN);
                w.u8(*method as u8);
                w.u64(*expiry);
                w.bytes(mac);
                w.bytes(target);
            }
            Msg::Data { app_metadata, meta } => {
                w = Writer::with_capacity(5 + app_metadata.len() + meta.len());
                w.u8(DATA);
                w.prefixed(app_metadata);
                w.bytes(meta);
            }
            Msg::Error { code, message, details } if details.is_empty() => {
                w.u8(ERROR);
                w.i32(*code);
                w.bytes(message.as_bytes());
            }
            Msg::Error { code, message, details } => {
                w.u8(ERROR_WITH_DETAILS);
                w.i32(*code);
                w.prefixed(message.as_bytes());
                w.bytes(details);
            }
        }
        w.into_inner()
    }

    /// Decodes a header; never panics, whatever the bytes.
    pub fn decode(header: &[u8]) -> Result<Msg> {
        let mut r = Reader::new(header);
        let tag = r.u8().map_err(|_| Violation::Malformed("empty"))?;
        let malformed = |what: &'static str| move |_: Truncated| Violation::Malformed(what);
        match tag {
            OPEN => {
                let open = malformed("OPEN");
                let method = r.u8().map_err(open)?;
                let method = Method::from_u8(method).ok_or(Violation::Malformed("OPEN (unknown method)"))?;
                let (expiry, mac) = (r.u64().map_err(open)?, r.array::<32>().map_err(open)?);
                Ok(Msg::Open { method, expiry, mac, target: Bytes::copy_from_slice(r.take_rest()) })
            }
            DATA => {
                let app_metadata = r.prefixed().map_err(malformed("DATA (app_metadata overruns the header)"))?;
                Ok(Msg::Data {
                    app_metadata: Bytes::copy_from_slice(app_metadata),
                    meta: Bytes::copy_from_slice(r.take_rest()),
                })
            }
            ERROR => {
                let code = r.i32().map_err(malformed("ERROR"))?;
                Ok(Msg::Error {
                    code,
                    message: String::from_utf8_lossy(r.take_rest()).into_owned(),
                    details: Bytes::new(),
                })
            }
            ERROR_WITH_DETAILS => {
                let code = r.i32().map_err(malformed("ERROR"))?;
                let message = r.prefixed().map_err(malformed("ERROR (message overruns the header)"))?;
                Ok(Msg::Error {
                    code,
                    message: String::from_utf8_lossy(message).into_owned(),
                    details: Bytes::copy_from_slice(r.take_rest()),
                })
            }
            other => Err(Violation::UnknownMessage(other).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips() {
        for msg in [
            Msg::Open { method: Method::Exchange, expiry: 77, mac: [9; 32], target: Bytes::from_static(b"ticket") },
            Msg::Data { app_metadata: Bytes::from_static(b"app"), meta: Bytes::from_static(b"flatbuffer") },
            Msg::Data { app_metadata: Bytes::new(), meta: Bytes::new() },
            Msg::Error { code: 5, message: "no such flight".into(), details: Bytes::new() },
            Msg::Error { code: 2, message: "boom ✓".into(), details: Bytes::from_static(b"\0extra") },
        ] {
            assert_eq!(Msg::decode(&msg.encode()).unwrap(), msg);
        }
    }

    #[test]
    fn truncations_are_errors() {
        let open = Msg::Open { method: Method::Get, expiry: 1, mac: [1; 32], target: Bytes::new() }.encode();
        for n in 0..open.len() {
            assert!(Msg::decode(&open[..n]).is_err(), "prefix of {n} bytes");
        }
        assert!(Msg::decode(&[DATA, 9, 0, 0, 0, b'x']).is_err());
        assert!(Msg::decode(&[ERROR_WITH_DETAILS, 2, 0, 0, 0, 9, 0, 0, 0, b'x']).is_err());
        assert!(Msg::decode(&[OPEN, 7]).is_err());
    }

    proptest! {
        #[test]
        fn decoding_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = Msg::decode(&bytes);
        }
    }
}
