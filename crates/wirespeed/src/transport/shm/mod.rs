//! Same-host shared memory. The two sides meet on a unix socket and authenticate there; the
//! server then sends a memfd holding one ring per direction, plus eventfds for wake-ups, with
//! SCM_RIGHTS. Frames are copied into the ring once by the sender; the receiver gets views of
//! the ring (zero copy) that go back to the sender when dropped, or stay in their area while
//! the ring moves to another when the receiver keeps them. Payloads that lie in a sealed
//! region are not copied at all: the peer maps the region and gets views of it. One-sided
//! regions are shared memory the peer maps too (`windows`).

mod areas;
#[cfg(feature = "gpu")]
mod gpu_window;
mod lend;
mod mapping;
mod pull;
mod regions;
mod rendezvous;
mod ring;
pub use rendezvous::bind as bind_socket;
#[cfg(fuzzing)]
pub use ring::fuzz_locate;
mod rx;
mod tx;
mod waker;
mod windows;

use std::io::{self};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::socket::MsgFlags;

use self::lend::RingLender;
use self::ring::{CTL_BYTES, Ring};
use self::rx::ShmRx;
use self::tx::ShmTx;
use self::waker::Waker;
use super::conn::Connection;
use super::listener::{Acceptor, Listener};
use super::sys::{accept_within, recv_with_fds, send_with_fds};
use super::{Config, handshake};
use crate::error::{Error, Limit, Result, Violation};
use crate::fabric::Fabric;
use crate::key::Key;
use crate::mem::Mapping;
use crate::proto::codec;
use crate::proto::handshake::Peer;
use crate::proto::session::Role;

/// Offset of the data areas: the first page holds the two control blocks.
const DATA_AT: usize = 4096;
const MIN_RING: usize = 8 << 20;
const MAX_RING: usize = 1 << 30;
const MAX_AREAS: u32 = 64;
/// Most bytes of areas per direction: address space, not memory, until they are used.
const MAX_AREA_BYTES: usize = 16 << 30;

pub fn connect(path: &Path, key: &Key, config: &Config) -> Result<Connection> {
    let mut sock = rendezvous::connect(path)
        .map_err(|e| Error::ConnectionLost(format!("cannot connect to shm://{}: {e}", path.display())))?;
    let peer = handshake::client(&mut sock, key, config, Fabric::Shm)?;
    sock.set_read_timeout(Some(config.handshake_timeout))?;
    let (cap, fds) = recv_fds(&sock)?;
    sock.set_read_timeout(None)?;
    let [memfd, a_data, a_space, b_data, b_space] = fds;
    let (map, areas) = map_all(&memfd, cap)?;
    let (a, b) = rings(&map, cap, areas);
    // The client sends on ring A and receives on ring B.
    build(
        sock,
        Role::Client,
        peer,
        config,
        (map, memfd, areas),
        (a, a_data, a_space),
        (b, b_data, b_space),
        format!("shm://{}", path.display()),
    )
}

pub fn listen(path: &Path, key: &Key, config: &Config) -> Result<Listener> {
    if !config.shm_ring_bytes.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&config.shm_ring_bytes) {
        let range = format!("a power of two from {MIN_RING} to {MAX_RING}");
        return Err(Limit::Config { field: "shm_ring_bytes", range }.into());
    }
    if !areas_fit(config.shm_ring_bytes, config.shm_ring_areas) {
        let range = format!("from 1 to {MAX_AREAS}, and hold at most {MAX_AREA_BYTES} bytes");
        return Err(Limit::Config { field: "shm_ring_areas", range }.into());
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
        let (cap, areas) = (config.shm_ring_bytes, config.shm_ring_areas);
        let memfd = memfd_create("wirespeed-shm", MFdFlags::MFD_CLOEXEC).map_err(io::Error::from)?;
        // Sparse: an area takes memory only once written.
        nix::unistd::ftruncate(&memfd, memfd_len(cap, areas) as i64).map_err(io::Error::from)?;
        let efd = || -> Result<OwnedFd> {
            Ok(EventFd::from_value_and_flags(0, EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(io::Error::from)?
                .into())
        };
        let fds = [memfd, efd()?, efd()?, efd()?, efd()?];
        send_fds(&sock, cap, &fds)?;
        let [memfd, a_data, a_space, b_data, b_space] = fds;
        let (map, areas) = map_all(&memfd, cap)?;
        let (a, b) = rings(&map, cap, areas);
        let shared = (map, memfd, areas);
        build(sock, Role::Server, params, config, shared, (b, b_data, b_space), (a, a_data, a_space), peer)
    }
}

type Side = (Ring, OwnedFd, OwnedFd);

#[allow(clippy::too_many_arguments)]
fn build(
    sock: UnixStream,
    role: Role,
    peer: Peer,
    config: &Config,
    (map, memfd, areas): (Mapping, OwnedFd, u32),
    send: Side,
    recv: Side,
    name: String,
) -> Result<Connection> {
    let map = Arc::new(map);
    // Where each ring's first area lies in the memfd: we receive on B as a client, A as a server.
    let (a_at, b_at) = (DATA_AT, DATA_AT + areas as usize * recv.0.cap() as usize);
    let (rx_at, tx_at) = if role == Role::Client { (b_at, a_at) } else { (a_at, b_at) };
    let (tx_ring, tx_data, tx_space) = send;
    let (rx_ring, rx_data, rx_space) = recv;
    let lender = RingLender::new(rx_ring, map.clone(), rx_space, memfd, rx_at, areas);
    let peer_pid =
        nix::sys::socket::getsockopt(&sock, nix::sys::socket::sockopt::PeerCredentials).ok().map(|c| c.pid());
    let incoming = Arc::new(Mutex::new(regions::Incoming::default()));
    let rma = windows::ShmRma::new(sock.try_clone()?, incoming.clone(), config.timeout);
    let rx = ShmRx {
        ring: rx_ring,
        peer_pid,
        pos: 0,
        head: 0,
        limits: config.limits,
        lender,
        wake: Waker { efd: rx_data, sock: sock.try_clone()?, spin: config.shm_spin },
        proposed: None,
        seq: 0,
        regions: incoming,
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
        wake: Waker { efd: tx_space, sock, spin: config.shm_spin },
        map,
        first_area: tx_at,
        areas,
        seq: 0,
        adopted_at: 0,
    };
    Ok(Connection::new(role, peer, Box::new(rx), Box::new(tx), Some(Box::new(rma)), config, name))
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
    let fds: [OwnedFd; 5] = fds.try_into().map_err(|_| Violation::WrongDescriptors)?;
    let cap = codec::read_all(&bytes[..got.min(8)], |r| r.u64()).unwrap_or(0) as usize;
    if !cap.is_power_of_two() || !(MIN_RING..=MAX_RING).contains(&cap) {
        return Err(Violation::RingSize(cap as u64).into());
    }
    Ok((cap, fds))
}

/// Whether a ring of `cap` bytes may have `areas` areas.
fn areas_fit(cap: usize, areas: u32) -> bool {
    (1..=MAX_AREAS).contains(&areas) && areas as usize * cap <= MAX_AREA_BYTES
}

/// The control page, then ring A's areas (client to server), then ring B's.
fn memfd_len(cap: usize, areas: u32) -> usize {
    DATA_AT + 2 * areas as usize * cap
}

/// Maps the whole memfd; its size gives the number of areas per ring.
fn map_all(memfd: &OwnedFd, cap: usize) -> Result<(Mapping, u32)> {
    let st = nix::sys::stat::fstat(memfd).map_err(io::Error::from)?;
    let len = st.st_size as usize;
    let areas = (len.saturating_sub(DATA_AT) / (2 * cap)) as u32;
    if !areas_fit(cap, areas) || len != memfd_len(cap, areas) {
        return Err(Violation::SharedMemorySize.into());
    }
    Ok((Mapping::shared(memfd, 0, len)?, areas))
}

/// Ring A and ring B, each starting in its first area.
fn rings(map: &Mapping, cap: usize, areas: u32) -> (Ring, Ring) {
    let base = map.ptr.as_ptr();
    // SAFETY: both control blocks fit in the first page, every area follows it.
    unsafe {
        (
            Ring::new(base.cast(), base.add(DATA_AT), cap as u64),
            Ring::new(base.add(CTL_BYTES).cast(), base.add(DATA_AT + areas as usize * cap), cap as u64),
        )
    }
}
