//! Small files that arrived inline with their entries, written by a few threads while the
//! control thread reads on. Work goes out in units: a run of files in one directory, each
//! named relative to that directory's descriptor, since on tmpfs a path walk per file costs
//! about as much as the write.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, AtFlags, OFlag, openat, renameat};
use nix::sys::stat::Mode;
use nix::unistd::{UnlinkatFlags, linkat, unlinkat};
use twox_hash::XxHash3_128;
use wirespeed::Buf;

use super::{State, set_metadata};
use crate::error::{FilesError, Result};
use crate::paths::part_name;
use crate::proto::Entry;
use wirespeed::sync::Unpoison;

/// Files per unit: enough to pay for handing it over, few enough to share a batch out.
const UNIT_FILES: usize = 16;
/// Units queued ahead of the writers.
pub(super) const QUEUE: usize = 8;

/// Inline files of one directory, and the batch body that holds their bytes.
pub(super) struct Unit {
    dir: PathBuf,
    files: Vec<Small>,
    body: Arc<Buf>,
}

/// One file of a unit: its name in the unit's directory, entry, and bytes in the body.
struct Small {
    name: OsString,
    entry: Entry,
    bytes: Range<usize>,
}

/// Gathers one batch's inline files into units and queues them for the writers.
pub(super) struct Units<'a> {
    queue: &'a mpsc::SyncSender<Unit>,
    body: Arc<Buf>,
    current: Option<Unit>,
}

impl<'a> Units<'a> {
    pub(super) fn new(queue: &'a mpsc::SyncSender<Unit>, body: Buf) -> Self {
        Units { queue, body: Arc::new(body), current: None }
    }

    pub(super) fn body(&self) -> &[u8] {
        &self.body
    }

    /// Adds a file bound for `dest` whose bytes are `bytes` of the batch body.
    pub(super) fn push(&mut self, dest: &Path, entry: Entry, bytes: Range<usize>, sh: &State) -> Result<()> {
        let (Some(dir), Some(name)) = (dest.parent(), dest.file_name()) else {
            return Err(FilesError::Usage(format!("{}: not a place for a file", dest.display())));
        };
        // A bare name (`cp a b`) lies in the working directory.
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        if self.current.as_ref().is_some_and(|u| u.dir != dir || u.files.len() == UNIT_FILES) {
            self.flush(sh)?;
        }
        let unit = self.current.get_or_insert_with(|| Unit {
            dir: dir.to_path_buf(),
            files: Vec::with_capacity(UNIT_FILES),
            body: self.body.clone(),
        });
        unit.files.push(Small { name: name.to_owned(), entry, bytes });
        Ok(())
    }

    /// Queues the unit being gathered; the control thread calls this before anything that
    /// must happen after the files so far, and at the end of the batch.
    pub(super) fn flush(&mut self, sh: &State) -> Result<()> {
        let Some(unit) = self.current.take() else { return Ok(()) };
        *sh.pending.lock().unpoison() += unit.files.len() as u64;
        self.queue.send(unit).map_err(|_| FilesError::Stopped)
    }
}

/// One writer: takes units until the queue closes.
pub(super) fn write_units(queue: &Mutex<mpsc::Receiver<Unit>>, sh: &State) {
    let mut unnamed = true;
    loop {
        let unit = queue.lock().unpoison().recv();
        let Ok(unit) = unit else { return };
        let n = unit.files.len() as u64;
        // After a failure the rest is only counted off, so the control thread can finish.
        if !sh.over.load(Ordering::Relaxed)
            && let Err(e) = write_unit(&unit, sh, &mut unnamed)
        {
            sh.over.store(true, Ordering::Relaxed);
            sh.fail(e);
        }
        *sh.pending.lock().unpoison() -= n;
        sh.changed.notify_all();
    }
}

fn write_unit(unit: &Unit, sh: &State, unnamed: &mut bool) -> Result<()> {
    let io = |e: Errno| FilesError::io(&unit.dir, e.into());
    let dir = openat(AT_FDCWD, &unit.dir, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(io)?;
    for f in &unit.files {
        let target = Target { dir: &dir, dir_path: &unit.dir, name: &f.name };
        let data = &unit.body[f.bytes.clone()];
        if Some(XxHash3_128::oneshot(data)) != f.entry.inline {
            return Err(FilesError::Checksum { path: target.dest().display().to_string(), index: 0 });
        }
        if sh.fresh {
            target.create(target.name, &f.entry, data, sh.preserve)?;
        } else {
            target.write(&f.entry, data, sh.preserve, unnamed)?;
        }
        sh.progress.add_bytes(data.len() as u64);
        sh.progress.file_done();
    }
    Ok(())
}

/// Where one file goes: a name in an open directory.
struct Target<'a> {
    dir: &'a OwnedFd,
    dir_path: &'a Path,
    name: &'a OsStr,
}

impl Target<'_> {
    fn dest(&self) -> PathBuf {
        self.dir_path.join(self.name)
    }

    fn io(&self, e: Errno) -> FilesError {
        FilesError::io(&self.dest(), e.into())
    }

    /// Writes the file and puts it in place. Unnamed (`O_TMPFILE`) and then linked in where
    /// the filesystem and kernel allow it, so nothing half-written ever has a name; otherwise
    /// under its part name, then renamed. `unnamed` turns off for good once that fails.
    fn write(&self, e: &Entry, data: &[u8], preserve: bool, unnamed: &mut bool) -> Result<()> {
        let mode = Mode::from_bits_truncate(e.mode & 0o777);
        if *unnamed {
            match openat(self.dir, c".", OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC, mode) {
                Ok(fd) => {
                    let f = self.fill(File::from(fd), e, data, preserve)?;
                    match linkat(&f, c"", self.dir, self.name, AtFlags::AT_EMPTY_PATH) {
                        Ok(()) => return Ok(()),
                        // Something has the name: link under the part name, rename over it.
                        Err(Errno::EEXIST) => return self.link_and_rename(&f),
                        // Before Linux 6.10 only a privileged process may link an open file.
                        Err(Errno::EPERM | Errno::ENOENT) => *unnamed = false,
                        Err(err) => return Err(self.io(err)),
                    }
                }
                // No O_TMPFILE on this filesystem, or in this kernel.
                Err(Errno::EOPNOTSUPP | Errno::EISDIR | Errno::EINVAL) => *unnamed = false,
                Err(err) => return Err(self.io(err)),
            }
        }
        let part = part_name(self.name.as_bytes());
        self.create(&part, e, data, preserve)?;
        renameat(self.dir, part.as_os_str(), self.dir, self.name).map_err(|err| self.io(err))
    }

    /// Writes the file as `name` in the directory, over anything there: its part name, or its
    /// own name in a tree still under its part name (see [`super::fresh`]).
    fn create(&self, name: &OsStr, e: &Entry, data: &[u8], preserve: bool) -> Result<()> {
        let mode = Mode::from_bits_truncate(e.mode & 0o777);
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let f = File::from(openat(self.dir, name, flags, mode).map_err(|err| self.io(err))?);
        self.fill(f, e, data, preserve).map(drop)
    }

    fn fill(&self, mut f: File, e: &Entry, data: &[u8], preserve: bool) -> Result<File> {
        f.write_all(data).map_err(|err| FilesError::io(&self.dest(), err))?;
        if preserve {
            set_metadata(Some(&f), &self.dest(), e)?;
        }
        Ok(f)
    }

    fn link_and_rename(&self, f: &File) -> Result<()> {
        let part = part_name(self.name.as_bytes());
        // A part file left by an interrupted copy is stale: this one is complete.
        match unlinkat(self.dir, part.as_os_str(), UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(err) => return Err(self.io(err)),
        }
        linkat(f, c"", self.dir, part.as_os_str(), AtFlags::AT_EMPTY_PATH).map_err(|err| self.io(err))?;
        renameat(self.dir, part.as_os_str(), self.dir, self.name).map_err(|err| self.io(err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(mode: u32) -> Entry {
        Entry {
            id: 0,
            kind: crate::proto::Kind::File,
            path: b"f".to_vec(),
            size: 0,
            mode,
            mtime_sec: 0,
            mtime_nsec: 0,
            sparse: false,
            target: Vec::new(),
            inline: None,
        }
    }

    /// Writes `data` as `f` in `dir` each way, over whatever is there, and checks that only
    /// the finished file is left.
    #[test]
    fn both_ways_replace_what_is_there_and_leave_no_part_file() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = openat(AT_FDCWD, tmp.path(), OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        let target = Target { dir: &dir, dir_path: tmp.path(), name: OsStr::new("f") };
        for (round, unnamed) in [true, true, false, false].into_iter().enumerate() {
            if round > 0 {
                // Nor may a part file left by an interrupted copy get in the way.
                std::fs::write(tmp.path().join(".f.wirespeed-part"), b"stale").unwrap();
            }
            let data = format!("round {round}");
            let mut way = unnamed;
            target.write(&entry(0o100640), data.as_bytes(), false, &mut way).unwrap();
            assert_eq!(std::fs::read(tmp.path().join("f")).unwrap(), data.as_bytes());
            let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|d| d.unwrap().file_name()).collect();
            assert_eq!(names, ["f"], "round {round}");
        }
    }
}
