//! Input and compute nodes as sans-IO state machines, and the rings between them.

pub mod compute;
pub mod input;
pub mod ring;
pub mod thinned;

pub use compute::{Completion, ComputeAction, ComputeNode};
pub use input::{InputAction, InputNode};
pub use ring::{Pointers, RingSizes};
pub use thinned::Thinned;

#[cfg(test)]
mod tests {
    //! Inputs and compute nodes wired together in memory, every message delivered at once,
    //! time advancing by one tick per pass.

    use super::*;
    use crate::sched::{DfsSettings, Kind};

    fn run(inputs: usize, computes: usize, limit: u64, kind: Kind) -> Vec<ComputeNode> {
        run_until(inputs, computes, Some(limit), kind, None)
    }

    /// A run to `limit`, or wound down from compute node 0 at tick `halt_at`.
    fn run_until(
        inputs: usize,
        computes: usize,
        mut limit: Option<u64>,
        kind: Kind,
        halt_at: Option<u64>,
    ) -> Vec<ComputeNode> {
        let rings = RingSizes { data: 1000, descs: 16 };
        let dfs = match &kind {
            Kind::Dfs(s) => Some(s.clone()),
            Kind::RoundRobin => None,
        };
        let mut ins: Vec<_> =
            (0..inputs).map(|i| InputNode::new(computes, rings, limit, kind.input(i, computes))).collect();
        let mut cns: Vec<_> =
            (0..computes).map(|c| ComputeNode::new(c, inputs, computes, rings, limit, dfs.clone())).collect();
        let mut delivered = vec![Vec::new(); computes];
        let size = |ts: u64| 100 + ts % 7 * 20;
        for now in 0..100_000u64 {
            if halt_at == Some(now) {
                cns[0].halt();
            }
            let mut done = 0;
            for (i, input) in ins.iter_mut().enumerate() {
                loop {
                    match input.poll(now, size).unwrap() {
                        InputAction::Write { compute, slot, desc, pointers } => {
                            let cn = &mut cns[compute];
                            assert_eq!(cn.on_status(i, pointers).unwrap(), slot..slot + 1);
                            cn.on_component(i, desc, now).unwrap();
                        }
                        InputAction::Report(r) => cns.iter_mut().for_each(|c| c.on_report(r).unwrap()),
                        InputAction::Wait(_) => break,
                        InputAction::Done => {
                            done += 1;
                            break;
                        }
                    }
                }
            }
            if done == inputs {
                assert!(cns.iter().all(|c| c.finished()));
                let limit = limit.expect("an end was agreed");
                for (c, d) in delivered.iter().enumerate() {
                    let want: Vec<u64> = (0..limit).filter(|ts| ts % computes as u64 == c as u64).collect();
                    assert_eq!(d, &want, "compute node {c} got every timeslice once, in order");
                }
                return cns;
            }
            // Compute nodes release what they got one tick later, newest first.
            for c in 0..computes {
                let mut got = Vec::new();
                while let Some(a) = cns[c].next_action() {
                    match a {
                        ComputeAction::Deliver { ts, components } => {
                            assert_eq!(components.len(), inputs);
                            assert!(components.iter().all(|d| d.is_some_and(|d| d.ts_num == ts && d.size == size(ts))));
                            delivered[c].push(ts);
                            got.push(ts);
                        }
                        ComputeAction::Ack { input, acked } => ins[input].on_ack(c, acked, now).unwrap(),
                        ComputeAction::Propose(p) => ins.iter_mut().for_each(|i| i.on_proposal(p)),
                        ComputeAction::Halt => {
                            for (i, input) in ins.iter_mut().enumerate() {
                                if let Some(h) = input.stop() {
                                    cns.iter_mut().for_each(|c| c.on_stop(i, h).unwrap());
                                }
                            }
                        }
                        ComputeAction::End(end) => {
                            assert!(limit.is_none_or(|l| l == end), "every compute node agrees");
                            limit = Some(end);
                            ins.iter_mut().for_each(|i| i.on_end(end).unwrap());
                        }
                    }
                }
                let cn = &mut cns[c];
                got.into_iter().rev().for_each(|ts| cn.release(ts));
                while let Some(a) = cn.next_action() {
                    if let ComputeAction::Ack { input, acked } = a {
                        ins[input].on_ack(c, acked, now).unwrap();
                    }
                }
            }
        }
        panic!("the run did not finish");
    }

    #[test]
    fn round_robin_delivers_everything() {
        run(3, 2, 50, Kind::RoundRobin);
        run(2, 5, 51, Kind::RoundRobin);
    }

    #[test]
    fn the_dfs_delivers_everything_and_learns_its_intervals() {
        let s = DfsSettings { interval_length: 6, ..DfsSettings::default() };
        let cns = run(4, 3, 200, Kind::Dfs(s));
        // 200 timeslices in intervals of 6: the last complete interval is 32 (0-based).
        assert_eq!(cns[0].intervals.len(), 33);
        assert_eq!(cns[0].intervals, cns[2].intervals, "every compute node learns the same");
        // A limit inside an interval still ends the run.
        run(3, 4, 30, Kind::Dfs(DfsSettings { interval_length: 8, ..DfsSettings::default() }));
    }

    #[test]
    fn a_halt_winds_down_to_an_end_every_node_agrees_on() {
        for kind in [Kind::RoundRobin, Kind::Dfs(DfsSettings { interval_length: 6, ..DfsSettings::default() })] {
            for halt_at in [0, 3, 40] {
                run_until(3, 2, None, kind.clone(), Some(halt_at));
            }
            // A limit already near: the end is the lower of the two.
            run_until(2, 3, Some(5), kind.clone(), Some(2));
        }
    }
}
