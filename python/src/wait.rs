//! Blocking calls from Python: the work runs on a helper thread while the caller waits without
//! the GIL, waking every 50 ms to let Python run its signal handlers, so Ctrl-C raises
//! KeyboardInterrupt in the caller at once. Work that is interrupted finishes (or times out)
//! on its own thread, and whatever it held is then dropped there.

use std::sync::mpsc;
use std::time::Duration;

use pyo3::prelude::*;

const TICK: Duration = Duration::from_millis(50);

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
    let rx = std::sync::Mutex::new(rx); // waited on without the GIL, so it must be Sync
    std::thread::Builder::new()
        .name("wirespeed-call".into())
        .spawn(move || {
            let _ = tx.send(work());
        })
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("cannot start a thread: {e}")))?;
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
