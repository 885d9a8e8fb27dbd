//! Runs FLESnet's item distribution for one compute node: consumers connect to the abstract
//! unix socket `@NAME` (ZeroMQ's `ipc://@NAME`), each on a thread that reads its messages;
//! one thread owns the [`Distributor`] and writes to them. Only processes of this user may
//! connect (their credentials are checked), since items name shared memory.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::distributor::{Action, Distributor, ItemId, WorkerId};
use super::zmtp::{Parts, SocketType, Zmtp, message_bytes};
use crate::error::{FlesError, Result};

/// Consumers connected at once, at most; more are turned away.
const MAX_WORKERS: usize = 256;
/// Worker messages are a line of text.
const MAX_WORKER_FRAME: usize = 4096;
/// How long a connection may take to say who it is, and a write to a consumer may wait.
const HANDSHAKE: Duration = Duration::from_secs(10);
const WRITE_WAIT: Duration = Duration::from_secs(5);

/// What to do once no consumer holds an item any more.
pub type OnDone = Box<dyn FnOnce() + Send>;

enum Input {
    Item(ItemId, Vec<u8>, OnDone),
    Connected(WorkerId, Arc<Mutex<UnixStream>>),
    Message(WorkerId, Parts),
    Gone(WorkerId),
    End,
}

/// The distribution of one node's items; dropping it ends the stream for every consumer
/// once they have completed what they hold (or the hold limit took it).
pub struct Publisher {
    tx: Sender<Input>,
    name: String,
    stopping: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    registered: Arc<Registered>,
}

/// How many consumers are registered, for those who wait for them.
#[derive(Default)]
struct Registered {
    count: Mutex<usize>,
    changed: Condvar,
}

impl Publisher {
    /// Listens at `ipc://@NAME`; consumers holding an item past `hold_limit` lose it.
    pub fn start(name: &str, hold_limit: Duration) -> Result<Publisher> {
        let addr = SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(|e| FlesError::Config(format!("{name}: not a usable socket name ({e})")))?;
        let listener = UnixListener::bind_addr(&addr).map_err(|e| {
            FlesError::Net(format!(
                "listening for consumers at ipc://@{name}: {e} (is another node publishing as {name}?)"
            ))
        })?;
        let (tx, rx) = mpsc::channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let accept = {
            let (tx, stopping) = (tx.clone(), stopping.clone());
            std::thread::Builder::new()
                .name("fles-consumers".into())
                .spawn(move || accept(listener, tx, stopping))
                .map_err(|e| FlesError::Net(format!("starting the consumers' thread: {e}")))?
        };
        let registered = Arc::new(Registered::default());
        let distribute = {
            let registered = registered.clone();
            std::thread::Builder::new()
                .name("fles-distributor".into())
                .spawn(move || distribute(rx, Distributor::new(hold_limit), &registered))
                .map_err(|e| FlesError::Net(format!("starting the distributor: {e}")))?
        };
        Ok(Publisher { tx, name: name.into(), stopping, threads: vec![accept, distribute], registered })
    }

    /// Waits until `n` consumers have registered, at most `timeout`.
    pub fn wait_for_consumers(&self, n: usize, timeout: Duration) -> Result<()> {
        let count = self.registered.count.lock().unwrap_or_else(|e| e.into_inner());
        let (count, _) =
            self.registered.changed.wait_timeout_while(count, timeout, |c| *c < n).unwrap_or_else(|e| e.into_inner());
        match *count >= n {
            true => Ok(()),
            false => Err(FlesError::Net(format!(
                "{} of {n} consumers registered at ipc://@{} within {timeout:?}",
                *count, self.name
            ))),
        }
    }

    /// Offers item `id` to the consumers; `done` runs once none holds it (at once if none
    /// wants it).
    pub fn publish(&self, id: ItemId, payload: Vec<u8>, done: OnDone) {
        // The distributor ends only after End: until then the send succeeds.
        let _ = self.tx.send(Input::Item(id, payload, done));
    }

    /// No more items: idle consumers hear the end now, busy ones once they are done.
    pub fn end(&self) {
        let _ = self.tx.send(Input::End);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.tx.send(Input::End);
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the accepting thread with a connection of our own.
        if let Ok(addr) = SocketAddr::from_abstract_name(self.name.as_bytes()) {
            let _ = UnixStream::connect_addr(&addr);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn accept(listener: UnixListener, tx: Sender<Input>, stopping: Arc<AtomicBool>) {
    let live = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut next: WorkerId = 0;
    for conn in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let Ok(conn) = conn else { continue };
        if !same_user(&conn) || live.load(Ordering::SeqCst) >= MAX_WORKERS {
            continue; // dropped: closed
        }
        next += 1;
        let (id, tx, counted) = (next, tx.clone(), live.clone());
        live.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new().name(format!("fles-consumer-{id}")).spawn(move || {
            serve_worker(id, conn, &tx);
            let _ = tx.send(Input::Gone(id));
            counted.fetch_sub(1, Ordering::SeqCst);
        });
        if spawned.is_err() {
            live.fetch_sub(1, Ordering::SeqCst); // the connection dropped with the closure
        }
    }
}

/// Only this user's processes (or root's) may attach: items name shared memory.
fn same_user(conn: &UnixStream) -> bool {
    let me = nix::unistd::geteuid().as_raw();
    nix::sys::socket::getsockopt(conn, nix::sys::socket::sockopt::PeerCredentials)
        .is_ok_and(|c| c.uid() == me || c.uid() == 0)
}

/// Reads one consumer's messages until it goes.
fn serve_worker(id: WorkerId, conn: UnixStream, tx: &Sender<Input>) {
    let Ok(writer) = conn.try_clone() else { return };
    let _ = writer.set_write_timeout(Some(WRITE_WAIT));
    let _ = conn.set_read_timeout(Some(HANDSHAKE));
    let writer = Arc::new(Mutex::new(writer));
    let mut zmtp = Zmtp::new(SocketType::Router, MAX_WORKER_FRAME);
    let mut reader = &conn;
    let mut buf = [0u8; 4096];
    let mut announced = false;
    loop {
        let out = zmtp.transmit();
        if !out.is_empty() && writer.lock().map(|mut w| w.write_all(&out)).is_err() {
            return;
        }
        if zmtp.is_open() && !announced {
            announced = true;
            // Silent while it holds an item, and that is its right: no read timeout now.
            let _ = conn.set_read_timeout(None);
            if tx.send(Input::Connected(id, writer.clone())).is_err() {
                return;
            }
        }
        let n = match reader.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if zmtp.receive(&buf[..n]).is_err() {
            return;
        }
        while let Some(m) = zmtp.message() {
            if tx.send(Input::Message(id, m)).is_err() {
                return;
            }
        }
    }
}

/// The distributor's loop: inputs and ticks in, writes and completions out.
fn distribute(rx: Receiver<Input>, mut d: Distributor, registered: &Registered) {
    let mut writers: HashMap<WorkerId, Arc<Mutex<UnixStream>>> = HashMap::new();
    let mut pending: HashMap<ItemId, OnDone> = HashMap::new();
    let mut ending = false;
    loop {
        let now = Instant::now();
        let input = rx.recv_timeout(d.next_tick(now).saturating_duration_since(now));
        let now = Instant::now();
        match input {
            Ok(Input::Item(id, payload, done)) => {
                pending.insert(id, done);
                d.on_item(id, payload, now);
            }
            Ok(Input::Connected(w, writer)) => {
                writers.insert(w, writer);
            }
            Ok(Input::Message(w, parts)) => d.on_message(w, &parts, now),
            Ok(Input::Gone(w)) => {
                writers.remove(&w);
                d.on_gone(w);
            }
            Ok(Input::End) => {
                ending = true;
                d.end();
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => ending = true,
        }
        d.on_tick(now);
        if let Ok(mut count) = registered.count.lock() {
            *count = d.workers().count();
            registered.changed.notify_all();
        }
        while let Some(action) = d.poll_action() {
            match action {
                Action::Send(w, parts) => {
                    let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                    let bytes = message_bytes(&parts);
                    let sent = writers.get(&w).is_some_and(|s| s.lock().is_ok_and(|mut s| s.write_all(&bytes).is_ok()));
                    if !sent {
                        // Gone, or not reading its socket: a stalled consumer never holds us.
                        if let Some(s) = writers.remove(&w) {
                            let _ = s.lock().map(|s| s.shutdown(std::net::Shutdown::Both));
                        }
                        d.on_gone(w);
                    }
                }
                Action::Done(id) => {
                    if let Some(done) = pending.remove(&id) {
                        done();
                    }
                }
            }
        }
        if ending && d.live_items() == 0 {
            // Close every connection: a consumer told the end, or one that hears it thus.
            for s in writers.values() {
                let _ = s.lock().map(|s| s.shutdown(std::net::Shutdown::Both));
            }
            return;
        }
    }
}
