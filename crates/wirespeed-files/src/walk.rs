//! Walks a source path into entries: the root, then (with `recursive`) everything below it,
//! depth first, names sorted. Symlinks are entries, never followed below the root; devices,
//! fifos and sockets below the root are skipped. Below the root every name is opened
//! relative to its directory's descriptor (a path walk per file costs as much as reading a
//! small one), and a regular file is handed over open, so its entry and its bytes come from
//! the same file.

use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, fstat, fstatat, stat};

use crate::error::{FilesError, Result};
use crate::exclude::{Excludes, top_path};
use crate::proto::{Entry, Kind};

/// One thing found: where it is, and the entry that describes it (`inline` still unset).
pub(crate) struct Found {
    pub path: PathBuf,
    pub entry: Entry,
    /// The file, open, when the entry is a regular file.
    pub file: Option<File>,
}

/// How a walk goes.
pub(crate) struct Walk<'a> {
    /// Into directories, or the root alone.
    pub recursive: bool,
    /// Names left out below the root, matched at their paths seen from the top: `top`, then
    /// the entry's own path (see [`crate::exclude`]).
    pub excludes: &'a Excludes,
    pub top: &'a [u8],
}

/// Calls `visit` for `root`, its entry at `rel`, and, if it is a directory and the walk is
/// recursive, for all below it. Entry ids go from `next_id` on, which it leaves past the last,
/// so several roots can share one transfer.
pub(crate) fn walk(
    root: &Path,
    rel: Vec<u8>,
    next_id: &mut u64,
    how: &Walk,
    visit: impl FnMut(Found) -> Result<()>,
) -> Result<()> {
    let io = |e: nix::Error| FilesError::io(root, e.into());
    let opened = match root_kind(root, how.recursive)? {
        Kind::Dir => {
            let dir = Dir::open(root, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty());
            let dir = dir.map_err(io)?;
            Opened::Dir(fstat(&dir).map_err(io)?, dir)
        }
        Kind::File => {
            let file = File::open(root).map_err(|e| FilesError::io(root, e))?;
            let st = fstat(&file).map_err(io)?;
            if kind(&st) != Some(Kind::File) {
                return Err(not_copied(root)); // swapped since the stat
            }
            Opened::File(st, file)
        }
        Kind::Symlink => return Err(not_copied(root)), // stat follows links: never here
    };
    let mut walker = Walker { next_id: *next_id, stack: Vec::new(), visit };
    walker.emit(root.to_path_buf(), rel, opened)?;
    let skip = |p: &Pending, is_dir: bool| {
        !how.excludes.is_empty() && how.excludes.excludes(&top_path(how.top, &p.rel), is_dir)
    };
    while let Some(p) = walker.stack.pop() {
        if let Some(opened) = open_below(&p, skip)? {
            walker.emit(p.path, p.rel, opened)?;
        }
    }
    *next_id = walker.next_id;
    Ok(())
}

/// Whether `root` can be copied as asked: it exists, and is a directory only when
/// `recursive`.
pub(crate) fn check_root(root: &Path, recursive: bool) -> Result<()> {
    root_kind(root, recursive).map(drop)
}

/// What `root` is. A symlink named on the command line is followed, as cp and scp do.
fn root_kind(root: &Path, recursive: bool) -> Result<Kind> {
    match kind(&stat(root).map_err(|e| FilesError::io(root, e.into()))?) {
        Some(Kind::Dir) if !recursive => Err(FilesError::Usage(format!("{} is a directory (use -r)", root.display()))),
        Some(k) => Ok(k),
        None => Err(not_copied(root)),
    }
}

/// A name below the root, listed but not yet opened.
struct Pending {
    path: PathBuf,
    rel: Vec<u8>,
    dir: Rc<Dir>,
    name: CString,
    /// What the directory listing says it is, when it says.
    hint: Option<Type>,
}

enum Opened {
    File(FileStat, File),
    Dir(FileStat, Dir),
    Symlink(FileStat, Vec<u8>),
}

struct Walker<F> {
    next_id: u64,
    /// Reverse order, so popping gives names sorted.
    stack: Vec<Pending>,
    visit: F,
}

impl<F: FnMut(Found) -> Result<()>> Walker<F> {
    fn emit(&mut self, path: PathBuf, rel: Vec<u8>, opened: Opened) -> Result<()> {
        let id = self.next_id;
        self.next_id += 1;
        match opened {
            Opened::File(st, file) => {
                let entry = entry(id, Kind::File, rel, &st, Vec::new());
                (self.visit)(Found { path, entry, file: Some(file) })
            }
            Opened::Symlink(st, target) => {
                (self.visit)(Found { path, entry: entry(id, Kind::Symlink, rel, &st, target), file: None })
            }
            Opened::Dir(st, dir) => {
                let entry = entry(id, Kind::Dir, rel.clone(), &st, Vec::new());
                (self.visit)(Found { path: path.clone(), entry, file: None })?;
                self.list(path, rel, dir)
            }
        }
    }

    fn list(&mut self, path: PathBuf, rel: Vec<u8>, mut dir: Dir) -> Result<()> {
        let mut names = Vec::new();
        for item in dir.iter() {
            let item = item.map_err(|e| FilesError::io(&path, e.into()))?;
            let name = item.file_name();
            let hint = item.file_type();
            if name == c"." || name == c".." || hint.is_some_and(|t| !copied(t)) {
                continue;
            }
            names.push((name.to_owned(), hint));
        }
        let dir = Rc::new(dir);
        let start = self.stack.len();
        self.stack.extend(names.into_iter().map(|(name, hint)| {
            let bytes = name.to_bytes();
            let mut child_rel = rel.clone();
            if !child_rel.is_empty() {
                child_rel.push(b'/');
            }
            child_rel.extend_from_slice(bytes);
            Pending { path: path.join(OsStr::from_bytes(bytes)), rel: child_rel, dir: dir.clone(), name, hint }
        }));
        self.stack[start..].sort_by(|a, b| b.rel.cmp(&a.rel));
        Ok(())
    }
}

/// Opens a listed name, or for a symlink reads it; `None` for what is not copied, and for
/// what `skip` (given whether it is a directory) leaves out, which is never opened.
fn open_below(p: &Pending, skip: impl Fn(&Pending, bool) -> bool) -> Result<Option<Opened>> {
    let io = |e: nix::Error| FilesError::io(&p.path, e.into());
    let name: &CStr = &p.name;
    let is = match p.hint {
        Some(t) => t,
        None => match kind(&fstatat(&*p.dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io)?) {
            Some(Kind::File) => Type::File,
            Some(Kind::Dir) => Type::Directory,
            Some(Kind::Symlink) => Type::Symlink,
            None => return Ok(None),
        },
    };
    if skip(p, is == Type::Directory) {
        return Ok(None);
    }
    // O_NOFOLLOW: a name swapped for a symlink since the listing fails rather than leads
    // elsewhere; O_NONBLOCK: one swapped for a fifo cannot block the walk.
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    Ok(match is {
        Type::File => {
            let file = File::from(openat(&*p.dir, name, flags, Mode::empty()).map_err(io)?);
            let st = fstat(&file).map_err(io)?;
            (kind(&st) == Some(Kind::File)).then_some(Opened::File(st, file))
        }
        Type::Directory => {
            let dir = Dir::openat(&*p.dir, name, flags | OFlag::O_DIRECTORY, Mode::empty()).map_err(io)?;
            Some(Opened::Dir(fstat(&dir).map_err(io)?, dir))
        }
        Type::Symlink => {
            let st = fstatat(&*p.dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io)?;
            if kind(&st) != Some(Kind::Symlink) {
                return Ok(None); // swapped since the listing
            }
            let target = readlinkat(&*p.dir, name).map_err(io)?;
            Some(Opened::Symlink(st, target.as_bytes().to_vec()))
        }
        _ => None,
    })
}

fn copied(t: Type) -> bool {
    matches!(t, Type::File | Type::Directory | Type::Symlink)
}

fn kind(st: &FileStat) -> Option<Kind> {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Some(Kind::File),
        libc::S_IFDIR => Some(Kind::Dir),
        libc::S_IFLNK => Some(Kind::Symlink),
        _ => None,
    }
}

fn not_copied(path: &Path) -> FilesError {
    FilesError::Usage(format!("{}: not a regular file, directory or symlink", path.display()))
}

fn entry(id: u64, kind: Kind, rel: Vec<u8>, st: &FileStat, target: Vec<u8>) -> Entry {
    let size = if kind == Kind::File { st.st_size as u64 } else { 0 };
    Entry {
        id,
        kind,
        path: rel,
        size,
        mode: st.st_mode,
        mtime_sec: st.st_mtime,
        mtime_nsec: st.st_mtime_nsec as u32,
        sparse: kind == Kind::File && (st.st_blocks as u64) * 512 < size,
        target,
        inline: None,
    }
}
