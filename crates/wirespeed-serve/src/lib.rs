#![deny(missing_docs, unreachable_pub)]
//! The `wirespeed serve` service as a library, for the CLI and the Python package: every
//! Arrow IPC and Parquet file under a directory is a flight, uploads land in it whole or not
//! at all, and an optional cache keeps decoded tables in memory (shared, on the shm plane,
//! with clients that map them).
//!
//! - `dir`: the [`DirService`] handler; `upload`: one upload in progress; `cache`: the table
//!   cache; `format`: which files are which; `ticket`: tickets, and their expiry.

#![forbid(unsafe_code)]

mod cache;
mod dir;
mod format;
mod ticket;
mod upload;

pub use dir::DirService;
