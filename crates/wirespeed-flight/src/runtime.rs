//! The tokio runtime a blocking client or server keeps, usable from any thread: a plain one,
//! a runtime's blocking pool, or a task of an async program's own runtime, where tokio would
//! panic on a blocking wait or on dropping a runtime.

use std::future::Future;
use std::ops::Deref;

use tokio::runtime::{Builder, Handle, RuntimeFlavor};

use crate::error::{Error, Result};

/// A runtime that can be waited on, and dropped, from any thread.
pub(crate) struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    /// A multi-thread runtime of `threads` workers named `name`.
    pub(crate) fn new(threads: usize, name: &str) -> Result<Self> {
        Self::build(Builder::new_multi_thread().worker_threads(threads), name)
    }

    /// The runtime `builder` makes, its threads named `name`.
    pub(crate) fn build(builder: &mut Builder, name: &str) -> Result<Self> {
        let runtime = builder
            .enable_all()
            .thread_name(name)
            .build()
            .map_err(|e| Error::internal(format!("cannot start a {name} runtime: {e}")))?;
        Ok(Runtime(Some(runtime)))
    }

    /// Runs `f` to its end on this runtime, from any thread (see [`block_on`]).
    pub(crate) fn block_on<F>(&self, f: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        block_on(self.handle(), f)
    }
}

impl Deref for Runtime {
    type Target = tokio::runtime::Runtime;

    fn deref(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("taken only on drop")
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(runtime) = self.0.take() else { return };
        // Inside another runtime, waiting for this one's threads would block that one's.
        if Handle::try_current().is_ok() {
            runtime.shutdown_background();
        }
    }
}

/// Runs `f` to its end on `runtime` and waits for it. Inside an async program's runtime, where
/// tokio forbids blocking, the wait moves off that runtime's worker first (or, on a
/// current-thread runtime, onto a thread of its own), so the blocking API works from async
/// code too, at the cost of the thread it blocks; `tokio::task::spawn_blocking` avoids that.
pub(crate) fn block_on<F>(runtime: &Handle, f: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Err(_) => runtime.block_on(f),
        Ok(RuntimeFlavor::CurrentThread) => std::thread::scope(|s| s.spawn(|| runtime.block_on(f)).join())
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
        Ok(_) => tokio::task::block_in_place(|| runtime.block_on(f)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer() -> u32 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        42
    }

    /// Called, and dropped, from a task of either kind of runtime and from a blocking thread.
    #[test]
    fn blocks_and_drops_from_inside_other_runtimes() {
        let ours = Runtime::new(1, "test").unwrap();
        assert_eq!(ours.block_on(answer()), 42);
        for flavor in [Builder::new_current_thread(), Builder::new_multi_thread()].iter_mut() {
            let theirs = flavor.enable_all().build().unwrap();
            theirs.block_on(async {
                let inner = Runtime::new(1, "inner").unwrap();
                assert_eq!(inner.block_on(answer()), 42);
                drop(inner);
            });
            let blocking = theirs.spawn_blocking(|| Runtime::new(1, "pool").unwrap().block_on(answer()));
            assert_eq!(theirs.block_on(blocking).unwrap(), 42);
        }
    }
}
