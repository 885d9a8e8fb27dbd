//! Blocking calls from Python: the work runs on a helper thread while the caller waits without
//! the GIL, waking every 50 ms to let Python run its signal handlers, so Ctrl-C raises
//! KeyboardInterrupt in the caller at once. Work that is interrupted finishes (or times out)
//! on its own thread, and whatever it held is then dropped there. Helper threads are kept for
//! the next call (a thread start would cost more than reading a batch): as many as were ever
//! busy at once, for the life of the process.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::Duration;

use pyo3::prelude::*;

pub const TICK: Duration = Duration::from_millis(50);

type Job = Box<dyn FnOnce() + Send>;

/// Helpers waiting for work, each behind its own channel.
static IDLE: Mutex<Vec<SyncSender<Job>>> = Mutex::new(Vec::new());

fn idle() -> std::sync::MutexGuard<'static, Vec<SyncSender<Job>>> {
    IDLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `job` on an idle helper, or on a new one.
fn dispatch(mut job: Job) -> PyResult<()> {
    if let Some(helper) = idle().pop() {
        match helper.send(job) {
            Ok(()) => return Ok(()),
            Err(mpsc::SendError(back)) => job = back, // its thread panicked
        }
    }
    let (tx, rx) = mpsc::sync_channel::<Job>(1);
    tx.send(job).expect("the receiver is here");
    std::thread::Builder::new()
        .name("wirespeed-call".into())
        .spawn(move || helper(tx, rx))
        .map(drop)
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("cannot start a thread: {e}")))
}

fn helper(tx: SyncSender<Job>, rx: Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        job();
        idle().push(tx.clone());
    }
}

pub fn interruptible<T: Send + 'static>(py: Python<'_>, work: impl FnOnce() -> T + Send + 'static) -> PyResult<T> {
    interruptible_with(py, work, |_| Ok(()))
}

/// The same, calling `tick` (with the GIL) every 50 ms while the work runs: for progress.
pub fn interruptible_with<T: Send + 'static>(
    py: Python<'_>,
    work: impl FnOnce() -> T + Send + 'static,
    mut tick: impl FnMut(Python<'_>) -> PyResult<()>,
) -> PyResult<T> {
    let (tx, rx) = mpsc::sync_channel(1);
    dispatch(Box::new(move || {
        let _ = tx.send(work());
    }))?;
    let rx = Mutex::new(rx); // waited on without the GIL, so it must be Sync
    let mut signals = Signals::default();
    loop {
        match py.detach(|| rx.lock().unwrap_or_else(|p| p.into_inner()).recv_timeout(TICK)) {
            Ok(done) => return Ok(done),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                signals.check(py)?;
                tick(py)?;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err("a wirespeed call panicked"));
            }
        }
    }
}

/// Runs Python's signal handlers (Ctrl-C's KeyboardInterrupt) from native code that let the
/// GIL go on its own (pyarrow's `with nogil`) inside one of our calls. pyo3 still counts the
/// GIL as held on this thread then, so it is taken back through the C API.
pub fn signals_without_attach(signals: &mut Signals) -> PyResult<()> {
    // SAFETY: PyGILState_Ensure gives this thread the GIL (with its own thread state, or a new
    // one) whatever pyo3 believes; the token is used only until the matching release, and the
    // error it may return owns its exception without borrowing the token.
    unsafe {
        let state = pyo3::ffi::PyGILState_Ensure();
        let checked = signals.check(Python::assume_attached());
        pyo3::ffi::PyGILState_Release(state);
        checked
    }
}

/// Set by [`on_sigint`] while a [`Signals`] holds SIGINT.
static SIGINT_CAME: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    SIGINT_CAME.store(true, Ordering::Relaxed);
}

/// Ctrl-C as a blocking call on the main thread sees it. Python's handler takes SIGINT as a
/// rule, but a pyarrow server's `serve()` elsewhere in the process puts Arrow's in its place,
/// which stops that server and tells Python nothing. So a call that has waited, as pyarrow's
/// own blocking calls do, holds SIGINT until it returns, then hands it back to whoever had it
/// and passes the signal on; the call then raises what Python's handler raised
/// (KeyboardInterrupt), or else ArrowCancelled, as pyarrow's do.
#[derive(Default)]
pub struct Signals {
    /// Whoever had SIGINT before us.
    held: Option<libc::sigaction>,
}

impl Signals {
    /// Python's signal handlers, run between waits; `py`: this thread holds the GIL.
    pub fn check(&mut self, py: Python<'_>) -> PyResult<()> {
        self.hold();
        if SIGINT_CAME.swap(false, Ordering::Relaxed) {
            self.hand_back();
            // SAFETY: raise() runs the handler just handed back, on this thread.
            unsafe { libc::raise(libc::SIGINT) };
            py.check_signals()?;
            return Err(crate::errors::raise("pyarrow", "ArrowCancelled", "Operation cancelled: interrupted"));
        }
        py.check_signals()
    }

    fn hold(&mut self) {
        // SAFETY: getpid and gettid only read; the main thread's id is the process's.
        let main = unsafe { libc::gettid() == libc::getpid() };
        if self.held.is_some() || !main {
            return;
        }
        // SAFETY: sigaction with zeroed structs and a handler that only stores an atomic.
        unsafe {
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_sigint as *const () as libc::sighandler_t;
            libc::sigemptyset(&mut ours.sa_mask);
            let mut theirs: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGINT, &ours, &mut theirs) != 0 {
                return;
            }
            if theirs.sa_sigaction == libc::SIG_IGN || theirs.sa_sigaction == libc::SIG_DFL {
                // Ctrl-C is ignored, or ends the process: not ours to change.
                libc::sigaction(libc::SIGINT, &theirs, std::ptr::null_mut());
                return;
            }
            self.held = Some(theirs);
        }
    }

    fn hand_back(&mut self) {
        if let Some(theirs) = self.held.take() {
            // SAFETY: puts back the disposition sigaction gave us.
            unsafe { libc::sigaction(libc::SIGINT, &theirs, std::ptr::null_mut()) };
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        self.hand_back();
    }
}
