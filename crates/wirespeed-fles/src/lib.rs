#![deny(missing_docs, unreachable_pub)]
//! wirespeed timeslice building: FLESnet's data model, and the pieces that gather every
//! input's contribution to a time interval on one compute node.
//!
//! - [`model`]: microslice and component layouts, byte for byte as FLESnet's.

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
