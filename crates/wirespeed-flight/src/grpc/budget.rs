//! One bound on the request messages the whole gRPC port holds in memory. tonic takes each
//! message whole before decoding it (up to [`super::MAX_MESSAGE`]), so without it many calls,
//! each within its own limit, could make the server hold any amount, password or not.
//!
//! Each request body's gRPC length prefixes are read as its bytes pass. A message over
//! [`SMALL`] reserves its whole length before any more of the body goes on, and gives it back
//! once the next message has started and the call asks for more of it (tonic asks only once
//! the handler has taken the previous message), or the body ends. Reserving it whole up front, rather than as it arrives, means a call that holds a
//! reservation needs nothing more to finish its message, so calls never wait on each other in
//! a ring. A message waits for room at most `stall`, and a message whose sender stops for
//! `stall` fails its call: a paused client holds its reservation no longer than that.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::Status;

use crate::telemetry::CallRecord;

/// Messages up to this size take no reservation: the HTTP/2 windows already bound them (one
/// such message per stream).
pub(crate) const SMALL: u32 = 1 << 20;
/// Reservations are counted in these units, so that a `u32` of them covers any budget.
const UNIT: u64 = 1 << 10;

/// Bytes of request messages that may be held at once, over every call.
pub(crate) struct Budget {
    room: Arc<Semaphore>,
    units: u32,
    stall: Duration,
    /// The bytes held, for the metrics.
    held: Gauge,
}

impl Budget {
    pub(crate) fn new(bytes: usize, stall: Duration, held: Gauge) -> Arc<Self> {
        let units = (bytes as u64 / UNIT).clamp(1, u32::MAX as u64) as u32;
        Arc::new(Budget { room: Arc::new(Semaphore::new(units as usize)), units, stall, held })
    }

    fn report(&self) {
        let used = self.units as u64 - self.room.available_permits() as u64;
        self.held.set((used * UNIT) as i64);
    }
}

type Acquire = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// A request body whose large messages hold room in a [`Budget`].
pub(crate) struct Budgeted<B> {
    inner: B,
    budget: Arc<Budget>,
    /// The length prefix being read (a flag byte, then the length), and how much of it is in.
    prefix: [u8; 5],
    prefix_in: usize,
    /// Bytes of the current message still to come.
    left: u64,
    /// Units the next chunk must wait for, and the wait for them.
    wanted: u32,
    acquiring: Option<Acquire>,
    /// The current message's room, and the previous one's until the call asks for more.
    held: Option<OwnedSemaphorePermit>,
    previous: Option<OwnedSemaphorePermit>,
    /// Ends a wait for room, or a message whose sender went quiet.
    stall: Option<Pin<Box<Sleep>>>,
    /// The call's record, which counts the bytes received.
    record: Option<Arc<CallRecord>>,
}

impl<B> Budgeted<B> {
    pub(crate) fn new(inner: B, budget: Arc<Budget>, record: Option<Arc<CallRecord>>) -> Self {
        Budgeted {
            inner,
            budget,
            prefix: [0; 5],
            prefix_in: 0,
            left: 0,
            wanted: 0,
            acquiring: None,
            held: None,
            previous: None,
            stall: None,
            record,
        }
    }

    /// Follows the messages in `data`; a message that starts gives back the previous one's room
    /// and asks for its own.
    fn scan(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() {
            if self.left > 0 {
                let n = (self.left as usize).min(data.len());
                self.left -= n as u64;
                data.advance(n);
                continue;
            }
            let n = (5 - self.prefix_in).min(data.len());
            self.prefix[self.prefix_in..self.prefix_in + n].copy_from_slice(&data[..n]);
            self.prefix_in += n;
            data.advance(n);
            if self.prefix_in < 5 {
                return Ok(());
            }
            self.prefix_in = 0;
            let len = u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]);
            self.left = len as u64;
            self.previous = self.held.take();
            if len > SMALL {
                let units = (len as u64).div_ceil(UNIT) as u32;
                self.wanted = self.wanted.saturating_add(units);
                if self.wanted > self.budget.units {
                    return Err(Status::resource_exhausted(format!(
                        "a request message of {len} bytes is more than this server holds for requests at once ({} MiB)",
                        (self.budget.units as u64 * UNIT) >> 20
                    )));
                }
            }
        }
        Ok(())
    }

    /// True once `stall` has passed since it was last armed.
    fn stalled(&mut self, cx: &mut Context<'_>) -> bool {
        let stall = self.budget.stall;
        let timer = self.stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        timer.as_mut().poll(cx).is_ready()
    }

    fn rearm(&mut self) {
        if let Some(timer) = &mut self.stall {
            timer.as_mut().reset(Instant::now() + self.budget.stall);
        }
    }
}

impl<B> Drop for Budgeted<B> {
    fn drop(&mut self) {
        if self.held.take().is_some() | self.previous.take().is_some() {
            self.budget.report();
        }
    }
}

impl<B> Body for Budgeted<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if this.previous.take().is_some() {
            this.budget.report();
        }
        if this.wanted > 0 {
            let (room, wanted) = (this.budget.room.clone(), this.wanted);
            let acquiring = this.acquiring.get_or_insert_with(|| Box::pin(room.acquire_many_owned(wanted)));
            match acquiring.as_mut().poll(cx) {
                Poll::Ready(Ok(permit)) => {
                    this.held = Some(permit);
                    this.budget.report();
                    this.wanted = 0;
                    this.acquiring = None;
                    this.rearm();
                }
                Poll::Ready(Err(_)) => return Poll::Ready(Some(Err(Status::unavailable("the server is stopping")))),
                Poll::Pending if this.stalled(cx) => {
                    return Poll::Ready(Some(Err(Status::resource_exhausted(
                        "the server holds as many request bytes as it may: try again when other uploads end",
                    ))));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                if (this.left > 0 || this.prefix_in > 0) && this.stalled(cx) {
                    return Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                        "the client sent nothing for {:?} in the middle of a message",
                        this.budget.stall
                    )))));
                }
                Poll::Pending
            }
            Poll::Ready(None) => {
                if this.held.take().is_some() {
                    this.budget.report();
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Status::from_error(e.into())))),
            Poll::Ready(Some(Ok(frame))) => {
                this.rearm();
                if let Some(data) = frame.data_ref() {
                    this.record.as_ref().inspect(|r| r.received(data.len() as u64));
                    this.scan(data)?;
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&len.to_be_bytes());
        m.resize(5 + len as usize, 7);
        m
    }

    fn scanned(chunks: &[&[u8]]) -> Budgeted<()> {
        let mut b = Budgeted::new((), Budget::new(64 << 20, Duration::from_secs(1), Gauge::default()), None);
        for c in chunks {
            b.scan(c).unwrap();
        }
        b
    }

    #[test]
    fn small_messages_take_no_room_and_prefixes_may_split() {
        let two = [message(10), message(SMALL)].concat();
        let b = scanned(&[&two[..3], &two[3..9], &two[9..]]);
        assert_eq!((b.wanted, b.left, b.prefix_in), (0, 0, 0));
    }

    #[test]
    fn a_large_message_wants_its_whole_length_from_its_prefix() {
        let head = &message(SMALL + 1)[..7];
        let b = scanned(&[&head[..2], &head[2..]]);
        assert_eq!(b.wanted, (SMALL + 1).div_ceil(UNIT as u32));
        assert_eq!(b.left, SMALL as u64 - 1);
    }

    #[test]
    fn more_than_the_whole_budget_is_refused_at_once() {
        let mut b = Budgeted::new((), Budget::new(8 << 20, Duration::from_secs(1), Gauge::default()), None);
        let err = b.scan(&message(16 << 20)[..5]).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
    }
}
