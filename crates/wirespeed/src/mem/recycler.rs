//! Buffers handed out as [`Bytes`] that come back for reuse once the last reference drops, so
//! a sender keeps filling memory that is already mapped and in cache instead of faulting in
//! fresh pages for every message.

use std::collections::TryReserveError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::trimmer::{self, KEEP_WARM, Trim};
use crate::sync::Unpoison;
use bytes::Bytes;

/// A pool of spare buffers, shared by its clones.
#[derive(Clone)]
pub struct Recycler {
    pool: Arc<Pool>,
}

struct Pool {
    /// Spare buffers, with when each came back if the pool cools (a clock read per loan
    /// otherwise buys nothing).
    spare: Mutex<Vec<(Vec<u8>, Option<Instant>)>>,
    keep: usize,
    /// Spares idle for [`KEEP_WARM`] are freed (else they stay while the pool lives).
    cools: bool,
    /// Whether the trimmer looks at us.
    watched: AtomicBool,
}

/// A buffer on loan, as the owner of a [`Bytes`].
struct Loan {
    buf: Vec<u8>,
    home: Recycler,
}

impl Recycler {
    /// Keeps up to `keep` spare buffers; more coming back are freed.
    pub fn new(keep: usize) -> Self {
        Self::with(keep, false)
    }

    /// Keeps up to `keep` spare buffers, each freed once it has idled for ten seconds: for
    /// big buffers that must not stay with a holder gone quiet.
    pub fn cooling(keep: usize) -> Self {
        Self::with(keep, true)
    }

    fn with(keep: usize, cools: bool) -> Self {
        let pool = Pool { spare: Mutex::new(Vec::new()), keep, cools, watched: AtomicBool::new(false) };
        Recycler { pool: Arc::new(pool) }
    }

    /// A buffer of `len` bytes whose contents are whatever it last held (zeros if new), for a
    /// caller that fills a slice.
    pub fn take(&self, len: usize) -> Vec<u8> {
        let Some(mut buf) = self.pop() else { return vec![0; len] };
        // Truncating keeps the bytes initialised; only growth writes anything.
        buf.resize(len, 0);
        buf
    }

    /// An empty buffer with room for at least `capacity` bytes, for a caller that appends.
    pub fn take_empty(&self, capacity: usize) -> Vec<u8> {
        let mut buf = self.pop().unwrap_or_default();
        buf.clear();
        buf.reserve(capacity);
        buf
    }

    /// An empty buffer with room for `capacity` bytes, or an error if the memory cannot be
    /// had. A spare is reused only if it is at most twice that big: a much bigger one would pin
    /// memory the caller does not need, so it is freed instead.
    pub fn try_take_empty(&self, capacity: usize) -> Result<Vec<u8>, TryReserveError> {
        let mut buf = self.pop().filter(|b| b.capacity() / 2 <= capacity).unwrap_or_default();
        buf.clear();
        buf.try_reserve_exact(capacity)?;
        Ok(buf)
    }

    fn pop(&self) -> Option<Vec<u8>> {
        self.pool.spare.lock().unpoison().pop().map(|(buf, _)| buf)
    }

    /// `buf` as shared bytes that come back here when the last reference drops.
    pub fn lend(&self, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Loan { buf, home: self.clone() })
    }
}

impl AsRef<[u8]> for Loan {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        let pool = &self.home.pool;
        let mut spare = pool.spare.lock().unpoison();
        if spare.len() < pool.keep {
            spare.push((std::mem::take(&mut self.buf), pool.cools.then(Instant::now)));
            let start = pool.cools && !pool.watched.swap(true, Ordering::Relaxed);
            drop(spare);
            if start {
                trimmer::watch(Arc::downgrade(pool) as _);
            }
        }
    }
}

impl Trim for Pool {
    fn trim(&self, now: Instant) -> bool {
        let mut spare = self.spare.lock().unpoison();
        spare.retain(|(_, since)| since.is_some_and(|t| now.duration_since(t) < KEEP_WARM));
        let warm = !spare.is_empty();
        if !warm {
            // Under the lock, so a buffer coming back meanwhile starts the watch again.
            self.watched.store(false, Ordering::Relaxed);
        }
        warm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_loan_is_taken_again() {
        let pool = Recycler::new(1);
        let first = pool.take(1000);
        let at = first.as_ptr();
        let bytes = pool.lend(first);
        let copy = bytes.clone();
        drop(bytes);
        let other = pool.take(10);
        assert_ne!(other.as_ptr(), at, "still referenced: a new buffer");
        drop(copy);
        let again = pool.take(500);
        assert_eq!((again.as_ptr(), again.len()), (at, 500));
    }

    #[test]
    fn an_empty_take_keeps_the_room_of_a_returned_buffer() {
        let pool = Recycler::new(1);
        let first = pool.take(4096);
        let at = first.as_ptr();
        drop(pool.lend(first));
        let again = pool.take_empty(1000);
        assert_eq!((again.as_ptr(), again.len()), (at, 0));
        assert!(again.capacity() >= 4096);
        assert!(pool.take_empty(100).capacity() >= 100, "a new one has the room asked for");
    }

    #[test]
    fn keeps_no_more_than_asked() {
        let pool = Recycler::new(1);
        let (a, b) = (pool.lend(pool.take(10)), pool.lend(pool.take(10)));
        drop((a, b));
        assert_eq!(pool.pool.spare.lock().unwrap().len(), 1);
    }

    #[test]
    fn a_fallible_take_reuses_only_a_spare_that_fits() {
        let pool = Recycler::new(1);
        let first = pool.try_take_empty(4096).unwrap();
        let at = first.as_ptr();
        drop(pool.lend(first));
        let again = pool.try_take_empty(3000).unwrap();
        assert_eq!((again.as_ptr(), again.len()), (at, 0));
        drop(pool.lend(again));
        let small = pool.try_take_empty(1000).unwrap();
        assert!(small.capacity() < 4096, "a spare over twice the size is not taken for a small body");
        assert!(pool.pool.spare.lock().unwrap().is_empty(), "but freed");
        assert!(pool.try_take_empty(usize::MAX / 2).is_err());
    }

    #[test]
    fn a_cooling_pool_frees_spares_left_idle() {
        let pool = Recycler::cooling(1);
        drop(pool.lend(pool.take(10)));
        let now = Instant::now();
        assert!(pool.pool.trim(now), "a fresh spare stays");
        assert_eq!(pool.pool.spare.lock().unwrap().len(), 1);
        assert!(!pool.pool.trim(now + KEEP_WARM));
        assert!(pool.pool.spare.lock().unwrap().is_empty());
        assert!(!pool.pool.watched.load(Ordering::Relaxed), "watched again once a buffer comes back");
    }
}
