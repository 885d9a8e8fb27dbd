//! A bound on the large files a source holds open between the walk and their last chunk.
//! The walk runs ahead of the transfer, and without it a tree of many large files would run
//! out of descriptors (the usual soft limit is 1024) long before any were sent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::error::{FilesError, Result};
use wirespeed::sync::Unpoison;

/// How often a waiting walk looks whether the transfer failed.
const POLL: Duration = Duration::from_millis(100);

pub(crate) struct OpenFiles {
    held: Mutex<usize>,
    freed: Condvar,
    cap: usize,
}

/// One held file; dropping it lets the walk open another.
pub(crate) struct Held(Arc<OpenFiles>);

impl Drop for Held {
    fn drop(&mut self) {
        *self.0.held.lock().unpoison() -= 1;
        self.0.freed.notify_one();
    }
}

impl OpenFiles {
    /// A quarter of the descriptor limit, which leaves the rest to the walk's directories,
    /// the transport and the sink when it shares the process; more held files than this only
    /// sit waiting, since a few reading threads serve them in turn.
    pub(crate) fn new() -> Arc<Self> {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: an out-pointer to a local.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur } else { 1024 };
        Self::with_cap((soft / 4).clamp(16, 1024) as usize)
    }

    /// Small files the walk may keep open while storage reads them in: a quarter of the
    /// large files' share, at most 64 (a 1024-descriptor limit's).
    pub(crate) fn small_reads(&self) -> usize {
        (self.cap / 4).clamp(1, 64)
    }

    fn with_cap(cap: usize) -> Arc<Self> {
        Arc::new(OpenFiles { held: Mutex::new(0), freed: Condvar::new(), cap })
    }

    /// A slot if one is free now.
    pub(crate) fn try_hold(self: &Arc<Self>) -> Option<Held> {
        let mut held = self.held.lock().unpoison();
        (*held < self.cap).then(|| {
            *held += 1;
            Held(self.clone())
        })
    }

    /// Waits for a slot; the files holding them are released as their last chunks go out,
    /// so the wait ends unless the transfer fails (`failed`).
    pub(crate) fn hold(self: &Arc<Self>, failed: &AtomicBool) -> Result<Held> {
        let mut held = self.held.lock().unpoison();
        while *held >= self.cap {
            if failed.load(Ordering::Relaxed) {
                return Err(FilesError::Stopped);
            }
            held = self.freed.wait_timeout(held, POLL).unpoison().0;
        }
        *held += 1;
        Ok(Held(self.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_come_back_when_dropped_and_a_failure_ends_the_wait() {
        let files = OpenFiles::with_cap(2);
        let failed = AtomicBool::new(false);
        let a = files.try_hold().unwrap();
        let _b = files.hold(&failed).unwrap();
        assert!(files.try_hold().is_none());
        std::thread::scope(|s| {
            let waiter = s.spawn(|| files.hold(&failed).map(|_| ()));
            std::thread::sleep(Duration::from_millis(50));
            drop(a);
            assert!(waiter.join().unwrap().is_ok());
        });
        let _c = files.try_hold().unwrap();
        failed.store(true, Ordering::Relaxed);
        assert!(matches!(files.hold(&failed), Err(FilesError::Stopped)));
    }
}
