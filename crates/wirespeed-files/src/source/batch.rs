//! Small files and entries gathered into one control message, the files' bytes inline.

use std::fs::File;
use std::path::PathBuf;

use twox_hash::XxHash3_128;
use wirespeed::Recycler;

use crate::cached;
use crate::error::{FilesError, Result};
use crate::link::Link;
use crate::progress::Progress;
use crate::proto::{Entry, Msg};

/// A batch of entries is sent once its inline bytes or its header reach these sizes.
const BATCH_BODY: usize = 256 << 10;
const BATCH_HEADER: usize = 256 << 10;

/// A small file, open, that travels inline with its entry.
pub(super) struct Small {
    pub(super) path: PathBuf,
    pub(super) entry: Entry,
    pub(super) file: File,
}

/// Entries and their inline bytes, gathered into one message.
pub(super) struct Batch {
    pub(super) entries: Vec<Entry>,
    /// About what the entries' header will take; the exact size is not needed.
    pub(super) header_bytes: usize,
    pub(super) body: Vec<u8>,
    /// Where sent bodies come back once nothing holds them, so the walk reads files into
    /// memory already mapped rather than fresh pages, which cost a fault each.
    pub(super) spare: Recycler,
    /// Inline bytes over all batches.
    pub(super) inline_bytes: u64,
    /// The filesystem cannot read without waiting, so small files are read plainly.
    pub(super) plain_reads: bool,
}

impl Batch {
    /// Bodies kept for reuse: about as many as an in-process sink holds at once.
    const SPARE: usize = 16;

    pub(super) fn new() -> Self {
        Batch {
            entries: Vec::new(),
            header_bytes: 0,
            body: Vec::with_capacity(BATCH_BODY),
            spare: Recycler::new(Batch::SPARE),
            inline_bytes: 0,
            plain_reads: false,
        }
    }

    /// Adds a small file with its bytes. Without `wait`, one whose bytes are not in memory
    /// yet comes back instead (storage has begun reading them). One read when the size still
    /// holds: a file that grew since the walk is sent as it was at the walk's size, one that
    /// shrank as it is now.
    pub(super) fn add_small(&mut self, small: Small, wait: bool, progress: &Progress) -> Result<Option<Small>> {
        let Small { path, mut entry, file } = small;
        let start = self.body.len();
        self.body.reserve(entry.size as usize);
        let room = &mut self.body.spare_capacity_mut()[..entry.size as usize];
        let wait = wait || self.plain_reads;
        let read = match cached::read_start(&file, room, wait) {
            // It may only say that this filesystem cannot read without waiting.
            Err(_) if !wait => {
                self.plain_reads = true;
                cached::read_start(&file, room, true)
            }
            read => read,
        };
        let n = match read.map_err(|e| FilesError::io(&path, e))? {
            Some(n) => n,
            None => return Ok(Some(Small { path, entry, file })),
        };
        // SAFETY: `read_start` filled the first `n` bytes of the spare room.
        unsafe { self.body.set_len(start + n) };
        let data = &self.body[start..];
        entry.size = data.len() as u64;
        entry.inline = Some(XxHash3_128::oneshot(data));
        self.inline_bytes += entry.size;
        progress.add_total(entry.size);
        self.push(entry);
        Ok(None)
    }

    pub(super) fn full(&self) -> bool {
        self.body.len() >= BATCH_BODY || self.header_bytes >= BATCH_HEADER
    }

    pub(super) fn push(&mut self, e: Entry) {
        self.header_bytes += 60 + e.path.len() + e.target.len();
        self.entries.push(e);
    }

    pub(super) fn flush(&mut self, control: &Link, progress: &Progress) -> Result<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        let inline_files = self.entries.iter().filter(|e| e.inline.is_some()).count() as u64;
        let body = std::mem::replace(&mut self.body, self.spare.take_empty(BATCH_BODY));
        progress.add_bytes(body.len() as u64);
        control.send_owned(&Msg::Entries(std::mem::take(&mut self.entries)), self.spare.lend(body))?;
        for _ in 0..inline_files {
            progress.file_done();
        }
        self.header_bytes = 0;
        Ok(())
    }
}
