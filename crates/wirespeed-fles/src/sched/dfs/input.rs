//! The DFS at an input: the offset round robin, paced to the proposal for the interval,
//! behind the acknowledgement gate; reports each interval once it is fully acknowledged.
//!
//! An interval lasts, as reported and proposed, from its first send to its last
//! acknowledgement, so the rounds are paced over the proposal less the drain (last send to
//! last acknowledgement) the input saw last: paced over the whole proposal, every interval
//! took a drain longer than proposed, and the proposals, medians of what happened, grew
//! slower one drain at a time.

use std::collections::BTreeMap;

use super::interval::Geometry;
use super::{DfsSettings, IntervalReport, Proposal};
use crate::sched::{InputSchedule, Nanos, Planned};

/// What the input knows of one interval it has started.
#[derive(Debug, Default)]
struct Progress {
    start: Option<Nanos>,
    last_sent: Nanos,
    sent: u64,
    acked: u64,
}

pub struct DfsInput {
    input: usize,
    geometry: Geometry,
    settings: DfsSettings,
    /// The interval being sent.
    current: u64,
    /// Intervals started and not yet fully acknowledged.
    progress: BTreeMap<u64, Progress>,
    /// Proposals for intervals not started yet, the first for each.
    proposals: BTreeMap<u64, Proposal>,
    /// The current interval's pacing: its proposed start and each round's share of its
    /// duration; None at full speed.
    pace: Option<(Nanos, Nanos)>,
    /// From the last send of the last fully acknowledged interval to its last acknowledgement.
    drain: Nanos,
}

impl DfsInput {
    pub fn new(input: usize, computes: usize, settings: DfsSettings) -> Self {
        let geometry = Geometry::new(computes, settings.interval_length);
        let mut s = DfsInput {
            input,
            geometry,
            settings,
            current: 0,
            progress: BTreeMap::new(),
            proposals: BTreeMap::new(),
            pace: None,
            drain: 0,
        };
        s.progress.insert(0, Progress::default());
        s
    }

    fn gate_open(&self) -> bool {
        let n = self.geometry.per_interval();
        let cur = &self.progress[&self.current];
        let needed = (self.settings.ack_gate * n as f64).ceil() as u64;
        let previous_done = self.current == 0 || self.progress.get(&(self.current - 1)).is_none_or(|p| p.acked == n);
        cur.sent == n && cur.acked >= needed.min(n) && previous_done
    }

    /// Moves to the next interval, with its proposal's pacing unless that proposal's end has
    /// already passed (then, as with none, at full speed).
    fn begin_next(&mut self, now: Nanos) {
        let n = self.geometry.per_interval();
        self.progress.retain(|_, p| p.acked < n);
        self.current += 1;
        self.progress.insert(self.current, Progress::default());
        self.proposals = self.proposals.split_off(&self.current);
        self.pace = self
            .proposals
            .get(&self.current)
            .filter(|p| p.start + p.duration > now)
            .map(|p| (p.start, p.duration.saturating_sub(self.drain) / self.geometry.rounds));
    }
}

impl InputSchedule for DfsInput {
    fn next(&mut self, now: Nanos) -> Option<Planned> {
        if self.progress[&self.current].sent == self.geometry.per_interval() {
            if !self.gate_open() {
                return None;
            }
            self.begin_next(now);
        }
        let n = self.progress[&self.current].sent;
        let ts = self.geometry.nth(self.input, self.current, n);
        let round = n / self.geometry.computes as u64;
        let due = self.pace.map_or(0, |(start, per_round)| start + round * per_round);
        Some(Planned { ts, compute: self.geometry.compute_of(ts), due })
    }

    fn sent(&mut self, now: Nanos) {
        let p = self.progress.get_mut(&self.current).expect("the current interval");
        p.start.get_or_insert(now);
        p.last_sent = now;
        p.sent += 1;
    }

    fn acked(&mut self, ts: u64, now: Nanos) -> Option<IntervalReport> {
        let j = self.geometry.interval_of(ts);
        let p = self.progress.get_mut(&j)?;
        p.acked += 1;
        if p.acked < self.geometry.per_interval() {
            return None;
        }
        let start = p.start.unwrap_or(now);
        self.drain = now.saturating_sub(p.last_sent);
        Some(IntervalReport { input: self.input, interval: j, start, duration: now.saturating_sub(start) })
    }

    fn proposal(&mut self, p: Proposal) {
        if p.interval > self.current {
            self.proposals.entry(p.interval).or_insert(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(l: u64) -> DfsSettings {
        DfsSettings { interval_length: l, ..DfsSettings::default() }
    }

    /// Sends everything `s` allows at `now`, returning the timeslices.
    fn send_all(s: &mut DfsInput, now: Nanos) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(p) = s.next(now) {
            if p.due > now {
                break;
            }
            out.push(p.ts);
            s.sent(now);
        }
        out
    }

    #[test]
    fn the_gate_holds_the_next_interval_until_enough_is_acknowledged() {
        // 2 compute nodes, 4 rounds: 8 timeslices an interval; a gate of 3/4.
        let mut s = DfsInput::new(1, 2, DfsSettings { ack_gate: 0.75, ..settings(8) });
        let first = send_all(&mut s, 10);
        assert_eq!(first, [1, 0, 3, 2, 5, 4, 7, 6]); // input 1 starts each round at node 1
        assert!(s.next(10).is_none());
        for ts in 0..5 {
            assert_eq!(s.acked(ts, 20), None);
        }
        assert!(s.next(20).is_none(), "5 of 8 acknowledged is under 3/4");
        s.acked(5, 20);
        assert_eq!(s.next(20).map(|p| p.ts), Some(9));
        // Interval 2 waits for all of interval 0 as well as 3/4 of interval 1.
        assert_eq!(send_all(&mut s, 30).len(), 8);
        for ts in 8..16 {
            s.acked(ts, 40);
        }
        assert!(s.next(40).is_none(), "interval 0 is not fully acknowledged");
        s.acked(6, 50);
        let report = s.acked(7, 60).expect("interval 0 complete");
        assert_eq!(report, IntervalReport { input: 1, interval: 0, start: 10, duration: 50 });
        assert_eq!(s.next(60).map(|p| p.ts), Some(17));
        // Interval 1 was acknowledged while it was current: it no longer holds interval 3.
        assert_eq!(send_all(&mut s, 70).len(), 8);
        for ts in 16..22 {
            s.acked(ts, 80);
        }
        assert_eq!(s.next(80).map(|p| p.ts), Some(25));
    }

    #[test]
    fn a_proposal_paces_the_rounds() {
        let mut s = DfsInput::new(0, 2, DfsSettings { ack_gate: 1.0, ..settings(8) });
        s.proposal(Proposal { interval: 1, start: 1000, duration: 400 });
        s.proposal(Proposal { interval: 1, start: 5, duration: 5 }); // only the first counts
        send_all(&mut s, 0);
        for ts in 0..8 {
            s.acked(ts, 0); // no drain
        }
        // Interval 1 waits for its start, then one round (2 timeslices) per 100 ns.
        let p = s.next(100).unwrap();
        assert_eq!((p.ts, p.due), (8, 1000));
        assert_eq!(send_all(&mut s, 1000), [8, 9]);
        assert_eq!(s.next(1000).unwrap().due, 1100);
        assert_eq!(send_all(&mut s, 1250), [10, 11, 12, 13]); // behind: catches up at once
        assert_eq!(s.next(1250).unwrap().due, 1300);
    }

    #[test]
    fn the_rounds_leave_time_for_the_last_drain() {
        let mut s = DfsInput::new(0, 2, DfsSettings { ack_gate: 1.0, ..settings(8) });
        s.proposal(Proposal { interval: 1, start: 1000, duration: 500 });
        send_all(&mut s, 0);
        for ts in 0..8 {
            s.acked(ts, 100); // acknowledged 100 ns after the last send
        }
        // (500 − 100) / 4 rounds: the last round is due at 1300, its acknowledgements by 1500.
        assert_eq!(send_all(&mut s, 1000), [8, 9]);
        assert_eq!(s.next(1000).unwrap().due, 1100);
        assert_eq!(send_all(&mut s, 1300).len(), 6);
    }

    #[test]
    fn a_proposal_whose_end_has_passed_means_full_speed() {
        let mut s = DfsInput::new(0, 2, DfsSettings { ack_gate: 1.0, ..settings(4) });
        s.proposal(Proposal { interval: 1, start: 10, duration: 20 });
        send_all(&mut s, 0);
        for ts in 0..4 {
            s.acked(ts, 50);
        }
        assert_eq!(send_all(&mut s, 50), [4, 5, 6, 7]);
    }
}
