//! Frames in host memory: copies happen at once, the check runs on the host. The same path as
//! a GPU's, for machines without one and for tests.

use std::sync::{Arc, Mutex};

use super::{Check, FrameMemory, Part, SealedFrame, Source};
use crate::error::{FlesError, Result};
use crate::model::ComponentView;
use wirespeed::sync::Unpoison;

/// Frames in host memory, checked on the CPU.
pub struct HostFrames {
    frames: Vec<Arc<Mutex<Vec<u8>>>>,
    capacity: usize,
}

impl HostFrames {
    /// `frames` frames of `capacity` bytes each.
    pub fn new(frames: usize, capacity: usize) -> Self {
        HostFrames { frames: (0..frames).map(|_| Arc::new(Mutex::new(vec![0; capacity]))).collect(), capacity }
    }

    /// A copy of `len` bytes of frame `frame` at `offset`.
    #[cfg(test)]
    pub(crate) fn read(&self, frame: usize, offset: usize, len: usize) -> Vec<u8> {
        self.frames[frame].lock().unpoison()[offset..offset + len].to_vec()
    }
}

impl FrameMemory for HostFrames {
    type Sealed = HostSealed;

    fn frames(&self) -> usize {
        self.frames.len()
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn path(&self) -> String {
        "host memory".into()
    }

    fn address(&self, frame: usize) -> u64 {
        self.frames[frame].lock().unpoison().as_ptr() as u64
    }

    unsafe fn place(&mut self, frame: usize, offset: usize, src: Source<'_>, _input: usize) -> Result<()> {
        let Source::Host(src) = src else {
            return Err(FlesError::Config("host frames cannot be built from GPU rings".into()));
        };
        self.frames[frame].lock().unpoison()[offset..offset + src.len()].copy_from_slice(src);
        Ok(())
    }

    fn seal(&mut self, frame: usize, parts: &[Part]) -> Result<HostSealed> {
        Ok(HostSealed { frame: self.frames[frame].clone(), parts: parts.to_vec() })
    }
}

pub struct HostSealed {
    frame: Arc<Mutex<Vec<u8>>>,
    parts: Vec<Part>,
}

impl SealedFrame for HostSealed {
    fn copied(&mut self) -> Result<()> {
        Ok(())
    }

    /// The GPU kernel's check, on the host: every microslice of every part.
    fn checked(&mut self) -> Result<Check> {
        let frame = self.frame.lock().unpoison();
        let mut check = Check::default();
        for (p, part) in self.parts.iter().enumerate() {
            let bytes = &frame[part.offset..part.offset + part.len];
            let Ok(view) = ComponentView::new(bytes, part.microslices) else {
                check.bad += 1;
                check.first_bad.get_or_insert((p, 0));
                continue;
            };
            for (m, microslice) in view.microslices().enumerate() {
                check.microslices += 1;
                let good = microslice.is_ok_and(|(d, content)| {
                    d.flags & crate::model::flags::CRC_VALID == 0 || crc32c::crc32c(content) == d.crc
                });
                if !good {
                    check.bad += 1;
                    check.first_bad.get_or_insert((p, m as u64));
                }
            }
        }
        Ok(check)
    }
}
