//! Where complete timeslices go: FLESnet's timeslice archives, or Arrow IPC files.

pub mod arrow;
pub mod tsa;

pub use arrow::ArrowWriter;
pub use tsa::{StoredTimeslice, TsaWriter};
