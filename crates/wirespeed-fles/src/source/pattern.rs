//! A pattern generator like FLESnet's pgen: microslices of a size around a mean, with
//! content that is a function of (input, index), so the overlap two timeslices share is the
//! same in both, and a CRC the receiver checks.

use crate::model::{MicrosliceDescriptor, Slicing, component_len, write_component};

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

    /// Byte offset of microslice `idx` in the input's stream: the sum of the sizes before it,
    /// computed per timeslice start so it needs no history. Offsets only have to grow by each
    /// microslice's size within a component, which this keeps.
    fn offset_of(&self, idx: u64, first: u64, first_offset: u64) -> u64 {
        first_offset + (first..idx).map(|i| self.size_of(i) as u64).sum::<u64>()
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

    /// The component of timeslice `ts`: its microslices' descriptors, then their contents.
    pub fn component(&self, ts: u64, slicing: Slicing) -> Vec<u8> {
        let range = slicing.microslices(ts);
        // The stream offset of a timeslice's first microslice, from the mean size: exact
        // sums would need every earlier size, and FLESnet's readers only use differences.
        let base = range.start * self.size as u64;
        let mut contents = Vec::with_capacity(range.clone().count());
        for idx in range.clone() {
            let mut c = vec![0u8; self.size_of(idx) as usize];
            self.fill(idx, &mut c);
            let offset = self.offset_of(idx, range.start, base);
            let d = MicrosliceDescriptor::for_content(self.input, PGEN_SYS_ID, 1, idx, offset, &c);
            contents.push((d, c));
        }
        let descs: Vec<_> = contents.iter().map(|(d, _)| *d).collect();
        let mut out = vec![0u8; component_len(&descs)];
        let parts: Vec<_> = contents.iter().map(|(d, c)| (*d, &c[..])).collect();
        write_component(&parts, &mut out);
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
