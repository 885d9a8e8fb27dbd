//! GPU memory lent over shared memory: the owner exports its allocation by CUDA IPC, naming
//! the device by UUID; the peer opens it on that device and copies each put in with the copy
//! engines, straight from the sender's memory (by DMA where that memory is page-locked), so no
//! host buffer of the owner's sits between. Within one process the address is used as it is:
//! CUDA IPC does not open a process's own memory.

use std::sync::Mutex;
use std::time::Duration;

use crate::error::{Error, Result, Violation};
use crate::gpu::{DeviceBuffer, Gpu, GpuStream, IPC_HANDLE_LEN, IpcMapping};
use crate::proto::codec::{self, Reader, Writer};
use crate::sync::Unpoison;
use crate::transport::NativeRemote;

const MAGIC: &[u8; 4] = b"CUDA";
/// Magic, device UUID, IPC handle, address in the owner's process, length.
const NATIVE_LEN: usize = 4 + 16 + IPC_HANDLE_LEN + 8 + 8;

/// What the peer needs to reach `mem`.
pub(super) fn lend(mem: &DeviceBuffer) -> Result<Vec<u8>> {
    let mut w = Writer::with_capacity(NATIVE_LEN);
    w.bytes(MAGIC);
    w.bytes(&mem.gpu().uuid()?);
    w.bytes(&mem.ipc_handle()?);
    w.u64(mem.device_ptr());
    w.u64(mem.len() as u64);
    Ok(w.into_inner())
}

/// Whether a region's access information names GPU memory (a host window's is 8 bytes).
pub(super) fn names_gpu(native: &[u8]) -> bool {
    native.len() == NATIVE_LEN && native.starts_with(MAGIC)
}

/// Opens the GPU memory `native` names; `same_process`: the peer is this process.
pub(super) fn open(native: &[u8], same_process: bool) -> Result<Box<dyn NativeRemote>> {
    let fields =
        |r: &mut Reader| Ok((r.array::<4>()?, r.array::<16>()?, r.array::<IPC_HANDLE_LEN>()?, r.u64()?, r.u64()?));
    let (uuid, handle, address, len) = match codec::read_all(native, fields) {
        Some((magic, uuid, handle, address, len)) if &magic == MAGIC => (uuid, handle, address, len),
        _ => return Err(Violation::Malformed("GPU region").into()),
    };
    let gpu = Gpu::open_uuid(uuid)?;
    let len_bytes = usize::try_from(len).map_err(|_| Violation::Malformed("GPU region"))?;
    let target = if same_process {
        gpu.check_allocated(address, len_bytes)?;
        Target::Own(address)
    } else {
        Target::Mapped(gpu.open_ipc(handle, len_bytes)?)
    };
    let stream = gpu.stream()?;
    Ok(Box::new(GpuWindow { gpu, target, len, stream: Mutex::new(stream) }))
}

enum Target {
    Mapped(IpcMapping),
    /// Our own memory: its address.
    Own(u64),
}

/// The peer's GPU memory, reached by this process's copies.
struct GpuWindow {
    gpu: Gpu,
    target: Target,
    len: u64,
    stream: Mutex<GpuStream>,
}

impl GpuWindow {
    fn at(&self, offset: u64, len: usize) -> Result<u64> {
        crate::mem::check_span(offset, len, self.len)?;
        Ok(offset
            + match &self.target {
                Target::Mapped(m) => m.address(),
                Target::Own(a) => *a,
            })
    }
}

impl NativeRemote for GpuWindow {
    fn put(&self, offset: u64, data: &[u8], _timeout: Duration) -> Result<()> {
        let at = self.at(offset, data.len())?;
        let stream = self.stream.lock().unpoison();
        // SAFETY: in bounds of memory mapped while `self` lives; the copy is waited for
        // before `data` is given back, so the peer sees it before any later message.
        unsafe { stream.copy_to_address(at, data) }?;
        stream.synchronize().map_err(Error::from)
    }

    fn get(&self, offset: u64, out: &mut [u8], _timeout: Duration) -> Result<()> {
        let at = self.at(offset, out.len())?;
        let stream = self.stream.lock().unpoison();
        // SAFETY: as in `put`, the other way round.
        unsafe { stream.copy_from_address(out, at) }?;
        stream.synchronize().map_err(Error::from)
    }

    fn copied_by(&self) -> Option<Gpu> {
        Some(self.gpu.clone())
    }
}
