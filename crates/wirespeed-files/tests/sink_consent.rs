//! What a sink does to its destination beyond writing the files it is sent is its own choice:
//! a source asking for `--delete` is refused by a sink that did not ask for it, and nothing is
//! removed.

use wirespeed::{Config, Key};
use wirespeed_files::{FilesError, Input, Output, Progress, Side, SinkOptions, SourceOptions};

/// Sends the tree `src` with `source` options into `into`, received with `sink` options.
fn transfer(
    src: &std::path::Path,
    into: &std::path::Path,
    source: SourceOptions,
    sink: SinkOptions,
) -> (wirespeed_files::Result<wirespeed_files::Summary>, wirespeed_files::Result<wirespeed_files::Summary>) {
    let key = Key::new("k").unwrap();
    let listener = wirespeed::listen("tcp://127.0.0.1:0", &key, &Config::default()).unwrap();
    let url = listener.url().to_string();
    let src = src.to_path_buf();
    let sender = std::thread::spawn(move || {
        let conn = wirespeed::connect(&url, &key, &Config::default()).unwrap();
        wirespeed_files::send(&conn, Side::Client, &Input::Path(src), &source, &Progress::default())
    });
    let conn = listener.accept().unwrap();
    let control = conn.accept_stream().unwrap();
    let received =
        wirespeed_files::receive(&conn, Side::Server(control), &Output::Path(into.into()), &sink, &Progress::default());
    (sender.join().unwrap(), received)
}

#[test]
fn a_sink_refuses_a_delete_it_did_not_ask_for() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tree");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("sent"), b"sent").unwrap();
    let into = dir.path().join("into");
    std::fs::create_dir_all(into.join("tree")).unwrap();
    std::fs::write(into.join("tree/theirs"), b"the receiver's own").unwrap();
    let delete = SourceOptions { recursive: true, delete: true, ..SourceOptions::default() };

    let (sent, received) = transfer(&src, &into, delete.clone(), SinkOptions::default());
    assert!(matches!(received, Err(FilesError::Usage(ref m)) if m.contains("--delete")), "{received:?}");
    assert!(sent.is_err());
    assert_eq!(std::fs::read(into.join("tree/theirs")).unwrap(), b"the receiver's own");

    let (sent, received) = transfer(&src, &into, delete, SinkOptions { delete: true, ..SinkOptions::default() });
    assert_eq!(received.unwrap().deleted, 1);
    assert_eq!(sent.unwrap().deleted, 1);
    assert!(!into.join("tree/theirs").exists());
    assert_eq!(std::fs::read(into.join("tree/sent")).unwrap(), b"sent");
}
