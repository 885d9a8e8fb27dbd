//! A pattern generator like FLESnet's pgen: microslices of a size around a mean, with
//! content that is a function of (input, index), so the overlap two timeslices share is the
//! same in both, and a CRC the receiver checks.

use crate::model::microslice::DESCRIPTOR_LEN;
use crate::model::{MicrosliceDescriptor, Slicing};

/// Subsystem id pgen uses for generated data.
pub const PGEN_SYS_ID: u8 = 0xFF;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    pub input: u16,
    /// Mean content bytes per microslice.
    pub size: u32,
    /// Sizes are uniform in size ± spread.
    pub spread: u32,
}

impl Pattern {
    /// Content bytes of microslice `idx`.
    pub fn size_of(&self, idx: u64) -> u32 {
        if self.spread == 0 {
            return self.size;
        }
        let span = 2 * self.spread as u64 + 1;
        let r = mix(idx ^ ((self.input as u64) << 48) ^ 0x5151) % span;
        (self.size as u64 + r).saturating_sub(self.spread as u64) as u32
    }

    /// Fills `out` with microslice `idx`'s content.
    pub fn fill(&self, idx: u64, out: &mut [u8]) {
        let seed = mix(idx.wrapping_mul(0x9E37_79B9) ^ ((self.input as u64) << 40));
        let mut words = out.chunks_exact_mut(8);
        for (w, chunk) in (&mut words).enumerate() {
            chunk.copy_from_slice(&mix(seed ^ w as u64).to_le_bytes());
        }
        let rest = words.into_remainder();
        let last = mix(!seed).to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }

    /// The component of timeslice `ts`: its microslices' descriptors, then their contents,
    /// generated in place (one allocation per component).
    pub fn component(&self, ts: u64, slicing: Slicing) -> Vec<u8> {
        let range = slicing.microslices(ts);
        let sizes: Vec<usize> = range.clone().map(|idx| self.size_of(idx) as usize).collect();
        let head = sizes.len() * DESCRIPTOR_LEN;
        let mut out = vec![0u8; head + sizes.iter().sum::<usize>()];
        let (descs, mut contents) = out.split_at_mut(head);
        // The stream offset of a timeslice's first microslice comes from the mean size: exact
        // sums would need every earlier size, and FLESnet's readers only use differences.
        let mut offset = range.start * self.size as u64;
        for ((idx, size), desc) in range.zip(sizes).zip(descs.chunks_exact_mut(DESCRIPTOR_LEN)) {
            let (content, rest) = contents.split_at_mut(size);
            self.fill(idx, content);
            let d = MicrosliceDescriptor::for_content(self.input, PGEN_SYS_ID, 1, idx, offset, content);
            desc.copy_from_slice(&d.encode());
            offset += size as u64;
            contents = rest;
        }
        out
    }
}

/// SplitMix64's finaliser: a fast, well-mixed function of its input.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ComponentView;

    #[test]
    fn components_verify_and_share_their_overlap() {
        let p = Pattern { input: 3, size: 100, spread: 40 };
        let s = Slicing { core: 10, overlap: 2 };
        let a = p.component(4, s);
        let b = p.component(5, s);
        let (va, vb) = (ComponentView::new(&a, 12).unwrap(), ComponentView::new(&b, 12).unwrap());
        va.verify(3).unwrap();
        vb.verify(3).unwrap();
        // Microslices 50 and 51 end timeslice 4 and start timeslice 5.
        assert_eq!(va.microslice(10).unwrap().1, vb.microslice(0).unwrap().1);
        assert_eq!(va.microslice(11).unwrap().0.idx, 51);
        let sizes: Vec<u32> = (0..12).map(|m| va.microslice(m).unwrap().0.size).collect();
        assert!(sizes.iter().all(|&s| (60..=140).contains(&s)), "{sizes:?}");
        assert!(sizes.windows(2).any(|w| w[0] != w[1]), "sizes vary");
    }

    #[test]
    fn inputs_differ() {
        let s = Slicing { core: 2, overlap: 0 };
        let a = Pattern { input: 0, size: 64, spread: 0 }.component(0, s);
        let b = Pattern { input: 1, size: 64, spread: 0 }.component(0, s);
        assert_eq!(a.len(), b.len());
        assert_ne!(a[64..], b[64..]);
    }
}
