//! One bound on the response bytes the gRPC port holds for its readers, over every call. A
//! DoGet or DoExchange encodes ahead of its reader into a short queue; a reader that pauses
//! leaves that queue full, and gRPC holds the message it was sending. Each call is bounded,
//! and the number of calls is bounded per client address, but not across addresses: so past
//! `bound` bytes held in all, the calls whose readers have waited longest are cancelled
//! (RESOURCE_EXHAUSTED) and their queues freed, until the rest fit. Calls whose readers keep
//! up are not touched while calls that wait are there to cancel.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use futures::task::AtomicWaker;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{Receiver, Sender};
use tonic::Status;
use wirespeed::sync::Unpoison;

use crate::ipc::Frame;
use crate::telemetry::Telemetry;
use crate::telemetry::metrics::Refusal;

type Item = Result<Frame, Status>;

/// The bytes held for readers over every call, and the calls holding them.
pub(crate) struct Held {
    bound: usize,
    total: AtomicUsize,
    calls: Mutex<HashMap<u64, Arc<HeldCall>>>,
    next_id: AtomicU64,
    epoch: Instant,
    telemetry: Arc<Telemetry>,
}

impl Held {
    pub(crate) fn new(bound: usize, telemetry: Arc<Telemetry>) -> Arc<Self> {
        Arc::new(Held {
            bound,
            total: AtomicUsize::new(0),
            calls: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            epoch: Instant::now(),
            telemetry,
        })
    }

    /// A call's queue: frames go into the returned [`HeldSender`] and come out of the
    /// [`HeldStream`], and the bytes between count against the bound.
    pub(crate) fn queue(self: &Arc<Self>, tx: Sender<Item>, rx: Receiver<Item>) -> (HeldSender, HeldStream) {
        let call = Arc::new(HeldCall {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            held: self.clone(),
            state: Mutex::new(State { rx: Some(rx), queued: 0, sending: [0; 2] }),
            waited_since: AtomicU64::new(self.now()),
            waker: AtomicWaker::new(),
        });
        self.calls.lock().unpoison().insert(call.id, call.clone());
        (HeldSender { tx, call: call.clone() }, HeldStream { call, told: false })
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn add(&self, n: usize) {
        let total = self.total.fetch_add(n, Ordering::Relaxed) + n;
        self.telemetry.metrics.response_bytes.set(total as i64);
    }

    fn sub(&self, n: usize) {
        let total = self.total.fetch_sub(n, Ordering::Relaxed) - n;
        self.telemetry.metrics.response_bytes.set(total as i64);
    }

    /// Cancels the calls that have waited longest, while the bound is passed and some call
    /// has a queue to free.
    fn relieve(&self) {
        let calls = self.calls.lock().unpoison();
        while self.total.load(Ordering::Relaxed) > self.bound {
            let longest =
                calls.values().filter(|c| c.freeable()).min_by_key(|c| c.waited_since.load(Ordering::Relaxed));
            let Some(call) = longest else { return };
            call.cancel();
            self.telemetry.metrics.refused_call(Refusal::ResponseBytes);
        }
    }
}

/// One call's share of what is held.
pub(crate) struct HeldCall {
    id: u64,
    held: Arc<Held>,
    state: Mutex<State>,
    /// When its reader last took a message, in nanoseconds from `held.epoch`.
    waited_since: AtomicU64,
    waker: AtomicWaker,
}

struct State {
    /// None once the call is cancelled or its reader is gone.
    rx: Option<Receiver<Item>>,
    /// Bytes in the queue, and in the last two messages gRPC took (hyper holds one while h2
    /// sends the other), which no cancel can free.
    queued: usize,
    sending: [usize; 2],
}

impl HeldCall {
    fn freeable(&self) -> bool {
        let state = self.state.lock().unpoison();
        state.rx.is_some() && state.queued > 0
    }

    /// Drops the queue and what is in it; the reader hears RESOURCE_EXHAUSTED next.
    fn cancel(&self) {
        let mut state = self.state.lock().unpoison();
        state.rx = None;
        self.held.sub(std::mem::take(&mut state.queued));
        drop(state);
        self.waker.wake();
    }
}

/// Where a call's encoder puts its frames.
pub(crate) struct HeldSender {
    tx: Sender<Item>,
    call: Arc<HeldCall>,
}

impl HeldSender {
    /// Queues `item` if there is room; its bytes count against the bound from now, which may
    /// cancel the calls that waited longest (this one among them).
    pub(crate) fn try_send(&self, item: Item) -> Result<(), TrySendError<Item>> {
        let n = item.as_ref().map(frame_len).unwrap_or(0);
        {
            let mut state = self.call.state.lock().unpoison();
            if state.rx.is_none() {
                return Err(TrySendError::Closed(item));
            }
            self.tx.try_send(item)?;
            state.queued += n;
            self.call.held.add(n);
        }
        if self.call.held.total.load(Ordering::Relaxed) > self.call.held.bound {
            self.call.held.relieve();
        }
        Ok(())
    }

    /// Waits for room for `n` items; false once the call is cancelled or its reader is gone.
    pub(crate) async fn room(&self, n: usize) -> bool {
        self.tx.reserve_many(n).await.is_ok() && self.call.state.lock().unpoison().rx.is_some()
    }

    /// Sends `item` when there is room, for the last word of a call.
    pub(crate) async fn send(&self, item: Item) {
        if self.room(1).await {
            let _ = self.try_send(item);
        }
    }
}

/// A call's responses, as gRPC takes them.
pub(crate) struct HeldStream {
    call: Arc<HeldCall>,
    told: bool,
}

impl futures::Stream for HeldStream {
    type Item = Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let HeldStream { call, told } = self.get_mut();
        call.waker.register(cx.waker());
        let mut state = call.state.lock().unpoison();
        let Some(rx) = &mut state.rx else {
            if std::mem::replace(told, true) {
                return Poll::Ready(None);
            }
            return Poll::Ready(Some(Err(Status::resource_exhausted(
                "this call's reader waited longest while the server held as many response bytes as it may",
            ))));
        };
        let item = std::task::ready!(rx.poll_recv(cx));
        let n = match &item {
            Some(Ok(frame)) => frame_len(frame),
            _ => 0,
        };
        // The message two before this one is out; this one is in gRPC's hands now.
        let [out, last] = state.sending;
        state.sending = [last, n];
        state.queued -= n;
        call.held.sub(out);
        call.waited_since.store(call.held.now(), Ordering::Relaxed);
        Poll::Ready(item)
    }
}

impl Drop for HeldStream {
    fn drop(&mut self) {
        let mut state = self.call.state.lock().unpoison();
        state.rx = None;
        let sending: usize = std::mem::take(&mut state.sending).iter().sum();
        self.call.held.sub(std::mem::take(&mut state.queued) + sending);
        drop(state);
        self.call.held.calls.lock().unpoison().remove(&self.call.id);
    }
}

fn frame_len(frame: &Frame) -> usize {
    frame.meta.len() + frame.body_len() + frame.app_metadata.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::StreamExt;

    struct Nothing;

    impl crate::Handler for Nothing {
        fn get_flight_info(&self, _: &arrow_flight::FlightDescriptor) -> crate::Result<arrow_flight::FlightInfo> {
            Err(crate::Error::not_found("nothing"))
        }

        fn do_get(&self, _: &[u8]) -> crate::Result<crate::Output> {
            Err(crate::Error::not_found("nothing"))
        }
    }

    fn frame(len: usize) -> Item {
        Ok(Frame::metadata_only(Bytes::from(vec![0u8; len])))
    }

    fn queue(held: &Arc<Held>) -> (HeldSender, HeldStream) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        held.queue(tx, rx)
    }

    #[tokio::test]
    async fn past_the_bound_the_reader_that_waited_longest_is_cancelled() {
        let held = Held::new(12_000, Telemetry::new(Arc::new(Nothing), None));
        let (old_tx, mut old) = queue(&held);
        let (new_tx, mut new) = queue(&held);
        old_tx.try_send(frame(4000)).unwrap();
        new_tx.try_send(frame(4000)).unwrap();
        // The newer call's reader takes a message, so the older one has waited longest.
        assert!(new.next().await.unwrap().is_ok());
        new_tx.try_send(frame(4000)).unwrap();
        assert_eq!(held.total.load(Ordering::Relaxed), 12_000);
        new_tx.try_send(frame(1000)).unwrap();
        assert_eq!(held.total.load(Ordering::Relaxed), 9_000, "the old call's queue is freed");
        assert!(held.telemetry.metrics.encode().contains("reason=\"response_bytes\"} 1"));
        let status = old.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(old.next().await.is_none());
        assert!(old_tx.try_send(frame(1)).is_err());
        assert!(new.next().await.unwrap().is_ok(), "the other call goes on");
        drop((new, old));
        assert_eq!(held.total.load(Ordering::Relaxed), 0);
    }
}
