//! Large files at the sink: registered and asked for with a `Want`, their chunks counted
//! as they arrive into a hidden part file, which the last one renames into place.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use twox_hash::XxHash3_128;

use super::{State, finish_file, set_metadata};
use crate::direct::{self};
use crate::error::{FilesError, Result};
use crate::link::Link;
use crate::paths::part_path;
use crate::proto::{ChunkFault, Entry, Msg, Receipt, STREAMED, Violation};
use wirespeed::sync::Unpoison;

/// How often a chunk waiting for its turn looks whether the transfer failed.
const TURN_POLL: Duration = Duration::from_millis(100);

/// A large file being received.
pub(super) struct SinkFile {
    pub(super) entry: Entry,
    pub(super) dest: PathBuf,
    pub(super) part: PathBuf,
    /// The part file, opened when the first bytes arrive.
    pub(super) out: Mutex<Option<Arc<PartFile>>>,
    /// With `--resume` the part file may start as a copy of an existing destination,
    pub(super) base: Option<PathBuf>,
    /// or as the part file an interrupted copy left, kept rather than truncated.
    pub(super) resumed_part: bool,
    /// Which chunks came and were written: the protocol's rules for this file.
    pub(super) state: Mutex<Receipt>,
    /// Signalled as a stream output moves on to its next chunk.
    pub(super) turn: Condvar,
}

/// A part file being written, and with `--direct` the same file opened for direct writes
/// (`None` where its filesystem refuses them).
pub(super) struct PartFile {
    pub(super) file: File,
    pub(super) direct: Option<File>,
}

impl SinkFile {
    /// The part file, opened (or, with `--resume`, copied from the destination) on first
    /// use; `None` when writing to standard output.
    pub(super) fn part_file(&self, sh: &State) -> Result<Option<Arc<PartFile>>> {
        if sh.stream.is_some() {
            return Ok(None);
        }
        let mut out = self.out.lock().unpoison();
        if out.is_none() {
            if let Some(base) = &self.base {
                fs::copy(base, &self.part).map_err(|e| FilesError::io(&self.part, e))?;
            }
            let file = self.open_part()?;
            let direct = (sh.direct && self.entry.size >= direct::MIN_SIZE).then(|| direct::reopen(&file, true));
            *out = Some(Arc::new(PartFile { file, direct: direct.flatten() }));
        }
        Ok(out.clone())
    }

    /// The part file, emptied unless it carries chunks over from an interrupted copy.
    pub(super) fn open_part(&self) -> Result<File> {
        open_part(&self.part, &self.dest, &self.entry, self.base.is_none() && !self.resumed_part)
    }

    /// Waits until chunk `index` is the next a stream output writes: the chunks of a file of
    /// known size may come over any data stream, so each waits for its turn, unread. Those
    /// of a streamed file come in order on one stream, and any other order is an error.
    pub(super) fn wait_turn(&self, index: u32, sh: &State) -> Result<()> {
        let mut st = self.state.lock().unpoison();
        // When the file last moved on; it may stall no longer than the stall timeout.
        let mut moved = (st.next(), Instant::now());
        while !st.is_turn(index)? {
            if st.next() != moved.0 {
                moved = (st.next(), Instant::now());
            } else if moved.1.elapsed() >= sh.stall {
                return Err(Violation::Chunk { id: self.entry.id, index, fault: ChunkFault::Starved }.into());
            }
            if sh.over.load(Ordering::Relaxed) || sh.failed.lock().unpoison().is_some() {
                return Err(FilesError::Stopped);
            }
            st = self.turn.wait_timeout(st, TURN_POLL).unpoison().0;
        }
        Ok(())
    }

    /// A stream output's chunk is written: the next may go.
    pub(super) fn pass_turn(&self) {
        self.state.lock().unpoison().pass_turn();
        self.turn.notify_all();
    }
}

/// Registers a large file and asks the source for it.
pub(super) fn ask(control: &Link, dest: PathBuf, e: Entry, sh: &State) -> Result<()> {
    let part = part_path(&dest);
    let receipt = Receipt::new(e.id, e.size, sh.chunk)?;
    if receipt.streamed() {
        sh.streaming.fetch_add(1, Ordering::Relaxed);
    }
    let (mut have, mut base) = (Vec::new(), None);
    if sh.resume && sh.stream.is_none() && e.size != STREAMED {
        // Chunks already written by an interrupted copy, or a finished earlier one, are
        // checked against the source's checksums rather than sent again.
        if let Some(sums) = chunk_sums(&part, e.size, sh.chunk)? {
            have = sums;
        } else if let Some(sums) = chunk_sums(&dest, e.size, sh.chunk)? {
            have = sums;
            base = Some(dest.clone());
        }
    }
    let file = SinkFile {
        dest,
        part,
        out: Mutex::new(None),
        resumed_part: !have.is_empty() && base.is_none(),
        base,
        state: Mutex::new(receipt),
        turn: Condvar::new(),
        entry: e,
    };
    let id = file.entry.id;
    *sh.pending.lock().unpoison() += 1;
    if sh.files.lock().unpoison().insert(id, Arc::new(file)).is_some() {
        return Err(Violation::FileTwice(id).into());
    }
    control.send(&Msg::Want { id, ordered: sh.stream.is_some(), have }, &[])
}

/// Opens the part file of `dest`; errors name `dest`, as the user gave it (a missing or
/// read-only directory is theirs to see, not our part name).
pub(super) fn open_part(part: &Path, dest: &Path, e: &Entry, truncate: bool) -> Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(e.mode & 0o777)
        .open(part)
        .map_err(|err| FilesError::io(dest, err))?;
    if e.size != STREAMED {
        // Holes stay holes: untouched blocks read as zeros.
        f.set_len(e.size).map_err(|err| FilesError::io(dest, err))?;
    }
    Ok(f)
}

/// The checksum of each chunk of `path` if it exists with the expected length.
pub(super) fn chunk_sums(path: &Path, size: u64, chunk: u64) -> Result<Option<Vec<(u32, u128)>>> {
    let Ok(md) = fs::symlink_metadata(path) else { return Ok(None) };
    if !md.is_file() || md.len() != size {
        return Ok(None);
    }
    let f = File::open(path).map_err(|e| FilesError::io(path, e))?;
    let mut buf = vec![0u8; chunk as usize];
    let mut sums = Vec::new();
    for index in 0..size.div_ceil(chunk) {
        let off = index * chunk;
        let n = (size - off).min(chunk) as usize;
        f.read_exact_at(&mut buf[..n], off).map_err(|e| FilesError::io(path, e))?;
        sums.push((index as u32, XxHash3_128::oneshot(&buf[..n])));
    }
    Ok(Some(sums))
}

pub(super) fn file(sh: &State, id: u64) -> Result<Arc<SinkFile>> {
    let files = sh.files.lock().unpoison();
    files.get(&id).cloned().ok_or(Violation::UnknownFile(id).into())
}

pub(super) fn finish(sh: &State, f: &SinkFile) -> Result<()> {
    f.state.lock().unpoison().finish()?;
    if f.entry.size == STREAMED {
        sh.streaming.fetch_sub(1, Ordering::Relaxed);
    }
    if let Some(out) = &sh.stream {
        out.lock().flush().map_err(|e| FilesError::io(Path::new("<output stream>"), e))?;
    } else {
        let out = f.out.lock().unpoison().clone();
        match out.as_deref() {
            Some(part) => finish_file(&part.file, &f.part, &f.dest, &f.entry, sh.preserve)?,
            // Every chunk was already there in the destination.
            None if f.base.is_some() && sh.preserve => set_metadata(None, &f.dest, &f.entry)?,
            None if f.base.is_some() => {}
            None => {
                let file = f.open_part()?;
                finish_file(&file, &f.part, &f.dest, &f.entry, sh.preserve)?;
            }
        }
    }
    // Done with: its descriptor closes now rather than at the end of the transfer, so a
    // tree of many files stays within the descriptor limit.
    sh.files.lock().unpoison().remove(&f.entry.id);
    f.out.lock().unpoison().take();
    sh.progress.file_done();
    *sh.pending.lock().unpoison() -= 1;
    sh.changed.notify_all();
    Ok(())
}
