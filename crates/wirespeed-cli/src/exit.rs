//! Distinct exit codes, so scripts can tell an auth failure from a dead network.

use wirespeed::Error;

pub const FAILURE: i32 = 1;
pub const AUTH: i32 = 3;
pub const CONNECTION: i32 = 4;
pub const IO: i32 = 5;

pub fn code_for(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if let Some(w) = cause.downcast_ref::<Error>() {
            return match w {
                Error::Auth(_) | Error::Key(_) => AUTH,
                Error::Rejected { reason, .. } if matches!(**reason, Error::Auth(_)) => AUTH,
                Error::ConnectionLost(_) | Error::Timeout(_) | Error::Closed | Error::Version { .. } => CONNECTION,
                Error::Io(_) => IO,
                _ => FAILURE,
            };
        }
        if cause.downcast_ref::<std::io::Error>().is_some() {
            return IO;
        }
    }
    FAILURE
}
