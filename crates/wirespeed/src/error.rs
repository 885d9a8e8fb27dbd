//! Typed errors of the library. Protocol-level codes travel in ERROR and RESET frames.

use std::io;
use std::sync::Arc;

/// Codes carried by ERROR (connection) and RESET (stream) frames. Values below
/// [`ErrorCode::APP_BASE`] are wirespeed's own; applications use the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// The peer broke the protocol.
    pub const PROTOCOL: Self = Self(1);
    /// The peers speak different protocol versions.
    pub const VERSION: Self = Self(2);
    /// The handshake failed: not the same key.
    pub const AUTH: Self = Self(3);
    /// The peer sent more than its credit allowed.
    pub const FLOW_CONTROL: Self = Self(4);
    /// A wait ran past its limit.
    pub const TIMEOUT: Self = Self(5);
    /// A size or count past a limit.
    pub const LIMIT: Self = Self(6);
    /// A failure inside the sender, nothing the receiver did.
    pub const INTERNAL: Self = Self(7);
    /// The stream was given up: its handle was dropped, or its call cancelled.
    pub const CANCELLED: Self = Self(8);
    /// The receiver takes no more streams.
    pub const REFUSED: Self = Self(9);
    /// The sender is shutting down.
    pub const SHUTDOWN: Self = Self(10);
    /// The first code applications may use for their own resets.
    pub const APP_BASE: u32 = 0x1000;

    /// The code's meaning, as messages show it.
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
    /// A kind byte no version of the protocol has.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// Reserved header bits that are not zero, or flags on a kind that takes none.
    #[error("reserved bits set in frame header")]
    Reserved,
    /// A meta section longer than the receiver allows.
    #[error("frame header of {got} bytes exceeds the limit of {limit}")]
    HeaderTooLarge {
        /// Bytes it announced.
        got: u64,
        /// The most this end takes.
        limit: u64,
    },
    /// A payload longer than the receiver allows in one frame.
    #[error("frame payload of {got} bytes exceeds the limit of {limit}")]
    PayloadTooLarge {
        /// Bytes it announced.
        got: u64,
        /// The most this end takes.
        limit: u64,
    },
    /// A frame whose fields do not fit together (`0`: which kind).
    #[error("malformed {0} frame")]
    Malformed(&'static str),
}

/// Something a peer did that the protocol forbids. Always fatal for the connection, and
/// reported to the peer in an ERROR frame (see [`Violation::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// A frame other than the handshake's before the handshake ended.
    #[error("unexpected {kind} frame ({meta_len} meta bytes) during the handshake")]
    HandshakeFrame {
        /// The frame's kind.
        kind: &'static str,
        /// Its meta's length.
        meta_len: usize,
    },
    /// A fabric number this end does not know.
    #[error("unknown fabric id {0} in the hello")]
    UnknownFabric(u8),
    /// A peer that grants no credit at all.
    #[error("the peer offers no stream window")]
    NoStreamWindow,
    /// A frame after the peer's own Close.
    #[error("{0} frame after Close")]
    FrameAfterClose(&'static str),
    /// A handshake frame after the handshake.
    #[error("unexpected {0} frame after the handshake")]
    UnexpectedFrame(&'static str),
    /// A stream frame on stream 0, which is never a stream.
    #[error("stream frame on stream 0")]
    StreamZero,
    /// A frame for a stream of ours that we never opened.
    #[error("frame for stream {0}, which we never opened")]
    UnopenedStream(u32),
    /// A stream id that skips past more streams than the limit allows.
    #[error("stream {0} skips more ids than the stream limit")]
    StreamIdGap(u32),
    /// A stream id past the last one.
    #[error("stream ids exhausted")]
    StreamIdsExhausted,
    /// A message that starts before the previous one's body ended.
    #[error("a message on stream {0} before the previous one ended")]
    MessageInMessage(u32),
    /// A Message frame whose meta lacks the body length.
    #[error("message frame without a body length")]
    MessageWithoutLength,
    /// A Message frame with more payload than its body length.
    #[error("message payload longer than its body")]
    PayloadOverBody,
    /// A message after the stream's Finish.
    #[error("a message on stream {0} after its Finish")]
    MessageAfterFinish(u32),
    /// Data with no message under way.
    #[error("data on stream {0} without a message")]
    DataWithoutMessage(u32),
    /// More body bytes than the message announced.
    #[error("more data on stream {0} than its message announced")]
    DataOverBody(u32),
    /// A second Finish.
    #[error("a second Finish on stream {0}")]
    FinishedTwice(u32),
    /// A Finish before the message's body ended.
    #[error("finish in the middle of a message on stream {0}")]
    FinishMidMessage(u32),
    /// A stream's events in an order the protocol never produces.
    #[error("message events out of order")]
    EventsOutOfOrder,
    /// Credit grants that add up past 2^64.
    #[error("credit overflow")]
    CreditOverflow,
    /// More bytes than the credit granted.
    #[error("stream {stream}: the peer sent {sent} bytes with only {credit} bytes of credit")]
    CreditExceeded {
        /// The stream.
        stream: u32,
        /// Bytes the peer sent.
        sent: u64,
        /// Bytes of credit it had.
        credit: u64,
    },
    /// A field that does not decode (`0`: what).
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// A one-sided access past the end of the region.
    #[error("one-sided access outside region {region}")]
    OutsideRegion {
        /// The region's id.
        region: u32,
    },
    /// A one-sided access to a region this end never exposed.
    #[error("region {0} is not exposed")]
    UnknownRegion(u32),
    /// A reply to a get this end never sent.
    #[error("a reply to get {0}, which we never sent")]
    UnrequestedReply(u64),
    /// A reply longer than the get asked for.
    #[error("more bytes than get {0} asked for")]
    ReplyTooLong(u64),
    /// More shared regions at once than the limit.
    #[error("the peer shared more than {0} regions")]
    TooManyRegions(usize),
    /// A frame naming a shared region that never arrived.
    #[error("a frame refers to a shared region the peer never sent")]
    UnsharedRegion,
    /// A shared region that cannot be used (`0`: why).
    #[error("the peer's shared region {0}")]
    BadSharedRegion(String),
    /// The shared-memory server's descriptors were not the ones expected.
    #[error("the server sent the wrong descriptors")]
    WrongDescriptors,
    /// A shared-memory ring of a size no ring has.
    #[error("the server offered a ring of {0} bytes")]
    RingSize(u64),
    /// A shared-memory file of a size other than the ring's.
    #[error("the shared memory has the wrong size")]
    SharedMemorySize,
    /// Bytes on the shared-memory bootstrap socket where none belong.
    #[error("unexpected bytes on the bootstrap socket")]
    BootstrapBytes,
    /// A fabric address of a length no address has.
    #[error("a fabric address of {0} bytes")]
    AddressLength(usize),
    /// Bytes that are not a UCX worker address.
    #[error("not a UCX worker address (header byte {0:#04x})")]
    NotWorkerAddress(u8),
    /// An in-process frame whose header does not match what it carries.
    #[error("an in-process {0} does not match its header")]
    InProcessMismatch(&'static str),
}

impl Violation {
    /// The code an ERROR frame reporting this violation carries.
    pub fn code(&self) -> ErrorCode {
        match self {
            Violation::CreditExceeded { .. } | Violation::CreditOverflow => ErrorCode::FLOW_CONTROL,
            _ => ErrorCode::PROTOCOL,
        }
    }
}

/// A size or count past what this end or the peer allows: what to make smaller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Limit {
    /// The peer accepts no more open streams from this end.
    #[error("the peer accepts at most {0} streams")]
    Streams(u32),
    /// A connection used up the ids of one kind (`what`: "stream", "region", "get").
    #[error("{0} ids exhausted")]
    IdsExhausted(&'static str),
    /// A message header larger than the peer's stream window.
    #[error("a {header}-byte message header exceeds the peer's {window}-byte stream window")]
    HeaderOverWindow {
        /// The header's length with the body length before it.
        header: u64,
        /// The peer's window.
        window: u64,
    },
    /// A one-sided access past the end of its region.
    #[error("{len} bytes at offset {offset} fall outside a {region_len}-byte region")]
    OutsideRegion {
        /// Where the access starts.
        offset: u64,
        /// How many bytes it spans.
        len: u64,
        /// The region's length.
        region_len: u64,
    },
    /// Memory for `0` bytes could not be had.
    #[error("out of memory for {0} bytes")]
    Memory(u64),
    /// A frame larger than the shared-memory ring holds.
    #[error("a {0}-byte frame does not fit the shared-memory ring")]
    OverRing(u64),
    /// A receive buffer larger than any frame may be.
    #[error("a {0}-byte receive buffer is larger than any frame")]
    OverFrame(u64),
    /// A [`Config`](crate::Config) field out of its range (`field`, and what it may be).
    #[error("{field} must be {range}")]
    Config {
        /// The field's name.
        field: &'static str,
        /// What it may be.
        range: String,
    },
}

/// What kind of failure an error is, by what its caller can do about it. The one table that
/// the CLI's exit codes, Python's exception classes and the C library's codes come from;
/// [`Class::number`] also travels between peers (the copy protocol's failure reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum Class {
    /// Nothing more specific: a bug, or a failure of this host.
    Failure = 1,
    /// The caller's own mistake: a bad argument, URL or option.
    Usage = 2,
    /// The key or the credentials: wrong, refused or unreadable.
    Auth = 3,
    /// The peer is unreachable, went away or gave up on the transfer.
    Connection = 4,
    /// A file could not be read or written, at either end.
    Io = 5,
    /// Data arrived corrupted and was not kept.
    Checksum = 6,
    /// A wait ran past its limit.
    Timeout = 7,
    /// The peer sent something malformed or speaks another version.
    Protocol = 8,
    /// A size or count past a limit ([`Limit`]).
    Limit = 9,
    /// What was asked for does not exist (a Flight ticket, a path).
    NotFound = 10,
    /// No GPU, or the GPU failed.
    Gpu = 11,
}

impl Class {
    /// Every class, in the order of their numbers.
    pub const ALL: [Class; 11] = [
        Class::Failure,
        Class::Usage,
        Class::Auth,
        Class::Connection,
        Class::Io,
        Class::Checksum,
        Class::Timeout,
        Class::Protocol,
        Class::Limit,
        Class::NotFound,
        Class::Gpu,
    ];

    /// The class's stable number: on the wire and in the C library.
    pub fn number(self) -> u8 {
        self as u8
    }

    /// The class of a number from a peer; an unknown number (a newer peer's) is a
    /// [`Class::Failure`].
    pub fn from_number(n: u8) -> Class {
        Class::ALL.get(usize::from(n).wrapping_sub(1)).copied().unwrap_or(Class::Failure)
    }

    /// The `wirespeed` CLI's exit status for a failure of this class: 1 failure, 2 usage,
    /// 3 authentication, 4 connection (timeouts and protocol errors too), 5 I/O, 6 checksum.
    pub fn exit_code(self) -> i32 {
        match self {
            Class::Failure | Class::Limit | Class::NotFound | Class::Gpu => 1,
            Class::Usage => 2,
            Class::Auth => 3,
            Class::Connection | Class::Timeout | Class::Protocol => 4,
            Class::Io => 5,
            Class::Checksum => 6,
        }
    }

    /// The class of an I/O error: the network's kinds are the connection's, the rest a
    /// file's.
    pub fn of_io(kind: io::ErrorKind) -> Class {
        use io::ErrorKind as K;
        match kind {
            K::ConnectionRefused
            | K::ConnectionReset
            | K::ConnectionAborted
            | K::NotConnected
            | K::AddrNotAvailable
            | K::BrokenPipe
            | K::UnexpectedEof
            | K::HostUnreachable
            | K::NetworkUnreachable
            | K::NetworkDown => Class::Connection,
            K::TimedOut => Class::Timeout,
            K::InvalidInput => Class::Usage,
            _ => Class::Io,
        }
    }
}

/// Everything the library can fail with. `Clone`, so a failed connection hands the same
/// typed error to each of its streams. [`Error::class`] says what kind of failure it is.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An endpoint URL that does not parse (`reason`: why).
    #[error("invalid endpoint URL {url:?}: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The key: missing, empty or unreadable (the text says which).
    #[error("key: {0}")]
    Key(String),
    /// The handshake failed: the peer does not hold the same key, or refused this one.
    #[error("authentication failed: {0}")]
    Auth(&'static str),
    /// The two ends chose different fabrics.
    #[error("the peer uses {theirs} here and this end {ours}: both ends need the same transport")]
    WrongFabric {
        /// The fabric this end uses.
        ours: crate::fabric::Fabric,
        /// The fabric the peer uses.
        theirs: crate::fabric::Fabric,
    },
    /// The peers speak different protocol versions.
    #[error("protocol version mismatch: we speak {ours}, the peer speaks {theirs}")]
    Version {
        /// This end's version.
        ours: u16,
        /// The peer's version.
        theirs: u16,
    },
    /// The peer is not a wirespeed peer.
    #[error("not a wirespeed peer (bad magic)")]
    BadMagic,
    /// A frame that does not decode.
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    /// The peer broke the protocol.
    #[error("protocol violation: {0}")]
    PeerMisbehaved(#[from] Violation),
    /// This end's own mistake in using the API; nothing the peer did.
    #[error("{0}")]
    Usage(&'static str),
    /// The peer ended the connection with an ERROR frame (`code`, and its message).
    #[error("the peer reported {code}: {message}")]
    Remote {
        /// The code the peer sent.
        code: ErrorCode,
        /// The peer's own words.
        message: String,
    },
    /// A stream was reset, by either side, with `code`.
    #[error("stream {stream} was reset: {code}")]
    Reset {
        /// The stream.
        stream: u32,
        /// The code it was reset with.
        code: ErrorCode,
    },
    /// A wait ran past its limit.
    #[error("timed out after {0:?}")]
    Timeout(std::time::Duration),
    /// The connection broke, or could not be made; the text says where (a fabric's own
    /// status, the address) for a person to read: every cause means the same to a caller.
    #[error("connection lost: {0}")]
    ConnectionLost(String),
    /// The connection was closed, by this end or the peer.
    #[error("connection closed")]
    Closed,
    /// A size or count past a limit.
    #[error("limit exceeded: {0}")]
    Limit(#[from] Limit),
    /// A fabric call failed (`op`), with the fabric's status.
    #[error("fabric: {op} failed: {status}")]
    Fabric {
        /// The call that failed.
        op: &'static str,
        /// The fabric's status, in its words.
        status: String,
    },
    /// A client this listener turned away: who, and why.
    #[error("rejected a client {peer}: {reason}")]
    Rejected {
        /// The client's address.
        peer: String,
        /// Why it was turned away.
        reason: Box<Error>,
    },
    /// An I/O error of the system.
    #[error("I/O: {0}")]
    Io(Arc<io::Error>),
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(Arc::new(e))
    }
}

impl Error {
    /// The code to put in an ERROR frame that reports this error to the peer.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::Auth(_) => ErrorCode::AUTH,
            Error::Version { .. } => ErrorCode::VERSION,
            Error::PeerMisbehaved(v) => v.code(),
            Error::Frame(_) | Error::BadMagic | Error::WrongFabric { .. } => ErrorCode::PROTOCOL,
            Error::Limit(_) => ErrorCode::LIMIT,
            Error::Timeout(_) => ErrorCode::TIMEOUT,
            Error::Remote { code, .. } | Error::Reset { code, .. } => *code,
            Error::Closed => ErrorCode::SHUTDOWN,
            _ => ErrorCode::INTERNAL,
        }
    }

    /// What kind of failure this is.
    pub fn class(&self) -> Class {
        match self {
            Error::Url { .. } | Error::Usage(_) => Class::Usage,
            Error::Key(_) | Error::Auth(_) => Class::Auth,
            Error::WrongFabric { .. }
            | Error::Version { .. }
            | Error::BadMagic
            | Error::Frame(_)
            | Error::PeerMisbehaved(_) => Class::Protocol,
            Error::Remote { code, .. } => match *code {
                ErrorCode::AUTH => Class::Auth,
                ErrorCode::PROTOCOL | ErrorCode::VERSION | ErrorCode::FLOW_CONTROL => Class::Protocol,
                ErrorCode::TIMEOUT => Class::Timeout,
                ErrorCode::LIMIT => Class::Limit,
                _ => Class::Connection,
            },
            Error::Reset { .. } | Error::ConnectionLost(_) | Error::Closed | Error::Fabric { .. } => Class::Connection,
            Error::Timeout(_) => Class::Timeout,
            Error::Limit(_) => Class::Limit,
            Error::Rejected { reason, .. } => reason.class(),
            Error::Io(e) => Class::of_io(e.kind()),
        }
    }

    /// The I/O error's kind, when this is one.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            Error::Io(e) => Some(e.kind()),
            _ => None,
        }
    }
}

/// The library's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_numbers_are_stable_and_read_back() {
        for (i, class) in Class::ALL.iter().enumerate() {
            assert_eq!(usize::from(class.number()), i + 1);
            assert_eq!(Class::from_number(class.number()), *class);
        }
        assert_eq!(Class::from_number(0), Class::Failure);
        assert_eq!(Class::from_number(200), Class::Failure);
    }

    #[test]
    fn errors_fall_in_the_class_a_caller_acts_on() {
        let refused = Error::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        let full = Error::from(io::Error::from(io::ErrorKind::StorageFull));
        let cases = [
            (Error::Key("empty".into()), Class::Auth),
            (Error::Rejected { peer: "p".into(), reason: Box::new(Error::Auth("wrong key")) }, Class::Auth),
            (Error::Version { ours: 1, theirs: 2 }, Class::Protocol),
            (Error::Remote { code: ErrorCode::TIMEOUT, message: String::new() }, Class::Timeout),
            (Error::Remote { code: ErrorCode::SHUTDOWN, message: String::new() }, Class::Connection),
            (Error::Limit(Limit::Streams(4)), Class::Limit),
            (refused, Class::Connection),
            (full, Class::Io),
        ];
        for (e, class) in cases {
            assert_eq!(e.class(), class, "{e}");
        }
    }
}
