//! In-process pairs: two connections in one process joined by a queue of frames each way, for
//! a transfer whose ends are both here (a local `cp`). A payload the sender hands over owned
//! ([`super::Stream::send_bytes`]) or fills in place ([`super::Stream::send_filled`]) reaches
//! the receiver as the very buffer it was written into; a borrowed one is copied once, as into
//! a ring. Filled and copied payloads use buffers that come back for reuse, so nothing is
//! mapped or faulted in on the way.
//!
//! There is no handshake: nobody outside the process can reach either end. The pair shares a
//! random secret, so derived keys work as on any connection.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::conn::Connection;
use super::{Config, Fill, FrameRx, FrameSink, FrameTx, handshake};
use crate::error::{Error, Result, Violation};
use crate::fabric::Fabric;
use crate::mem::{Buf, Recycler};
use crate::proto::frame::{FrameHeader, HEADER_LEN, Limits};
use crate::proto::handshake::Peer;
use crate::proto::session::Role;
use crate::sync::Unpoison;

/// Payload buffers each end keeps for reuse: about a full queue of the largest chunks.
const POOLED: usize = 32;
/// Smaller payloads are copied into buffers of their own, so a pooled one (sized for chunks)
/// is neither held by a small message nor grown back afterwards.
const POOLED_MIN: usize = 64 << 10;

/// Two connected ends, the first in the client's role and the second in the server's.
pub fn pair(config: &Config) -> Result<(Connection, Connection)> {
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| Error::from(std::io::Error::other(e.to_string())))?;
    let peer = Peer::in_process(handshake::our_params(config, Fabric::InProcess), secret);
    let (up, down) = (Queue::new(config.shm_ring_bytes), Queue::new(config.shm_ring_bytes));
    let end = |role, rx: &Arc<Queue>, tx: &Arc<Queue>, name: &str| {
        let rx = Box::new(Rx { queue: rx.clone(), limits: config.limits });
        let tx = Box::new(Tx { queue: tx.clone(), inbound: rx.queue.clone(), pool: Recycler::new(POOLED) });
        Connection::new(role, peer.clone(), rx, tx, None, config, name.to_string())
    };
    Ok((end(Role::Client, &down, &up, "in-process server"), end(Role::Server, &up, &down, "in-process client")))
}

/// One direction's frames, bounded in bytes like a ring.
struct Queue {
    state: Mutex<State>,
    /// Signalled when a frame arrives or the queue ends.
    readable: Condvar,
    /// Signalled when room frees up or the queue ends.
    writable: Condvar,
    cap: usize,
}

struct State {
    frames: VecDeque<Frame>,
    bytes: usize,
    end: End,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Open,
    /// The writer is done: what is queued is still read, then the reader hears it hung up.
    Finished,
    /// The reader is gone or gave up: nothing more is read, and what is written is dropped.
    Abandoned,
}

struct Frame {
    /// The encoded header, then the meta.
    head: Vec<u8>,
    payload: Buf,
}

impl Queue {
    fn new(cap: usize) -> Arc<Self> {
        let state = State { frames: VecDeque::new(), bytes: 0, end: End::Open };
        Arc::new(Queue { state: Mutex::new(state), readable: Condvar::new(), writable: Condvar::new(), cap })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unpoison()
    }

    /// Queues `frame` once there is room for it (a frame larger than the queue goes alone).
    /// A reader that is gone drops it, as a closed peer's socket does: its own hang-up reaches
    /// the writer through the other queue.
    fn push(&self, frame: Frame, timeout: Duration) -> Result<()> {
        let len = frame.head.len() + frame.payload.len();
        let deadline = Instant::now() + timeout;
        let mut s = self.lock();
        loop {
            match s.end {
                End::Open => {}
                End::Finished => return Err(Error::ConnectionLost("the connection was shut down".into())),
                End::Abandoned => return Ok(()),
            }
            if s.bytes == 0 || s.bytes + len <= self.cap {
                s.bytes += len;
                s.frames.push_back(frame);
                self.readable.notify_one();
                return Ok(());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Timeout(timeout));
            }
            s = self.writable.wait_timeout(s, left).unpoison().0;
        }
    }

    /// The next frame, or `None` once `deadline` has passed.
    fn pop(&self, deadline: Instant) -> Result<Option<Frame>> {
        let mut s = self.lock();
        loop {
            if s.end == End::Abandoned {
                return Err(Error::ConnectionLost("the connection was shut down".into()));
            }
            if let Some(f) = s.frames.pop_front() {
                s.bytes -= f.head.len() + f.payload.len();
                self.writable.notify_one();
                return Ok(Some(f));
            }
            if s.end == End::Finished {
                return Err(Error::ConnectionLost("the peer hung up".into()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            s = self.readable.wait_timeout(s, left).unpoison().0;
        }
    }

    fn end(&self, end: End) {
        let mut s = self.lock();
        if s.end != End::Abandoned {
            s.end = end;
        }
        if end == End::Abandoned {
            s.frames.clear();
            s.bytes = 0;
        }
        self.readable.notify_all();
        self.writable.notify_all();
    }
}

struct Rx {
    queue: Arc<Queue>,
    limits: Limits,
}

impl FrameRx for Rx {
    fn read_frame(&mut self, deadline: Instant, sink: &mut FrameSink<'_>) -> Result<bool> {
        let Some(f) = self.queue.pop(deadline)? else { return Ok(false) };
        let (head, meta) = f.head.split_first_chunk::<HEADER_LEN>().ok_or_else(|| mismatch("header"))?;
        let h = FrameHeader::decode(head, &self.limits)?;
        if meta.len() != h.meta_len as usize || f.payload.len() as u64 != h.payload_len() {
            return Err(mismatch("frame"));
        }
        sink(&h, meta, f.payload)?;
        Ok(true)
    }
}

impl Drop for Rx {
    fn drop(&mut self) {
        self.queue.end(End::Abandoned);
    }
}

fn mismatch(what: &'static str) -> Error {
    Violation::InProcessMismatch(what).into()
}

struct Tx {
    queue: Arc<Queue>,
    /// Our own receiving queue, abandoned by an abortive shutdown to wake our reader.
    inbound: Arc<Queue>,
    /// Buffers for payloads we copy or fill, back from the receiver once it drops them.
    pool: Recycler,
}

impl Tx {
    fn push(&self, head: &[u8], payload: Bytes, timeout: Duration) -> Result<()> {
        self.queue.push(Frame { head: head.to_vec(), payload: Buf::from(payload) }, timeout)
    }
}

impl FrameTx for Tx {
    fn write_frame(&mut self, head: &[u8], payload: &[IoSlice<'_>], timeout: Duration) -> Result<()> {
        let len = payload.iter().map(|s| s.len()).sum();
        let pooled = len >= POOLED_MIN;
        let mut buf = if pooled { self.pool.take_empty(len) } else { Vec::with_capacity(len) };
        payload.iter().for_each(|s| buf.extend_from_slice(s));
        let bytes = if pooled { self.pool.lend(buf) } else { Bytes::from(buf) };
        self.push(head, bytes, timeout)
    }

    fn write_frame_owned(&mut self, head: &[u8], payload: &[Bytes], timeout: Duration) -> Result<()> {
        match payload {
            [one] => self.push(head, one.clone(), timeout),
            many => {
                let slices: Vec<IoSlice<'_>> = many.iter().map(|b| IoSlice::new(b)).collect();
                self.write_frame(head, &slices, timeout)
            }
        }
    }

    /// Filled in a buffer that then moves to the receiver as it is.
    fn fills_in_place(&self) -> bool {
        true
    }

    fn write_frame_filled(
        &mut self,
        head: &[u8],
        len: usize,
        fill: &mut Fill<'_>,
        timeout: Duration,
    ) -> Result<std::io::Result<()>> {
        let mut buf = self.pool.take(len);
        if let Err(e) = fill(&mut buf) {
            return Ok(Err(e));
        }
        self.push(head, self.pool.lend(buf), timeout).map(Ok)
    }

    fn max_payload(&self) -> usize {
        self.queue.cap
    }

    fn shutdown(&mut self, graceful: bool) {
        self.queue.end(End::Finished);
        if !graceful {
            self.inbound.end(End::Abandoned);
        }
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        self.queue.end(End::Finished);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_end_is_read_to_the_last_message_then_hangs_up() {
        let (c, s) = pair(&Config::default()).unwrap();
        let st = c.open_stream().unwrap();
        st.send(b"last words", &[b"body"]).unwrap();
        drop((st, c));
        let inc = s.accept_stream().unwrap();
        let m = inc.recv().unwrap().unwrap();
        assert_eq!((m.header.as_slice(), m.body.to_vec()), (&b"last words"[..], b"body".to_vec()));
        // Dropping a stream resets it; either way nothing more looks like a message.
        assert!(!matches!(inc.recv(), Ok(Some(_))));
        let err = s.open_stream().and_then(|st| st.send(b"x", &[]).and_then(|_| st.recv())).unwrap_err();
        assert!(matches!(err, Error::ConnectionLost(_)), "{err}");
    }

    #[test]
    fn owned_bodies_arrive_without_a_copy() {
        let (c, s) = pair(&Config::default()).unwrap();
        let body = Bytes::from(vec![7u8; 100_000]);
        c.open_stream().unwrap().send_bytes(b"h", std::slice::from_ref(&body)).unwrap();
        let m = s.accept_stream().unwrap().recv().unwrap().unwrap();
        let got = &m.body.chunks()[0];
        assert_eq!((got.as_ptr(), got.len()), (body.as_ptr(), body.len()));
    }
}
