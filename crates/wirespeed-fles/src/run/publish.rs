//! `--output shm:NAME`: a compute node serves its timeslices to FLESnet's consumers. The
//! inputs put their components straight into rings in the node's Boost segment (lent to the
//! fabric in place), and each complete timeslice goes out as a work item pointing there; its
//! space goes back once no consumer holds it.

use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::Duration;

use wirespeed::{Connection, LentMemory};

use super::Settings;
use super::compute::{ComputeListener, ComputeSummary, Consumer, DataRing, Timeslice};
use super::link::Event;
use crate::consumers::publisher::Publisher;
use crate::consumers::segment::Segment;
use crate::consumers::work_item::{ComponentEntry, WorkItem};
use crate::error::Result;
use crate::model::{Slicing, TimesliceDescriptor, timeslice_flags};

/// Where and how a compute node publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShmOutput {
    /// The interface's name: consumers attach at `ipc://@NAME` (`tsclient -i shm:NAME`).
    pub name: String,
    /// A consumer holding a timeslice longer than this loses it.
    pub hold: Duration,
    /// Consumers to wait for before the run starts (FLESnet waits for none: a timeslice
    /// nobody wants is done at once).
    pub consumers: usize,
}

struct Publishing<F> {
    segment: Arc<Segment>,
    file: Arc<std::os::fd::OwnedFd>,
    publisher: Publisher,
    next_id: u64,
    slicing: Slicing,
    seen: F,
}

impl ComputeListener {
    /// Runs compute node `index`, publishing each complete timeslice as `shm.name` (see the
    /// module); `seen` hears of each as it goes out.
    pub fn publish(
        self,
        s: &Settings,
        index: usize,
        barrier: impl FnOnce() -> Result<()>,
        shm: &ShmOutput,
        seen: impl FnMut(&Timeslice<'_>),
    ) -> Result<ComputeSummary> {
        let segment = Segment::create(&shm.name, &vec![s.rings.data as usize; s.inputs])?;
        let file = Arc::new(segment.file()?);
        let publisher = Publisher::start(&shm.name, shm.hold)?;
        publisher.wait_for_consumers(shm.consumers, s.timeout)?;
        let mut p = Publishing { segment, file, publisher, next_id: 0, slicing: s.slicing, seen };
        let summary = self.drive(s, index, barrier, &mut p);
        // Consumers are done once the publisher is (it waits for them): nobody opens the
        // segment again, though blocks lent to closing connections may keep it mapped here
        // past the process's exit.
        let Publishing { segment, publisher, .. } = p;
        drop(publisher);
        segment.remove_name();
        summary
    }
}

impl<F: FnMut(&Timeslice<'_>)> Consumer for Publishing<F> {
    fn ring(&mut self, conn: &Connection, len: usize) -> Result<Option<DataRing>> {
        let block = self.segment.allocate(len)?;
        let lent = LentMemory {
            ptr: block.ptr,
            len,
            file: self.file.clone(),
            offset: block.offset as u64,
            keep: Box::new(block),
        };
        // SAFETY: the block is mapped for as long as it lives, which `keep` sees to; the
        // node reads a component only after the input's message says it is there.
        let region = unsafe { conn.lend(lent) }.map_err(|e| crate::error::connection("lending a ring", e))?;
        Ok(Some(DataRing::Host(region)))
    }

    fn complete(&mut self, ts: &Timeslice<'_>, release: &Sender<Event>) -> Result<bool> {
        (self.seen)(ts);
        let id = self.next_id;
        self.next_id += 1;
        let base = self.segment.base() as usize;
        let mut data = Vec::with_capacity(ts.places.len());
        let mut components = Vec::with_capacity(ts.places.len());
        // Rings in the segment are host memory, so every place has its view.
        for (p, view) in ts.places.iter().zip(&ts.components) {
            let ring = ts.rings[p.input].host().expect("rings in the segment are host memory");
            data.push((ring.as_ptr() as usize - base + p.at) as i64);
            let (offset, size, num_microslices, flags) = (p.at as u64, p.len as u64, p.microslices, view.flags());
            components.push(ComponentEntry { ts_num: ts.index, offset, size, num_microslices, flags });
        }
        let (start_time, duration) = self.slicing.start_and_duration(ts.index);
        let item = WorkItem {
            shm_uuid: self.segment.uuid,
            shm_name: self.segment.name().into(),
            descriptor: TimesliceDescriptor {
                index: ts.index,
                start_time,
                duration,
                flags: timeslice_flags(&ts.components, ts.incomplete()),
                ts_pos: id,
                num_core_microslices: self.slicing.core as u32,
                num_components: ts.places.len() as u32,
            },
            data,
            components,
        };
        let (release, index) = (release.clone(), ts.index);
        let done = Box::new(move || {
            let _ = release.send(Event::Released(index)); // a node that ended needs none
        });
        self.publisher.publish(id, item.encode(), done);
        Ok(false)
    }

    fn delivered_all(&mut self) {
        self.publisher.end();
    }
}
