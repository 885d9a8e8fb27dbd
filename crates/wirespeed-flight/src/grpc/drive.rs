//! Moving a call's messages between gRPC and a blocking handler without a thread waiting on the
//! client. An output is encoded on a blocking thread in runs, while the client keeps its queue
//! drained; an upload's messages are decoded and handed over one at a time. In between, a paused or slow client costs a task and a few queued frames, not one of
//! the runtime's blocking threads.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow_buffer::Buffer;
use arrow_flight::{FlightData, PutResult};
use bytes::Bytes;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{self, Sender};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use super::Writer;
use super::held::{Held, HeldSender};
use crate::error::{Error, Result, Violation};
use crate::handler::{Output, Payload, Upload};
use crate::ipc::{Decoded, Decoder, Frame};
use crate::telemetry::CallRecord;

/// Frames queued for a response; half of it free again restarts the encoder.
const QUEUE: usize = 4;

pub(crate) type Responses<T> = futures::stream::BoxStream<'static, Result<T, Status>>;

/// A response stream and the queue that feeds it.
pub(crate) fn channel<T: Send + 'static>() -> (Sender<Result<T, Status>>, Responses<T>) {
    use futures::StreamExt;
    let (tx, rx) = mpsc::channel(QUEUE);
    (tx, ReceiverStream::new(rx).boxed())
}

/// A response stream of frames whose queue counts against `held`.
pub(crate) fn frames(held: &Arc<Held>) -> (HeldSender, Responses<Frame>) {
    use futures::StreamExt;
    let (tx, rx) = mpsc::channel(QUEUE);
    let (tx, stream) = held.queue(tx, rx);
    (tx, stream.boxed())
}

/// Sends `output` to `tx` until it ends, fails, or the client goes away or is cancelled.
pub(crate) async fn feed(tx: HeldSender, output: Output, record: Option<Arc<CallRecord>>) {
    let tx = Arc::new(tx);
    let mut encoder = Encoding { output, writer: None, held: VecDeque::new(), ended: false, record };
    // Wait for room without a thread.
    while tx.room(QUEUE / 2).await {
        let queue = tx.clone();
        let ran = tokio::task::spawn_blocking(move || {
            let more = encoder.run(&queue);
            (encoder, more)
        });
        match ran.await {
            Ok((back, true)) => encoder = back,
            Ok((_, false)) => return,
            Err(_) => return tx.send(Err(Status::internal("the handler panicked"))).await,
        }
    }
}

/// An output being encoded, with the frames that did not fit the queue yet.
struct Encoding {
    output: Output,
    writer: Option<Writer>,
    held: VecDeque<Result<Frame, Status>>,
    ended: bool,
    record: Option<Arc<CallRecord>>,
}

impl Encoding {
    /// Queues frames until the queue is full (true: more to come) or all is sent or nobody
    /// listens (false).
    fn run(&mut self, tx: &HeldSender) -> bool {
        loop {
            while let Some(item) = self.held.pop_front() {
                match tx.try_send(item) {
                    Ok(()) => {}
                    Err(TrySendError::Full(item)) => {
                        self.held.push_front(item);
                        return true;
                    }
                    Err(TrySendError::Closed(_)) => return false,
                }
            }
            if self.ended {
                return false;
            }
            self.encode_next();
        }
    }

    /// Encodes the schema, or the next payload; an error is queued as the last item.
    fn encode_next(&mut self) {
        let Some(writer) = &mut self.writer else {
            match Writer::start(self.output.schema.as_ref(), self.output.options) {
                Ok((writer, schema)) => {
                    self.writer = Some(writer);
                    self.held.extend(schema.into_iter().map(Ok));
                }
                Err(e) => self.fail(e),
            }
            return;
        };
        let payload = match self.output.payloads.next() {
            None => return self.ended = true,
            Some(Err(e)) => return self.fail(e),
            Some(Ok(payload)) => payload,
        };
        if payload.has_batch()
            && let Some(r) = &self.record
        {
            r.sent_batch();
        }
        match writer.encode(payload) {
            Ok(frames) => self.held.extend(frames.into_iter().map(Ok)),
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, e: Error) {
        self.held.push_back(Err(e.into()));
        self.ended = true;
    }
}

/// Hands the rest of an upload to `upload`, a message at a time on a blocking thread; its
/// PutResults go to `tx` as it returns them, before the next message is taken (a client may
/// wait for one before sending more). Meanwhile HTTP/2 keeps receiving what the client sends,
/// up to its window. If the client fails or goes away, or a message fails, `upload` is dropped
/// unfinished.
pub(crate) async fn upload(
    mut stream: Streaming<FlightData>,
    mut decoder: Decoder,
    mut upload: Box<dyn Upload>,
    tx: Sender<Result<PutResult, Status>>,
    record: Option<Arc<CallRecord>>,
) {
    loop {
        let data = match stream.message().await {
            Ok(Some(data)) => data,
            Ok(None) => break,
            // Told, if the client is still there (its stream failed a bound, say); the upload
            // is dropped unfinished.
            Err(status) => {
                let _ = tx.send(Err(status)).await;
                return;
            }
        };
        let record = record.clone();
        let written = tokio::task::spawn_blocking(move || {
            let written = write_one(&mut *upload, &mut decoder, data, record.as_deref());
            (upload, decoder, written)
        });
        let Ok((back, state, written)) = written.await else {
            let _ = tx.send(Err(Status::internal("the handler panicked"))).await;
            return;
        };
        (upload, decoder) = (back, state);
        let sent = match written {
            Ok(Some(app_metadata)) => tx.send(Ok(PutResult { app_metadata })).await.is_ok(),
            Ok(None) => true,
            Err(e) => {
                let _ = tx.send(Err(e.into())).await;
                return;
            }
        };
        if !sent {
            return;
        }
    }
    match tokio::task::spawn_blocking(move || upload.finish()).await {
        Ok(Ok(results)) => {
            for app_metadata in results {
                if tx.send(Ok(PutResult { app_metadata })).await.is_err() {
                    return;
                }
            }
        }
        Ok(Err(e)) => drop(tx.send(Err(e.into())).await),
        Err(_) => drop(tx.send(Err(Status::internal("the handler panicked"))).await),
    }
}

/// Decodes one FlightData and gives what it holds to the upload.
fn write_one(
    upload: &mut dyn Upload,
    decoder: &mut Decoder,
    data: FlightData,
    record: Option<&CallRecord>,
) -> Result<Option<Bytes>> {
    match decoder.decode(&data.data_header, Buffer::from(data.data_body), data.app_metadata)? {
        Decoded::Batch(batch, app_metadata) => {
            record.inspect(|r| r.received_batch());
            upload.write(Payload::new(Some(batch), app_metadata))
        }
        Decoded::Metadata(app_metadata) => upload.write(Payload::metadata(app_metadata)),
        Decoded::Dictionary => Ok(None),
        Decoded::Schema(_) => Err(Violation::SecondSchema("upload").into()),
    }
}
