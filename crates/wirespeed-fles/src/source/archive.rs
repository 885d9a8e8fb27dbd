//! Reading FLESnet timeslice archives (.tsa) back, to replay them: the layout
//! [`TsaWriter`](crate::output::TsaWriter) writes, and older class versions FLESnet wrote
//! (a descriptor without index, start time or flags; components without flags).

use std::io::BufRead;

use super::boost_in::{ArchiveIn, TIMESLICE_ARCHIVE};
use crate::error::{Result, malformed};
use crate::model::{ComponentView, TimesliceDescriptor};
use crate::output::tsa::{COMPONENT, DATA, DESCRIPTOR, DESCRIPTORS, TIMESLICE};

/// Components larger than this are refused as garbage rather than allocated.
const MAX_COMPONENT: u64 = 1 << 32;
/// So are timeslices with more components.
const MAX_COMPONENTS: u64 = 1 << 16;

/// One timeslice from an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedTimeslice {
    /// As the archive gives it (index 0 in archives older than class version 1; start time,
    /// duration and flags 0 in those older than 2).
    pub descriptor: TimesliceDescriptor,
    /// Each component's bytes (descriptors, then contents) and its microslice count.
    pub components: Vec<(Vec<u8>, u64)>,
}

/// Reads an archive's timeslices one after another.
pub struct TsaReader<R: BufRead> {
    archive: ArchiveIn<R>,
    /// The host that wrote the archive, as its header says.
    pub host: String,
    /// The user that wrote it.
    pub user: String,
}

impl<R: BufRead> TsaReader<R> {
    /// Reads the archive's header and descriptor; a compressed archive's timeslices are then
    /// read through zstd.
    pub fn new(input: R) -> Result<Self> {
        let archive = ArchiveIn::open(input, TIMESLICE_ARCHIVE, "timeslice archive")?;
        let (host, user) = (archive.host.clone(), archive.user.clone());
        Ok(TsaReader { archive, host, user })
    }

    /// The next timeslice, or None at the end of the archive. Every component is checked to
    /// hold as many microslices as its descriptor says, within its bytes.
    pub fn next_timeslice(&mut self) -> Result<Option<ArchivedTimeslice>> {
        if self.archive.at_end()? {
            return Ok(None);
        }
        self.archive.class(TIMESLICE)?;
        let version = self.archive.class(DESCRIPTOR)?;
        let index = if version > 0 { self.archive.u64()? } else { 0 };
        let (start_time, duration, flags) =
            if version > 1 { (self.archive.u64()?, self.archive.u64()?, self.archive.u32()?) } else { (0, 0, 0) };
        let ts_pos = self.archive.u64()?;
        let num_core_microslices = self.archive.u32()?;
        let num_components = self.archive.u32()?;
        let descriptor =
            TimesliceDescriptor { index, start_time, duration, flags, ts_pos, num_core_microslices, num_components };
        let num_components = u64::from(num_components);
        if num_components > MAX_COMPONENTS {
            return Err(malformed("timeslice archive", format!("{num_components} components")));
        }
        self.archive.class(DATA)?;
        let count = self.archive.u64()?;
        self.archive.u32()?; // item version
        if count != num_components {
            return Err(malformed("timeslice archive", "component counts disagree"));
        }
        let mut data = Vec::with_capacity(count as usize);
        for _ in 0..count {
            let len = self.archive.u64()?;
            if len > MAX_COMPONENT {
                return Err(malformed("timeslice archive", format!("a {len}-byte component")));
            }
            data.push(self.archive.vec(len)?);
        }
        self.archive.class(DESCRIPTORS)?;
        if self.archive.u64()? != count {
            return Err(malformed("timeslice archive", "component counts disagree"));
        }
        self.archive.u32()?; // item version
        let mut components = Vec::with_capacity(data.len());
        for bytes in data {
            let version = self.archive.class(COMPONENT)?;
            let (_ts_num, _offset, size, microslices) =
                (self.archive.u64()?, self.archive.u64()?, self.archive.u64()?, self.archive.u64()?);
            if version >= 1 {
                self.archive.u32()?; // flags
            }
            if size != bytes.len() as u64 {
                return Err(malformed("timeslice archive", "a component's size disagrees with its bytes"));
            }
            ComponentView::new(&bytes, microslices)?;
            components.push((bytes, microslices));
        }
        Ok(Some(ArchivedTimeslice { descriptor, components }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Slicing;
    use crate::output::{StoredTimeslice, TsaWriter};
    use crate::source::Pattern;

    const TWO: &[u8] = include_bytes!("../../tests/data/two.tsa");
    /// The same two timeslices, zstd-compressed by FLESnet's own OutputArchive (Boost 1.74).
    const TWO_ZSTD: &[u8] = include_bytes!("../../tests/data/two_zstd.tsa");

    #[test]
    fn reads_what_flesnet_wrote() {
        for archive in [TWO, TWO_ZSTD] {
            let mut r = TsaReader::new(archive).unwrap();
            assert_eq!((r.host.as_str(), r.user.as_str()), ("vm", "root"));
            let a = r.next_timeslice().unwrap().unwrap();
            assert_eq!((a.descriptor.index, a.descriptor.num_core_microslices, a.components.len()), (7, 2, 1));
            let v = ComponentView::new(&a.components[0].0, 2).unwrap();
            assert_eq!(v.microslice(1).unwrap().1, [0xA1, 0xB0, 0xC0, 0xD0]);
            assert_eq!(r.next_timeslice().unwrap().unwrap().descriptor.index, 8);
            assert_eq!(r.next_timeslice().unwrap(), None);
        }
    }

    #[test]
    fn compressed_archives_read_back() {
        let parts: Vec<Vec<u8>> = (0..2).map(|i| Pattern::new(i, 300, 0).component(1, Slicing::count(9, 1))).collect();
        let mut w = TsaWriter::compressed(Vec::new(), 0, "h", "u", 1).unwrap();
        for index in 0..20 {
            let components = parts.iter().map(|p| (&p[..], 10)).collect();
            let descriptor = TimesliceDescriptor { index, num_core_microslices: 9, ..Default::default() };
            let ts = StoredTimeslice { descriptor, components };
            w.write(&ts).unwrap();
            w.flush().unwrap();
        }
        let bytes = w.finish().unwrap();
        assert_eq!(&bytes[0x31..0x35], &1i32.to_le_bytes(), "the descriptor says zstd");
        let mut r = TsaReader::new(&bytes[..]).unwrap();
        let read: Vec<u64> = std::iter::from_fn(|| r.next_timeslice().unwrap()).map(|t| t.descriptor.index).collect();
        assert_eq!(read, (0..20).collect::<Vec<_>>());
        // Cut short: whole timeslices, then an error, never a short one.
        let mut r = TsaReader::new(&bytes[..bytes.len() - 10]).unwrap();
        while let Ok(Some(_)) = r.next_timeslice() {}
        assert!(r.next_timeslice().is_err());
    }

    #[test]
    fn reads_back_what_we_write() {
        let slicing = Slicing::count(5, 1);
        let parts: Vec<Vec<u8>> = (0..3).map(|i| Pattern::new(i, 90, 30).component(4, slicing)).collect();
        let mut w = TsaWriter::new(Vec::new(), 0, "h", "u").unwrap();
        for index in [4, 5] {
            let components = parts.iter().map(|p| (&p[..], 6)).collect();
            let descriptor = TimesliceDescriptor { index, num_core_microslices: 5, ..Default::default() };
            w.write(&StoredTimeslice { descriptor, components }).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut r = TsaReader::new(&bytes[..]).unwrap();
        for index in [4, 5] {
            let a = r.next_timeslice().unwrap().unwrap();
            assert_eq!(a.descriptor.index, index);
            assert_eq!(a.components.iter().map(|c| &c.0).collect::<Vec<_>>(), parts.iter().collect::<Vec<_>>());
        }
        assert_eq!(r.next_timeslice().unwrap(), None);
        // Cut anywhere inside the last timeslice: an error, never a short timeslice.
        for cut in [bytes.len() - 1, bytes.len() - 40, bytes.len() / 2 + 30] {
            let mut r = TsaReader::new(&bytes[..cut]).unwrap();
            let mut results = Vec::new();
            while let Ok(Some(t)) = r.next_timeslice() {
                results.push(t.descriptor.index);
            }
            assert!(r.next_timeslice().is_err() || results.len() < 2, "cut at {cut}");
        }
    }

    #[test]
    fn garbage_is_refused_without_panicking() {
        assert!(TsaReader::new(&b"not an archive at all, not at all, no"[..]).is_err());
        let mut bytes = TWO.to_vec();
        bytes[0x5C] = 0xFF; // the first timeslice's descriptor version
        let r = TsaReader::new(&bytes[..]).and_then(|mut r| r.next_timeslice());
        let _ = r; // any result but a panic
    }
}
