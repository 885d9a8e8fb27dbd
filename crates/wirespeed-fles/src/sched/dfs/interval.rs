//! Interval arithmetic: which timeslices interval j holds, and the offset round robin
//! inside it.

use crate::sched::compute_of;

/// How a run's timeslices fall into rounds and intervals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub computes: usize,
    /// Rounds per interval: floor(L / C), at least one.
    pub rounds: u64,
}

impl Geometry {
    pub fn new(computes: usize, interval_length: u64) -> Self {
        Geometry { computes, rounds: (interval_length / computes as u64).max(1) }
    }

    /// Timeslices per interval.
    pub fn per_interval(&self) -> u64 {
        self.rounds * self.computes as u64
    }

    pub fn interval_of(&self, ts: u64) -> u64 {
        ts / self.per_interval()
    }

    /// The `n`-th timeslice input `input` sends in interval `j`: in each round, slot k goes
    /// to compute node (input + k) mod C, so the slots form a Latin square over the inputs.
    pub fn nth(&self, input: usize, j: u64, n: u64) -> u64 {
        let c = self.computes as u64;
        let (round, slot) = (n / c, n % c);
        let target = (input as u64 + slot) % c;
        j * self.per_interval() + round * c + target
    }

    pub fn compute_of(&self, ts: u64) -> usize {
        compute_of(ts, self.computes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn rounds_per_interval() {
        assert_eq!(Geometry::new(4, 10_000).rounds, 2500);
        assert_eq!(Geometry::new(3, 10).per_interval(), 9);
        assert_eq!(Geometry::new(64, 10).rounds, 1); // at least one round
    }

    #[test]
    fn the_offset_round_robin_is_a_latin_square() {
        for (inputs, computes) in [(4, 4), (6, 4), (3, 5), (8, 8)] {
            let g = Geometry::new(computes, 3 * computes as u64);
            for n0 in (0..g.per_interval()).step_by(computes) {
                // In every slot of a round, inputs with different offsets target different
                // compute nodes; with more inputs than compute nodes, no node gets more than
                // ceil(I / C) writers at once.
                for slot in 0..computes as u64 {
                    let mut per_node = vec![0; computes];
                    for i in 0..inputs {
                        per_node[g.compute_of(g.nth(i, 2, n0 + slot))] += 1;
                    }
                    assert!(per_node.iter().all(|&n| n <= inputs.div_ceil(computes)), "{per_node:?}");
                }
            }
        }
    }

    #[test]
    fn every_input_sends_every_timeslice_of_an_interval_once() {
        let g = Geometry::new(5, 17);
        for i in 0..7 {
            let got: HashSet<u64> = (0..g.per_interval()).map(|n| g.nth(i, 3, n)).collect();
            let want: HashSet<u64> = (3 * g.per_interval()..4 * g.per_interval()).collect();
            assert_eq!(got, want);
            // and in each round, to the compute node the timeslice belongs to
            for n in 0..g.per_interval() {
                assert_eq!(g.compute_of(g.nth(i, 3, n)), (i + (n % 5) as usize) % 5);
            }
        }
    }
}
