//! One direction of the shared-memory channel: a byte ring of 64-byte-aligned frames.
//!
//! The producer owns `head`, the consumer owns `tail` (bytes released). A frame never wraps:
//! when it does not fit before the end, the producer writes a Pad frame to the end and starts
//! again at offset 0. Both sides validate everything they read from shared memory.
//!
//! The data may move between areas of the shared memory: the consumer proposes a free area
//! when the one in use is pinned by views it lent out, and the producer adopts it at its next
//! reservation, saying from which position on it writes there (see [`super::areas`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::pull::{MAX_SEGMENTS, descriptor_len};
use super::regions::REF_BYTES;
use crate::error::{Error, FrameError, Result};
use crate::proto::frame::{FLAG_PULL, FLAG_SHARED, FrameHeader, HEADER_LEN, Kind, Limits};

pub(super) const ALIGN: u64 = 64;
/// See [`Ring::reserve`]: about what a consumer that keeps up has in flight, and well inside L2.
const REWIND_AFTER: u64 = 2 << 20;

pub(super) fn align(n: u64) -> u64 {
    n.div_ceil(ALIGN) * ALIGN
}

/// Bytes the descriptor of a split frame with `segments` segments occupies in the ring.
pub(super) fn descriptor_bytes(segments: usize) -> u64 {
    align(descriptor_len(segments) as u64)
}

#[repr(C, align(64))]
struct Line<T>(T);

/// Control block at the start of each ring's page, one field per cache line.
#[repr(C)]
pub(super) struct Ctl {
    head: Line<AtomicU64>,
    tail: Line<AtomicU64>,
    consumer_sleeping: Line<AtomicU32>,
    producer_sleeping: Line<AtomicU32>,
    /// Consumer: the area it proposes, `(seq << 32) | area`.
    proposed: Line<AtomicU64>,
    /// Producer: the last proposal it adopted, and the position from which it writes there.
    adopted: Line<Adopted>,
}

#[derive(Default)]
struct Adopted {
    seq: AtomicU64,
    at: AtomicU64,
}

pub(super) const CTL_BYTES: usize = std::mem::size_of::<Ctl>();
// docs/PROTOCOL.md: six lines each, ring B's at 384, both in the first page.
const _: () = assert!(CTL_BYTES == 384);

impl Ctl {
    /// A control block in private memory, for tests and the fuzz target.
    #[cfg(any(test, fuzzing))]
    fn starting_at(head: u64) -> Self {
        Ctl {
            head: Line(AtomicU64::new(head)),
            tail: Line(AtomicU64::new(0)),
            consumer_sleeping: Line(AtomicU32::new(0)),
            producer_sleeping: Line(AtomicU32::new(0)),
            proposed: Line(AtomicU64::new(0)),
            adopted: Line(Adopted::default()),
        }
    }
}

/// Raw access to one ring inside a shared mapping. Copyable; the mapping outlives it.
#[derive(Clone, Copy)]
pub(super) struct Ring {
    ctl: *const Ctl,
    data: *mut u8,
    cap: u64,
}

// SAFETY: all shared fields are atomics; data bytes are handed over through head/tail with
// release/acquire ordering.
unsafe impl Send for Ring {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Ring {}

/// Where a frame sits in the ring, once validated.
pub(super) struct Located {
    pub header: FrameHeader,
    /// Offset of the meta within the data area.
    pub meta_at: u64,
    /// Offset of the payload within the data area.
    pub payload_at: u64,
    /// Bytes the frame occupies, padding included.
    pub total: u64,
    /// Split frames: where the pull descriptor is, and how many segments it has.
    pub pull: Option<(u64, usize)>,
    /// The payload lies in a sealed region; `payload_at` holds the reference to it.
    pub shared: bool,
}

impl Ring {
    /// # Safety
    /// `ctl` must point to a `Ctl` and `data` to `cap` bytes, both inside a live shared mapping.
    pub(super) unsafe fn new(ctl: *const Ctl, data: *mut u8, cap: u64) -> Self {
        Ring { ctl, data, cap }
    }

    /// The same ring, read through another mapping of its data.
    ///
    /// # Safety
    /// As for `new`: `data` must map this ring's `cap` bytes for as long as the ring is used.
    pub(super) unsafe fn with_data(self, data: *mut u8) -> Self {
        Ring { data, ..self }
    }

    fn ctl(&self) -> &Ctl {
        // SAFETY: guaranteed by `Ring::new`.
        unsafe { &*self.ctl }
    }

    pub(super) fn cap(&self) -> u64 {
        self.cap
    }

    pub(super) fn head(&self) -> u64 {
        self.ctl().head.0.load(Ordering::Acquire)
    }

    pub(super) fn tail(&self) -> u64 {
        self.ctl().tail.0.load(Ordering::Acquire)
    }

    pub(super) fn consumer_sleeping(&self) -> &AtomicU32 {
        &self.ctl().consumer_sleeping.0
    }

    pub(super) fn producer_sleeping(&self) -> &AtomicU32 {
        &self.ctl().producer_sleeping.0
    }

    /// Consumer: asks the producer to write in `area` from now on. Stored before the tail
    /// that frees the ring, so a producer that sees that tail sees the proposal too.
    pub(super) fn propose(&self, seq: u32, area: u32) {
        self.ctl().proposed.0.store((u64::from(seq) << 32) | u64::from(area), Ordering::Release);
    }

    /// Producer: the consumer's latest proposal, `(seq, area)`.
    pub(super) fn proposal(&self) -> (u32, u32) {
        let v = self.ctl().proposed.0.load(Ordering::Acquire);
        ((v >> 32) as u32, v as u32)
    }

    /// Producer: from position `at` on, frames are in the area of proposal `seq`. Stored
    /// before any of those frames is published.
    pub(super) fn adopt(&self, seq: u32, at: u64) {
        let a = &self.ctl().adopted.0;
        a.at.store(at, Ordering::Relaxed);
        a.seq.store(u64::from(seq), Ordering::Release);
    }

    /// Consumer: the producer's last adoption, `(seq, from position)`; read after `head`.
    pub(super) fn adopted(&self) -> (u32, u64) {
        let a = &self.ctl().adopted.0;
        let seq = a.seq.load(Ordering::Acquire) as u32;
        (seq, a.at.load(Ordering::Relaxed))
    }

    pub(super) fn data_ptr(&self, at: u64) -> *mut u8 {
        // SAFETY: callers keep `at` within the data area.
        unsafe { self.data.add((at % self.cap) as usize) }
    }

    /// Bytes a frame with this head and payload occupies.
    pub(super) fn frame_bytes(head_len: usize, payload: u64) -> u64 {
        align(head_len as u64) + align(payload)
    }

    /// Producer: where a frame of `total` bytes goes, given our `head` and the last `tail` we
    /// read; `None` if it does not fit yet. Returns (pad bytes to skip first, start position).
    /// The shared tail is read only when the cached one says the frame does not fit (or, past
    /// the rewind point, that frames are still held), so the consumer's cache line is not
    /// pulled over on every frame.
    ///
    /// Past the first [`Ring::rewind_after`] bytes, the producer starts again at offset 0 once
    /// the consumer has released everything. A consumer that keeps up then keeps both sides on
    /// the same few cache-hot megabytes, and the rest of the ring is never faulted in. Only an
    /// empty ring rewinds: a pad written while frames are still held would count against the
    /// ring until they come back, so a consumer holding a few views (writers still writing
    /// them out, say) would look as if it pinned the whole ring, and its queued frames would be
    /// copied out for nothing.
    pub(super) fn reserve(&self, head: u64, tail: &mut u64, total: u64) -> Option<(u64, u64)> {
        let at = head % self.cap;
        let to_end = self.cap - at;
        let fits = |tail: u64, pad: u64| {
            let used = head.wrapping_sub(tail);
            // A corrupt tail (used > cap) never lets us write over unreleased data.
            used <= self.cap && self.cap - used >= pad + total
        };
        if at >= self.rewind_after() {
            if *tail != head {
                *tail = self.tail();
            }
            if *tail == head && fits(*tail, to_end) {
                return Some((to_end, head + to_end));
            }
        }
        let pad = if total <= to_end { 0 } else { to_end };
        if !fits(*tail, pad) {
            *tail = self.tail();
            if !fits(*tail, pad) {
                return None;
            }
        }
        Some((pad, head + pad))
    }

    /// How far into the ring the producer goes before it tries to start again at 0.
    fn rewind_after(&self) -> u64 {
        (self.cap / 4).min(REWIND_AFTER)
    }

    /// Producer: writes a Pad frame covering `pad` bytes at `head`.
    pub(super) fn write_pad(&self, head: u64, pad: u64) {
        let mut h = FrameHeader::new(Kind::Pad, 0);
        h.len = pad - HEADER_LEN as u64;
        let bytes = h.encode();
        // SAFETY: `pad` >= 64 bytes lie free at `head` (reserve checked) before the ring's end.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.data_ptr(head), HEADER_LEN) };
    }

    /// Producer: makes everything before `head` visible to the consumer.
    pub(super) fn publish(&self, head: u64) {
        self.ctl().head.0.store(head, Ordering::Release);
    }

    /// Consumer: gives back everything before `tail`.
    pub(super) fn release_to(&self, tail: u64) {
        self.ctl().tail.0.store(tail, Ordering::Release);
    }

    /// Consumer: validates the frame at `pos` given the producer's `head`. Returns `None` for
    /// nothing there yet.
    pub(super) fn locate(&self, pos: u64, head: u64, limits: &Limits) -> Result<Option<Located>> {
        let avail = head.wrapping_sub(pos);
        if avail == 0 {
            return Ok(None);
        }
        let at = pos % self.cap;
        let to_end = self.cap - at;
        if avail > self.cap || avail < HEADER_LEN as u64 || !at.is_multiple_of(ALIGN) {
            return Err(corrupt("ring positions"));
        }
        let mut raw = [0u8; HEADER_LEN];
        // SAFETY: `at` is 64-aligned inside the data area, so 24 bytes follow it.
        unsafe { std::ptr::copy_nonoverlapping(self.data_ptr(pos), raw.as_mut_ptr(), HEADER_LEN) };
        let header = FrameHeader::decode(&raw, limits)?;
        let mut pull = None;
        let shared = header.flags & FLAG_SHARED != 0;
        let mut total = if header.kind == Kind::Pad {
            header.len.checked_add(HEADER_LEN as u64).ok_or_else(|| corrupt("pad"))?
        } else {
            let in_ring = if shared { REF_BYTES } else { header.payload_len() };
            Ring::frame_bytes(HEADER_LEN + header.meta_len as usize, in_ring)
        };
        if header.flags & FLAG_PULL != 0 {
            let segments = header.aux as usize;
            if segments == 0 || segments > MAX_SEGMENTS {
                return Err(corrupt("pull segments"));
            }
            pull = Some((pos + total, segments));
            total += descriptor_bytes(segments);
        }
        if header.kind == Kind::Pad && total != to_end {
            return Err(corrupt("pad length"));
        }
        if total > avail || total > to_end {
            return Err(corrupt("frame length"));
        }
        Ok(Some(Located {
            header,
            meta_at: pos + HEADER_LEN as u64,
            payload_at: pos + align((HEADER_LEN + header.meta_len as usize) as u64),
            total,
            pull,
            shared,
        }))
    }
}

fn corrupt(what: &'static str) -> Error {
    Error::Frame(FrameError::Malformed(what))
}

/// The fuzz target's entry: a ring of 4 KiB whose data area holds whatever the peer wrote
/// (`data` after two little-endian u64s: the reader's position and the peer's head). Every
/// frame the reader accepts must lie inside the ring's data and inside what the peer
/// published, with its meta, payload and pull descriptor inside the frame.
#[cfg(fuzzing)]
pub fn fuzz_locate(data: &[u8]) {
    const CAP: u64 = 4096;
    let Some((positions, bytes)) = data.split_at_checked(16) else { return };
    let mut pos = u64::from_le_bytes(positions[..8].try_into().expect("8 bytes")) & !(ALIGN - 1);
    let head = u64::from_le_bytes(positions[8..].try_into().expect("8 bytes"));
    let ctl = Ctl::starting_at(head);
    let mut area = vec![0u8; CAP as usize];
    let n = bytes.len().min(area.len());
    area[..n].copy_from_slice(&bytes[..n]);
    // SAFETY: `ctl` and `area` outlive the ring, and `area` has `CAP` bytes.
    let ring = unsafe { Ring::new(&ctl, area.as_mut_ptr(), CAP) };
    let limits = Limits { max_meta: 1024, max_payload: 1 << 20 };
    for _ in 0..64 {
        let Ok(Some(f)) = ring.locate(pos, head, &limits) else { return };
        let end = pos + f.total;
        assert!(f.total > 0 && f.total <= head.wrapping_sub(pos), "past the published head");
        assert!(pos % CAP + f.total <= CAP, "past the end of the data area");
        assert!(f.meta_at + f.header.meta_len as u64 <= end, "meta outside its frame");
        if f.header.kind != Kind::Pad {
            let in_ring = if f.shared { REF_BYTES } else { f.header.payload_len() };
            assert!(f.payload_at + in_ring <= end, "payload outside its frame");
        }
        if let Some((at, segments)) = f.pull {
            assert!(at + descriptor_len(segments) as u64 <= end, "pull descriptor outside its frame");
        }
        pos = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Mem {
        ctl: Box<Ctl>,
        data: Vec<u8>,
    }

    fn ring(cap: usize) -> (Mem, Ring) {
        let mut m = Mem { ctl: Box::new(Ctl::starting_at(0)), data: vec![0; cap] };
        // SAFETY: `m` owns both and outlives the ring in every test.
        let r = unsafe { Ring::new(&*m.ctl, m.data.as_mut_ptr(), cap as u64) };
        (m, r)
    }

    fn put(r: &Ring, head: &mut u64, payload: u64) -> Option<u64> {
        let mut h = FrameHeader::new(Kind::Data, 1);
        h.len = payload;
        let total = Ring::frame_bytes(HEADER_LEN, payload);
        let (pad, at) = r.reserve(*head, &mut 0, total)?;
        if pad > 0 {
            r.write_pad(*head, pad);
        }
        // SAFETY: `reserve` gave `at` room for the whole frame before the ring's end.
        unsafe { std::ptr::copy_nonoverlapping(h.encode().as_ptr(), r.data_ptr(at), HEADER_LEN) };
        *head = at + total;
        r.publish(*head);
        Some(at)
    }

    #[test]
    fn frames_wrap_with_a_pad_and_respect_the_tail() {
        let (_m, r) = ring(1024);
        let mut head = 0;
        let l = Limits::default();
        assert_eq!(put(&r, &mut head, 400), Some(0)); // 64 + 448 = 512 bytes
        assert_eq!(put(&r, &mut head, 200), Some(512)); // 64 + 256 = 320 bytes
        let first = r.locate(0, head, &l).unwrap().unwrap();
        assert_eq!((first.total, first.payload_at), (512, 64));
        assert_eq!(put(&r, &mut head, 200), None); // would need a pad of 192 plus 320
        r.release_to(512);
        assert_eq!(put(&r, &mut head, 200), Some(1024)); // padded to the end, then at offset 0
        let pad = r.locate(832, head, &l).unwrap().unwrap();
        assert_eq!((pad.header.kind, pad.total), (Kind::Pad, 192));
        assert!(r.locate(1024 + 320, head, &l).unwrap().is_none());
    }

    #[test]
    fn a_producer_past_the_first_quarter_starts_again_at_zero_once_everything_is_released() {
        let (_m, r) = ring(1024); // rewinds past 256 bytes
        let mut head = 0;
        assert_eq!(put(&r, &mut head, 200), Some(0)); // 320 bytes
        assert_eq!(put(&r, &mut head, 0), Some(320)); // nothing released: go on in place
        assert_eq!(put(&r, &mut head, 0), Some(384));
        r.release_to(320);
        // Room at 0, but a pad now would sit behind the frames still held and keep the
        // ring's whole end from them until they come back: go on in place.
        assert_eq!(put(&r, &mut head, 0), Some(448));
        r.release_to(512);
        assert_eq!(put(&r, &mut head, 0), Some(1024)); // all released: pad 512, start over
        let pad = r.locate(512, head, &Limits::default()).unwrap().unwrap();
        assert_eq!((pad.header.kind, pad.total), (Kind::Pad, 512));
    }

    proptest::proptest! {
        // A hostile peer controls both the ring bytes and the head: locate never panics and
        // never points outside the ring.
        #[test]
        fn locate_survives_any_ring(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 1024),
                                    pos in 0u64..4096, head in proptest::prelude::any::<u64>()) {
            let (mut m, r) = ring(1024);
            m.data.copy_from_slice(&bytes);
            if let Ok(Some(f)) = r.locate(pos * 64, head, &Limits::default()) {
                let start = (pos * 64) % 1024;
                proptest::prop_assert!(start + f.total <= 1024);
                let in_ring = if f.shared { REF_BYTES } else { f.header.payload_len() };
                proptest::prop_assert!(f.payload_at - pos * 64 + in_ring <= f.total);
            }
        }
    }

    #[test]
    fn corrupt_frames_are_errors_not_crashes() {
        let (mut m, r) = ring(1024);
        let mut h = FrameHeader::new(Kind::Data, 1);
        h.len = 5000; // longer than the ring
        m.data[..HEADER_LEN].copy_from_slice(&h.encode());
        assert!(r.locate(0, 5064, &Limits::default()).is_err());
        assert!(r.locate(0, 100, &Limits::default()).is_err());
        assert!(r.locate(8, 72, &Limits::default()).is_err());
        m.data[..HEADER_LEN].copy_from_slice(&[0xff; HEADER_LEN]);
        assert!(r.locate(0, 64, &Limits::default()).is_err());
    }
}
