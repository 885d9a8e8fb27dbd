//! Complete timeslices as frames in frame memory, a GPU's: the compute node copies each
//! component there as it arrives and seals the frame when the timeslice completes. One
//! thread waits for each frame's copies and gives its ring space back; another waits for
//! its check and hands the frame over. A frame goes back for reuse when dropped.

use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wirespeed::sync::Unpoison;

use super::Settings;
use super::compute::{ComputeListener, ComputeSummary, Consumer, DataRing, Place, Timeslice};
use super::link::Event;
use crate::error::{FlesError, Lost, Result};
use crate::frames::{Assembler, Check, FrameMemory, Part, SealedFrame, Source};

/// A timeslice complete in frame memory and checked there.
pub struct BuiltFrame {
    /// The timeslice's index.
    pub index: u64,
    /// Where each input's component lies in the frame, in input order.
    pub parts: Vec<Part>,
    /// The frame's address: a device pointer in GPU memory.
    pub address: u64,
    /// What checking the frame found.
    pub check: Check,
    /// From the timeslice's last component arriving to the frame being complete in frame
    /// memory.
    pub ready_after: Duration,
    frame: usize,
    recycle: Sender<usize>,
}

impl Drop for BuiltFrame {
    fn drop(&mut self) {
        let _ = self.recycle.send(self.frame); // an assembler that is gone needs none
    }
}

/// The frames of one compute node, in the order their timeslices completed.
pub struct Frames {
    delivered: Receiver<BuiltFrame>,
    /// How the bytes travel to frame memory, once the node knows its rings.
    path: Arc<Mutex<String>>,
    node: Option<JoinHandle<Result<ComputeSummary>>>,
    watcher: Option<JoinHandle<()>>,
}

impl Iterator for Frames {
    type Item = BuiltFrame;

    fn next(&mut self) -> Option<BuiltFrame> {
        self.delivered.recv().ok()
    }
}

impl Frames {
    /// How the bytes travel to frame memory (known once every input has joined).
    pub fn path(&self) -> String {
        self.path.lock().unpoison().clone()
    }

    /// Waits for the node to end and its frame memory to be freed (drop every frame first),
    /// and gives its summary, or the error that ended it early.
    pub fn finish(mut self) -> Result<ComputeSummary> {
        let node = self.node.take().expect("finished once");
        let watcher = self.watcher.take().expect("finished once");
        drop(self);
        let summary = node.join().unwrap_or_else(|_| Err(Lost::ThreadPanicked.into()));
        let _ = watcher.join();
        summary
    }
}

/// A frame sealed and on its way, with when its last component arrived.
struct Job<S> {
    ts: u64,
    frame: usize,
    parts: Vec<Part>,
    sealed: S,
    arrived: Instant,
    release: Sender<Event>,
}

impl ComputeListener {
    /// Runs compute node `index` on a thread of its own, building its timeslices in
    /// `memory`'s frames, which come out of the iterator.
    pub fn frames<M: FrameMemory>(
        self,
        s: Settings,
        index: usize,
        barrier: impl FnOnce() -> Result<()> + Send + 'static,
        memory: M,
    ) -> Result<Frames> {
        let path = Arc::new(Mutex::new(memory.path()));
        let fabric = self.url().split("://").next().unwrap_or_default().to_string();
        let (out, delivered) = mpsc::channel();
        let assembler = Assembler::new(memory, s.timeout);
        let (jobs, queued) = mpsc::channel();
        let (end, last) = mpsc::channel();
        let watcher = watch(&assembler, queued, out, last)?;
        let shared_path = path.clone();
        let node = std::thread::Builder::new()
            .name(format!("fles-compute-{index}"))
            .spawn(move || {
                let mut builder =
                    Builder { assembler, jobs, rings: Vec::new(), path: shared_path, fabric, refused: None };
                let summary = self.drive(&s, index, barrier, &mut builder);
                // The frames handed out point into the memory: the last watcher frees it
                // once every frame has come back.
                drop(builder.jobs);
                let _ = end.send((builder.assembler, builder.rings));
                summary
            })
            .map_err(|e| crate::error::io("starting a compute node's thread", e))?;
        Ok(Frames { delivered, path, node: Some(node), watcher: Some(watcher) })
    }
}

struct Builder<M: FrameMemory> {
    assembler: Assembler<M>,
    jobs: Sender<Job<M::Sealed>>,
    /// The rings the memory copies from, kept as long as it may.
    rings: Vec<Arc<DataRing>>,
    path: Arc<Mutex<String>>,
    /// The inputs' fabric, for the report.
    fabric: String,
    /// Why the inputs could not put into GPU rings, when asked to.
    refused: Option<String>,
}

/// Where a component is copied from.
fn source(rings: &[Arc<DataRing>], p: Place) -> Source<'_> {
    match &*rings[p.input] {
        // SAFETY: the node checked that the component lies inside the ring; it stays unchanged
        // until its timeslice is released.
        DataRing::Host(r) => Source::Host(unsafe { std::slice::from_raw_parts(r.as_ptr().add(p.at), p.len) }),
        #[cfg(feature = "gpu")]
        DataRing::Gpu(r) => Source::Device { address: r.address() + p.at as u64, len: p.len },
    }
}

impl<M: FrameMemory> Consumer for Builder<M> {
    #[cfg(feature = "gpu")]
    fn ring(&mut self, conn: &wirespeed::Connection, len: usize) -> Result<Option<DataRing>> {
        let Some(gpu) = self.assembler.memory().ring_gpu() else { return Ok(None) };
        if self.refused.is_some() {
            return Ok(None);
        }
        let mem = gpu.alloc(len).map_err(crate::frames::gpu_error)?;
        match conn.register_device(Arc::new(mem)) {
            Ok(region) => Ok(Some(DataRing::Gpu(region))),
            Err(e) => {
                self.refused = Some(e.to_string());
                Ok(None)
            }
        }
    }

    fn start(&mut self, rings: &[Arc<DataRing>]) -> Result<()> {
        self.rings = rings.to_vec();
        let host: Vec<_> = rings.iter().filter_map(|r| r.host()).map(|r| (r.as_ptr(), r.len())).collect();
        let on_gpu = rings.len() - host.len();
        let memory = self.assembler.memory_mut();
        memory.adopt(&host);
        let staged = memory.path();
        let direct = format!("put by the inputs into rings in GPU memory over {}, copied within the GPU", self.fabric);
        let refused = self.refused.as_ref().map(|why| format!(" (GPU rings refused over {}: {why})", self.fabric));
        let path = match (on_gpu, host.len()) {
            (_, 0) => direct,
            (0, _) => format!("{staged}{}", refused.unwrap_or_default()),
            (n, _) => {
                format!("{n} of {} inputs {direct}; the rest {staged}{}", rings.len(), refused.unwrap_or_default())
            }
        };
        memory.rings_placed(path);
        *self.path.lock().unpoison() = self.assembler.memory().path();
        Ok(())
    }

    fn arrived(&mut self, ts: u64, p: Place) -> Result<()> {
        // SAFETY: the component stays in its ring until its timeslice is released, which
        // the first watcher does only once the frame's copies have completed.
        unsafe { self.assembler.arrived(ts, p.input, source(&self.rings, p), p.microslices) }
    }

    fn complete(&mut self, ts: &Timeslice<'_>, release: &Sender<Event>) -> Result<bool> {
        let arrived = Instant::now();
        let components: Vec<_> = ts.places.iter().map(|&p| (p.input, source(&self.rings, p), p.microslices)).collect();
        // SAFETY: as in `arrived`.
        let sealed = unsafe { self.assembler.complete(ts.index, &components) }?;
        let job = Job {
            ts: ts.index,
            frame: sealed.frame,
            parts: sealed.parts,
            sealed: sealed.sealed,
            arrived,
            release: release.clone(),
        };
        self.jobs.send(job).map_err(|_| FlesError::Internal("the frames' watchers stopped"))?;
        Ok(false)
    }
}

/// What the node hands the last watcher when it ends: the memory and the rings it copied
/// from, to drop once every frame is back.
type Leftovers<M> = (Assembler<M>, Vec<Arc<DataRing>>);

/// Starts the two watchers of sealed frames.
fn watch<M: FrameMemory>(
    assembler: &Assembler<M>,
    queued: Receiver<Job<M::Sealed>>,
    out: Sender<BuiltFrame>,
    last: Receiver<Leftovers<M>>,
) -> Result<JoinHandle<()>> {
    let (copied_tx, copied) = mpsc::channel::<(Job<M::Sealed>, Duration)>();
    let recycle = assembler.recycler();
    let addresses: Vec<u64> = (0..assembler.memory().frames()).map(|f| assembler.memory().address(f)).collect();
    let thread = |name: &str| std::thread::Builder::new().name(name.into());
    let net = |e: std::io::Error| crate::error::io("starting a thread", e);
    // First: the copies are done, so the ring space can go back.
    thread("fles-frames-copied")
        .spawn(move || {
            for mut job in queued {
                if let Err(e) = job.sealed.copied() {
                    let _ = job.release.send(Event::Failed(e));
                    return;
                }
                let ready = job.arrived.elapsed();
                let _ = job.release.send(Event::Released(job.ts));
                if copied_tx.send((job, ready)).is_err() {
                    return;
                }
            }
        })
        .map_err(net)?;
    // Second: the check is done, so the frame can go out.
    let checked = thread("fles-frames-checked")
        .spawn(move || {
            for (job, ready_after) in copied {
                let Job { ts, frame, parts, mut sealed, release, .. } = job;
                let check = match sealed.checked() {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = release.send(Event::Failed(e));
                        return;
                    }
                };
                // Done with before the frame can come back and be sealed again.
                drop(sealed);
                let address = addresses[frame];
                let _ = out.send(BuiltFrame {
                    index: ts,
                    parts,
                    address,
                    check,
                    ready_after,
                    frame,
                    recycle: recycle.clone(),
                });
            }
            drop(out);
            if let Ok((assembler, rings)) = last.recv() {
                assembler.wait_for_all();
                drop(rings);
            }
        })
        .map_err(net)?;
    Ok(checked)
}
