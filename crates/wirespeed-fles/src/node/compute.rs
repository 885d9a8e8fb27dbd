//! A compute node, sans-IO: learns of components from the inputs' descriptors, completes a
//! timeslice once every input's component is in, hands complete timeslices over in order,
//! and gives ring space back as the consumer releases them (in any order). Its messages and
//! its peers' liveness are in `messages`.

mod messages;

use std::collections::{BTreeMap, VecDeque};

use super::liveness::Liveness;
use super::rescue::{Fate, Rescue};
use super::ring::{Pointers, RingSizes};
use super::thinned::Thinned;
use crate::error::{Lost, Result, Role, Violation};
use crate::model::ComponentDescriptor;
use crate::sched::{Completed, Coordinator, DfsSettings, IntervalReport, Nanos};
use crate::wire::Msg;

/// At most this many completion times are kept per compute node (a few MB).
const COMPLETIONS_KEPT: usize = 200_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComputeAction {
    /// Timeslice `ts` is complete: `components[i]` is input i's, in its data ring, or None
    /// if input i was lost before sending it (the timeslice is then incomplete).
    Deliver { ts: u64, components: Vec<Option<ComponentDescriptor>> },
    /// A component of this node's own timeslice, not yet complete, is in input `input`'s
    /// ring (where it stays until the timeslice is released); a consumer may start on it.
    Arrived { input: usize, desc: ComponentDescriptor },
    /// Send `msg` to input `input`.
    Send { input: usize, msg: Msg },
    /// Close the connection to input `input`: it was given up on (one only slow learns so).
    Close(usize),
}

/// When a timeslice's components arrived, for the run's report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub ts: u64,
    pub first: Nanos,
    pub last: Nanos,
}

struct Pending {
    components: Vec<Option<ComponentDescriptor>>,
    count: usize,
    first: Nanos,
}

pub struct ComputeNode {
    index: usize,
    computes: usize,
    rings: RingSizes,
    limit: Option<u64>,
    /// Per input: what it claims written, descriptors taken, and what we gave back.
    written: Vec<Pointers>,
    seen: Vec<u64>,
    acked: Vec<Pointers>,
    /// Per input, its components in ring order: timeslice, end, and whether released.
    held: Vec<VecDeque<(u64, Pointers, bool)>>,
    /// Per input, the last of this node's own timeslices it sent (they come in order), and
    /// the largest timeslice of any.
    last_home: Vec<Option<u64>>,
    last_ts: Vec<Option<u64>>,
    /// Compute nodes lost, and what this node took over from them.
    rescue: Rescue,
    pending: BTreeMap<u64, Pending>,
    /// Complete, waiting for an earlier one.
    complete: BTreeMap<u64, Vec<Option<ComponentDescriptor>>>,
    /// Inputs lost: timeslices complete without them.
    lost: Vec<bool>,
    /// Inputs that finished: all they sent is acknowledged, and they send nothing more.
    done_inputs: Vec<bool>,
    /// Timeslices delivered with a component missing.
    pub incomplete: u64,
    next_deliver: u64,
    coordinator: Option<Coordinator>,
    /// Winding down: each input's horizon (it sends nothing at or past it until the end
    /// is agreed), once it has said.
    horizons: Vec<Option<u64>>,
    halting: bool,
    ended: bool,
    actions: VecDeque<ComputeAction>,
    liveness: Option<Liveness>,
    /// Completion times: all of a short run's, an even sample of a long one's.
    pub completions: Thinned<Completion>,
    /// The longest time from a timeslice's first component to its last: over the run, and
    /// since the driver last took it (for live metrics).
    pub slowest: Nanos,
    recent_slowest: Nanos,
    pub intervals: Vec<Completed>,
}

impl ComputeNode {
    pub fn new(
        index: usize,
        inputs: usize,
        computes: usize,
        rings: RingSizes,
        limit: Option<u64>,
        dfs: Option<DfsSettings>,
    ) -> Self {
        ComputeNode {
            index,
            computes,
            rings,
            limit,
            written: vec![Pointers::default(); inputs],
            seen: vec![0; inputs],
            acked: vec![Pointers::default(); inputs],
            held: vec![VecDeque::new(); inputs],
            last_home: vec![None; inputs],
            last_ts: vec![None; inputs],
            rescue: Rescue::new(index, computes),
            pending: BTreeMap::new(),
            complete: BTreeMap::new(),
            lost: vec![false; inputs],
            done_inputs: vec![false; inputs],
            incomplete: 0,
            next_deliver: index as u64,
            coordinator: dfs.map(|s| Coordinator::new(inputs, s)),
            horizons: vec![None; inputs],
            halting: false,
            ended: false,
            actions: VecDeque::new(),
            liveness: None,
            completions: Thinned::new(COMPLETIONS_KEPT),
            slowest: 0,
            recent_slowest: 0,
            intervals: Vec::new(),
        }
    }

    fn inputs(&self) -> usize {
        self.written.len()
    }

    /// Input `input` says it has written up to `written`; returns the descriptor positions
    /// to read and pass to [`on_component`](Self::on_component), in order.
    pub fn on_status(&mut self, input: usize, written: Pointers) -> Result<std::ops::Range<u64>> {
        let old = self.written[input];
        let acked = self.acked[input];
        if written.data < old.data || written.desc < old.desc || written.desc - acked.desc > self.rings.descs {
            let rule = format!("claims {written:?} after {old:?}, with {acked:?} acknowledged");
            return Err(Violation::Broke { role: Role::Input, index: input, rule }.into());
        }
        self.written[input] = written;
        Ok(self.seen[input]..written.desc)
    }

    /// The descriptor at input `input`'s next position: checks it and files the component.
    pub fn on_component(&mut self, input: usize, desc: ComponentDescriptor, now: Nanos) -> Result<()> {
        let bad = |rule: String| Err(Violation::Broke { role: Role::Input, index: input, rule }.into());
        let ts = desc.ts_num;
        let fate = self.rescue.fate(ts);
        if fate == Fate::NotMine || self.limit.is_some_and(|l| ts >= l) {
            return bad(format!("timeslice {ts} is not one for compute node {}", self.index));
        }
        let delivered = match fate {
            Fate::Home => self.last_home[input].is_some_and(|last| ts <= last) || ts < self.next_deliver,
            Fate::Adopted(k) => ts < self.rescue.next_of(k, ts),
            _ => false,
        };
        if delivered || self.pending.get(&ts).is_some_and(|p| p.components[input].is_some()) {
            return bad(format!("timeslice {ts} out of order or twice"));
        }
        let end_before = self.held[input].back().map_or(self.acked[input].data, |&(_, end, _)| end.data);
        if let Err(rule) = self.rings.check(end_before, self.acked[input].data, desc.offset, desc.size) {
            return bad(rule);
        }
        if desc.offset + desc.size > self.written[input].data {
            return bad(format!("timeslice {ts}'s component runs past the write pointer"));
        }
        self.seen[input] += 1;
        self.last_ts[input] = Some(self.last_ts[input].map_or(ts, |l| l.max(ts)));
        if fate == Fate::Home {
            self.last_home[input] = Some(ts);
        }
        let end = Pointers { data: desc.offset + desc.size, desc: self.seen[input] };
        self.held[input].push_back((ts, end, false));
        if fate == Fate::Done {
            // A lost node finished it: this input sent it again before it knew.
            self.release(ts);
            return Ok(());
        }
        let inputs = self.inputs();
        let p =
            self.pending.entry(ts).or_insert_with(|| Pending { components: vec![None; inputs], count: 0, first: now });
        p.components[input] = Some(desc);
        p.count += 1;
        self.complete_if_ready(ts, now);
        if self.awaits(ts) {
            self.actions.push_back(ComputeAction::Arrived { input, desc });
        }
        Ok(())
    }

    /// Completes `ts` if every input's component is in or that input is lost.
    fn complete_if_ready(&mut self, ts: u64, now: Nanos) {
        let Some(p) = self.pending.get(&ts) else { return };
        if p.components.iter().zip(&self.lost).any(|(c, &lost)| c.is_none() && !lost) {
            return;
        }
        let p = self.pending.remove(&ts).expect("present");
        if p.count < self.inputs() {
            self.incomplete += 1;
        }
        self.completions.push(Completion { ts, first: p.first, last: now });
        self.slowest = self.slowest.max(now - p.first);
        self.recent_slowest = self.recent_slowest.max(now - p.first);
        self.complete.insert(ts, p.components);
        self.deliver_in_order();
    }

    /// Whether `ts` is this node's own timeslice, begun and not yet complete: a consumer
    /// may start on its components (a rescued one may still be dropped).
    fn awaits(&self, ts: u64) -> bool {
        self.pending.contains_key(&ts) && self.rescue.fate(ts) == Fate::Home
    }

    /// Input `input` is gone (its connection failed, it fell silent, or it could not be
    /// reached): the run goes on without it, and timeslices that lack its component are
    /// delivered incomplete. Its ring needs no more acknowledgements, and the DFS no more of
    /// its reports.
    pub fn on_input_lost(&mut self, input: usize, now: Nanos) -> Result<()> {
        if std::mem::replace(&mut self.lost[input], true) {
            return Ok(());
        }
        self.actions.push_back(ComputeAction::Close(input));
        if let Some(l) = &mut self.liveness {
            l.forget(input);
        }
        if self.lost.iter().all(|&l| l) {
            return Err(Lost::EveryInput.into());
        }
        self.held[input].clear();
        let waiting: Vec<u64> = self.pending.keys().copied().collect();
        for ts in waiting {
            self.complete_if_ready(ts, now);
        }
        self.agree_on_loss();
        if let Some(c) = &mut self.coordinator {
            for (done, proposals) in c.lose(input) {
                self.intervals.push(done);
                proposals.into_iter().for_each(|p| self.broadcast(Msg::Propose(p)));
            }
        }
        if self.halting && !self.ended {
            self.try_end();
        }
        Ok(())
    }

    /// Whether input `input` was lost.
    pub fn is_lost(&self, input: usize) -> bool {
        self.lost[input]
    }

    /// Delivers complete timeslices: this node's own in order, and those taken over from each
    /// lost node in order per chain.
    fn deliver_in_order(&mut self) {
        while let Some(components) = self.complete.remove(&self.next_deliver) {
            self.actions.push_back(ComputeAction::Deliver { ts: self.next_deliver, components });
            self.next_deliver += self.computes as u64;
        }
        let mut i = 0;
        while let Some(next) = self.rescue.chain_next(i) {
            match self.complete.remove(&next) {
                Some(components) => {
                    self.actions.push_back(ComputeAction::Deliver { ts: next, components });
                    self.rescue.advance(i);
                }
                None => i += 1,
            }
        }
    }

    /// Input `input` gave compute node `compute` up; `finished` says, per residue, below
    /// which timeslice that node had acknowledged everything to it. Once every input still
    /// here has said, what the lost node finished is dropped and the rest is taken over.
    pub fn on_compute_lost(&mut self, input: usize, compute: usize, finished: Vec<(u64, u64)>) -> Result<()> {
        if self.rescue.on_report(input, self.inputs(), compute, finished)? {
            self.broadcast(Msg::Leave { compute: compute as u32 });
        }
        self.agree_on_loss();
        Ok(())
    }

    /// Input `input` finished (everything it sent was acknowledged): it owes no report of a
    /// compute node lost after that, and had nothing of it left to send again.
    pub fn on_input_ended(&mut self, input: usize) {
        self.done_inputs[input] = true;
        if let Some(l) = &mut self.liveness {
            l.forget(input);
        }
        self.agree_on_loss();
    }

    pub fn input_done(&self, input: usize) -> bool {
        self.done_inputs[input]
    }

    /// Per input, whether it has finished or is lost (it sends nothing more).
    fn gone(&self) -> Vec<bool> {
        self.lost.iter().zip(&self.done_inputs).map(|(l, d)| *l || *d).collect()
    }

    /// Whether every input has finished or is lost.
    pub fn inputs_gone(&self) -> bool {
        self.gone().iter().all(|&g| g)
    }

    fn agree_on_loss(&mut self) {
        if !self.rescue.try_agree(&self.gone()) {
            return;
        }
        let waiting: Vec<u64> = self.pending.keys().chain(self.complete.keys()).copied().collect();
        for ts in waiting {
            if self.rescue.fate(ts) == Fate::Done {
                self.pending.remove(&ts);
                self.complete.remove(&ts);
                self.release(ts);
            }
        }
        self.deliver_in_order();
    }

    /// Whether compute node `compute` was given up.
    pub fn is_compute_lost(&self, compute: usize) -> bool {
        self.rescue.is_lost(compute)
    }

    /// The consumer is done with timeslice `ts`: its space goes back to the inputs once
    /// everything before it in each ring is released too.
    pub fn release(&mut self, ts: u64) {
        for input in 0..self.inputs() {
            let q = &mut self.held[input];
            if let Some(entry) = q.iter_mut().find(|(t, _, _)| *t == ts) {
                entry.2 = true;
            }
            let mut moved = None;
            while let Some(&(_, end, true)) = q.front() {
                q.pop_front();
                moved = Some(end);
            }
            if let Some(end) = moved {
                self.acked[input] = end;
                self.send(input, Msg::Ack(end));
            }
        }
    }

    /// An input's report of an interval (DFS).
    pub fn on_report(&mut self, r: IntervalReport) -> Result<()> {
        if r.input >= self.inputs() {
            return Err(Violation::NoSuchPeer { role: Role::Input, index: r.input, count: self.inputs() }.into());
        }
        if let Some(c) = &mut self.coordinator
            && let Some((done, proposals)) = c.report(r)
        {
            self.intervals.push(done);
            proposals.into_iter().for_each(|p| self.broadcast(Msg::Propose(p)));
        }
        Ok(())
    }

    /// Winds the run down: asks every input to stop (once).
    pub fn halt(&mut self) {
        if !self.halting {
            self.halting = true;
            self.broadcast(Msg::Halt);
        }
    }

    /// Input `input` has stopped below `horizon`. Once every input has, the end is the
    /// largest horizon (or the limit, if lower): each input sends everything below it, so
    /// every timeslice below it completes. Every compute node gets the same horizons, so all
    /// agree on the end.
    pub fn on_stop(&mut self, input: usize, horizon: u64) -> Result<()> {
        if self.last_ts[input].is_some_and(|t| t >= horizon) {
            let rule = format!("stopped at {horizon} after sending past it");
            return Err(Violation::Broke { role: Role::Input, index: input, rule }.into());
        }
        self.halt();
        if self.ended {
            return Ok(());
        }
        self.horizons[input] = Some(horizon);
        self.try_end();
        Ok(())
    }

    /// Once every input still here has said its horizon, the end is the largest.
    fn try_end(&mut self) {
        let live = self.horizons.iter().zip(&self.lost).filter(|(_, lost)| !**lost).map(|(h, _)| *h);
        if let Some(end) = live.collect::<Option<Vec<u64>>>().and_then(|h| h.into_iter().max()) {
            let end = self.limit.map_or(end, |l| l.min(end));
            self.limit = Some(end);
            self.ended = true;
            self.broadcast(Msg::End { at: end });
        }
    }

    pub fn next_action(&mut self) -> Option<ComputeAction> {
        self.actions.pop_front()
    }

    /// Whether every timeslice this node takes below the limit was delivered.
    pub fn finished(&self) -> bool {
        self.limit.is_some_and(|l| self.next_deliver >= l && !self.rescue.open() && self.rescue.nexts().all(|n| n >= l))
    }

    /// The longest completion since the last call, ns.
    pub fn take_recent_slowest(&mut self) -> Nanos {
        std::mem::take(&mut self.recent_slowest)
    }

    /// Inputs lost so far.
    pub fn lost_inputs(&self) -> usize {
        self.lost.iter().filter(|&&l| l).count()
    }

    /// The fullest data ring's share in use.
    pub fn fill(&self) -> f64 {
        (0..self.inputs())
            .filter(|&i| !self.lost[i])
            .map(|i| (self.written[i].data - self.acked[i].data) as f64 / self.rings.data as f64)
            .fold(0.0, f64::max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(ts: u64, offset: u64, size: u64) -> ComponentDescriptor {
        ComponentDescriptor { ts_num: ts, offset, size, num_microslices: 1 }
    }

    fn node() -> ComputeNode {
        ComputeNode::new(1, 2, 2, RingSizes { data: 100, descs: 4 }, Some(6), None)
    }

    /// The next action, past the arrivals of components.
    fn next(n: &mut ComputeNode) -> Option<ComputeAction> {
        std::iter::from_fn(|| n.next_action()).find(|a| !matches!(a, ComputeAction::Arrived { .. }))
    }

    fn ack(input: usize, data: u64, desc: u64) -> Option<ComputeAction> {
        Some(ComputeAction::Send { input, msg: Msg::Ack(Pointers { data, desc }) })
    }

    fn arrive(n: &mut ComputeNode, input: usize, d: ComponentDescriptor, now: Nanos) {
        let written = Pointers { data: d.offset + d.size, desc: n.seen[input] + 1 };
        assert_eq!(n.on_status(input, written).unwrap(), n.seen[input]..written.desc);
        n.on_component(input, d, now).unwrap();
    }

    #[test]
    fn completes_and_acks_what_is_released_in_any_order() {
        let mut n = node();
        arrive(&mut n, 0, desc(1, 0, 30), 10);
        arrive(&mut n, 0, desc(3, 30, 30), 11);
        arrive(&mut n, 1, desc(1, 0, 30), 12);
        assert!(matches!(next(&mut n), Some(ComputeAction::Deliver { ts: 1, .. })));
        assert_eq!(next(&mut n), None, "3 waits for input 1");
        arrive(&mut n, 1, desc(3, 30, 30), 20);
        assert!(matches!(next(&mut n), Some(ComputeAction::Deliver { ts: 3, .. })));
        assert_eq!(
            n.completions.kept(),
            [Completion { ts: 1, first: 10, last: 12 }, Completion { ts: 3, first: 11, last: 20 }]
        );
        assert!((n.fill() - 0.6).abs() < 1e-9);
        n.release(3);
        assert_eq!(next(&mut n), None, "both rings still hold 1 before 3");
        n.release(1);
        assert_eq!(next(&mut n), ack(0, 60, 2));
        assert_eq!(next(&mut n), ack(1, 60, 2));
        assert!(!n.finished());
        assert_eq!(n.fill(), 0.0);
    }

    #[test]
    fn agrees_on_the_largest_horizon_to_end() {
        let mut n = ComputeNode::new(1, 2, 2, RingSizes { data: 100, descs: 4 }, None, None);
        arrive(&mut n, 0, desc(1, 0, 10), 0);
        assert!(n.on_stop(0, 1).is_err(), "input 0 sent timeslice 1 already");
        n.on_stop(0, 4).unwrap();
        let to_all =
            |msg: Msg| -> Vec<_> { (0..2).map(|input| ComputeAction::Send { input, msg: msg.clone() }).collect() };
        let asked: Vec<_> = std::iter::from_fn(|| next(&mut n)).collect();
        assert_eq!(asked, to_all(Msg::Halt), "the other input is asked to stop");
        n.on_stop(1, 6).unwrap();
        assert_eq!(std::iter::from_fn(|| next(&mut n)).collect::<Vec<_>>(), to_all(Msg::End { at: 6 }));
        arrive(&mut n, 1, desc(1, 0, 10), 1);
        assert!(matches!(next(&mut n), Some(ComputeAction::Deliver { ts: 1, .. })));
        assert!(!n.finished(), "5 is still to come");
    }

    #[test]
    fn a_lost_input_leaves_timeslices_incomplete_and_the_run_going() {
        let mut n = node();
        arrive(&mut n, 0, desc(1, 0, 30), 10);
        arrive(&mut n, 1, desc(1, 0, 30), 11);
        arrive(&mut n, 0, desc(3, 30, 30), 12);
        assert!(matches!(next(&mut n), Some(ComputeAction::Deliver { ts: 1, .. })));
        assert_eq!(next(&mut n), None, "3 waits for input 1");
        n.on_input_lost(1, 20).unwrap();
        assert_eq!(next(&mut n), Some(ComputeAction::Close(1)));
        match next(&mut n) {
            Some(ComputeAction::Deliver { ts: 3, components }) => {
                assert!(components[0].is_some() && components[1].is_none())
            }
            other => panic!("{other:?}"),
        }
        arrive(&mut n, 0, desc(5, 60, 30), 30);
        assert!(matches!(next(&mut n), Some(ComputeAction::Deliver { ts: 5, .. })), "input 0 alone completes");
        assert_eq!(n.incomplete, 2);
        n.release(1);
        n.release(3);
        n.release(5);
        let acks: Vec<_> = std::iter::from_fn(|| next(&mut n)).collect();
        assert!(
            acks.iter().all(|a| matches!(a, ComputeAction::Send { input: 0, msg: Msg::Ack(_) })),
            "none to the lost input: {acks:?}"
        );
        assert!(n.finished());
        assert!(n.on_input_lost(0, 40).is_err(), "every input gone");
    }

    #[test]
    fn refuses_what_an_input_could_not_have_sent() {
        let mut n = node();
        n.on_status(0, Pointers { data: 100, desc: 2 }).unwrap();
        assert!(n.on_component(0, desc(2, 0, 10), 0).is_err(), "another node's timeslice");
        assert!(n.on_component(0, desc(7, 0, 10), 0).is_err(), "past the limit");
        assert!(n.on_component(0, desc(1, 0, 101), 0).is_err(), "larger than the ring");
        n.on_component(0, desc(3, 0, 10), 0).unwrap();
        assert!(n.on_component(0, desc(1, 10, 10), 0).is_err(), "backwards");
        assert!(n.on_status(0, Pointers { data: 50, desc: 2 }).is_err(), "pointer backwards");
        assert!(n.on_status(0, Pointers { data: 100, desc: 9 }).is_err(), "more descriptors than the ring");
    }
}
