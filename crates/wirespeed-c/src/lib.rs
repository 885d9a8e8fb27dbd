#![deny(missing_docs)]
//! wirespeed's Flight client and server as a C library (`include/wirespeed.h`), for C and for
//! every language that calls C: batches cross as Arrow C streams, so C++, Go, Java, DuckDB and
//! Polars read them with their own Arrow, and over the shared-memory plane without a copy.
//!
//! The ABI follows ADBC's rules: opaque handles (numbers in a table, so a released one is an
//! error, not a crash), every call returns a [`WsStatus`] and fills a [`WsError`], no panic
//! crosses the boundary, handles may be shared between threads, and memory leaves only with a
//! release callback (Arrow's, or [`WsBuffer`]'s).

mod args;
mod buffers;
mod callbacks;
mod cancel;
mod client;
mod error;
mod handles;
mod options;
mod server;
mod streams;

pub use buffers::{WsBuffer, WsBuffers};
pub use callbacks::WsHandler;
pub use cancel::WsCancel;
pub use client::WsClient;
pub use error::{WsError, WsStatus};
pub use options::WsOption;
pub use server::WsServer;

/// The library's version, `MAJOR.MINOR.PATCH` (static).
#[unsafe(no_mangle)]
pub extern "C" fn ws_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
