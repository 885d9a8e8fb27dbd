//! An input as a SimGrid actor: the real `InputNode` and scheduler, its components put as
//! transfers of their true size, at most `in_flight` at a time (the NIC's send queue).

use super::net::{Port, SimMsg, Wake, now_ns};
use super::{Shared, seconds};
use crate::error::{Result, Violation};
use crate::model::Slicing;
use crate::node::{InputAction, InputNode, Thinned};
use crate::run::InputSummary;

/// Samples of bytes sent kept per input.
const SAMPLES_KEPT: usize = 2_000;

/// Runs input `index`; None if it was turned off.
pub(super) fn run(sh: &Shared, port: &mut Port, index: usize) -> Result<Option<InputSummary>> {
    let s = &sh.settings;
    let mut node = InputNode::new(s.computes, s.rings, Some(s.timeslices), s.scheduler.input(index, s.computes))
        .with_liveness(s.liveness(), now_ns());
    if s.input_rate > 0.0 {
        // One component a period: its bytes at the source's rate.
        let period = (s.component_size as f64 / s.input_rate).ceil() as u64;
        node = node.with_source_rate(period, Slicing::count(1, 0));
    }
    let mut summary = InputSummary { index, ..InputSummary::default() };
    let mut sent = Thinned::new(SAMPLES_KEPT);
    loop {
        let now = now_ns();
        node.handle_timeout(now)?;
        let mut until = None;
        if port.in_flight() < s.in_flight {
            match node.poll(now, |ts| s.component_bytes(index, ts))? {
                InputAction::Write { compute, slot: _, mut desc, pointers } => {
                    desc.num_microslices = 1;
                    summary.components += 1;
                    summary.bytes += desc.size;
                    sent.push((seconds(now), summary.bytes));
                    port.send_tracked(sh.compute_id(compute), SimMsg::Component { desc, pointers });
                    continue;
                }
                InputAction::Send { compute, msg } => {
                    port.send(sh.compute_id(compute), SimMsg::Ctl(msg));
                    continue;
                }
                InputAction::Close(compute) => {
                    port.send(sh.compute_id(compute), SimMsg::Finished);
                    continue;
                }
                InputAction::Wait(t) => until = t,
                InputAction::Done => break,
            }
        }
        let wake = until.or(node.poll_timeout()).expect("liveness is watched");
        match port.next(seconds(wake.saturating_sub(now)))? {
            Wake::Msg(_, SimMsg::Die) => return Ok(None),
            Wake::Msg(from, msg) => handle(sh, &mut node, from, msg)?,
            Wake::Sent | Wake::Timeout => {}
        }
    }
    let end = now_ns();
    summary.seconds = seconds(end);
    summary.sent = sent.kept().to_vec();
    summary.sent.push((summary.seconds, summary.bytes));
    summary.lost_computes = (0..s.computes).filter(|&c| node.is_compute_lost(c)).collect();
    // A real input's stream ends on every connection, after all it sent there.
    for c in (0..s.computes).filter(|&c| !node.is_compute_lost(c)) {
        port.send(sh.compute_id(c), SimMsg::Finished);
    }
    Ok(Some(summary))
}

/// A message from actor `from`: a compute node.
fn handle(sh: &Shared, node: &mut InputNode, from: usize, msg: SimMsg) -> Result<()> {
    let c = from.wrapping_sub(sh.settings.inputs);
    match msg {
        other if c >= sh.settings.computes => {
            Err(Violation::ActorSent { from, to: "an input", message: format!("{other:?}") }.into())
        }
        SimMsg::Ctl(m) => node.handle(c, m, now_ns()),
        SimMsg::Finished => node.on_closed(c, true),
        other => Err(Violation::ActorSent { from, to: "an input", message: format!("{other:?}") }.into()),
    }
}
