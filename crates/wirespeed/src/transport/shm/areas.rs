//! The data areas a ring may move between.
//!
//! A consumer that keeps views of the ring (a table collected batch by batch, say) pins the
//! area they lie in, and the producer would wait forever. Instead the consumer proposes
//! another area of the same shared memory and leaves the views where they are: nothing is
//! copied. An area whose views have all come back is free again. Its pages stay for the next
//! move, so a connection that receives and drops large tables in turn does not fault in and
//! zero fresh memory each time, until they have been idle for [`KEEP_WARM`]; then they go back
//! to the kernel. With every area pinned, the consumer copies held views out (`mapping`).

use std::os::fd::AsFd;
use std::time::Instant;

use nix::fcntl::{FallocateFlags, fallocate};

use crate::mem::trimmer::KEEP_WARM;

/// The consumer's record of its ring's areas.
pub(super) struct Areas {
    /// Where each area's data lies in our address space (an evacuation maps it afresh).
    at: Vec<usize>,
    /// Areas the producer may move to, with when each was freed while its pages are still
    /// there; taken from the end, so the most recently used first and untouched ones last.
    free: Vec<(u32, Option<Instant>)>,
    /// The area frames are read from.
    pub current: u32,
}

impl Areas {
    /// `count` areas of `cap` bytes each, one after another from `first`; area 0 in use.
    pub(super) fn new(first: *mut u8, count: u32, cap: usize) -> Self {
        Areas {
            at: (0..count as usize).map(|k| first as usize + k * cap).collect(),
            free: (1..count).rev().map(|k| (k, None)).collect(),
            current: 0,
        }
    }

    pub(super) fn ptr(&self, area: u32) -> *mut u8 {
        self.at[area as usize] as *mut u8
    }

    /// An evacuation mapped `area` afresh at `ptr`.
    pub(super) fn moved(&mut self, area: u32, ptr: *mut u8) {
        self.at[area as usize] = ptr as usize;
    }

    /// A free area for the producer, if any.
    pub(super) fn take(&mut self) -> Option<u32> {
        self.free.pop().map(|(k, _)| k)
    }

    pub(super) fn release(&mut self, area: u32, now: Instant) {
        self.free.push((area, Some(now)));
    }

    pub(super) fn any_warm(&self) -> bool {
        self.free.iter().any(|(_, since)| since.is_some())
    }

    /// Areas free for longer than [`KEEP_WARM`], now counted as untouched: the caller gives
    /// their pages back.
    pub(super) fn cool(&mut self, now: Instant) -> Vec<u32> {
        let mut idle = Vec::new();
        for (k, since) in &mut self.free {
            if since.is_some_and(|t| now.duration_since(t) >= KEEP_WARM) {
                idle.push(*k);
                *since = None;
            }
        }
        // Untouched areas go to the front, so warm ones are taken first.
        self.free.sort_by_key(|(_, since)| since.is_some());
        idle
    }
}

/// Frees the pages of `len` bytes of `memfd` from `offset`; they read as zeros after.
pub(super) fn punch(memfd: impl AsFd, offset: usize, len: usize) {
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    // Failing leaves the pages in place, to be reused or freed with the connection.
    let _ = fallocate(memfd, flags, offset as i64, len as i64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warm_areas_are_taken_before_untouched_ones_and_cool_after_a_while() {
        let mut a = Areas::new(std::ptr::null_mut::<u8>().wrapping_add(4096), 4, 1024);
        assert_eq!(a.ptr(3) as usize, 4096 + 3 * 1024);
        assert_eq!(a.take(), Some(1));
        let t0 = Instant::now();
        a.release(1, t0);
        assert_eq!(a.take(), Some(1), "the warm one first");
        a.release(1, t0);
        assert!(a.cool(t0 + KEEP_WARM / 2).is_empty());
        assert_eq!(a.cool(t0 + KEEP_WARM), vec![1]);
        assert!(!a.any_warm());
        assert_eq!((a.take(), a.take(), a.take(), a.take()), (Some(1), Some(2), Some(3), None));
    }
}
