//! A directory tree copied to a name that does not exist yet is built under its hidden part
//! name beside it and renamed into place once every file in it has verified. Nothing under
//! the part name looks complete, so the small files in it are created straight under their
//! own names: one create, where a file written into an existing directory takes an unnamed
//! create and a link.

use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, Flock, FlockArg, RenameFlags, renameat2};

use crate::error::{FilesError, Result};
use crate::paths::part_path;

pub(super) struct FreshTree {
    root: PathBuf,
    part: PathBuf,
    /// Held while the tree is built: a second copy to the same new name is refused instead
    /// of writing into the same part directory. `None` where the filesystem has no locks.
    _lock: Option<Flock<File>>,
}

impl FreshTree {
    /// Starts building `root` under its part name, or `None` when `root` already exists
    /// (a copy into it writes each file under its own part name). With `resume`, what an
    /// interrupted copy left in the part directory stays; otherwise it goes first.
    pub(super) fn begin(root: &Path, resume: bool) -> Result<Option<Self>> {
        match fs::symlink_metadata(root) {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            _ => return Ok(None),
        }
        let part = part_path(root);
        loop {
            let created = match fs::create_dir(&part) {
                Ok(()) => true,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
                // Named as the user gave it: a missing parent is theirs to see.
                Err(e) => return Err(FilesError::io(root, e)),
            };
            // O_NOFOLLOW: a symlink planted under the part name is refused, not followed.
            let dir = fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                .open(&part)
                .map_err(|e| FilesError::io(&part, e))?;
            let lock = match Flock::lock(dir, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => Some(lock),
                Err((_, Errno::EWOULDBLOCK)) => {
                    return Err(FilesError::Usage(format!(
                        "{}: another copy is writing there (in {})",
                        root.display(),
                        part.display()
                    )));
                }
                Err(_) => None,
            };
            if created || resume {
                return Ok(Some(FreshTree { root: root.to_path_buf(), part, _lock: lock }));
            }
            // Left by an interrupted copy that is not being resumed: start afresh.
            fs::remove_dir_all(&part).map_err(|e| FilesError::io(&part, e))?;
        }
    }

    /// Where the tree is built until it is complete.
    pub(super) fn building(&self) -> &Path {
        &self.part
    }

    /// Puts the complete tree in place, unless something took its name meanwhile.
    pub(super) fn finish(self) -> Result<()> {
        let moved = match renameat2(AT_FDCWD, &self.part, AT_FDCWD, &self.root, RenameFlags::RENAME_NOREPLACE) {
            // A filesystem without rename flags: the name was free when the copy began.
            Err(Errno::EINVAL) if fs::symlink_metadata(&self.root).is_err() => fs::rename(&self.part, &self.root),
            r => r.map_err(io::Error::from),
        };
        match moved {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(FilesError::Usage(format!(
                "{} appeared during the copy; the copy is in {}",
                self.root.display(),
                self.part.display()
            ))),
            Err(e) => Err(FilesError::io(&self.root, e)),
        }
    }
}
