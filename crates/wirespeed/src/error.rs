//! Typed errors of the library. Protocol-level codes travel in ERROR and RESET frames.

use std::io;

/// Codes carried by ERROR (connection) and RESET (stream) frames. Values below
/// [`ErrorCode::APP_BASE`] are wirespeed's own; applications use the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    pub const PROTOCOL: Self = Self(1);
    pub const VERSION: Self = Self(2);
    pub const AUTH: Self = Self(3);
    pub const FLOW_CONTROL: Self = Self(4);
    pub const TIMEOUT: Self = Self(5);
    pub const LIMIT: Self = Self(6);
    pub const INTERNAL: Self = Self(7);
    pub const CANCELLED: Self = Self(8);
    pub const REFUSED: Self = Self(9);
    pub const SHUTDOWN: Self = Self(10);
    pub const APP_BASE: u32 = 0x1000;

    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "protocol violation",
            2 => "unsupported version",
            3 => "authentication failed",
            4 => "flow-control violation",
            5 => "timeout",
            6 => "limit exceeded",
            7 => "internal error",
            8 => "cancelled",
            9 => "refused",
            10 => "shutting down",
            _ => "application error",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.name(), self.0)
    }
}

/// A malformed or disallowed frame. Always fatal for the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("reserved bits set in frame header")]
    Reserved,
    #[error("frame header of {got} bytes exceeds the limit of {limit}")]
    HeaderTooLarge { got: u64, limit: u64 },
    #[error("frame payload of {got} bytes exceeds the limit of {limit}")]
    PayloadTooLarge { got: u64, limit: u64 },
    #[error("malformed {0} frame")]
    Malformed(&'static str),
}

/// Everything the library can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid endpoint URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("key: {0}")]
    Key(String),
    #[error("authentication failed: {0}")]
    Auth(&'static str),
    #[error("the peer uses {theirs} here and this end {ours}: both ends need the same transport")]
    WrongFabric { ours: crate::fabric::Fabric, theirs: crate::fabric::Fabric },
    #[error("protocol version mismatch: we speak {ours}, the peer speaks {theirs}")]
    Version { ours: u16, theirs: u16 },
    #[error("not a wirespeed peer (bad magic)")]
    BadMagic,
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    #[error("protocol violation: {0}")]
    Protocol(String),
    #[error("the peer reported {code}: {message}")]
    Remote { code: ErrorCode, message: String },
    #[error("stream {stream} was reset: {code}")]
    Reset { stream: u32, code: ErrorCode },
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    #[error("connection closed")]
    Closed,
    #[error("limit exceeded: {0}")]
    Limit(String),
    #[error("fabric: {op} failed: {status}")]
    Fabric { op: &'static str, status: String },
    #[error("rejected a client {peer}: {reason}")]
    Rejected { peer: String, reason: Box<Error> },
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
}

impl Error {
    /// The code to put in an ERROR frame that reports this error to the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Auth(_) => ErrorCode::AUTH,
            Error::Version { .. } => ErrorCode::VERSION,
            Error::Frame(_) | Error::Protocol(_) | Error::BadMagic | Error::WrongFabric { .. } => ErrorCode::PROTOCOL,
            Error::Limit(_) => ErrorCode::LIMIT,
            Error::Timeout(_) => ErrorCode::TIMEOUT,
            Error::Remote { code, .. } | Error::Reset { code, .. } => *code,
            Error::Closed => ErrorCode::SHUTDOWN,
            _ => ErrorCode::INTERNAL,
        }
    }

    /// A copy good enough to hand to every stream of a failed connection.
    pub(crate) fn duplicate(&self) -> Error {
        match self {
            Error::Io(e) => Error::ConnectionLost(e.to_string()),
            Error::Remote { code, message } => Error::Remote { code: *code, message: message.clone() },
            Error::Version { ours, theirs } => Error::Version { ours: *ours, theirs: *theirs },
            Error::Auth(s) => Error::Auth(s),
            Error::Frame(f) => Error::Frame(f.clone()),
            Error::Protocol(s) => Error::Protocol(s.clone()),
            Error::ConnectionLost(s) => Error::ConnectionLost(s.clone()),
            Error::Closed => Error::Closed,
            Error::Timeout(d) => Error::Timeout(*d),
            Error::Limit(s) => Error::Limit(s.clone()),
            Error::Fabric { op, status } => Error::Fabric { op, status: status.clone() },
            Error::Reset { stream, code } => Error::Reset { stream: *stream, code: *code },
            other => Error::ConnectionLost(other.to_string()),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
