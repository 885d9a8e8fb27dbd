//! An input's messages: what each one from a compute node does, what goes out, and the
//! compute nodes' liveness. Drivers pass in what arrives and the time, and carry out the
//! actions.

use super::{InputAction, InputNode};
use crate::error::{Result, Role, Violation};
use crate::node::liveness::{Liveness, LivenessSettings};
use crate::sched::Nanos;
use crate::wire::Msg;

impl InputNode {
    /// Watches the compute nodes' liveness from `now`, and beats to them.
    pub fn with_liveness(mut self, settings: LivenessSettings, now: Nanos) -> Self {
        self.liveness = Some(Liveness::new(self.computes(), settings, now));
        self
    }

    fn computes(&self) -> usize {
        self.in_flight.len()
    }

    /// The next action at `now`: a message or close first, then a component to write, or how
    /// long to wait (no later than liveness needs). `size_of(ts)` gives the bytes of
    /// timeslice ts's component.
    pub fn poll(&mut self, now: Nanos, size_of: impl FnMut(u64) -> u64) -> Result<InputAction> {
        // Only a wait asks liveness when to wake: the answer says the node sleeps until then.
        Ok(match self.poll_work(now, size_of)? {
            InputAction::Wait(until) => match self.liveness.as_mut().map(Liveness::poll_timeout) {
                Some(judge) => InputAction::Wait(Some(until.map_or(judge, |u| u.min(judge)))),
                None => InputAction::Wait(until),
            },
            action => action,
        })
    }

    /// `msg` from compute node `compute` at `now`.
    pub fn handle(&mut self, compute: usize, msg: Msg, now: Nanos) -> Result<()> {
        let computes = self.computes();
        if compute >= computes {
            return Err(Violation::NoSuchPeer { role: Role::ComputeNode, index: compute, count: computes }.into());
        }
        if let Some(l) = &mut self.liveness {
            l.heard(compute, now, msg == Msg::Heartbeat);
        }
        if self.is_compute_lost(compute) {
            return Ok(()); // given up on: it may have been only slow
        }
        match msg {
            Msg::Ack(p) => self.on_ack(compute, p, now),
            Msg::Propose(p) => {
                self.on_proposal(p);
                Ok(())
            }
            Msg::Halt => {
                self.stop();
                Ok(())
            }
            Msg::End { at } => self.on_end(at),
            Msg::Heartbeat => Ok(()),
            Msg::Leave { compute: lost } if (lost as usize) < computes => self.give_up(lost as usize),
            other => {
                Err(Violation::Unexpected { role: Role::ComputeNode, index: compute, message: format!("{other:?}") }
                    .into())
            }
        }
    }

    /// Compute node `compute`'s connection ended: cleanly once it has every timeslice it
    /// takes; before that, or not cleanly, it is lost and the others take its timeslices.
    pub fn on_closed(&mut self, compute: usize, clean: bool) -> Result<()> {
        if clean && !self.owes(compute) {
            if let Some(l) = &mut self.liveness {
                l.forget(compute);
            }
            return Ok(());
        }
        self.give_up(compute)
    }

    /// Compute node `compute` could not be reached (a write or message failed).
    pub fn on_unreachable(&mut self, compute: usize) -> Result<()> {
        self.give_up(compute)
    }

    /// When [`handle_timeout`](Self::handle_timeout) is due at the latest.
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        self.liveness.as_mut().map(Liveness::poll_timeout)
    }

    /// The time is `now`: beats to the compute nodes when due, and gives up those found dead.
    pub fn handle_timeout(&mut self, now: Nanos) -> Result<()> {
        let Some(l) = &mut self.liveness else { return Ok(()) };
        let verdict = l.judge(now, Role::ComputeNode)?;
        for compute in verdict.dead {
            self.give_up(compute)?;
        }
        if verdict.beat {
            self.broadcast(Msg::Heartbeat);
        }
        Ok(())
    }

    /// Compute nodes suspected of being gone, and this node's longest pause, ns.
    pub fn liveness_seen(&self) -> (usize, Nanos) {
        self.liveness.as_ref().map_or((0, 0), |l| (l.suspected(), l.longest_pause))
    }

    /// Gives compute node `compute` up: its timeslices go to the others, its connection is
    /// closed, and each compute node still there hears what this input knows it finished.
    fn give_up(&mut self, compute: usize) -> Result<()> {
        let Some(report) = self.on_compute_lost(compute)? else { return Ok(()) };
        if let Some(l) = &mut self.liveness {
            l.forget(compute);
        }
        self.outbox.push_back(InputAction::Close(compute));
        self.broadcast(Msg::Lost { compute: compute as u32, finished: report.finished });
        Ok(())
    }

    /// Sends `msg` to every compute node still there.
    pub(super) fn broadcast(&mut self, msg: Msg) {
        for compute in 0..self.computes() {
            if !self.is_compute_lost(compute) {
                self.outbox.push_back(InputAction::Send { compute, msg: msg.clone() });
            }
        }
    }
}
