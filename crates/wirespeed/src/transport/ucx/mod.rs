//! UCX: one code path for InfiniBand, RoCE, shared memory and TCP, whichever `UCX_TLS` picks.
//!
//! A TCP socket authenticates the peers with the usual handshake; only then do they swap
//! UCP worker addresses over it and connect an endpoint each way. Frames then travel as
//! Active Messages (see `worker`), and the socket stays open as a liveness signal: its
//! hang-up means the peer is gone, whatever the fabric noticed.

mod context;
mod inbox;
mod rma;
mod worker;

use std::io::IoSlice;
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ucx_sys::{UCS_OK, ucs_status_t};

pub use self::rma::allocated_bytes;
use self::worker::Core;
use super::conn::Connection;
use super::listener::Listener;
use super::progress::{DrivenRx, Handle, Shared};
use super::{Config, FrameTx, handshake, tcp};
use crate::error::{Error, Result, Violation};
use crate::fabric::Fabric;
use crate::key::Key;
use crate::proto::handshake::Peer;
use crate::proto::session::Role;

/// How long a graceful close may take to flush what is in flight.
const FLUSH_LIMIT: Duration = Duration::from_secs(2);

pub fn connect(addr: &str, key: &Key, config: &Config) -> Result<Connection> {
    let (mut s, a) = tcp::dial(addr, config.handshake_timeout)?;
    let peer = handshake::client(&mut s, key, config, Fabric::Ucx)?;
    establish(s, Role::Client, peer, config, format!("ucx://{a}"))
}

pub fn listen(addr: &str, key: &Key, config: &Config) -> Result<Listener> {
    tcp::listen_with(Fabric::Ucx, addr, key, config, |mut s, peer, key, config, _| {
        let params = handshake::server(&mut s, key, config, Fabric::Ucx)?;
        establish(s, Role::Server, params, config, peer)
    })
}

fn establish(mut s: TcpStream, role: Role, peer: Peer, config: &Config, name: String) -> Result<Connection> {
    let mut core = Core::new(config.limits)?;
    let ours = core.address()?;
    let theirs = swap_addresses(&mut s, &ours, config.handshake_timeout)?;
    // Its hang-up is how a vanished peer shows (see `worker`).
    crate::transport::sys::keep_alive(&s, config.peer_timeout);
    core.connect(&theirs, peer_failure_handling(same_host(&s)?)?)?;
    let handle = Handle::start(core, s, "wirespeed-ucx-progress")?;
    let rx = DrivenRx { h: handle.clone() };
    let rma = rma::UcxRma { h: handle.clone() };
    let tx =
        UcxTx { h: handle, max_payload: config.limits.max_payload as usize, iov: Vec::new(), done: Box::new(None) };
    Ok(Connection::new(role, peer, Box::new(rx), Box::new(tx), Some(Box::new(rma)), config, name))
}

/// Overrides the choice of UCX error handling: `peer` or `none`.
pub const ERROR_MODE_ENV: &str = "WIRESPEED_UCX_ERROR_MODE";

/// Whether the peer runs on this host, as its bootstrap socket tells. Both sides decide alike.
fn same_host(s: &TcpStream) -> Result<bool> {
    let (local, peer) = (s.local_addr()?.ip(), s.peer_addr()?.ip());
    Ok(local == peer || peer.is_loopback())
}

/// Whether UCX should detect a failed peer itself. Between hosts it should. On one host it
/// must not: shared memory cannot report peer failures, so UCX would fall back to TCP.
/// Either way the bootstrap socket reports a peer that dies.
fn peer_failure_handling(same_host: bool) -> Result<bool> {
    match std::env::var(ERROR_MODE_ENV).as_deref() {
        Ok("peer") => return Ok(true),
        Ok("none") => return Ok(false),
        Ok(other) => {
            return Err(Error::Fabric { op: ERROR_MODE_ENV, status: format!("{other:?} is neither peer nor none") });
        }
        Err(_) => {}
    }
    Ok(!same_host)
}

/// Swaps worker addresses with the peer over the bootstrap socket.
fn swap_addresses(s: &mut TcpStream, ours: &[u8], timeout: Duration) -> Result<Vec<u8>> {
    let theirs = handshake::swap_addresses(s, ours, timeout)?;
    // UCX asserts, and so aborts, on an address of a version it does not know (the low four
    // bits of its first byte; 1.13 to 1.18 know 0 and 1). Refuse one here instead.
    if theirs[0] & 0x0f > 1 {
        return Err(Violation::NotWorkerAddress(theirs[0]).into());
    }
    Ok(theirs)
}

/// How long a request may take to complete once its endpoint is closed by force.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);

/// Waits for the request whose completion lands in `slot` (counted in `sends_in_flight` by
/// the caller). Until it completes UCX may use the caller's buffers, so on a timeout or a
/// failure the endpoint is closed by force, which completes every request, before this
/// returns. UCX 1.13 has left a flush to a dead peer on this host pending even then: after
/// SETTLE_LIMIT the request is given up, and the second value says so; the caller must
/// then never free `slot` (UCX may still write it).
fn complete(
    shared: &Shared<Core>,
    slot: *mut Option<ucs_status_t>,
    timeout: Duration,
    what: &str,
) -> (Result<()>, bool) {
    let mut abandoned = false;
    // SAFETY: (reads of `slot`, here and below) UCX writes it only from callbacks run under
    // the lock that `wait` holds while it calls us.
    let outcome = match shared.wait(Some(Instant::now() + timeout), true, |_| unsafe { *slot }) {
        Ok(Some(UCS_OK)) => Ok(()),
        Ok(Some(status)) => Err(Error::ConnectionLost(format!("{what}: {}", context::status_string(status)))),
        other => {
            shared.lock().close_ep(true, Duration::ZERO);
            // SAFETY: as above.
            let settled = shared.wait(Some(Instant::now() + SETTLE_LIMIT), false, |_| unsafe { *slot });
            abandoned = !matches!(settled, Ok(Some(_)));
            Err(other.err().unwrap_or(Error::Timeout(timeout)))
        }
    };
    shared.lock().sends_in_flight -= 1;
    (outcome, abandoned)
}

struct UcxTx {
    h: Arc<Handle<Core>>,
    max_payload: usize,
    /// The gather list of the frame being sent; UCX reads it until the send completes.
    iov: Vec<ucx_sys::ucp_dt_iov_t>,
    /// Where that send reports completion. Reused: `write_frame` has one send at a time.
    done: Box<Option<ucs_status_t>>,
}

// SAFETY: `iov` holds pointers only while `write_frame` runs, which waits for UCX to finish.
unsafe impl Send for UcxTx {}

impl FrameTx for UcxTx {
    fn write_frame(&mut self, head: &[u8], payload: &[IoSlice<'_>], timeout: Duration) -> Result<()> {
        let shared = &self.h.shared;
        *self.done = None;
        let slot: *mut Option<ucs_status_t> = &mut *self.done;
        {
            let mut core = shared.lock();
            // SAFETY: whatever happens below, we return only once the request has completed.
            if !unsafe { core.start_send(head, payload, &mut self.iov, slot)? } {
                return Ok(());
            }
            core.sends_in_flight += 1;
        }
        let (outcome, abandoned) = complete(shared, slot, timeout, "sending");
        if abandoned {
            Box::leak(std::mem::replace(&mut self.done, Box::new(None)));
        }
        outcome
    }

    fn write_frame_owned(&mut self, head: &[u8], payload: &[Bytes], timeout: Duration) -> Result<()> {
        let shared = &self.h.shared;
        let bytes = payload.iter().map(|b| b.len()).sum();
        let room = shared.wait(Some(Instant::now() + timeout), true, |core| {
            core.reap();
            core.has_room(bytes).then_some(())
        })?;
        if room.is_none() {
            return Err(Error::Timeout(timeout));
        }
        shared.lock().post_owned(head, payload)
    }

    fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn shutdown(&mut self, graceful: bool) {
        let shared = &self.h.shared;
        if graceful {
            self.h.closing_gracefully();
            shared.lock().close_ep(false, FLUSH_LIMIT);
            let _ = shared.sock().shutdown(Shutdown::Write);
        } else {
            shared.lock().close_ep(true, Duration::ZERO);
            shared.fail(Error::ConnectionLost("the connection was shut down".into()));
            let _ = shared.sock().shutdown(Shutdown::Both);
        }
    }
}
