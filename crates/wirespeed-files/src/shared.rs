//! A value several threads of a transfer use in turn.

use std::sync::{Arc, Mutex, MutexGuard};
use wirespeed::sync::Unpoison;

/// Shared, locked access to one value (a byte stream being read or written in order).
pub struct Shared<T>(Arc<Mutex<T>>);

impl<T> Shared<T> {
    pub fn new(v: T) -> Self {
        Shared(Arc::new(Mutex::new(v)))
    }

    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unpoison()
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared(..)")
    }
}
