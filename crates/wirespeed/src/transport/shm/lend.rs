//! Views of the ring lent to the application: tracked until they come back, and copied out
//! (evacuated) when the sender needs their space and they do not return.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::mapping::Privatized;
use super::ring::Ring;
use super::waker::notify;
use crate::mem::{Lender, Mapping};
use crate::sync::Unpoison;

/// Takes views of the receive ring back, in any order, and frees ring space in order.
pub(super) struct RingLender {
    pub(super) ring: Ring,
    /// Our own copy of the tail we published, so checks need not touch the shared line.
    pub(super) released: std::sync::atomic::AtomicU64,
    /// Views given back so far, so the receiver can tell a draining application from one
    /// that keeps them.
    pub(super) returns: std::sync::atomic::AtomicU64,
    pub(super) space: OwnedFd,
    /// Declared (so dropped) before the mappings its evacuated pages lie in.
    pub(super) track: Mutex<Track>,
    pub(super) _map: Arc<Mapping>,
    /// Fresh mappings of the ring after evacuations; views may point into any of them.
    pub(super) moved: Mutex<Vec<Mapping>>,
}

pub(super) struct Track {
    /// Token of `ends[0]`.
    pub(super) base: u64,
    /// Ring position after each consumed frame, and whether it is released.
    pub(super) ends: VecDeque<(u64, bool)>,
    /// Views moved to private memory by evacuations and not returned yet.
    pub(super) evacuated: Vec<Evacuated>,
}

/// One evacuation's views: their private pages are freed once the last comes back.
pub(super) struct Evacuated {
    pub(super) tokens: std::ops::Range<u64>,
    pub(super) outstanding: usize,
    /// Freed when dropped.
    pub(super) _pages: Privatized,
}

impl RingLender {
    pub(super) fn new(ring: Ring, map: Arc<Mapping>, space: OwnedFd) -> Self {
        RingLender {
            ring,
            released: Default::default(),
            returns: Default::default(),
            _map: map,
            moved: Mutex::new(Vec::new()),
            space,
            track: Mutex::new(Track { base: 0, ends: VecDeque::new(), evacuated: Vec::new() }),
        }
    }

    pub(super) fn push(&self, end: u64, released: bool) -> u64 {
        let mut t = self.track.lock().unpoison();
        let token = t.base + t.ends.len() as u64;
        t.ends.push_back((end, released));
        if released {
            self.advance(&mut t);
        }
        token
    }

    /// The ring offsets of every frame lent out and not given back.
    pub(super) fn held(&self) -> Vec<(usize, usize)> {
        let cap = self.ring.cap();
        let t = self.track.lock().unpoison();
        let mut start = self.released.load(Ordering::Relaxed);
        let mut held = Vec::new();
        for &(end, released) in &t.ends {
            if !released {
                // Frames never wrap, so the range is contiguous in the data area.
                let at = (start % cap) as usize;
                held.push((at, at + (end - start) as usize));
            }
            start = end;
        }
        held
    }

    /// After an evacuation: every outstanding view now lies in `pages`, so the ring space is
    /// free; the pages go once those views come back.
    pub(super) fn forget_all(&self, fresh: Mapping, pages: Privatized) {
        self.moved.lock().unpoison().push(fresh);
        let mut t = self.track.lock().unpoison();
        let tokens = t.base..t.base + t.ends.len() as u64;
        let outstanding = t.ends.iter().filter(|e| !e.1).count();
        if outstanding > 0 {
            t.evacuated.push(Evacuated { tokens, outstanding, _pages: pages });
        }
        t.ends.iter_mut().for_each(|e| e.1 = true);
        self.advance(&mut t);
    }

    pub(super) fn advance(&self, t: &mut Track) {
        let mut tail = None;
        while let Some(&(end, true)) = t.ends.front() {
            tail = Some(end);
            t.ends.pop_front();
            t.base += 1;
        }
        if let Some(end) = tail {
            self.released.store(end, Ordering::Relaxed);
            self.ring.release_to(end);
            notify(self.ring.producer_sleeping(), &self.space);
        }
    }
}

impl Lender for RingLender {
    fn release(&self, token: u64) {
        self.returns.fetch_add(1, Ordering::Relaxed);
        let mut t = self.track.lock().unpoison();
        let Some(i) = token.checked_sub(t.base) else {
            // An evacuated view; dropping the last of its evacuation frees the private pages.
            if let Some(k) = t.evacuated.iter().position(|e| e.tokens.contains(&token)) {
                t.evacuated[k].outstanding -= 1;
                if t.evacuated[k].outstanding == 0 {
                    t.evacuated.swap_remove(k);
                }
            }
            return;
        };
        if let Some(e) = t.ends.get_mut(i as usize) {
            e.1 = true;
        }
        self.advance(&mut t);
    }
}
