//! FLESnet's microslice archives (.msa), byte for byte as its MicrosliceOutputArchive writes
//! them with Boost 1.74: the archive header, an ArchiveDescriptor of type 1 (uncompressed),
//! then each microslice as a StorableMicroslice: its descriptor field by field and its content
//! as a vector of bytes, the two classes' tracking byte and version (0) before the first.

use std::io::{self, Write};

use wirespeed::proto::codec::WriteFields;

use super::tsa::{MICROSLICE_ARCHIVE, write_head};
use crate::model::MicrosliceDescriptor;

/// Writes a microslice archive, as FLESnet's `MicrosliceOutputArchive` does.
pub struct MsaWriter<W: Write> {
    out: W,
    first: bool,
}

impl<W: Write> MsaWriter<W> {
    /// Starts an archive made at `creation_time` (seconds since the epoch) on `host` by `user`.
    pub fn new(mut out: W, creation_time: i64, host: &str, user: &str) -> io::Result<Self> {
        write_head(&mut out, MICROSLICE_ARCHIVE, 0, creation_time, host, user)?;
        Ok(MsaWriter { out, first: true })
    }

    /// Appends one microslice: its descriptor and content.
    pub fn write(&mut self, d: &MicrosliceDescriptor, content: &[u8]) -> io::Result<()> {
        if std::mem::take(&mut self.first) {
            self.out.write_all(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0])?; // both classes: untracked, version 0
        }
        // The descriptor's fields in order, packed: its 32-byte layout.
        self.out.write_all(&d.encode())?;
        self.out.u64_prefixed(content)
    }

    /// Ends the archive and hands back its output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::MsaReader;

    /// tests/data/three.msa, written by FLESnet's own MicrosliceOutputArchive.
    const THREE: &[u8] = include_bytes!("../../tests/data/three.msa");

    #[test]
    fn writes_what_flesnet_writes() {
        let mut r = MsaReader::new(THREE).unwrap();
        let mut w = MsaWriter::new(Vec::new(), 0, "vm", "root").unwrap();
        while let Some((d, content)) = r.next_microslice().unwrap() {
            w.write(&d, &content).unwrap();
        }
        let ours = w.finish().unwrap();
        // All but the creation time (bytes 0x35 to 0x3C).
        assert_eq!(ours.len(), THREE.len());
        assert_eq!(ours[..0x35], THREE[..0x35]);
        assert_eq!(ours[0x3D..], THREE[0x3D..]);
    }
}
