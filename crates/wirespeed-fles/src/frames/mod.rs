//! Timeslices built contiguously in frame memory, a GPU's or the host's, as their components
//! arrive: each component is copied in as soon as its input's pointer says it is there, not
//! once the timeslice is complete, and the frame is checked (every microslice's CRC) where it
//! lies. [`Assembler`] places components and recycles frames; a [`FrameMemory`] copies and
//! checks. [`HostFrames`] is host memory behind the same interface, so the placement logic is
//! tested on machines without a GPU.

mod assembler;
#[cfg(feature = "gpu")]
mod gpu;
mod host;

pub use assembler::Assembler;
#[cfg(feature = "gpu")]
pub use gpu::{GpuFrames, gpu_error};
pub use host::HostFrames;

use crate::error::Result;

/// Where each component starts in a frame, so that the frames are aligned for wide loads.
pub const PART_ALIGN: usize = 256;

/// Where a component is copied from: a host ring, or a GPU ring the input put it into.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// A range of host memory.
    Host(&'a [u8]),
    /// A range of GPU memory.
    Device {
        /// The component's device address.
        address: u64,
        /// Its length in bytes.
        len: usize,
    },
}

impl Source<'_> {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Source::Host(b) => b.len(),
            Source::Device { len, .. } => *len,
        }
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<'a> From<&'a [u8]> for Source<'a> {
    fn from(bytes: &'a [u8]) -> Self {
        Source::Host(bytes)
    }
}

/// One component's place in its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// The input it came from.
    pub input: usize,
    /// Where it starts in the frame.
    pub offset: usize,
    /// Its length in bytes.
    pub len: usize,
    /// How many microslices it holds.
    pub microslices: u64,
}

/// What checking a frame found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Check {
    /// Microslices looked at.
    pub microslices: u64,
    /// Microslices whose content does not match its CRC or does not fit its component.
    pub bad: u64,
    /// The first bad one found: its part (index into the frame's parts) and microslice.
    pub first_bad: Option<(usize, u64)>,
}

/// Frame memory: a fixed number of frames of a fixed capacity, copies into them on lanes
/// (one per group of inputs, so that copies overlap), and a check of each sealed frame.
pub trait FrameMemory: Send + 'static {
    /// A frame once sealed: what the check reads.
    type Sealed: SealedFrame;

    /// How many frames, each of `capacity()` bytes.
    fn frames(&self) -> usize;
    /// Each frame's size in bytes.
    fn capacity(&self) -> usize;

    /// Prepares to copy from these host ranges (the receive rings): a GPU page-locks them.
    fn adopt(&mut self, _rings: &[(*mut u8, usize)]) {}

    /// The GPU whose memory the inputs should put into directly (the receive rings live
    /// there), when these frames are built that way.
    #[cfg(feature = "gpu")]
    fn ring_gpu(&self) -> Option<wirespeed::gpu::Gpu> {
        None
    }

    /// Where the rings ended up (GPU or host memory, and why), which the report then gives
    /// as the path; memory that copies only from host rings keeps its own.
    fn rings_placed(&mut self, _path: String) {}

    /// How the bytes travel, for the report ("host memory", "registered ring", ...).
    fn path(&self) -> String;

    /// The address of frame `frame`: a device pointer on a GPU.
    fn address(&self, frame: usize) -> u64;

    /// Queues a copy of `src` into `frame` at `offset`, on `input`'s lane.
    ///
    /// # Safety
    /// `src` must stay unchanged and mapped (or allocated, on a device) until the frame's
    /// [`SealedFrame::copied`] returns.
    unsafe fn place(&mut self, frame: usize, offset: usize, src: Source<'_>, input: usize) -> Result<()>;

    /// Every copy into `frame` is queued: check its `parts` once they have landed.
    fn seal(&mut self, frame: usize, parts: &[Part]) -> Result<Self::Sealed>;
}

/// A sealed frame on its way: waited for on another thread than the one that placed it.
pub trait SealedFrame: Send + 'static {
    /// Waits until every byte is in the frame (the sources may then be reused).
    fn copied(&mut self) -> Result<()>;
    /// Waits for the check.
    fn checked(&mut self) -> Result<Check>;
}
