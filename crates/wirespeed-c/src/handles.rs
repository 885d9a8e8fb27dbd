//! Opaque handles. A handle is a number in a table, never a pointer to memory: a released or
//! made-up handle is an error (not a crash), and one handle may be used from many threads.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use wirespeed_flight::{Error, Result};

use crate::args::null;

/// The live handles of one kind.
pub(crate) struct Handles<T> {
    what: &'static str,
    next: AtomicUsize,
    live: Mutex<BTreeMap<usize, Arc<T>>>,
}

impl<T> Handles<T> {
    pub(crate) const fn new(what: &'static str) -> Self {
        Handles { what, next: AtomicUsize::new(1), live: Mutex::new(BTreeMap::new()) }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, Arc<T>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new handle for `value`, as the opaque pointer type `H`.
    pub(crate) fn insert<H>(&self, value: T) -> *mut H {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.table().insert(id, Arc::new(value));
        std::ptr::without_provenance_mut(id)
    }

    /// What `handle` stands for.
    pub(crate) fn get<H>(&self, handle: *const H) -> Result<Arc<T>> {
        if handle.is_null() {
            return Err(null(self.what));
        }
        self.table().get(&handle.addr()).cloned().ok_or_else(|| self.unknown())
    }

    /// Ends `handle`; what it stood for lives on while calls on other threads still use it.
    pub(crate) fn remove<H>(&self, handle: *const H) -> Result<Arc<T>> {
        if handle.is_null() {
            return Err(null(self.what));
        }
        self.table().remove(&handle.addr()).ok_or_else(|| self.unknown())
    }

    fn unknown(&self) -> Error {
        Error::invalid_argument(format!("{} is released, or was never one", self.what))
    }
}
