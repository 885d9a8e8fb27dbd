//! FLESnet's baseline: timeslice t goes to compute node t mod C, each as soon as the ring
//! has room.

use super::{InputSchedule, IntervalReport, Nanos, Planned, Proposal, compute_of};

pub struct RoundRobin {
    computes: usize,
    next_ts: u64,
}

impl RoundRobin {
    pub fn new(computes: usize) -> Self {
        RoundRobin { computes, next_ts: 0 }
    }
}

impl InputSchedule for RoundRobin {
    fn next(&mut self, _now: Nanos) -> Option<Planned> {
        Some(Planned { ts: self.next_ts, compute: compute_of(self.next_ts, self.computes), due: 0 })
    }

    fn sent(&mut self, _now: Nanos) {
        self.next_ts += 1;
    }

    fn acked(&mut self, _ts: u64, _now: Nanos) -> Option<IntervalReport> {
        None
    }

    fn proposal(&mut self, _p: Proposal) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_in_order_round_the_compute_nodes() {
        let mut rr = RoundRobin::new(3);
        let mut got = Vec::new();
        for _ in 0..7 {
            let p = rr.next(0).unwrap();
            got.push((p.ts, p.compute));
            rr.sent(0);
        }
        assert_eq!(got, [(0, 0), (1, 1), (2, 2), (3, 0), (4, 1), (5, 2), (6, 0)]);
    }
}
