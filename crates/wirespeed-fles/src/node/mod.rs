//! Input and compute nodes as sans-IO state machines, and the rings between them.

pub mod compute;
pub mod input;
pub mod liveness;
mod rescue;
pub mod ring;
pub mod thinned;

pub use compute::{Completion, ComputeAction, ComputeNode};
pub use input::{InputAction, InputNode, LostReport};
pub use liveness::LivenessSettings;
pub use ring::{Pointers, RingSizes};
pub use thinned::Thinned;

#[cfg(test)]
mod tests {
    //! Inputs and compute nodes wired together in memory, every message delivered at once,
    //! time advancing by one tick per pass.

    use super::*;
    use crate::sched::{DfsSettings, Kind};
    use crate::wire::Msg;

    fn run(inputs: usize, computes: usize, limit: u64, kind: Kind) -> Vec<ComputeNode> {
        run_until(inputs, computes, Some(limit), kind, None, None)
    }

    /// A run to `limit`, or wound down from compute node 0 at tick `halt_at`. Compute node
    /// `kill.1` dies at tick `kill.0`: with `kill.2`, once input 0 has written to it that
    /// tick, before the others have; else after releasing what it had but before all of its
    /// acknowledgements went out. Only input 0 notices; the others hear from the rest.
    fn run_until(
        inputs: usize,
        computes: usize,
        mut limit: Option<u64>,
        kind: Kind,
        halt_at: Option<u64>,
        kill: Option<(u64, usize, bool)>,
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
        let mut dead = vec![false; computes];
        let mut delivered = vec![Vec::new(); computes];
        let size = |ts: u64| 100 + ts % 7 * 20;
        for now in 0..100_000u64 {
            if halt_at == Some(now) {
                cns[0].halt();
            }
            let mut done = 0;
            for i in 0..inputs {
                loop {
                    match ins[i].poll(now, size).unwrap() {
                        InputAction::Write { compute, .. } | InputAction::Send { compute, .. } if dead[compute] => {
                            ins[i].on_unreachable(compute).unwrap()
                        }
                        InputAction::Write { compute, slot, desc, pointers } => {
                            let read = |at| {
                                assert_eq!(at, slot % rings.descs);
                                Ok(desc)
                            };
                            cns[compute].handle(i, Msg::Status(pointers), now, read).unwrap();
                        }
                        InputAction::Send { compute, msg } => {
                            cns[compute].handle(i, msg, now, |_| panic!("no status")).unwrap()
                        }
                        InputAction::Close(_) => {}
                        InputAction::Wait(_) => break,
                        InputAction::Done => {
                            done += 1;
                            break;
                        }
                    }
                }
                if let Some((at, k, true)) = kill
                    && i == 0
                    && now == at
                {
                    dead[k] = true;
                    ins[0].on_unreachable(k).unwrap();
                }
            }
            if done == inputs {
                let limit = limit.expect("an end was agreed");
                let live = (0..computes).filter(|&c| !dead[c]);
                assert!(live.clone().all(|c| cns[c].finished()));
                for c in live {
                    let home: Vec<u64> =
                        delivered[c].iter().copied().filter(|ts| ts % computes as u64 == c as u64).collect();
                    let want: Vec<u64> = (0..limit).filter(|ts| ts % computes as u64 == c as u64).collect();
                    if kill.is_none() {
                        assert_eq!(delivered[c], want, "compute node {c} got every timeslice once, in order");
                    } else {
                        assert_eq!(home, want, "compute node {c} got its own in order");
                    }
                }
                let mut all: Vec<u64> = delivered.concat();
                all.sort_unstable();
                assert_eq!(all, (0..limit).collect::<Vec<_>>(), "every timeslice once, none lost");
                return cns;
            }
            // Compute nodes release what they got one tick later, newest first.
            for c in 0..computes {
                if dead[c] {
                    continue;
                }
                let dies = kill.is_some_and(|(at, k, mid)| !mid && at <= now && k == c);
                let mut got = Vec::new();
                while let Some(a) = cns[c].next_action() {
                    match a {
                        ComputeAction::Deliver { ts, components } => {
                            assert_eq!(components.len(), inputs);
                            assert!(components.iter().all(|d| d.is_some_and(|d| d.ts_num == ts && d.size == size(ts))));
                            delivered[c].push(ts);
                            got.push(ts);
                        }
                        ComputeAction::Send { input, msg } => {
                            if let Msg::End { at } = msg {
                                assert!(limit.is_none_or(|l| l == at), "every compute node agrees");
                                limit = Some(at);
                            }
                            ins[input].handle(c, msg, now).unwrap();
                        }
                        ComputeAction::Arrived { .. } | ComputeAction::Close(_) => {}
                    }
                }
                let cn = &mut cns[c];
                got.into_iter().rev().for_each(|ts| cn.release(ts));
                while let Some(a) = cn.next_action() {
                    if let ComputeAction::Send { input, msg } = a
                        && (!dies || input == 0)
                    {
                        ins[input].handle(c, msg, now).unwrap();
                    }
                }
                if dies && !delivered[c].is_empty() {
                    dead[c] = true;
                    ins[0].on_unreachable(c).unwrap();
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
                run_until(3, 2, None, kind.clone(), Some(halt_at), None);
            }
            // A limit already near: the end is the lower of the two.
            run_until(2, 3, Some(5), kind.clone(), Some(2), None);
        }
    }

    #[test]
    fn a_lost_compute_nodes_timeslices_go_to_the_others_none_lost_none_twice() {
        for kind in [Kind::RoundRobin, Kind::Dfs(DfsSettings { interval_length: 6, ..DfsSettings::default() })] {
            for mid in [false, true] {
                for (inputs, computes, at, k) in [(3, 3, 2, 1), (2, 4, 5, 0), (4, 2, 3, 1), (3, 5, 1, 4)] {
                    let cns = run_until(inputs, computes, Some(120), kind.clone(), None, Some((at, k, mid)));
                    assert!(cns.iter().enumerate().all(|(c, n)| c == k || n.is_compute_lost(k)));
                }
                // Winding down while one is lost.
                run_until(3, 3, None, kind.clone(), Some(30), Some((4, 2, mid)));
            }
        }
    }
}
