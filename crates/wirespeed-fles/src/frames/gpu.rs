//! Frames in GPU memory: components are copied host to device on one of several streams
//! (lanes, by input) as they arrive, from the receive rings page-locked in place where the
//! driver allows it, or within the GPU from rings in device memory that the inputs put into
//! directly (`with_gpu_rings`); a sealed frame's check (every microslice's CRC-32C) runs on the GPU
//! after its copies, on a stream of its own, and only four counters come back.

use std::sync::Arc;

use wirespeed::gpu::{DeviceBuffer, Gpu, GpuError, GpuEvent, GpuStream, Kernel, KernelArg, PinnedBuffer, Registration};

use super::{Check, FrameMemory, Part, SealedFrame, Source};
use crate::error::{FlesError, Result};

/// Copy streams: enough that copies from several inputs overlap.
const LANES: usize = 4;
/// Threads per block of the check.
const CHECK_THREADS: u32 = 128;
/// Bytes of a part in the table the kernel reads, and of the counters before it.
const PART_BYTES: usize = 32;
const OUTCOME_BYTES: usize = 16;

/// A GPU failure as timeslice building reports it.
pub fn gpu_error(e: GpuError) -> FlesError {
    FlesError::Gpu(e)
}

/// Frames in GPU memory: components copied there on streams, each frame checked by a kernel.
pub struct GpuFrames {
    gpu: Gpu,
    frames: Vec<DeviceBuffer>,
    capacity: usize,
    lanes: Vec<GpuStream>,
    /// Which lanes each frame's copies went on.
    used: Vec<u32>,
    check: GpuStream,
    kernel: Kernel,
    /// Per frame: the counters and part table, on the host and on the device.
    tables: Vec<(Arc<PinnedBuffer>, DeviceBuffer)>,
    max_parts: usize,
    rings: Vec<Registration>,
    /// Whether the inputs should put into rings in GPU memory.
    gpu_rings: bool,
    path: String,
}

impl GpuFrames {
    /// `frames` frames of `capacity` bytes on `gpu`, for timeslices of at most `max_parts`
    /// components.
    pub fn new(gpu: &Gpu, frames: usize, capacity: usize, max_parts: usize) -> Result<Self> {
        let gpu = gpu.clone();
        let kernel = gpu.compile(include_str!("check_frame.cu"), "check_frame").map_err(gpu_error)?;
        let table_len = OUTCOME_BYTES + max_parts * PART_BYTES;
        let mut tables = Vec::with_capacity(frames);
        let mut buffers = Vec::with_capacity(frames);
        for _ in 0..frames {
            buffers.push(gpu.alloc(capacity).map_err(gpu_error)?);
            let host = gpu.alloc_pinned(table_len).map_err(gpu_error)?;
            tables.push((Arc::new(host), gpu.alloc(table_len).map_err(gpu_error)?));
        }
        let lanes = (0..LANES).map(|_| gpu.stream()).collect::<std::result::Result<Vec<_>, _>>().map_err(gpu_error)?;
        let check = gpu.stream().map_err(gpu_error)?;
        let path = "pageable (not yet told of the rings)".into();
        Ok(GpuFrames {
            gpu,
            frames: buffers,
            capacity,
            lanes,
            used: vec![0; frames],
            check,
            kernel,
            tables,
            max_parts,
            rings: Vec::new(),
            gpu_rings: false,
            path,
        })
    }

    /// Asks for the receive rings in GPU memory, for the inputs to put into directly (where
    /// their fabric can), so that frames are copied within the GPU.
    pub fn with_gpu_rings(mut self) -> Self {
        self.gpu_rings = true;
        self
    }
}

impl FrameMemory for GpuFrames {
    type Sealed = GpuSealed;

    fn frames(&self) -> usize {
        self.frames.len()
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn adopt(&mut self, rings: &[(*mut u8, usize)]) {
        for &(ptr, len) in rings {
            // SAFETY: the rings outlive the frames: the node drops them after its consumer.
            match unsafe { self.gpu.register(ptr, len) } {
                Ok(r) => self.rings.push(r),
                Err(e) => {
                    self.rings.clear();
                    self.path = format!("pageable rings, staged by the driver ({e})");
                    return;
                }
            }
        }
        self.path = "rings page-locked in place, copied by DMA".into();
    }

    fn ring_gpu(&self) -> Option<Gpu> {
        self.gpu_rings.then(|| self.gpu.clone())
    }

    fn rings_placed(&mut self, path: String) {
        self.path = path;
    }

    fn path(&self) -> String {
        self.path.clone()
    }

    fn address(&self, frame: usize) -> u64 {
        self.frames[frame].device_ptr()
    }

    unsafe fn place(&mut self, frame: usize, offset: usize, src: Source<'_>, input: usize) -> Result<()> {
        let lane = input % LANES;
        self.used[frame] |= 1 << lane;
        let (lane, dst) = (&self.lanes[lane], &self.frames[frame]);
        // SAFETY: the caller keeps `src` until `copied` returns, which waits for this lane.
        unsafe {
            match src {
                Source::Host(bytes) => lane.copy_to_device(dst, offset, bytes),
                Source::Device { address, len } => lane.copy_within_device(dst, offset, address, len),
            }
        }
        .map_err(gpu_error)
    }

    fn seal(&mut self, frame: usize, parts: &[Part]) -> Result<GpuSealed> {
        if parts.len() > self.max_parts {
            return Err(FlesError::Config(format!(
                "{} components, more than the {} a frame's table holds",
                parts.len(),
                self.max_parts
            )));
        }
        // The check waits for the frame's lanes; `copied` marks the frame complete.
        for (l, lane) in self.lanes.iter().enumerate() {
            if self.used[frame] & (1 << l) != 0 {
                self.check.wait_for(&lane.record().map_err(gpu_error)?).map_err(gpu_error)?;
            }
        }
        self.used[frame] = 0;
        let copied = self.check.record().map_err(gpu_error)?;
        let (host, device) = &mut self.tables[frame];
        // The frame's previous check is done (the frame came back), so its table is free.
        let table = Arc::get_mut(host).ok_or_else(|| FlesError::Internal("a frame's table is still in use"))?;
        let t = table.as_mut_slice();
        t[..OUTCOME_BYTES].fill(0);
        for (i, p) in parts.iter().enumerate() {
            let at = OUTCOME_BYTES + i * PART_BYTES;
            for (k, v) in [p.offset as u64, p.len as u64, p.microslices, p.input as u64].into_iter().enumerate() {
                t[at + k * 8..at + k * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
        let used = OUTCOME_BYTES + parts.len() * PART_BYTES;
        // Enough blocks per component for a thread per microslice, so large frames fill the GPU.
        let most = parts.iter().map(|p| p.microslices).max().unwrap_or(0);
        let per_part = most.div_ceil(CHECK_THREADS as u64).clamp(1, 1024) as u32;
        let args = [
            KernelArg::U64(self.frames[frame].device_ptr()),
            KernelArg::U64(device.device_ptr()),
            KernelArg::U32(parts.len() as u32),
            KernelArg::U32(per_part),
        ];
        // SAFETY: the table is pinned and stays until this frame's next seal, which comes
        // after `checked` waited for everything queued here; the frame and table outlive it.
        unsafe {
            self.check.copy_to_device(device, 0, &t[..used]).map_err(gpu_error)?;
            self.kernel.launch(&self.check, parts.len() as u32 * per_part, CHECK_THREADS, &args).map_err(gpu_error)?;
            self.check.copy_to_host(device, 0, &mut t[..OUTCOME_BYTES]).map_err(gpu_error)?;
        }
        let outcome = self.check.record().map_err(gpu_error)?;
        Ok(GpuSealed { copied, outcome, host: host.clone() })
    }
}

pub struct GpuSealed {
    copied: GpuEvent,
    outcome: GpuEvent,
    /// The frame's table, its counters copied back once `outcome` completes.
    host: Arc<PinnedBuffer>,
}

impl SealedFrame for GpuSealed {
    fn copied(&mut self) -> Result<()> {
        self.copied.wait().map_err(gpu_error)
    }

    fn checked(&mut self) -> Result<Check> {
        self.outcome.wait().map_err(gpu_error)?;
        let counters = &self.host.as_slice()[..OUTCOME_BYTES];
        let word = |i: usize| u32::from_le_bytes(counters[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        let bad = word(0) as u64;
        Ok(Check { microslices: word(3) as u64, bad, first_bad: (bad > 0).then(|| (word(1) as usize, word(2) as u64)) })
    }
}
