//! A compute node that builds its timeslices in frame memory (`--gpu`): a GPU's, or the
//! host's by the same path. Every microslice is checked where the frame lies; a frame that
//! fails ends the node with one clear line. Its summary adds the frames' figures: how the
//! bytes travelled, how soon each frame was ready after its last component, and the GPU's
//! free memory before and after.

use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use wirespeed::gpu::Gpu;
use wirespeed_fles::FlesError;
use wirespeed_fles::frames::{FrameMemory, GpuFrames, HostFrames, gpu_error};
use wirespeed_fles::run::{ComputeListener, ComputeSummary, Settings};

use super::Progress;
use super::args::{FrameSettings, FrameTarget};

/// Frame memory made before the node listens, so that a GPU that is missing or too small
/// fails the node before any input connects to it.
pub enum Prepared {
    Host(HostFrames),
    Gpu { gpu: Gpu, memory: Box<GpuFrames>, total: usize, free_before: usize },
}

pub fn prepare(f: &FrameSettings, inputs: usize) -> Result<Prepared> {
    Ok(match f.target {
        FrameTarget::Host => Prepared::Host(HostFrames::new(f.frames, f.capacity)),
        FrameTarget::Gpu(n) => {
            let gpu = Gpu::open(n).map_err(gpu_error)?;
            let (free_before, total) = gpu.memory().map_err(gpu_error)?;
            let mut memory = GpuFrames::new(&gpu, f.frames, f.capacity, inputs)
                .with_context(|| format!("{} frames of {} bytes on GPU {n}", f.frames, f.capacity))?;
            if f.gpu_rings {
                memory = memory.with_gpu_rings();
            }
            Prepared::Gpu { gpu, memory: Box::new(memory), total, free_before }
        }
    })
}

/// What a compute node that built its timeslices in frames did.
pub struct Built {
    pub summary: ComputeSummary,
    pub microslices_checked: u64,
    /// For the report's "frames": how the bytes travelled, how soon frames were ready, the
    /// device and its memory.
    pub figures: Value,
}

/// Runs a compute node whose timeslices are built in frames, telling `progress` as it goes.
pub fn compute(
    s: &Settings,
    index: usize,
    listener: ComputeListener,
    prepared: Prepared,
    barrier: impl FnOnce() -> Result<(), FlesError>,
    progress: Progress<impl FnMut(u64, u64)>,
) -> Result<Built> {
    match prepared {
        Prepared::Host(memory) => {
            let mut built = build(s, index, listener, memory, barrier, progress)?;
            built.figures["device"] = json!("host");
            Ok(built)
        }
        Prepared::Gpu { gpu, memory, total, free_before } => {
            let mut built = build(s, index, listener, *memory, barrier, progress)?;
            // Every frame is back and the memory freed: the driver should say so.
            let free_after = gpu.memory().map_err(gpu_error)?.0;
            built.figures["device"] = json!(gpu.name());
            built.figures["gpu_memory"] = json!({"total": total, "free_before": free_before, "free_after": free_after});
            Ok(built)
        }
    }
}

fn build<M: FrameMemory>(
    s: &Settings,
    index: usize,
    listener: ComputeListener,
    memory: M,
    barrier: impl FnOnce() -> Result<(), FlesError>,
    mut progress: Progress<impl FnMut(u64, u64)>,
) -> Result<Built> {
    let capacity = memory.capacity();
    let count = memory.frames();
    // The node runs on its own thread; the barrier (MPI's, or standard input) stays on this
    // one: the node says when it is ready and waits for the word.
    let (ready, is_ready) = mpsc::channel();
    let (go, word) = mpsc::channel();
    let relay = move || {
        let _ = ready.send(());
        word.recv().unwrap_or(Err(FlesError::CalledOff))
    };
    let mut frames = listener.frames(s.clone(), index, relay, memory)?;
    if is_ready.recv().is_ok() {
        let _ = go.send(barrier());
    }
    let mut checked = 0u64;
    let mut ready_us = Vec::new();
    let mut failure = None;
    for frame in frames.by_ref() {
        progress.add(frame.parts.iter().map(|p| p.len as u64).sum::<u64>());
        checked += frame.check.microslices;
        ready_us.push(frame.ready_after.as_secs_f64() * 1e6);
        if frame.check.bad > 0 && failure.is_none() {
            let (part, m) = frame.check.first_bad.unwrap_or_default();
            let input = frame.parts.get(part).map_or(0, |p| p.input);
            failure = Some(format!(
                "timeslice {}: {} microslices fail their CRC-32C in frame memory, the first microslice {m} of input {input}",
                frame.index, frame.check.bad
            ));
            s.stop.store(true, Ordering::Relaxed);
        }
    }
    let path = frames.path();
    let summary = frames.finish().with_context(|| format!("compute node {index}"))?;
    if let Some(f) = failure {
        bail!(f);
    }
    ready_us.sort_by(f64::total_cmp);
    let at =
        |q: f64| ready_us.get(((q * ready_us.len() as f64).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0);
    let seconds = summary.seconds.max(Duration::from_nanos(1).as_secs_f64());
    let (built, bytes) = (progress.timeslices, progress.bytes);
    let figures = json!({
        "path": path, "frames": count, "frame_bytes": capacity, "built": built, "bytes": bytes,
        "microslices_checked": checked, "frames_per_s": built as f64 / seconds,
        "ready_us": {"p50": at(0.5), "p99": at(0.99), "max": ready_us.last().copied().unwrap_or(0.0)},
    });
    Ok(Built { summary, microslices_checked: checked, figures })
}
