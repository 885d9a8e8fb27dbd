//! FLESnet's timeslice archives (.tsa): Boost.Serialization binary archives, written byte for
//! byte as Boost 1.74 writes them (library version 18), so FLESnet's own readers load them.
//!
//! Layout: the archive header; an ArchiveDescriptor (class version 2); then one
//! StorableTimeslice after another: its TimesliceDescriptor (class version 2), its data as a
//! vector of byte vectors (one per component), its component descriptors (class version 1).
//! The first time a class appears it is preceded by a tracking byte (0) and its class version.
//! A compressed archive (the descriptor says zstd) is the same, but everything after the
//! descriptor is one zstd stream holding a second archive without a header, whose classes
//! appear for the first time again: what FLESnet's OutputArchive writes.

use std::io::{self, Write};

use wirespeed::proto::codec::WriteFields;

use crate::model::{ComponentView, TimesliceDescriptor};

/// One timeslice as the archive holds it (the descriptor's component count is the
/// components').
pub struct StoredTimeslice<'a> {
    /// The timeslice's descriptor.
    pub descriptor: TimesliceDescriptor,
    /// Each component's bytes (descriptors, then contents) and its microslice count.
    pub components: Vec<(&'a [u8], u64)>,
}

/// Writes an archive to `out`; `finish` flushes it.
pub struct TsaWriter<W: Write> {
    out: Out<W>,
    /// Whether each class's version has been written: the timeslice, its descriptor, the
    /// data vector, the descriptor vector, a component descriptor.
    seen: [bool; 5],
}

pub(crate) const TIMESLICE: usize = 0;
pub(crate) const DESCRIPTOR: usize = 1;
pub(crate) const DATA: usize = 2;
pub(crate) const DESCRIPTORS: usize = 3;
pub(crate) const COMPONENT: usize = 4;
pub(crate) const VERSIONS: [u32; 5] = [0, 2, 0, 0, 1];
/// The archive's magic, after its length.
pub(crate) const MAGIC: &[u8; 22] = b"serialization::archive";
/// Boost 1.74's library version, as its archives carry it.
const LIBRARY_VERSION: u16 = 18;
/// The sizes of int, long, float and double where the archive was written: readers here
/// need these.
pub(crate) const TYPE_SIZES: [u8; 4] = [4, 8, 4, 8];

/// Where the timeslices go: the file, or a zstd stream into it.
enum Out<W: Write> {
    Plain(W),
    Zstd(zstd::stream::write::Encoder<'static, W>),
}

impl<W: Write> Write for Out<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Out::Plain(w) => w.write(buf),
            Out::Zstd(z) => z.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Out::Plain(w) => w.flush(),
            Out::Zstd(z) => z.flush(),
        }
    }
}

/// ArchiveDescriptor's compression: 0 none, 1 zstd.
pub(crate) const ZSTD: i32 = 1;
/// ArchiveDescriptor's types.
pub(crate) const TIMESLICE_ARCHIVE: i32 = 0;
pub(crate) const MICROSLICE_ARCHIVE: i32 = 1;

/// A Boost.Serialization binary archive's header, as Boost 1.74 writes it.
pub(crate) fn write_header(out: &mut impl Write) -> io::Result<()> {
    out.u64_prefixed(MAGIC)?;
    out.u16(LIBRARY_VERSION)?;
    out.write_all(&TYPE_SIZES)?;
    out.i32(1)
}

/// The header, then FLESnet's ArchiveDescriptor (class version 2): the archive's type and
/// compression, when (seconds since the epoch), on which host and by whom it was made.
pub(crate) fn write_head(
    out: &mut impl Write,
    archive_type: i32,
    compression: i32,
    creation_time: i64,
    host: &str,
    user: &str,
) -> io::Result<()> {
    write_header(out)?;
    out.u8(0)?;
    out.u32(2)?;
    out.i32(archive_type)?;
    out.i32(compression)?;
    out.i64(creation_time)?;
    for s in [host, user] {
        out.u64_prefixed(s.as_bytes())?;
    }
    Ok(())
}

impl<W: Write> TsaWriter<W> {
    /// Starts an archive made at `creation_time` (seconds since the epoch) on `host` by `user`.
    pub fn new(out: W, creation_time: i64, host: &str, user: &str) -> io::Result<Self> {
        Self::start(out, creation_time, host, user, None)
    }

    /// As [`new`](Self::new), compressed with zstd at `level` (FLESnet uses 1).
    pub fn compressed(out: W, creation_time: i64, host: &str, user: &str, level: i32) -> io::Result<Self> {
        Self::start(out, creation_time, host, user, Some(level))
    }

    fn start(mut out: W, creation_time: i64, host: &str, user: &str, zstd: Option<i32>) -> io::Result<Self> {
        let compression = zstd.map_or(0, |_| ZSTD);
        write_head(&mut out, TIMESLICE_ARCHIVE, compression, creation_time, host, user)?;
        let out = match zstd {
            None => Out::Plain(out),
            Some(level) => Out::Zstd(zstd::stream::write::Encoder::new(out, level)?),
        };
        Ok(TsaWriter { out, seen: [false; 5] })
    }

    /// A class's tracking byte and version, the first time it appears.
    fn class(&mut self, which: usize) -> io::Result<()> {
        if !self.seen[which] {
            self.seen[which] = true;
            self.out.u8(0)?;
            self.out.u32(VERSIONS[which])?;
        }
        Ok(())
    }

    /// Appends one timeslice.
    pub fn write(&mut self, ts: &StoredTimeslice<'_>) -> io::Result<()> {
        self.class(TIMESLICE)?;
        self.class(DESCRIPTOR)?;
        let d = TimesliceDescriptor { num_components: ts.components.len() as u32, ..ts.descriptor };
        self.out.write_all(&d.encode())?;
        self.class(DATA)?;
        self.out.u64(ts.components.len() as u64)?;
        self.out.u32(0)?; // the byte vectors' item version
        for (bytes, _) in &ts.components {
            self.out.u64_prefixed(bytes)?;
        }
        self.class(DESCRIPTORS)?;
        self.out.u64(ts.components.len() as u64)?;
        self.out.u32(VERSIONS[COMPONENT])?; // item version
        for (bytes, microslices) in &ts.components {
            self.class(COMPONENT)?;
            // ts_num, offset in this timeslice's byte vector (each has its own), size, count
            for v in [d.index, 0, bytes.len() as u64, *microslices] {
                self.out.u64(v)?;
            }
            let flags = ComponentView::new(bytes, *microslices).map_or(0, |c| c.flags());
            self.out.u32(flags)?;
        }
        Ok(())
    }

    /// Hands what is written so far to the output's own writer (the OS, for a file); a
    /// compressed archive ends a zstd block, so that what is written can be read back.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Ends the archive and hands back its output.
    pub fn finish(self) -> io::Result<W> {
        let mut out = match self.out {
            Out::Plain(w) => w,
            Out::Zstd(z) => z.finish()?,
        };
        out.flush()?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MicrosliceDescriptor, component_len, write_component};

    /// ../shared/fles/two.tsa, written by FLESnet's own code with Boost 1.74.
    const TWO: &[u8] = include_bytes!("../../tests/data/two.tsa");

    #[test]
    fn writes_what_flesnet_writes() {
        let mut w = TsaWriter::new(Vec::new(), 0, "vm", "root").unwrap();
        for index in [7, 8] {
            let ms: Vec<(MicrosliceDescriptor, [u8; 4])> = (0..2u8)
                .map(|m| {
                    let d = MicrosliceDescriptor {
                        hdr_id: 0xDD,
                        hdr_ver: 0x01,
                        eq_id: 0x1234,
                        flags: 0,
                        sys_id: 0xF0,
                        sys_ver: 0x81,
                        idx: 1000 + m as u64,
                        crc: 0,
                        size: 4,
                        offset: 4 * m as u64,
                    };
                    (d, [0xA0 + m, 0xB0, 0xC0, 0xD0])
                })
                .collect();
            let descs: Vec<_> = ms.iter().map(|(d, _)| *d).collect();
            let mut bytes = vec![0; component_len(&descs)];
            write_component(&ms.iter().map(|(d, c)| (*d, &c[..])).collect::<Vec<_>>(), &mut bytes);
            let descriptor = TimesliceDescriptor { index, num_core_microslices: 2, ..Default::default() };
            let ts = StoredTimeslice { descriptor, components: vec![(&bytes, 2)] };
            w.write(&ts).unwrap();
        }
        let mut ours = w.finish().unwrap();
        assert_eq!(ours.len(), TWO.len());
        // All but the creation time (bytes 0x35 to 0x3C).
        ours[0x35..0x3D].copy_from_slice(&TWO[0x35..0x3D]);
        assert_eq!(ours, TWO);
    }
}
