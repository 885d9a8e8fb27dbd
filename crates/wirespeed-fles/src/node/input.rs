//! An input node, sans-IO: asks its scheduler what to send next, places each component in
//! the compute node's rings when they have room, and frees that room as acknowledgements
//! come back. Its messages and its peers' liveness are in `messages`.

mod messages;

use std::collections::{BTreeMap, VecDeque};

use super::liveness::Liveness;
use super::ring::{Pointers, RingSizes};
use crate::error::{FlesError, Lost, Result, Role, Violation};
use crate::model::{ComponentDescriptor, Slicing};
use crate::sched::{InputSchedule, Nanos, Owners, Proposal};
use crate::wire::Msg;

/// What the driver does next for an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputAction {
    /// Put the component of `desc.ts_num` at data position `desc.offset` of `compute`'s ring,
    /// then `desc` at descriptor position `slot`, then tell the compute node `pointers`.
    Write { compute: usize, slot: u64, desc: ComponentDescriptor, pointers: Pointers },
    /// Send `msg` to compute node `compute`.
    Send { compute: usize, msg: Msg },
    /// Close the connection to compute node `compute`: it was given up on (one only slow
    /// learns so).
    Close(usize),
    /// Nothing to do until this time, or until something arrives (None).
    Wait(Option<Nanos>),
    /// Every timeslice is sent and acknowledged.
    Done,
}

/// What an input tells the compute nodes still there when it gives one up: for each residue
/// r (timeslices t with t mod C = r) the lost node took from it, the timeslice below which
/// that node had finished all it took, as far as this input knows from its acknowledgements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostReport {
    pub compute: usize,
    pub finished: Vec<(u64, u64)>,
}

pub struct InputNode {
    rings: RingSizes,
    /// Timeslices 0..limit are sent (None: no end).
    limit: Option<u64>,
    schedule: Box<dyn InputSchedule>,
    written: Vec<Pointers>,
    acked: Vec<Pointers>,
    /// Per compute node, components not yet acknowledged: timeslice and where it ends.
    in_flight: Vec<VecDeque<(u64, Pointers)>>,
    /// Per compute node and residue, one past the largest timeslice it acknowledged.
    acked_below: Vec<BTreeMap<u64, u64>>,
    owners: Owners,
    /// Timeslices a lost compute node had not acknowledged, to send again to their new owners.
    resend: VecDeque<u64>,
    /// Messages and closes to carry out before anything else.
    outbox: VecDeque<InputAction>,
    liveness: Option<Liveness>,
    sent: u64,
    /// Whether the scheduler has planned past the limit (nothing more to send).
    exhausted: bool,
    /// One past the largest timeslice sent.
    horizon: u64,
    /// Stopped at the horizon until the run's end is agreed.
    paused: bool,
    stopping: bool,
    /// With a source that produces at a rate: nanoseconds per microslice, and the slicing
    /// that says which microslices a timeslice needs.
    source: Option<(Nanos, Slicing)>,
}

impl InputNode {
    pub fn new(computes: usize, rings: RingSizes, limit: Option<u64>, schedule: Box<dyn InputSchedule>) -> Self {
        InputNode {
            rings,
            limit,
            schedule,
            written: vec![Pointers::default(); computes],
            acked: vec![Pointers::default(); computes],
            in_flight: vec![VecDeque::new(); computes],
            acked_below: vec![BTreeMap::new(); computes],
            owners: Owners::new(computes),
            resend: VecDeque::new(),
            outbox: VecDeque::new(),
            liveness: None,
            sent: 0,
            exhausted: false,
            horizon: 0,
            paused: false,
            stopping: false,
            source: None,
        }
    }

    /// A source that produces one microslice every `microslice_ns`, as a detector does: a
    /// timeslice goes out only once its last microslice (overlap included) exists.
    pub fn with_source_rate(mut self, microslice_ns: Nanos, slicing: Slicing) -> Self {
        self.source = (microslice_ns > 0).then_some((microslice_ns, slicing));
        self
    }

    /// The next action at `now` (before liveness has its say); `size_of(ts)` gives the bytes
    /// of timeslice ts's component.
    fn poll_work(&mut self, now: Nanos, mut size_of: impl FnMut(u64) -> u64) -> Result<InputAction> {
        if let Some(a) = self.outbox.pop_front() {
            return Ok(a);
        }
        if let Some(&ts) = self.resend.front() {
            let compute = self.owner(ts)?;
            let placed = self.place(compute, ts, size_of(ts))?;
            if placed.is_some() {
                self.resend.pop_front();
            }
            return Ok(placed.unwrap_or(InputAction::Wait(None)));
        }
        loop {
            if self.limit.is_some_and(|l| self.sent >= l) {
                self.exhausted = true;
            }
            if self.exhausted {
                let idle = self.in_flight.iter().all(|q| q.is_empty()) && self.resend.is_empty();
                return Ok(if idle { InputAction::Done } else { InputAction::Wait(None) });
            }
            if self.paused {
                return Ok(InputAction::Wait(None));
            }
            let Some(plan) = self.schedule.next(now) else { return Ok(InputAction::Wait(None)) };
            if self.limit.is_some_and(|l| plan.ts >= l) {
                // Past the end (a round the limit cuts): counted as sent and acknowledged, so
                // the scheduler's bookkeeping closes.
                self.schedule.sent(now);
                if let Some(r) = self.schedule.acked(plan.ts, now) {
                    self.broadcast(Msg::Report(r));
                }
                continue;
            }
            let ready = self.source.map_or(0, |(ns, slicing)| slicing.microslices(plan.ts).end.saturating_mul(ns));
            if plan.due.max(ready) > now {
                return Ok(InputAction::Wait(Some(plan.due.max(ready))));
            }
            // The scheduler plans for C compute nodes; a lost one's timeslices go to others.
            let compute = self.owner(plan.ts)?;
            let Some(write) = self.place(compute, plan.ts, size_of(plan.ts))? else {
                return Ok(InputAction::Wait(None));
            };
            self.schedule.sent(now);
            self.sent += 1;
            self.horizon = self.horizon.max(plan.ts + 1);
            return Ok(write);
        }
    }

    fn owner(&self, ts: u64) -> Result<usize> {
        self.owners.owner(ts).ok_or_else(|| FlesError::from(Lost::EveryComputeNode))
    }

    /// Places timeslice `ts`'s component of `size` bytes in `compute`'s rings, if they have room.
    fn place(&mut self, compute: usize, ts: u64, size: u64) -> Result<Option<InputAction>> {
        if size > self.rings.data {
            return Err(FlesError::Config(format!(
                "timeslice {ts}'s component is {size} bytes, more than the {}-byte ring",
                self.rings.data
            )));
        }
        let c = compute;
        let Some(offset) = self.rings.room(self.written[c], self.acked[c], size) else { return Ok(None) };
        let slot = self.written[c].desc;
        let pointers = Pointers { data: offset + size, desc: slot + 1 };
        self.written[c] = pointers;
        self.in_flight[c].push_back((ts, pointers));
        // FLESnet's num_microslices is filled in by the driver, which built the component.
        let desc = ComponentDescriptor { ts_num: ts, offset, size, num_microslices: 0 };
        Ok(Some(InputAction::Write { compute: c, slot, desc, pointers }))
    }

    /// Compute node `compute` is gone: the timeslices it had not acknowledged go again to
    /// their new owners, and so do all it would have taken. Returns what to tell every compute
    /// node still there, or None if it was already given up.
    fn on_compute_lost(&mut self, compute: usize) -> Result<Option<LostReport>> {
        let before = self.owners.clone();
        if !self.owners.lose(compute) {
            return Ok(None);
        }
        self.owner(0)?;
        let computes = self.in_flight.len() as u64;
        let unacked: Vec<u64> = self.in_flight[compute].drain(..).map(|(ts, _)| ts).collect();
        let queued = self.resend.iter().copied().filter(|&ts| before.owner(ts) == Some(compute));
        let mut first_unacked = BTreeMap::new();
        for ts in unacked.iter().copied().chain(queued) {
            let e = first_unacked.entry(ts % computes).or_insert(ts);
            *e = (*e).min(ts);
        }
        let acked = std::mem::take(&mut self.acked_below[compute]);
        let finished = acked
            .into_iter()
            .map(|(r, below)| (r, first_unacked.get(&r).map_or(below, |&u: &u64| u.min(below))))
            .collect();
        self.resend.extend(unacked);
        self.resend.make_contiguous().sort_unstable();
        Ok(Some(LostReport { compute, finished }))
    }

    /// Whether compute node `compute` was given up.
    pub fn is_compute_lost(&self, compute: usize) -> bool {
        self.owners.is_lost(compute)
    }

    /// Compute node `compute` has given back its rings up to `acked`.
    pub fn on_ack(&mut self, compute: usize, acked: Pointers, now: Nanos) -> Result<()> {
        if self.owners.is_lost(compute) {
            return Ok(()); // given up on: what it acknowledged goes again anyway
        }
        let (old, written) = (self.acked[compute], self.written[compute]);
        if acked.data < old.data || acked.desc < old.desc || acked.data > written.data || acked.desc > written.desc {
            let rule = format!("acknowledged {acked:?} after {old:?}, with {written:?} written");
            return Err(Violation::Broke { role: Role::ComputeNode, index: compute, rule }.into());
        }
        self.acked[compute] = acked;
        while let Some(&(ts, end)) = self.in_flight[compute].front() {
            if end.desc > acked.desc {
                break;
            }
            self.in_flight[compute].pop_front();
            let below = self.acked_below[compute].entry(ts % self.in_flight.len() as u64).or_default();
            *below = (*below).max(ts + 1);
            if let Some(r) = self.schedule.acked(ts, now) {
                self.broadcast(Msg::Report(r));
            }
        }
        Ok(())
    }

    /// Stops sending new timeslices until [`on_end`](Self::on_end), for a run that winds
    /// down, and tells every compute node its horizon (once).
    pub fn stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        let horizon = match self.limit {
            Some(limit) if self.horizon >= limit => limit, // everything is sent
            _ => {
                self.paused = true;
                self.horizon
            }
        };
        self.broadcast(Msg::Stop { horizon });
    }

    /// The compute nodes agreed that the run ends before timeslice `end`.
    pub fn on_end(&mut self, end: u64) -> Result<()> {
        if end < self.horizon {
            return Err(Violation::EndBehindSent { end, sent: self.horizon - 1 }.into());
        }
        self.limit = Some(self.limit.map_or(end, |l| l.min(end)));
        self.paused = false;
        Ok(())
    }

    pub fn on_proposal(&mut self, p: Proposal) {
        self.schedule.proposal(p);
    }

    /// Whether `compute` has components of ours it has not acknowledged.
    pub fn owes(&self, compute: usize) -> bool {
        !self.in_flight[compute].is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::RoundRobin;

    fn node(limit: u64) -> InputNode {
        InputNode::new(2, RingSizes { data: 100, descs: 8 }, Some(limit), Box::new(RoundRobin::new(2)))
    }

    #[test]
    fn writes_until_the_ring_is_full_then_waits_for_acks() {
        let mut n = node(10);
        let mut writes = Vec::new();
        while let InputAction::Write { compute, desc, .. } = n.poll(0, |_| 40).unwrap() {
            writes.push((compute, desc.ts_num, desc.offset));
        }
        // Two 40-byte components per 100-byte ring; the third would need the skipped tail.
        assert_eq!(writes, [(0, 0, 0), (1, 1, 0), (0, 2, 40), (1, 3, 40)]);
        assert_eq!(n.poll(0, |_| 40).unwrap(), InputAction::Wait(None));
        n.on_ack(0, Pointers { data: 40, desc: 1 }, 1).unwrap();
        match n.poll(1, |_| 40).unwrap() {
            InputAction::Write { compute: 0, desc, pointers, slot: 2 } => {
                assert_eq!((desc.ts_num, desc.offset), (4, 100));
                assert_eq!(pointers, Pointers { data: 140, desc: 3 });
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn stops_at_its_horizon_until_the_end_is_agreed() {
        let mut n = InputNode::new(2, RingSizes { data: 100, descs: 8 }, None, Box::new(RoundRobin::new(2)));
        assert!(matches!(n.poll(0, |_| 10).unwrap(), InputAction::Write { .. }));
        n.stop();
        n.stop();
        for compute in 0..2 {
            let told = InputAction::Send { compute, msg: Msg::Stop { horizon: 1 } };
            assert_eq!(n.poll(0, |_| 10).unwrap(), told, "every compute node hears, once");
        }
        assert_eq!(n.poll(0, |_| 10).unwrap(), InputAction::Wait(None), "paused");
        assert!(n.on_end(0).is_err(), "timeslice 0 is sent");
        n.on_end(2).unwrap();
        assert!(matches!(n.poll(0, |_| 10).unwrap(), InputAction::Write { desc, .. } if desc.ts_num == 1));
        assert_eq!(n.poll(0, |_| 10).unwrap(), InputAction::Wait(None), "acks to come");
        n.on_ack(0, Pointers { data: 10, desc: 1 }, 0).unwrap();
        n.on_ack(1, Pointers { data: 10, desc: 1 }, 0).unwrap();
        assert_eq!(n.poll(0, |_| 10).unwrap(), InputAction::Done);
    }

    #[test]
    fn a_rated_source_sends_each_timeslice_once_its_microslices_exist() {
        let slicing = Slicing::count(4, 1);
        let mut n = node(10).with_source_rate(100, slicing);
        // Timeslice 0 needs microslices 0 to 4: the fifth exists at 500 ns.
        assert_eq!(n.poll(0, |_| 10).unwrap(), InputAction::Wait(Some(500)));
        assert!(matches!(n.poll(500, |_| 10).unwrap(), InputAction::Write { desc, .. } if desc.ts_num == 0));
        assert_eq!(n.poll(500, |_| 10).unwrap(), InputAction::Wait(Some(900)));
    }

    #[test]
    fn finishes_once_everything_is_acknowledged() {
        let mut n = node(2);
        assert!(matches!(n.poll(0, |_| 10).unwrap(), InputAction::Write { .. }));
        assert!(matches!(n.poll(0, |_| 10).unwrap(), InputAction::Write { .. }));
        assert_eq!(n.poll(0, |_| 10).unwrap(), InputAction::Wait(None));
        n.on_ack(0, Pointers { data: 10, desc: 1 }, 0).unwrap();
        n.on_ack(1, Pointers { data: 10, desc: 1 }, 0).unwrap();
        assert_eq!(n.poll(0, |_| 10).unwrap(), InputAction::Done);
    }

    #[test]
    fn acknowledgements_must_move_forward_within_what_was_written() {
        let mut n = node(4);
        n.poll(0, |_| 10).unwrap();
        assert!(n.on_ack(0, Pointers { data: 20, desc: 1 }, 0).is_err());
        n.on_ack(0, Pointers { data: 10, desc: 1 }, 0).unwrap();
        assert!(n.on_ack(0, Pointers { data: 0, desc: 0 }, 0).is_err());
    }

    #[test]
    fn a_component_larger_than_the_ring_is_a_clear_error() {
        let e = node(1).poll(0, |_| 101).unwrap_err();
        assert!(e.to_string().contains("more than the 100-byte ring"), "{e}");
    }
}
