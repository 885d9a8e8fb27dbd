//! The device, its memory, streams and events.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{DriverError, result, sys};

use super::{GpuError, GpuResult};

/// The driver's error, with what we were doing.
pub(super) fn driver(what: &'static str) -> impl FnOnce(DriverError) -> GpuError {
    move |e| GpuError::Driver {
        what,
        why: e.error_string().map_or_else(|_| format!("{e:?}"), |s| s.to_string_lossy().into_owned()),
    }
}

/// A device's primary context, released when the last object that uses it goes.
pub(super) struct Context {
    pub(super) device: sys::CUdevice,
    raw: sys::CUcontext,
    name: String,
}

// SAFETY: a CUDA context may be made current on any thread; every use does so first.
unsafe impl Send for Context {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Context {}

impl Context {
    pub(super) fn bind(&self) -> GpuResult<()> {
        // SAFETY: `raw` is a retained primary context, alive while `self` is.
        unsafe { result::ctx::set_current(self.raw) }.map_err(driver("making the context current"))
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: retained once in `Gpu::open`; every object using it is gone.
        let _ = unsafe { result::primary_ctx::release(self.device) };
    }
}

/// One GPU, opened by number.
#[derive(Clone)]
pub struct Gpu {
    pub(super) ctx: Arc<Context>,
}

impl Gpu {
    /// Opens device `ordinal`; a host without the CUDA driver or without that device gives
    /// [`GpuError::NoGpu`].
    pub fn open(ordinal: usize) -> GpuResult<Gpu> {
        let count = devices()?;
        if ordinal >= count as usize {
            return Err(GpuError::NoGpu(format!("no device {ordinal}: this host has {count}")));
        }
        let device = result::device::get(ordinal as i32).map_err(driver("opening the device"))?;
        let name = result::device::get_name(device).map_err(driver("naming the device"))?;
        // SAFETY: `device` is valid; released in `Context::drop`.
        let raw = unsafe { result::primary_ctx::retain(device) }.map_err(driver("retaining the context"))?;
        let ctx = Arc::new(Context { device, raw, name });
        ctx.bind()?;
        Ok(Gpu { ctx })
    }

    /// The device's name, as the driver gives it.
    pub fn name(&self) -> &str {
        &self.ctx.name
    }

    /// The device's UUID, which names it in every process on the host.
    pub fn uuid(&self) -> GpuResult<[u8; 16]> {
        uuid_of(self.ctx.device)
    }

    /// Opens the device with this UUID (another process's, named in what it sent).
    pub fn open_uuid(uuid: [u8; 16]) -> GpuResult<Gpu> {
        for ordinal in 0..devices()? {
            let device = result::device::get(ordinal).map_err(driver("opening the device"))?;
            if uuid_of(device)? == uuid {
                return Gpu::open(ordinal as usize);
            }
        }
        Err(GpuError::NoGpu(format!("no device {} on this host", hex(&uuid))))
    }

    /// Makes this device's context current on the calling thread, for libraries (UCX) that
    /// take device addresses and ask the driver about them.
    pub fn make_current(&self) -> GpuResult<()> {
        self.ctx.bind()
    }

    /// Free and total device memory, in bytes.
    pub fn memory(&self) -> GpuResult<(usize, usize)> {
        self.ctx.bind()?;
        result::mem_get_info().map_err(driver("asking for free memory"))
    }

    /// `len` bytes of device memory, uninitialised.
    pub fn alloc(&self, len: usize) -> GpuResult<DeviceBuffer> {
        self.ctx.bind()?;
        // SAFETY: a plain allocation of `len` bytes, freed in `DeviceBuffer::drop`.
        let ptr = unsafe { result::malloc_sync(len.max(1)) }.map_err(driver("allocating device memory"))?;
        Ok(DeviceBuffer { ctx: self.ctx.clone(), ptr, len })
    }

    /// Page-locked host memory that the device copies from at full speed.
    pub fn alloc_pinned(&self, len: usize) -> GpuResult<PinnedBuffer> {
        self.ctx.bind()?;
        // SAFETY: freed in `PinnedBuffer::drop`.
        let ptr = unsafe { result::malloc_host(len.max(1), 0) }.map_err(driver("allocating pinned memory"))?;
        Ok(PinnedBuffer { ctx: self.ctx.clone(), ptr: ptr.cast(), len })
    }

    /// Page-locks `len` bytes at `ptr` in place (a receive ring), so copies from there run
    /// asynchronously at full speed; undone when the registration drops.
    ///
    /// # Safety
    /// The memory must stay mapped until the registration drops.
    pub unsafe fn register(&self, ptr: *mut u8, len: usize) -> GpuResult<Registration> {
        self.ctx.bind()?;
        // SAFETY: the caller keeps the range mapped; flags 0: plain page-locking.
        unsafe { sys::cuMemHostRegister_v2(ptr.cast(), len, 0) }.result().map_err(driver("registering host memory"))?;
        Ok(Registration { ctx: self.ctx.clone(), ptr })
    }

    /// A stream that runs independently of the default one.
    pub fn stream(&self) -> GpuResult<GpuStream> {
        self.ctx.bind()?;
        let raw =
            result::stream::create(result::stream::StreamKind::NonBlocking).map_err(driver("creating a stream"))?;
        Ok(GpuStream { ctx: self.ctx.clone(), raw })
    }
}

/// Starts the driver and counts the devices; a host without the driver has none.
fn devices() -> GpuResult<i32> {
    // SAFETY: only tries to open the library.
    if !unsafe { sys::is_culib_present() } {
        return Err(GpuError::NoGpu("the CUDA driver (libcuda.so.1) is not installed on this host".into()));
    }
    result::init().map_err(|e| GpuError::NoGpu(format!("the CUDA driver did not start: {e:?}")))?;
    result::device::get_count().map_err(driver("counting devices"))
}

fn uuid_of(device: sys::CUdevice) -> GpuResult<[u8; 16]> {
    let mut uuid = sys::CUuuid { bytes: [0; 16] };
    // SAFETY: a valid device; out-pointer to a local.
    unsafe { sys::cuDeviceGetUuid_v2(&mut uuid, device) }.result().map_err(driver("reading the device's UUID"))?;
    Ok(uuid.bytes.map(|b| b as u8))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Device memory.
pub struct DeviceBuffer {
    pub(super) ctx: Arc<Context>,
    pub(super) ptr: sys::CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    /// The device address, for kernels and for consumers that take a device pointer.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// The buffer's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device this memory is on.
    pub fn gpu(&self) -> Gpu {
        Gpu { ctx: self.ctx.clone() }
    }

    fn check(&self, offset: usize, len: usize) -> GpuResult<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(GpuError::Driver {
                what: "copying",
                why: format!("{len} bytes at {offset} overrun a buffer of {}", self.len),
            }),
        }
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: allocated by `Gpu::alloc`; work using it was waited for by its owner.
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

/// Page-locked host memory.
pub struct PinnedBuffer {
    ctx: Arc<Context>,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: plain host memory owned by this value; shared access only reads.
unsafe impl Send for PinnedBuffer {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` bytes allocated by the driver, owned here.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The buffer's bytes, to write.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: allocated by `Gpu::alloc_pinned`.
            let _ = unsafe { result::free_host(self.ptr.cast::<c_void>()) };
        }
    }
}

/// Host memory page-locked in place.
pub struct Registration {
    ctx: Arc<Context>,
    ptr: *mut u8,
}

// SAFETY: only the address is kept, to undo the registration.
unsafe impl Send for Registration {}

impl Drop for Registration {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: registered by `Gpu::register`.
            let _ = unsafe { sys::cuMemHostUnregister(self.ptr.cast()) };
        }
    }
}

/// A queue of work on the device.
pub struct GpuStream {
    ctx: Arc<Context>,
    pub(super) raw: sys::CUstream,
}

// SAFETY: a stream handle may be used from any thread with its context current.
unsafe impl Send for GpuStream {}

impl GpuStream {
    /// Queues a copy of `src` to `dst` at `offset`; it runs asynchronously from registered or
    /// pinned memory (from pageable memory the driver stages it and returns once it has).
    ///
    /// # Safety
    /// `src` must stay unchanged and mapped until an event recorded after this completes.
    pub unsafe fn copy_to_device(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> GpuResult<()> {
        dst.check(offset, src.len())?;
        self.ctx.bind()?;
        // SAFETY: bounds checked above; the caller keeps `src` alive.
        unsafe { result::memcpy_htod_async(dst.ptr + offset as u64, src, self.raw) }
            .map_err(driver("copying to the device"))
    }

    /// Queues a copy of `dst.len()` bytes at `offset` back to the host.
    ///
    /// # Safety
    /// `dst` must stay mapped, and unread, until an event recorded after this completes.
    pub unsafe fn copy_to_host(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> GpuResult<()> {
        src.check(offset, dst.len())?;
        self.ctx.bind()?;
        // SAFETY: bounds checked; the caller keeps `dst`.
        unsafe { result::memcpy_dtoh_async(dst, src.ptr + offset as u64, self.raw) }
            .map_err(driver("copying to the host"))
    }

    /// Queues a copy of `src` to device address `dst` (memory another process lent, say).
    ///
    /// # Safety
    /// `dst..dst+src.len()` must be device memory that stays allocated, and `src` unchanged,
    /// until the copy completes.
    pub unsafe fn copy_to_address(&self, dst: u64, src: &[u8]) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: the caller vouches for both ranges.
        unsafe { result::memcpy_htod_async(dst, src, self.raw) }.map_err(driver("copying to the device"))
    }

    /// Queues a copy from device address `src` into `dst`.
    ///
    /// # Safety
    /// As for [`copy_to_address`](Self::copy_to_address), the other way round.
    pub unsafe fn copy_from_address(&self, dst: &mut [u8], src: u64) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: the caller vouches for both ranges.
        unsafe { result::memcpy_dtoh_async(dst, src, self.raw) }.map_err(driver("copying to the host"))
    }

    /// Queues a copy of `len` bytes at device address `src` into `dst` at `offset`.
    ///
    /// # Safety
    /// `src..src+len` must be device memory that stays allocated and unchanged until the copy
    /// completes.
    pub unsafe fn copy_within_device(&self, dst: &DeviceBuffer, offset: usize, src: u64, len: usize) -> GpuResult<()> {
        dst.check(offset, len)?;
        self.ctx.bind()?;
        // SAFETY: the destination is checked, the source vouched for.
        unsafe { result::memcpy_dtod_async(dst.ptr + offset as u64, src, len, self.raw) }
            .map_err(driver("copying within the device"))
    }

    /// Waits until the work queued so far has completed.
    pub fn synchronize(&self) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: a live stream.
        unsafe { sys::cuStreamSynchronize(self.raw) }.result().map_err(driver("waiting for a stream"))
    }

    /// An event that completes once the work queued so far has.
    pub fn record(&self) -> GpuResult<GpuEvent> {
        self.ctx.bind()?;
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map_err(driver("creating an event"))?;
        let event = GpuEvent { ctx: self.ctx.clone(), raw };
        // SAFETY: both handles are live.
        unsafe { result::event::record(raw, self.raw) }.map_err(driver("recording an event"))?;
        Ok(event)
    }

    /// Makes later work on this stream wait for `event` (without the host waiting).
    pub fn wait_for(&self, event: &GpuEvent) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: both handles are live.
        unsafe { sys::cuStreamWaitEvent(self.raw, event.raw, 0) }.result().map_err(driver("ordering streams"))
    }
}

impl Drop for GpuStream {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created by `Gpu::stream`; the driver lets queued work finish first.
            let _ = unsafe { result::stream::destroy(self.raw) };
        }
    }
}

/// A point in a stream's work.
pub struct GpuEvent {
    ctx: Arc<Context>,
    raw: sys::CUevent,
}

// SAFETY: an event handle may be used from any thread with its context current.
unsafe impl Send for GpuEvent {}

impl GpuEvent {
    /// Waits until the work before it has completed.
    pub fn wait(&self) -> GpuResult<()> {
        self.ctx.bind()?;
        // SAFETY: a live event.
        unsafe { result::event::synchronize(self.raw) }.map_err(driver("waiting for an event"))
    }

    /// Milliseconds of device time from `earlier` to this one (both complete).
    pub fn since(&self, earlier: &GpuEvent) -> GpuResult<f32> {
        self.ctx.bind()?;
        // SAFETY: both live and recorded with timing.
        unsafe { result::event::elapsed(earlier.raw, self.raw) }.map_err(driver("timing events"))
    }
}

impl Drop for GpuEvent {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created by `GpuStream::record`; the driver frees it once it completes.
            let _ = unsafe { result::event::destroy(self.raw) };
        }
    }
}
