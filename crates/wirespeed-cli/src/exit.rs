//! Distinct exit codes, so scripts can tell an auth failure from a dead network.

use wirespeed::Error;
use wirespeed_files::FilesError;
use wirespeed_files::error::FailClass;

pub const FAILURE: i32 = 1;
pub const USAGE: i32 = 2;
pub const AUTH: i32 = 3;
pub const CONNECTION: i32 = 4;
pub const IO: i32 = 5;
pub const CHECKSUM: i32 = 6;

/// A failure that already knows its exit code: a pipeline stage's status, or a remote
/// agent's.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Coded {
    pub code: i32,
    pub message: String,
}

/// The error and its causes on one line, each said once: a cause whose words the line
/// already holds (an error that quotes its source) is left out.
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if line.contains(&cause) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line
}

pub fn code_for(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<Coded>() {
            return c.code;
        }
        if let Some(f) = cause.downcast_ref::<FilesError>() {
            return files_code(f);
        }
        if let Some(f) = cause.downcast_ref::<wirespeed_flight::Error>() {
            return match f {
                wirespeed_flight::Error::Transport(w) => transport_code(w),
                other => match other.code() {
                    wirespeed_flight::Code::Unauthenticated | wirespeed_flight::Code::PermissionDenied => AUTH,
                    wirespeed_flight::Code::Unavailable | wirespeed_flight::Code::DeadlineExceeded => CONNECTION,
                    wirespeed_flight::Code::InvalidArgument => USAGE,
                    _ => FAILURE,
                },
            };
        }
        if let Some(w) = cause.downcast_ref::<Error>() {
            return transport_code(w);
        }
        if cause.downcast_ref::<std::io::Error>().is_some() {
            return IO;
        }
    }
    FAILURE
}

fn files_code(f: &FilesError) -> i32 {
    match f {
        FilesError::Transport(w) => transport_code(w),
        FilesError::Io { .. } | FilesError::Changed { .. } => IO,
        FilesError::Checksum { .. } => CHECKSUM,
        FilesError::Sealing(_) | FilesError::Remote { class: FailClass::Sealing, .. } => AUTH,
        FilesError::Remote { class: FailClass::Io, .. } => IO,
        FilesError::Remote { class: FailClass::Checksum, .. } => CHECKSUM,
        FilesError::Usage(_) => USAGE,
        FilesError::Agent { exit, .. } => *exit,
        FilesError::Unreachable { error, .. } => files_code(error),
        _ => FAILURE,
    }
}

fn transport_code(w: &Error) -> i32 {
    match w {
        Error::Auth(_) | Error::Key(_) => AUTH,
        Error::Rejected { reason, .. } if matches!(**reason, Error::Auth(_)) => AUTH,
        Error::ConnectionLost(_)
        | Error::Timeout(_)
        | Error::Closed
        | Error::Version { .. }
        | Error::WrongFabric { .. } => CONNECTION,
        Error::Io(_) => IO,
        _ => FAILURE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_says_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "cannot listen on :7470: in use");
        let e = anyhow::Error::from(FilesError::Transport(Error::from(io))).context("starting the receiver");
        assert_eq!(one_line(&e), "starting the receiver: I/O: cannot listen on :7470: in use");
        assert_eq!(code_for(&e), IO);
        let coded = anyhow::Error::from(Coded { code: 7, message: "stage 2 failed".into() });
        assert_eq!((one_line(&coded).as_str(), code_for(&coded)), ("stage 2 failed", 7));
    }
}
