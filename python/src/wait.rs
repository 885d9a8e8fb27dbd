//! Blocking calls from Python: the work runs on a helper thread while the caller waits without
//! the GIL, waking every 50 ms to let Python run its signal handlers, so Ctrl-C raises
//! KeyboardInterrupt in the caller at once. Work that is interrupted finishes (or times out)
//! on its own thread, and whatever it held is then dropped there. Helper threads are kept for
//! the next call (a thread start would cost more than reading a batch): as many as were ever
//! busy at once, for the life of the process.

use std::sync::Mutex;
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
    loop {
        match py.detach(|| rx.lock().unwrap_or_else(|p| p.into_inner()).recv_timeout(TICK)) {
            Ok(done) => return Ok(done),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                py.check_signals()?;
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
pub fn signals_without_attach() -> PyResult<()> {
    // SAFETY: PyGILState_Ensure gives this thread the GIL (with its own thread state, or a new
    // one) whatever pyo3 believes; the token is used only until the matching release, and the
    // error it may return owns its exception without borrowing the token.
    unsafe {
        let state = pyo3::ffi::PyGILState_Ensure();
        let checked = Python::assume_attached().check_signals();
        pyo3::ffi::PyGILState_Release(state);
        checked
    }
}
