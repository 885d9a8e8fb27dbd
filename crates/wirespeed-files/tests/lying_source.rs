//! A sink facing a source that lies: a file announced at 4 billion chunks costs memory only for
//! what arrives, a streamed file whose Eof claims bytes it never sent is refused, not left
//! looking complete, and a file ended twice is refused rather than counted twice.
//! This binary caps its own address space, so an allocation sized by the announcement alone
//! would abort it.

use std::thread;

use wirespeed::{Config, Key};
use wirespeed_files::proto::{Entry, Kind, Msg, STREAMED, VERSION};
use wirespeed_files::{FilesError, Output, Progress, Side, SinkOptions};

const CHUNK: u64 = 4 << 20;

fn entry(id: u64, kind: Kind, path: &[u8], size: u64) -> Entry {
    Entry {
        id,
        kind,
        path: path.to_vec(),
        size,
        mode: 0o100644,
        mtime_sec: 0,
        mtime_nsec: 0,
        sparse: false,
        target: Vec::new(),
        inline: None,
    }
}

/// Offers `entries` (one file as the root, or a directory root then its files), waits for a
/// Want for each file, then sends each of `streams` on a data stream of its own; returns the sink's
/// verdict.
fn offer(
    dst: &std::path::Path,
    entries: Vec<Entry>,
    streams: Vec<Vec<Msg>>,
) -> Result<wirespeed_files::Summary, FilesError> {
    let key = Key::new("k").unwrap();
    let listener = wirespeed::listen("tcp://127.0.0.1:0", &key, &Config::default()).unwrap();
    let url = listener.url().to_string();
    let hostile = thread::spawn(move || {
        let conn = wirespeed::connect(&url, &key, &Config::default()).unwrap();
        let control = conn.open_stream().unwrap();
        let begin = Msg::Begin {
            version: VERSION,
            flags: 0,
            chunk_size: CHUNK as u32,
            root_name: b"t".to_vec(),
            root_kind: entries[0].kind,
        };
        control.send(&begin.encode(), &[]).unwrap();
        let files = entries.iter().filter(|e| e.kind == Kind::File).count() as u64;
        control.send(&Msg::Entries(entries).encode(), &[]).unwrap();
        control.send(&Msg::End { files, bytes: 0 }.encode(), &[]).unwrap();
        for _ in 0..files {
            let Ok(Some(_want)) = control.recv() else { return };
        }
        for data in streams {
            let stream = conn.open_stream().unwrap();
            for m in data {
                if stream.send(&m.encode(), &[]).is_err() {
                    return;
                }
            }
            let _ = stream.finish();
        }
        let _ = control.recv();
    });
    let conn = listener.accept().unwrap();
    let control = conn.accept_stream().unwrap();
    let options = SinkOptions { stall_timeout: std::time::Duration::from_secs(5), ..SinkOptions::default() };
    let r = wirespeed_files::receive(
        &conn,
        Side::Server(control),
        &Output::Path(dst.to_path_buf()),
        &options,
        &Progress::default(),
    );
    drop(conn);
    hostile.join().unwrap();
    r
}

/// Caps this process's address space at what it maps now plus 2 GiB.
fn cap_address_space() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    let cap = (kib << 10) + (2 << 30);
    nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_AS, cap, cap).unwrap();
}

#[test]
fn lies_are_refused_and_cost_nothing_until_data_comes() {
    cap_address_space();
    let dir = tempfile::tempdir().unwrap();

    // 4 billion chunks announced; two arrive, the second a repeat.
    let huge = u32::MAX as u64 * CHUNK;
    let hole = Msg::Hole { id: 0, index: u32::MAX - 1 };
    let r = offer(&dir.path().join("huge"), vec![entry(0, Kind::File, b"", huge)], vec![vec![hole.clone(), hole]]);
    assert!(matches!(&r, Err(FilesError::Protocol(m)) if m.contains("repeated")), "{r:?}");

    // A streamed file whose Eof claims 10 MiB that never came.
    let dst = dir.path().join("streamed");
    let r = offer(&dst, vec![entry(0, Kind::File, b"", STREAMED)], vec![vec![Msg::Eof { id: 0, size: 10 << 20 }]]);
    assert!(matches!(&r, Err(FilesError::Protocol(m)) if m.contains("Eof")), "{r:?}");
    assert!(!dst.exists(), "a file that never arrived looks complete");

    // An empty streamed file ended on two streams, beside a file that never comes: counted
    // twice, it would pass for the other and the copy would end as if complete.
    let dst = dir.path().join("twice");
    let entries = vec![
        entry(0, Kind::Dir, b"", 0),
        entry(1, Kind::File, b"streamed", STREAMED),
        entry(2, Kind::File, b"never", 10 << 20),
    ];
    let eof = vec![Msg::Eof { id: 1, size: 0 }];
    let r = offer(&dst, entries, vec![eof.clone(), eof]);
    // Which message depends on whether the first end was done when the second came.
    assert!(matches!(&r, Err(FilesError::Protocol(m)) if m.contains("twice") || m.contains("not asked for")), "{r:?}");
    assert!(!dst.join("never").exists());
}
