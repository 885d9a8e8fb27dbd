//! A compute node's messages: what each one from an input does, what goes back, and the
//! inputs' liveness. Drivers pass in what arrives and the time, and carry out the actions.

use super::{ComputeAction, ComputeNode};
use crate::error::{Result, Role, Violation};
use crate::model::ComponentDescriptor;
use crate::node::liveness::{Liveness, LivenessSettings};
use crate::sched::Nanos;
use crate::wire::Msg;

impl ComputeNode {
    /// Watches the inputs' liveness from `now`, and beats to them.
    pub fn with_liveness(mut self, settings: LivenessSettings, now: Nanos) -> Self {
        self.liveness = Some(Liveness::new(self.inputs(), settings, now));
        self
    }

    /// `msg` from input `input` at `now`; `read(slot)` reads the descriptor at a position of
    /// that input's descriptor ring (a status message says which are new).
    pub fn handle(
        &mut self,
        input: usize,
        msg: Msg,
        now: Nanos,
        mut read: impl FnMut(u64) -> Result<ComponentDescriptor>,
    ) -> Result<()> {
        if input >= self.inputs() {
            return Err(Violation::NoSuchPeer { role: Role::Input, index: input, count: self.inputs() }.into());
        }
        if let Some(l) = &mut self.liveness {
            l.heard(input, now, msg == Msg::Heartbeat);
        }
        if self.lost[input] {
            return Ok(()); // given up on: it may have been only slow
        }
        match msg {
            Msg::Status(p) => {
                for slot in self.on_status(input, p)? {
                    let desc = read(slot % self.rings.descs)?;
                    self.on_component(input, desc, now)?;
                }
                Ok(())
            }
            Msg::Report(r) => self.on_report(r),
            Msg::Stop { horizon } => self.on_stop(input, horizon),
            Msg::Lost { compute, finished } => self.on_compute_lost(input, compute as usize, finished),
            Msg::Heartbeat => Ok(()),
            other => {
                Err(Violation::Unexpected { role: Role::Input, index: input, message: format!("{other:?}") }.into())
            }
        }
    }

    /// Input `input`'s connection ended: cleanly once all it sent was acknowledged, or not.
    pub fn on_closed(&mut self, input: usize, clean: bool, now: Nanos) -> Result<()> {
        if clean {
            self.on_input_ended(input);
            Ok(())
        } else {
            self.on_input_lost(input, now)
        }
    }

    /// When the driver must call [`handle_timeout`](Self::handle_timeout) at the latest.
    pub fn poll_timeout(&mut self) -> Option<Nanos> {
        self.liveness.as_mut().map(Liveness::poll_timeout)
    }

    /// The time is `now`: beats to the inputs when due, and goes on without those found dead.
    pub fn handle_timeout(&mut self, now: Nanos) -> Result<()> {
        let Some(l) = &mut self.liveness else { return Ok(()) };
        let verdict = l.judge(now, Role::Input)?;
        for input in verdict.dead {
            if !self.done_inputs[input] {
                self.on_input_lost(input, now)?;
            }
        }
        if verdict.beat {
            self.broadcast(Msg::Heartbeat);
        }
        Ok(())
    }

    /// Inputs suspected of being gone (silent past more than one beat), and this node's
    /// longest pause (its process descheduled or its loop held up), ns.
    pub fn liveness_seen(&self) -> (usize, Nanos) {
        self.liveness.as_ref().map_or((0, 0), |l| (l.suspected(), l.longest_pause))
    }

    pub(super) fn send(&mut self, input: usize, msg: Msg) {
        if !self.lost[input] {
            self.actions.push_back(ComputeAction::Send { input, msg });
        }
    }

    /// Sends `msg` to every input still there.
    pub(super) fn broadcast(&mut self, msg: Msg) {
        for input in 0..self.inputs() {
            self.send(input, msg.clone());
        }
    }
}
