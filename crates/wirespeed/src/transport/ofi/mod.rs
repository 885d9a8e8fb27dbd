//! libfabric: one code path for Slingshot (cxi), EFA, InfiniBand and RoCE (verbs), shared
//! memory and TCP, whichever provider the URL names (`ofi+<provider>://host:port`).
//!
//! As with UCX, a TCP socket authenticates the peers with the usual handshake; only then do
//! they swap endpoint names over it and put each other in their address vectors. Frames
//! then travel as messages on a reliable-datagram endpoint (see `core` and `wire`), and the
//! socket stays open as a liveness signal: its hang-up means the peer is gone.

mod core;
mod endpoint;
mod rma;
mod wire;

#[cfg(fuzzing)]
pub use wire::fuzz_decode;

use std::io::IoSlice;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use smallvec::SmallVec;

use self::core::{Core, RECV_WINDOW_COPY, RECV_WINDOW_FABRIC};
use self::endpoint::Endpoint;
use super::conn::Connection;
use super::listener::Listener;
use super::progress::{DrivenRx, Driver, Handle};
use super::{Config, FrameTx, handshake, tcp};
use crate::error::{Error, Result};
use crate::fabric::{Fabric, Provider};
use crate::key::Key;
use crate::proto::handshake::Peer;
use crate::proto::session::Role;

/// After the bootstrap socket hangs up, how long frames already on their way may still arrive.
const HANGUP_GRACE: Duration = Duration::from_millis(250);
/// How long a graceful close may take to hand over what is queued.
const FLUSH_LIMIT: Duration = Duration::from_secs(2);
/// Set to `off` to use no one-sided access even where the provider has it: bodies then
/// travel in pieces and one-sided access as frames, as on a provider without FI_RMA.
pub const RMA_ENV: &str = "WIRESPEED_OFI_RMA";

pub fn connect(provider: Provider, addr: &str, key: &Key, config: &Config) -> Result<Connection> {
    let fabric = Fabric::Ofi(provider);
    let (mut s, a) = tcp::dial(addr, config.handshake_timeout)?;
    let peer = handshake::client(&mut s, key, config, fabric)?;
    establish(provider, s, Role::Client, peer, config, format!("{fabric}://{a}"))
}

pub fn listen(provider: Provider, addr: &str, key: &Key, config: &Config) -> Result<Listener> {
    // Fail here, not at the first client, where libfabric or the provider is missing.
    Endpoint::open(provider, true, None)?;
    tcp::listen_with(Fabric::Ofi(provider), addr, key, config, |mut s, peer, key, config, fabric| {
        let params = handshake::server(&mut s, key, config, fabric)?;
        let Fabric::Ofi(provider) = fabric else { unreachable!("an ofi listener") };
        establish(provider, s, Role::Server, params, config, peer)
    })
}

fn establish(
    provider: Provider,
    mut s: TcpStream,
    role: Role,
    peer: Peer,
    config: &Config,
    name: String,
) -> Result<Connection> {
    let no_rma = std::env::var(RMA_ENV).is_ok_and(|v| v == "off");
    let source = s.local_addr()?.ip().to_string();
    let mut ep = Endpoint::open(provider, no_rma, Some(&source))?;
    let theirs = handshake::swap_addresses(&mut s, &ep.name()?, config.handshake_timeout)?;
    ep.insert_peer(&theirs)?;
    // Its hang-up is how a vanished peer shows.
    crate::transport::sys::keep_alive(&s, config.peer_timeout);
    let rma = ep.abilities.rma;
    let window = if provider == Provider::Shm { RECV_WINDOW_COPY } else { RECV_WINDOW_FABRIC };
    let core = Core::new(ep, config.limits, window)?;
    let handle = Handle::start(core, s, "wirespeed-ofi-progress")?;
    let rx = DrivenRx { h: handle.clone() };
    let native = rma.then(|| Box::new(rma::OfiRma { h: handle.clone() }) as Box<dyn super::NativeRma>);
    // Without one-sided access, frames carry bodies in pieces; keep them to a few.
    let max_payload = config.limits.max_payload as usize;
    let tx = OfiTx { h: handle, rma, max_payload };
    Ok(Connection::new(role, peer, Box::new(rx), Box::new(tx), native, config, name))
}

struct OfiTx {
    h: Arc<Handle<Core>>,
    rma: bool,
    max_payload: usize,
}

impl OfiTx {
    /// The connection's state once `bytes` more fit under the in-flight limit (at once, most
    /// times, without reading the clock).
    fn lock_with_room(&self, bytes: usize, timeout: Duration) -> Result<MutexGuard<'_, Core>> {
        let shared = &self.h.shared;
        let core = shared.lock_driving();
        if core.has_room(bytes) {
            return Ok(core);
        }
        drop(core);
        let room = shared.wait(Some(Instant::now() + timeout), true, |core| core.has_room(bytes).then_some(()))?;
        room.ok_or(Error::Timeout(timeout))?;
        Ok(shared.lock())
    }

    /// Waits for the peer to read the rendezvous body of `token`; on a timeout, revokes its
    /// access before returning, since the caller's memory is no longer ours to lend.
    fn wait_for_reader(&self, token: u64, timeout: Duration) -> Result<()> {
        let shared = &self.h.shared;
        shared.lock().waiting += 1;
        let outcome = shared.wait(Some(Instant::now() + timeout), true, |core| core.finished(token).then_some(()));
        let mut core = shared.lock();
        core.waiting -= 1;
        match outcome {
            Ok(Some(())) => Ok(()),
            other => {
                core.abandon(token);
                Err(other.err().unwrap_or(Error::Timeout(timeout)))
            }
        }
    }
}

impl FrameTx for OfiTx {
    fn write_frame(&mut self, head: &[u8], payload: &[IoSlice<'_>], timeout: Duration) -> Result<()> {
        let bytes = head.len() + payload.iter().map(|s| s.len()).sum::<usize>();
        let mut core = self.lock_with_room(bytes, timeout)?;
        if !self.rma || Core::eager(bytes) {
            return core.queue_copied(head, payload);
        }
        // SAFETY: we wait for the peer's Done, or revoke its access, before returning.
        let token = unsafe { core.start_rendezvous(head, payload, None)? };
        drop(core);
        self.wait_for_reader(token, timeout)
    }

    fn write_frame_owned(&mut self, head: &[u8], payload: &[Bytes], timeout: Duration) -> Result<()> {
        let bytes = head.len() + payload.iter().map(|b| b.len()).sum::<usize>();
        let slices: SmallVec<[IoSlice<'_>; 4]> = payload.iter().map(|b| IoSlice::new(b)).collect();
        let mut core = self.lock_with_room(bytes, timeout)?;
        if !self.rma || Core::eager(bytes) {
            return core.queue_copied(head, &slices);
        }
        // SAFETY: the pending send owns the bytes the slices point into.
        unsafe { core.start_rendezvous(head, &slices, Some(payload.to_vec())) }.map(|_| ())
    }

    fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn shutdown(&mut self, graceful: bool) {
        let shared = &self.h.shared;
        if graceful {
            self.h.closing_gracefully();
            // Hand what is queued to the provider, so the lingering progress thread delivers it.
            let _ = shared.wait(Some(Instant::now() + FLUSH_LIMIT), true, |core| {
                core.progress();
                core.drained().then_some(())
            });
            let _ = shared.sock().shutdown(Shutdown::Write);
        } else {
            shared.fail(Error::ConnectionLost("the connection was shut down".into()));
            let _ = shared.sock().shutdown(Shutdown::Both);
        }
    }
}
