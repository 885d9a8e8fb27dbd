//! Distinct exit codes, so scripts can tell an auth failure from a dead network.

use wirespeed::Error;
use wirespeed_files::FilesError;
use wirespeed_files::proto::FailClass;

pub const FAILURE: i32 = 1;
pub const USAGE: i32 = 2;
pub const AUTH: i32 = 3;
pub const CONNECTION: i32 = 4;
pub const IO: i32 = 5;
pub const CHECKSUM: i32 = 6;

pub fn code_for(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if let Some(p) = cause.downcast_ref::<crate::tools::pipe::PipelineFailed>() {
            return p.code;
        }
        if let Some(f) = cause.downcast_ref::<FilesError>() {
            return match f {
                FilesError::Transport(w) => transport_code(w),
                FilesError::Io { .. } | FilesError::Changed { .. } => IO,
                FilesError::Checksum { .. } => CHECKSUM,
                FilesError::Sealing(_) | FilesError::Remote { class: FailClass::Sealing, .. } => AUTH,
                FilesError::Remote { class: FailClass::Io, .. } => IO,
                FilesError::Remote { class: FailClass::Checksum, .. } => CHECKSUM,
                FilesError::Usage(_) => USAGE,
                _ => FAILURE,
            };
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
