//! Reading FLESnet's microslice archives (.msa, what mstool writes and replays): after the
//! header and an ArchiveDescriptor of type 1, StorableMicroslice objects until the end, each
//! its MicrosliceDescriptor (field by field) and its content (a vector of bytes); zstd after
//! the descriptor where it says so.

use std::io::BufRead;

use super::boost_in::{ArchiveIn, MICROSLICE_ARCHIVE};
use crate::error::{Result, malformed};
use crate::model::MicrosliceDescriptor;

/// Microslices larger than this are refused as garbage rather than allocated.
const MAX_CONTENT: u32 = 1 << 30;

/// The classes as they first appear.
const MICROSLICE: usize = 0;
const DESCRIPTOR: usize = 1;

/// Reads a microslice archive's microslices one after another.
pub struct MsaReader<R: BufRead> {
    archive: ArchiveIn<R>,
}

impl<R: BufRead> MsaReader<R> {
    /// A reader of `input`, its header read and checked.
    pub fn new(input: R) -> Result<Self> {
        Ok(MsaReader { archive: ArchiveIn::open(input, MICROSLICE_ARCHIVE, "microslice archive")? })
    }

    /// The next microslice, or None at the end of the archive.
    pub fn next_microslice(&mut self) -> Result<Option<(MicrosliceDescriptor, Vec<u8>)>> {
        if self.archive.at_end()? {
            return Ok(None);
        }
        let a = &mut self.archive;
        a.class(MICROSLICE)?;
        a.class(DESCRIPTOR)?;
        let d = MicrosliceDescriptor {
            hdr_id: a.u8()?,
            hdr_ver: a.u8()?,
            eq_id: a.u16()?,
            flags: a.u16()?,
            sys_id: a.u8()?,
            sys_ver: a.u8()?,
            idx: a.u64()?,
            crc: a.u32()?,
            size: a.u32()?,
            offset: a.u64()?,
        };
        let len = a.u64()?;
        if d.size > MAX_CONTENT || len != u64::from(d.size) {
            return Err(malformed(
                "microslice archive",
                format!("{len} content bytes, the descriptor says {}", d.size),
            ));
        }
        Ok(Some((d, a.vec(len)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ramp;

    /// Written by FLESnet's own MicrosliceOutputArchive (Boost 1.74): three microslices of
    /// FLESnet's ramp for channel 2, at idx 1000, 1100 and 1200, of 8, 16 and 0 bytes.
    const THREE: &[u8] = include_bytes!("../../tests/data/three.msa");

    #[test]
    fn reads_what_flesnet_wrote() {
        let mut r = MsaReader::new(THREE).unwrap();
        let mut channel = None;
        for (idx, size) in [(1000, 8), (1100, 16), (1200, 0)] {
            let (d, content) = r.next_microslice().unwrap().unwrap();
            assert_eq!((d.hdr_id, d.eq_id, d.sys_id, d.sys_ver, d.idx, d.size), (0xDD, 0x1234, 0xF0, 0x81, idx, size));
            ramp::check(&content, d.crc, &mut channel, d.idx).unwrap();
        }
        assert_eq!(channel, Some(2));
        assert!(r.next_microslice().unwrap().is_none());
    }

    #[test]
    fn other_archives_and_garbage_are_refused() {
        assert!(MsaReader::new(&include_bytes!("../../tests/data/two.tsa")[..]).is_err(), "a timeslice archive");
        for cut in [10, 0x60, THREE.len() - 3] {
            let r = MsaReader::new(&THREE[..cut]).and_then(|mut r| {
                while r.next_microslice()?.is_some() {}
                Ok(())
            });
            assert!(r.is_err(), "cut at {cut}");
        }
    }
}
