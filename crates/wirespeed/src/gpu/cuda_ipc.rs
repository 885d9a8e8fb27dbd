//! Device memory lent to another process on this host (CUDA IPC): the owner exports a handle
//! to a whole allocation, the peer opens it in its own context and copies into it with the
//! device's copy engines, so the bytes never pass through a host buffer of the owner's.

use std::sync::Arc;

use cudarc::driver::sys;

use super::device::{Context, DeviceBuffer, Gpu, driver};
use super::{GpuError, GpuResult};

/// The bytes that name an exported allocation.
pub const IPC_HANDLE_LEN: usize = 64;

impl DeviceBuffer {
    /// A handle another process on this host opens with [`Gpu::open_ipc`]. It grants access
    /// to the memory: send it only to a peer that authenticated.
    pub fn ipc_handle(&self) -> GpuResult<[u8; IPC_HANDLE_LEN]> {
        self.ctx.bind()?;
        let mut handle = sys::CUipcMemHandle { reserved: [0; IPC_HANDLE_LEN] };
        // SAFETY: `ptr` is a whole allocation of ours; out-pointer to a local.
        unsafe { sys::cuIpcGetMemHandle(&mut handle, self.ptr) }.result().map_err(driver("exporting device memory"))?;
        Ok(handle.reserved.map(|b| b as u8))
    }
}

/// Another process's device memory, mapped into ours; unmapped when dropped.
pub struct IpcMapping {
    ctx: Arc<Context>,
    ptr: sys::CUdeviceptr,
    len: usize,
}

// SAFETY: a device address in a context that every use makes current first.
unsafe impl Send for IpcMapping {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for IpcMapping {}

impl Gpu {
    /// Maps the allocation `handle` names (from [`DeviceBuffer::ipc_handle`] in another
    /// process), checking that it holds at least `len` bytes.
    pub fn open_ipc(&self, handle: [u8; IPC_HANDLE_LEN], len: usize) -> GpuResult<IpcMapping> {
        self.ctx.bind()?;
        let raw = sys::CUipcMemHandle { reserved: handle.map(|b| b as _) };
        let mut ptr = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: the driver checks the handle; out-pointer to a local.
        unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, raw, flags) }
            .result()
            .map_err(driver("opening another process's device memory"))?;
        let mapping = IpcMapping { ctx: self.ctx.clone(), ptr, len };
        self.check_allocated(ptr, len)?;
        Ok(mapping)
    }
}

impl Gpu {
    /// Checks that `address..address+len` lies inside one allocation of this process's.
    pub fn check_allocated(&self, address: u64, len: usize) -> GpuResult<()> {
        self.ctx.bind()?;
        let (mut base, mut size) = (0, 0usize);
        // SAFETY: the driver answers for any address; out-pointers to locals.
        let found = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut size, address) }.result();
        match found {
            Ok(()) if address.checked_add(len as u64).is_some_and(|end| end <= base + size as u64) => Ok(()),
            _ => Err(GpuError::Driver {
                what: "checking device memory",
                why: format!("{len} bytes at {address:#x} are not one allocation"),
            }),
        }
    }
}

impl IpcMapping {
    /// The device address in this process.
    pub fn address(&self) -> u64 {
        self.ptr
    }

    /// The mapping's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: opened in `open_ipc`, closed once; copies into it were waited for.
            let _ = unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
        }
    }
}
