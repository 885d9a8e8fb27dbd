//! Which compute node takes each timeslice once compute nodes are lost. Timeslice t belongs
//! to compute node t mod C; while that node is lost, it goes down a fixed probe order to
//! the first that is not. The order rotates with t's round, so a lost node's timeslices
//! spread evenly over the others (C_active = C − lost), and losing another node moves only
//! the timeslices that node held: every node that knows the same lost set agrees on every
//! owner, whatever order it learnt of the losses in.

use super::compute_of;

#[derive(Debug, Clone)]
pub struct Owners {
    lost: Vec<bool>,
}

impl Owners {
    pub fn new(computes: usize) -> Self {
        Owners { lost: vec![false; computes] }
    }

    fn computes(&self) -> usize {
        self.lost.len()
    }

    /// The `k`-th compute node timeslice `ts` would go to: its own, then every other once,
    /// starting at a place that moves with the round.
    pub fn probe(&self, ts: u64, k: usize) -> usize {
        let c = self.computes();
        let home = compute_of(ts, c);
        if k == 0 {
            return home;
        }
        let turn = ((ts / c as u64 + k as u64 - 1) % (c as u64 - 1)) as usize;
        (home + 1 + turn) % c
    }

    /// Who takes `ts` now; None once every compute node is lost.
    pub fn owner(&self, ts: u64) -> Option<usize> {
        self.owner_without(ts, &self.lost)
    }

    /// Who took `ts` while only the nodes marked in `lost` were lost.
    pub fn owner_without(&self, ts: u64, lost: &[bool]) -> Option<usize> {
        (0..self.computes()).map(|k| self.probe(ts, k)).find(|&c| !lost[c])
    }

    /// Marks `compute` lost; false if it was already.
    pub fn lose(&mut self, compute: usize) -> bool {
        !std::mem::replace(&mut self.lost[compute], true)
    }

    pub fn is_lost(&self, compute: usize) -> bool {
        self.lost[compute]
    }

    pub fn lost(&self) -> &[bool] {
        &self.lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_losses_timeslice_t_goes_to_t_mod_c() {
        let o = Owners::new(4);
        assert!((0..40).all(|t| o.owner(t) == Some(t as usize % 4)));
    }

    #[test]
    fn the_probe_order_visits_every_node_once() {
        let o = Owners::new(5);
        for t in 0..50 {
            let mut seen: Vec<usize> = (0..5).map(|k| o.probe(t, k)).collect();
            seen.sort_unstable();
            assert_eq!(seen, [0, 1, 2, 3, 4], "timeslice {t}");
        }
    }

    #[test]
    fn a_lost_nodes_timeslices_spread_evenly_and_nothing_else_moves() {
        let mut o = Owners::new(4);
        o.lose(2);
        let mut got = [0; 4];
        for t in 0..1200 {
            let owner = o.owner(t).unwrap();
            if t % 4 != 2 {
                assert_eq!(owner, t as usize % 4);
            } else {
                got[owner] += 1;
            }
        }
        assert_eq!(got, [100, 100, 0, 100]);
    }

    #[test]
    fn owners_do_not_depend_on_the_order_of_losses() {
        let (mut a, mut b) = (Owners::new(6), Owners::new(6));
        a.lose(1);
        a.lose(4);
        b.lose(4);
        b.lose(1);
        let mut one = Owners::new(6);
        one.lose(1);
        for t in 0..600 {
            assert_eq!(a.owner(t), b.owner(t));
            // Losing 4 after 1 moved only what 4 held.
            if one.owner(t) != Some(4) {
                assert_eq!(a.owner(t), one.owner(t));
            }
        }
        let mut all = Owners::new(2);
        all.lose(0);
        all.lose(1);
        assert_eq!(all.owner(3), None);
    }
}
