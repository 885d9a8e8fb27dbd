//! A sink facing a hostile source: paths that would leave the destination are refused, and
//! nothing lands outside it.

use std::thread;

use twox_hash::XxHash3_128;
use wirespeed::{Config, Key};
use wirespeed_files::proto::{Entry, Kind, Msg, VERSION};
use wirespeed_files::{FilesError, Output, Progress, Side, SinkOptions};

fn entry(id: u64, kind: Kind, path: &[u8], target: &[u8], data: &[u8]) -> Entry {
    Entry {
        id,
        kind,
        path: path.to_vec(),
        size: data.len() as u64,
        mode: 0o100644,
        mtime_sec: 0,
        mtime_nsec: 0,
        sparse: false,
        target: target.to_vec(),
        inline: (kind == Kind::File).then(|| XxHash3_128::oneshot(data)),
    }
}

/// Sends a tree made of `entries` (inline bytes `body`) and returns the sink's verdict.
fn offer(dst: &std::path::Path, entries: Vec<Entry>, body: &[u8]) -> Result<wirespeed_files::Summary, FilesError> {
    let key = Key::new("k").unwrap();
    let listener = wirespeed::listen("tcp://127.0.0.1:0", &key, &Config::default()).unwrap();
    let url = listener.url().to_string();
    let body = body.to_vec();
    let hostile = thread::spawn(move || {
        let conn = wirespeed::connect(&url, &key, &Config::default()).unwrap();
        let control = conn.open_stream().unwrap();
        let begin = Msg::Begin {
            version: VERSION,
            flags: 0,
            chunk_size: 4 << 20,
            root_name: b"t".to_vec(),
            root_kind: Kind::Dir,
        };
        control.send(&begin.encode(), &[]).unwrap();
        let _ = control.send(&Msg::Entries(entries).encode(), &[&body]);
        let _ = control.send(&Msg::End { files: 1, bytes: 1 }.encode(), &[]);
        let _ = control.recv();
    });
    let conn = listener.accept().unwrap();
    let control = conn.accept_stream().unwrap();
    let r = wirespeed_files::receive(
        &conn,
        Side::Server(control),
        &Output::Path(dst.to_path_buf()),
        &SinkOptions::default(),
        &Progress::default(),
    );
    drop(conn);
    hostile.join().unwrap();
    r
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
