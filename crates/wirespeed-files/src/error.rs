//! Typed errors of file transfers.

use std::path::Path;

use crate::proto::Violation;

/// What kind of failure a `Fail` reports, so the far side's exit code matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailClass {
    Other = 1,
    /// Encryption was refused or a sealed message failed to open.
    Sealing = 3,
    Io = 5,
    Checksum = 6,
}

impl FailClass {
    pub fn from_u8(v: u8) -> Self {
        match v {
            3 => FailClass::Sealing,
            5 => FailClass::Io,
            6 => FailClass::Checksum,
            _ => FailClass::Other,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error(transparent)]
    Transport(#[from] wirespeed::Error),
    /// Not a `source`: the message already ends with it, and `{:#}` would repeat it.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("copy protocol: {0}")]
    PeerMisbehaved(#[from] Violation),
    /// A thread of this side panicked: a bug here, not the peer's doing.
    #[error("internal error: {0}")]
    Internal(&'static str),
    #[error("{path}: chunk {index} failed its checksum")]
    Checksum { path: String, index: u32 },
    #[error("refusing an unsafe path from the peer: {0:?}")]
    UnsafePath(String),
    #[error("{path}: the source changed while it was read")]
    Changed { path: String },
    #[error("{0}")]
    Usage(String),
    #[error("encryption: {0}")]
    Sealing(String),
    /// Another part of the transfer failed first; its error is the one to report.
    #[error("stopped")]
    Stopped,
    #[error("the other side failed: {message}")]
    Remote { class: FailClass, message: String },
    /// A remote end started over ssh failed or could not be started, in its own words where
    /// it said any. `exit` is the CLI's exit code for it: the agent's own status, or 4
    /// (connection) when ssh failed.
    #[error("{message}")]
    Agent { exit: i32, message: String },
    /// An agent started, but its address could not be reached.
    #[error("cannot reach the agent on {host} at {addr}: {error}")]
    Unreachable { host: String, addr: String, error: Box<FilesError> },
}

impl FilesError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        FilesError::Io { path: path.display().to_string(), error: source }
    }

    /// How this failure is reported to the other side.
    pub fn class(&self) -> FailClass {
        match self {
            FilesError::Io { .. } | FilesError::Changed { .. } => FailClass::Io,
            FilesError::Checksum { .. } => FailClass::Checksum,
            FilesError::Sealing(_) => FailClass::Sealing,
            FilesError::Remote { class, .. } => *class,
            _ => FailClass::Other,
        }
    }

    /// How much this error says about why a transfer failed. When several parts of a
    /// transfer fail, most of them only because another did, the most telling is reported.
    fn telling(&self) -> u8 {
        match self {
            FilesError::Stopped => 0,
            // The peer gave up on a stream; its control stream says why.
            FilesError::Transport(wirespeed::Error::Reset { code: wirespeed::ErrorCode::CANCELLED, .. }) => 1,
            FilesError::Transport(_) => 2,
            FilesError::Remote { .. } => 3,
            _ => 4,
        }
    }

    /// True when the peer only cancelled a stream, and its own account is still to come.
    pub fn is_peer_cancel(&self) -> bool {
        self.telling() == 1
    }

    /// The more telling of two failures; the first when they tell as much.
    pub fn or_cause(self, other: FilesError) -> FilesError {
        if other.telling() > self.telling() { other } else { self }
    }
}

pub type Result<T, E = FilesError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_telling_failure_wins_and_ties_keep_the_first() {
        let cancel =
            || FilesError::Transport(wirespeed::Error::Reset { stream: 3, code: wirespeed::ErrorCode::CANCELLED });
        let lost = || FilesError::Transport(wirespeed::Error::ConnectionLost("gone".into()));
        let remote = || FilesError::Remote { class: FailClass::Io, message: "disk full".into() };
        let local = || FilesError::Changed { path: "f".into() };
        let order = [|| FilesError::Stopped, cancel, lost, remote, local];
        for (i, weaker) in order.iter().enumerate() {
            for stronger in &order[i + 1..] {
                let want = stronger().to_string();
                assert_eq!(weaker().or_cause(stronger()).to_string(), want);
                assert_eq!(stronger().or_cause(weaker()).to_string(), want);
            }
        }
        assert!(cancel().is_peer_cancel() && !lost().is_peer_cancel());
        let first = FilesError::Changed { path: "first".into() };
        assert!(first.or_cause(local()).to_string().contains("first"));
    }
}
