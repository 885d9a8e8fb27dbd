//! A compute node as a SimGrid actor: the real `ComputeNode`; each complete timeslice is
//! processed for the run's processing time, one after another, then released.

use std::collections::VecDeque;

use super::net::{Port, SimMsg, Wake, now_ns};
use super::{Shared, seconds};
use crate::error::{Result, Violation};
use crate::node::{ComputeAction, ComputeNode, Thinned};
use crate::run::ComputeSummary;
use crate::sched::Kind;
use crate::wire::Msg;

/// Samples of the buffer fill kept per compute node.
const SAMPLES_KEPT: usize = 2_000;

/// Runs compute node `index`; None if it was turned off.
pub(super) fn run(sh: &Shared, port: &mut Port, index: usize) -> Result<Option<ComputeSummary>> {
    let s = &sh.settings;
    let dfs = match &s.scheduler {
        Kind::Dfs(d) => Some(d.clone()),
        Kind::RoundRobin => None,
    };
    let mut node = ComputeNode::new(index, s.inputs, s.computes, s.rings, Some(s.timeslices), dfs)
        .with_liveness(s.liveness(), now_ns());
    let mut summary = ComputeSummary { index, ..ComputeSummary::default() };
    let mut fill = Thinned::new(SAMPLES_KEPT);
    // Timeslices being processed, one after another: when each is done.
    let mut processing: VecDeque<(u64, u64)> = VecDeque::new();
    loop {
        let now = now_ns();
        while let Some(&(_, ts)) = processing.front().filter(|(at, _)| *at <= now) {
            processing.pop_front();
            node.release(ts);
        }
        node.handle_timeout(now)?;
        while let Some(action) = node.next_action() {
            match action {
                ComputeAction::Deliver { ts, components } => {
                    summary.timeslices += 1;
                    sh.delivered(now);
                    summary.bytes += components.iter().flatten().map(|c| c.size).sum::<u64>();
                    if s.process_ns == 0 {
                        node.release(ts);
                    } else {
                        let start = processing.back().map_or(now, |&(at, _)| at.max(now));
                        processing.push_back((start + s.process_ns, ts));
                    }
                }
                ComputeAction::Send { input, msg } => port.send(input, SimMsg::Ctl(msg)),
                // The end of this node's stream to an input given up on.
                ComputeAction::Close(input) => port.send(input, SimMsg::Finished),
                ComputeAction::Arrived { .. } => {}
            }
        }
        fill.push((seconds(now), node.fill()));
        // Nothing more can come once every input has finished or is lost.
        if processing.is_empty() && node.inputs_gone() {
            break;
        }
        let judge = node.poll_timeout().expect("liveness is watched");
        let wake = processing.front().map_or(judge, |&(at, _)| at.min(judge));
        match port.next(seconds(wake.saturating_sub(now)))? {
            Wake::Msg(_, SimMsg::Die) => return Ok(None),
            Wake::Msg(from, msg) => handle(&mut node, s.inputs, from, msg, now_ns())?,
            Wake::Sent | Wake::Timeout => {}
        }
    }
    summary.seconds = seconds(now_ns());
    summary.record(&node, s.inputs, s.computes, fill.kept());
    Ok(Some(summary))
}

/// A message from actor `from`: an input (inputs' ids are their indices).
fn handle(node: &mut ComputeNode, inputs: usize, from: usize, msg: SimMsg, now: u64) -> Result<()> {
    match msg {
        other if from >= inputs => {
            Err(Violation::ActorSent { from, to: "a compute node", message: format!("{other:?}") }.into())
        }
        // Its descriptor is in the simulated ring, put there before the status.
        SimMsg::Component { desc, pointers } => node.handle(from, Msg::Status(pointers), now, |_| Ok(desc)),
        SimMsg::Ctl(m) => node.handle(from, m, now, |_| {
            Err(Violation::ActorSent { from, to: "a compute node", message: "a status without its put".into() }.into())
        }),
        // Its stream's end: everything it sent is in (messages come in order).
        SimMsg::Finished => node.on_closed(from, true, now),
        other => Err(Violation::ActorSent { from, to: "a compute node", message: format!("{other:?}") }.into()),
    }
}
