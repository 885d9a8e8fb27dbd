//! The source's data streams: chunk jobs read, checksummed and sent, each thread on a stream
//! of its own, paced by `--bwlimit`.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::thread;

use twox_hash::XxHash3_128;
use wirespeed::Connection;

use crate::direct::{self, AlignedBuf};
use crate::error::{FilesError, Result};
use crate::link::Link;
use crate::proto::Msg;

use super::{Job, SrcFile, State};

/// One data stream: serves jobs until none are left, then finishes the stream.
pub(super) fn serve_jobs(conn: &Connection, shared: &State) -> Result<()> {
    let mut stream: Option<Link> = None;
    let mut w = Worker { buf: Vec::new(), aligned: AlignedBuf::default(), pace: Pace::new(shared.stream_rate) };
    let r = (|| {
        while let Some(job) = shared.next_job() {
            let s = match &mut stream {
                Some(s) => s,
                None => {
                    // A slow sink may hold credit back for a while; only the stall timeout ends it.
                    let mut link = Link::new(conn.open_stream()?, shared.wrapping);
                    link.set_timeout(shared.stall);
                    stream.insert(link)
                }
            };
            match job {
                Job::Chunk { file, index, have } => send_chunk(s, &file, index, have, shared, &mut w)?,
                Job::Whole(file) => send_whole(s, &file, shared, &mut w)?,
            }
        }
        if let Some(s) = &stream {
            s.close()?;
        }
        Ok(())
    })();
    if r.is_err() {
        shared.stop();
    }
    r
}

/// What each sending thread keeps from job to job.
pub(super) struct Worker {
    pub(super) buf: Vec<u8>,
    /// For direct reads.
    pub(super) aligned: AlignedBuf,
    pub(super) pace: Pace,
}

pub(super) fn send_chunk(
    s: &Link,
    f: &SrcFile,
    index: u32,
    have: Option<u128>,
    sh: &State,
    w: &mut Worker,
) -> Result<()> {
    let offset = index as u64 * sh.chunk;
    let len = (f.size - offset).min(sh.chunk) as usize;
    let (id, file) = (f.id, f.file.as_ref().expect("sized files are open"));
    if f.sparse && is_hole(file, offset, len as u64) {
        s.send(&Msg::Hole { id, index }, &[])?;
    } else if let Some(have) = have {
        // The sink may hold this chunk already: read and compare before sending anything.
        let buf = &mut w.buf;
        buf.resize(len, 0);
        file.read_exact_at(buf, offset).map_err(|e| changed_or_io(&f.path, e))?;
        if XxHash3_128::oneshot(buf) == have {
            s.send(&Msg::Same { id, index }, &[])?;
            sh.progress.add_reused(len as u64);
        } else {
            w.pace.wait(len as u64);
            send_buffered(s, id, index, buf)?;
        }
    } else {
        return send_read(s, f, index, sh, w);
    }
    sh.progress.add_bytes(len as u64);
    Ok(())
}

/// Reads chunk `index` of a sized file straight onto the stream (into transport memory where
/// it can), checksumming it on the way; its checksum follows. With `--direct` it is read
/// into aligned memory instead, past the page cache.
pub(super) fn send_read(s: &Link, f: &SrcFile, index: u32, sh: &State, w: &mut Worker) -> Result<()> {
    let offset = index as u64 * sh.chunk;
    let len = (f.size - offset).min(sh.chunk) as usize;
    let file = f.file.as_ref().expect("sized files are open");
    w.pace.wait(len as u64);
    if let Some(direct) = f.direct(sh) {
        let data = direct::read_at(direct, file, &mut w.aligned, len, offset).map_err(|e| changed_or_io(&f.path, e))?;
        send_buffered(s, f.id, index, data)?;
    } else {
        let mut sum = XxHash3_128::new();
        let mut at = offset;
        let read = s.send_filled(&Msg::Chunk { id: f.id, index }, len, &mut w.buf, |piece| {
            file.read_exact_at(piece, at)?;
            sum.write(piece);
            at += piece.len() as u64;
            Ok(())
        })?;
        read.map_err(|e| changed_or_io(&f.path, e))?;
        s.send(&Msg::ChunkSum { sum: sum.finish_128() }, &[])?;
    }
    sh.progress.add_bytes(len as u64);
    Ok(())
}

/// Sends a chunk already in memory, and its checksum.
pub(super) fn send_buffered(s: &Link, id: u64, index: u32, data: &[u8]) -> Result<()> {
    s.send(&Msg::Chunk { id, index }, &[data])?;
    s.send(&Msg::ChunkSum { sum: XxHash3_128::oneshot(data) }, &[])
}

/// Sends a file's chunks in order on one stream; standard input ends where it ends, with `Eof`.
pub(super) fn send_whole(s: &Link, f: &SrcFile, sh: &State, w: &mut Worker) -> Result<()> {
    let reader = match (&f.file, sh.reader) {
        (Some(_), _) => {
            // A sized file ends with its last chunk.
            for index in 0..f.size.div_ceil(sh.chunk) as u32 {
                send_read(s, f, index, sh, w)?;
            }
            return Ok(());
        }
        (None, Some(reader)) => reader,
        (None, None) => return Err(FilesError::Internal("a streamed file without a stream")),
    };
    let mut reader = reader.lock();
    let (buf, mut offset) = (&mut w.buf, 0u64);
    for index in 0.. {
        buf.resize(sh.chunk as usize, 0);
        let n = fill(&mut *reader, buf).map_err(|e| FilesError::io(Path::new("<input stream>"), e))?;
        if n == 0 {
            break;
        }
        w.pace.wait(n as u64);
        send_buffered(s, f.id, index, &buf[..n])?;
        offset += n as u64;
        sh.progress.add_bytes(n as u64);
    }
    s.send(&Msg::Eof { id: f.id, size: offset }, &[])
}

/// Holds one stream to its share of `--bwlimit`.
pub(super) struct Pace {
    pub(super) rate: Option<u64>,
    pub(super) start: std::time::Instant,
    pub(super) sent: u64,
}

impl Pace {
    pub(super) fn new(rate: Option<u64>) -> Self {
        Pace { rate, start: std::time::Instant::now(), sent: 0 }
    }

    /// Sleeps until sending `n` more bytes keeps within the rate.
    pub(super) fn wait(&mut self, n: u64) {
        let Some(rate) = self.rate else { return };
        let due = std::time::Duration::from_secs_f64(self.sent as f64 / rate as f64);
        if let Some(ahead) = due.checked_sub(self.start.elapsed()) {
            thread::sleep(ahead);
        }
        self.sent += n;
    }
}

/// Reads until `buf` is full or the input ends.
pub(super) fn fill(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

pub(super) fn changed_or_io(path: &Path, e: std::io::Error) -> FilesError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        FilesError::Changed { path: path.display().to_string() }
    } else {
        FilesError::io(path, e)
    }
}

/// True when `[offset, offset+len)` holds no data (a hole), by `SEEK_DATA`.
pub(super) fn is_hole(file: &File, offset: u64, len: u64) -> bool {
    // SAFETY: lseek on a descriptor we own; it only moves the file offset, which pread ignores.
    let data = unsafe { libc::lseek(file.as_raw_fd(), offset as libc::off_t, libc::SEEK_DATA) };
    if data < 0 {
        // ENXIO: no data at or after offset. Any other error: assume data, read it.
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
    }
    data as u64 >= offset + len
}
