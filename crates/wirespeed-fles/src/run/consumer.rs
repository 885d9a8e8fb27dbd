//! Complete timeslices as an iterator: the compute node runs on a thread of its own and hands
//! over each timeslice as views into its rings, zero-copy; dropping one gives its space back,
//! in any order.

use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::JoinHandle;

use super::Settings;
use super::compute::{ComputeListener, ComputeSummary, Consumer, DataRing, Timeslice};
use super::link::Event;
use crate::error::{Lost, Result};
use crate::model::ComponentView;

/// The complete timeslices of one compute node, in order; ends when the run does.
pub struct Timeslices {
    /// None after the last.
    delivered: Receiver<Option<KeptTimeslice>>,
    node: Option<JoinHandle<Result<ComputeSummary>>>,
}

/// A complete timeslice held by the consumer: its ring space stays taken until it drops.
pub struct KeptTimeslice {
    /// The timeslice's index.
    pub index: u64,
    /// The input of each component: every input, unless one was lost mid-run.
    pub inputs: Vec<usize>,
    /// Whether a lost input's component is missing.
    pub incomplete: bool,
    /// Each input's component: its bytes in the ring and its microslice count.
    parts: Vec<(*const u8, usize, u64)>,
    /// Keep the rings mapped while the views exist.
    _rings: Vec<Arc<DataRing>>,
    release: Sender<Event>,
}

// SAFETY: the pointers are into ring memory that `_rings` keeps mapped, and no input writes
// there until the drop below releases the space.
unsafe impl Send for KeptTimeslice {}

impl KeptTimeslice {
    /// The components, input by input, as views into the rings.
    pub fn components(&self) -> Vec<ComponentView<'_>> {
        self.parts
            .iter()
            .map(|&(ptr, len, count)| {
                // SAFETY: see `Send` above; the node checked the bounds before delivery.
                let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
                ComponentView::new(bytes, count).expect("checked when it was delivered")
            })
            .collect()
    }
}

impl Drop for KeptTimeslice {
    fn drop(&mut self) {
        let _ = self.release.send(Event::Released(self.index)); // a node that ended needs none
    }
}

impl ComputeListener {
    /// Runs compute node `index` on a thread of its own, its complete timeslices coming out
    /// of the iterator; [`Timeslices::finish`] gives its summary.
    pub fn timeslices(
        self,
        s: Settings,
        index: usize,
        barrier: impl FnOnce() -> Result<()> + Send + 'static,
    ) -> Result<Timeslices> {
        let (out, delivered) = mpsc::channel();
        let node = std::thread::Builder::new()
            .name(format!("fles-compute-{index}"))
            .spawn(move || {
                let mut keeper = Keeper { out };
                // The iterator ends with the last timeslice, though some may still be kept.
                self.drive(&s, index, barrier, &mut keeper)
            })
            .map_err(|e| crate::error::io("starting a compute node's thread", e))?;
        Ok(Timeslices { delivered, node: Some(node) })
    }
}

/// Hands each timeslice to the iterator, kept until the consumer drops it.
struct Keeper {
    out: Sender<Option<KeptTimeslice>>,
}

impl Consumer for Keeper {
    fn complete(&mut self, ts: &Timeslice<'_>, release: &Sender<Event>) -> Result<bool> {
        let parts = ts.components.iter().map(|c| (c.bytes().as_ptr(), c.bytes().len(), c.len() as u64));
        let kept = KeptTimeslice {
            index: ts.index,
            inputs: ts.inputs.clone(),
            incomplete: ts.incomplete(),
            parts: parts.collect(),
            _rings: ts.inputs.iter().map(|&i| ts.rings[i].clone()).collect(),
            release: release.clone(),
        };
        // Kept until dropped; if the consumer stopped listening, the failed send hands it
        // back and it drops (releases) here.
        let _ = self.out.send(Some(kept));
        Ok(false)
    }

    fn delivered_all(&mut self) {
        let _ = self.out.send(None);
    }
}

impl Iterator for Timeslices {
    type Item = KeptTimeslice;

    fn next(&mut self) -> Option<KeptTimeslice> {
        self.delivered.recv().ok().flatten()
    }
}

impl Timeslices {
    /// Waits for the node to end (drop every kept timeslice first) and gives its summary, or
    /// the error that ended it early.
    pub fn finish(mut self) -> Result<ComputeSummary> {
        let node = self.node.take().expect("finished once");
        drop(self);
        node.join().unwrap_or_else(|_| Err(Lost::ThreadPanicked.into()))
    }
}
