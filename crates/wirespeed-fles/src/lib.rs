#![deny(missing_docs, unreachable_pub)]
//! wirespeed timeslice building: FLESnet's data model, and the pieces that gather every
//! input's contribution to a time interval on one compute node.
//!
//! - [`model`]: microslice and component layouts, byte for byte as FLESnet's.
//! - [`source`] and [`output`]: FLESnet's archives and generator in, archives and Arrow out.
//! - [`run`]: a run's inputs and compute nodes on threads over any fabric; [`frames`], the
//!   frame memory (host or GPU) timeslices are built into.
//! - [`consumers`]: FLESnet's shared-memory interface, which its consumers attach to.
//! - [`monitor`]: metrics, to FLESnet's monitor sinks or Prometheus.
//!
//! The nodes, schedulers, messages and simulator (`node`, `sched`, `wire`, `sim`) are
//! internal, hidden from these docs: what the CLI drives, outside the API and semver.

pub mod consumers;
pub mod error;
pub mod frames;
pub mod model;
pub mod monitor;
#[doc(hidden)]
pub mod node;
pub mod output;
pub mod run;

pub use error::{FlesError, Result};
#[doc(hidden)]
pub mod sched;
#[cfg(feature = "simgrid")]
#[doc(hidden)]
pub mod sim;
pub mod source;
#[doc(hidden)]
pub mod wire;
