//! A writer thread for frames whose payloads the sender hands over (reference counted). It
//! writes everything queued in one vectored write, so a run of medium frames reaches the
//! kernel as one large write: each write pays for a push through the TCP stack (on loopback,
//! the receiver's side of it too), and here 1 MiB writes move about twice the bytes per CPU
//! second of 128 KiB ones.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::net::TcpStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::sync::Unpoison;

/// Bytes queued at most; a sender waits for room beyond this. Enough for writes of the size
/// where the kernel's gain levels off, and little enough to keep queueing delay short.
const LIMIT: usize = 1 << 20;
/// Buffers per write, below the kernel's IOV_MAX (1024).
const MAX_IOV: usize = 512;

pub(super) struct SendQueue {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// The writer waits here for frames.
    work: Condvar,
    /// Senders wait here for room, or for everything to be written.
    room: Condvar,
}

#[derive(Default)]
struct State {
    pieces: VecDeque<Bytes>,
    /// Bytes queued or being written.
    pending: usize,
    /// Why the writer stopped; every later send gets it.
    failed: Option<Error>,
    closed: bool,
    writer_idle: bool,
    senders_waiting: usize,
}

impl SendQueue {
    /// Starts the writer thread on `sock`, which gives up once a write has made no progress
    /// for `timeout`.
    pub(super) fn start(sock: TcpStream, timeout: Duration) -> io::Result<Self> {
        let shared = Arc::new(Shared { state: Mutex::default(), work: Condvar::new(), room: Condvar::new() });
        let writer = shared.clone();
        std::thread::Builder::new().name("wirespeed-tcp-tx".into()).spawn(move || writer.run(&sock, timeout))?;
        Ok(SendQueue { shared })
    }

    /// Queues a frame; waits up to `timeout` while the queue is full.
    pub(super) fn push(&self, head: &[u8], payload: &[Bytes], timeout: Duration) -> Result<()> {
        let sh = &self.shared;
        let mut st = sh.wait_until(timeout, |st| st.pending < LIMIT)?;
        if !head.is_empty() {
            st.pieces.push_back(Bytes::copy_from_slice(head));
            st.pending += head.len();
        }
        for p in payload.iter().filter(|p| !p.is_empty()) {
            st.pieces.push_back(p.clone());
            st.pending += p.len();
        }
        if st.writer_idle {
            sh.work.notify_one();
        }
        Ok(())
    }

    pub(super) fn is_empty(&self) -> bool {
        self.shared.lock().pending == 0
    }

    /// Waits up to `timeout` until everything queued is written.
    pub(super) fn drain(&self, timeout: Duration) -> Result<()> {
        self.shared.wait_until(timeout, |st| st.pending == 0).map(drop)
    }
}

impl Drop for SendQueue {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.work.notify_one();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unpoison()
    }

    /// Waits until `ready`, or the writer failed, or `timeout` passed.
    fn wait_until(&self, timeout: Duration, ready: impl Fn(&State) -> bool) -> Result<MutexGuard<'_, State>> {
        let deadline = Instant::now() + timeout;
        let mut st = self.lock();
        loop {
            if let Some(e) = &st.failed {
                return Err(e.clone());
            }
            if ready(&st) {
                return Ok(st);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(timeout));
            }
            st.senders_waiting += 1;
            st = self.room.wait_timeout(st, left).unpoison().0;
            st.senders_waiting -= 1;
        }
    }

    fn run(&self, sock: &TcpStream, timeout: Duration) {
        let mut batch = Vec::with_capacity(MAX_IOV);
        loop {
            {
                let mut st = self.lock();
                while st.pieces.is_empty() {
                    if st.closed || st.failed.is_some() {
                        return;
                    }
                    st.writer_idle = true;
                    st = self.work.wait(st).unpoison();
                    st.writer_idle = false;
                }
                let n = st.pieces.len().min(MAX_IOV);
                batch.extend(st.pieces.drain(..n));
            }
            let r = self.write_batch(sock, &batch, timeout);
            batch.clear();
            if let Err(e) = r {
                let mut st = self.lock();
                st.failed = Some(e);
                st.pieces.clear();
                st.pending = 0;
                self.room.notify_all();
                return;
            }
        }
    }

    /// Writes `batch` whole, crediting each write's bytes as it goes so senders can queue more.
    fn write_batch(&self, sock: &TcpStream, batch: &[Bytes], timeout: Duration) -> Result<()> {
        let mut iov: Vec<IoSlice<'_>> = batch.iter().map(|b| IoSlice::new(b)).collect();
        super::write_all(sock, &mut iov, timeout, |n| {
            let mut st = self.lock();
            st.pending -= n;
            if st.senders_waiting > 0 {
                self.room.notify_all();
            }
        })
    }
}
