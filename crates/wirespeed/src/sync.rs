//! Locks that keep working after a thread panicked while holding one.
//!
//! Every lock in wirespeed guards state that is consistent between statements, so a panic
//! (a bug) in one thread must not turn every later lock of the same state into a second panic
//! in threads that did nothing wrong. `m.lock().unpoison()` takes the guard either way.

use std::sync::{LockResult, PoisonError};

pub trait Unpoison<G> {
    fn unpoison(self) -> G;
}

impl<G> Unpoison<G> for LockResult<G> {
    fn unpoison(self) -> G {
        self.unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_poisoned_lock_still_gives_its_guard() {
        let m = Mutex::new(1);
        let _ = std::thread::scope(|s| {
            s.spawn(|| {
                let _g = m.lock().unwrap();
                panic!("poison it");
            })
            .join()
        });
        assert!(m.is_poisoned());
        *m.lock().unpoison() += 1;
        assert_eq!(*m.lock().unpoison(), 2);
    }
}
