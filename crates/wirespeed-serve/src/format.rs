//! A flight's file: its format, told by its extension, and file errors as Flight statuses.

use std::path::Path;

use wirespeed_flight::Error;
use wirespeed_flight::error::Quote;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    IpcFile,
    IpcStream,
    Parquet,
}

impl Format {
    /// As a FlightInfo's app_metadata names it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Format::IpcFile => "arrow-file",
            Format::IpcStream => "arrow-stream",
            Format::Parquet => "parquet",
        }
    }
}

pub(crate) fn format_of(path: &Path) -> Option<Format> {
    match path.extension()?.to_str()? {
        "arrow" | "feather" | "ipc" => Some(Format::IpcFile),
        "arrows" => Some(Format::IpcStream),
        "parquet" => Some(Format::Parquet),
        _ => None,
    }
}

/// A file error as the client sees it: naming the flight, never the server's paths.
pub(crate) fn io_error(name: &str, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::not_found(format!("no flight {}", Quote::str(name))),
        std::io::ErrorKind::PermissionDenied => Error::permission_denied(format!("{}: {e}", Quote::str(name))),
        _ => Error::internal(format!("{}: {e}", Quote::str(name))),
    }
}
