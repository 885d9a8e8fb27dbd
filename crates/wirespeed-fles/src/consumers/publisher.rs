//! Runs FLESnet's item distribution for one compute node: consumers connect to the abstract
//! unix socket `@NAME` (ZeroMQ's `ipc://@NAME`). One thread polls the listener and every
//! consumer's socket; the node publishes on its own thread, writing to idle consumers at once.
//! Both work the [`Distributor`] under one lock, so an item costs no thread a wake-up of its
//! own: a completion and the next item's dispatch happen in one, and a new item in none.
//! Only processes of this user may connect (their credentials are checked): items name shared
//! memory.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::distributor::{Action, Distributor, ItemId, WorkerId};
use super::zmtp::{SocketType, Zmtp, message_bytes};
use crate::error::{FlesError, Lost, Result};

/// Consumers connected at once, at most; more are turned away.
const MAX_WORKERS: usize = 256;
/// Worker messages are a line of text.
const MAX_WORKER_FRAME: usize = 4096;
/// How long a connection may take to say who it is.
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Bytes waiting for a consumer that does not read, at most: past it, it is dropped.
const MAX_UNSENT: usize = 1 << 20;

/// What to do once no consumer holds an item any more.
pub type OnDone = Box<dyn FnOnce() + Send>;

/// The distribution of one node's items; dropping it ends the stream for every consumer
/// once they have completed what they hold (or the hold limit took it).
pub struct Publisher {
    shared: Arc<Shared>,
    name: String,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the polling thread when it must look again: the end, or a consumer's socket
    /// that filled up.
    wake: EventFd,
    registered: Registered,
}

/// How many consumers are registered, for those who wait for them.
#[derive(Default)]
struct Registered {
    count: Mutex<usize>,
    changed: Condvar,
}

fn net(what: &str, e: impl Into<std::io::Error>) -> FlesError {
    crate::error::io(what, e.into())
}

impl Publisher {
    /// Listens at `ipc://@NAME`; consumers holding an item past `hold_limit` lose it.
    pub fn start(name: &str, hold_limit: Duration) -> Result<Publisher> {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| FlesError::Config(format!("{name}: not a usable socket name ({e})")))?;
        let listener = UnixListener::bind_addr(&addr).map_err(|e| {
            crate::error::io(
                format!("listening for consumers at ipc://@{name} (is another node publishing as {name}?)"),
                e,
            )
        })?;
        listener.set_nonblocking(true).map_err(|e| net("listening for consumers", e))?;
        let wake = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).map_err(|e| net("making an eventfd", e))?;
        let state = State {
            d: Distributor::new(hold_limit),
            conns: HashMap::new(),
            pending: HashMap::new(),
            next_id: 0,
            ending: false,
            stuck: false,
            closing: Vec::new(),
        };
        let shared = Arc::new(Shared { state: Mutex::new(state), wake, registered: Registered::default() });
        let polling = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fles-distributor".into())
            .spawn(move || poll_loop(&listener, &polling))
            .map_err(|e| net("starting the distributor", e))?;
        Ok(Publisher { shared, name: name.into(), thread: Some(thread) })
    }

    /// Offers item `id` to the consumers; `done` runs once none holds it (at once if none
    /// wants it).
    pub fn publish(&self, id: ItemId, payload: Vec<u8>, done: OnDone) {
        let mut state = self.shared.lock();
        state.pending.insert(id, done);
        state.d.on_item(id, payload, Instant::now());
        state.act();
        if std::mem::take(&mut state.stuck) {
            let _ = self.shared.wake.write(1);
        }
    }

    /// No more items: idle consumers hear the end now, busy ones once they are done.
    pub fn end(&self) {
        let mut state = self.shared.lock();
        state.ending = true;
        state.d.end();
        state.act();
        let _ = self.shared.wake.write(1);
    }

    /// Waits until `n` consumers have registered, at most `timeout`.
    pub fn wait_for_consumers(&self, n: usize, timeout: Duration) -> Result<()> {
        let registered = &self.shared.registered;
        let count = registered.count.lock().unwrap_or_else(|e| e.into_inner());
        let (count, _) =
            registered.changed.wait_timeout_while(count, timeout, |c| *c < n).unwrap_or_else(|e| e.into_inner());
        match *count >= n {
            true => Ok(()),
            false => {
                Err(Lost::TooFewConsumers { registered: *count, wanted: n, name: self.name.clone(), timeout }.into())
            }
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.end();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One consumer's connection.
struct Conn {
    stream: UnixStream,
    zmtp: Zmtp,
    /// Bytes it has not taken yet.
    unsent: Vec<u8>,
    /// Until it has said READY.
    greeting_by: Option<Instant>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The distributor and the consumers' connections.
struct State {
    d: Distributor,
    conns: HashMap<WorkerId, Conn>,
    pending: HashMap<ItemId, OnDone>,
    next_id: WorkerId,
    ending: bool,
    /// A write left bytes waiting: the polling thread must watch for room.
    stuck: bool,
    /// Connections dropped, closed only by the polling thread, which may be polling them.
    closing: Vec<Conn>,
}

/// Polls the listener and the consumers, until the end is told and no item is left.
fn poll_loop(listener: &UnixListener, shared: &Shared) {
    loop {
        let now = Instant::now();
        // What to watch, taken under the lock and watched without it.
        let (ids, fds, wait) = {
            let state = shared.lock();
            if state.ending && state.d.live_items() == 0 {
                // Every consumer told the end (or one that hears it thus): close them all.
                for c in state.conns.values() {
                    let _ = c.stream.shutdown(std::net::Shutdown::Both);
                }
                return;
            }
            let greetings = state.conns.values().filter_map(|c| c.greeting_by);
            let due = greetings.fold(state.d.next_tick(now), Instant::min);
            let wait = PollTimeout::try_from(due.saturating_duration_since(now)).unwrap_or(PollTimeout::MAX);
            let ids: Vec<WorkerId> = state.conns.keys().copied().collect();
            let fds: Vec<(i32, PollFlags)> = ids
                .iter()
                .map(|id| {
                    let c = &state.conns[id];
                    let out = if c.unsent.is_empty() { PollFlags::empty() } else { PollFlags::POLLOUT };
                    (c.stream.as_raw_fd(), PollFlags::POLLIN | out)
                })
                .collect();
            (ids, fds, wait)
        };
        let (accepting, ready) = {
            // SAFETY: the descriptors stay open while we poll: a connection dropped meanwhile
            // waits in `closing`, which only this thread empties, after the poll.
            let borrowed: Vec<BorrowedFd<'_>> =
                fds.iter().map(|&(fd, _)| unsafe { BorrowedFd::borrow_raw(fd) }).collect();
            let mut polled = vec![
                PollFd::new(listener.as_fd(), PollFlags::POLLIN),
                PollFd::new(shared.wake.as_fd(), PollFlags::POLLIN),
            ];
            polled.extend(borrowed.iter().zip(&fds).map(|(fd, &(_, flags))| PollFd::new(*fd, flags)));
            if poll(&mut polled, wait).is_err() {
                continue; // EINTR
            }
            let any = |f: &PollFd| f.revents().is_some_and(|r| !r.is_empty());
            if any(&polled[1]) {
                let _ = shared.wake.read();
            }
            let ready: Vec<WorkerId> =
                ids.iter().zip(&polled[2..]).filter(|(_, f)| any(f)).map(|(&id, _)| id).collect();
            (any(&polled[0]), ready)
        };
        let now = Instant::now();
        let mut state = shared.lock();
        if accepting {
            state.accept(listener, now);
        }
        for id in ready {
            state.serve(id, now);
        }
        state.conns.retain(|_, c| c.greeting_by.is_none_or(|by| by > now));
        state.d.on_tick(now);
        state.act();
        state.stuck = false;
        state.closing.clear();
        shared.registered.set(state.d.workers().count());
    }
}

impl State {
    /// Takes new connections. When full, one still silent after connecting gives way (the
    /// oldest), so silent sockets never keep a consumer out; registered ones never do.
    fn accept(&mut self, listener: &UnixListener, now: Instant) {
        while let Ok((stream, _)) = listener.accept() {
            if !same_user(&stream) || stream.set_nonblocking(true).is_err() {
                continue; // dropped: closed
            }
            if self.conns.len() >= MAX_WORKERS {
                let silent = self.conns.iter().filter_map(|(&id, c)| c.greeting_by.map(|by| (by, id))).min();
                let Some((_, oldest)) = silent else { continue };
                self.drop_conn(oldest);
            }
            self.next_id += 1;
            let mut zmtp = Zmtp::new(SocketType::Router, MAX_WORKER_FRAME);
            let unsent = zmtp.transmit();
            self.conns.insert(self.next_id, Conn { stream, zmtp, unsent, greeting_by: Some(now + HANDSHAKE) });
            self.flush(self.next_id);
        }
    }

    /// Reads what consumer `id` sent, and writes what waits for it.
    fn serve(&mut self, id: WorkerId, now: Instant) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        let mut buf = [0u8; 4096];
        let mut gone = false;
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => gone = true,
                Ok(n) => {
                    gone = c.zmtp.receive(&buf[..n]).is_err();
                    if !gone {
                        continue;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => gone = true,
            }
            break;
        }
        if c.zmtp.is_open() {
            c.greeting_by = None;
        }
        let out = c.zmtp.transmit();
        c.unsent.extend_from_slice(&out);
        let messages: Vec<_> = std::iter::from_fn(|| c.zmtp.message()).collect();
        for m in messages {
            self.d.on_message(id, &m, now);
        }
        if gone {
            self.drop_conn(id);
        } else {
            self.flush(id);
        }
    }

    /// Writes what waits for consumer `id`, as much as its socket takes.
    fn flush(&mut self, id: WorkerId) {
        let Some(c) = self.conns.get_mut(&id) else { return };
        let mut failed = false;
        while !c.unsent.is_empty() {
            match c.stream.write(&c.unsent) {
                Ok(n) => drop(c.unsent.drain(..n)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        self.stuck |= !c.unsent.is_empty();
        // A consumer that takes nothing while we write never holds us.
        if failed || c.unsent.len() > MAX_UNSENT {
            self.drop_conn(id);
        }
    }

    /// Forgets consumer `id`; its socket closes once the polling thread is done with it.
    fn drop_conn(&mut self, id: WorkerId) {
        if let Some(c) = self.conns.remove(&id) {
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
            self.closing.push(c);
        }
        self.d.on_gone(id);
    }

    fn act(&mut self) {
        while let Some(action) = self.d.poll_action() {
            match action {
                Action::Send(w, parts) => {
                    let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                    if let Some(c) = self.conns.get_mut(&w) {
                        c.unsent.extend_from_slice(&message_bytes(&parts));
                        self.flush(w);
                    }
                }
                Action::Done(id) => {
                    if let Some(done) = self.pending.remove(&id) {
                        done();
                    }
                }
            }
        }
    }
}

impl Registered {
    fn set(&self, now: usize) {
        let mut count = self.count.lock().unwrap_or_else(|e| e.into_inner());
        if *count != now {
            *count = now;
            self.changed.notify_all();
        }
    }
}

/// Only this user's processes (or root's) may attach: items name shared memory.
fn same_user(conn: &UnixStream) -> bool {
    let me = nix::unistd::geteuid().as_raw();
    nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
        .is_ok_and(|c| c.uid() == me || c.uid() == 0)
}
