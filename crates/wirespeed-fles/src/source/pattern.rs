//! A pattern generator like FLESnet's pgen: microslices of a size around a mean, with
//! content that is a function of (input, index), so the overlap two timeslices share is the
//! same in both. Ours (the default) fills them with well-mixed words under a CRC-32C that any
//! consumer checks without knowing the pattern; FLESnet's (`Style::Flesnet`) writes the ramp
//! that its pattern checker verifies, with no CRC.

use crate::model::microslice::{DESCRIPTOR_LEN, HDR_ID, HDR_VER};
use crate::model::{MicrosliceDescriptor, Slicing, ramp};

/// Subsystem id pgen uses for generated data.
pub const PGEN_SYS_ID: u8 = 0xFF;

/// Whose pattern a generated microslice's content follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Style {
    /// Mixed words under a CRC-32C.
    #[default]
    Wirespeed,
    /// FLESnet's ramp pattern (`model::ramp`).
    Flesnet,
}

/// What the generator writes for one input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    /// The input: its equipment id.
    pub input: u16,
    /// Mean content bytes per microslice.
    pub size: u32,
    /// Sizes are uniform in size ± spread.
    pub spread: u32,
    /// Whose pattern.
    pub style: Style,
}

impl Pattern {
    /// Our pattern for `input`.
    pub fn new(input: u16, size: u32, spread: u32) -> Self {
        Pattern { input, size, spread, style: Style::Wirespeed }
    }

    /// Content bytes of microslice `idx` (whole words in FLESnet's pattern).
    pub fn size_of(&self, idx: u64) -> u32 {
        let size = match self.spread {
            0 => self.size,
            spread => {
                let span = 2 * spread as u64 + 1;
                let r = mix(idx ^ ((self.input as u64) << 48) ^ 0x5151) % span;
                (self.size as u64 + r).saturating_sub(spread as u64) as u32
            }
        };
        match self.style {
            Style::Wirespeed => size,
            Style::Flesnet => ramp::size(size),
        }
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
            let d = match self.style {
                Style::Wirespeed => {
                    self.fill(idx, content);
                    MicrosliceDescriptor::for_content(self.input, PGEN_SYS_ID, 1, slicing.idx(idx), offset, content)
                }
                Style::Flesnet => {
                    let crc = ramp::fill(self.input, content);
                    let (sys_id, sys_ver, eq_id) = (ramp::SYS_ID, ramp::SYS_VER, ramp::EQ_ID);
                    let (hdr_id, hdr_ver, size) = (HDR_ID, HDR_VER, size as u32);
                    let idx = slicing.idx(idx);
                    MicrosliceDescriptor { hdr_id, hdr_ver, eq_id, flags: 0, sys_id, sys_ver, idx, crc, size, offset }
                }
            };
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
        let p = Pattern::new(3, 100, 40);
        let s = Slicing::count(10, 2);
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
        let s = Slicing::count(2, 0);
        let a = Pattern::new(0, 64, 0).component(0, s);
        let b = Pattern::new(1, 64, 0).component(0, s);
        assert_eq!(a.len(), b.len());
        assert_ne!(a[64..], b[64..]);
    }

    /// FLESnet's pattern as its checker reads it: the ramp, checked by `verify`, and the
    /// descriptor fields its generator sets.
    #[test]
    fn flesnets_pattern_is_the_ramp() {
        let p = Pattern { style: Style::Flesnet, ..Pattern::new(5, 100, 40) };
        let s = Slicing::count(10, 1);
        let c = p.component(2, s);
        let v = ComponentView::new(&c, 11).unwrap();
        v.verify(5).unwrap();
        let (d, content) = v.microslice(3).unwrap();
        assert_eq!((d.eq_id, d.flags, d.sys_id, d.sys_ver, d.idx), (0xE001, 0, 0xF0, 0x81, 23));
        assert_eq!(content.len() % 8, 0);
        assert_eq!(u64::from_le_bytes(content[8..16].try_into().unwrap()), (5 << 48) | 8);
        let mut broken = c.clone();
        let at = c.len() - 3;
        broken[at] ^= 0x40;
        assert!(ComponentView::new(&broken, 11).unwrap().verify(5).is_err());
    }
}
