//! FLESnet's data model, byte for byte: microslice descriptors, components (one input's
//! contribution to a timeslice) and which microslices make timeslice t.

pub mod component;
pub mod microslice;
pub mod ramp;

pub use component::{ComponentDescriptor, ComponentView, component_len, write_component};
pub use microslice::{MicrosliceDescriptor, flags};

/// How timeslices are cut from each input's microslices: timeslice t holds microslices
/// [t·core, t·core + core + overlap), the overlap copied into both neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slicing {
    pub core: u64,
    pub overlap: u64,
}

impl Slicing {
    /// The microslice indices timeslice `ts` holds.
    pub fn microslices(&self, ts: u64) -> std::ops::Range<u64> {
        ts * self.core..ts * self.core + self.core + self.overlap
    }

    /// Microslices per component.
    pub fn per_component(&self) -> u64 {
        self.core + self.overlap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_share_the_overlap() {
        let s = Slicing { core: 100, overlap: 1 };
        assert_eq!(s.microslices(0), 0..101);
        assert_eq!(s.microslices(3), 300..401);
        assert_eq!(s.microslices(2).end - 1, s.microslices(3).start);
    }
}
