//! Where an input's microslices come from: the pattern generator (and, later, archives).

pub mod pattern;

pub use pattern::Pattern;
