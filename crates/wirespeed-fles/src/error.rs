//! What can go wrong building timeslices, as a library reports it.

use thiserror::Error;

#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum FlesError {
    /// Bytes that do not hold what FLESnet's formats say they should.
    #[error("malformed {what}: {why}")]
    Malformed { what: &'static str, why: String },
    /// A microslice whose content does not match the CRC its descriptor gives.
    #[error("microslice {idx} of input {input}: CRC-32C {found:#010x}, the descriptor says {expected:#010x}")]
    Crc { input: u16, idx: u64, expected: u32, found: u32 },
    /// A microslice of FLESnet's test pattern whose content departs from it.
    #[error("microslice {idx}: not FLESnet's ramp pattern: {why}")]
    Pattern { idx: u64, why: String },
    /// A setting that cannot work (zero compute nodes, a ring smaller than one component).
    #[error("{0}")]
    Config(String),
    /// A peer broke the protocol: a pointer backwards, a timeslice it was never sent.
    #[error("{0}")]
    Protocol(String),
    /// The network: a peer gone, a connection refused, a wait that timed out.
    #[error("{0}")]
    Net(String),
    /// GPU memory: no GPU, a driver call that failed, a kernel that did not compile.
    #[error("{0}")]
    Gpu(String),
    /// FLESnet's shared-memory interface: a segment that cannot be made or opened.
    #[error("shared memory: {0}")]
    Shm(String),
    #[error("timeslice archive: {0}")]
    Archive(String),
}

pub type Result<T> = std::result::Result<T, FlesError>;

pub(crate) fn malformed(what: &'static str, why: impl Into<String>) -> FlesError {
    FlesError::Malformed { what, why: why.into() }
}
