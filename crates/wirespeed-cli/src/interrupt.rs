//! SIGINT and SIGTERM end a command without leaving half-written files behind: unfinished
//! part files ([`wirespeed_files::part`]) are removed first, then the signal takes its usual
//! course (so a parent sees the command killed by it). Commands that write such files call
//! [`install`] before they start any thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{SigHandler, SigSet, Signal, raise, signal};

/// Takes SIGINT and SIGTERM on a thread of their own. Must run before any other thread
/// starts, so that every later thread leaves the signals to that one.
pub fn install() -> anyhow::Result<()> {
    handle(None)
}

/// Like [`install`] for a command that can wind down: SIGUSR1 (which mpirun passes on to
/// every rank) and the first SIGINT or SIGTERM set `stop`; a second SIGINT or SIGTERM ends
/// the command as [`install`] would.
pub fn install_winding_down(stop: Arc<AtomicBool>) -> anyhow::Result<()> {
    handle(Some(stop))
}

fn handle(stop: Option<Arc<AtomicBool>>) -> anyhow::Result<()> {
    let mut signals = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        if !ignored(signal) {
            signals.add(signal);
        }
    }
    if stop.is_some() {
        signals.add(Signal::SIGUSR1);
    }
    signals.thread_block()?;
    std::thread::Builder::new().name("wirespeed-signals".into()).spawn(move || {
        let signal = loop {
            let Ok(signal) = signals.wait() else { return };
            match &stop {
                Some(flag) if signal == Signal::SIGUSR1 || !flag.swap(true, Ordering::SeqCst) => {
                    flag.store(true, Ordering::SeqCst);
                }
                _ => break signal,
            }
        };
        wirespeed_files::part::remove_unfinished();
        // Unblocked here only, so the raise ends the process the usual way.
        let _ = SigSet::from(signal).thread_unblock();
        let _ = raise(signal);
    })?;
    Ok(())
}

/// Whether this process was started with `signal` ignored (as `nohup` and a shell's background
/// jobs start commands): then it stays ignored, rather than caught here and raised in vain.
fn ignored(sig: Signal) -> bool {
    // SAFETY: at start, before any thread: the disposition is read by setting it and set back.
    let before = unsafe { signal(sig, SigHandler::SigDfl) };
    match before {
        Ok(SigHandler::SigIgn) => {
            // SAFETY: as above.
            let _ = unsafe { signal(sig, SigHandler::SigIgn) };
            true
        }
        Ok(SigHandler::SigDfl) | Err(_) => false,
        Ok(other) => {
            // SAFETY: as above.
            let _ = unsafe { signal(sig, other) };
            false
        }
    }
}
