//! DoPut into a Python handler. The handler reads the upload on its own thread; what it writes
//! to its `writer` while it works on a message goes back to the client as that message's
//! PutResult, before the next message is taken, so a client that waits for each
//! acknowledgement (as Arrow's examples do) gets it.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pyo3::prelude::*;
use wirespeed_flight::{Code, Error, Intake, Payload, Result, SharedStats, Upload};

/// How long a handler may work on one message before the upload fails.
const HANDLER_WAIT: Duration = Duration::from_secs(300);

/// What the upload waits on its handler for.
pub enum Event {
    /// It asked for the next message.
    Asked,
    /// It wrote a PutResult.
    Wrote(Bytes),
    /// It returned or raised.
    Returned,
}

/// The upload's messages as the handler reads them; each read is announced first.
pub struct Messages {
    pub rx: Receiver<Result<Payload>>,
    pub events: Sender<Event>,
}

impl Messages {
    pub fn next(&mut self) -> Result<Option<Payload>> {
        let _ = self.events.send(Event::Asked);
        self.rx.recv().ok().transpose() // a closed channel is the end of the upload
    }
}

/// A `do_put` handler's `writer` (pyarrow's FlightMetadataWriter).
#[pyclass(module = "wirespeed._native", frozen)]
pub struct PutResults {
    pub events: Sender<Event>,
}

#[pymethods]
impl PutResults {
    /// Sends `message` to the client as a PutResult.
    fn write(&self, message: Vec<u8>) {
        let _ = self.events.send(Event::Wrote(message.into()));
    }
}

/// Starts the handler's thread.
pub type Start = Box<dyn FnOnce() -> Result<JoinHandle<Result<()>>> + Send>;

/// An upload handed to Python's `do_put`.
pub struct PyUpload {
    tx: Option<SyncSender<Result<Payload>>>,
    /// Until the upload's reader can count (or, at the latest, its first message): the
    /// handler sees the counts from its start.
    start: Option<Start>,
    call: Option<JoinHandle<Result<()>>>,
    events: Receiver<Event>,
    /// PutResults written and not yet sent: the upload sends one per message.
    written: VecDeque<Bytes>,
    /// Messages handed over, and reads the handler began.
    sent: u64,
    asked: u64,
    returned: bool,
    /// Where the handler's reader finds the decoder's counts.
    stats: Arc<OnceLock<SharedStats>>,
    /// How long the handler has been silent while a message waited for it to ask.
    silent: Duration,
}

impl PyUpload {
    /// Feeds `tx` to the handler that `start` runs, which reports on `events` and reads the
    /// decoder's counts from `stats`.
    pub fn new(
        tx: SyncSender<Result<Payload>>,
        start: Start,
        events: Receiver<Event>,
        stats: Arc<OnceLock<SharedStats>>,
    ) -> Self {
        PyUpload {
            stats,
            tx: Some(tx),
            start: Some(start),
            call: None,
            silent: Duration::ZERO,
            events,
            written: VecDeque::new(),
            sent: 0,
            asked: 0,
            returned: false,
        }
    }

    fn started(&mut self) -> Result<()> {
        if let Some(start) = self.start.take() {
            self.call = Some(start()?);
        }
        Ok(())
    }

    /// The handler's own error, once it stopped taking messages.
    fn handler_result(&mut self) -> Result<()> {
        self.started()?;
        self.tx = None;
        match self.call.take().map(|c| c.join()) {
            Some(Ok(result)) => result,
            _ => Err(Error::internal("the upload handler failed")),
        }
    }

    /// Takes the handler's events until it asks for a message past those sent, or returns;
    /// false if `within` passed first.
    fn await_handler(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while !self.returned && self.asked <= self.sent {
            match self.events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Event::Asked) => self.asked += 1,
                Ok(Event::Wrote(b)) => self.written.push_back(b),
                Ok(Event::Returned) | Err(RecvTimeoutError::Disconnected) => self.returned = true,
                Err(RecvTimeoutError::Timeout) => return false,
            }
        }
        true
    }
}

impl Upload for PyUpload {
    fn reading(&mut self, stats: SharedStats) {
        let _ = self.stats.set(stats);
        // A thread that cannot start fails the first message, as the handler's error.
        let _ = self.started();
    }

    fn write(&mut self, payload: Payload) -> Result<Option<Bytes>> {
        self.started()?;
        let sent = self.tx.as_ref().map(|tx| tx.send(Ok(payload)));
        match sent {
            Some(Ok(())) => {
                self.sent += 1;
                if !self.await_handler(HANDLER_WAIT) {
                    return Err(Error::status(
                        Code::DeadlineExceeded,
                        "the do_put handler took over 300 s on one message",
                    ));
                }
                Ok(self.written.pop_front())
            }
            // The handler returned or raised before reading everything.
            _ => Err(self.handler_result().err().unwrap_or_else(|| Error::internal("the handler stopped reading"))),
        }
    }

    fn intake(&mut self, within: Duration) -> Intake {
        if self.await_handler(within) {
            self.silent = Duration::ZERO;
            return if self.returned { Intake::Done } else { Intake::Ready };
        }
        // A handler silent too long gets the next message, and write's wait fails it.
        self.silent += within;
        if self.silent >= HANDLER_WAIT { Intake::Ready } else { Intake::Later }
    }

    fn finish(mut self: Box<Self>) -> Result<Vec<Bytes>> {
        self.handler_result()?;
        for event in self.events.try_iter() {
            if let Event::Wrote(b) = event {
                self.written.push_back(b);
            }
        }
        Ok(std::mem::take(&mut self.written).into())
    }
}

impl Drop for PyUpload {
    /// Unfinished: the handler's reader raises, so it keeps nothing of a partial upload.
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.try_send(Err(Error::status(Code::Cancelled, "the client went away mid-upload")));
        }
    }
}
