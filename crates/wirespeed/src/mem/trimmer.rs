//! Memory kept warm for reuse (a shm ring's free areas, a connection's spare receive buffer)
//! spares the next use faulting in and zeroing fresh pages, but must not stay forever on a
//! connection that went quiet. One thread for the whole process hands it back once idle.

use std::sync::{Mutex, Once, Weak};
use std::time::{Duration, Instant};

use crate::sync::Unpoison;

/// How long memory kept for reuse stays once nothing uses it.
pub(crate) const KEEP_WARM: Duration = Duration::from_secs(10);

/// Something holding memory for reuse.
pub(crate) trait Trim: Send + Sync {
    /// Gives back what has idled for [`KEEP_WARM`] by `now`; false once nothing is left to
    /// watch (the holder calls [`watch`] again when it keeps something new).
    fn trim(&self, now: Instant) -> bool;
}

/// Has the trimmer call `holder.trim` about once a second until it returns false or
/// `holder` is gone.
pub(crate) fn watch(holder: Weak<dyn Trim>) {
    static WATCHED: Mutex<Vec<Weak<dyn Trim>>> = Mutex::new(Vec::new());
    static START: Once = Once::new();
    WATCHED.lock().unpoison().push(holder);
    START.call_once(|| {
        let trimmer = || loop {
            std::thread::sleep(Duration::from_secs(1));
            // Trimmed outside the list's lock: a holder registers itself under its own.
            let now = Instant::now();
            let list = std::mem::take(&mut *WATCHED.lock().unpoison());
            let warm: Vec<_> = list.into_iter().filter(|w| w.upgrade().is_some_and(|h| h.trim(now))).collect();
            WATCHED.lock().unpoison().extend(warm);
        };
        // Without the thread, kept memory stays until its holder goes.
        let _ = std::thread::Builder::new().name("wirespeed-trim".into()).spawn(trimmer);
    });
}
