//! Native one-sided transfers: regions registered with `fi_mr_reg` for remote reads and
//! writes, their address and key as the descriptor's native part, and `fi_write`/`fi_read`
//! on the connection's endpoint. Only where the provider has FI_RMA; elsewhere the engine
//! carries one-sided access as frames.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ofi_sys::{FI_READ, FI_REMOTE_READ, FI_REMOTE_WRITE, FI_WRITE};

use super::core::Core;
use super::endpoint::Registration;
use crate::error::{Error, Limit, Result, Violation};
use crate::mem::RegionMem;
use crate::proto::codec::{self, Writer};
use crate::transport::progress::Driver;
use crate::transport::progress::Handle;
use crate::transport::{LentMemory, NativeRemote, NativeRma};

const PAGE: usize = 4096;

pub(super) struct OfiRma {
    pub(super) h: Arc<Handle<Core>>,
}

/// Page-aligned memory and its registration; dropping it revokes access, then frees it.
struct Registered {
    registration: Option<Registration>,
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: plain heap memory and a registration the thread-safe domain lets any thread close.
unsafe impl Send for Registered {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Registered {}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registration = None;
        // SAFETY: allocated with this layout in `register`, freed once, after access ended.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

impl NativeRma for OfiRma {
    fn register(&self, len: usize) -> Result<(RegionMem, Vec<u8>)> {
        let layout = Layout::from_size_align(len.max(1), PAGE).map_err(|_| Limit::Memory(len as u64))?;
        // SAFETY: a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(Limit::Memory(len as u64))?;
        let mut owner = Registered { registration: None, ptr, layout };
        let access = (FI_REMOTE_READ | FI_REMOTE_WRITE | FI_READ | FI_WRITE) as u64;
        // SAFETY: the memory lives as long as `owner`, which drops the registration first.
        let r = unsafe { self.h.shared.lock().ep.register(ptr.as_ptr(), len, access)? };
        let native = region_key(&r);
        owner.registration = Some(r);
        // SAFETY: the memory stays valid until `owner` drops.
        Ok((unsafe { RegionMem::from_fabric(ptr, len, Box::new(owner)) }, native))
    }

    fn lend(&self, mem: &LentMemory) -> Result<(Box<dyn std::any::Any + Send + Sync>, Vec<u8>)> {
        let access = (FI_REMOTE_READ | FI_REMOTE_WRITE | FI_READ | FI_WRITE) as u64;
        // SAFETY: the caller of `Connection::lend` keeps the memory past the registration.
        let r = unsafe { self.h.shared.lock().ep.register(mem.ptr.as_ptr(), mem.len, access)? };
        let native = region_key(&r);
        Ok((Box::new(r), native))
    }

    /// GPU memory would need the provider opened with FI_HMEM and registered with the CUDA
    /// interface; the only libfabric here (Debian's 1.17) is built without CUDA, so nothing
    /// could test it, and the caller stages through host memory instead.
    #[cfg(feature = "gpu")]
    fn register_device(
        &self,
        _mem: &crate::gpu::DeviceBuffer,
    ) -> Result<(Box<dyn std::any::Any + Send + Sync>, Vec<u8>)> {
        Err(Error::Fabric {
            op: "lending GPU memory",
            status: "libfabric's FI_HMEM is not used by this build (the system libfabric has no CUDA)".into(),
        })
    }

    fn remote(&self, native: &[u8]) -> Result<Box<dyn NativeRemote>> {
        let (addr, key) = codec::read_all(native, |r| Ok((r.u64()?, r.u64()?)))
            .ok_or(Violation::Malformed("libfabric region key"))?;
        Ok(Box::new(OfiRemote { h: self.h.clone(), addr, key }))
    }
}

/// What a peer needs to reach a registration: where it starts in requests, and its key.
fn region_key(r: &Registration) -> Vec<u8> {
    let mut w = Writer::with_capacity(16);
    w.u64(r.addr);
    w.u64(r.key);
    w.into_inner()
}

/// A peer's region: where it starts in requests, and its key.
struct OfiRemote {
    h: Arc<Handle<Core>>,
    addr: u64,
    key: u64,
}

impl OfiRemote {
    /// Runs one transfer to completion. Until it completes the provider may use `buf`, so on
    /// a timeout the connection is failed and the endpoint's queues drained before this returns.
    fn run(&self, write: bool, buf: *mut u8, len: usize, offset: u64, timeout: Duration) -> Result<()> {
        let shared = &self.h.shared;
        let mut core = shared.lock();
        core.usable()?;
        // Our buffer needs a registration only where the provider asks for local ones.
        let local = match core.ep.abilities.mr_local {
            // SAFETY: kept until the transfer has completed (below).
            true => Some(unsafe { core.ep.register(buf, len, if write { FI_WRITE } else { FI_READ } as u64)? }),
            false => None,
        };
        let desc = local.as_ref().map_or(std::ptr::null_mut(), |r| r.desc);
        core.waiting += 1;
        drop(core);
        let deadline = Instant::now() + timeout;
        let remote = (self.addr.wrapping_add(offset), self.key);
        let id = shared.wait(Some(deadline), true, |core| {
            // SAFETY: `buf` outlives the transfer: we return only once it completed or failed.
            unsafe { core.start_user_rma(write, buf, len, desc, remote) }.transpose()
        });
        let outcome = match id {
            Ok(Some(Ok(id))) => shared.wait(Some(deadline), false, |core| core.take_finished(id)),
            Ok(Some(Err(e))) | Err(e) => Err(e),
            Ok(None) => Ok(None),
        };
        shared.lock().waiting -= 1;
        match outcome {
            Ok(Some(Ok(()))) => Ok(()),
            Ok(Some(Err(why))) => Err(Error::Fabric { op: "one-sided transfer", status: why }),
            Ok(None) => {
                // The provider may still touch `buf`: close the endpoint, which ends that.
                let mut core = shared.lock();
                core.fail(Error::Timeout(timeout));
                core.ep.close_endpoint();
                Err(Error::Timeout(timeout))
            }
            Err(e) => Err(e),
        }
    }
}

impl NativeRemote for OfiRemote {
    fn put(&self, offset: u64, data: &[u8], timeout: Duration) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        // The provider only reads from a write's buffer.
        self.run(true, data.as_ptr().cast_mut(), data.len(), offset, timeout)
    }

    fn get(&self, offset: u64, out: &mut [u8], timeout: Duration) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        self.run(false, out.as_mut_ptr(), out.len(), offset, timeout)
    }
}
