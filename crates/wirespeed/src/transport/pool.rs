//! Page-aligned receive buffers in power-of-two sizes. They are reused, so the fabric's
//! registration cache keeps hitting, and lent to the application as zero-copy bodies that
//! come back here when dropped.

use std::alloc::{Layout, alloc, dealloc};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use crate::error::{Limit, Result};
use crate::mem::{Buf, Lender};
use crate::sync::Unpoison;

const MIN_SHIFT: u32 = 12;
const CLASSES: usize = 16; // 4 KiB .. 128 MiB: a largest frame plus its meta fits
const ALIGN: usize = 1 << MIN_SHIFT;

pub(crate) struct Pool {
    free: Mutex<Free>,
    /// Bytes kept for reuse at most; buffers beyond this go back to the allocator.
    keep_bytes: usize,
}

#[derive(Default)]
struct Free {
    lists: [Vec<usize>; CLASSES],
    kept: usize,
}

/// A buffer taken from the pool, owned until it is lent out or dropped.
pub(crate) struct PoolBuf {
    ptr: NonNull<u8>,
    class: usize,
    pool: Arc<Pool>,
}

// SAFETY: the buffer is plain heap memory owned by this value alone.
unsafe impl Send for PoolBuf {}

fn class_size(class: usize) -> usize {
    1 << (MIN_SHIFT as usize + class)
}

fn layout(class: usize) -> Layout {
    Layout::from_size_align(class_size(class), ALIGN).expect("a power-of-two size and alignment")
}

impl Pool {
    pub(crate) fn new(keep_bytes: usize) -> Arc<Self> {
        Arc::new(Pool { free: Mutex::new(Free::default()), keep_bytes })
    }

    /// A buffer of at least `len` bytes.
    pub(crate) fn take(self: &Arc<Self>, len: usize) -> Result<PoolBuf> {
        let class = (len.max(1).next_power_of_two().trailing_zeros().saturating_sub(MIN_SHIFT)) as usize;
        if class >= CLASSES {
            return Err(Limit::OverFrame(len as u64).into());
        }
        let reused = {
            let mut f = self.free.lock().unpoison();
            let p = f.lists[class].pop();
            if p.is_some() {
                f.kept -= class_size(class);
            }
            p
        };
        let ptr = match reused {
            // SAFETY: pointers on the free lists came from `alloc` with this class's layout.
            Some(p) => unsafe { NonNull::new_unchecked(p as *mut u8) },
            None => {
                // SAFETY: the layout has a non-zero size.
                let p = unsafe { alloc(layout(class)) };
                NonNull::new(p).ok_or(Limit::Memory(len as u64))?
            }
        };
        Ok(PoolBuf { ptr, class, pool: self.clone() })
    }

    fn put(&self, ptr: NonNull<u8>, class: usize) {
        let mut f = self.free.lock().unpoison();
        if f.kept + class_size(class) <= self.keep_bytes {
            f.kept += class_size(class);
            f.lists[class].push(ptr.as_ptr() as usize);
        } else {
            drop(f);
            // SAFETY: allocated in `take` with this class's layout, and no longer referenced.
            unsafe { dealloc(ptr.as_ptr(), layout(class)) };
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let f = self.free.get_mut().unpoison();
        for (class, list) in f.lists.iter().enumerate() {
            for &p in list {
                // SAFETY: as in `put`.
                unsafe { dealloc(p as *mut u8, layout(class)) };
            }
        }
    }
}

impl Lender for Pool {
    fn release(&self, token: u64) {
        // The token is the buffer's address with its class in the low (alignment) bits.
        let class = (token as usize) & (ALIGN - 1);
        let ptr = (token as usize) & !(ALIGN - 1);
        if let Some(p) = NonNull::new(ptr as *mut u8) {
            self.put(p, class);
        }
    }
}

impl PoolBuf {
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn as_slice(&self, at: usize, len: usize) -> &[u8] {
        assert!(at + len <= class_size(self.class));
        // SAFETY: in bounds (checked), and the memory is ours. Bytes not yet written are
        // never read: callers pass ranges the fabric or a copy has filled.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(at), len) }
    }

    /// Lends bytes `at..at+len` out as a body; the whole buffer returns to the pool when
    /// the view drops.
    pub(crate) fn lend(self, at: usize, len: usize) -> Buf {
        assert!(at + len <= class_size(self.class));
        let me = std::mem::ManuallyDrop::new(self);
        let token = (me.ptr.as_ptr() as usize | me.class) as u64;
        // SAFETY: moving the Arc out of a value that is never dropped.
        let pool: Arc<Pool> = unsafe { std::ptr::read(&me.pool) };
        // SAFETY: in bounds; the memory stays ours until `release(token)` puts it back.
        unsafe { Buf::lent(NonNull::new_unchecked(me.ptr.as_ptr().add(at)), len, pool, token) }
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        self.pool.put(self.ptr, self.class);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_reused_and_lent() {
        let pool = Pool::new(1 << 20);
        let mut b = pool.take(5000).unwrap();
        let addr = b.as_mut_ptr() as usize;
        assert_eq!(addr % ALIGN, 0);
        // SAFETY: 5000 bytes fit the 8 KiB class.
        unsafe { std::ptr::write_bytes(b.as_mut_ptr(), 7, 5000) };
        let view = b.lend(64, 100);
        assert!(view.is_lent() && view.iter().all(|&x| x == 7) && view.len() == 100);
        drop(view);
        let mut again = pool.take(8192).unwrap();
        assert_eq!(again.as_mut_ptr() as usize, addr, "the 8 KiB buffer is reused");
        assert!(pool.take(usize::MAX / 2).is_err());
    }

    #[test]
    fn keeps_no_more_than_asked() {
        let pool = Pool::new(8192);
        let a = pool.take(8192).unwrap();
        let b = pool.take(8192).unwrap();
        drop(a);
        drop(b);
        assert_eq!(pool.free.lock().unwrap().kept, 8192);
    }
}
