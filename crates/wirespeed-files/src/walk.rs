//! Walks a source path into entries: the root, then (with `recursive`) everything below it,
//! depth first, names sorted. Symlinks are entries, never followed below the root; devices,
//! fifos and sockets below the root are skipped.

use std::fs::{self, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::error::{FilesError, Result};
use crate::paths;
use crate::proto::{Entry, Kind};

/// One thing found: where it is, and the entry that describes it (`inline` still unset).
pub struct Found {
    pub path: PathBuf,
    pub entry: Entry,
}

pub fn entry_for(id: u64, rel: Vec<u8>, path: &Path, md: &Metadata) -> Result<Entry> {
    let ft = md.file_type();
    let (kind, target) = if ft.is_dir() {
        (Kind::Dir, Vec::new())
    } else if ft.is_symlink() {
        (Kind::Symlink, paths::bytes(fs::read_link(path).map_err(|e| FilesError::io(path, e))?.as_os_str()))
    } else if ft.is_file() {
        (Kind::File, Vec::new())
    } else {
        return Err(FilesError::Usage(format!("{}: not a regular file, directory or symlink", path.display())));
    };
    let size = if kind == Kind::File { md.len() } else { 0 };
    Ok(Entry {
        id,
        kind,
        path: rel,
        size,
        mode: md.mode(),
        mtime_sec: md.mtime(),
        mtime_nsec: md.mtime_nsec() as u32,
        sparse: kind == Kind::File && md.blocks() * 512 < size,
        target,
        inline: None,
    })
}

/// Calls `visit` for `root` and, if it is a directory and `recursive`, for all below it.
pub fn walk(root: &Path, recursive: bool, mut visit: impl FnMut(Found) -> Result<()>) -> Result<()> {
    // A symlink named on the command line is followed, as cp and scp do.
    let md = fs::metadata(root).map_err(|e| FilesError::io(root, e))?;
    if md.is_dir() && !recursive {
        return Err(FilesError::Usage(format!("{} is a directory (use -r)", root.display())));
    }
    let mut next_id = 0u64;
    let mut stack = vec![(root.to_path_buf(), Vec::new(), md)];
    while let Some((path, rel, md)) = stack.pop() {
        let entry = entry_for(next_id, rel.clone(), &path, &md)?;
        next_id += 1;
        let is_dir = entry.kind == Kind::Dir;
        visit(Found { path: path.clone(), entry })?;
        if !is_dir {
            continue;
        }
        let mut children = Vec::new();
        for item in fs::read_dir(&path).map_err(|e| FilesError::io(&path, e))? {
            let item = item.map_err(|e| FilesError::io(&path, e))?;
            let child = item.path();
            let md = fs::symlink_metadata(&child).map_err(|e| FilesError::io(&child, e))?;
            let ft = md.file_type();
            if !(ft.is_file() || ft.is_dir() || ft.is_symlink()) {
                continue; // devices, fifos and sockets are not copied
            }
            let mut child_rel = rel.clone();
            if !child_rel.is_empty() {
                child_rel.push(b'/');
            }
            child_rel.extend_from_slice(&paths::bytes(&item.file_name()));
            children.push((child, child_rel, md));
        }
        // Reverse order on the stack pops them sorted.
        children.sort_by(|a, b| b.1.cmp(&a.1));
        stack.extend(children);
    }
    Ok(())
}
