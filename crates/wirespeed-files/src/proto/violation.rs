//! What a copy-protocol peer can do wrong. Each is fatal for the transfer and is reported to
//! the peer in a `Fail`.

/// A peer broke the copy protocol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    #[error("a truncated message")]
    Truncated,
    #[error("trailing bytes after a message")]
    TrailingBytes,
    #[error("a length field runs past the message")]
    LengthPastEnd,
    #[error("unknown message tag {0}")]
    UnknownTag(u8),
    #[error("unknown entry kind {0}")]
    UnknownEntryKind(u8),
    #[error("an exclude pattern is not UTF-8")]
    PatternNotUtf8,
    #[error("the source's exclude patterns: {0}")]
    BadExclude(String),
    #[error("a body of {len} bytes; at most {max} expected")]
    BodyTooLarge { len: u64, max: u64 },
    #[error("expected {expected}, got {got}")]
    Expected { expected: &'static str, got: &'static str },
    #[error("unexpected {got} {context}")]
    Unexpected { got: &'static str, context: &'static str },
    #[error("the peer ended the control stream early")]
    EndedEarly,
    #[error("the peer sent more after {0}")]
    MoreAfter(&'static str),
    #[error("copy protocol version {theirs}; this side speaks {ours}")]
    Version { ours: u16, theirs: u16 },
    #[error("chunk size {0} is out of range")]
    ChunkSize(u32),
    #[error("unknown copy flags {0:#x}")]
    UnknownFlags(u16),
    #[error("inline bytes run short")]
    InlineShort,
    #[error("file {0} has more chunks than there are chunk numbers")]
    TooManyChunks(u64),
    #[error("file id {0} sent twice")]
    FileTwice(u64),
    #[error("data for file {0}, which was not asked for")]
    UnknownFile(u64),
    #[error("the sink asks for file {0}, which is not on offer")]
    NotOffered(u64),
    #[error("file {0}: finished twice")]
    FinishedTwice(u64),
    #[error("file {id}: chunk {index} {fault}")]
    Chunk { id: u64, index: u32, fault: ChunkFault },
    #[error("file {0}: Eof for a file of known size")]
    EofOfSizedFile(u64),
    #[error("file {id}: Eof at {size} bytes does not match the chunks sent")]
    EofMismatch { id: u64, size: u64 },
    #[error("{0} files never arrived in full")]
    FilesMissing(u64),
    #[error("a wrapped message: {0}")]
    Envelope(&'static str),
}

/// What is wrong with one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkFault {
    #[error("is unknown or repeated")]
    UnknownOrRepeated,
    #[error("is out of order")]
    OutOfOrder,
    #[error("waited too long for the chunks before it")]
    Starved,
    #[error("is not data")]
    NotData,
    #[error("has the wrong length")]
    WrongLength,
    #[error("is not followed by its checksum")]
    NoChecksum,
    #[error("carries unexpected bytes")]
    UnexpectedBytes,
    #[error("cannot be in a stream output already")]
    SameInStream,
}

impl From<wirespeed::proto::codec::Truncated> for Violation {
    fn from(_: wirespeed::proto::codec::Truncated) -> Self {
        Violation::Truncated
    }
}
