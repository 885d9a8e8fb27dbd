//! Where an input's microslices come from: the pattern generator, or a timeslice archive
//! replayed.

pub mod archive;
pub(crate) mod boost_in;
pub mod msa;
pub mod pattern;

pub use archive::{ArchivedTimeslice, TsaReader};
pub use msa::MsaReader;
pub use pattern::Pattern;
