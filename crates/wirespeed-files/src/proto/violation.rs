//! What a copy-protocol peer can do wrong. Each is fatal for the transfer and is reported to
//! the peer in a `Fail`.

/// A peer broke the copy protocol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Violation {
    /// A truncated message.
    #[error("a truncated message")]
    Truncated,
    /// Trailing bytes after a message.
    #[error("trailing bytes after a message")]
    TrailingBytes,
    /// A length field runs past the message.
    #[error("a length field runs past the message")]
    LengthPastEnd,
    /// Unknown message tag `0`.
    #[error("unknown message tag {0}")]
    UnknownTag(u8),
    /// Unknown entry kind `0`.
    #[error("unknown entry kind {0}")]
    UnknownEntryKind(u8),
    /// An exclude pattern is not UTF-8.
    #[error("an exclude pattern is not UTF-8")]
    PatternNotUtf8,
    /// The source's exclude patterns: `0`.
    #[error("the source's exclude patterns: {0}")]
    BadExclude(String),
    /// A body of `len` bytes; at most `max` expected.
    #[error("a body of {len} bytes; at most {max} expected")]
    BodyTooLarge { len: u64, max: u64 },
    /// Expected `expected`, got `got`.
    #[error("expected {expected}, got {got}")]
    Expected { expected: &'static str, got: &'static str },
    /// Unexpected `got` `context`.
    #[error("unexpected {got} {context}")]
    Unexpected { got: &'static str, context: &'static str },
    /// The peer ended the control stream early.
    #[error("the peer ended the control stream early")]
    EndedEarly,
    /// The peer sent more after `0`.
    #[error("the peer sent more after {0}")]
    MoreAfter(&'static str),
    /// Copy protocol version `theirs`; this side speaks `ours`.
    #[error("copy protocol version {theirs}; this side speaks {ours}")]
    Version { ours: u16, theirs: u16 },
    /// Chunk size `0` is out of range.
    #[error("chunk size {0} is out of range")]
    ChunkSize(u32),
    /// Unknown copy flags `0`.
    #[error("unknown copy flags {0:#x}")]
    UnknownFlags(u16),
    /// Inline bytes run short.
    #[error("inline bytes run short")]
    InlineShort,
    /// File `0` has more chunks than there are chunk numbers.
    #[error("file {0} has more chunks than there are chunk numbers")]
    TooManyChunks(u64),
    /// File id `0` sent twice.
    #[error("file id {0} sent twice")]
    FileTwice(u64),
    /// Data for file `0`, which was not asked for.
    #[error("data for file {0}, which was not asked for")]
    UnknownFile(u64),
    /// The sink asks for file `0`, which is not on offer.
    #[error("the sink asks for file {0}, which is not on offer")]
    NotOffered(u64),
    /// File `0`: finished twice.
    #[error("file {0}: finished twice")]
    FinishedTwice(u64),
    /// File `id`: chunk `index` `fault`.
    #[error("file {id}: chunk {index} {fault}")]
    Chunk { id: u64, index: u32, fault: ChunkFault },
    /// File `0`: Eof for a file of known size.
    #[error("file {0}: Eof for a file of known size")]
    EofOfSizedFile(u64),
    /// File `id`: Eof at `size` bytes does not match the chunks sent.
    #[error("file {id}: Eof at {size} bytes does not match the chunks sent")]
    EofMismatch { id: u64, size: u64 },
    /// `0` files never arrived in full.
    #[error("{0} files never arrived in full")]
    FilesMissing(u64),
    /// A wrapped message: `0`.
    #[error("a wrapped message: {0}")]
    Envelope(&'static str),
}

/// What is wrong with one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ChunkFault {
    /// The chunk is unknown or repeated.
    #[error("is unknown or repeated")]
    UnknownOrRepeated,
    /// The chunk is out of order.
    #[error("is out of order")]
    OutOfOrder,
    /// The chunk waited too long for the chunks before it.
    #[error("waited too long for the chunks before it")]
    Starved,
    /// The chunk is not data.
    #[error("is not data")]
    NotData,
    /// The chunk has the wrong length.
    #[error("has the wrong length")]
    WrongLength,
    /// The chunk is not followed by its checksum.
    #[error("is not followed by its checksum")]
    NoChecksum,
    /// The chunk carries unexpected bytes.
    #[error("carries unexpected bytes")]
    UnexpectedBytes,
    /// The chunk cannot be in a stream output already.
    #[error("cannot be in a stream output already")]
    SameInStream,
}

impl From<wirespeed::proto::codec::Truncated> for Violation {
    fn from(_: wirespeed::proto::codec::Truncated) -> Self {
        Violation::Truncated
    }
}
