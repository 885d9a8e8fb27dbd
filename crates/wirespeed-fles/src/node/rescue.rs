//! A compute node's side of losing another compute node, sans-IO. Every input that gives
//! the lost node up says, per residue (t mod C), below which timeslice that node had
//! acknowledged everything to it; an acknowledgement means the node released the timeslice,
//! so the largest such bound over the inputs splits what it finished from what it did not.
//! The latter, and everything it would have taken, go to their new owners (see
//! [`Owners`]), which deliver them in order per residue: a "chain".

use std::collections::BTreeMap;

use crate::error::{Lost, Result, Role, Violation};
use crate::sched::{Owners, compute_of};

/// What a compute node does with a timeslice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Another node's.
    NotMine,
    /// One of its own (t mod C is its index).
    Home,
    /// Taken over when loss `k` moved it here.
    Adopted(usize),
    /// A lost node finished it before it was lost: it is dropped.
    Done,
    /// A lost node held it, and the inputs have not all said yet what that node finished.
    Unknown,
}

struct Loss {
    compute: usize,
    /// The compute nodes lost before this one.
    lost_before: Vec<bool>,
    /// Each input's report, until every input still here has sent one.
    reports: Vec<Option<Vec<(u64, u64)>>>,
    /// Per residue, below which the lost node had finished all it took; None until agreed.
    finished: Option<BTreeMap<u64, u64>>,
}

/// The timeslices of one residue that one loss moved here, delivered in order.
struct Chain {
    loss: usize,
    residue: u64,
    /// The next to deliver; u64::MAX once there are no more.
    next: u64,
}

pub(crate) struct Rescue {
    index: usize,
    owners: Owners,
    losses: Vec<Loss>,
    chains: Vec<Chain>,
}

impl Rescue {
    pub(super) fn new(index: usize, computes: usize) -> Self {
        Rescue { index, owners: Owners::new(computes), losses: Vec::new(), chains: Vec::new() }
    }

    fn computes(&self) -> u64 {
        self.owners.lost().len() as u64
    }

    pub(super) fn fate(&self, ts: u64) -> Fate {
        if self.owners.owner(ts) != Some(self.index) {
            return Fate::NotMine;
        }
        if compute_of(ts, self.computes() as usize) == self.index {
            return Fate::Home;
        }
        let mut moved = None;
        for (k, loss) in self.losses.iter().enumerate() {
            if self.owners.owner_without(ts, &loss.lost_before) != Some(loss.compute) {
                continue;
            }
            match &loss.finished {
                None => return Fate::Unknown,
                Some(f) if ts < f.get(&(ts % self.computes())).copied().unwrap_or(0) => return Fate::Done,
                Some(_) => moved = Some(k),
            }
        }
        moved.map_or(Fate::NotMine, Fate::Adopted)
    }

    /// Input `input` (of `inputs`) gave compute node `compute` up, with what it knows that
    /// node finished. Returns whether the loss is news here (the inputs should all hear).
    pub(super) fn on_report(
        &mut self,
        input: usize,
        inputs: usize,
        compute: usize,
        finished: Vec<(u64, u64)>,
    ) -> Result<bool> {
        if compute == self.index {
            return Err(Lost::GivenUpBy { input }.into());
        }
        if compute as u64 >= self.computes() {
            let rule = format!("lost compute node {compute}, of {}", self.computes());
            return Err(Violation::Broke { role: Role::Input, index: input, rule }.into());
        }
        let news = !self.owners.is_lost(compute);
        if news {
            if let Some(open) = self.losses.iter().find(|l| l.finished.is_none()) {
                return Err(Lost::TwoAtOnce { first: open.compute, second: compute }.into());
            }
            let lost_before = self.owners.lost().to_vec();
            self.owners.lose(compute);
            self.losses.push(Loss { compute, lost_before, reports: vec![None; inputs], finished: None });
        }
        let loss = self.losses.iter_mut().find(|l| l.compute == compute).expect("recorded");
        if loss.finished.is_none() {
            loss.reports[input] = Some(finished);
        }
        Ok(news)
    }

    /// Agrees on the open loss once every input not in `lost_inputs` has reported; returns
    /// whether that happened now.
    pub(super) fn try_agree(&mut self, lost_inputs: &[bool]) -> bool {
        let Some(k) = self.losses.iter().position(|l| l.finished.is_none()) else { return false };
        let loss = &mut self.losses[k];
        if loss.reports.iter().zip(lost_inputs).any(|(r, &lost)| r.is_none() && !lost) {
            return false;
        }
        let mut finished = BTreeMap::new();
        for (r, below) in loss.reports.iter().flatten().flatten() {
            let e = finished.entry(*r).or_insert(0);
            *e = (*e).max(*below);
        }
        loss.finished = Some(finished);
        // The residues the lost node held: its own, and those it had taken over.
        let residues: Vec<u64> = self.losses[..=k].iter().map(|l| l.compute as u64).collect();
        for residue in residues {
            let from = self.losses[k].finished.as_ref().expect("just set").get(&residue).copied().unwrap_or(0);
            let start = first_of_residue(from, residue, self.computes());
            if let Some(next) = self.member(k, residue, start) {
                self.chains.push(Chain { loss: k, residue, next });
            }
        }
        true
    }

    /// The first timeslice from `from` (of `residue`) that loss `k` moved here. The pattern
    /// repeats every C − 1 rounds once past the losses' bounds, so the search ends.
    fn member(&self, k: usize, residue: u64, from: u64) -> Option<u64> {
        let c = self.computes();
        let bounds = self.losses.iter().filter_map(|l| l.finished.as_ref()).filter_map(|f| f.get(&residue));
        let last = bounds.copied().max().unwrap_or(0).max(from) + c * c;
        (from..last).step_by(c as usize).find(|&ts| self.fate(ts) == Fate::Adopted(k))
    }

    /// Whether a loss is still to be agreed on.
    pub(super) fn open(&self) -> bool {
        self.losses.iter().any(|l| l.finished.is_none())
    }

    /// The next timeslice of the chain that `ts`, adopted by loss `k`, belongs to.
    pub(super) fn next_of(&self, k: usize, ts: u64) -> u64 {
        let r = ts % self.computes();
        self.chains.iter().find(|ch| ch.loss == k && ch.residue == r).map_or(u64::MAX, |ch| ch.next)
    }

    /// The chains' next timeslices.
    pub(super) fn nexts(&self) -> impl Iterator<Item = u64> + '_ {
        self.chains.iter().map(|ch| ch.next)
    }

    /// Chain `i`'s next timeslice, if there is a chain `i`.
    pub(super) fn chain_next(&self, i: usize) -> Option<u64> {
        self.chains.get(i).map(|ch| ch.next)
    }

    /// Chain `i`'s next timeslice was delivered: moves on to the one after.
    pub(super) fn advance(&mut self, i: usize) {
        let ch = &self.chains[i];
        let after = ch.next.saturating_add(self.computes());
        self.chains[i].next = self.member(ch.loss, ch.residue, after).unwrap_or(u64::MAX);
    }

    pub(super) fn is_lost(&self, compute: usize) -> bool {
        self.owners.is_lost(compute)
    }
}

/// The first timeslice t ≥ `from` with t mod c = `residue`.
fn first_of_residue(from: u64, residue: u64, c: u64) -> u64 {
    if from <= residue { residue } else { residue + (from - residue).div_ceil(c) * c }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_of_a_residue() {
        assert_eq!(first_of_residue(0, 2, 4), 2);
        assert_eq!(first_of_residue(3, 2, 4), 6);
        assert_eq!(first_of_residue(6, 2, 4), 6);
    }

    #[test]
    fn what_the_lost_node_finished_is_dropped_the_rest_adopted_in_chains() {
        // 3 compute nodes, 2 inputs; node 1 is lost. Input 0 saw 1, 4 and 7 acknowledged,
        // input 1 only 1 and 4 (the last acknowledgement was on its way).
        let mut r = Rescue::new(0, 3);
        assert!(r.on_report(0, 2, 1, vec![(1, 8)]).unwrap());
        assert!(!r.on_report(0, 2, 1, vec![(1, 8)]).unwrap(), "once");
        // Until input 1 says, what node 1 held is unknown; its own and node 2's are not.
        let mine: Vec<u64> = (0..40).filter(|&t| Owners::new(3).probe(t, 1) == 0 && t % 3 == 1).collect();
        assert_eq!(r.fate(mine[0]), Fate::Unknown);
        assert_eq!(r.fate(3), Fate::Home);
        assert_eq!(r.fate(2), Fate::NotMine);
        assert!(!r.try_agree(&[false, false]));
        r.on_report(1, 2, 1, vec![(1, 5)]).unwrap();
        assert!(r.try_agree(&[false, false]));
        assert!(!r.open());
        for &t in &mine {
            assert_eq!(r.fate(t), if t < 8 { Fate::Done } else { Fate::Adopted(0) }, "timeslice {t}");
        }
        let first = *mine.iter().find(|&&t| t >= 8).unwrap();
        assert_eq!(r.nexts().collect::<Vec<_>>(), [first]);
        r.advance(0);
        let second = *mine.iter().find(|&&t| t > first).unwrap();
        assert_eq!(r.nexts().collect::<Vec<_>>(), [second]);
        assert_eq!(r.next_of(0, second), second);
    }

    #[test]
    fn an_input_lost_meanwhile_is_not_waited_for() {
        let mut r = Rescue::new(2, 3);
        r.on_report(1, 2, 0, vec![]).unwrap();
        assert!(!r.try_agree(&[false, false]));
        assert!(r.try_agree(&[true, false]));
    }

    #[test]
    fn two_losses_at_once_and_reports_about_this_node_are_clear_errors() {
        let mut r = Rescue::new(0, 4);
        assert!(r.on_report(0, 2, 0, vec![]).unwrap_err().to_string().contains("gave this compute node up"));
        r.on_report(0, 2, 1, vec![]).unwrap();
        assert!(r.on_report(1, 2, 2, vec![]).unwrap_err().to_string().contains("lost at once"));
        assert!(r.on_report(0, 2, 9, vec![]).is_err());
    }

    #[test]
    fn a_node_that_adopted_timeslices_can_be_lost_in_turn() {
        // 4 nodes: 3 is lost, then 1, which had taken some of 3's.
        let mut nodes: Vec<Rescue> = (0..4).map(|i| Rescue::new(i, 4)).collect();
        for n in [0, 2] {
            nodes[n].on_report(0, 1, 3, vec![(3, 20)]).unwrap();
            assert!(nodes[n].try_agree(&[false]));
            nodes[n].on_report(0, 1, 1, vec![(1, 41), (3, 43)]).unwrap();
            assert!(nodes[n].try_agree(&[false]));
        }
        // Every timeslice has exactly one fate that delivers it, or was finished before.
        for t in 0..400u64 {
            let fates: Vec<Fate> = [0, 2].iter().map(|&n| nodes[n].fate(t)).collect();
            let delivering = fates.iter().filter(|f| matches!(f, Fate::Home | Fate::Adopted(_))).count();
            let done = fates.contains(&Fate::Done);
            let finished_at_3 = t % 4 == 3 && t < 20;
            let finished_at_1 = (t % 4 == 1 && t < 41)
                || (t % 4 == 3 && t < 43 && !finished_at_3 && {
                    let mut before = Owners::new(4);
                    before.lose(3);
                    before.owner(t) == Some(1)
                });
            assert_eq!(done, finished_at_3 || finished_at_1, "timeslice {t}: {fates:?}");
            assert_eq!(delivering, usize::from(!done), "timeslice {t}: {fates:?}");
        }
    }
}
