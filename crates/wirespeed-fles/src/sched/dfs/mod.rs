//! The Data-Flow Scheduler (the seed's DFS): inputs send each round in an offset order, so
//! no two write to one compute node in the same slot; intervals of rounds are paced to a
//! duration the compute nodes propose from what the inputs report; a new interval starts
//! only once the last is nearly all acknowledged.

mod coordinator;
mod input;
mod interval;

pub use coordinator::{Completed, Coordinator};
pub use input::DfsInput;
pub use interval::Geometry;

use super::Nanos;

/// The DFS's settings, with the seed's run scripts' values as defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct DfsSettings {
    /// L: an interval holds floor(L / C) rounds (at least one) of C timeslices.
    pub interval_length: u64,
    /// H: proposals come from the median of the last H intervals.
    pub history: usize,
    /// A new interval starts once this share of the current one is acknowledged (and all of
    /// the previous one).
    pub ack_gate: f64,
    /// Staged speed-up, if on.
    pub speedup: Option<Speedup>,
}

impl Default for DfsSettings {
    fn default() -> Self {
        DfsSettings { interval_length: 10_000, history: 10, ack_gate: 0.995, speedup: Some(Speedup::default()) }
    }
}

/// Staged speed-up: when intervals keep to their proposals (the mean gap between actual and
/// proposed durations at most `threshold` of the median), propose `factor` shorter ones for
/// the next `intervals`.
#[derive(Debug, Clone, PartialEq)]
pub struct Speedup {
    pub threshold: f64,
    pub factor: f64,
    pub intervals: u64,
}

impl Default for Speedup {
    fn default() -> Self {
        Speedup { threshold: 0.05, factor: 0.25, intervals: 10 }
    }
}

/// What an input tells every compute node once one of its intervals is fully acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalReport {
    pub input: usize,
    pub interval: u64,
    /// When the input sent the interval's first component.
    pub start: Nanos,
    /// From then until its last acknowledgement.
    pub duration: Nanos,
}

/// A compute node's proposal for an interval: when it should start and how long it should take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    pub interval: u64,
    pub start: Nanos,
    pub duration: Nanos,
}

/// The median of `v` (the lower middle of an even count, as FLESnet's DFS takes it); 0 if empty.
pub(crate) fn median(v: &mut [Nanos]) -> Nanos {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[(v.len() - 1) / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut []), 0);
        assert_eq!(median(&mut [5]), 5);
        assert_eq!(median(&mut [9, 1, 5]), 5);
        assert_eq!(median(&mut [4, 1, 3, 2]), 2);
    }
}
