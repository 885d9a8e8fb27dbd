//! The copy protocol (sans-IO): what a source and a sink say to each other. Each value is
//! one wirespeed message header; file bytes ride in message bodies, never in headers.
//! Layout and flow are in docs/PROTOCOL.md ("File transfer"). Decoding never panics.

mod chunks;
pub mod receipt;
mod violation;

use wirespeed::proto::codec;

pub use receipt::{Arrival, Receipt, Span};
pub use violation::{ChunkFault, Violation};

type Result<T, E = Violation> = std::result::Result<T, E>;

/// Version of the copy protocol, checked in [`Msg::Begin`].
pub const VERSION: u16 = 5;
/// `Entry::size` of a file whose length is known only at its end (standard input).
pub const STREAMED: u64 = u64::MAX;
/// Longest path or symlink target accepted, in bytes.
pub const MAX_PATH: usize = 64 << 10;

/// `Begin` flags.
pub const PRESERVE: u16 = 1;
pub const RESUME: u16 = 2;
/// Keep a destination file of the same size and modification time as it is (`--sync`).
pub const SYNC: u16 = 4;
/// Keep whatever already exists at a file's or symlink's destination (`--no-clobber`).
pub const NO_CLOBBER: u16 = 8;
/// Remove what the destination holds in the tree's directories that the source does not
/// (`--delete`).
pub const DELETE: u16 = 16;
/// Change nothing: the sink says what it would do, and the source sends no file's bytes
/// (`--dry-run`).
pub const DRY_RUN: u16 = 32;
/// Every flag this version knows; a sink refuses others rather than ignore what they ask.
pub const FLAGS: u16 = PRESERVE | RESUME | SYNC | NO_CLOBBER | DELETE | DRY_RUN;

/// Chunk sizes a sink accepts.
pub const CHUNK_SIZES: std::ops::RangeInclusive<u32> = 64 << 10..=256 << 20;

/// The sink's checks of a `Begin`: this version, a chunk size in range, no unknown flags.
pub fn check_begin(version: u16, flags: u16, chunk_size: u32) -> Result<()> {
    if version != VERSION {
        return Err(Violation::Version { ours: VERSION, theirs: version });
    }
    if !CHUNK_SIZES.contains(&chunk_size) {
        return Err(Violation::ChunkSize(chunk_size));
    }
    if flags & !FLAGS != 0 {
        return Err(Violation::UnknownFlags(flags & !FLAGS));
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File = 1,
    Dir = 2,
    Symlink = 3,
}

/// One file, directory or symlink of the tree being sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: u64,
    pub kind: Kind,
    /// Relative to the root, components joined by `/`; empty for the root itself. Raw
    /// bytes: names need not be UTF-8.
    pub path: Vec<u8>,
    /// File length, or [`STREAMED`].
    pub size: u64,
    pub mode: u32,
    pub mtime_sec: i64,
    pub mtime_nsec: u32,
    /// The source has holes; the sink leaves zero blocks unwritten.
    pub sparse: bool,
    /// A symlink's target.
    pub target: Vec<u8>,
    /// Checksum of the file's bytes when they follow inline in the message body (small
    /// files travel batched this way); `None` when the sink must ask for them.
    pub inline: Option<u128>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Listener to connecting side, first thing on a connection: where else it listens.
    Hello { host: Vec<u8>, shm: Vec<u8> },
    /// A sink that connected opens the control stream with this; the source then begins.
    Ready,
    /// Source to sink: the transfer's parameters and its root.
    Begin { version: u16, flags: u16, chunk_size: u32, root_name: Vec<u8>, root_kind: Kind },
    /// Source to sink, before any entry of a transfer that deletes: `--exclude` patterns,
    /// whose matches at the destination the sink leaves alone.
    Exclude(Vec<String>),
    /// Source to sink: entries in walk order; inline bytes fill the body in entry order.
    Entries(Vec<Entry>),
    /// Sink to source: send this file. Chunks listed in `have` whose checksum matches are
    /// answered with `Same` instead of their bytes. `ordered`: the sink writes the file in
    /// order (to a pipe or device), so chunks out of turn wait at the sink.
    Want { id: u64, ordered: bool, have: Vec<(u32, u128)> },
    /// One chunk of a file; its bytes are the body, and a `ChunkSum` follows it on its stream.
    /// The sum trails so that a source can read a chunk straight into transport memory.
    Chunk { id: u64, index: u32 },
    /// The checksum (XXH3-128) of the chunk just before it on the same stream.
    ChunkSum { sum: u128 },
    /// The sink already holds this chunk.
    Same { id: u64, index: u32 },
    /// The chunk lies in a hole of the source: all zeros.
    Hole { id: u64, index: u32 },
    /// A streamed file ended at `size` bytes.
    Eof { id: u64, size: u64 },
    /// Sink to source: this file stays as the destination has it (`SYNC`, `NO_CLOBBER`);
    /// send nothing of it.
    Keep { id: u64 },
    /// Source to sink: everything was sent.
    End { files: u64, bytes: u64 },
    /// Sink to source: everything is written, verified and renamed into place; `kept` of
    /// the files, `kept_bytes` of the bytes, stayed as they were, and `deleted` names that
    /// only the destination had are gone.
    Done { files: u64, bytes: u64, kept: u64, kept_bytes: u64, deleted: u64 },
    /// Either way: the transfer failed. `class` is a [`wirespeed::Class`]'s number.
    Fail { class: u8, message: String },
}

impl Msg {
    /// The message's name, as errors show it.
    pub fn name(&self) -> &'static str {
        match self {
            Msg::Hello { .. } => "Hello",
            Msg::Ready => "Ready",
            Msg::Begin { .. } => "Begin",
            Msg::Exclude(_) => "Exclude",
            Msg::Entries(_) => "Entries",
            Msg::Want { .. } => "Want",
            Msg::Chunk { .. } => "Chunk",
            Msg::ChunkSum { .. } => "ChunkSum",
            Msg::Same { .. } => "Same",
            Msg::Hole { .. } => "Hole",
            Msg::Eof { .. } => "Eof",
            Msg::Keep { .. } => "Keep",
            Msg::End { .. } => "End",
            Msg::Done { .. } => "Done",
            Msg::Fail { .. } => "Fail",
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut w = codec::Writer::with_capacity(64);
        match self {
            Msg::Hello { host, shm } => {
                w.u8(1);
                w.prefixed(host);
                w.prefixed(shm);
            }
            Msg::Ready => w.u8(2),
            Msg::Begin { version, flags, chunk_size, root_name, root_kind } => {
                w.u8(3);
                w.u16(*version);
                w.u16(*flags);
                w.u32(*chunk_size);
                w.prefixed(root_name);
                w.u8(*root_kind as u8);
            }
            Msg::Exclude(patterns) => {
                w.u8(15);
                w.u32(patterns.len() as u32);
                for p in patterns {
                    w.prefixed(p.as_bytes());
                }
            }
            Msg::Entries(entries) => {
                w.u8(4);
                w.u32(entries.len() as u32);
                for e in entries {
                    write_entry(&mut w, e);
                }
            }
            Msg::Want { id, ordered, have } => {
                w.u8(5);
                w.u64(*id);
                w.u8(*ordered as u8);
                w.u32(have.len() as u32);
                for (index, sum) in have {
                    w.u32(*index);
                    w.u128(*sum);
                }
            }
            Msg::Chunk { id, index } => {
                w.u8(6);
                w.u64(*id);
                w.u32(*index);
            }
            Msg::ChunkSum { sum } => {
                w.u8(13);
                w.u128(*sum);
            }
            Msg::Same { id, index } => {
                w.u8(7);
                w.u64(*id);
                w.u32(*index);
            }
            Msg::Hole { id, index } => {
                w.u8(8);
                w.u64(*id);
                w.u32(*index);
            }
            Msg::Eof { id, size } => {
                w.u8(9);
                w.u64(*id);
                w.u64(*size);
            }
            Msg::End { files, bytes } => {
                w.u8(10);
                w.u64(*files);
                w.u64(*bytes);
            }
            Msg::Done { files, bytes, kept, kept_bytes, deleted } => {
                w.u8(11);
                w.u64(*files);
                w.u64(*bytes);
                w.u64(*kept);
                w.u64(*kept_bytes);
                w.u64(*deleted);
            }
            Msg::Keep { id } => {
                w.u8(14);
                w.u64(*id);
            }
            Msg::Fail { class, message } => {
                w.u8(12);
                w.u8(*class);
                w.prefixed(message.as_bytes());
            }
        }
        w.into_inner()
    }

    pub fn decode(b: &[u8]) -> Result<Self> {
        let mut r = codec::Reader::new(b);
        let msg = match r.u8()? {
            1 => Msg::Hello { host: read_bytes(&mut r)?, shm: read_bytes(&mut r)? },
            2 => Msg::Ready,
            3 => Msg::Begin {
                version: r.u16()?,
                flags: r.u16()?,
                chunk_size: r.u32()?,
                root_name: read_bytes(&mut r)?,
                root_kind: read_kind(&mut r)?,
            },
            4 => {
                let n = r.u32()? as usize;
                // Each entry takes at least 50 bytes, so a lying count cannot reserve much.
                let mut entries = Vec::with_capacity(n.min(r.rest().len() / 50));
                for _ in 0..n {
                    entries.push(read_entry(&mut r)?);
                }
                Msg::Entries(entries)
            }
            5 => {
                let id = r.u64()?;
                let ordered = r.u8()? != 0;
                let n = r.u32()? as usize;
                let mut have = Vec::with_capacity(n.min(r.rest().len() / 20));
                for _ in 0..n {
                    have.push((r.u32()?, r.u128()?));
                }
                Msg::Want { id, ordered, have }
            }
            6 => Msg::Chunk { id: r.u64()?, index: r.u32()? },
            7 => Msg::Same { id: r.u64()?, index: r.u32()? },
            8 => Msg::Hole { id: r.u64()?, index: r.u32()? },
            9 => Msg::Eof { id: r.u64()?, size: r.u64()? },
            10 => Msg::End { files: r.u64()?, bytes: r.u64()? },
            11 => {
                Msg::Done { files: r.u64()?, bytes: r.u64()?, kept: r.u64()?, kept_bytes: r.u64()?, deleted: r.u64()? }
            }
            12 => Msg::Fail { class: r.u8()?, message: String::from_utf8_lossy(&read_bytes(&mut r)?).into_owned() },
            13 => Msg::ChunkSum { sum: r.u128()? },
            14 => Msg::Keep { id: r.u64()? },
            15 => {
                let n = r.u32()? as usize;
                let mut patterns = Vec::with_capacity(n.min(r.rest().len() / 4));
                for _ in 0..n {
                    let p = read_bytes(&mut r)?;
                    patterns.push(String::from_utf8(p).map_err(|_| Violation::PatternNotUtf8)?);
                }
                Msg::Exclude(patterns)
            }
            t => return Err(Violation::UnknownTag(t)),
        };
        if !r.is_empty() {
            return Err(Violation::TrailingBytes);
        }
        Ok(msg)
    }
}

fn write_entry(w: &mut codec::Writer, e: &Entry) {
    w.u64(e.id);
    w.u8(e.kind as u8);
    w.prefixed(&e.path);
    w.u64(e.size);
    w.u32(e.mode);
    w.u64(e.mtime_sec as u64);
    w.u32(e.mtime_nsec);
    w.u8(e.sparse as u8 | (e.inline.is_some() as u8) << 1);
    w.prefixed(&e.target);
    if let Some(sum) = e.inline {
        w.u128(sum);
    }
}

/// A length-prefixed name, path or message: at most `MAX_PATH` bytes.
fn read_bytes(r: &mut codec::Reader<'_>) -> Result<Vec<u8>> {
    let n = r.u32()? as usize;
    if n > MAX_PATH {
        return Err(Violation::LengthPastEnd);
    }
    Ok(r.bytes(n).map_err(|_| Violation::LengthPastEnd)?.to_vec())
}

fn read_kind(r: &mut codec::Reader<'_>) -> Result<Kind> {
    match r.u8()? {
        1 => Ok(Kind::File),
        2 => Ok(Kind::Dir),
        3 => Ok(Kind::Symlink),
        k => Err(Violation::UnknownEntryKind(k)),
    }
}

fn read_entry(r: &mut codec::Reader<'_>) -> Result<Entry> {
    let id = r.u64()?;
    let kind = read_kind(r)?;
    let path = read_bytes(r)?;
    let (size, mode, mtime_sec, mtime_nsec, flags) = (r.u64()?, r.u32()?, r.u64()? as i64, r.u32()?, r.u8()?);
    let target = read_bytes(r)?;
    let inline = if flags & 2 != 0 { Some(r.u128()?) } else { None };
    Ok(Entry { id, kind, path, size, mode, mtime_sec, mtime_nsec, sparse: flags & 1 != 0, target, inline })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn entry(id: u64, inline: Option<u128>) -> Entry {
        Entry {
            id,
            kind: Kind::File,
            path: b"dir/na\xffme with space\n".to_vec(),
            size: 4096,
            mode: 0o100644,
            mtime_sec: -5,
            mtime_nsec: 999,
            sparse: true,
            target: vec![],
            inline,
        }
    }

    #[test]
    fn every_message_round_trips() {
        let msgs = [
            Msg::Hello { host: b"boot".to_vec(), shm: b"/tmp/x".to_vec() },
            Msg::Ready,
            Msg::Begin {
                version: VERSION,
                flags: FLAGS,
                chunk_size: 4 << 20,
                root_name: b"r".to_vec(),
                root_kind: Kind::Dir,
            },
            Msg::Exclude(vec!["*.tmp".into(), "/top/cache/".into()]),
            Msg::Entries(vec![entry(0, Some(7)), entry(1, None)]),
            Msg::Want { id: 9, ordered: true, have: vec![(0, 1), (5, u128::MAX)] },
            Msg::Chunk { id: 1, index: 2 },
            Msg::ChunkSum { sum: u128::MAX - 3 },
            Msg::Same { id: 1, index: 2 },
            Msg::Hole { id: 1, index: 3 },
            Msg::Eof { id: 1, size: 77 },
            Msg::End { files: 1, bytes: 2 },
            Msg::Keep { id: 4 },
            Msg::Done { files: 1, bytes: 2, kept: 3, kept_bytes: 4, deleted: 5 },
            Msg::Fail { class: 5, message: "disk full".into() },
        ];
        for m in msgs {
            assert_eq!(Msg::decode(&m.encode()).unwrap(), m);
        }
    }

    #[test]
    fn truncated_and_padded_messages_are_errors() {
        let b = Msg::Entries(vec![entry(0, Some(1))]).encode();
        for n in 0..b.len() {
            assert!(Msg::decode(&b[..n]).is_err(), "prefix {n}");
        }
        let mut padded = b.clone();
        padded.push(0);
        assert!(Msg::decode(&padded).is_err());
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(b in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = Msg::decode(&b);
        }

        #[test]
        fn decoding_mutated_messages_never_panics(i in 0usize..200, v in any::<u8>()) {
            let mut b = Msg::Entries(vec![entry(0, Some(1)), entry(2, None)]).encode();
            let n = b.len();
            b[i % n] = v;
            let _ = Msg::decode(&b);
        }
    }
}
