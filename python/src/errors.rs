//! Rust's typed errors as the package's exception classes, which the pure-Python layer
//! defines (`wirespeed._errors`, `wirespeed._flight_base`) so that they can also derive from
//! Python's own classes and pyarrow's. Each carries the CLI's exit code for its class.

use pyo3::prelude::*;
use wirespeed_files::FilesError;
use wirespeed_files::error::FailClass;

/// An instance of `module.class` with `message`.
pub fn raise(module: &str, class: &str, message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| {
        let made = py.import(module).and_then(|m| m.getattr(class)).and_then(|c| c.call1((message,)));
        match made {
            Ok(exception) => PyErr::from_value(exception),
            Err(e) => e,
        }
    })
}

/// As [`raise`], for a Flight error class, with its `extra_info`.
fn raise_flight(class: &str, message: String, extra_info: &[u8]) -> PyErr {
    let e = raise("wirespeed._flight_base", class, message);
    if !extra_info.is_empty() {
        Python::attach(|py| e.value(py).setattr("extra_info", pyo3::types::PyBytes::new(py, extra_info)).ok());
    }
    e
}

fn core(class: &str, message: impl Into<String>) -> PyErr {
    raise("wirespeed._errors", class, message)
}

pub fn usage(message: impl Into<String>) -> PyErr {
    core("UsageError", message)
}

/// The class of a core error, by what a caller can do about it.
fn transport_class(e: &wirespeed::Error) -> &'static str {
    use wirespeed::Error as E;
    match e {
        E::Auth(_) => "AuthenticationError",
        E::Rejected { reason, .. } => transport_class(reason),
        E::Timeout(_) => "TimeoutError",
        E::Url { .. } | E::Key(_) | E::Usage(_) => "UsageError",
        E::WrongFabric { .. } | E::Version { .. } | E::BadMagic | E::Frame(_) | E::PeerMisbehaved(_) | E::Limit(_) => {
            "ProtocolError"
        }
        _ => "ConnectionError",
    }
}

pub fn transport(e: wirespeed::Error) -> PyErr {
    core(transport_class(&e), e.to_string())
}

pub fn files(e: FilesError) -> PyErr {
    core(files_class(&e), e.to_string())
}

fn files_class(e: &FilesError) -> &'static str {
    match e {
        FilesError::Transport(w) => transport_class(w),
        FilesError::Io { .. } | FilesError::Changed { .. } | FilesError::Remote { class: FailClass::Io, .. } => {
            "FileError"
        }
        FilesError::Checksum { .. } | FilesError::Remote { class: FailClass::Checksum, .. } => "ChecksumError",
        FilesError::Sealing(_) | FilesError::Remote { class: FailClass::Sealing, .. } => "AuthenticationError",
        FilesError::Usage(_) => "UsageError",
        FilesError::PeerMisbehaved(_) | FilesError::UnsafePath(_) => "ProtocolError",
        // The agent's exit status is the CLI's code for its class.
        FilesError::Agent { exit, .. } => match exit {
            2 => "UsageError",
            3 => "AuthenticationError",
            4 => "ConnectionError",
            5 => "FileError",
            6 => "ChecksumError",
            _ => "Error",
        },
        FilesError::Unreachable { error, .. } => files_class(error),
        _ => "Error",
    }
}

/// A Flight error as the `wirespeed.flight` class for its status code (defined in
/// `wirespeed._flight_base`), named as pyarrow
/// names them.
pub fn flight(e: wirespeed_flight::Error) -> PyErr {
    use wirespeed_flight::Code;
    let class = match e.code() {
        Code::Unauthenticated => "FlightUnauthenticatedError",
        Code::PermissionDenied => "FlightUnauthorizedError",
        Code::Unavailable => "FlightUnavailableError",
        Code::DeadlineExceeded => "FlightTimedOutError",
        Code::Cancelled => "FlightCancelledError",
        Code::NotFound => "FlightNotFoundError",
        Code::InvalidArgument => "FlightInvalidArgumentError",
        Code::Unimplemented => "FlightNotImplementedError",
        Code::AlreadyExists => "FlightAlreadyExistsError",
        Code::Internal | Code::DataLoss => "FlightInternalError",
        _ => "FlightServerError",
    };
    raise_flight(class, e.message(), &e.details())
}
