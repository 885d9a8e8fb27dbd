//! Buffers handed out as [`Bytes`] that come back for reuse once the last reference drops, so
//! a sender keeps filling memory that is already mapped and in cache instead of faulting in
//! fresh pages for every message.

use std::sync::{Arc, Mutex};

use crate::sync::Unpoison;
use bytes::Bytes;

/// A pool of spare buffers, shared by its clones.
#[derive(Clone)]
pub struct Recycler {
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
    keep: usize,
}

/// A buffer on loan, as the owner of a [`Bytes`].
struct Loan {
    buf: Vec<u8>,
    home: Recycler,
}

impl Recycler {
    /// Keeps up to `keep` spare buffers; more coming back are freed.
    pub fn new(keep: usize) -> Self {
        Recycler { spare: Arc::new(Mutex::new(Vec::new())), keep }
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

    fn pop(&self) -> Option<Vec<u8>> {
        self.spare.lock().unpoison().pop()
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
        let mut spare = self.home.spare.lock().unpoison();
        if spare.len() < self.home.keep {
            spare.push(std::mem::take(&mut self.buf));
        }
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
        assert_eq!(pool.spare.lock().unwrap().len(), 1);
    }
}
