//! The DFS at a compute node: gathers every input's report of an interval, and proposes
//! coming intervals' starts and durations from the median of the last H. Every compute node
//! hears the same reports and so proposes the same.

use std::collections::{BTreeMap, VecDeque};

use super::{DfsSettings, IntervalReport, Proposal, median};
use crate::sched::Nanos;

pub struct Coordinator {
    /// Per input, whether it was lost (its reports are no longer waited for).
    lost: Vec<bool>,
    settings: DfsSettings,
    /// Reports of intervals not yet heard from every input.
    reports: BTreeMap<u64, Vec<IntervalReport>>,
    /// The last H completed intervals: (interval, start, duration).
    history: VecDeque<(u64, Nanos, Nanos)>,
    /// Durations proposed, by interval, to compare with what happened.
    proposed: BTreeMap<u64, Nanos>,
    /// actual − proposed for the last H intervals that had a proposal.
    gaps: VecDeque<i128>,
    /// Proposals still to make shorter in the current speed-up stage.
    speedup_left: u64,
    /// The last interval proposed for.
    last_proposed: Option<u64>,
}

/// What a compute node learnt of an interval, for the run's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completed {
    pub interval: u64,
    pub start: Nanos,
    pub duration: Nanos,
}

impl Coordinator {
    pub fn new(inputs: usize, settings: DfsSettings) -> Self {
        Coordinator {
            lost: vec![false; inputs],
            settings,
            reports: BTreeMap::new(),
            history: VecDeque::new(),
            proposed: BTreeMap::new(),
            gaps: VecDeque::new(),
            speedup_left: 0,
            last_proposed: None,
        }
    }

    /// Takes an input's report; once every input has reported interval j, returns what was
    /// measured and the proposals for the intervals up to j + 2 (for all inputs).
    pub fn report(&mut self, r: IntervalReport) -> Option<(Completed, Vec<Proposal>)> {
        if self.history.back().is_some_and(|&(j, ..)| r.interval <= j) {
            return None; // late or repeated
        }
        let got = self.reports.entry(r.interval).or_default();
        if got.iter().any(|o| o.input == r.input) {
            return None;
        }
        got.push(r);
        self.complete(r.interval)
    }

    /// Input `input` is gone: intervals that waited only for its report complete now.
    pub fn lose(&mut self, input: usize) -> Vec<(Completed, Vec<Proposal>)> {
        if let Some(l) = self.lost.get_mut(input) {
            *l = true;
        }
        let waiting: Vec<u64> = self.reports.keys().copied().collect();
        waiting.into_iter().filter_map(|j| self.complete(j)).collect()
    }

    /// Interval j, if every input still here has reported it.
    fn complete(&mut self, j: u64) -> Option<(Completed, Vec<Proposal>)> {
        let got = self.reports.get(&j)?;
        let live = self.lost.iter().filter(|l| !**l).count();
        if got.iter().filter(|r| !self.lost.get(r.input).copied().unwrap_or(true)).count() < live {
            return None;
        }
        let got = self.reports.remove(&j).expect("present");
        self.reports = self.reports.split_off(&(j + 1));
        let (lo, hi) = got.iter().fold((Nanos::MAX, 0), |(lo, hi), r| (lo.min(r.start), hi.max(r.start)));
        let start = lo / 2 + hi / 2 + (lo % 2 + hi % 2) / 2;
        let duration = median(&mut got.iter().map(|r| r.duration).collect::<Vec<_>>());
        let done = Completed { interval: j, start, duration };
        self.learn(done);
        Some((done, self.propose(done)))
    }

    fn learn(&mut self, c: Completed) {
        let h = self.settings.history.max(1);
        self.history.push_back((c.interval, c.start, c.duration));
        if self.history.len() > h {
            self.history.pop_front();
        }
        if let Some(p) = self.proposed.remove(&c.interval) {
            self.gaps.push_back(c.duration as i128 - p as i128);
            if self.gaps.len() > h {
                self.gaps.pop_front();
            }
        }
        self.proposed = self.proposed.split_off(&c.interval);
    }

    fn propose(&mut self, c: Completed) -> Vec<Proposal> {
        let median_duration = median(&mut self.history.iter().map(|&(_, _, d)| d).collect::<Vec<_>>());
        if let Some(s) = &self.settings.speedup
            && self.speedup_left == 0
            && self.gaps.len() >= self.settings.history.max(1)
        {
            let mean_gap = self.gaps.iter().sum::<i128>() / self.gaps.len() as i128;
            if mean_gap as f64 <= s.threshold * median_duration as f64 {
                self.speedup_left = s.intervals;
                self.gaps.clear(); // the next stage is judged on its own proposals
            }
        }
        let from = self.last_proposed.map_or(c.interval + 1, |l| (l + 1).max(c.interval + 1));
        let mut out = Vec::new();
        for j in from..=c.interval + 2 {
            let duration = match &self.settings.speedup {
                Some(s) if self.speedup_left > 0 => {
                    self.speedup_left -= 1;
                    (median_duration as f64 * (1.0 - s.factor)) as Nanos
                }
                _ => median_duration,
            };
            let start = c.start + median_duration * (j - c.interval);
            self.proposed.insert(j, duration);
            out.push(Proposal { interval: j, start, duration });
            self.last_proposed = Some(j);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::dfs::Speedup;

    fn report(input: usize, interval: u64, start: Nanos, duration: Nanos) -> IntervalReport {
        IntervalReport { input, interval, start, duration }
    }

    fn settings(history: usize, speedup: Option<Speedup>) -> DfsSettings {
        DfsSettings { interval_length: 4, history, ack_gate: 0.995, speedup }
    }

    #[test]
    fn a_lost_input_is_no_longer_waited_for() {
        let mut c = Coordinator::new(3, DfsSettings::default());
        let r = |input, interval| IntervalReport { input, interval, start: 100, duration: 50 };
        assert!(c.report(r(0, 0)).is_none());
        assert!(c.report(r(1, 0)).is_none());
        let done = c.lose(2);
        assert_eq!(done.len(), 1, "interval 0 had every report but the lost input's");
        assert_eq!(done[0].0.interval, 0);
        assert!(c.report(r(0, 1)).is_none());
        assert!(c.report(r(1, 1)).is_some(), "two reports now complete an interval");
    }

    #[test]
    fn an_interval_completes_with_every_input_and_proposes_ahead() {
        let mut c = Coordinator::new(3, settings(10, None));
        assert!(c.report(report(0, 0, 100, 50)).is_none());
        assert!(c.report(report(0, 0, 100, 50)).is_none(), "a repeat counts once");
        assert!(c.report(report(2, 0, 110, 70)).is_none());
        let (done, proposals) = c.report(report(1, 0, 90, 60)).unwrap();
        // start: the middle of the earliest and latest; duration: the median
        assert_eq!(done, Completed { interval: 0, start: 100, duration: 60 });
        assert_eq!(
            proposals,
            [Proposal { interval: 1, start: 160, duration: 60 }, Proposal { interval: 2, start: 220, duration: 60 }]
        );
        for i in 0..3 {
            c.report(report(i, 1, 160, 80));
        }
        assert!(c.report(report(0, 1, 1, 1)).is_none(), "late");
        // The next completion proposes only the interval after those: the median of 60 and
        // 80 is the lower, 60, and interval 3 starts two of them after interval 1's start.
        let mut c2 = Coordinator::new(1, settings(10, None));
        c2.report(report(0, 0, 100, 60));
        let (_, p) = c2.report(report(0, 1, 160, 80)).unwrap();
        assert_eq!(p, [Proposal { interval: 3, start: 280, duration: 60 }]);
    }

    #[test]
    fn proposals_follow_the_median_of_the_last_h() {
        let mut c = Coordinator::new(1, settings(3, None));
        let mut last = Vec::new();
        for (j, d) in [10, 1000, 20, 30, 40].into_iter().enumerate() {
            last = c.report(report(0, j as u64, 1000 * j as u64, d)).unwrap().1;
        }
        // The last three durations: 20, 30, 40.
        assert_eq!(last, [Proposal { interval: 6, start: 4000 + 2 * 30, duration: 30 }]);
    }

    #[test]
    fn intervals_that_keep_to_their_proposals_earn_a_speed_up() {
        let s = Speedup { threshold: 0.05, factor: 0.25, intervals: 2 };
        let mut c = Coordinator::new(1, settings(2, Some(s)));
        let mut out = Vec::new();
        for j in 0..8u64 {
            out.extend(c.report(report(0, j, 1000 * j, 1000)).unwrap().1);
        }
        let durations: Vec<_> = out.iter().map(|p| (p.interval, p.duration)).collect();
        // Intervals 1 and 2 kept to their proposals of 1000 (two gaps of 0, H = 2): the next
        // two proposals (4, 5) are 750. Those took 1000, so the next ones are 1000 until two
        // intervals in a row keep to them again (6 and 7): then 9 is 750.
        let want = [(1, 1000), (2, 1000), (3, 1000), (4, 750), (5, 750), (6, 1000), (7, 1000), (8, 1000), (9, 750)];
        assert_eq!(durations, want);
    }
}
