//! The sending side of a ring: frames copied in once, filled in place, sent as references to
//! sealed regions, or split so the receiver copies part of a large one.

use std::io::{self, IoSlice};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::ring::{Ring, align};
use super::waker::{Waker, notify};
use super::{pull, regions, ring};
use crate::error::{Error, FrameError, Limit, Result};
use crate::mem::{Mapping, stream_copy};
use crate::proto::frame::{FLAG_PULL, FLAG_SHARED, FrameHeader};
use crate::transport::{Fill, FrameTx};

/// Copies bytes `from..to` of the concatenated `payload` to `dst`, past the caches if
/// `streamed` (see `stream_copy`).
///
/// # Safety
/// `dst` must have room for `to - from` bytes.
pub(super) unsafe fn copy_range(payload: &[IoSlice<'_>], from: usize, to: usize, mut dst: *mut u8, streamed: bool) {
    let mut off = 0;
    for s in payload {
        let (lo, hi) = (from.max(off), to.min(off + s.len()));
        if lo < hi {
            // SAFETY: in bounds of `s`, and `dst` has room by the caller's contract.
            unsafe {
                let piece = &s[lo - off..hi - off];
                match streamed {
                    true => stream_copy::stream(piece, dst),
                    false => std::ptr::copy_nonoverlapping(piece.as_ptr(), dst, piece.len()),
                }
                dst = dst.add(piece.len());
            }
        }
        off += s.len();
    }
}

/// The payload from byte `at` on as slices, if few enough to describe for a pull.
pub(super) fn split_tail<'a>(payload: &[IoSlice<'a>], at: usize) -> Option<(usize, Vec<IoSlice<'a>>)> {
    let at = at - at % 64;
    let mut off = 0;
    let mut tail = Vec::new();
    for s in payload {
        let end = off + s.len();
        if end > at {
            let start = at.saturating_sub(off);
            // SAFETY: a sub-slice of the caller's buffer, which lives for 'a.
            let bytes: &'a [u8] = unsafe { std::slice::from_raw_parts(s.as_ptr().add(start), s.len() - start) };
            tail.push(IoSlice::new(bytes));
        }
        off = end;
    }
    (!tail.is_empty() && tail.len() <= pull::MAX_SEGMENTS).then_some((at, tail))
}

pub(super) struct ShmTx {
    pub(super) ring: Ring,
    pub(super) head: u64,
    /// Split large frames with the receiver (until it refuses once).
    pub(super) split: bool,
    /// Sealed regions the peer has.
    pub(super) regions: regions::Outgoing,
    /// The consumer's tail as we last read it.
    pub(super) tail: u64,
    pub(super) notify: OwnedFd,
    pub(super) wake: Waker,
    /// The whole shared memory, where our ring's `areas` lie one after another from
    /// `first_area`, and the consumer's last proposal we adopted.
    pub(super) map: Arc<Mapping>,
    pub(super) first_area: usize,
    pub(super) areas: u32,
    pub(super) seq: u32,
    /// Our head when we began the current area.
    pub(super) adopted_at: u64,
}

impl ShmTx {
    /// Waits up to `timeout` for `total` bytes of room; returns where the frame goes. Nothing
    /// is published: until `head` moves past it, the next reservation may take the place again.
    pub(super) fn reserve(&mut self, total: u64, timeout: Duration) -> Result<u64> {
        if total > self.ring.cap() / 2 {
            return Err(Limit::OverRing(total).into());
        }
        let (pad, at) = loop {
            if let Some(r) = self.ring.reserve(self.head, &mut self.tail, total) {
                break r;
            }
            let (ring, h) = (self.ring, self.head);
            let deadline = Instant::now() + timeout;
            let fits = || ring.reserve(h, &mut 0, total).is_some();
            // A receiver whose views pin the ring must learn that we wait (see `ShmRx::pinned`).
            let announce = || notify(ring.consumer_sleeping(), &self.notify);
            if !self.wake.wait_announced(ring.producer_sleeping(), deadline, fits, announce)? {
                return Err(Error::Timeout(timeout));
            }
        };
        let (seq, area) = self.ring.proposal();
        if seq != self.seq {
            self.adopt(seq, area)?;
        }
        if pad > 0 {
            self.ring.write_pad(self.head, pad);
        }
        Ok(at)
    }

    /// Writes in the area the consumer proposed from our head on. It proposes only a free
    /// area, and gave back all the ring space before, so the whole area is ours to fill.
    fn adopt(&mut self, seq: u32, area: u32) -> Result<()> {
        if area >= self.areas {
            return Err(Error::Frame(FrameError::Malformed("ring area")));
        }
        let at = self.first_area + area as usize * self.ring.cap() as usize;
        // SAFETY: the area lies inside the mapping we keep.
        self.ring = unsafe { self.ring.with_data(self.map.ptr.as_ptr().add(at)) };
        self.ring.adopt(seq, self.head);
        self.seq = seq;
        self.adopted_at = self.head;
        Ok(())
    }

    /// Whether a large payload ending at `end` goes past the caches: only on our first pass
    /// through an area. Memory the receiver keeps (zero-copy batches it collects) makes us
    /// move to fresh areas, cold ones; a ring we wrap around in is warm, and plain copies win.
    fn streams(&self, plen: usize, end: u64) -> bool {
        plen >= stream_copy::MIN_STREAMED && end <= self.adopted_at + self.ring.cap()
    }

    /// A frame whose payload stays in a sealed region the peer has: the ring gets the header
    /// and the reference.
    pub(super) fn write_shared(&mut self, head: &[u8], reference: regions::Pair, timeout: Duration) -> Result<()> {
        let total = Ring::frame_bytes(head.len(), regions::REF_BYTES);
        let at = self.reserve(total, timeout)?;
        let frame = self.ring.data_ptr(at);
        // SAFETY: `reserve` gave us the frame's bytes at `at`, before the ring's end.
        unsafe {
            std::ptr::copy_nonoverlapping(head.as_ptr(), frame, head.len());
            let marked = FrameHeader::reflag(head, FLAG_SHARED, None);
            std::ptr::copy_nonoverlapping(marked.as_ptr(), frame, marked.len());
            let to = self.ring.data_ptr(at + align(head.len() as u64));
            std::ptr::copy_nonoverlapping(reference.as_ptr(), to, reference.len());
        }
        self.head = at + total;
        self.ring.publish(self.head);
        notify(self.ring.consumer_sleeping(), &self.notify);
        Ok(())
    }
}

impl FrameTx for ShmTx {
    fn write_frame(&mut self, head: &[u8], payload: &[IoSlice<'_>], timeout: Duration) -> Result<()> {
        if let [one] = payload
            && one.len() >= regions::MIN_SHARED
            && let Some(reference) = self.regions.reference(one, &self.wake.sock)
        {
            return self.write_shared(head, reference, timeout);
        }
        let plen: usize = payload.iter().map(|s| s.len()).sum();
        let split =
            if self.split && plen >= pull::MIN_SPLIT { split_tail(payload, pull::sender_share(plen)) } else { None };
        let body = Ring::frame_bytes(head.len(), plen as u64);
        let total = body + split.as_ref().map_or(0, |(_, tail)| ring::descriptor_bytes(tail.len()));
        let at = self.reserve(total, timeout)?;
        let streamed = self.streams(plen, at + total);
        let frame = self.ring.data_ptr(at);
        let payload_at = self.ring.data_ptr(at + align(head.len() as u64));
        // SAFETY: `reserve` gave us `total` free bytes at `at`, before the ring's end.
        unsafe { std::ptr::copy_nonoverlapping(head.as_ptr(), frame, head.len()) };
        self.head = at + total;
        let Some((split, tail)) = split else {
            // SAFETY: as above; the payload area follows the header and meta.
            unsafe { copy_range(payload, 0, plen, payload_at, streamed) };
            self.ring.publish(self.head);
            notify(self.ring.consumer_sleeping(), &self.notify);
            return Ok(());
        };
        // A split frame is published before its payload is in place, so the receiver pulls
        // the tail while we copy the head.
        // SAFETY: the descriptor's room was reserved after the payload; the header bytes are ours.
        let desc = unsafe {
            let marked = FrameHeader::reflag(head, FLAG_PULL, Some(tail.len() as u32));
            std::ptr::copy_nonoverlapping(marked.as_ptr(), frame, marked.len());
            pull::Descriptor::new(self.ring.data_ptr(at + body))
        };
        desc.write(split, &tail);
        self.ring.publish(self.head);
        notify(self.ring.consumer_sleeping(), &self.notify);
        // SAFETY: the head of the payload area is ours to fill.
        unsafe { copy_range(payload, 0, split, payload_at, streamed) };
        desc.copied().store(pull::HEAD_COPIED, Ordering::Release);
        notify(self.ring.consumer_sleeping(), &self.notify);
        // Our caller may reuse its buffers once we return. A receiver that has not started
        // pulling yet never will: take the tail back and copy it ourselves.
        let pulled = desc.pulled();
        let state = match pulled.compare_exchange(pull::IDLE, pull::TAKEN_BACK, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => pull::TAKEN_BACK,
            Err(pull::PULLING) => {
                let taken = || pulled.load(Ordering::Acquire) != pull::PULLING;
                if !self.wake.wait(self.ring.producer_sleeping(), Instant::now() + timeout, taken)? {
                    return Err(Error::Timeout(timeout));
                }
                pulled.load(Ordering::Acquire)
            }
            Err(other) => other,
        };
        if state != pull::DONE {
            // The receiver refused (ptrace policy: stop splitting) or was not reading.
            self.split &= state != pull::REFUSED;
            // SAFETY: the tail of the payload area is ours again.
            unsafe { copy_range(payload, split, plen, payload_at.add(split), streamed) };
            desc.copied().store(pull::ALL_COPIED, Ordering::Release);
            notify(self.ring.consumer_sleeping(), &self.notify);
        }
        Ok(())
    }

    fn fills_in_place(&self) -> bool {
        true
    }

    fn write_frame_filled(
        &mut self,
        head: &[u8],
        len: usize,
        fill: &mut Fill<'_>,
        timeout: Duration,
    ) -> Result<io::Result<()>> {
        let total = Ring::frame_bytes(head.len(), len as u64);
        let at = self.reserve(total, timeout)?;
        let frame = self.ring.data_ptr(at);
        // SAFETY: `reserve` gave us `total` free bytes at `at`, before the ring's end: the
        // header and meta, then the payload area. The receiver sees none of it until published.
        let payload = unsafe {
            std::ptr::copy_nonoverlapping(head.as_ptr(), frame, head.len());
            std::slice::from_raw_parts_mut(self.ring.data_ptr(at + align(head.len() as u64)), len)
        };
        if let Err(e) = fill(payload) {
            return Ok(Err(e));
        }
        self.head = at + total;
        self.ring.publish(self.head);
        notify(self.ring.consumer_sleeping(), &self.notify);
        Ok(Ok(()))
    }

    fn max_payload(&self) -> usize {
        (self.ring.cap() / 8) as usize
    }

    fn shutdown(&mut self, _graceful: bool) {
        // Frames already in the ring stay readable: the peer drains it before it looks at
        // the socket.
        let _ = self.wake.sock.shutdown(std::net::Shutdown::Both);
    }
}
