//! The sink's data streams: a thread for each, checking chunks and writing them in place,
//! in order where the output needs it.

use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use twox_hash::XxHash3_128;
use wirespeed::Connection;

use super::State;
use super::large::{SinkFile, file, finish};
use crate::direct::{self, AlignedBuf, Gather};
use crate::error::{FilesError, Result};
use crate::link::{self, Body, Link};
use crate::proto::{Arrival, ChunkFault, Msg, Violation};
use crate::shared::Shared;
use wirespeed::sync::Unpoison;

const BLOCK: usize = 4096;
/// Most bytes of a chunk gathered for one direct write.
const GATHER_MAX: usize = 16 << 20;

/// Accepts the source's data streams until the transfer is over, a thread for each.
pub(super) fn accept_data_streams<'s>(conn: &'s Connection, sh: &'s State<'s>, s: &'s thread::Scope<'s, '_>) {
    while !sh.over.load(Ordering::Relaxed) {
        // A short slice: the sink's end (a failure above all) waits for this thread to see it.
        match conn.accept_stream_timeout(Duration::from_millis(10)) {
            Ok(stream) => {
                let mut link = Link::new(stream, sh.wrapping);
                link.set_timeout(sh.stall);
                s.spawn(move || {
                    if let Err(e) = serve_data(&link, sh) {
                        sh.fail(e);
                    }
                });
            }
            Err(wirespeed::Error::Timeout(_)) => {}
            Err(e) => {
                if !sh.over.load(Ordering::Relaxed) {
                    sh.fail(e.into());
                }
                return;
            }
        }
    }
}

pub(super) fn serve_data(stream: &Link, sh: &State) -> Result<()> {
    let mut aligned = AlignedBuf::default();
    // Streams take turns with files: one may wait long for its next chunk while others move.
    while let Some((msg, body)) = stream.recv_start_while(sh.alive())? {
        if let Msg::Eof { id, size } = msg {
            let f = file(sh, id)?;
            f.state.lock().unpoison().eof(size)?;
            if let Some(part) = f.part_file(sh)? {
                part.file.set_len(size).map_err(|e| FilesError::io(&f.part, e))?;
            }
            finish(sh, &f)?;
            continue;
        }
        let Some((id, index, how)) = Arrival::of(&msg) else {
            return Err(link::unexpected("on a data stream", &msg));
        };
        let f = file(sh, id)?;
        let fault = |fault| FilesError::from(Violation::Chunk { id, index, fault });
        let (span, streamed) = {
            let mut st = f.state.lock().unpoison();
            (st.arrive(index, how)?, st.streamed())
        };
        // A stream output, and a streamed file anywhere, are written in order.
        let ordered = streamed || sh.stream.is_some();
        if ordered {
            f.wait_turn(index, sh)?;
        }
        let got = match how {
            Arrival::Data => {
                let (n, sum) = write_chunk(stream, body, span.len, sh, &f, span.offset, &mut aligned)?;
                f.state.lock().unpoison().check_len(index, span, n)?;
                match stream.recv_start()? {
                    Some((Msg::ChunkSum { sum: expected }, b)) if b.wire_len == 0 => {
                        if sum != expected {
                            return Err(FilesError::Checksum { path: f.dest.display().to_string(), index });
                        }
                    }
                    _ => return Err(fault(ChunkFault::NoChecksum)),
                }
                n
            }
            _ if body.wire_len != 0 => return Err(fault(ChunkFault::UnexpectedBytes)),
            Arrival::Same if sh.stream.is_some() => return Err(fault(ChunkFault::SameInStream)),
            Arrival::Same => {
                sh.progress.add_reused(span.len);
                span.len
            }
            Arrival::Hole => {
                // A hole in a stream output is its zeros.
                if let Some(out) = &sh.stream {
                    write_stream(out, &vec![0; span.len as usize])?;
                }
                span.len
            }
        };
        if ordered {
            f.pass_turn();
        }
        sh.progress.add_bytes(got);
        if f.state.lock().unpoison().written() {
            finish(sh, &f)?;
        }
    }
    // The source finished this stream: everything it sent is here. Finishing ours lets both
    // drop it cleanly; a source that dropped it already has reset it, which loses nothing.
    let _ = stream.finish();
    Ok(())
}

/// Streams one chunk's body (at most `max` bytes) into place; returns its length and checksum.
pub(super) fn write_chunk(
    stream: &Link,
    body: Body,
    max: u64,
    sh: &State,
    f: &SinkFile,
    offset: u64,
    aligned: &mut AlignedBuf,
) -> Result<(u64, u128)> {
    let mut hasher = XxHash3_128::new();
    let out = f.part_file(sh)?;
    let io = |e| FilesError::io(&f.part, e);
    if let Some(part) = out.as_deref()
        && let Some(direct) = &part.direct
    {
        // Direct writes come from aligned memory: the body gathers there first.
        let write = |data: &[u8], at| {
            if f.entry.sparse {
                write_sparse(data, at, |piece, at| direct::write_at(direct, &part.file, piece, at))
            } else {
                direct::write_at(direct, &part.file, data, at)
            }
        };
        let mut gather = Gather::new(aligned, (max as usize).min(GATHER_MAX), offset, write);
        let n = stream.read_body(body, max, |buf| {
            hasher.write(buf);
            gather.push(buf).map_err(io)
        })?;
        gather.flush().map_err(io)?;
        return Ok((n, hasher.finish_128()));
    }
    let mut at = offset;
    let n = stream.read_body(body, max, |buf| {
        hasher.write(buf);
        match out.as_deref() {
            None => write_stream(sh.stream.as_ref().expect("no part file means a stream"), buf)?,
            Some(part) if f.entry.sparse => {
                write_sparse(buf, at, |piece, at| part.file.write_all_at(piece, at)).map_err(io)?
            }
            Some(part) => part.file.write_all_at(buf, at).map_err(io)?,
        }
        at += buf.len() as u64;
        Ok(())
    })?;
    Ok((n, hasher.finish_128()))
}

pub(super) fn write_stream(out: &Shared<Box<dyn Write + Send>>, data: &[u8]) -> Result<()> {
    let mut out = out.lock();
    out.write_all(data).map_err(|e| FilesError::io(Path::new("<output stream>"), e))
}

/// Writes `buf` at `offset` with `write`, skipping whole zero blocks so holes stay holes;
/// each run of blocks with data goes out in one write.
pub(super) fn write_sparse(
    buf: &[u8],
    offset: u64,
    mut write: impl FnMut(&[u8], u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut run = None; // where the current run of blocks with data starts
    let mut i = 0;
    while i < buf.len() {
        // Up to the next block boundary of the file.
        let end = (((offset as usize + i) / BLOCK + 1) * BLOCK - offset as usize).min(buf.len());
        match (buf[i..end].iter().any(|b| *b != 0), run) {
            (true, None) => run = Some(i),
            (false, Some(r)) => {
                write(&buf[r..i], offset + r as u64)?;
                run = None;
            }
            _ => {}
        }
        i = end;
    }
    if let Some(r) = run {
        write(&buf[r..], offset + r as u64)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_writes_skip_zero_blocks_and_join_runs_of_data() {
        // Starting 100 bytes into a block: a partial block of data, two full ones, a zero
        // block, then data again to the end.
        let mut buf = vec![1u8; BLOCK - 100 + 2 * BLOCK];
        buf.extend(vec![0u8; BLOCK]);
        buf.extend(vec![2u8; 10]);
        let mut writes = Vec::new();
        write_sparse(&buf, 100, |piece, at| {
            writes.push((at, piece.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(writes, [(100, 3 * BLOCK - 100), (4 * BLOCK as u64, 10)]);
    }
}
