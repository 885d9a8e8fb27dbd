//! The receiving side of a ring: frames read in place and lent out as views, split frames
//! completed, sealed regions mapped.

use std::io::{self};
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::lend::RingLender;
use super::mapping::privatize;
use super::ring::Ring;
use super::waker::{Waker, notify};
use super::{pull, regions, ring};
use crate::error::{Error, Result};
use crate::mem::{Buf, Mapping};
use crate::proto::frame::{Kind, Limits};
use crate::sync::Unpoison;
use crate::transport::{FrameRx, FrameSink};
/// A ring pinned by lent views waits for them while some came back within this long: the
/// receiver is slower than the sender but draining, and the views free their space without a
/// copy. Past it the ring moves to another area, or the views are evacuated (copied out),
/// as for a receiver that keeps them.
const RETURN_GRACE: Duration = Duration::from_millis(2);

pub(super) struct ShmRx {
    pub(super) ring: Ring,
    /// The sender's pid as the kernel reports it, for pulling split frames.
    pub(super) peer_pid: Option<libc::pid_t>,
    /// Next byte to read; between the lender's tail and the producer's head.
    pub(super) pos: u64,
    /// The producer's head as we last read it.
    pub(super) head: u64,
    pub(super) limits: Limits,
    pub(super) lender: Arc<RingLender>,
    pub(super) wake: Waker,
    /// The area we proposed to the producer, `(seq, area)`, until it writes there.
    pub(super) proposed: Option<(u32, u32)>,
    /// The last proposal's number.
    pub(super) seq: u32,
    /// The peer's sealed regions (and its one-sided windows, which `windows` takes).
    pub(super) regions: Arc<Mutex<regions::Incoming>>,
    /// The lender's count of returned views at our last look, and when it last changed.
    pub(super) returns_seen: u64,
    pub(super) returned_at: Instant,
}

impl FrameRx for ShmRx {
    fn read_frame(&mut self, deadline: Instant, sink: &mut FrameSink<'_>) -> Result<bool> {
        loop {
            if self.pos == self.head {
                self.head = self.ring.head();
            }
            // Read after `head`: frames the producer wrote in the new area are published after
            // its adoption, so we see it before we get to them.
            if let Some((seq, area)) = self.proposed
                && let (adopted, at) = self.ring.adopted()
                && adopted == seq
                && self.pos >= at
            {
                self.follow(area);
            }
            let Some(f) = self.ring.locate(self.pos, self.head, &self.limits)? else {
                let pinned = self.pinned();
                // With a proposal open, the views left in the current area lie beside the held
                // ones, so it is never evacuated: the producer adopts at its next frame.
                if pinned && self.proposed.is_none() && !self.views_returning() {
                    if !self.propose() {
                        self.evacuate()?;
                    }
                    continue;
                }
                // Pinned by views that are coming back: the sender writes once they free its
                // room; look again after the grace in case they stop.
                let until = if pinned { deadline.min(Instant::now() + RETURN_GRACE) } else { deadline };
                let (ring, pos) = (self.ring, self.pos);
                let ready = || ring.head() != pos || (!pinned && self.pinned());
                if !self.wake.wait(ring.consumer_sleeping(), until, ready)? && until == deadline {
                    return Ok(false);
                }
                continue;
            };
            if let Some((desc_at, segments)) = f.pull
                && !self.complete_split(&f, desc_at, segments, deadline)?
            {
                return Ok(false);
            }
            let end = self.pos + f.total;
            self.pos = end;
            if f.header.kind == Kind::Pad {
                self.lender.push(end, true);
                continue;
            }
            // SAFETY: validated by `locate` to lie inside the data area, which stays ours until
            // the frame is released below (or its payload view comes back).
            let meta = unsafe { std::slice::from_raw_parts(self.ring.data_ptr(f.meta_at), f.header.meta_len as usize) };
            let plen = f.header.payload_len() as usize;
            if f.shared {
                let mut reference: regions::Pair = [0; 16];
                // SAFETY: `locate` checked that the reference lies inside the frame.
                unsafe {
                    let at = self.ring.data_ptr(f.payload_at);
                    std::ptr::copy_nonoverlapping(at, reference.as_mut_ptr(), reference.len());
                }
                let read = (self.regions.lock().unpoison())
                    .view(reference, plen, &self.wake.sock, deadline)
                    .and_then(|payload| sink(&f.header, meta, payload));
                self.lender.push(end, true);
                return read.map(|()| true);
            }
            if plen == 0 {
                let read = sink(&f.header, meta, Buf::empty());
                // Only now: the sender may write over the frame once it is released.
                self.lender.push(end, true);
                return read.map(|()| true);
            }
            let token = self.lender.push(end, false);
            let ptr = NonNull::new(self.ring.data_ptr(f.payload_at)).expect("mapped memory");
            // SAFETY: the bytes stay in place until the lender gets the token back.
            let payload = unsafe { Buf::lent(ptr, plen, self.lender.clone(), token) };
            sink(&f.header, meta, payload)?;
            return Ok(true);
        }
    }

    fn zero_copy_limit(&self) -> u64 {
        self.ring.cap() / 4
    }
}

impl ShmRx {
    /// The sender waits for room while views we lent out (queued, held by the application,
    /// or by a receive assembling a message) keep most of the ring. Space frees in order, so
    /// one view near the tail blocks all behind it; past three quarters, with frames of at
    /// most an eighth of the ring, a frame and its padding may no longer fit.
    pub(super) fn pinned(&self) -> bool {
        let lent = self.pos.wrapping_sub(self.lender.released.load(Ordering::Relaxed));
        lent > self.ring.cap() / 4 * 3 && self.ring.producer_sleeping().load(Ordering::Relaxed) != 0
    }

    /// Whether lent views came back within `RETURN_GRACE`, as far as our looks can tell.
    pub(super) fn views_returning(&mut self) -> bool {
        let (returns, now) = (self.lender.returns.load(Ordering::Relaxed), Instant::now());
        if returns != self.returns_seen {
            (self.returns_seen, self.returned_at) = (returns, now);
        }
        now.duration_since(self.returned_at) < RETURN_GRACE
    }

    /// Asks the producer to move to a free area, leaving the views lent out where they are;
    /// false if no area is free.
    pub(super) fn propose(&mut self) -> bool {
        let Some(area) = self.lender.take_area() else { return false };
        // Zero is the producer's starting point, never a proposal.
        self.seq = self.seq.checked_add(1).unwrap_or(1);
        self.ring.propose(self.seq, area);
        self.proposed = Some((self.seq, area));
        self.lender.leave_in_area();
        true
    }

    /// The producer writes in `area` from our position on.
    fn follow(&mut self, area: u32) {
        // SAFETY: the lender keeps every area mapped while the ring is in use.
        self.ring = unsafe { self.ring.with_data(self.lender.follow(area)) };
        self.proposed = None;
    }

    /// Moves every frame still lent out to private memory at the same address (see
    /// [`mapping`]), continues on a fresh mapping of the area, and frees the ring.
    pub(super) fn evacuate(&mut self) -> Result<()> {
        let cap = self.ring.cap() as usize;
        let offset = self.lender.area_offset(self.lender.current_area());
        let fresh = Mapping::shared_populated(&self.lender.memfd, offset, cap)?;
        let held = self.lender.held();
        let old = NonNull::new(self.ring.data_ptr(0)).expect("mapped memory");
        // SAFETY: the data area is page aligned and owned by a mapping the lender keeps alive;
        // the sender writes only released space, and lent frames are not released.
        let pages = unsafe { privatize(old, cap, &held)? };
        // SAFETY: the fresh mapping is the same ring's data, kept alive by the lender.
        self.ring = unsafe { self.ring.with_data(fresh.ptr.as_ptr()) };
        self.lender.evacuated(fresh, pages);
        Ok(())
    }

    /// Pulls a split frame's tail from the sender and waits for the sender's part; `false` if
    /// the deadline passed first (the next call resumes).
    pub(super) fn complete_split(
        &mut self,
        f: &ring::Located,
        desc_at: u64,
        segments: usize,
        deadline: Instant,
    ) -> Result<bool> {
        // SAFETY: `locate` checked that the descriptor lies inside the frame.
        let desc = unsafe { pull::Descriptor::new(self.ring.data_ptr(desc_at)) };
        let pulled = desc.pulled();
        // Otherwise the sender took the tail back, or an earlier call pulled it.
        if pulled.compare_exchange(pull::IDLE, pull::PULLING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let payload = self.ring.data_ptr(f.payload_at);
            let len = f.header.payload_len() as usize;
            let result = match self.peer_pid {
                Some(pid) => desc.pull(pid, payload, len, segments),
                None => Err(Error::from(io::Error::from(io::ErrorKind::PermissionDenied))),
            };
            pulled.store(if result.is_ok() { pull::DONE } else { pull::REFUSED }, Ordering::Release);
            notify(self.ring.producer_sleeping(), &self.lender.space);
            if let Err(e @ Error::Frame(_)) = result {
                return Err(e);
            }
        }
        let need = if pulled.load(Ordering::Acquire) == pull::DONE { pull::HEAD_COPIED } else { pull::ALL_COPIED };
        let copied = desc.copied();
        self.wake.wait(self.ring.consumer_sleeping(), deadline, || copied.load(Ordering::Acquire) >= need)
    }
}
