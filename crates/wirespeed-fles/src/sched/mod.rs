//! Schedulers: which compute node gets each timeslice, in what order an input sends its
//! components, and when. Sans-IO: events and the current time in, decisions out, so the same
//! code runs real nodes and the simulator.
//!
//! Times are nanoseconds since the run's common barrier, as each node's clock counts them:
//! that takes out the clocks' offsets (the DFS's own correction).

pub mod dfs;
pub mod owners;
pub mod rr;

pub use dfs::{Completed, Coordinator, DfsInput, DfsSettings, IntervalReport, Proposal};
pub use owners::Owners;
pub use rr::RoundRobin;

/// Nanoseconds since the common barrier.
pub type Nanos = u64;

/// The next component an input should send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub ts: u64,
    pub compute: usize,
    /// Not before this time (pacing); 0 means at once.
    pub due: Nanos,
}

/// An input's scheduler.
pub trait InputSchedule: Send {
    /// The component to send next, or None while the scheduler holds sending back (the DFS's
    /// acknowledgement gate).
    fn next(&mut self, now: Nanos) -> Option<Planned>;
    /// The planned component went out at `now`.
    fn sent(&mut self, now: Nanos);
    /// The compute node acknowledged timeslice `ts`: the input may reuse its space. Returns
    /// what the compute nodes should hear about a finished interval, if this finished one.
    fn acked(&mut self, ts: u64, now: Nanos) -> Option<IntervalReport>;
    /// A compute node's proposal for a coming interval.
    fn proposal(&mut self, p: Proposal);
}

/// How many compute nodes take timeslices, and which one takes `ts`.
pub fn compute_of(ts: u64, computes: usize) -> usize {
    (ts % computes as u64) as usize
}

/// Which scheduler a run uses, with its settings.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    RoundRobin,
    Dfs(DfsSettings),
}

impl Kind {
    /// Input `input`'s scheduler, of `computes` compute nodes, from timeslice 0.
    pub fn input(&self, input: usize, computes: usize) -> Box<dyn InputSchedule> {
        match self {
            Kind::RoundRobin => Box::new(RoundRobin::new(computes)),
            Kind::Dfs(s) => Box::new(DfsInput::new(input, computes, s.clone())),
        }
    }
}
