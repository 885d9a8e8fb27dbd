//! A transfer may take far longer than its stall timeout, as long as it moves: the control
//! stream, quiet while a large file flows, must not time it out; nor may a command whose
//! output is streamed, however long it stays silent.

use std::io::Read;
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

/// A command's output: silent for a while, then a few bytes, then the end.
struct SlowCommand {
    silent: Duration,
    said: bool,
}

impl Read for SlowCommand {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.said {
            return Ok(0);
        }
        std::thread::sleep(self.silent);
        self.said = true;
        buf[..6].copy_from_slice(b"sorted");
        Ok(6)
    }
}

#[test]
fn a_streamed_input_may_stay_silent_longer_than_the_stall_timeout() {
    let stall = Duration::from_millis(300);
    let key = Key::new("k").unwrap();
    let listener = wirespeed::listen("tcp://127.0.0.1:0", &key, &Config::default()).unwrap();
    let url = listener.url().to_string();
    let sender = std::thread::spawn(move || {
        let conn = wirespeed::connect(&url, &key, &Config::default()).unwrap();
        let input = Input::reader(SlowCommand { silent: stall * 4, said: false });
        let opts = SourceOptions { stall_timeout: stall, ..SourceOptions::default() };
        wirespeed_files::send(&conn, Side::Client, &input, &opts, &Progress::default())
    });
    let conn = listener.accept().unwrap();
    let control = conn.accept_stream().unwrap();
    let (out, got) = shared_vec();
    let opts = SinkOptions { stall_timeout: stall, ..SinkOptions::default() };
    let received = wirespeed_files::receive(&conn, Side::Server(control), &out, &opts, &Progress::default());
    let sent = sender.join().unwrap();
    // A stream's length is known only at its end, so summaries do not count it.
    received.unwrap();
    sent.unwrap();
    assert_eq!(got.lock().unwrap().as_slice(), b"sorted");
}

/// An output that collects what is written into a vector the test can read.
fn shared_vec() -> (Output, std::sync::Arc<std::sync::Mutex<Vec<u8>>>) {
    struct Into(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Into {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let v = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    (Output::writer(Into(v.clone())), v)
}
