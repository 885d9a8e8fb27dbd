//! Accepts sockets on a background thread and authenticates each on its own thread, so a
//! silent or hostile client never delays the others. At most [`MAX_PENDING_HANDSHAKES`] are in
//! progress: a new socket past them evicts the oldest, whose handshake then fails at once. A
//! real client finishes its handshake in a round trip or two, so sockets that never speak cannot
//! keep it out, however many there are.

use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use super::conn::Connection;
use crate::error::{Error, Result};
use crate::sync::Unpoison;

/// Most handshakes in progress at once.
const MAX_PENDING_HANDSHAKES: usize = 64;

/// Yields authenticated connections; dropping it stops listening.
pub struct Listener {
    url: String,
    incoming: Receiver<Result<Connection>>,
    stop: Arc<AtomicBool>,
    timeout: Duration,
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

/// What a backend hands the listener: a way to take the next raw client and to
/// authenticate one.
pub(crate) trait Acceptor: Send + 'static {
    type Socket: AsFd + Send + 'static;
    /// The next client, or `None` if none arrived within `wait`.
    fn accept(&self, wait: Duration) -> std::io::Result<Option<(Self::Socket, String)>>;
    /// Runs the server handshake and builds the connection.
    fn establish(socket: Self::Socket, peer: String, shared: &Self::Shared) -> Result<Connection>;
    type Shared: Send + Sync + 'static;
}

impl Listener {
    pub(crate) fn spawn<A: Acceptor>(acceptor: A, shared: A::Shared, url: String, timeout: Duration) -> Self {
        let (tx, incoming) = sync_channel(MAX_PENDING_HANDSHAKES);
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let shared = Arc::new(shared);
        thread::Builder::new()
            .name("wirespeed-accept".into())
            .spawn(move || accept_loop(acceptor, shared, tx, stop2))
            .expect("spawn the accept thread");
        Listener { url, incoming, stop, timeout, on_drop: None }
    }

    pub(crate) fn on_drop(mut self, f: impl FnOnce() + Send + 'static) -> Self {
        self.on_drop = Some(Box::new(f));
        self
    }

    /// The URL clients connect to (with the real port if 0 was asked for).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The next authenticated connection. A client that failed its handshake comes back as
    /// [`Error::Rejected`]; the listener keeps serving after it.
    pub fn accept(&self) -> Result<Connection> {
        self.accept_timeout(self.timeout)
    }

    /// As [`Listener::accept`], waiting at most `timeout`.
    pub fn accept_timeout(&self, timeout: Duration) -> Result<Connection> {
        match self.incoming.recv_timeout(timeout) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(Error::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(Error::Closed),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(f) = self.on_drop.take() {
            f();
        }
    }
}

fn accept_loop<A: Acceptor>(
    acceptor: A,
    shared: Arc<A::Shared>,
    tx: SyncSender<Result<Connection>>,
    stop: Arc<AtomicBool>,
) {
    let pending = Arc::new(Pending::default());
    while !stop.load(Ordering::Relaxed) {
        let (socket, peer) = match acceptor.accept(Duration::from_millis(100)) {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(e) => {
                // Out of descriptors and the like: report, back off, keep going.
                let _ = tx.try_send(Err(Error::from(e)));
                thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Some(id) = pending.enter(&socket) else { continue };
        let (tx, shared, pending2) = (tx.clone(), shared.clone(), pending.clone());
        let spawned = thread::Builder::new().name("wirespeed-handshake".into()).spawn(move || {
            let result = A::establish(socket, peer.clone(), &shared)
                .map_err(|reason| Error::Rejected { peer, reason: Box::new(reason) });
            pending2.leave(id);
            let _ = tx.send(result);
        });
        if spawned.is_err() {
            // The socket went with the failed closure; back off and keep serving.
            pending.leave(id);
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The handshakes in progress, oldest first, each with a second descriptor of its socket to
/// cut it short by.
#[derive(Default)]
struct Pending {
    sockets: Mutex<(u64, VecDeque<(u64, OwnedFd)>)>,
}

impl Pending {
    /// Counts `socket` in, evicting the oldest handshake if there are too many. None if the
    /// socket cannot be tracked (out of descriptors): it is then dropped.
    fn enter(&self, socket: &impl AsFd) -> Option<u64> {
        let fd = socket.as_fd().try_clone_to_owned().ok()?;
        let mut guard = self.sockets.lock().unpoison();
        let (next, sockets) = &mut *guard;
        if sockets.len() >= MAX_PENDING_HANDSHAKES
            && let Some((_, oldest)) = sockets.pop_front()
        {
            // Its handshake thread sees the socket end and fails at once.
            let _ = nix::sys::socket::shutdown(oldest.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
        *next += 1;
        sockets.push_back((*next, fd));
        Some(*next)
    }

    fn leave(&self, id: u64) {
        let mut guard = self.sockets.lock().unpoison();
        guard.1.retain(|(i, _)| *i != id);
    }
}
