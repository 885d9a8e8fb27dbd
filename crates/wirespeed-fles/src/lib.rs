#![warn(missing_docs, unreachable_pub)]
//! wirespeed timeslice building: FLESnet's data model, and the pieces that gather every
//! input's contribution to a time interval on one compute node.
//!
//! - [`model`]: microslice and component layouts, byte for byte as FLESnet's.

pub mod error;
pub mod frames;
pub mod ipc;
pub mod model;
pub mod monitor;
pub mod node;
pub mod output;
pub mod run;

pub use error::{FlesError, Result};
pub mod sched;
#[cfg(feature = "simgrid")]
pub mod sim;
pub mod source;
pub mod wire;
