//! DoPut into a Python handler. The handler reads the upload on its own thread; what it writes
//! to its `writer` while it works on a message goes back to the client as that message's
//! PutResult, before the next message is taken, so a client that waits for each
//! acknowledgement (as Arrow's examples do) gets it.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use pyo3::prelude::*;
use wirespeed_flight::{Code, Error, Payload, Result, Upload};

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

/// An upload handed to Python's `do_put`.
pub struct PyUpload {
    tx: Option<SyncSender<Result<Payload>>>,
    call: Option<JoinHandle<Result<()>>>,
    events: Receiver<Event>,
    /// PutResults written and not yet sent: the upload sends one per message.
    written: VecDeque<Bytes>,
    /// Messages handed over, and reads the handler began.
    sent: u64,
    asked: u64,
    returned: bool,
}

impl PyUpload {
    /// Feeds `tx` to the handler running as `call`, which reports on `events`.
    pub fn new(tx: SyncSender<Result<Payload>>, call: JoinHandle<Result<()>>, events: Receiver<Event>) -> Self {
        PyUpload {
            tx: Some(tx),
            call: Some(call),
            events,
            written: VecDeque::new(),
            sent: 0,
            asked: 0,
            returned: false,
        }
    }

    /// The handler's own error, once it stopped taking messages.
    fn handler_result(&mut self) -> Result<()> {
        self.tx = None;
        match self.call.take().map(|c| c.join()) {
            Some(Ok(result)) => result,
            _ => Err(Error::internal("the upload handler failed")),
        }
    }

    /// Takes the handler's events until it asks for a message past those sent, or returns.
    fn wait_for_handler(&mut self) -> Result<()> {
        while !self.returned && self.asked <= self.sent {
            match self.events.recv_timeout(HANDLER_WAIT) {
                Ok(Event::Asked) => self.asked += 1,
                Ok(Event::Wrote(b)) => self.written.push_back(b),
                Ok(Event::Returned) | Err(RecvTimeoutError::Disconnected) => self.returned = true,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(Error::status(
                        Code::DeadlineExceeded,
                        "the do_put handler took over 300 s on one message",
                    ));
                }
            }
        }
        Ok(())
    }
}

impl Upload for PyUpload {
    fn write(&mut self, payload: Payload) -> Result<Option<Bytes>> {
        let sent = self.tx.as_ref().map(|tx| tx.send(Ok(payload)));
        match sent {
            Some(Ok(())) => {
                self.sent += 1;
                self.wait_for_handler()?;
                Ok(self.written.pop_front())
            }
            // The handler returned or raised before reading everything.
            _ => Err(self.handler_result().err().unwrap_or_else(|| Error::internal("the handler stopped reading"))),
        }
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
