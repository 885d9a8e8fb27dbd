//! Direct I/O (`--direct`): large files are read and written with `O_DIRECT`, past the page
//! cache, so that a copy bigger than memory neither evicts what others keep cached nor leaves
//! gigabytes of dirty pages behind. The kernel wants whole blocks, at aligned offsets, from
//! aligned memory; what is not a whole block (a file's tail), and anything a filesystem
//! refuses to do directly, goes through the page cache as usual.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

/// Alignment of offsets, lengths and memory: a page covers every block size in use.
pub(crate) const ALIGN: usize = 4096;
/// Smaller files gain nothing from bypassing the cache.
pub(crate) const MIN_SIZE: u64 = 1 << 20;

/// `file` opened once more, for direct I/O (for writing if `write`); `None` where the
/// filesystem refuses it, and the file then goes through the page cache.
pub(crate) fn reopen(file: &File, write: bool) -> Option<File> {
    // The descriptor's own link names this very file, even if its path changed since.
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    OpenOptions::new().read(!write).write(write).custom_flags(libc::O_DIRECT).open(path).ok()
}

/// Scratch memory that hands out windows starting on an `ALIGN` boundary.
#[derive(Default)]
pub(crate) struct AlignedBuf(Vec<u8>);

impl AlignedBuf {
    /// An aligned window of `len` bytes (its contents are left over from earlier use).
    pub(crate) fn get(&mut self, len: usize) -> &mut [u8] {
        if self.0.len() < len + ALIGN {
            self.0.resize(len + ALIGN, 0);
        }
        let at = self.0.as_ptr().align_offset(ALIGN);
        &mut self.0[at..at + len]
    }
}

/// Reads `len` bytes at `offset` (aligned) into `scratch`: whole blocks from `direct`, and
/// whatever it did not give (past a short read or a refusal) from `file`.
pub(crate) fn read_at<'a>(
    direct: &File,
    file: &File,
    scratch: &'a mut AlignedBuf,
    len: usize,
    offset: u64,
) -> io::Result<&'a [u8]> {
    let buf = scratch.get(len.next_multiple_of(ALIGN));
    // Whole blocks reaching past the end of the file are fine: the read stops there.
    let n = match direct.read_at(buf, offset) {
        Ok(n) => n.min(len),
        Err(e) if refused(&e) => 0,
        Err(e) => return Err(e),
    };
    file.read_exact_at(&mut buf[n..len], offset + n as u64)?;
    Ok(&buf[..len])
}

/// Writes `data` (aligned memory) at `offset` (aligned): whole blocks to `direct`, the tail
/// (or everything, if the filesystem refuses) to `file`.
pub(crate) fn write_at(direct: &File, file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    let whole = data.len() / ALIGN * ALIGN;
    let n = match direct.write_all_at(&data[..whole], offset) {
        Ok(()) => whole,
        Err(e) if refused(&e) => 0,
        Err(e) => return Err(e),
    };
    file.write_all_at(&data[n..], offset + n as u64)
}

/// Bytes gathered in aligned memory and written out a window at a time, at offsets that
/// follow on from `at`: the window is whole blocks, so every write but the last is too.
pub(crate) struct Gather<'a, W: FnMut(&[u8], u64) -> io::Result<()>> {
    window: &'a mut [u8],
    filled: usize,
    at: u64,
    write: W,
}

impl<'a, W: FnMut(&[u8], u64) -> io::Result<()>> Gather<'a, W> {
    /// Gathers into a window of `scratch` of about `len` bytes, to be written at `at` on.
    pub(crate) fn new(scratch: &'a mut AlignedBuf, len: usize, at: u64, write: W) -> Self {
        Gather { window: scratch.get(len.max(1).next_multiple_of(ALIGN)), filled: 0, at, write }
    }

    pub(crate) fn push(&mut self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let n = data.len().min(self.window.len() - self.filled);
            self.window[self.filled..self.filled + n].copy_from_slice(&data[..n]);
            self.filled += n;
            data = &data[n..];
            if self.filled == self.window.len() {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Writes what is gathered.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if self.filled > 0 {
            (self.write)(&self.window[..self.filled], self.at)?;
            self.at += self.filled as u64;
            self.filled = 0;
        }
        Ok(())
    }
}

/// The kernel declines direct I/O for this file, offset or memory (`EINVAL`), or was
/// interrupted: the page cache takes over.
fn refused(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EINVAL) || e.kind() == io::ErrorKind::Interrupted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_aligned_and_tails_and_refusals_go_through_the_cache() {
        let mut scratch = AlignedBuf::default();
        for len in [1, 4095, 4096, 10_000] {
            assert_eq!(scratch.get(len).as_ptr() as usize % ALIGN, 0);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..3 * ALIGN + 123).map(|i| (i * 7 % 251) as u8).collect();
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
        // Without a direct descriptor (a refusing filesystem), `file` does it all; with one,
        // the blocks go direct and the tail through the cache. Either way the bytes are right.
        let direct = reopen(&file, true).unwrap_or_else(|| file.try_clone().unwrap());
        let aligned = scratch.get(data.len());
        aligned.copy_from_slice(&data);
        write_at(&direct, &file, aligned, 0).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data);
        let reader = reopen(&file, false).unwrap_or_else(|| file.try_clone().unwrap());
        let mut back = AlignedBuf::default();
        assert_eq!(read_at(&reader, &file, &mut back, data.len() - ALIGN, ALIGN as u64).unwrap(), &data[ALIGN..]);
        assert!(read_at(&reader, &file, &mut back, 10, data.len() as u64).is_err(), "reading past the end");
    }

    #[test]
    fn gathered_bytes_go_out_in_whole_windows_then_the_rest() {
        let mut scratch = AlignedBuf::default();
        let mut writes = Vec::new();
        let mut g = Gather::new(&mut scratch, 100, 8192, |data: &[u8], at| {
            assert_eq!(data.as_ptr() as usize % ALIGN, 0);
            writes.push((at, data.len()));
            Ok(())
        });
        for piece in [vec![1u8; 3000], vec![2; 5000], vec![3; 10]] {
            g.push(&piece).unwrap();
        }
        g.flush().unwrap();
        assert_eq!(writes, [(8192, 4096), (12288, 3914)]);
    }
}
