//! Where an input's microslices come from: the pattern generator, or a timeslice archive
//! replayed.

pub mod archive;
pub mod pattern;

pub use archive::{ArchivedTimeslice, TsaReader};
pub use pattern::Pattern;
