//! A sink facing a hostile source: paths that would leave the destination are refused, and
//! nothing lands outside it.

mod common;

use twox_hash::XxHash3_128;
use wirespeed_files::FilesError;
use wirespeed_files::proto::{Entry, Kind};

/// An entry whose file bytes (`data`) travel inline.
fn entry(id: u64, kind: Kind, path: &[u8], target: &[u8], data: &[u8]) -> Entry {
    let mut e = common::entry(id, kind, path, data.len() as u64);
    e.target = target.to_vec();
    e.inline = (kind == Kind::File).then(|| XxHash3_128::oneshot(data));
    e
}

/// Sends a tree made of `entries` (inline bytes `body`) and returns the sink's verdict.
fn offer(dst: &std::path::Path, entries: Vec<Entry>, body: &[u8]) -> Result<wirespeed_files::Summary, FilesError> {
    common::offer(dst, entries, body, Vec::new())
}

#[test]
fn paths_that_leave_the_destination_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let dst = dir.path().join("dst");
    let root = entry(0, Kind::Dir, b"", b"", b"");

    // Through a symlink the source itself created.
    let link = entry(1, Kind::Symlink, b"escape", outside.to_str().unwrap().as_bytes(), b"");
    let file = entry(2, Kind::File, b"escape/pwned", b"", b"x");
    let r = offer(&dst, vec![root.clone(), link, file], b"x");
    assert!(matches!(r, Err(FilesError::UnsafePath(_))), "{r:?}");

    // Up and out.
    let file = entry(1, Kind::File, b"../pwned", b"", b"x");
    let r = offer(&dst, vec![root.clone(), file], b"x");
    assert!(matches!(r, Err(FilesError::UnsafePath(_))), "{r:?}");

    // Through a symlink already in the destination (a failed copy into a new name left none).
    assert!(!dst.exists());
    std::fs::create_dir(&dst).unwrap();
    std::os::unix::fs::symlink(&outside, dst.join("old")).unwrap();
    let sub = entry(1, Kind::Dir, b"old", b"", b"");
    let file = entry(2, Kind::File, b"old/pwned", b"", b"x");
    let r = offer(&dst, vec![root, sub, file], b"x");
    assert!(r.is_err(), "{r:?}");

    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing written outside");
}
