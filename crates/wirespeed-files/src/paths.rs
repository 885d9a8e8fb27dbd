//! Paths as they travel (raw bytes, `/`-separated, relative) and as they land (checked to
//! stay under the destination root), plus the hidden name a file is written under.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use crate::error::{FilesError, Result};

/// Suffix of the name a file is written under until it verifies.
pub const PART_SUFFIX: &str = ".wirespeed-part";

/// `root` joined with a relative path from the peer. Rejects anything that could leave
/// `root`: absolute paths, `.`/`..`, empty components, NUL bytes.
pub fn join_under(root: &Path, rel: &[u8]) -> Result<PathBuf> {
    let mut out = root.to_path_buf();
    if rel.is_empty() {
        return Ok(out);
    }
    for part in rel.split(|b| *b == b'/') {
        if part.is_empty() || part == b"." || part == b".." || part.contains(&0) {
            return Err(FilesError::UnsafePath(String::from_utf8_lossy(rel).into_owned()));
        }
        out.push(OsStr::from_bytes(part));
    }
    Ok(out)
}

/// The hidden temporary a file is written under: `.NAME.wirespeed-part` beside it, so a
/// copy cut short never looks complete, and `--resume` finds it again.
pub fn part_path(dest: &Path) -> PathBuf {
    dest.with_file_name(part_name(dest.file_name().map(|n| n.as_bytes()).unwrap_or(b"file")))
}

/// The part name for a file called `name`.
pub fn part_name(name: &[u8]) -> OsString {
    let mut part = Vec::with_capacity(name.len() + 1 + PART_SUFFIX.len());
    part.push(b'.');
    part.extend_from_slice(name);
    part.extend_from_slice(PART_SUFFIX.as_bytes());
    OsString::from_vec(part)
}

/// A path component's bytes, as the copy protocol carries names.
pub fn bytes(p: &OsStr) -> Vec<u8> {
    p.as_bytes().to_vec()
}

/// A name as one line of text that reads back unambiguously: control characters, backslashes
/// and bytes that are not UTF-8 as `\xNN`.
pub fn printable(p: &[u8]) -> String {
    let mut out = String::with_capacity(p.len());
    for chunk in p.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    out.push_str(&format!("\\x{b:02x}"));
                }
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_names_are_one_line_and_unambiguous() {
        assert_eq!(printable(b"a b/\xc3\xa9"), "a b/\u{e9}");
        assert_eq!(printable(b"new\nline\\\xff"), "new\\x0aline\\x5c\\xff");
    }

    #[test]
    fn joins_only_below_the_root() {
        let root = Path::new("/dst");
        assert_eq!(join_under(root, b"").unwrap(), root);
        assert_eq!(join_under(root, b"a/b c/\xff\n").unwrap(), root.join("a/b c").join(OsStr::from_bytes(b"\xff\n")));
        for bad in [&b"/etc"[..], b"..", b"a/../b", b"a//b", b"./a", b"a/", b"a\0b"] {
            assert!(join_under(root, bad).is_err(), "{bad:?}");
        }
    }

    proptest::proptest! {
        /// Whatever path a peer names, what it joins to lies below the root: only normal
        /// components are added, one per `/`-separated part.
        #[test]
        fn any_peer_path_stays_below_the_root(rel in proptest::collection::vec(
            proptest::prop_oneof![proptest::prelude::Just(b'/'), proptest::prelude::Just(b'.'), proptest::prelude::any::<u8>()],
            0..40,
        )) {
            let root = Path::new("/dst/root");
            if let Ok(p) = join_under(root, &rel) {
                let below = p.strip_prefix(root).unwrap();
                proptest::prop_assert!(below.components().all(|c| matches!(c, std::path::Component::Normal(_))));
                let parts = if rel.is_empty() { 0 } else { rel.split(|b| *b == b'/').count() };
                proptest::prop_assert_eq!(below.components().count(), parts);
            }
        }
    }

    #[test]
    fn part_names_are_hidden_siblings() {
        assert_eq!(part_path(Path::new("/d/model.bin")), Path::new("/d/.model.bin.wirespeed-part"));
    }
}
