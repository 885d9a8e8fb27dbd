//! Copies to and from other hosts, as `wirespeed cp` and `wirespeed.cp` make them. The far end
//! is a `wirespeed agent` started over ssh; data goes straight between the two ends (between
//! two remote hosts when both are remote), never through ssh.
//!
//! An agent reads the transfer key from the first line of its standard input, listens (or
//! connects), and says on its standard output `WIRESPEED-AGENT <ip> <port>...`, for a dry
//! run's sink `WIRESPEED-ITEM <line>` for each change, and at the end `WIRESPEED-DONE`
//! followed by its summary. When its standard input closes it stops.

mod copy;
mod place;
mod ssh;

pub use copy::{AGENT_START, RemoteCopy, copy, option_args};
pub use place::{Place, split_host};
pub use ssh::{Agent, Ssh, Stderr};

/// An agent's first line: where it listens.
pub const GREETING: &str = "WIRESPEED-AGENT";
/// A dry run's line, with a space, before the line itself (see [`crate::Report`]).
pub const ITEM: &str = "WIRESPEED-ITEM ";
/// An agent's last line.
pub const DONE: &str = "WIRESPEED-DONE";
