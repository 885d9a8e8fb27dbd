//! A compute node as a SimGrid actor: the real `ComputeNode`; each complete timeslice is
//! processed for the run's processing time, one after another, then released.

use std::collections::VecDeque;

use super::net::{Port, SimMsg, Wake, now_ns};
use super::{Shared, seconds};
use crate::error::{FlesError, Result};
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
    let mut node = ComputeNode::new(index, s.inputs, s.computes, s.rings, Some(s.timeslices), dfs);
    let mut summary = ComputeSummary { index, ..ComputeSummary::default() };
    let mut fill = Thinned::new(SAMPLES_KEPT);
    // Timeslices being processed, one after another: when each is done.
    let mut processing: VecDeque<(u64, u64)> = VecDeque::new();
    let mut quiet_since = now_ns();
    loop {
        let now = now_ns();
        while let Some(&(_, ts)) = processing.front().filter(|(at, _)| *at <= now) {
            processing.pop_front();
            node.release(ts);
        }
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
                ComputeAction::Ack { input, acked } if !node.is_lost(input) => {
                    port.send(input, SimMsg::Ctl(Msg::Ack(acked)))
                }
                ComputeAction::Ack { .. } => {}
                ComputeAction::Propose(p) => broadcast(sh, port, &node, Msg::Propose(p)),
                ComputeAction::Halt => broadcast(sh, port, &node, Msg::Halt),
                ComputeAction::End(at) => broadcast(sh, port, &node, Msg::End { at }),
                ComputeAction::Leave(c) => broadcast(sh, port, &node, Msg::Leave { compute: c as u32 }),
            }
        }
        fill.push((seconds(now), node.fill()));
        if node.finished() && processing.is_empty() && node.inputs_gone() {
            break;
        }
        let idle = s.timeout - seconds(now - quiet_since);
        let wait = processing.front().map_or(idle, |&(at, _)| seconds(at - now));
        match port.next(wait)? {
            Wake::Msg(_, SimMsg::Die) => return Ok(None),
            Wake::Msg(from, msg) => {
                handle(&mut node, s.inputs, from, msg, now_ns())?;
                quiet_since = now_ns();
            }
            Wake::Sent => {}
            Wake::Timeout if !processing.is_empty() => {}
            Wake::Timeout => {
                return Err(FlesError::Net(format!(
                    "compute node {index}: nothing from any input for {} simulated s",
                    s.timeout
                )));
            }
        }
    }
    summary.seconds = seconds(now_ns());
    summary.record(&node, s.inputs, s.computes, fill.kept());
    Ok(Some(summary))
}

/// A message from actor `from`: an input (inputs' ids are their indices) or the events.
fn handle(node: &mut ComputeNode, inputs: usize, from: usize, msg: SimMsg, now: u64) -> Result<()> {
    match msg {
        SimMsg::Closed(i) => node.on_input_lost(i, now),
        other if from >= inputs => Err(FlesError::Protocol(format!("actor {from} sent a compute node {other:?}"))),
        _ if node.is_lost(from) => Ok(()), // it was given up on
        SimMsg::Component { desc, pointers } => {
            for _ in node.on_status(from, pointers)? {
                node.on_component(from, desc, now)?;
            }
            Ok(())
        }
        // Its stream's end: everything it sent is in (messages come in order).
        SimMsg::Finished => {
            node.on_input_ended(from);
            Ok(())
        }
        SimMsg::Ctl(Msg::Report(r)) => node.on_report(r),
        SimMsg::Ctl(Msg::Stop { horizon }) => node.on_stop(from, horizon),
        SimMsg::Ctl(Msg::Lost { compute, finished }) => node.on_compute_lost(from, compute as usize, finished),
        other => Err(FlesError::Protocol(format!("input {from} sent {other:?}"))),
    }
}

/// Sends `m` to every input still there.
fn broadcast(sh: &Shared, port: &mut Port, node: &ComputeNode, m: Msg) {
    for i in (0..sh.settings.inputs).filter(|&i| !node.is_lost(i)) {
        port.send(i, SimMsg::Ctl(m.clone()));
    }
}
