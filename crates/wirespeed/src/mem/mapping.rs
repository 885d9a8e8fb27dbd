//! Shared mappings of memory file descriptors (shm rings, sealed regions).

use std::io;
use std::num::NonZeroUsize;
use std::os::fd::AsFd;
use std::ptr::NonNull;

use nix::sys::mman::{MapFlags, ProtFlags, mmap, munmap};

use crate::error::Result;

/// A shared mapping, unmapped when dropped.
pub(crate) struct Mapping {
    pub ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: plain memory; who may write it when is the owner's protocol (a ring's, or none at
// all for sealed memory).
unsafe impl Send for Mapping {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from `offset` (a multiple of the page size), readable and
    /// writable. The caller checked the file's size.
    pub(crate) fn shared(fd: impl AsFd, offset: usize, len: usize) -> Result<Self> {
        Self::map(fd, offset, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, MapFlags::MAP_SHARED)
    }

    /// As [`Mapping::shared`], with the page tables built at once (and the file's pages
    /// allocated where they were not yet).
    pub(crate) fn shared_populated(fd: impl AsFd, offset: usize, len: usize) -> Result<Self> {
        let flags = MapFlags::MAP_SHARED | MapFlags::MAP_POPULATE;
        Self::map(fd, offset, len, ProtFlags::PROT_READ | ProtFlags::PROT_WRITE, flags)
    }

    /// Maps the first `len` bytes of `fd` read-only.
    pub(crate) fn read_only(fd: impl AsFd, len: usize) -> Result<Self> {
        Self::map(fd, 0, len, ProtFlags::PROT_READ, MapFlags::MAP_SHARED)
    }

    fn map(fd: impl AsFd, offset: usize, len: usize, prot: ProtFlags, flags: MapFlags) -> Result<Self> {
        let size = NonZeroUsize::new(len).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: a fresh shared mapping of a file the caller holds.
        let ptr = unsafe { mmap(None, size, prot, flags, fd, offset as i64) }.map_err(io::Error::from)?;
        Ok(Mapping { ptr: ptr.cast(), len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range, and nothing uses it any more.
        unsafe {
            let _ = munmap(self.ptr.cast(), self.len);
        }
    }
}
