//! A sink facing a source that lies about sizes: a file announced at 4 billion chunks costs
//! memory only for what arrives, and a streamed file whose Eof claims bytes it never sent is
//! refused, not left looking complete. This binary caps its own address space, so an
//! allocation sized by the announcement alone would abort it.

use std::thread;

use wirespeed::{Config, Key};
use wirespeed_files::proto::{Entry, Kind, Msg, STREAMED, VERSION};
use wirespeed_files::{FilesError, Output, Progress, Side, SinkOptions};

const CHUNK: u64 = 4 << 20;

/// Offers one large file of `size` bytes, waits for the sink's Want, then sends `data` on a
/// data stream; returns the sink's verdict.
fn offer(dst: &std::path::Path, size: u64, data: Vec<Msg>) -> Result<wirespeed_files::Summary, FilesError> {
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
            root_kind: Kind::File,
        };
        control.send(&begin.encode(), &[]).unwrap();
        let file = Entry {
            id: 0,
            kind: Kind::File,
            path: Vec::new(),
            size,
            mode: 0o100644,
            mtime_sec: 0,
            mtime_nsec: 0,
            sparse: false,
            target: Vec::new(),
            inline: None,
        };
        control.send(&Msg::Entries(vec![file]).encode(), &[]).unwrap();
        control.send(&Msg::End { files: 1, bytes: 0 }.encode(), &[]).unwrap();
        let Ok(Some(_want)) = control.recv() else { return };
        let stream = conn.open_stream().unwrap();
        for m in data {
            if stream.send(&m.encode(), &[]).is_err() {
                return;
            }
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
fn sizes_a_source_announces_cost_nothing_until_data_comes() {
    cap_address_space();
    let dir = tempfile::tempdir().unwrap();

    // 4 billion chunks announced; two arrive, the second a repeat.
    let huge = u32::MAX as u64 * CHUNK;
    let hole = Msg::Hole { id: 0, index: u32::MAX - 1 };
    let r = offer(&dir.path().join("huge"), huge, vec![hole.clone(), hole]);
    assert!(matches!(&r, Err(FilesError::Protocol(m)) if m.contains("repeated")), "{r:?}");

    // A streamed file whose Eof claims 10 MiB that never came.
    let dst = dir.path().join("streamed");
    let r = offer(&dst, STREAMED, vec![Msg::Eof { id: 0, size: 10 << 20 }]);
    assert!(matches!(&r, Err(FilesError::Protocol(m)) if m.contains("Eof")), "{r:?}");
    assert!(!dst.exists(), "a file that never arrived looks complete");
}
