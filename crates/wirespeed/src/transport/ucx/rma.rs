//! Native one-sided transfers: regions registered with `ucp_mem_map`, their packed keys as
//! the descriptor's native part, and `ucp_put_nbx`/`ucp_get_nbx` on the connection's
//! endpoint. UCX picks the path: cma or RDMA where it can, its own emulation elsewhere.
//! The same allocation serves message bodies placed as ucx_perftest places its own.

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ucx_sys::*;

use super::complete;
use super::context::{check, context, lifecycle};
use super::worker::Core;
use super::worker::RmaOp;
use crate::error::{Error, Result, Violation};
use crate::mem::RegionMem;
use crate::proto::codec::{Reader, Writer};
use crate::transport::progress::Handle;
use crate::transport::{LentMemory, NativeRemote, NativeRma};

pub(super) struct UcxRma {
    pub(super) h: Arc<Handle<Core>>,
}

/// Memory UCX allocated and registered; dropping it unregisters and frees it.
struct Registration(ucp_mem_h);

// SAFETY: a memory handle of the process-wide context, which is thread-safe for mapping.
unsafe impl Send for Registration {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Registration {}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(ctx) = context() {
            let _one_at_a_time = lifecycle();
            // SAFETY: mapped in `register`, unmapped once.
            unsafe { lib().ucp_mem_unmap(ctx, self.0) };
        }
    }
}

impl Registration {
    /// Maps memory as `params` say.
    ///
    /// # Safety
    /// Memory `params` name (rather than ask UCX to allocate) must outlive the registration.
    unsafe fn map(params: &ucp_mem_map_params_t, what: &'static str) -> Result<Registration> {
        let mut memh = std::ptr::null_mut();
        let ctx = context()?;
        let _one_at_a_time = lifecycle();
        // SAFETY: valid params, vouched for by the caller; out-pointer to a local.
        check(what, unsafe { lib().ucp_mem_map(ctx, params, &mut memh) })?;
        Ok(Registration(memh))
    }

    /// Has UCX allocate and register at least `len` bytes, so that it can place them where
    /// peers reach them best (a shared-memory segment a peer on this host maps, for one).
    /// The memory is as UCX hands it over: zeroed, and maybe not yet backed by pages.
    fn allocate(len: usize) -> Result<(Registration, NonNull<u8>)> {
        let params = ucp_mem_map_params_t {
            field_mask: (UCP_MEM_MAP_PARAM_FIELD_ADDRESS
                | UCP_MEM_MAP_PARAM_FIELD_LENGTH
                | UCP_MEM_MAP_PARAM_FIELD_FLAGS) as u64,
            address: std::ptr::null_mut(),
            length: len.max(1),
            flags: UCP_MEM_MAP_ALLOCATE,
            ..Default::default()
        };
        // SAFETY: UCX allocates the memory; it lives as long as the registration.
        let registration = unsafe { Registration::map(&params, "allocating memory") }?;
        let mut attr = ucp_mem_attr_t { field_mask: UCP_MEM_ATTR_FIELD_ADDRESS as u64, ..Default::default() };
        // SAFETY: live handle; out-pointer to a local.
        check("querying memory", unsafe { lib().ucp_mem_query(registration.0, &mut attr) })?;
        let ptr = NonNull::new(attr.address.cast::<u8>())
            .ok_or_else(|| Error::Fabric { op: "allocating memory", status: "no address".into() })?;
        Ok((registration, ptr))
    }
}

/// `len` bytes of memory UCX allocated and registered, never written, as a message body:
/// what ucx_perftest sends from. Where UCX places it depends on `UCX_TLS` (a shared-memory
/// segment with posix; plain anonymous pages otherwise, which read as the kernel's zero page).
pub fn allocated_bytes(len: usize) -> Result<Bytes> {
    let (registration, ptr) = Registration::allocate(len)?;
    Ok(Bytes::from_owner(Allocated { _registration: registration, ptr, len }))
}

struct Allocated {
    _registration: Registration,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: memory nobody writes, valid while the registration lives; only read, from any thread.
unsafe impl Send for Allocated {}

impl AsRef<[u8]> for Allocated {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: UCX allocated at least `len` bytes there, valid until the registration drops.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

/// What a peer needs to reach registered memory at `address`: the address and the packed key.
fn access(registration: &Registration, address: u64) -> Result<Vec<u8>> {
    let ctx = context()?;
    let (mut packed, mut size) = (std::ptr::null_mut(), 0usize);
    // SAFETY: live context and handle; out-pointers to locals.
    check("packing a region's key", unsafe { lib().ucp_rkey_pack(ctx, registration.0, &mut packed, &mut size) })?;
    let mut native = Writer::with_capacity(8 + size);
    native.u64(address);
    // SAFETY: UCX returned `size` readable bytes at `packed`, released right after.
    unsafe {
        native.bytes(std::slice::from_raw_parts(packed as *const u8, size));
        lib().ucp_rkey_buffer_release(packed);
    }
    Ok(native.into_inner())
}

impl NativeRma for UcxRma {
    fn register(&self, len: usize) -> Result<(RegionMem, Vec<u8>)> {
        let (registration, ptr) = Registration::allocate(len)?;
        // SAFETY: UCX allocated at least `len` bytes there, ours until the handle is unmapped.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, len) };
        let native = access(&registration, ptr.as_ptr() as u64)?;
        // SAFETY: the memory stays valid until the registration, its owner, drops.
        Ok((unsafe { RegionMem::from_fabric(ptr, len, Box::new(registration)) }, native))
    }

    fn lend(&self, mem: &LentMemory) -> Result<(Box<dyn std::any::Any + Send + Sync>, Vec<u8>)> {
        let params = ucp_mem_map_params_t {
            field_mask: (UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH) as u64,
            address: mem.ptr.as_ptr().cast(),
            length: mem.len.max(1),
            ..Default::default()
        };
        // SAFETY: the caller of `Connection::lend` keeps the memory past the registration.
        let registration = unsafe { Registration::map(&params, "registering lent memory") }?;
        let native = access(&registration, mem.ptr.as_ptr() as u64)?;
        Ok((Box::new(registration), native))
    }

    /// Registers device memory as CUDA memory: UCX then puts into it with whatever its
    /// transports allow (cuda_ipc on one host, GPUDirect RDMA where the NIC has it, else its
    /// own staging through host memory).
    #[cfg(feature = "gpu")]
    fn register_device(
        &self,
        mem: &crate::gpu::DeviceBuffer,
    ) -> Result<(Box<dyn std::any::Any + Send + Sync>, Vec<u8>)> {
        // UCX asks the driver about the address on this thread.
        mem.gpu().make_current()?;
        let params = ucp_mem_map_params_t {
            field_mask: (UCP_MEM_MAP_PARAM_FIELD_ADDRESS
                | UCP_MEM_MAP_PARAM_FIELD_LENGTH
                | UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE) as u64,
            address: mem.device_ptr() as *mut std::ffi::c_void,
            length: mem.len().max(1),
            memory_type: UCS_MEMORY_TYPE_CUDA,
            ..Default::default()
        };
        // SAFETY: the caller drops the registration before the memory.
        let registration = unsafe { Registration::map(&params, "registering GPU memory") }?;
        let native = access(&registration, mem.device_ptr())?;
        Ok((Box::new(registration), native))
    }

    fn remote(&self, native: &[u8]) -> Result<Box<dyn NativeRemote>> {
        let mut r = Reader::new(native);
        let addr = r.u64().map_err(|_| Violation::Malformed("UCX region key"))?;
        let packed = r.rest();
        let rkey = self.h.shared.lock().unpack_rkey(packed)?;
        Ok(Box::new(UcxRemote { h: self.h.clone(), addr, rkey }))
    }
}

/// A peer's region: its address and our unpacked key to it. Holding the handle keeps the
/// worker, which the key belongs to, alive.
struct UcxRemote {
    h: Arc<Handle<Core>>,
    addr: u64,
    rkey: ucp_rkey_h,
}

// SAFETY: the key is only used with the Core lock held.
unsafe impl Send for UcxRemote {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for UcxRemote {}

impl UcxRemote {
    /// Runs one operation to completion.
    fn run(&self, op: RmaOp, buf: *mut u8, len: usize, offset: u64, timeout: Duration) -> Result<()> {
        let shared = &self.h.shared;
        let mut done: Box<Option<ucs_status_t>> = Box::new(None);
        let slot: *mut Option<ucs_status_t> = &mut *done;
        {
            let mut core = shared.lock();
            // SAFETY: `buf` and the slot outlive the request: `complete` returns only once
            // it has finished. The key is alive while `self` is.
            if !unsafe { core.start_rma(op, buf, len, (self.addr + offset, self.rkey), slot)? } {
                return Ok(());
            }
            core.sends_in_flight += 1;
        }
        let (outcome, abandoned) = complete(shared, slot, timeout, "one-sided transfer");
        if abandoned {
            Box::leak(done);
        }
        outcome
    }
}

impl NativeRemote for UcxRemote {
    fn put(&self, offset: u64, data: &[u8], timeout: Duration) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        // UCX only reads from a put's buffer.
        self.run(RmaOp::Put, data.as_ptr().cast_mut(), data.len(), offset, timeout)?;
        // A put completes locally; the flush makes it complete at the peer, so the peer sees
        // the bytes before any message we send next.
        self.run(RmaOp::Flush, std::ptr::null_mut(), 0, 0, timeout)
    }

    fn get(&self, offset: u64, out: &mut [u8], timeout: Duration) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        self.run(RmaOp::Get, out.as_mut_ptr(), out.len(), offset, timeout)
    }
}

impl Drop for UcxRemote {
    fn drop(&mut self) {
        let _core = self.h.shared.lock();
        // SAFETY: unpacked on this worker, which is alive; destroyed once, under the lock.
        unsafe { lib().ucp_rkey_destroy(self.rkey) };
    }
}
