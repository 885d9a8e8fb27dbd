//! Timeslice building in SimGrid: the same sans-IO input and compute-node state machines as
//! real runs, as actors on a simulated platform, their messages as simulated transfers of
//! their true sizes (issue 46; the engine layer first).

pub mod engine;

pub use engine::{Comm, Engine, Mailbox, now, sleep_for};
