//! Files written under a hidden name and renamed into place only once complete, so that nothing
//! half-written ever looks complete. A part file is locked while it is written: another writer
//! of the same name finds it busy, and a sweep tells a live part from one a killed process left.
//! An unfinished part is removed when dropped, and by [`remove_unfinished`], which a program's
//! SIGINT and SIGTERM handler calls before it ends.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use wirespeed::sync::Unpoison;

/// What an upload's part name ends in before its unique tag.
const UPLOAD_TAG: &str = ".wirespeed-upload-";

/// A file being written under a hidden name beside its destination, renamed into place only once whole ([`remove_unfinished`] cleans up after a crash).
pub struct PartFile {
    part: PathBuf,
    dest: PathBuf,
    /// Until committed; dropping it unregisters the path from the interrupt handler.
    registration: Option<Registration>,
}

impl PartFile {
    /// `.NAME.wirespeed-part` beside `dest`: one per destination, so the next writer replaces
    /// what a killed one left; a live writer holds it, and a second fails with `WouldBlock`.
    pub fn create(dest: &Path) -> std::io::Result<(PartFile, File)> {
        let part = crate::paths::part_path(dest);
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(&part)?;
        lock(&file)?;
        let part = PartFile::new(part, dest);
        file.set_len(0)?;
        Ok((part, file))
    }

    /// `.NAME.wirespeed-upload-TAG` beside `dest`, unique to this writer, so that concurrent
    /// writers of one name never share a file: the last rename wins, whole.
    pub fn create_unique(dest: &Path) -> std::io::Result<(PartFile, File)> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut name = OsString::from(".");
        name.push(dest.file_name().unwrap_or_else(|| "file".as_ref()));
        name.push(format!("{UPLOAD_TAG}{}-{}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
        let part = dest.with_file_name(name);
        let file = OpenOptions::new().write(true).create_new(true).open(&part)?;
        lock(&file)?;
        Ok((PartFile::new(part, dest), file))
    }

    fn new(part: PathBuf, dest: &Path) -> PartFile {
        let registration = Some(remove_on_interrupt(&part));
        PartFile { part, dest: dest.to_path_buf(), registration }
    }

    /// The hidden name it is written under.
    pub fn path(&self) -> &Path {
        &self.part
    }

    /// Syncs `file` (this part's, written in full) and renames it into place.
    pub fn commit(mut self, file: File) -> std::io::Result<()> {
        file.sync_all()?;
        std::fs::rename(&self.part, &self.dest)?;
        self.registration = None;
        Ok(())
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if self.registration.take().is_some() {
            let _ = std::fs::remove_file(&self.part);
        }
    }
}

fn lock(file: &File) -> std::io::Result<()> {
    file.try_lock().map_err(|e| match e {
        std::fs::TryLockError::WouldBlock => {
            std::io::Error::new(std::io::ErrorKind::WouldBlock, "in use by another writer")
        }
        std::fs::TryLockError::Error(e) => e,
    })
}

/// Removes the upload parts under `root` that no live writer holds and that are older than
/// `age` (a writer locks its part right after creating it).
pub fn sweep_uploads(root: &Path, age: Duration) -> usize {
    let mut removed = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            let name = e.file_name();
            if kind.is_dir() {
                stack.push(e.path());
            } else if kind.is_file() && is_upload_part(name.as_bytes()) && stale(&e.path(), age) {
                removed += usize::from(std::fs::remove_file(e.path()).is_ok());
            }
        }
    }
    removed
}

fn is_upload_part(name: &[u8]) -> bool {
    name.starts_with(b".") && name.windows(UPLOAD_TAG.len()).any(|w| w == UPLOAD_TAG.as_bytes())
}

fn stale(path: &Path, age: Duration) -> bool {
    let old = path
        .metadata()
        .and_then(|m| m.modified())
        .is_ok_and(|t| SystemTime::now().duration_since(t).is_ok_and(|d| d >= age));
    old && File::open(path).is_ok_and(|f| f.try_lock().is_ok())
}

/// The unfinished parts of this process, for [`remove_unfinished`].
static UNFINISHED: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Removes every part this process has not finished: for a signal handler, just before the
/// process ends, so that nothing half-written is left behind.
pub fn remove_unfinished() {
    for (_, path) in UNFINISHED.lock().unpoison().drain(..) {
        let _ = std::fs::remove_file(path);
    }
}

fn remove_on_interrupt(path: &Path) -> Registration {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    UNFINISHED.lock().unpoison().push((id, path.to_path_buf()));
    Registration(id)
}

/// Keeps a part on the list of unfinished ones until dropped.
struct Registration(u64);

impl Drop for Registration {
    fn drop(&mut self) {
        UNFINISHED.lock().unpoison().retain(|(id, _)| *id != self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_locked_while_written_and_gone_unless_committed() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("t.arrow");
        let (part, file) = PartFile::create(&dest).unwrap();
        let again = PartFile::create(&dest).err().expect("a second writer of one name");
        assert_eq!(again.kind(), std::io::ErrorKind::WouldBlock);
        assert!(part.path().exists());
        drop(file);
        drop(part);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "an unfinished part is removed");

        let (a, fa) = PartFile::create_unique(&dest).unwrap();
        let (b, fb) = PartFile::create_unique(&dest).unwrap();
        assert_ne!(a.path(), b.path());
        std::fs::write(a.path(), b"a").unwrap();
        std::fs::write(b.path(), b"b").unwrap();
        assert_eq!(sweep_uploads(dir.path(), Duration::ZERO), 0, "live parts stay");
        b.commit(fb).unwrap();
        a.commit(fa).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"a", "the last rename wins, whole");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        // A part a killed writer left: not locked, so swept once old enough.
        let left = dir.path().join(".t.arrow.wirespeed-upload-1-0");
        std::fs::write(&left, b"half").unwrap();
        assert_eq!(sweep_uploads(dir.path(), Duration::from_secs(3600)), 0, "too young");
        assert_eq!(sweep_uploads(dir.path(), Duration::ZERO), 1);
        assert!(!left.exists());
    }
}
