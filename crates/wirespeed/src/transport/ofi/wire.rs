//! The messages two ofi endpoints exchange (PROTOCOL.md, "libfabric"): a frame carried whole
//! (eager), a frame whose body the receiver reads from the sender's registered memory
//! (rendezvous, answered by Done), a frame cut into pieces where the provider has no
//! one-sided access, and small frames batched into one message. Every message starts with a
//! 16-byte prefix:
//!
//! ```text
//! kind u8 | segments u8 | flags u8 | zero u8 | seq u32 | word u64   (little-endian)
//! ```
//!
//! `seq` numbers a sender's messages from 0, wrapping: providers may complete receives out
//! of order (ofi_rxm does, for messages of different sizes), and the receiver puts them
//! back in order by it. `word` is the rendezvous token (Rendezvous, Done), the frame's
//! whole length (First) or how many frames a Batch holds, each as a u32 length and its bytes.
//! Decoding is pure: bytes in, a message or a `Violation` out.

use crate::error::Violation;
use crate::proto::codec::{Reader, Truncated, Writer};
use crate::proto::frame::HEADER_LEN;

pub(super) const PREFIX_LEN: usize = 16;
/// One remote segment: address, key and length, each a little-endian u64.
pub(super) const SEGMENT_LEN: usize = 24;
/// Most segments one rendezvous names (a frame's meta and payload slices).
pub(super) const MAX_SEGMENTS: usize = 16;

const FRAME: u8 = 1;
const RENDEZVOUS: u8 = 2;
const DONE: u8 = 3;
const FIRST: u8 = 4;
const MORE: u8 = 5;
const BATCH: u8 = 6;
/// A batched frame's length field.
pub(super) const BATCH_LEN_LEN: usize = 4;
/// Rendezvous flag: the frame's meta follows the header here (otherwise it is read too,
/// ahead of the payload).
const META_INLINE: u8 = 1;

/// A stretch of the sender's registered memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    pub(super) addr: u64,
    pub(super) key: u64,
    pub(super) len: u64,
}

/// A decoded message; byte slices borrow the receive buffer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Msg<'a> {
    /// A whole frame: header, meta and payload.
    Frame(&'a [u8]),
    /// A frame whose header (and meta, when `meta` is some) came here, and whose remaining
    /// bytes the segments hold, in order.
    Rendezvous { token: u64, segments: Vec<Segment>, header: &'a [u8; HEADER_LEN], meta: Option<&'a [u8]> },
    /// The receiver has read the rendezvous body of `token`.
    Done(u64),
    /// The first piece of a frame of `total` bytes.
    First { total: u64, bytes: &'a [u8] },
    /// A further piece of the frame being assembled.
    More(&'a [u8]),
    /// Two or more whole frames, checked to lie end to end.
    Batch(Batch<'a>),
}

/// The frames of a Batch, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Batch<'a>(&'a [u8]);

impl<'a> Iterator for Batch<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let mut r = Reader::new(self.0);
        let frame = r.prefixed().ok()?; // whole: checked when decoded
        self.0 = r.rest();
        Some(frame)
    }
}

/// Whether `bytes` are exactly `count` (at least two) frames, each a u32 length (at least a
/// header's) and its bytes.
fn is_batch(bytes: &[u8], count: u64) -> bool {
    let mut r = Reader::new(bytes);
    let mut found = 0;
    while !r.is_empty() {
        match r.prefixed() {
            Ok(frame) if frame.len() >= HEADER_LEN => found += 1,
            _ => return false,
        }
    }
    found == count && count >= 2
}

fn prefix(kind: u8, segments: u8, flags: u8, word: u64) -> [u8; PREFIX_LEN] {
    let mut p = [0u8; PREFIX_LEN];
    p[0] = kind;
    p[1] = segments;
    p[2] = flags;
    p[8..].copy_from_slice(&word.to_le_bytes());
    p
}

/// The prefix of a whole frame; the frame's bytes follow.
pub(super) fn frame_prefix() -> [u8; PREFIX_LEN] {
    prefix(FRAME, 0, 0, 0)
}

/// A rendezvous message: `header` is the frame header, `meta` the meta when it travels here.
pub(super) fn rendezvous(token: u64, segments: &[Segment], header: &[u8], meta: Option<&[u8]>) -> Vec<u8> {
    debug_assert!(segments.len() <= MAX_SEGMENTS && header.len() == HEADER_LEN);
    let flags = if meta.is_some() { META_INLINE } else { 0 };
    let meta = meta.unwrap_or_default();
    let mut w = Writer::with_capacity(PREFIX_LEN + segments.len() * SEGMENT_LEN + HEADER_LEN + meta.len());
    w.bytes(&prefix(RENDEZVOUS, segments.len() as u8, flags, token));
    for s in segments {
        [s.addr, s.key, s.len].into_iter().for_each(|v| w.u64(v));
    }
    w.bytes(header);
    w.bytes(meta);
    w.into_inner()
}

pub(super) fn done(token: u64) -> [u8; PREFIX_LEN] {
    prefix(DONE, 0, 0, token)
}

/// The prefix of a frame's first piece; the piece's bytes follow.
pub(super) fn first_prefix(total: u64) -> [u8; PREFIX_LEN] {
    prefix(FIRST, 0, 0, total)
}

pub(super) fn more_prefix() -> [u8; PREFIX_LEN] {
    prefix(MORE, 0, 0, 0)
}

/// Adds a whole frame of `len` bytes, given as `parts` (header, meta, payload), to `m`, a
/// message built by `frame_prefix` or already a Batch, which it becomes. The parts are copied
/// once, straight into the message.
pub(super) fn batch_onto<'a>(m: &mut Vec<u8>, len: usize, parts: impl IntoIterator<Item = &'a [u8]>) {
    if m[0] == FRAME {
        let first = (m.len() - PREFIX_LEN) as u32;
        m.splice(PREFIX_LEN..PREFIX_LEN, first.to_le_bytes());
        m[0] = BATCH;
        m[8..PREFIX_LEN].copy_from_slice(&1u64.to_le_bytes());
    }
    let count = u64::from_le_bytes(m[8..PREFIX_LEN].try_into().expect("8 bytes")) + 1;
    m[8..PREFIX_LEN].copy_from_slice(&count.to_le_bytes());
    m.extend_from_slice(&(len as u32).to_le_bytes());
    parts.into_iter().for_each(|p| m.extend_from_slice(p));
}

/// Whether frames may be batched onto `m`: a whole frame, or a Batch.
pub(super) fn batchable(m: &[u8]) -> bool {
    m[0] == FRAME || m[0] == BATCH
}

/// The bytes `batch_onto` adds for a frame of `len` bytes (and, the first time, the frame
/// already there).
pub(super) const fn batch_cost(len: usize) -> usize {
    2 * BATCH_LEN_LEN + len
}

/// Numbers a message (built by the functions above) as the sender's `seq`th.
pub(super) fn set_seq(m: &mut [u8], seq: u32) {
    m[4..8].copy_from_slice(&seq.to_le_bytes());
}

/// A message's number, if it has a prefix.
pub(super) fn seq(m: &[u8]) -> Option<u32> {
    let mut r = Reader::new(m);
    r.array::<4>().and_then(|_| r.u32()).ok()
}

/// Decodes one received message.
pub(super) fn decode(m: &[u8]) -> Result<Msg<'_>, Violation> {
    let malformed = Violation::Malformed("libfabric message");
    let mut r = Reader::new(m);
    let [kind, segments, flags, zero] = r.array().map_err(|_| malformed.clone())?;
    let segments = segments as usize;
    let _seq = r.u32(); // the receiver orders by it; here it is only skipped
    let word = r.u64().map_err(|_| malformed.clone())?;
    let rest = r.rest();
    let plain = segments == 0 && flags == 0 && zero == 0;
    match kind {
        FRAME if plain && word == 0 => Ok(Msg::Frame(rest)),
        DONE if plain && rest.is_empty() => Ok(Msg::Done(word)),
        FIRST if plain && word > rest.len() as u64 => Ok(Msg::First { total: word, bytes: rest }),
        MORE if plain && word == 0 && !rest.is_empty() => Ok(Msg::More(rest)),
        BATCH if plain && is_batch(rest, word) => Ok(Msg::Batch(Batch(rest))),
        RENDEZVOUS if flags & !META_INLINE == 0 && zero == 0 && (1..=MAX_SEGMENTS).contains(&segments) => {
            let segments = (0..segments)
                .map(|_| Ok(Segment { addr: r.u64()?, key: r.u64()?, len: r.u64()? }))
                .collect::<Result<Vec<_>, Truncated>>()
                .map_err(|_| malformed.clone())?;
            let header: &[u8; HEADER_LEN] =
                r.bytes(HEADER_LEN).ok().and_then(|h| h.try_into().ok()).ok_or(malformed.clone())?;
            let meta = r.rest();
            let meta = match flags & META_INLINE {
                0 if meta.is_empty() => None,
                0 => return Err(malformed),
                _ => Some(meta),
            };
            Ok(Msg::Rendezvous { token: word, segments, header, meta })
        }
        _ => Err(malformed),
    }
}

/// Fuzzing entry: decodes any bytes; a rendezvous it accepts encodes back to them, and a
/// batch it accepts holds the frames it said.
#[cfg(fuzzing)]
pub fn fuzz_decode(data: &[u8]) {
    match decode(data) {
        Ok(Msg::Rendezvous { token, segments, header, meta }) => {
            let mut again = rendezvous(token, &segments, header, meta);
            set_seq(&mut again, seq(data).expect("decoded, so it has a prefix"));
            assert_eq!(again, data, "a rendezvous round trips");
        }
        Ok(Msg::Batch(frames)) => {
            let said = u64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
            assert!(frames.map(|f| assert!(f.len() >= HEADER_LEN)).count() as u64 == said);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The sender's fifth message, a Rendezvous for token 7 naming one segment, with 3 bytes
    /// of meta inline (PROTOCOL.md).
    #[test]
    fn rendezvous_test_vector() {
        let header = [0xAAu8; HEADER_LEN];
        let seg = Segment { addr: 0x1000, key: 0x2a, len: 0x10_0000 };
        let m = rendezvous(7, &[seg], &header, Some(b"abc"));
        let mut m = m;
        set_seq(&mut m, 5);
        let mut want = vec![2, 1, 1, 0, 5, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(&[0, 0x10, 0, 0, 0, 0, 0, 0, 0x2a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&header);
        want.extend_from_slice(b"abc");
        assert_eq!(m, want);
        assert_eq!(
            decode(&m).unwrap(),
            Msg::Rendezvous { token: 7, segments: vec![seg], header: &header, meta: Some(&b"abc"[..]) }
        );
    }

    #[test]
    fn small_messages_round_trip() {
        let mut d = done(9);
        set_seq(&mut d, 0xdead_beef);
        assert_eq!((seq(&d), decode(&d).unwrap()), (Some(0xdead_beef), Msg::Done(9)));
        let mut f = frame_prefix().to_vec();
        f.extend_from_slice(b"frame");
        assert_eq!(decode(&f).unwrap(), Msg::Frame(b"frame"));
        let mut first = first_prefix(10).to_vec();
        first.extend_from_slice(b"abc");
        assert_eq!(decode(&first).unwrap(), Msg::First { total: 10, bytes: b"abc" });
        let mut more = more_prefix().to_vec();
        more.push(1);
        assert_eq!(decode(&more).unwrap(), Msg::More(&[1]));
    }

    /// A Batch of two frames (PROTOCOL.md): one of 24 bytes, one of 26.
    #[test]
    fn batch_test_vector() {
        let (one, two) = ([0x11u8; HEADER_LEN], [0x22u8; HEADER_LEN + 2]);
        let mut m = frame_prefix().to_vec();
        m.extend_from_slice(&one);
        batch_onto(&mut m, two.len(), [&two[..]]);
        set_seq(&mut m, 3);
        let mut want = vec![6, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 24, 0, 0, 0];
        want.extend_from_slice(&one);
        want.extend_from_slice(&[26, 0, 0, 0]);
        want.extend_from_slice(&two);
        assert_eq!(m, want);
        let Msg::Batch(frames) = decode(&m).unwrap() else { panic!("a batch") };
        assert_eq!(frames.collect::<Vec<_>>(), [&one[..], &two[..]]);
    }

    #[test]
    fn malformed_messages_are_refused() {
        let header = [0u8; HEADER_LEN];
        let seg = Segment { addr: 1, key: 2, len: 3 };
        let cases: Vec<Vec<u8>> = vec![
            vec![],
            done(1)[..15].to_vec(),
            [&done(1)[..], b"x"].concat(),           // Done with a body
            [&first_prefix(3)[..], b"abc"].concat(), // nothing left for later pieces
            more_prefix().to_vec(),                  // an empty piece
            rendezvous(1, &[seg], &header, None)[..PREFIX_LEN + 10].to_vec(), // cut in its list
            [&rendezvous(1, &[seg], &header, None)[..], b"meta"].concat(), // meta not announced
            {
                let mut m = done(1).to_vec();
                m[3] = 1; // the reserved byte
                m
            },
            prefix(RENDEZVOUS, 0, 0, 1).to_vec(), // no segments
            prefix(9, 0, 0, 0).to_vec(),
            batch(1, &[HEADER_LEN]),                                         // a batch of one
            batch(3, &[HEADER_LEN, HEADER_LEN]),                             // fewer frames than it says
            batch(2, &[HEADER_LEN, HEADER_LEN - 1]),                         // a frame shorter than a header
            [&batch(2, &[HEADER_LEN, HEADER_LEN])[..], &[0]].concat(),       // a byte past the last
            batch(2, &[HEADER_LEN, HEADER_LEN])[..PREFIX_LEN + 30].to_vec(), // cut in a frame
        ];
        for m in cases {
            assert!(decode(&m).is_err(), "{m:?}");
        }
    }

    /// A Batch saying `count` frames, holding frames of `lens` bytes.
    fn batch(count: u64, lens: &[usize]) -> Vec<u8> {
        let mut m = prefix(BATCH, 0, 0, count).to_vec();
        for &len in lens {
            m.extend_from_slice(&(len as u32).to_le_bytes());
            m.extend(std::iter::repeat_n(7u8, len));
        }
        m
    }

    proptest! {
        #[test]
        fn batches_round_trip(frames in proptest::collection::vec(
            proptest::collection::vec(any::<u8>(), HEADER_LEN..200), 1..20)
        ) {
            let mut m = frame_prefix().to_vec();
            m.extend_from_slice(&frames[0]);
            for f in &frames[1..] {
                let before = m.len();
                batch_onto(&mut m, f.len(), [&f[..5], &f[5..]]);
                prop_assert!(m.len() - before <= batch_cost(f.len()));
            }
            let got: Vec<&[u8]> = match decode(&m).unwrap() {
                Msg::Frame(f) => vec![f],
                Msg::Batch(b) => b.collect(),
                other => panic!("{other:?}"),
            };
            prop_assert_eq!(got, frames.iter().map(|f| &f[..]).collect::<Vec<_>>());
        }

        #[test]
        fn decoding_anything_never_panics(m in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = decode(&m);
        }

        #[test]
        fn rendezvous_round_trips(
            token in any::<u64>(),
            segs in proptest::collection::vec((any::<u64>(), any::<u64>(), any::<u64>()), 1..=MAX_SEGMENTS),
            meta in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..100)),
        ) {
            let segments: Vec<Segment> = segs.iter().map(|&(addr, key, len)| Segment { addr, key, len }).collect();
            let header = [3u8; HEADER_LEN];
            let m = rendezvous(token, &segments, &header, meta.as_deref());
            let want = Msg::Rendezvous { token, segments: segments.clone(), header: &header, meta: meta.as_deref() };
            prop_assert_eq!(decode(&m).unwrap(), want);
        }
    }
}
