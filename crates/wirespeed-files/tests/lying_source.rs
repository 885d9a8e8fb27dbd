//! A sink facing a source that lies: a file announced at 4 billion chunks costs memory only for
//! what arrives, a streamed file whose Eof claims bytes it never sent is refused, not left
//! looking complete, and a file ended twice is refused rather than counted twice.
//! This binary caps its own address space, so an allocation sized by the announcement alone
//! would abort it.

mod common;

use common::{CHUNK, entry, offer};
use wirespeed_files::FilesError;
use wirespeed_files::proto::{ChunkFault, Kind, Msg, STREAMED, Violation};

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
    let r = offer(&dir.path().join("huge"), vec![entry(0, Kind::File, b"", huge)], b"", vec![vec![hole.clone(), hole]]);
    let repeated = Violation::Chunk { id: 0, index: u32::MAX - 1, fault: ChunkFault::UnknownOrRepeated };
    assert!(matches!(&r, Err(FilesError::PeerMisbehaved(v)) if *v == repeated), "{r:?}");

    // A streamed file whose Eof claims 10 MiB that never came.
    let dst = dir.path().join("streamed");
    let r = offer(&dst, vec![entry(0, Kind::File, b"", STREAMED)], b"", vec![vec![Msg::Eof { id: 0, size: 10 << 20 }]]);
    assert!(matches!(&r, Err(FilesError::PeerMisbehaved(Violation::EofMismatch { id: 0, .. }))), "{r:?}");
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
    let r = offer(&dst, entries, b"", vec![eof.clone(), eof]);
    // Which message depends on whether the first end was done when the second came.
    assert!(
        matches!(&r, Err(FilesError::PeerMisbehaved(Violation::FinishedTwice(1) | Violation::UnknownFile(1)))),
        "{r:?}"
    );
    assert!(!dst.join("never").exists());
}
