//! Evacuation: moving the frames the application still holds out of the ring without moving
//! them in its address space.
//!
//! Ring space is freed in order, so a view the application keeps (say, every batch of a stream
//! it collects) pins the ring behind it and the sender would wait forever. When that happens the
//! receiver copies the frames still lent out to private pages, puts those pages at the very same
//! addresses with `mremap` (the views stay valid and unchanged), maps the ring afresh elsewhere,
//! and gives the ring space back. The application's held bytes are copied once, as they would
//! have been without zero copy.

use std::io;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

use nix::sys::mman::{MRemapFlags, MapFlags, MmapAdvise, ProtFlags, madvise, mmap_anonymous, mremap, munmap};

use crate::error::Result;

/// Private pages put in place by [`privatize`]. Dropping this frees their memory (the range
/// stays mapped, reading zeros, until its mapping goes), so only drop it once nothing reads
/// them.
pub struct Privatized {
    at: NonNull<u8>,
    len: usize,
}

// SAFETY: an address range; freeing it is a system call.
unsafe impl Send for Privatized {}

impl Drop for Privatized {
    fn drop(&mut self) {
        // SAFETY: private anonymous pages that nothing reads any more; the range stays mapped.
        unsafe {
            let _ = madvise(self.at.cast(), self.len, MmapAdvise::MADV_DONTNEED);
        }
    }
}

/// Replaces the `len` bytes at `at` (page aligned, inside a mapping that outlives every view
/// of it) with private pages holding the same bytes in the `held` ranges (offsets from `at`);
/// the rest reads as zeros. Nothing may write to the held ranges meanwhile.
///
/// # Safety
/// `at..at + len` must be mapped, page aligned, and owned by a mapping that stays alive.
pub unsafe fn privatize(at: NonNull<u8>, len: usize, held: &[(usize, usize)]) -> Result<Privatized> {
    let size = NonZeroUsize::new(len).expect("non-zero");
    // SAFETY: a fresh private anonymous mapping.
    let copy =
        unsafe { mmap_anonymous(None, size, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE) }
            .map_err(io::Error::from)?;
    for &(start, end) in held {
        // SAFETY: both ranges lie inside `len` bytes of their mappings (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(at.as_ptr().add(start), copy.as_ptr().cast::<u8>().add(start), end - start)
        };
    }
    // SAFETY: moves our private pages over the range in one step; the old pages' contents are
    // already in the copy, and the caller keeps the range's owner alive.
    let moved =
        unsafe { mremap(copy, len, len, MRemapFlags::MREMAP_MAYMOVE | MRemapFlags::MREMAP_FIXED, Some(at.cast())) };
    if let Err(e) = moved {
        // SAFETY: the copy is still ours.
        unsafe {
            let _ = munmap(copy, len);
        }
        return Err(io::Error::from(e).into());
    }
    Ok(Privatized { at, len })
}
