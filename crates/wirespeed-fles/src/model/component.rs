//! A component: one input's contribution to one timeslice. Its bytes are the n microslice
//! descriptors, then their contents; content m starts at n·32 + `desc[m].offset` −
//! `desc[0].offset`, as in FLESnet.

use wirespeed::proto::codec::{Reader, Truncated};

use super::microslice::{DESCRIPTOR_LEN, MicrosliceDescriptor, flags};
use super::ramp;
use crate::error::{FlesError, Result, malformed};

/// Where a component lies in a compute node's data ring, and what it holds: FLESnet's
/// TimesliceComponentDescriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ComponentDescriptor {
    /// The timeslice the component belongs to.
    pub ts_num: u64,
    /// Byte offset in the data ring (counted from the ring's start, without wrapping).
    pub offset: u64,
    /// Its size in bytes: the microslice descriptors, then their contents.
    pub size: u64,
    /// How many microslices it holds.
    pub num_microslices: u64,
}

/// Bytes of an encoded [`ComponentDescriptor`].
pub const COMPONENT_DESCRIPTOR_LEN: usize = 32;

/// FLESnet's flags of a component (TsComponentFlag) and of a timeslice (TsFlag): a microslice
/// (of some component) overflowed in the FLIM; a component is missing.
pub const OVERFLOW_FLIM: u32 = 1 << 1;
/// See [`OVERFLOW_FLIM`].
pub const MISSING_COMPONENTS: u32 = 1 << 2;

/// A timeslice's flags, from its components' and whether one is missing.
pub fn timeslice_flags<'a>(components: impl IntoIterator<Item = &'a ComponentView<'a>>, missing: bool) -> u32 {
    let overflow = components.into_iter().fold(0, |f, c| f | c.flags());
    overflow | if missing { MISSING_COMPONENTS } else { 0 }
}

impl ComponentDescriptor {
    /// The descriptor's 32 bytes, as FLESnet writes it.
    pub fn encode(&self) -> [u8; COMPONENT_DESCRIPTOR_LEN] {
        let mut b = [0u8; COMPONENT_DESCRIPTOR_LEN];
        for (i, v) in [self.ts_num, self.offset, self.size, self.num_microslices].into_iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// A descriptor from FLESnet's 32 bytes; too few is an error.
    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = Reader::new(b);
        let mut read = || -> std::result::Result<_, Truncated> {
            Ok(ComponentDescriptor { ts_num: r.u64()?, offset: r.u64()?, size: r.u64()?, num_microslices: r.u64()? })
        };
        read().map_err(|_| malformed("component descriptor", format!("{} bytes, not 32", b.len())))
    }
}

/// The bytes of a component whose microslices' contents lie back to back, as their offsets
/// say: descriptors first.
pub fn component_len(descs: &[MicrosliceDescriptor]) -> usize {
    let content = match (descs.first(), descs.last()) {
        (Some(f), Some(l)) => (l.offset + l.size as u64 - f.offset) as usize,
        _ => 0,
    };
    descs.len() * DESCRIPTOR_LEN + content
}

/// A component's bytes, read without copying.
#[derive(Clone, Copy)]
pub struct ComponentView<'a> {
    bytes: &'a [u8],
    count: usize,
}

impl<'a> ComponentView<'a> {
    /// A view of `bytes` holding `count` microslices; checks that every descriptor is one and
    /// every content lies inside.
    pub fn new(bytes: &'a [u8], count: u64) -> Result<Self> {
        let view = Self::deferred(bytes, count)?;
        view.microslices().try_for_each(|m| m.map(drop))?;
        Ok(view)
    }

    /// A view that checks only that the `count` descriptors fit in `bytes`: each microslice is
    /// checked when read. For a node that passes components on without reading them, as
    /// FLESnet's compute nodes do.
    pub fn deferred(bytes: &'a [u8], count: u64) -> Result<Self> {
        let count = usize::try_from(count).map_err(|_| malformed("component", "microslice count"))?;
        count
            .checked_mul(DESCRIPTOR_LEN)
            .filter(|&h| h <= bytes.len())
            .ok_or_else(|| malformed("component", format!("{count} descriptors do not fit {} bytes", bytes.len())))?;
        Ok(ComponentView { bytes, count })
    }

    /// How many microslices it holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Its bytes: the microslice descriptors, then their contents.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Microslice `m`'s descriptor; one past the end, or one the bytes do not hold, is an error.
    pub fn descriptor(&self, m: usize) -> Result<MicrosliceDescriptor> {
        MicrosliceDescriptor::decode(&self.bytes[m * DESCRIPTOR_LEN..])
    }

    /// Microslice `m`: its descriptor and content, which must lie inside the component.
    pub fn microslice(&self, m: usize) -> Result<(MicrosliceDescriptor, &'a [u8])> {
        self.microslice_after(self.descriptor(0)?.offset, m)
    }

    /// Every microslice in order, as [`microslice`](Self::microslice) gives each; the first
    /// descriptor read once.
    pub fn microslices(&self) -> impl Iterator<Item = Result<(MicrosliceDescriptor, &'a [u8])>> + '_ {
        let first = if self.count == 0 { Ok(0) } else { self.descriptor(0).map(|d| d.offset) };
        (0..self.count).map(move |m| first.clone().and_then(|first| self.microslice_after(first, m)))
    }

    /// Microslice `m` of a component whose first microslice's offset is `first`.
    fn microslice_after(&self, first: u64, m: usize) -> Result<(MicrosliceDescriptor, &'a [u8])> {
        let d = self.descriptor(m)?;
        let start = d
            .offset
            .checked_sub(first)
            .and_then(|o| o.checked_add((self.count * DESCRIPTOR_LEN) as u64))
            .ok_or_else(|| malformed("component", format!("microslice {m} starts before the first")))?;
        let content = usize::try_from(start)
            .ok()
            .and_then(|start| self.bytes.get(start..start.checked_add(d.size as usize)?))
            .ok_or_else(|| malformed("component", format!("microslice {m} runs past the component's end")))?;
        Ok((d, content))
    }

    /// FLESnet's component flags: [`OVERFLOW_FLIM`] if a microslice overflowed in the FLIM.
    pub fn flags(&self) -> u32 {
        let overflow = (0..self.count).any(|m| self.descriptor(m).is_ok_and(|d| d.flags & flags::OVERFLOW_FLIM != 0));
        if overflow { OVERFLOW_FLIM } else { 0 }
    }

    /// Checks the CRC of every microslice that carries one, and the content of every
    /// microslice of FLESnet's ramp pattern; `input` names the source in errors.
    pub fn verify(&self, input: u16) -> Result<()> {
        let mut channel = None;
        for microslice in self.microslices() {
            let (d, content) = microslice?;
            if (d.sys_id, d.sys_ver) == (ramp::SYS_ID, ramp::SYS_VER) {
                ramp::check(content, d.crc, &mut channel, d.idx)?;
            } else if d.flags & flags::CRC_VALID != 0 {
                let found = crc32c::crc32c(content);
                if found != d.crc {
                    return Err(FlesError::Crc { input, idx: d.idx, expected: d.crc, found });
                }
            }
        }
        Ok(())
    }
}

/// Writes a component of `microslices` (descriptor and content each, contents back to back as
/// their offsets say) into `out`, which must be `component_len` bytes.
pub fn write_component(microslices: &[(MicrosliceDescriptor, &[u8])], out: &mut [u8]) {
    let head = microslices.len() * DESCRIPTOR_LEN;
    let first = microslices.first().map_or(0, |(d, _)| d.offset);
    for (m, (d, content)) in microslices.iter().enumerate() {
        out[m * DESCRIPTOR_LEN..][..DESCRIPTOR_LEN].copy_from_slice(&d.encode());
        let at = head + (d.offset - first) as usize;
        out[at..at + content.len()].copy_from_slice(content);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(contents: &[&[u8]]) -> Vec<u8> {
        let mut offset = 0;
        let mut ms = Vec::new();
        for (i, c) in contents.iter().enumerate() {
            ms.push((MicrosliceDescriptor::for_content(3, 0xF0, 1, 100 + i as u64, offset, c), *c));
            offset += c.len() as u64;
        }
        let descs: Vec<_> = ms.iter().map(|(d, _)| *d).collect();
        let mut out = vec![0; component_len(&descs)];
        write_component(&ms, &mut out);
        out
    }

    #[test]
    fn builds_and_reads_back() {
        let bytes = sample(&[b"abc", b"", b"defgh"]);
        assert_eq!(bytes.len(), 3 * 32 + 8);
        let v = ComponentView::new(&bytes, 3).unwrap();
        assert_eq!(v.microslice(2).unwrap().1, b"defgh");
        assert_eq!(v.microslice(1).unwrap().0.idx, 101);
        v.verify(3).unwrap();
    }

    #[test]
    fn a_flipped_bit_fails_the_crc() {
        let mut bytes = sample(&[b"abc", b"defgh"]);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let e = ComponentView::new(&bytes, 2).unwrap().verify(3).unwrap_err();
        assert!(matches!(e, FlesError::Crc { idx: 101, .. }), "{e}");
    }

    #[test]
    fn a_content_past_the_end_is_refused() {
        let bytes = sample(&[b"abc", b"defgh"]);
        assert!(ComponentView::new(&bytes[..bytes.len() - 1], 2).is_err());
        assert!(ComponentView::new(&bytes, 5).is_err());
    }

    #[test]
    fn component_descriptor_round_trips() {
        let d = ComponentDescriptor { ts_num: 7, offset: 1 << 40, size: 65536, num_microslices: 101 };
        assert_eq!(ComponentDescriptor::decode(&d.encode()).ok(), Some(d));
    }

    proptest! {
        #[test]
        fn views_of_garbage_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), n in 0u64..12) {
            if let Ok(v) = ComponentView::new(&bytes, n) {
                for m in 0..v.len() {
                    let _ = v.microslice(m);
                }
                let _ = v.verify(0);
            }
        }
    }
}
