//! What a call reads and writes, whichever plane carries it: [`FlightReader`] and
//! [`FlightWriter`] over a data-plane stream or a gRPC call.

use std::sync::Arc;

use crate::runtime::Runtime;
use arrow_array::RecordBatch;
use arrow_flight::FlightData;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use wirespeed::Fabric;

use super::Plane;
use crate::error::{Code, Error, Result};
use crate::grpc;
use crate::handler::Payload;
use crate::ipc::{DecodedStream, PayloadStream, SharedStats, WriteOptions};
use crate::plane::{self, close};

/// How long `next_result` waits for a PutResult over gRPC (a data plane's stream has its own
/// timeout).
const RESULT_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The batches of one call.
pub struct FlightReader {
    source: PayloadStream,
    plane: Plane,
    /// Keeps a data-plane stream for closing it properly once read.
    stream: Option<Arc<plane::CallStream>>,
    done: bool,
    /// A gRPC call's connection runs on its client's runtime: kept running while the call is
    /// read, even once the client is dropped.
    _runtime: Option<Arc<Runtime>>,
}

impl FlightReader {
    /// A DoGet's reader, its schema read; or an exchange's, which may read application
    /// metadata before the schema comes.
    pub(crate) fn from_plane(stream: Arc<plane::CallStream>, kind: Fabric, exchange: bool) -> Result<Self> {
        let source = plane::Reader::new(stream.clone()).payloads();
        let mut reader =
            FlightReader { source, plane: Plane::Data(kind), stream: Some(stream), done: false, _runtime: None };
        if !exchange {
            reader.schema()?;
        }
        Ok(reader)
    }

    pub(crate) fn from_grpc(stream: tonic::Streaming<FlightData>, runtime: &Arc<Runtime>) -> Result<Self> {
        let source = grpc::Reader::new(stream, runtime.handle().clone(), None).payloads();
        let mut reader =
            FlightReader { source, plane: Plane::Grpc, stream: None, done: false, _runtime: Some(runtime.clone()) };
        reader.schema()?;
        Ok(reader)
    }

    /// The schema, waiting for it where it has not come yet (an exchange's server may begin
    /// late, and send application metadata first).
    pub fn schema(&mut self) -> Result<SchemaRef> {
        self.source.schema()
    }

    /// Waits for the schema or the end, raising the call's error if it failed first.
    pub fn started(&mut self) -> Result<()> {
        self.source.schema_or_end().map(drop)
    }

    /// Which plane carries this call.
    pub fn plane(&self) -> Plane {
        self.plane
    }

    /// What has been read, as it grows (also once the reader is handed on).
    pub fn stats(&self) -> SharedStats {
        self.source.stats()
    }

    /// Waits up to `within` for the next message (or the end, or an error) without taking it;
    /// false if none came. Lets a caller stay responsive between waits: wait in slices, then
    /// read. Slices that add up to the data plane's timeout fail as one read would.
    pub fn wait_ready(&mut self, within: std::time::Duration) -> Result<bool> {
        Ok(self.done || self.source.wait_ready(within)?)
    }

    /// The next batch or metadata-only message; None at the end.
    pub fn next_payload(&mut self) -> Result<Option<Payload>> {
        if self.done {
            return Ok(None);
        }
        let next = self.source.next_payload();
        if !matches!(next, Ok(Some(_))) {
            self.done = true;
            if let Some(stream) = self.stream.take() {
                close(&stream, std::time::Duration::from_secs(1));
            }
        }
        next
    }
}

impl Drop for FlightReader {
    /// A reader dropped before the end cancels its call, as gRPC's does, even while the call's
    /// writer (an exchange's) lives on.
    fn drop(&mut self) {
        if let Some(stream) = self.stream.take().filter(|_| !self.done) {
            stream.reset(wirespeed::ErrorCode::CANCELLED);
        }
    }
}

impl Iterator for FlightReader {
    type Item = Result<RecordBatch>;
    /// The batches, skipping messages that carry only metadata.
    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            match self.next_payload() {
                Ok(Some(Payload::Batch { batch, .. })) => return Some(Ok(batch)),
                Ok(Some(_)) => continue,
                Ok(None) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

pub(crate) struct GrpcWriter {
    pub(crate) encoder: grpc::Writer,
    pub(crate) tx: Option<mpsc::Sender<FlightData>>,
    /// Runs the call's task, kept running while the writer lives, even once its client is
    /// dropped.
    pub(crate) runtime: Arc<Runtime>,
}

pub(crate) enum WriterInner {
    /// A DoPut reads the server's PutResults through `results`; an exchange's answers are
    /// read through its reader instead.
    Plane {
        stream: Arc<plane::CallStream>,
        writer: plane::Writer,
        /// An exchange begins later than it starts (and may send metadata before).
        begun: bool,
        kind: Fabric,
        results: Option<PutResults>,
    },
    GrpcPut {
        writer: GrpcWriter,
        call: Option<JoinHandle<Result<()>>>,
        /// The PutResults as the call receives them.
        results: Option<PutResults>,
    },
    GrpcExchange {
        writer: GrpcWriter,
    },
}

/// The sending half of an upload or exchange.
pub struct FlightWriter {
    pub(crate) inner: WriterInner,
}

impl FlightWriter {
    /// A writer over a data-plane stream, the schema sent if given (else at
    /// [`FlightWriter::begin`]); with `put`, PutResults come back.
    pub(crate) fn on_plane(
        stream: Arc<plane::CallStream>,
        schema: Option<(&SchemaRef, WriteOptions)>,
        kind: Fabric,
        put: bool,
    ) -> Result<Self> {
        let (begun, options) = (schema.is_some(), schema.map(|(_, o)| o).unwrap_or_default());
        let writer = plane::Writer::start(&stream, schema.map(|(s, _)| s), options)?;
        let results = put.then(|| PutResults(Source::Plane(plane::Reader::new(stream.clone()).payloads())));
        Ok(FlightWriter { inner: WriterInner::Plane { stream, writer, begun, kind, results } })
    }

    /// Sends the schema of an exchange started without one.
    pub fn begin(&mut self, schema: &SchemaRef) -> Result<()> {
        self.begin_with(schema, WriteOptions::default())
    }

    /// As [`begin`](Self::begin), the batches laid out as `options` say.
    pub fn begin_with(&mut self, schema: &SchemaRef, options: WriteOptions) -> Result<()> {
        match &mut self.inner {
            WriterInner::Plane { stream, writer, begun: begun @ false, .. } => {
                writer.write(stream, Payload::begin(schema.clone(), options))?;
                *begun = true;
                Ok(())
            }
            _ => Err(Error::invalid_argument("the stream has begun already")),
        }
    }

    /// The plane this upload or exchange runs on.
    pub fn plane(&self) -> Plane {
        match &self.inner {
            WriterInner::Plane { kind, .. } => Plane::Data(*kind),
            _ => Plane::Grpc,
        }
    }

    /// Sends one batch.
    pub fn write(&mut self, batch: RecordBatch) -> Result<()> {
        self.write_payload(Payload::batch(batch))
    }

    /// Sends one payload: a batch, application metadata or both.
    pub fn write_payload(&mut self, payload: Payload) -> Result<()> {
        match &mut self.inner {
            WriterInner::Plane { begun: false, .. } if payload.has_batch() => {
                Err(Error::invalid_argument("begin the stream with a schema first"))
            }
            WriterInner::Plane { stream, .. } if let Some(e) = stream.peer_error() => Err(e),
            WriterInner::Plane { stream, writer, .. } => match writer.write(stream, payload) {
                // The server gave up (and said why on the stream): report its reason.
                Err(Error::Connection(_)) => Err(self.failure()),
                other => other,
            },
            WriterInner::GrpcPut { writer, .. } | WriterInner::GrpcExchange { writer } => {
                for frame in writer.encoder.encode(payload)? {
                    let tx = writer.tx.as_ref().ok_or_else(|| Error::internal("writer already finished"))?;
                    if tx.blocking_send(grpc::flight_data(frame)).is_err() {
                        return Err(self.failure());
                    }
                }
                Ok(())
            }
        }
    }

    /// Why the call failed, once sending did.
    fn failure(&mut self) -> Error {
        match &mut self.inner {
            WriterInner::Plane { stream, .. } => {
                if let Some(e) = stream.peer_error() {
                    return e;
                }
                let mut reader = plane::Reader::new(stream.clone());
                loop {
                    match reader.next_decoded() {
                        Ok(Some(_)) => continue,
                        Ok(None) => return Error::unavailable("the server ended the call"),
                        Err(e) => return e,
                    }
                }
            }
            WriterInner::GrpcPut { writer, call, .. } => match call.take() {
                Some(call) => match writer.runtime.block_on(call) {
                    Ok(Err(e)) => e,
                    _ => Error::unavailable("the server ended the call"),
                },
                None => Error::internal("writer already finished"),
            },
            WriterInner::GrpcExchange { .. } => Error::unavailable("the server ended the exchange"),
        }
    }

    /// A DoPut's next PutResult, as the server sends it while we write (a server may answer
    /// each message, and a client wait for it); None once the call has ended. Results read
    /// here are not returned again by [`FlightWriter::finish`].
    pub fn next_result(&mut self) -> Result<Option<Bytes>> {
        match &mut self.inner {
            WriterInner::Plane { results: Some(r), .. } | WriterInner::GrpcPut { results: Some(r), .. } => {
                r.next_result()
            }
            _ => Err(Error::internal("no PutResults here: not a DoPut, or taken")),
        }
    }

    /// A DoPut's PutResults, to read on another thread while this one writes.
    pub fn take_results(&mut self) -> Option<PutResults> {
        match &mut self.inner {
            WriterInner::Plane { results, .. } | WriterInner::GrpcPut { results, .. } => results.take(),
            WriterInner::GrpcExchange { .. } => None,
        }
    }

    /// Ends the upload; for DoPut, returns the server's PutResults not read yet.
    pub fn finish(mut self) -> Result<Vec<Bytes>> {
        match &mut self.inner {
            WriterInner::Plane { stream, .. } if let Some(e) = stream.peer_error() => Err(e),
            WriterInner::Plane { stream, results, .. } => {
                if stream.finish().is_err() {
                    return Err(self.failure());
                }
                results.as_mut().map(PutResults::rest).unwrap_or(Ok(Vec::new()))
            }
            WriterInner::GrpcPut { writer, call, results } => {
                writer.tx = None;
                let call = call.take().ok_or_else(|| Error::internal("writer already finished"))?;
                writer.runtime.block_on(call).map_err(|e| Error::internal(e.to_string()))??;
                results.as_mut().map(PutResults::rest).unwrap_or(Ok(Vec::new()))
            }
            WriterInner::GrpcExchange { writer } => {
                writer.tx = None;
                Ok(Vec::new())
            }
        }
    }
}

/// A DoPut's answers from the server, in order.
pub struct PutResults(Source);

enum Source {
    Plane(PayloadStream),
    /// What the gRPC call's task received.
    Grpc(std::sync::mpsc::Receiver<Bytes>),
}

impl PutResults {
    pub(crate) fn grpc(received: std::sync::mpsc::Receiver<Bytes>) -> Self {
        PutResults(Source::Grpc(received))
    }

    /// The next one, waiting for it; None once the call has ended.
    pub fn next_result(&mut self) -> Result<Option<Bytes>> {
        match &mut self.0 {
            Source::Plane(reader) => Ok(reader.next_payload()?.map(|p| p.into_parts().1)),
            Source::Grpc(received) => match received.recv_timeout(RESULT_WAIT) {
                Ok(result) => Ok(Some(result)),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Ok(None),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    Err(Error::status(Code::DeadlineExceeded, "no PutResult within 300 s"))
                }
            },
        }
    }

    /// Every one still to come, once the upload is finished.
    pub fn rest(&mut self) -> Result<Vec<Bytes>> {
        match &mut self.0 {
            Source::Grpc(received) => Ok(received.try_iter().collect()),
            Source::Plane(_) => std::iter::from_fn(|| self.next_result().transpose()).collect(),
        }
    }
}
