//! Distinct exit codes, so scripts can tell an auth failure from a dead network.

use wirespeed::{Class, Error};
use wirespeed_files::FilesError;

pub const FAILURE: i32 = 1;

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

/// The exit status for `e`: its own where it carries one, else its class's
/// ([`Class::exit_code`]), the same table Python's exception classes come from.
pub fn code_for(e: &anyhow::Error) -> i32 {
    for cause in e.chain() {
        if let Some(c) = cause.downcast_ref::<Coded>() {
            return c.code;
        }
        if let Some(class) = class_of(cause) {
            return class.exit_code();
        }
    }
    FAILURE
}

/// The class of one of the library's errors, or of an I/O error.
fn class_of(cause: &(dyn std::error::Error + 'static)) -> Option<Class> {
    if let Some(f) = cause.downcast_ref::<FilesError>() {
        return Some(f.class());
    }
    if let Some(f) = cause.downcast_ref::<wirespeed_flight::Error>() {
        return Some(f.class());
    }
    if let Some(f) = cause.downcast_ref::<wirespeed_fles::FlesError>() {
        return Some(f.class());
    }
    if let Some(w) = cause.downcast_ref::<Error>() {
        return Some(w.class());
    }
    cause.downcast_ref::<std::io::Error>().map(|e| Class::of_io(e.kind()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_says_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "cannot listen on :7470: in use");
        let e = anyhow::Error::from(FilesError::Connection(Error::from(io))).context("starting the receiver");
        assert_eq!(one_line(&e), "starting the receiver: I/O: cannot listen on :7470: in use");
        assert_eq!(code_for(&e), 5);
        let coded = anyhow::Error::from(Coded { code: 7, message: "stage 2 failed".into() });
        assert_eq!((one_line(&coded).as_str(), code_for(&coded)), ("stage 2 failed", 7));
    }

    /// The exit codes docs/FLIGHT.md promises, through every layer's errors.
    #[test]
    fn every_layer_exits_with_its_class_code() {
        let io = |kind| Error::from(std::io::Error::from(kind));
        let cases: Vec<(anyhow::Error, i32)> = vec![
            (Error::Key("empty".into()).into(), 3),
            (Error::Auth("wrong key").into(), 3),
            (Error::Timeout(std::time::Duration::from_secs(1)).into(), 4),
            (io(std::io::ErrorKind::ConnectionRefused).into(), 4),
            (FilesError::Connection(io(std::io::ErrorKind::ConnectionReset)).into(), 4),
            (io(std::io::ErrorKind::StorageFull).into(), 5),
            (FilesError::Checksum { path: "f".into(), index: 0 }.into(), 6),
            (FilesError::Remote { class: Class::Io, message: "disk full".into() }.into(), 5),
            (FilesError::Agent { exit: 3, message: "wrong key".into() }.into(), 3),
            (FilesError::Usage("no such option".into()).into(), 2),
            (wirespeed_flight::Error::unauthenticated("no").into(), 3),
            (wirespeed_flight::Error::invalid_argument("no").into(), 2),
            (wirespeed_flight::Error::not_found("no").into(), FAILURE),
            (wirespeed_flight::Error::Connection(io(std::io::ErrorKind::BrokenPipe)).into(), 4),
            (anyhow::anyhow!("anything else"), FAILURE),
        ];
        for (e, code) in cases {
            assert_eq!(code_for(&e), code, "{e:#}");
        }
        for class in Class::ALL {
            assert!((1..=6).contains(&class.exit_code()), "{class:?}");
        }
    }
}
