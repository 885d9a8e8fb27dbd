//! A hostile source, scripted: a test says what it sends and the sink's verdict comes back.

use std::path::Path;
use std::thread;
use std::time::Duration;

use wirespeed::{Config, Key};
use wirespeed_files::proto::{Entry, Kind, Msg, VERSION};
use wirespeed_files::{FilesError, Output, Progress, Side, SinkOptions, Summary};

pub const CHUNK: u64 = 4 << 20;

/// An entry with nothing inline; a test sets `inline` and `target` where it needs them.
pub fn entry(id: u64, kind: Kind, path: &[u8], size: u64) -> Entry {
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

/// Offers `entries` (one file as the root, or a directory root then what is in it), with
/// `inline` as the bytes of their inline files. Then it waits for a Want for each file not
/// inline and sends each of `streams` on a data stream of its own. Returns the sink's verdict
/// on receiving into `dst`.
pub fn offer(dst: &Path, entries: Vec<Entry>, inline: &[u8], streams: Vec<Vec<Msg>>) -> Result<Summary, FilesError> {
    let key = Key::new("k").unwrap();
    let listener = wirespeed::listen("tcp://127.0.0.1:0", &key, &Config::default()).unwrap();
    let url = listener.url().to_string();
    let inline = inline.to_vec();
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
        let wanted = entries.iter().filter(|e| e.kind == Kind::File && e.inline.is_none()).count();
        let bytes = inline.len() as u64;
        // The sink may refuse the entries at once and hang up; it says why in its verdict.
        let _ = control.send(&Msg::Entries(entries).encode(), &[&inline]);
        let _ = control.send(&Msg::End { files, bytes }.encode(), &[]);
        for _ in 0..wanted {
            let Ok(Some(_want)) = control.recv() else { return };
        }
        // Each stream is finished and dropped at once: what it sent stays readable.
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
    let options = SinkOptions { stall_timeout: Duration::from_secs(5), ..SinkOptions::default() };
    let verdict = wirespeed_files::receive(
        &conn,
        Side::Server(control),
        &Output::Path(dst.to_path_buf()),
        &options,
        &Progress::default(),
    );
    drop(conn);
    hostile.join().unwrap();
    verdict
}
