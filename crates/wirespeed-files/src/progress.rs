//! Counters a transfer updates as it goes, for a progress bar or a final summary.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// How far a transfer is, shared with whoever shows it (atomics, updated as it moves).
#[derive(Default, Debug)]
pub struct Progress {
    /// File bytes moved (sent, or written and verified), including ones found already there.
    pub bytes: AtomicU64,
    /// File bytes expected in all; 0 while unknown.
    pub total: AtomicU64,
    /// Files finished.
    pub files: AtomicU64,
    /// Bytes `--resume` found already in place, so they were not sent again.
    pub reused: AtomicU64,
}

impl Progress {
    /// Counts `n` more bytes moved.
    pub fn add_bytes(&self, n: u64) {
        self.bytes.fetch_add(n, Relaxed);
    }
    /// Counts `n` more bytes expected.
    pub fn add_total(&self, n: u64) {
        self.total.fetch_add(n, Relaxed);
    }
    /// Counts one more file finished.
    pub fn file_done(&self) {
        self.files.fetch_add(1, Relaxed);
    }
    /// A file of `size` bytes stays as the destination has it: it is done without moving.
    pub fn keep(&self, size: u64) {
        let _ = self.total.fetch_update(Relaxed, Relaxed, |t| Some(t.saturating_sub(size)));
        self.file_done();
    }
    /// Counts `n` bytes found already in place (and counts them as moved).
    pub fn add_reused(&self, n: u64) {
        self.reused.fetch_add(n, Relaxed);
    }
    /// For a wait that may be renewed while the transfer moves: each call says whether bytes
    /// moved since the one before (or since this was made).
    pub fn mover(&self) -> impl FnMut() -> bool + '_ {
        let mut last = self.bytes.load(Relaxed);
        move || {
            let now = self.bytes.load(Relaxed);
            std::mem::replace(&mut last, now) != now
        }
    }

    /// (bytes moved, bytes expected, files finished) now.
    pub fn get(&self) -> (u64, u64, u64) {
        (self.bytes.load(Relaxed), self.total.load(Relaxed), self.files.load(Relaxed))
    }
}
