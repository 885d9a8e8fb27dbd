//! Evacuation: moving the frames the application still holds out of the ring without moving
//! them in its address space.
//!
//! Ring space is freed in order, so a view the application keeps (say, every batch of a stream
//! it collects) pins the ring behind it and the sender would wait forever. When that happens the
//! receiver copies the frames still lent out to private pages, puts those pages at the very same
//! addresses with `mremap` (the views stay valid and unchanged), maps the ring afresh elsewhere,
//! and gives the ring space back. The application's held bytes are copied once, as they would
//! have been without zero copy. The private pages are asked for as transparent huge pages,
//! which take a fifteenth of the page faults (bench/RESULTS.md, the Python package).

use std::io;
use std::num::NonZeroUsize;
use std::ptr::NonNull;

use nix::sys::mman::{MapFlags, MmapAdvise, ProtFlags, madvise, mmap_anonymous, munmap};

use crate::error::Result;

const HUGE_PAGE: usize = 2 << 20;

/// Private pages put in place by [`privatize`]. Dropping this frees their memory (the range
/// stays mapped, reading zeros, until its mapping goes), so only drop it once nothing reads
/// them.
pub(super) struct Privatized {
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
pub(super) unsafe fn privatize(at: NonNull<u8>, len: usize, held: &[(usize, usize)]) -> Result<Privatized> {
    // Room to start the copy on a huge-page boundary: faulting 4 KiB pages one at a time costs
    // several times the copy itself on a VM, while huge pages are zeroed in bulk.
    let size = NonZeroUsize::new(len + HUGE_PAGE).expect("non-zero");
    // SAFETY: a fresh private anonymous mapping.
    let area =
        unsafe { mmap_anonymous(None, size, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_PRIVATE) }
            .map_err(io::Error::from)?;
    let head = (HUGE_PAGE - area.as_ptr() as usize % HUGE_PAGE) % HUGE_PAGE;
    // SAFETY: `head + len` lies inside the area; the slack around the copy is ours to give back.
    let copy = unsafe {
        let copy = area.byte_add(head);
        let _ = madvise(copy, len, MmapAdvise::MADV_HUGEPAGE);
        if head > 0 {
            let _ = munmap(area, head);
        }
        let _ = munmap(copy.byte_add(len), HUGE_PAGE - head);
        copy
    };
    for &(start, end) in held {
        // SAFETY: both ranges lie inside `len` bytes of their mappings (the caller's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(at.as_ptr().add(start), copy.as_ptr().cast::<u8>().add(start), end - start)
        };
    }
    // SAFETY: moves our private pages over the range in one step; the old pages' contents are
    // already in the copy, and the caller keeps the range's owner alive.
    if let Err(e) = unsafe { move_pages(copy.as_ptr(), len, at.as_ptr()) } {
        // SAFETY: the copy is still ours (a move that failed leaves it in place).
        unsafe {
            let _ = munmap(copy, len);
        }
        return Err(e.into());
    }
    Ok(Privatized { at, len })
}

/// `mremap(from, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to)` as a raw system call. UCX, once
/// loaded, interposes libc's `mremap` with a four-argument version that drops `to`, so the
/// kernel got whatever the register held: the pages landed at a stray address (unmapping what
/// was there) and held views were overwritten. UCX watches mappings only to invalidate its
/// registration cache, and ring memory is never registered with it.
///
/// # Safety
/// As for `mremap`: `from` must be a mapping of `len` bytes we own, and `to..to + len` a range
/// whose current contents may go.
unsafe fn move_pages(from: *mut std::ffi::c_void, len: usize, to: *mut u8) -> io::Result<()> {
    let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED;
    // SAFETY: the caller's contract; every argument is passed as the kernel expects. With
    // MREMAP_FIXED a success always lands at `to`.
    let r = unsafe { libc::syscall(libc::SYS_mremap, from, len, len, flags, to) };
    if r == -1 { Err(io::Error::last_os_error()) } else { Ok(()) }
}
