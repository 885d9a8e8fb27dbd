//! One-sided access on one host. A registered region is a memfd sealed against shrinking and
//! growing, handed to the peer over the unix socket as it is registered (as sealed regions
//! are, its id's top bit set). The peer maps it and copies straight in or out, once, without
//! the owner's threads, as MPI does with a shared-memory window. Each side's mapping keeps the
//! memory alive, so a put that comes late never lands in memory the owner has freed. GPU
//! memory is lent by CUDA IPC instead (`gpu_window`).

use std::io;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

use super::regions::{Incoming, WINDOW, send_fd};
use crate::error::{Error, Result, Violation};
use crate::mem::{Mapping, RegionMem};
use crate::proto::codec::{self, Reader, Writer};
use crate::sync::Unpoison;
use crate::transport::{LentMemory, NativeRemote, NativeRma};

/// What keeps a window's size fixed for both sides.
const FIXED: SealFlag = SealFlag::F_SEAL_SHRINK.union(SealFlag::F_SEAL_GROW);

pub(super) struct ShmRma {
    sock: UnixStream,
    /// Shared with the receiving side, which reads the same socket for sealed regions.
    incoming: Arc<Mutex<Incoming>>,
    next: AtomicU64,
    /// How long a window's memory may take to arrive after its descriptor.
    timeout: Duration,
}

impl ShmRma {
    pub(super) fn new(sock: UnixStream, incoming: Arc<Mutex<Incoming>>, timeout: Duration) -> Self {
        ShmRma { sock, incoming, next: AtomicU64::new(0), timeout }
    }
}

impl NativeRma for ShmRma {
    fn register(&self, len: usize) -> Result<(RegionMem, Vec<u8>)> {
        let size = len.max(1);
        let fd = memfd_create("wirespeed-window", MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING)
            .map_err(io::Error::from)?;
        nix::unistd::ftruncate(&fd, size as i64).map_err(io::Error::from)?;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(FIXED | SealFlag::F_SEAL_SEAL)).map_err(io::Error::from)?;
        // Page tables built now, on both sides, rather than at each first touch mid-transfer.
        let map = Mapping::shared_populated(&fd, 0, size)?;
        let id = WINDOW | self.next.fetch_add(1, Ordering::Relaxed);
        send_fd(&self.sock, id, size as u64, &fd)
            .map_err(|e| Error::ConnectionLost(format!("handing over a one-sided region: {e}")))?;
        let ptr = map.ptr;
        // SAFETY: the mapping is `size` ≥ `len` writable bytes and lives as long as the owner.
        let mem = unsafe { RegionMem::from_fabric(ptr, len, Box::new(map)) };
        Ok((mem, id.to_le_bytes().to_vec()))
    }

    /// Hands over the file itself; the descriptor adds where in it the memory starts.
    fn lend(&self, mem: &LentMemory) -> Result<(Box<dyn std::any::Any + Send + Sync>, Vec<u8>)> {
        let id = WINDOW | self.next.fetch_add(1, Ordering::Relaxed);
        send_fd(&self.sock, id, mem.len as u64, &*mem.file)
            .map_err(|e| Error::ConnectionLost(format!("handing over lent memory: {e}")))?;
        let mut native = Writer::with_capacity(16);
        native.u64(id);
        native.u64(mem.offset);
        Ok((Box::new(()), native.into_inner()))
    }

    fn remote(&self, native: &[u8]) -> Result<Box<dyn NativeRemote>> {
        #[cfg(feature = "gpu")]
        if super::gpu_window::names_gpu(native) {
            let peer = nix::sys::socket::getsockopt(&self.sock, nix::sys::socket::sockopt::PeerCredentials);
            let same_process = peer.is_ok_and(|c| c.pid() as u32 == std::process::id());
            return super::gpu_window::open(native, same_process);
        }
        // A window id, and where lent memory starts in its file.
        let window = |r: &mut Reader| Ok((r.u64()?, if r.is_empty() { None } else { Some(r.u64()?) }));
        let (id, lent_at) = codec::read_all(native, window)
            .filter(|(id, _)| id & WINDOW != 0)
            .ok_or(Violation::Malformed("shm window"))?;
        let deadline = Instant::now() + self.timeout;
        let (fd, len) = self.incoming.lock().unpoison().take_window(id, &self.sock, deadline)?;
        let bad = |why: String| Error::from(Violation::BadSharedRegion(why));
        if let Some(offset) = lent_at {
            return lent_window(fd, offset, len).map_err(bad);
        }
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).map_err(|e| bad(format!("is not sealable memory ({e})")))?;
        if !SealFlag::from_bits_truncate(seals).contains(FIXED) {
            return Err(bad("may change size".into()));
        }
        let st = nix::sys::stat::fstat(&fd).map_err(io::Error::from)?;
        if len == 0 || st.st_size as u64 != len {
            return Err(bad(format!("has {} bytes, not the {len} announced", st.st_size)));
        }
        Ok(Box::new(Window(Mapping::shared_populated(&fd, 0, len as usize)?)))
    }

    #[cfg(feature = "gpu")]
    fn register_device(
        &self,
        mem: &crate::gpu::DeviceBuffer,
    ) -> Result<(Box<dyn std::any::Any + Send + Sync>, Vec<u8>)> {
        Ok((Box::new(()), super::gpu_window::lend(mem)?))
    }
}

/// Memory the peer lent from a file of its own: `len` bytes at `offset`, which must lie
/// inside the file (it cannot be sealed: see `Connection::lend`).
fn lent_window(fd: std::os::fd::OwnedFd, offset: u64, len: u64) -> std::result::Result<Box<dyn NativeRemote>, String> {
    let st = nix::sys::stat::fstat(&fd).map_err(|e| format!("cannot be examined ({e})"))?;
    let inside = offset.checked_add(len).is_some_and(|end| end <= st.st_size as u64);
    if len == 0 || !offset.is_multiple_of(4096) || !inside {
        return Err(format!("lends {len} bytes at {offset} of a {}-byte file", st.st_size));
    }
    let map =
        Mapping::shared_populated(&fd, offset as usize, len as usize).map_err(|e| format!("cannot be mapped ({e})"))?;
    Ok(Box::new(Window(map)))
}

/// The peer's region, mapped here.
struct Window(Mapping);

impl NativeRemote for Window {
    fn put(&self, offset: u64, data: &[u8], _timeout: Duration) -> Result<()> {
        crate::mem::check_span(offset, data.len(), self.0.len() as u64)?;
        // SAFETY: in bounds (the descriptor's length is checked against the mapping's by the
        // caller, and again here); the peer reads it only after a later message.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.0.ptr.as_ptr().add(offset as usize), data.len()) };
        // The bytes are visible before anything we publish after this (a ring's release store).
        fence(Ordering::Release);
        Ok(())
    }

    fn get(&self, offset: u64, out: &mut [u8], _timeout: Duration) -> Result<()> {
        crate::mem::check_span(offset, out.len(), self.0.len() as u64)?;
        fence(Ordering::Acquire);
        // SAFETY: in bounds, as above.
        unsafe { std::ptr::copy_nonoverlapping(self.0.ptr.as_ptr().add(offset as usize), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (ShmRma, ShmRma) {
        let (a, b) = UnixStream::pair().unwrap();
        let side = |s| ShmRma::new(s, Arc::default(), Duration::from_millis(200));
        (side(a), side(b))
    }

    #[test]
    fn a_window_is_the_same_memory_on_both_sides() {
        let (owner, peer) = pair();
        let (mem, native) = owner.register(10_000).unwrap();
        let remote = peer.remote(&native).unwrap();
        remote.put(9_990, b"0123456789", Duration::ZERO).unwrap();
        let mut back = [0; 10];
        mem.read(9_990, &mut back).unwrap();
        assert_eq!(&back, b"0123456789");
        mem.write(0, b"owner").unwrap();
        let mut got = [0; 5];
        remote.get(0, &mut got, Duration::ZERO).unwrap();
        assert_eq!(&got, b"owner");
        // Puts stay inside the mapping.
        assert!(remote.put(4096 * 3, b"x", Duration::ZERO).is_err());
        drop(mem); // the owner lets go; the peer's mapping stays valid
        remote.put(0, b"late", Duration::ZERO).unwrap();
    }

    #[test]
    fn forged_windows_are_errors() {
        let (owner, peer) = pair();
        assert!(peer.remote(b"short").is_err());
        assert!(peer.remote(&7u64.to_le_bytes()).is_err(), "not a window id");
        let never = peer.remote(&(WINDOW | 7).to_le_bytes());
        assert!(matches!(never, Err(Error::PeerMisbehaved(Violation::UnsharedRegion))), "never handed over");
        // Memory that could shrink under the peer.
        let loose = memfd_create("loose", MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&loose, 4096).unwrap();
        send_fd(&owner.sock, WINDOW | 8, 4096, &loose).unwrap();
        let r = peer.remote(&(WINDOW | 8).to_le_bytes());
        assert!(matches!(r, Err(Error::PeerMisbehaved(Violation::BadSharedRegion(_)))), "unsealed");
    }
}
