//! FLESnet's timeslice archives as the tests read them back: with a reader built from
//! Boost.Serialization and FLESnet's class layouts (tests/boost/tsa_reader.cpp).

use std::process::Command;

/// Builds tests/boost/tsa_reader.cpp (Boost.Serialization with FLESnet's class layouts) in `dir`.
pub fn boost_tsa_reader(dir: &std::path::Path) -> std::path::PathBuf {
    let reader = dir.join("tsa_reader");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/boost/tsa_reader.cpp");
    let built = Command::new("g++")
        .args(["-O1", "-o"])
        .arg(&reader)
        .arg(source)
        .args(["-lboost_serialization", "-lboost_iostreams"])
        .output();
    let built = built.expect("g++ (the bootstrap installs it with libboost-serialization-dev)");
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    reader
}

/// What the Boost reader prints for `archive`, which it must load with every CRC right.
pub fn read_with_boost(reader: &std::path::Path, archive: &std::path::Path) -> String {
    let read = Command::new(reader).arg(archive).output().unwrap();
    let text = String::from_utf8_lossy(&read.stdout).into_owned();
    assert!(read.status.success(), "{text}{}", String::from_utf8_lossy(&read.stderr));
    text
}

/// Waits until a `.part` archive in `dir` grows past what it held when first seen: the nodes
/// passed their barrier and build timeslices. (A node killed before that fails the start, as
/// it should; on a cold machine the start alone can take longer than a test's `after`.)
pub fn wait_until_under_way(dir: &std::path::Path) {
    let part_sizes = || -> Vec<(std::path::PathBuf, u64)> {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
            .filter_map(|e| Some((e.path(), e.metadata().ok()?.len())))
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut first_seen = std::collections::HashMap::new();
    while std::time::Instant::now() < deadline {
        for (path, len) in part_sizes() {
            if len > *first_seen.entry(path).or_insert(len) {
                return;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("no archive in {} grew within 60 s", dir.display());
}

/// The timeslices that the Boost reader finds whole in `archive`, which may end mid-way.
pub fn whole_timeslices(inputs: usize, reader: &std::path::Path, archive: &std::path::Path) -> Vec<u64> {
    let read = Command::new(reader).arg(archive).output().unwrap();
    let text = String::from_utf8_lossy(&read.stdout);
    let components = format!(" components {inputs} ");
    let complete = |l: &&str| l.contains(&components);
    text.lines()
        .filter(complete)
        .filter_map(|l| l.strip_prefix("timeslice ")?.split(' ').next()?.parse().ok())
        .collect()
}
