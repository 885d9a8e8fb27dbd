//! A wake-up at a simulated time that an actor can wait for among its transfers: a helper
//! actor on the same host sleeps until the deadline and then sends an empty message. (SimGrid
//! 3.32's C API cannot wait for any of several transfers with a timeout; see `Comm::wait_any`.)

use std::sync::{Arc, Mutex};

use super::engine::{Comm, Mailbox, Semaphore, host_name, now, spawn};
use crate::error::Result;

struct State {
    /// When to send the next tick; infinite: none armed.
    deadline: f64,
    stopped: bool,
}

struct Inner {
    state: Mutex<State>,
    /// Released whenever the deadline comes sooner or the timer stops.
    changed: Semaphore,
}

pub(super) struct Timer {
    inner: Arc<Inner>,
    mailbox: Mailbox,
    /// The receive of the next tick.
    pending: Option<Comm>,
}

/// Ticks at no deadline wait this long before they look again (a bound, never reached in a
/// run that ends: the owner stops its timer).
const IDLE: f64 = 1e6;

impl Timer {
    /// A timer for the calling actor, named `name` (unique).
    pub(super) fn start(name: &str) -> Result<Timer> {
        let box_name = format!("{name}-ticks");
        let mailbox = Mailbox::receive_eagerly(&box_name)?;
        let inner = Arc::new(Inner {
            state: Mutex::new(State { deadline: f64::INFINITY, stopped: false }),
            changed: Semaphore::new(0),
        });
        let helper = inner.clone();
        spawn(name, &host_name(), move || tick(&helper, mailbox))?;
        let pending = Some(mailbox.get_async());
        Ok(Timer { inner, mailbox, pending })
    }

    /// Arms the timer for `at` simulated seconds (replacing any deadline).
    pub(super) fn arm(&mut self, at: f64) {
        // A later deadline needs no wake-up: the helper finds it when it wakes for the old.
        let sooner = {
            let mut s = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            at < std::mem::replace(&mut s.deadline, at)
        };
        if sooner {
            self.inner.changed.release();
        }
    }

    /// The receive that ends at the next tick, to wait for among others; give it back with
    /// [`Timer::put_back`] if something else ended first.
    pub(super) fn take(&mut self) -> Option<Comm> {
        self.pending.take()
    }

    pub(super) fn put_back(&mut self, comm: Comm) {
        self.pending = Some(comm);
    }

    /// A tick arrived: wait for the next.
    pub(super) fn ticked(&mut self) {
        self.pending = Some(self.mailbox.get_async());
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner()).stopped = true;
        self.inner.changed.release();
    }
}

/// The helper: sends a tick at each deadline, until stopped. (It never holds the lock across
/// a SimGrid call: another actor may run meanwhile, on this same thread.)
fn tick(inner: &Inner, mailbox: Mailbox) {
    loop {
        let (stopped, due, wait) = {
            let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
            let due = s.deadline <= now();
            if due {
                s.deadline = f64::INFINITY;
            }
            (s.stopped, due, (s.deadline - now()).min(IDLE))
        };
        if stopped {
            return;
        }
        if due {
            mailbox.put_detached((), 0);
        } else {
            inner.changed.acquire_timeout(wait);
        }
    }
}
