//! Which chunks of a file have arrived, in memory that grows with what arrived rather than with
//! what the peer announced: a Begin may name a file of 4 billion chunks, and a flag per chunk
//! would then be 4 GiB before any data came. Runs of consecutive chunks are kept instead, so
//! chunks arriving in order on a few streams keep a few entries however large the file.

use std::collections::BTreeMap;

#[derive(Default, Debug)]
pub(super) struct ChunkSet {
    /// Start of each run, to its end (exclusive); runs neither overlap nor touch.
    runs: BTreeMap<u64, u64>,
}

impl ChunkSet {
    /// Marks chunk `index` as arrived; false if it already had.
    pub(super) fn insert(&mut self, index: u32) -> bool {
        let i = index as u64;
        let before = self.runs.range(..=i).next_back().map(|(&start, &end)| (start, end));
        if before.is_some_and(|(_, end)| i < end) {
            return false;
        }
        let end = self.runs.remove(&(i + 1)).unwrap_or(i + 1);
        match before {
            Some((start, e)) if e == i => self.runs.insert(start, end),
            _ => self.runs.insert(i, end),
        };
        true
    }

    /// Runs held: what this set's memory grows with.
    pub(super) fn runs(&self) -> usize {
        self.runs.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    /// Chunks arrived and entries held.
    fn size(set: &ChunkSet) -> (u64, usize) {
        (set.runs.iter().map(|(s, e)| e - s).sum(), set.runs.len())
    }

    #[test]
    fn in_order_arrival_is_one_run() {
        let mut set = ChunkSet::default();
        for i in 0..10_000 {
            assert!(set.insert(i));
        }
        assert_eq!(size(&set), (10_000, 1));
        assert!(!set.insert(0) && !set.insert(9_999));
    }

    #[test]
    fn the_last_index_there_is_fits() {
        let mut set = ChunkSet::default();
        assert!(set.insert(u32::MAX) && set.insert(u32::MAX - 1) && !set.insert(u32::MAX));
        assert_eq!(size(&set), (2, 1));
    }

    proptest! {
        /// Any arrival order answers as a plain set would, with no more runs than chunks, and
        /// no two runs that could be one.
        #[test]
        fn behaves_as_a_set(indexes in proptest::collection::vec(prop_oneof![0u32..64, any::<u32>()], 0..300)) {
            let (mut set, mut plain) = (ChunkSet::default(), HashSet::new());
            for i in indexes {
                prop_assert_eq!(set.insert(i), plain.insert(i));
            }
            let (len, runs) = size(&set);
            prop_assert_eq!(len, plain.len() as u64);
            prop_assert!(runs <= plain.len());
            let runs: Vec<_> = set.runs.iter().map(|(&s, &e)| (s, e)).collect();
            for w in runs.windows(2) {
                prop_assert!(w[0].1 < w[1].0, "runs {:?} touch or overlap", w);
            }
            for (s, e) in runs {
                prop_assert!((s..e).all(|i| plain.contains(&(i as u32))));
            }
        }
    }
}
