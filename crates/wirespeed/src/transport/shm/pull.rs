//! Split copies for large frames. The sender publishes the frame with a descriptor of where the
//! payload's tail lies in its own memory, then copies the head into the ring; at the same time
//! the receiver pulls the tail with `process_vm_readv`. Two cores copy instead of one, and each
//! byte is still copied once.
//!
//! The descriptor follows the payload in the ring, 64-byte aligned:
//! `copied: u32` (sender: its part is in place), `pulled: u32` (receiver: 1 pulled, 2 could
//! not), `split: u64` (payload bytes the sender copies), then `(address, length)` u64 pairs.
//! The receiver reads only from the process on the other end of the unix socket (its pid comes
//! from the kernel, never from shared memory), so a peer can make it read nothing but the
//! peer's own memory.

use std::io::IoSlice;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::error::{Error, FrameError, Result};

/// Payloads at least this big are split.
pub(super) const MIN_SPLIT: usize = 64 << 10;
/// Bytes of a `len`-byte payload the sender copies itself. A pull has a fixed cost (a system
/// call, pinning the pages), so the receiver takes a little less than half: measured here,
/// 128 KiB frames gained most at a quarter, 1 MiB frames at about half.
pub(super) fn sender_share(len: usize) -> usize {
    (len / 2 + (32 << 10)).min(len)
}

/// Most source segments a split frame may describe.
pub(super) const MAX_SEGMENTS: usize = 64;
const FIXED: usize = 24;

/// `pulled` states. The receiver moves it from IDLE to PULLING to DONE or REFUSED. A sender
/// that finds it still IDLE once its own half is copied moves it to TAKEN_BACK and copies the
/// tail itself, so a send never waits for a receiver that is not reading right now, and the
/// sender's memory is never read after the send returns.
pub(super) const IDLE: u32 = 0;
pub(super) const DONE: u32 = 1;
pub(super) const REFUSED: u32 = 2;
pub(super) const PULLING: u32 = 3;
pub(super) const TAKEN_BACK: u32 = 4;
/// `copied` states: the sender's part is in place, or all of it (after TAKEN_BACK or REFUSED).
pub(super) const HEAD_COPIED: u32 = 1;
pub(super) const ALL_COPIED: u32 = 2;

/// Bytes of the descriptor of `segments` segments (the ring aligns it).
pub(super) fn descriptor_len(segments: usize) -> usize {
    FIXED + 16 * segments
}

/// A descriptor inside the mapped ring.
pub(super) struct Descriptor {
    at: *mut u8,
}

impl Descriptor {
    /// # Safety
    /// `at` must be 64-aligned and point to `ring::descriptor_bytes(n)` bytes of the live mapping.
    pub(super) unsafe fn new(at: *mut u8) -> Self {
        Descriptor { at }
    }

    fn flag(&self, i: usize) -> &AtomicU32 {
        // SAFETY: the first 8 bytes are two aligned u32 flags (see `new`).
        unsafe { &*(self.at.add(4 * i) as *const AtomicU32) }
    }

    pub(super) fn copied(&self) -> &AtomicU32 {
        self.flag(0)
    }

    pub(super) fn pulled(&self) -> &AtomicU32 {
        self.flag(1)
    }

    /// Sender: describes `payload[split..]` and clears both flags.
    pub(super) fn write(&self, split: usize, tail: &[IoSlice<'_>]) {
        self.copied().store(0, Ordering::Relaxed);
        self.pulled().store(0, Ordering::Relaxed);
        // SAFETY: `new` guarantees room for the fixed part and the segments.
        unsafe {
            (self.at.add(8) as *mut u64).write(split as u64);
            for (i, s) in tail.iter().enumerate() {
                let p = self.at.add(FIXED + 16 * i) as *mut u64;
                p.write(s.as_ptr() as u64);
                p.add(1).write(s.len() as u64);
            }
        }
    }

    /// Receiver: pulls the described tail from `pid` into the payload at `payload` (`len`
    /// bytes), after checking that the segments cover exactly the tail. A bad descriptor is a
    /// protocol violation; a refused read is an I/O error.
    pub(super) fn pull(&self, pid: libc::pid_t, payload: *mut u8, len: usize, segments: usize) -> Result<()> {
        // SAFETY: `new` guarantees the fixed part and `segments` pairs are in the mapping.
        let (split, segs) = unsafe {
            let split = (self.at.add(8) as *const u64).read();
            let segs: Vec<libc::iovec> = (0..segments)
                .map(|i| {
                    let p = self.at.add(FIXED + 16 * i) as *const u64;
                    libc::iovec { iov_base: p.read() as *mut libc::c_void, iov_len: p.add(1).read() as usize }
                })
                .collect();
            (split, segs)
        };
        let total = segs.iter().try_fold(0u64, |a, s| a.checked_add(s.iov_len as u64));
        if split > len as u64 || total != Some(len as u64 - split) {
            return Err(Error::Frame(FrameError::Malformed("pull descriptor")));
        }
        // SAFETY: the tail lies inside the frame's payload, which only we write now.
        let mut dst = unsafe { std::slice::from_raw_parts_mut(payload.add(split as usize), len - split as usize) };
        let mut remote = &segs[..];
        let mut skip = 0usize; // bytes of remote[0] already read
        while !dst.is_empty() {
            let mut r: Vec<libc::iovec> = remote.to_vec();
            r[0].iov_base = (r[0].iov_base as usize + skip) as *mut libc::c_void;
            r[0].iov_len -= skip;
            let local = libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: dst.len() };
            // SAFETY: `local` is our own writable memory; the kernel checks the remote side.
            let n = unsafe { libc::process_vm_readv(pid, &local, 1, r.as_ptr(), r.len() as libc::c_ulong, 0) };
            if n <= 0 {
                return Err(Error::from(std::io::Error::last_os_error()));
            }
            let mut n = n as usize;
            dst = &mut dst[n..];
            while n > 0 {
                let left = remote[0].iov_len - skip;
                if n < left {
                    skip += n;
                    n = 0;
                } else {
                    n -= left;
                    skip = 0;
                    remote = &remote[1..];
                }
            }
            while remote.first().is_some_and(|s| s.iov_len == 0) {
                remote = &remote[1..];
            }
        }
        Ok(())
    }
}
