//! Placing components in frames: a timeslice takes a free frame when its first component
//! arrives, each component goes at the next aligned offset, and the frame is sealed when the
//! timeslice completes. A component that arrives while every frame but one is taken, or that
//! does not fit, waits in its ring and is placed at completion. The last free frame is kept
//! for completion: were every frame held by timeslices still incomplete, the node would wait
//! for a frame that only its own progress could free.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use super::{FrameMemory, PART_ALIGN, Part, Source};
use crate::error::{FlesError, Lost, Result};

/// A frame being filled.
struct Building {
    frame: usize,
    /// The next free offset.
    end: usize,
    placed: Vec<Part>,
}

/// Places each timeslice's components in a frame of `M`, copies them there, and seals the frame once every component is in.
pub struct Assembler<M: FrameMemory> {
    memory: M,
    free: Vec<usize>,
    recycled: Receiver<usize>,
    recycle: Sender<usize>,
    building: HashMap<u64, Building>,
    /// How long completion waits for a frame to come back.
    patience: Duration,
}

/// A timeslice sealed in its frame.
pub struct Sealed<S> {
    pub frame: usize,
    pub parts: Vec<Part>,
    pub sealed: S,
}

impl<M: FrameMemory> Assembler<M> {
    /// An assembler over `memory`, waiting up to `patience` for a frame to come back.
    pub fn new(memory: M, patience: Duration) -> Self {
        let (recycle, recycled) = mpsc::channel();
        let free = (0..memory.frames()).rev().collect();
        Assembler { memory, free, recycled, recycle, building: HashMap::new(), patience }
    }

    /// The frame memory.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// The frame memory, to change.
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.memory
    }

    /// Where to send a frame's number once its consumer is done with it.
    pub fn recycler(&self) -> Sender<usize> {
        self.recycle.clone()
    }

    /// Component `bytes` of timeslice `ts` from `input` has arrived: copy it now if the
    /// timeslice has a frame, or can have one without taking the last, and it fits; else
    /// leave it for completion.
    ///
    /// # Safety
    /// `bytes` must stay unchanged until the frame's copy completes (the ring space is given
    /// back only after that).
    pub unsafe fn arrived(&mut self, ts: u64, input: usize, bytes: Source<'_>, microslices: u64) -> Result<()> {
        self.take_recycled();
        if !self.building.contains_key(&ts) {
            if self.free.len() < 2 {
                return Ok(());
            }
            let frame = self.free.pop().expect("two are free");
            self.building.insert(ts, Building { frame, end: 0, placed: Vec::new() });
        }
        let b = self.building.get_mut(&ts).expect("just made");
        // SAFETY: passed on from the caller.
        unsafe { place(&mut self.memory, b, input, bytes, microslices) }.map(|_| ())
    }

    /// Timeslice `ts` is complete with these components (input, bytes, microslices): place
    /// those not yet placed, waiting for a frame if need be, and seal the frame.
    ///
    /// # Safety
    /// As for [`arrived`](Self::arrived).
    pub unsafe fn complete(&mut self, ts: u64, components: &[(usize, Source<'_>, u64)]) -> Result<Sealed<M::Sealed>> {
        let mut b = match self.building.remove(&ts) {
            Some(b) => b,
            None => Building { frame: self.wait_for_frame()?, end: 0, placed: Vec::new() },
        };
        let mut parts = Vec::with_capacity(components.len());
        for &(input, bytes, microslices) in components {
            let early = b.placed.iter().find(|p| p.input == input && p.len == bytes.len()).copied();
            let part = match early {
                Some(p) => p,
                // SAFETY: passed on from the caller.
                None => unsafe { place(&mut self.memory, &mut b, input, bytes, microslices) }?.ok_or_else(|| {
                    let total: usize = components.iter().map(|c| c.1.len().next_multiple_of(PART_ALIGN)).sum();
                    FlesError::Config(format!(
                        "timeslice {ts} needs {total} bytes, more than a frame's {}: give frames more room",
                        self.memory.capacity()
                    ))
                })?,
            };
            parts.push(part);
        }
        let sealed = self.memory.seal(b.frame, &parts)?;
        Ok(Sealed { frame: b.frame, parts, sealed })
    }

    /// Waits until every frame handed out has come back (frames never sealed count as back).
    pub fn wait_for_all(mut self) {
        self.free.extend(self.building.drain().map(|(_, b)| b.frame));
        while self.free.len() < self.memory.frames() {
            match self.recycled.recv() {
                Ok(f) => self.free.push(f),
                Err(_) => unreachable!("the assembler holds a sender"),
            }
        }
    }

    fn take_recycled(&mut self) {
        self.free.extend(self.recycled.try_iter());
    }

    fn wait_for_frame(&mut self) -> Result<usize> {
        self.take_recycled();
        if let Some(f) = self.free.pop() {
            return Ok(f);
        }
        match self.recycled.recv_timeout(self.patience) {
            Ok(f) => Ok(f),
            Err(RecvTimeoutError::Timeout) => {
                Err(Lost::NoFrameBack { patience: self.patience, frames: self.memory.frames() }.into())
            }
            Err(RecvTimeoutError::Disconnected) => unreachable!("the assembler holds a sender"),
        }
    }
}

/// Copies one component to the end of `b`'s frame; None if it does not fit.
///
/// # Safety
/// As for [`Assembler::arrived`].
unsafe fn place<M: FrameMemory>(
    memory: &mut M,
    b: &mut Building,
    input: usize,
    bytes: Source<'_>,
    microslices: u64,
) -> Result<Option<Part>> {
    let offset = b.end;
    if offset + bytes.len() > memory.capacity() {
        return Ok(None);
    }
    // SAFETY: passed on from the caller.
    unsafe { memory.place(b.frame, offset, bytes, input) }?;
    let part = Part { input, offset, len: bytes.len(), microslices };
    b.placed.push(part);
    b.end = (offset + bytes.len()).next_multiple_of(PART_ALIGN);
    Ok(Some(part))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::{HostFrames, SealedFrame};
    use crate::model::Slicing;
    use crate::source::Pattern;

    fn component(input: usize, ts: u64) -> Vec<u8> {
        Pattern::new(input as u16, 100, 40).component(ts, Slicing::count(9, 1))
    }

    #[test]
    fn components_land_where_their_parts_say_in_input_order_and_check() {
        let mut a = Assembler::new(HostFrames::new(2, 1 << 16), Duration::from_millis(10));
        let c: Vec<Vec<u8>> = (0..3).map(|i| component(i, 5)).collect();
        // SAFETY: the components are locals that outlive the assembler's copies.
        unsafe {
            a.arrived(5, 2, c[2][..].into(), 10).unwrap(); // arrivals in any order
            a.arrived(5, 0, c[0][..].into(), 10).unwrap();
            let done: Vec<_> = (0..3).map(|i| (i, c[i][..].into(), 10)).collect();
            let mut s = a.complete(5, &done).unwrap();
            assert_eq!(s.parts.iter().map(|p| p.input).collect::<Vec<_>>(), [0, 1, 2]);
            assert_eq!(s.parts[0].offset % PART_ALIGN, 0);
            for p in &s.parts {
                assert_eq!(a.memory().read(s.frame, p.offset, p.len), c[p.input]);
            }
            s.sealed.copied().unwrap();
            let check = s.sealed.checked().unwrap();
            assert_eq!((check.microslices, check.bad), (30, 0));
        }
    }

    #[test]
    fn a_flipped_byte_is_found_in_its_part() {
        let mut a = Assembler::new(HostFrames::new(1, 1 << 16), Duration::from_millis(10));
        let c0 = component(0, 1);
        let mut c1 = component(1, 1);
        let last = c1.len() - 1;
        c1[last] ^= 0x40;
        // SAFETY: the components are locals that outlive the assembler's copies.
        let mut s = unsafe { a.complete(1, &[(0, c0[..].into(), 10), (1, c1[..].into(), 10)]) }.unwrap();
        let check = s.sealed.checked().unwrap();
        assert_eq!((check.bad, check.first_bad), (1, Some((1, 9))));
    }

    #[test]
    fn frames_are_recycled_and_completion_waits_for_one() {
        let mut a = Assembler::new(HostFrames::new(2, 1 << 16), Duration::from_millis(50));
        let c = component(0, 0);
        let recycle = a.recycler();
        // SAFETY: the components are locals that outlive the assembler's copies.
        let first = unsafe { a.complete(0, &[(0, c[..].into(), 10)]) }.unwrap().frame;
        // SAFETY: the components are locals that outlive the assembler's copies.
        let second = unsafe { a.complete(1, &[(0, c[..].into(), 10)]) }.unwrap().frame;
        assert_ne!(first, second);
        // Every frame is out: an arrival waits in its ring, completion gives up in time.
        // SAFETY: the components are locals that outlive the assembler's copies.
        unsafe { a.arrived(2, 0, c[..].into(), 10) }.unwrap();
        assert!(a.building.is_empty());
        // SAFETY: the components are locals that outlive the assembler's copies.
        let e = unsafe { a.complete(2, &[(0, c[..].into(), 10)]) }.err().unwrap();
        assert!(e.to_string().contains("no frame came back"), "{e}");
        recycle.send(first).unwrap();
        // SAFETY: the components are locals that outlive the assembler's copies.
        assert_eq!(unsafe { a.complete(2, &[(0, c[..].into(), 10)]) }.unwrap().frame, first);
    }

    #[test]
    fn arrivals_leave_the_last_frame_for_completion() {
        let mut a = Assembler::new(HostFrames::new(3, 1 << 16), Duration::from_millis(10));
        let c = component(0, 0);
        for ts in 0..5 {
            // SAFETY: the components are locals that outlive the assembler's copies.
            unsafe { a.arrived(ts, 0, c[..].into(), 10) }.unwrap();
        }
        assert_eq!(a.building.len(), 2);
        // A timeslice begun later completes first: the kept frame takes it.
        // SAFETY: the components are locals that outlive the assembler's copies.
        let s = unsafe { a.complete(4, &[(0, c[..].into(), 10)]) }.unwrap();
        assert_eq!(s.frame, 2);
    }

    #[test]
    fn a_timeslice_larger_than_a_frame_is_a_clear_error() {
        let mut a = Assembler::new(HostFrames::new(2, 1000), Duration::from_millis(10));
        let c = component(0, 0);
        assert!(c.len() > 1000);
        // SAFETY: the components are locals that outlive the assembler's copies.
        unsafe { a.arrived(0, 0, c[..].into(), 10) }.unwrap(); // left in its ring
        // SAFETY: the components are locals that outlive the assembler's copies.
        let e = unsafe { a.complete(0, &[(0, c[..].into(), 10)]) }.err().unwrap();
        assert!(e.to_string().contains("more than a frame's 1000"), "{e}");
    }
}
