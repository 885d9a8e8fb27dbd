//! Same-host shared memory. The two sides meet on a unix socket and authenticate there; the
//! server then sends a memfd holding one ring per direction, plus eventfds for wake-ups, with
//! SCM_RIGHTS. Frames are copied into the ring once by the sender; the receiver gets views of
//! the ring (zero copy) that go back to the sender when dropped. Payloads that lie in a sealed
//! region are not copied at all: the peer maps the region and gets views of it.

mod mapping;
mod pull;
mod regions;
mod rendezvous;
mod ring;

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::socket::MsgFlags;

use self::mapping::{Privatized, privatize};
use self::ring::{CTL_BYTES, Ring, align};
use super::conn::Connection;
use super::listener::{Acceptor, Listener};
use super::sys::{accept_within, ms_until, recv_with_fds, send_with_fds};
use super::{Config, Fill, FrameRx, FrameSink, FrameTx, handshake};
use crate::error::{Error, Result};
use crate::fabric::Fabric;
use crate::key::Key;
use crate::mem::{Buf, Lender, Mapping};
use crate::proto::frame::{FLAG_PULL, FLAG_SHARED, Kind, Limits};
use crate::proto::handshake::Peer;
use crate::proto::session::Role;

/// How long a waiting side polls shared memory before it sleeps on its eventfd.
const SPIN: Duration = Duration::from_micros(50);
/// A ring pinned by lent views waits for them while some came back within this long: the
/// receiver is slower than the sender but draining, and the views free their space without a
/// copy. Past it the views are evacuated (copied out), as for a receiver that keeps them.
const RETURN_GRACE: Duration = Duration::from_millis(2);
/// Offset of the data areas: the first page holds the two control blocks.
const DATA_AT: usize = 4096;
const MIN_RING: usize = 8 << 20;
const MAX_RING: usize = 1 << 30;

pub fn connect(path: &Path, key: &Key, config: &Config) -> Result<Connection> {
    let mut sock = rendezvous::connect(path)
        .map_err(|e| Error::ConnectionLost(format!("cannot connect to shm://{}: {e}", path.display())))?;
    let peer = handshake::client(&mut sock, key, config, Fabric::Shm)?;
    sock.set_read_timeout(Some(config.handshake_timeout))?;
    let (cap, fds) = recv_fds(&sock)?;
    sock.set_read_timeout(None)?;
    let [memfd, a_data, a_space, b_data, b_space] = fds;
    let map = map_all(&memfd, cap)?;
    let (a, b) = rings(&map, cap);
    // The client sends on ring A and receives on ring B.
    build(
        sock,
        Role::Client,
        peer,
        config,
        (map, memfd),
        (a, a_data, a_space),
        (b, b_data, b_space),
        format!("shm://{}", path.display()),
    )
}

pub fn listen(path: &Path, key: &Key, config: &Config) -> Result<Listener> {
    if !config.shm_ring_bytes.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&config.shm_ring_bytes) {
        return Err(Error::Limit(format!("shm_ring_bytes must be a power of two from {MIN_RING} to {MAX_RING}")));
    }
    let (l, cleanup) = rendezvous::bind(path)?;
    l.set_nonblocking(true)?;
    let url = format!("shm://{}", path.display());
    Ok(Listener::spawn(ShmAcceptor(l), (key.clone(), config.clone()), url, config.timeout).on_drop(cleanup))
}

struct ShmAcceptor(UnixListener);

impl Acceptor for ShmAcceptor {
    type Socket = UnixStream;
    type Shared = (Key, Config);

    fn accept(&self, wait: Duration) -> io::Result<Option<(UnixStream, String)>> {
        let Some((s, _)) = accept_within(self.0.as_fd(), wait, || self.0.accept())? else { return Ok(None) };
        s.set_nonblocking(false)?;
        let who = nix::sys::socket::getsockopt(&s, nix::sys::socket::sockopt::PeerCredentials)
            .map(|c| format!("shm peer pid {}", c.pid()))
            .unwrap_or_else(|_| "shm peer".into());
        Ok(Some((s, who)))
    }

    fn establish(mut sock: UnixStream, peer: String, (key, config): &(Key, Config)) -> Result<Connection> {
        let params = handshake::server(&mut sock, key, config, Fabric::Shm)?;
        let cap = config.shm_ring_bytes;
        let memfd = memfd_create("wirespeed-shm", MFdFlags::MFD_CLOEXEC).map_err(io::Error::from)?;
        nix::unistd::ftruncate(&memfd, (DATA_AT + 2 * cap) as i64).map_err(io::Error::from)?;
        let efd = || -> Result<OwnedFd> {
            Ok(EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(io::Error::from)?
                .into())
        };
        let fds = [memfd, efd()?, efd()?, efd()?, efd()?];
        send_fds(&sock, cap, &fds)?;
        let [memfd, a_data, a_space, b_data, b_space] = fds;
        let map = map_all(&memfd, cap)?;
        let (a, b) = rings(&map, cap);
        build(sock, Role::Server, params, config, (map, memfd), (b, b_data, b_space), (a, a_data, a_space), peer)
    }
}

type Side = (Ring, OwnedFd, OwnedFd);

#[allow(clippy::too_many_arguments)]
fn build(
    sock: UnixStream,
    role: Role,
    peer: Peer,
    config: &Config,
    (map, memfd): (Mapping, OwnedFd),
    send: Side,
    recv: Side,
    name: String,
) -> Result<Connection> {
    let map = Arc::new(map);
    // Where our receive ring's data lies in the memfd: ring B for a client, A for a server.
    let rx_offset = if role == Role::Client { DATA_AT + recv.0.cap() as usize } else { DATA_AT };
    let (tx_ring, tx_data, tx_space) = send;
    let (rx_ring, rx_data, rx_space) = recv;
    let lender = Arc::new(RingLender {
        ring: rx_ring,
        released: Default::default(),
        returns: Default::default(),
        _map: map.clone(),
        moved: Mutex::new(Vec::new()),
        space: rx_space,
        track: Mutex::new(Track { base: 0, ends: VecDeque::new(), evacuated: Vec::new() }),
    });
    let peer_pid =
        nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials).ok().map(|c| c.pid());
    let rx = ShmRx {
        ring: rx_ring,
        peer_pid,
        pos: 0,
        head: 0,
        limits: config.limits,
        lender,
        wake: Waker { efd: rx_data, sock: sock.try_clone()? },
        memfd,
        rx_offset,
        regions: Default::default(),
        returns_seen: 0,
        returned_at: Instant::now(),
    };
    let tx = ShmTx {
        ring: tx_ring,
        head: 0,
        split: true,
        regions: Default::default(),
        tail: 0,
        notify: tx_data,
        wake: Waker { efd: tx_space, sock },
        _map: map,
    };
    Ok(Connection::new(role, peer, Box::new(rx), Box::new(tx), None, config, name))
}

fn send_fds(sock: &UnixStream, cap: usize, fds: &[OwnedFd; 5]) -> Result<()> {
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    send_with_fds(sock, &(cap as u64).to_le_bytes(), &raw, MsgFlags::empty())
        .map_err(|e| Error::ConnectionLost(format!("cannot hand over the shared memory: {e}")))?;
    Ok(())
}

fn recv_fds(sock: &UnixStream) -> Result<(usize, [OwnedFd; 5])> {
    let mut bytes = [0u8; 8];
    let (got, fds) = recv_with_fds::<5>(sock, &mut bytes)
        .map_err(|e| Error::ConnectionLost(format!("no shared memory from the server: {e}")))?;
    let fds: [OwnedFd; 5] =
        fds.try_into().map_err(|_| Error::Protocol("the server sent the wrong descriptors".into()))?;
    let cap = u64::from_le_bytes(bytes) as usize;
    if got != 8 || !cap.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&cap) {
        return Err(Error::Protocol(format!("the server offered a ring of {cap} bytes")));
    }
    Ok((cap, fds))
}

/// Maps the whole memfd: the control page and both rings.
fn map_all(memfd: &OwnedFd, cap: usize) -> Result<Mapping> {
    let len = DATA_AT + 2 * cap;
    let st = nix::sys::stat::fstat(memfd).map_err(io::Error::from)?;
    if st.st_size as usize != len {
        return Err(Error::Protocol("the shared memory has the wrong size".into()));
    }
    Mapping::shared(memfd, 0, len)
}

/// Ring A (client to server) and ring B (server to client).
fn rings(map: &Mapping, cap: usize) -> (Ring, Ring) {
    let base = map.ptr.as_ptr();
    // SAFETY: both control blocks fit in the first page, both data areas follow it.
    unsafe {
        (
            Ring::new(base.cast(), base.add(DATA_AT), cap as u64),
            Ring::new(base.add(CTL_BYTES).cast(), base.add(DATA_AT + cap), cap as u64),
        )
    }
}

/// Sleeps on an eventfd after a bounded spin; the unix socket reports a dead peer.
struct Waker {
    efd: OwnedFd,
    sock: UnixStream,
}

impl Waker {
    fn wait(&self, sleeping: &AtomicU32, deadline: Instant, ready: impl Fn() -> bool) -> Result<bool> {
        self.wait_announced(sleeping, deadline, ready, || {})
    }

    /// As `wait`, calling `announce` once the sleeping flag is up (before the first sleep).
    fn wait_announced(
        &self,
        sleeping: &AtomicU32,
        deadline: Instant,
        ready: impl Fn() -> bool,
        announce: impl Fn(),
    ) -> Result<bool> {
        if ready() {
            return Ok(true);
        }
        let spin_end = Instant::now() + SPIN;
        let mut i = 0u32;
        loop {
            if ready() {
                return Ok(true);
            }
            i = i.wrapping_add(1);
            if i.is_multiple_of(64) && Instant::now() >= spin_end {
                break;
            }
            std::hint::spin_loop();
        }
        sleeping.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        announce();
        let result = loop {
            if ready() {
                break Ok(true);
            }
            if Instant::now() >= deadline {
                break Ok(false);
            }
            // Hang-ups only: the socket also carries the peer's sealed regions (see `regions`).
            // nix does not know POLLRDHUP, so its `revents` reads `None` when that is set.
            let hang_up = PollFlags::from_bits_retain(libc::POLLRDHUP);
            let mut fds = [PollFd::new(self.efd.as_fd(), PollFlags::POLLIN), PollFd::new(self.sock.as_fd(), hang_up)];
            match poll(&mut fds, PollTimeout::from(ms_until(deadline, 100))) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => break Err(Error::Io(e.into())),
            }
            if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                let mut b = [0u8; 8];
                let _ = nix::unistd::read(&self.efd, &mut b);
            }
            if fds[1].revents().is_none_or(|r| !r.is_empty()) && !ready() {
                break Err(Error::ConnectionLost("the peer went away".into()));
            }
        };
        sleeping.store(0, Ordering::Relaxed);
        result
    }
}

/// Wakes the other side if it is asleep on `efd`.
fn notify(sleeping: &AtomicU32, efd: &OwnedFd) {
    fence(Ordering::SeqCst);
    if sleeping.load(Ordering::Relaxed) != 0 {
        let _ = nix::unistd::write(efd, &1u64.to_ne_bytes());
    }
}

/// Copies bytes `from..to` of the concatenated `payload` to `dst`.
///
/// # Safety
/// `dst` must have room for `to - from` bytes.
unsafe fn copy_range(payload: &[IoSlice<'_>], from: usize, to: usize, mut dst: *mut u8) {
    let mut off = 0;
    for s in payload {
        let (lo, hi) = (from.max(off), to.min(off + s.len()));
        if lo < hi {
            // SAFETY: in bounds of `s`, and `dst` has room by the caller's contract.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr().add(lo - off), dst, hi - lo);
                dst = dst.add(hi - lo);
            }
        }
        off += s.len();
    }
}

/// The payload from byte `at` on as slices, if few enough to describe for a pull.
fn split_tail<'a>(payload: &[IoSlice<'a>], at: usize) -> Option<(usize, Vec<IoSlice<'a>>)> {
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

struct ShmTx {
    ring: Ring,
    head: u64,
    /// Split large frames with the receiver (until it refuses once).
    split: bool,
    /// Sealed regions the peer has.
    regions: regions::Outgoing,
    /// The consumer's tail as we last read it.
    tail: u64,
    notify: OwnedFd,
    wake: Waker,
    _map: Arc<Mapping>,
}

impl ShmTx {
    /// Waits up to `timeout` for `total` bytes of room; returns where the frame goes. Nothing
    /// is published: until `head` moves past it, the next reservation may take the place again.
    fn reserve(&mut self, total: u64, timeout: Duration) -> Result<u64> {
        if total > self.ring.cap() / 2 {
            return Err(Error::Limit(format!("a {total}-byte frame does not fit the shared-memory ring")));
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
        if pad > 0 {
            self.ring.write_pad(self.head, pad);
        }
        Ok(at)
    }

    /// A frame whose payload stays in a sealed region the peer has: the ring gets the header
    /// and the reference.
    fn write_shared(&mut self, head: &[u8], reference: regions::Pair, timeout: Duration) -> Result<()> {
        let total = Ring::frame_bytes(head.len(), regions::REF_BYTES);
        let at = self.reserve(total, timeout)?;
        let frame = self.ring.data_ptr(at);
        // SAFETY: `reserve` gave us the frame's bytes at `at`, before the ring's end.
        unsafe {
            std::ptr::copy_nonoverlapping(head.as_ptr(), frame, head.len());
            *frame.add(1) = FLAG_SHARED;
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
        let frame = self.ring.data_ptr(at);
        let payload_at = self.ring.data_ptr(at + align(head.len() as u64));
        // SAFETY: `reserve` gave us `total` free bytes at `at`, before the ring's end.
        unsafe { std::ptr::copy_nonoverlapping(head.as_ptr(), frame, head.len()) };
        self.head = at + total;
        let Some((split, tail)) = split else {
            // SAFETY: as above; the payload area follows the header and meta.
            unsafe { copy_range(payload, 0, plen, payload_at) };
            self.ring.publish(self.head);
            notify(self.ring.consumer_sleeping(), &self.notify);
            return Ok(());
        };
        // A split frame is published before its payload is in place, so the receiver pulls
        // the tail while we copy the head.
        // SAFETY: the descriptor's room was reserved after the payload; the header bytes are ours.
        let desc = unsafe {
            *frame.add(1) = FLAG_PULL;
            std::ptr::copy_nonoverlapping((tail.len() as u32).to_le_bytes().as_ptr(), frame.add(12), 4);
            pull::Descriptor::new(self.ring.data_ptr(at + body))
        };
        desc.write(split, &tail);
        self.ring.publish(self.head);
        notify(self.ring.consumer_sleeping(), &self.notify);
        // SAFETY: the head of the payload area is ours to fill.
        unsafe { copy_range(payload, 0, split, payload_at) };
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
            unsafe { copy_range(payload, split, plen, payload_at.add(split)) };
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

struct ShmRx {
    ring: Ring,
    /// The sender's pid as the kernel reports it, for pulling split frames.
    peer_pid: Option<libc::pid_t>,
    /// Next byte to read; between the lender's tail and the producer's head.
    pos: u64,
    /// The producer's head as we last read it.
    head: u64,
    limits: Limits,
    lender: Arc<RingLender>,
    wake: Waker,
    /// To map the receive ring afresh after an evacuation.
    memfd: OwnedFd,
    rx_offset: usize,
    /// The peer's sealed regions.
    regions: regions::Incoming,
    /// The lender's count of returned views at our last look, and when it last changed.
    returns_seen: u64,
    returned_at: Instant,
}

impl FrameRx for ShmRx {
    fn read_frame(&mut self, deadline: Instant, sink: &mut FrameSink<'_>) -> Result<bool> {
        loop {
            if self.pos == self.head {
                self.head = self.ring.head();
            }
            let Some(f) = self.ring.locate(self.pos, self.head, &self.limits)? else {
                let pinned = self.pinned();
                if pinned && !self.views_returning() {
                    self.evacuate()?;
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
                let read = self
                    .regions
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
    fn pinned(&self) -> bool {
        let lent = self.pos.wrapping_sub(self.lender.released.load(Ordering::Relaxed));
        lent > self.ring.cap() / 4 * 3 && self.ring.producer_sleeping().load(Ordering::Relaxed) != 0
    }

    /// Whether lent views came back within `RETURN_GRACE`, as far as our looks can tell.
    fn views_returning(&mut self) -> bool {
        let (returns, now) = (self.lender.returns.load(Ordering::Relaxed), Instant::now());
        if returns != self.returns_seen {
            (self.returns_seen, self.returned_at) = (returns, now);
        }
        now.duration_since(self.returned_at) < RETURN_GRACE
    }

    /// Moves every frame still lent out to private memory at the same address (see
    /// [`mapping`]), continues on a fresh mapping of the ring, and frees the ring.
    fn evacuate(&mut self) -> Result<()> {
        let cap = self.ring.cap() as usize;
        let fresh = Mapping::shared(&self.memfd, self.rx_offset, cap)?;
        let held = self.lender.held();
        let old = NonNull::new(self.ring.data_ptr(0)).expect("mapped memory");
        // SAFETY: the data area is page aligned and owned by a mapping the lender keeps alive;
        // the sender writes only released space, and lent frames are not released.
        let pages = unsafe { privatize(old, cap, &held)? };
        // SAFETY: the fresh mapping is the same ring's data, kept alive by the lender.
        self.ring = unsafe { self.ring.with_data(fresh.ptr.as_ptr()) };
        self.lender.forget_all(fresh, pages);
        Ok(())
    }

    /// Pulls a split frame's tail from the sender and waits for the sender's part; `false` if
    /// the deadline passed first (the next call resumes).
    fn complete_split(&mut self, f: &ring::Located, desc_at: u64, segments: usize, deadline: Instant) -> Result<bool> {
        // SAFETY: `locate` checked that the descriptor lies inside the frame.
        let desc = unsafe { pull::Descriptor::new(self.ring.data_ptr(desc_at)) };
        let pulled = desc.pulled();
        // Otherwise the sender took the tail back, or an earlier call pulled it.
        if pulled.compare_exchange(pull::IDLE, pull::PULLING, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let payload = self.ring.data_ptr(f.payload_at);
            let len = f.header.payload_len() as usize;
            let result = match self.peer_pid {
                Some(pid) => desc.pull(pid, payload, len, segments),
                None => Err(Error::Io(io::Error::from(io::ErrorKind::PermissionDenied))),
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

/// Takes views of the receive ring back, in any order, and frees ring space in order.
struct RingLender {
    ring: Ring,
    /// Our own copy of the tail we published, so checks need not touch the shared line.
    released: std::sync::atomic::AtomicU64,
    /// Views given back so far, so the receiver can tell a draining application from one
    /// that keeps them.
    returns: std::sync::atomic::AtomicU64,
    space: OwnedFd,
    /// Declared (so dropped) before the mappings its evacuated pages lie in.
    track: Mutex<Track>,
    _map: Arc<Mapping>,
    /// Fresh mappings of the ring after evacuations; views may point into any of them.
    moved: Mutex<Vec<Mapping>>,
}

struct Track {
    /// Token of `ends[0]`.
    base: u64,
    /// Ring position after each consumed frame, and whether it is released.
    ends: VecDeque<(u64, bool)>,
    /// Views moved to private memory by evacuations and not returned yet.
    evacuated: Vec<Evacuated>,
}

/// One evacuation's views: their private pages are freed once the last comes back.
struct Evacuated {
    tokens: std::ops::Range<u64>,
    outstanding: usize,
    /// Freed when dropped.
    _pages: Privatized,
}

impl RingLender {
    fn push(&self, end: u64, released: bool) -> u64 {
        let mut t = self.track.lock().unwrap_or_else(|p| p.into_inner());
        let token = t.base + t.ends.len() as u64;
        t.ends.push_back((end, released));
        if released {
            self.advance(&mut t);
        }
        token
    }

    /// The ring offsets of every frame lent out and not given back.
    fn held(&self) -> Vec<(usize, usize)> {
        let cap = self.ring.cap();
        let t = self.track.lock().unwrap_or_else(|p| p.into_inner());
        let mut start = self.released.load(Ordering::Relaxed);
        let mut held = Vec::new();
        for &(end, released) in &t.ends {
            if !released {
                // Frames never wrap, so the range is contiguous in the data area.
                let at = (start % cap) as usize;
                held.push((at, at + (end - start) as usize));
            }
            start = end;
        }
        held
    }

    /// After an evacuation: every outstanding view now lies in `pages`, so the ring space is
    /// free; the pages go once those views come back.
    fn forget_all(&self, fresh: Mapping, pages: Privatized) {
        self.moved.lock().unwrap_or_else(|p| p.into_inner()).push(fresh);
        let mut t = self.track.lock().unwrap_or_else(|p| p.into_inner());
        let tokens = t.base..t.base + t.ends.len() as u64;
        let outstanding = t.ends.iter().filter(|e| !e.1).count();
        if outstanding > 0 {
            t.evacuated.push(Evacuated { tokens, outstanding, _pages: pages });
        }
        t.ends.iter_mut().for_each(|e| e.1 = true);
        self.advance(&mut t);
    }

    fn advance(&self, t: &mut Track) {
        let mut tail = None;
        while let Some(&(end, true)) = t.ends.front() {
            tail = Some(end);
            t.ends.pop_front();
            t.base += 1;
        }
        if let Some(end) = tail {
            self.released.store(end, Ordering::Relaxed);
            self.ring.release_to(end);
            notify(self.ring.producer_sleeping(), &self.space);
        }
    }
}

impl Lender for RingLender {
    fn release(&self, token: u64) {
        self.returns.fetch_add(1, Ordering::Relaxed);
        let mut t = self.track.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = token.checked_sub(t.base) else {
            // An evacuated view; dropping the last of its evacuation frees the private pages.
            if let Some(k) = t.evacuated.iter().position(|e| e.tokens.contains(&token)) {
                t.evacuated[k].outstanding -= 1;
                if t.evacuated[k].outstanding == 0 {
                    t.evacuated.swap_remove(k);
                }
            }
            return;
        };
        if let Some(e) = t.ends.get_mut(i as usize) {
            e.1 = true;
        }
        self.advance(&mut t);
    }
}
