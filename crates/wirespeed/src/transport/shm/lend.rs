//! Views of the ring lent to the application: tracked until they come back. When the sender
//! needs their space and they do not return, they are detached from the ring: left in their
//! area while the ring moves to another (`areas`), or copied out (evacuated) when no area is
//! free.

use std::collections::VecDeque;
use std::ops::Range;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use super::areas::{self, Areas};
use super::mapping::Privatized;
use super::ring::Ring;
use super::waker::notify;
use crate::mem::trimmer::{self, Trim};
use crate::mem::{Lender, Mapping};
use crate::sync::Unpoison;

/// Takes views of the receive ring back, in any order, and frees ring space in order.
pub(super) struct RingLender {
    pub(super) ring: Ring,
    /// Our own copy of the tail we published, so checks need not touch the shared line.
    pub(super) released: AtomicU64,
    /// Views given back so far, so the receiver can tell a draining application from one
    /// that keeps them.
    pub(super) returns: AtomicU64,
    pub(super) space: OwnedFd,
    /// Declared (so dropped) before the mappings its evacuated pages lie in.
    pub(super) track: Mutex<Track>,
    /// The shared memory, and where our ring's first area lies in it.
    pub(super) memfd: OwnedFd,
    pub(super) first_area: usize,
    pub(super) _map: Arc<Mapping>,
    /// Fresh mappings of areas after evacuations; views may point into any of them.
    pub(super) moved: Mutex<Vec<Mapping>>,
    /// Whether the trimmer looks at us (we have warm free areas).
    watched: AtomicBool,
    me: Weak<RingLender>,
}

pub(super) struct Track {
    /// Token of `ends[0]`.
    pub(super) base: u64,
    /// Ring position after each consumed frame, and whether it is released.
    pub(super) ends: VecDeque<(u64, bool)>,
    /// Views detached from the ring and not returned yet.
    detached: Vec<Detached>,
    pub(super) areas: Areas,
}

/// Views detached together: what holds them is freed once the last comes back.
struct Detached {
    tokens: Range<u64>,
    outstanding: usize,
    keeps: Keeps,
}

enum Keeps {
    /// Copied to private pages, freed when dropped.
    Pages { _pages: Privatized },
    /// Left in this area.
    Area(u32),
}

impl RingLender {
    pub(super) fn new(
        ring: Ring,
        map: Arc<Mapping>,
        space: OwnedFd,
        memfd: OwnedFd,
        first_area: usize,
        areas: u32,
    ) -> Arc<Self> {
        // SAFETY: the areas lie inside the whole mapping, one after another from `first_area`.
        let first = unsafe { map.ptr.as_ptr().add(first_area) };
        let areas = Areas::new(first, areas, ring.cap() as usize);
        Arc::new_cyclic(|me| RingLender {
            ring,
            released: Default::default(),
            returns: Default::default(),
            space,
            track: Mutex::new(Track { base: 0, ends: VecDeque::new(), detached: Vec::new(), areas }),
            memfd,
            first_area,
            _map: map,
            moved: Mutex::new(Vec::new()),
            watched: AtomicBool::new(false),
            me: me.clone(),
        })
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

    /// Where `area` lies in the memfd.
    pub(super) fn area_offset(&self, area: u32) -> usize {
        self.first_area + area as usize * self.ring.cap() as usize
    }

    pub(super) fn current_area(&self) -> u32 {
        self.track.lock().unpoison().areas.current
    }

    /// An area the producer may move to, if one is free.
    pub(super) fn take_area(&self) -> Option<u32> {
        self.track.lock().unpoison().areas.take()
    }

    /// After a proposal: the views lent from the current area stay there, and the ring space
    /// is free for the producer.
    pub(super) fn leave_in_area(&self) {
        let mut t = self.track.lock().unpoison();
        let area = t.areas.current;
        self.detach(&mut t, Keeps::Area(area));
    }

    /// The producer writes in `area` from here on: so do we read, and what was lent from the
    /// area we leave stays there. Returns where `area` lies.
    pub(super) fn follow(&self, area: u32) -> *mut u8 {
        let mut t = self.track.lock().unpoison();
        let old = t.areas.current;
        self.detach(&mut t, Keeps::Area(old));
        t.areas.current = area;
        let warm = self.free_if_unused(&mut t, old);
        let at = t.areas.ptr(area);
        drop(t);
        self.watch_if(warm);
        at
    }

    /// After an evacuation: every outstanding view now lies in `pages`, and the current area
    /// is mapped afresh.
    pub(super) fn evacuated(&self, fresh: Mapping, pages: Privatized) {
        let mut t = self.track.lock().unpoison();
        let area = t.areas.current;
        t.areas.moved(area, fresh.ptr.as_ptr());
        self.moved.lock().unpoison().push(fresh);
        self.detach(&mut t, Keeps::Pages { _pages: pages });
    }

    /// Counts every frame lent out as released for the ring's sake, remembering the views
    /// still out until they come back.
    fn detach(&self, t: &mut Track, keeps: Keeps) {
        let tokens = t.base..t.base + t.ends.len() as u64;
        let outstanding = t.ends.iter().filter(|e| !e.1).count();
        if outstanding > 0 {
            t.detached.push(Detached { tokens, outstanding, keeps });
        }
        t.ends.iter_mut().for_each(|e| e.1 = true);
        self.advance(t);
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

    /// Frees `area` if nothing reads from it or holds views in it; true if the trimmer
    /// should start watching us.
    fn free_if_unused(&self, t: &mut Track, area: u32) -> bool {
        let held = t.detached.iter().any(|d| matches!(d.keeps, Keeps::Area(a) if a == area));
        if held || area == t.areas.current {
            return false;
        }
        t.areas.release(area, Instant::now());
        !self.watched.swap(true, Ordering::Relaxed)
    }

    fn watch_if(&self, start: bool) {
        if start {
            trimmer::watch(self.me.clone());
        }
    }
}

impl Lender for RingLender {
    fn release(&self, token: u64) {
        self.returns.fetch_add(1, Ordering::Relaxed);
        let mut t = self.track.lock().unpoison();
        let Some(i) = token.checked_sub(t.base) else {
            // A detached view; the last of its group frees what holds them.
            let Some(k) = t.detached.iter().position(|d| d.tokens.contains(&token)) else { return };
            t.detached[k].outstanding -= 1;
            if t.detached[k].outstanding > 0 {
                return;
            }
            let done = t.detached.swap_remove(k);
            let warm = match done.keeps {
                Keeps::Area(area) => self.free_if_unused(&mut t, area),
                Keeps::Pages { .. } => false,
            };
            drop(t);
            self.watch_if(warm);
            return;
        };
        if let Some(e) = t.ends.get_mut(i as usize) {
            e.1 = true;
        }
        self.advance(&mut t);
    }
}

impl Trim for RingLender {
    /// Gives the pages of areas idle past their time back; false once none is warm.
    fn trim(&self, now: Instant) -> bool {
        let mut t = self.track.lock().unpoison();
        let cap = self.ring.cap() as usize;
        for area in t.areas.cool(now) {
            areas::punch(&self.memfd, self.area_offset(area), cap);
        }
        let warm = t.areas.any_warm();
        if !warm {
            // Under the lock, so an area freed meanwhile starts the watch again.
            self.watched.store(false, Ordering::Relaxed);
        }
        warm
    }
}
