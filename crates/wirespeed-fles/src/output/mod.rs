//! Where complete timeslices go: FLESnet's timeslice archives.

pub mod tsa;

pub use tsa::{StoredTimeslice, TsaWriter};
