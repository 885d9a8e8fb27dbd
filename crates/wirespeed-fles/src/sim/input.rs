//! An input as a SimGrid actor: the real `InputNode` and scheduler, its components put as
//! transfers of their true size, at most `in_flight` at a time (the NIC's send queue).

use super::net::{Port, SimMsg, Wake, now_ns};
use super::{Shared, seconds};
use crate::error::{FlesError, Result};
use crate::model::Slicing;
use crate::node::{InputAction, InputNode, Thinned};
use crate::run::InputSummary;
use crate::wire::Msg;

/// Samples of bytes sent kept per input.
const SAMPLES_KEPT: usize = 2_000;

/// Runs input `index`; None if it was turned off.
pub(super) fn run(sh: &Shared, port: &mut Port, index: usize) -> Result<Option<InputSummary>> {
    let s = &sh.settings;
    let mut node = InputNode::new(s.computes, s.rings, Some(s.timeslices), s.scheduler.input(index, s.computes));
    if s.input_rate > 0.0 {
        // One component a period: its bytes at the source's rate.
        let period = (s.component_size as f64 / s.input_rate).ceil() as u64;
        node = node.with_source_rate(period, Slicing::count(1, 0));
    }
    let mut summary = InputSummary { index, ..InputSummary::default() };
    let mut sent = Thinned::new(SAMPLES_KEPT);
    let mut quiet_since = now_ns();
    loop {
        let now = now_ns();
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
                InputAction::Report(r) => {
                    send_all(sh, port, &node, Msg::Report(r));
                    continue;
                }
                InputAction::Wait(t) => until = t,
                InputAction::Done => break,
            }
        }
        let idle = s.timeout - seconds(now - quiet_since);
        let wait = until.map_or(idle, |t| seconds(t - now).min(idle));
        match port.next(wait)? {
            Wake::Msg(_, SimMsg::Die) => return Ok(None),
            Wake::Msg(from, msg) => {
                handle(sh, port, &mut node, from, msg)?;
                quiet_since = now_ns();
            }
            Wake::Sent => quiet_since = now_ns(),
            Wake::Timeout if until.is_some() => {}
            Wake::Timeout => {
                return Err(FlesError::Net(format!(
                    "input {index}: no acknowledgement from any compute node for {} simulated s",
                    s.timeout
                )));
            }
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

fn handle(sh: &Shared, port: &mut Port, node: &mut InputNode, from: usize, msg: SimMsg) -> Result<()> {
    let c = from.wrapping_sub(sh.settings.inputs);
    match msg {
        SimMsg::Closed(c) => give_up(sh, port, node, c),
        other if c >= sh.settings.computes => Err(FlesError::Protocol(format!("actor {from} sent an input {other:?}"))),
        // A compute node given up on may still be talking (it was only slow).
        _ if c < sh.settings.computes && node.is_compute_lost(c) => Ok(()),
        SimMsg::Ctl(Msg::Ack(p)) => node.on_ack(c, p, now_ns()),
        SimMsg::Ctl(Msg::Propose(p)) => {
            node.on_proposal(p);
            Ok(())
        }
        SimMsg::Ctl(Msg::Halt) => {
            if let Some(horizon) = node.stop() {
                send_all(sh, port, node, Msg::Stop { horizon });
            }
            Ok(())
        }
        SimMsg::Ctl(Msg::End { at }) => node.on_end(at),
        SimMsg::Ctl(Msg::Leave { compute }) if (compute as usize) < sh.settings.computes => {
            give_up(sh, port, node, compute as usize)
        }
        other => Err(FlesError::Protocol(format!("actor {from} sent an input {other:?}"))),
    }
}

/// Sends `m` to every compute node still there.
fn send_all(sh: &Shared, port: &mut Port, node: &InputNode, m: Msg) {
    for c in (0..sh.settings.computes).filter(|&c| !node.is_compute_lost(c)) {
        port.send(sh.compute_id(c), SimMsg::Ctl(m.clone()));
    }
}

/// Gives compute node `c` up: its timeslices go to the others, and each compute node still
/// there hears what this input knows `c` finished.
fn give_up(sh: &Shared, port: &mut Port, node: &mut InputNode, c: usize) -> Result<()> {
    if let Some(report) = node.on_compute_lost(c)? {
        send_all(sh, port, node, Msg::Lost { compute: c as u32, finished: report.finished });
    }
    Ok(())
}
