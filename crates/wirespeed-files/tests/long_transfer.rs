//! A transfer may take far longer than its stall timeout, as long as it moves: the control
//! stream, quiet while a large file flows, must not time it out.

use std::time::{Duration, Instant};

use wirespeed::{Config, Key};
use wirespeed_files::{Input, Output, Progress, Side, SinkOptions, SourceOptions};

#[test]
fn a_transfer_outlasting_the_stall_timeout_completes_while_it_moves() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("weights.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    let stall = Duration::from_millis(500);

    let key = Key::new("k").unwrap();
    let listener = wirespeed::listen("tcp://127.0.0.1:0", &key, &Config::default()).unwrap();
    let url = listener.url().to_string();
    let started = Instant::now();
    let sender = std::thread::spawn(move || {
        let conn = wirespeed::connect(&url, &key, &Config::default()).unwrap();
        // 1 MB/s in 64 KiB chunks: about 3 s, six stall timeouts, with bytes moving throughout.
        let opts = SourceOptions {
            rate_limit: Some(1_000_000),
            chunk_size: 64 << 10,
            stall_timeout: stall,
            ..SourceOptions::default()
        };
        wirespeed_files::send(&conn, Side::Client, &Input::Path(src), &opts, &Progress::default())
    });
    let conn = listener.accept().unwrap();
    let control = conn.accept_stream().unwrap();
    let out = dir.path().join("copy.bin");
    let opts = SinkOptions { stall_timeout: stall, ..SinkOptions::default() };
    let received =
        wirespeed_files::receive(&conn, Side::Server(control), &Output::Path(out.clone()), &opts, &Progress::default());
    let sent = sender.join().unwrap();
    assert_eq!(received.unwrap().bytes, data.len() as u64);
    assert_eq!(sent.unwrap().bytes, data.len() as u64);
    assert!(started.elapsed() > stall * 3, "the transfer was meant to outlast the stall timeout");
    assert_eq!(std::fs::read(&out).unwrap(), data);
}
