//! Typed errors of file transfers.

use std::path::Path;

use crate::proto::Violation;
pub use wirespeed::Class;

/// Everything a file transfer can fail with. [`FilesError::class`] says what kind of failure it is, which the other side hears of too.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilesError {
    /// The connection failed.
    #[error(transparent)]
    Connection(#[from] wirespeed::Error),
    /// Not a `source`: the message already ends with it, and `{:#}` would repeat it.
    #[error("{path}: {error}")]
    Io {
        /// The path.
        path: String,
        /// The system's error.
        error: std::io::Error,
    },
    /// The peer broke the copy protocol.
    #[error("copy protocol: {0}")]
    PeerMisbehaved(#[from] Violation),
    /// A thread of this side panicked: a bug here, not the peer's doing.
    #[error("internal error: {0}")]
    Internal(&'static str),
    /// A chunk that failed its checksum, and was not kept.
    #[error("{path}: chunk {index} failed its checksum")]
    Checksum {
        /// The file.
        path: String,
        /// The chunk.
        index: u32,
    },
    /// A path from the peer that would land outside the destination.
    #[error("refusing an unsafe path from the peer: {0:?}")]
    UnsafePath(String),
    /// A source file that changed while it was read.
    #[error("{path}: the source changed while it was read")]
    Changed {
        /// The file.
        path: String,
    },
    /// A bad argument or option.
    #[error("{0}")]
    Usage(String),
    /// Encryption was refused, or a sealed message did not open.
    #[error("encryption: {0}")]
    Sealing(String),
    /// Another part of the transfer failed first; its error is the one to report.
    #[error("stopped")]
    Stopped,
    #[error("the other side failed: {message}")]
    /// The other side's failure, of the class it reported.
    Remote {
        /// The kind of failure the other side reported.
        class: Class,
        /// Its own words.
        message: String,
    },
    /// A remote end started over ssh failed or could not be started, in its own words where
    /// it said any. `exit` is the CLI's exit code for it: the agent's own status, or 4
    /// (connection) when ssh failed.
    #[error("{message}")]
    Agent {
        /// The exit code to report.
        exit: i32,
        /// What went wrong, in the agent's words where it said any.
        message: String,
    },
    /// An agent started, but its address could not be reached.
    #[error("cannot reach the agent on {host} at {addr}: {error}")]
    Unreachable {
        /// The host the agent runs on.
        host: String,
        /// The address it gave.
        addr: String,
        /// Why it could not be reached.
        error: Box<FilesError>,
    },
}

impl FilesError {
    /// A failure of `path` with the system's error.
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        FilesError::Io { path: path.display().to_string(), error: source }
    }

    /// What kind of failure this is; the other side hears of it as this class too.
    pub fn class(&self) -> Class {
        match self {
            FilesError::Connection(e) => e.class(),
            FilesError::Io { error, .. } => match Class::of_io(error.kind()) {
                Class::Usage => Class::Io, // a path is input, not an argument
                class => class,
            },
            FilesError::Changed { .. } => Class::Io,
            FilesError::Checksum { .. } => Class::Checksum,
            FilesError::Sealing(_) => Class::Auth,
            FilesError::PeerMisbehaved(_) | FilesError::UnsafePath(_) => Class::Protocol,
            FilesError::Usage(_) => Class::Usage,
            FilesError::Remote { class, .. } => *class,
            // The agent's exit status is the CLI's code for its class.
            FilesError::Agent { exit, .. } => {
                Class::ALL.into_iter().find(|c| c.exit_code() == *exit).unwrap_or(Class::Failure)
            }
            FilesError::Unreachable { error, .. } => error.class(),
            FilesError::Internal(_) | FilesError::Stopped => Class::Failure,
        }
    }

    /// How much this error says about why a transfer failed. When several parts of a
    /// transfer fail, most of them only because another did, the most telling is reported.
    fn telling(&self) -> u8 {
        match self {
            FilesError::Stopped => 0,
            // The peer gave up on a stream; its control stream says why.
            FilesError::Connection(wirespeed::Error::Reset { code: wirespeed::ErrorCode::CANCELLED, .. }) => 1,
            FilesError::Connection(_) => 2,
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

/// The result of a file transfer.
pub type Result<T, E = FilesError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_telling_failure_wins_and_ties_keep_the_first() {
        let cancel =
            || FilesError::Connection(wirespeed::Error::Reset { stream: 3, code: wirespeed::ErrorCode::CANCELLED });
        let lost = || FilesError::Connection(wirespeed::Error::ConnectionLost("gone".into()));
        let remote = || FilesError::Remote { class: Class::Io, message: "disk full".into() };
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
