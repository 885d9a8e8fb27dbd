//! Rust's typed errors as the package's exception classes, which the pure-Python layer
//! defines (`wirespeed._errors`, `wirespeed._flight_base`) so that they can also derive from
//! Python's own classes and pyarrow's. Each carries the CLI's exit code for its class.

use pyo3::prelude::*;
use wirespeed::Class;
use wirespeed_files::FilesError;

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

/// The package's exception class for each [`Class`]: with [`Class::exit_code`], the one
/// table `wirespeed._errors` follows (a test holds each class's `exit_code` to it).
pub const CLASSES: [(Class, &str); 11] = [
    (Class::Failure, "Error"),
    (Class::Usage, "UsageError"),
    (Class::Auth, "AuthenticationError"),
    (Class::Connection, "ConnectionFailedError"),
    (Class::Io, "FileError"),
    (Class::Checksum, "ChecksumError"),
    (Class::Timeout, "TimedOutError"),
    (Class::Protocol, "ProtocolError"),
    (Class::Limit, "LimitError"),
    (Class::NotFound, "NotFoundError"),
    (Class::Gpu, "GpuError"),
];

/// The package's class for `class` (a newer class than the table knows is an `Error`).
fn class_name(class: Class) -> &'static str {
    CLASSES.iter().find(|(c, _)| *c == class).map_or("Error", |(_, name)| name)
}

/// An instance of the package's class for `class`, with `message`.
pub fn of_class(class: Class, message: impl Into<String>) -> PyErr {
    raise("wirespeed._errors", class_name(class), message)
}

/// `(class, exit code)` for every class: what `wirespeed._errors` must agree with.
#[pyfunction]
pub fn _error_classes() -> Vec<(&'static str, i32)> {
    CLASSES.iter().map(|(class, name)| (*name, class.exit_code())).collect()
}

pub fn usage(message: impl Into<String>) -> PyErr {
    of_class(Class::Usage, message)
}

pub fn transport(e: wirespeed::Error) -> PyErr {
    of_class(e.class(), e.to_string())
}

pub fn files(e: FilesError) -> PyErr {
    of_class(e.class(), e.to_string())
}

/// The `wirespeed.flight` class (defined in `wirespeed._flight_base`) for a status code, named
/// as pyarrow names them.
fn flight_class(code: wirespeed_flight::Code) -> &'static str {
    use wirespeed_flight::Code;
    match code {
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
        Code::ResourceExhausted => "FlightResourceExhaustedError",
        Code::FailedPrecondition => "FlightFailedPreconditionError",
        Code::OutOfRange => "FlightOutOfRangeError",
        Code::Aborted => "FlightAbortedError",
        _ => "FlightServerError",
    }
}

/// A Flight error as the `wirespeed.flight` class for its status code, on every plane and
/// on gRPC alike.
pub fn flight(e: wirespeed_flight::Error) -> PyErr {
    raise_flight(flight_class(e.code()), e.message(), &e.details())
}

/// `(Flight class, wirespeed class)` for every status code: each Flight class must also be
/// the package's class for the code's [`Class`].
#[pyfunction]
pub fn _flight_classes() -> Vec<(&'static str, &'static str)> {
    (0..=16)
        .map(|n| {
            let code = wirespeed_flight::Code::from_i32(n);
            (flight_class(code), class_name(wirespeed_flight::error::class_of(code)))
        })
        .collect()
}
