//! Where complete timeslices go: FLESnet's timeslice archives, or Arrow IPC files; and
//! FLESnet's microslice archives, which inputs replay.

pub mod arrow;
pub mod msa;
pub mod tsa;

pub use arrow::ArrowWriter;
pub use msa::MsaWriter;
pub use tsa::{StoredTimeslice, TsaWriter};
