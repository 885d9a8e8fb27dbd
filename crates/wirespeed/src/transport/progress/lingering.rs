//! Progress threads left lingering by graceful closes, and the wait for them at exit.
//!
//! A lingering thread destroys its UCP worker (or libfabric endpoint) once the peer hangs up. If the process exits
//! meanwhile, libucs's destructor walks UCX's object tree while that thread changes it, and
//! UCX aborts on an assertion (seen once: `vfs_obj.c:365`), turning a finished transfer into a
//! crash. So the first linger registers an exit hook that gives such threads a bounded moment,
//! and programs can wait for them before they exit ([`wait_for_closing`]), which is surer:
//! UCX 1.13 was seen to crash in ucs_async_context_cleanup when the hook was what waited.

use std::sync::{Mutex, Once};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::LINGER_LIMIT;
use crate::sync::Unpoison;

static LINGERING: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

/// Keeps `thread`, which ends on its own within `LINGER_LIMIT`, for the exit hook.
pub(crate) fn keep(thread: JoinHandle<()>) {
    HOOK.call_once(|| {
        // SAFETY: registers a plain function; it runs on the exiting thread, before the
        // libraries' destructors (which were registered before main).
        unsafe { libc::atexit(settle) };
    });
    let mut kept = LINGERING.lock().unpoison();
    kept.retain(|t| !t.is_finished());
    kept.push(thread);
}

extern "C" fn settle() {
    wait_for_closing();
}

/// Waits, at most a little longer than a linger lasts, for the kept threads to end.
/// Call it before a process exits after closing connections, so none is torn down during exit.
pub fn wait_for_closing() {
    let deadline = Instant::now() + LINGER_LIMIT + Duration::from_secs(1);
    let kept = std::mem::take(&mut *LINGERING.lock().unpoison());
    for t in kept {
        while !t.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
