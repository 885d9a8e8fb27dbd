//! Sealed regions: immutable shared memory that a same-host peer maps instead of receiving a
//! copy.
//!
//! A region is a memfd that is filled once, sealed against writing, shrinking and growing, and
//! then mapped read-only. Because its bytes can never change, a shared-memory peer that is
//! handed the descriptor can validate a body once and read it in place, and neither side copies
//! it. Every live region is registered by address, so a transport can tell whether a body it is
//! asked to send lies inside one.
//!
//! A peer that is sent any part of a region can read all of it, for as long as it keeps the
//! region mapped (the connection's lifetime).

use std::collections::BTreeMap;
use std::io;
use std::ops::Deref;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, Weak};

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

use super::{Lender, Mapping};
use crate::error::{Error, Result, Violation};
use crate::sync::Unpoison;

/// Seals every region carries; a peer maps only memory that has them.
const SEALS: SealFlag = SealFlag::F_SEAL_WRITE.union(SealFlag::F_SEAL_SHRINK).union(SealFlag::F_SEAL_GROW);

/// Immutable shared memory. Cloning is cheap; the memory goes when the last clone (and every
/// `Bytes` made from one) drops and no peer maps it any more.
#[derive(Clone)]
pub struct SealedRegion(Arc<Region>);

struct Region {
    id: u64,
    map: Mapping,
    fd: OwnedFd,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Live regions by start address.
static LIVE: RwLock<BTreeMap<usize, Weak<Region>>> = RwLock::new(BTreeMap::new());
/// How many; while none, senders skip the lock (every large shm frame asks).
static LIVE_COUNT: AtomicUsize = AtomicUsize::new(0);

impl SealedRegion {
    /// A region of `len` bytes (at least one) that `fill` writes before it is sealed.
    pub fn build(len: usize, fill: impl FnOnce(&mut [u8])) -> Result<Self> {
        if len == 0 {
            return Err(Error::Usage("a sealed region cannot be empty"));
        }
        let fd = memfd_create("wirespeed-sealed", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)
            .map_err(io::Error::from)?;
        nix::unistd::ftruncate(&fd, len as i64).map_err(io::Error::from)?;
        {
            let writable = Mapping::shared(&fd, 0, len)?;
            // SAFETY: the mapping is ours alone and `len` bytes long.
            fill(unsafe { std::slice::from_raw_parts_mut(writable.ptr.as_ptr(), len) });
            // Dropped (unmapped) here: the write seal needs every writable mapping gone.
        }
        fcntl(&fd, FcntlArg::F_ADD_SEALS(SEALS | SealFlag::F_SEAL_SEAL)).map_err(io::Error::from)?;
        let map = Mapping::read_only(&fd, len)?;
        let region = Arc::new(Region { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), map, fd });
        let mut live = LIVE.write().unpoison();
        live.insert(region.map.ptr.as_ptr() as usize, Arc::downgrade(&region));
        LIVE_COUNT.fetch_add(1, Ordering::Relaxed);
        Ok(SealedRegion(region))
    }

    /// A region holding a copy of `bytes`.
    pub fn copy_of(bytes: &[u8]) -> Result<Self> {
        Self::build(bytes.len(), |dst| dst.copy_from_slice(bytes))
    }

    /// The live region that holds all of `ptr..ptr+len`, and the offset of `ptr` in it.
    pub fn containing(ptr: *const u8, len: usize) -> Option<(SealedRegion, usize)> {
        if LIVE_COUNT.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let at = ptr as usize;
        let live = LIVE.read().unpoison();
        let (&start, weak) = live.range(..=at).next_back()?;
        let region = weak.upgrade()?;
        let offset = at - start;
        (offset.checked_add(len)? <= region.map.len()).then_some((SealedRegion(region), offset))
    }

    /// Unique in this process, never reused.
    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The sealed memfd, to hand to a peer.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.fd.as_fd()
    }

    /// `len` bytes from `offset` as `Bytes` that keep the region alive.
    pub fn slice(&self, offset: usize, len: usize) -> bytes::Bytes {
        bytes::Bytes::from_owner(self.clone()).slice(offset..offset + len)
    }
}

impl Deref for SealedRegion {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: mapped while the region lives, and sealed against change.
        unsafe { std::slice::from_raw_parts(self.0.map.ptr.as_ptr(), self.0.map.len()) }
    }
}

impl AsRef<[u8]> for SealedRegion {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let mut live = LIVE.write().unpoison();
        // Still mapped here, so no other region can have taken the address yet.
        live.remove(&(self.map.ptr.as_ptr() as usize));
        LIVE_COUNT.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for SealedRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealedRegion(#{}, {} bytes)", self.0.id, self.0.map.len())
    }
}

/// A peer's sealed region, mapped read-only; received bodies are views of it.
pub struct PeerRegion(Mapping);

impl PeerRegion {
    /// Maps a descriptor a peer sent as a sealed region of `len` bytes, after checking that
    /// it is one: sealed against writes and shrinking (so its bytes cannot change or vanish
    /// under us) and exactly `len` bytes long.
    pub fn map(fd: &OwnedFd, len: u64) -> Result<Self> {
        let bad = |why: String| Error::from(Violation::BadSharedRegion(why));
        let seals = fcntl(fd, FcntlArg::F_GET_SEALS).map_err(|e| bad(format!("is not sealable memory ({e})")))?;
        if !SealFlag::from_bits_truncate(seals).contains(SEALS.difference(SealFlag::F_SEAL_GROW)) {
            return Err(bad("is not sealed against writes".into()));
        }
        let st = nix::sys::stat::fstat(fd).map_err(io::Error::from)?;
        if len == 0 || st.st_size as u64 != len {
            return Err(bad(format!("has {} bytes, not the {len} announced", st.st_size)));
        }
        Ok(PeerRegion(Mapping::read_only(fd, len as usize)?))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Start of the mapping.
    pub fn ptr(&self) -> NonNull<u8> {
        self.0.ptr
    }
}

/// Views of a peer's region need nothing back: the mapping lives while any view does.
impl Lender for PeerRegion {
    fn release(&self, _token: u64) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_holds_what_was_written_and_is_found_by_address() {
        let r = SealedRegion::copy_of(b"hello sealed world").unwrap();
        assert_eq!(&r[..], b"hello sealed world");
        let (found, offset) = SealedRegion::containing(r[6..].as_ptr(), 6).unwrap();
        assert_eq!((found.id(), offset), (r.id(), 6));
        drop(found);
        assert!(SealedRegion::containing(r[6..].as_ptr(), 13).is_none(), "runs past the end");
        assert!(SealedRegion::containing(b"heap".as_ptr(), 4).is_none());
        let bytes = r.slice(6, 6);
        let (at, id) = (r.as_ptr(), r.id());
        drop(r);
        assert_eq!(&bytes[..], b"sealed", "a slice keeps the region alive");
        drop(bytes);
        // Another test's region may since have been mapped at the same address.
        assert!(SealedRegion::containing(at, 1).is_none_or(|(r, _)| r.id() != id), "gone from the registry");
    }

    #[test]
    fn a_region_cannot_be_written_or_shrunk() {
        let r = SealedRegion::copy_of(&[7u8; 4096]).unwrap();
        assert!(nix::unistd::write(r.fd(), b"x").is_err());
        assert!(nix::unistd::ftruncate(r.fd(), 0).is_err());
        assert!(Mapping::shared(r.fd(), 0, 4096).is_err(), "no writable mapping");
        assert!(SealedRegion::build(0, |_| ()).is_err());
    }

    #[test]
    fn a_peer_maps_only_sealed_memory_of_the_announced_size() {
        let r = SealedRegion::copy_of(&[1u8; 100]).unwrap();
        let fd = r.fd().try_clone_to_owned().unwrap();
        let peer = PeerRegion::map(&fd, 100).unwrap();
        // SAFETY: mapped for 100 bytes.
        assert_eq!(unsafe { *peer.ptr().as_ptr().add(99) }, 1);
        assert!(PeerRegion::map(&fd, 101).is_err(), "wrong size");
        let unsealed = memfd_create("plain", MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&unsealed, 100).unwrap();
        assert!(matches!(PeerRegion::map(&unsealed, 100), Err(Error::PeerMisbehaved(Violation::BadSharedRegion(_)))));
    }
}
