//! What an application implements to serve flights. The methods are plain blocking calls; the
//! framework runs them for either plane, so one implementation serves gRPC and every data plane.
//! Outputs are pulled and uploads pushed a message at a time, so that a call whose client is
//! slow or paused waits without holding a thread.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::{
    Action, ActionType, CancelFlightInfoRequest, CancelFlightInfoResult, FlightDescriptor, FlightEndpoint, FlightInfo,
    PollInfo, RenewFlightEndpointRequest,
};
use arrow_schema::SchemaRef;
use bytes::Bytes;

use crate::error::{Error, Quote, Result};
use crate::ipc::{PayloadStream, SharedStats, WriteOptions};
use crate::stored::StoredBatch;

/// One message of a stream.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Payload {
    /// A batch, with application metadata (empty for none).
    Batch {
        /// The batch.
        batch: RecordBatch,
        /// Its application metadata, empty for none.
        app_metadata: Bytes,
    },
    /// Application metadata alone.
    Metadata(Bytes),
    /// A batch still in its file, sent as the file holds it (a data plane reads the body
    /// straight into transport memory, gRPC into its message).
    Stored {
        /// The batch as its file holds it.
        batch: Box<StoredBatch>,
        /// Its application metadata, empty for none.
        app_metadata: Bytes,
    },
    /// The schema (and layout) an output begins with after it sent application metadata
    /// first ([`Output::unbegun`]).
    Begin {
        /// The schema.
        schema: SchemaRef,
        /// How the batches are laid out.
        options: WriteOptions,
    },
}

impl Payload {
    /// A batch with `app_metadata` if there is one, else metadata alone.
    pub fn new(batch: Option<RecordBatch>, app_metadata: Bytes) -> Self {
        match batch {
            Some(batch) => Payload::Batch { batch, app_metadata },
            None => Payload::Metadata(app_metadata),
        }
    }

    /// A batch without application metadata.
    pub fn batch(batch: RecordBatch) -> Self {
        Payload::Batch { batch, app_metadata: Bytes::new() }
    }

    /// Application metadata alone.
    pub fn metadata(app_metadata: Bytes) -> Self {
        Payload::Metadata(app_metadata)
    }

    /// A batch still in its file, sent as the file holds it.
    pub fn stored(batch: StoredBatch) -> Self {
        Payload::Stored { batch: Box::new(batch), app_metadata: Bytes::new() }
    }

    /// Begins an output whose schema was not known at first.
    pub fn begin(schema: SchemaRef, options: WriteOptions) -> Self {
        Payload::Begin { schema, options }
    }

    /// The decoded batch it carries, if any.
    pub fn record_batch(&self) -> Option<&RecordBatch> {
        match self {
            Payload::Batch { batch, .. } => Some(batch),
            _ => None,
        }
    }

    /// Whether it carries a batch, decoded or stored.
    pub fn has_batch(&self) -> bool {
        matches!(self, Payload::Batch { .. } | Payload::Stored { .. })
    }

    /// Its application metadata: empty where it has none.
    pub fn app_metadata(&self) -> &Bytes {
        static NONE: Bytes = Bytes::new();
        match self {
            Payload::Batch { app_metadata, .. } | Payload::Stored { app_metadata, .. } => app_metadata,
            Payload::Metadata(m) => m,
            Payload::Begin { .. } => &NONE,
        }
    }

    /// The decoded batch and the application metadata.
    pub fn into_parts(self) -> (Option<RecordBatch>, Bytes) {
        match self {
            Payload::Batch { batch, app_metadata } => (Some(batch), app_metadata),
            Payload::Metadata(m) => (None, m),
            Payload::Stored { app_metadata, .. } => (None, app_metadata),
            Payload::Begin { .. } => (None, Bytes::new()),
        }
    }
}

/// What an [`Output`] sends after its schema, one payload at a time.
pub type Payloads = Box<dyn Iterator<Item = Result<Payload>> + Send>;

/// A stream of batches to send: the schema up front, then the payloads. An error ends the
/// stream and reaches the client with its status code.
pub struct Output {
    /// None for an output that begins later, by a payload ([`Payload::begin`]).
    pub schema: Option<SchemaRef>,
    /// The payloads, in order.
    pub payloads: Payloads,
    /// How the batches are laid out on the wire.
    pub options: WriteOptions,
}

impl Output {
    /// An output of `schema`, then `payloads`.
    pub fn new(schema: SchemaRef, payloads: impl Iterator<Item = Result<Payload>> + Send + 'static) -> Self {
        Output { schema: Some(schema), payloads: Box::new(payloads), options: WriteOptions::default() }
    }

    /// An output that may send application metadata before its schema, which one of its
    /// payloads then brings ([`Payload::begin`]).
    pub fn unbegun(payloads: impl Iterator<Item = Result<Payload>> + Send + 'static) -> Self {
        Output { schema: None, payloads: Box::new(payloads), options: WriteOptions::default() }
    }

    /// The output with batches laid out as `options` says (compression, alignment).
    pub fn with_options(self, options: WriteOptions) -> Self {
        Output { options, ..self }
    }

    /// An output of `schema`, then each of `batches`.
    pub fn batches(
        schema: SchemaRef,
        batches: impl IntoIterator<Item = RecordBatch, IntoIter: Send + 'static>,
    ) -> Self {
        Output::new(schema, batches.into_iter().map(|b| Ok(Payload::batch(b))))
    }
}

/// A stream of batches received from a client (DoExchange): the schema, then payloads. The
/// schema comes when the client begins writing, which may be after the handler has started
/// (and written), and after application metadata the client sent first, as on gRPC.
pub struct Input {
    stream: PayloadStream,
}

impl Input {
    pub(crate) fn new(stream: PayloadStream) -> Self {
        Input { stream }
    }

    /// The client's schema, waiting for it to begin if it has not yet.
    pub fn schema(&mut self) -> Result<SchemaRef> {
        self.stream.schema()
    }

    /// What has been read of it, as it grows.
    pub fn stats(&self) -> SharedStats {
        self.stream.stats()
    }
}

impl Iterator for Input {
    type Item = Result<Payload>;
    fn next(&mut self) -> Option<Result<Payload>> {
        self.stream.next_payload().transpose()
    }
}

/// A data-plane call as [`Handler::for_call`] sees it.
#[derive(Clone)]
pub struct PlaneCall {
    grant: [u8; 32],
    cancelled: Arc<dyn Fn() -> bool + Send + Sync>,
}

impl PlaneCall {
    pub(crate) fn new(grant: [u8; 32], cancelled: Arc<dyn Fn() -> bool + Send + Sync>) -> Self {
        PlaneCall { grant, cancelled }
    }

    /// The MAC of the grant that opened the call (see
    /// [`PlaneServer::granted_locations`](crate::PlaneServer::granted_locations)).
    pub fn grant(&self) -> &[u8; 32] {
        &self.grant
    }

    /// Whether the client gave up on the call (or its connection failed).
    pub fn is_cancelled(&self) -> bool {
        (self.cancelled)()
    }
}

/// A figure a handler reports on its server's metrics endpoint ([`Handler::gauges`]).
#[derive(Clone, Debug)]
pub struct Gauge {
    /// Its Prometheus name, base units and all (`wirespeed_serve_cache_bytes`).
    pub name: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Its value now.
    pub value: f64,
}

/// See [`Upload::intake`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intake {
    /// Take the next message now.
    Ready,
    /// Not yet: ask again.
    Later,
    /// The handler has stopped reading: end the call at [`Upload::finish`].
    Done,
}

/// An upload in progress (DoPut), fed one message at a time as the client sends them.
/// Dropped without [`Upload::finish`] when the client goes away or a message fails: it must then
/// leave nothing behind.
pub trait Upload: Send {
    /// Takes one message; what it returns goes back to the client at once as a PutResult (a
    /// client may wait for it before sending the next, as Arrow's examples do).
    fn write(&mut self, payload: Payload) -> Result<Option<Bytes>>;

    /// The client has sent everything; what this returns goes back as the last PutResults.
    fn finish(self: Box<Self>) -> Result<Vec<Bytes>>;

    /// What the upload's reader has decoded, growing as it goes, for a service that shows it
    /// (pyarrow's `reader.stats`); given once, before the first message.
    fn reading(&mut self, _stats: SharedStats) {}

    /// Whether the service takes the next message now, waiting up to `within` to know: a
    /// handler that reads at its own pace has the message decoded only when it asks (so its
    /// counts are as it read), and one that stopped early ends the call at
    /// [`Upload::finish`] without waiting for the client's next message.
    fn intake(&mut self, _within: std::time::Duration) -> Intake {
        Intake::Ready
    }
}

/// A Flight service. Only `get_flight_info` and `do_get` are required; the rest answer
/// Unimplemented. Its FlightInfos go out as it makes them: clients holding the key learn the
/// data planes by asking (see [`crate::discovery`]).
///
/// One implementation serves every plane. Here a service keeps uploads in memory and hands
/// them back; a do_put over shared memory lands in `write`, as one over gRPC would:
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
///
/// use arrow_array::{Int32Array, RecordBatch};
/// use arrow_schema::SchemaRef;
/// use bytes::Bytes;
/// use wirespeed_flight::{Client, Error, FlightDescriptor, FlightEndpoint, FlightInfo, Handler, Output};
/// use wirespeed_flight::{Payload, Result, Server, Ticket, Upload};
///
/// #[derive(Clone, Default)]
/// struct Memory(Arc<Mutex<HashMap<Vec<u8>, (SchemaRef, Vec<RecordBatch>)>>>);
///
/// struct Landing { memory: Memory, name: Vec<u8>, schema: SchemaRef, batches: Vec<RecordBatch> }
///
/// impl Upload for Landing {
///     fn write(&mut self, payload: Payload) -> Result<Option<Bytes>> {
///         self.batches.extend(payload.into_parts().0);
///         Ok(None)
///     }
///
///     fn finish(self: Box<Self>) -> Result<Vec<Bytes>> {
///         self.memory.0.lock().unwrap().insert(self.name, (self.schema, self.batches));
///         Ok(Vec::new())
///     }
/// }
///
/// impl Handler for Memory {
///     fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo> {
///         let memory = self.0.lock().unwrap();
///         let (schema, _) = memory.get(&descriptor.cmd[..]).ok_or_else(|| Error::not_found("no such flight"))?;
///         let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(descriptor.cmd.clone()));
///         Ok(FlightInfo::new().try_with_schema(schema)?.with_descriptor(descriptor.clone()).with_endpoint(endpoint))
///     }
///
///     fn do_get(&self, ticket: &[u8]) -> Result<Output> {
///         let (schema, batches) = self.0.lock().unwrap().get(ticket).cloned().ok_or_else(|| Error::not_found("no such flight"))?;
///         Ok(Output::batches(schema, batches))
///     }
///
///     fn do_put(&self, descriptor: &FlightDescriptor, schema: &SchemaRef) -> Result<Box<dyn Upload>> {
///         let name = descriptor.cmd.to_vec();
///         Ok(Box::new(Landing { memory: self.clone(), name, schema: schema.clone(), batches: Vec::new() }))
///     }
/// }
///
/// # fn main() -> Result<()> {
/// let key = wirespeed::Key::new("a shared secret")?;
/// let server = Server::builder(Memory::default()).key(key.clone()).start()?;
/// let client = Client::connect(&server.url())?.with_key(key);
///
/// let batch = RecordBatch::try_from_iter([("x", Arc::new(Int32Array::from(vec![1, 2, 3])) as _)])?;
/// let descriptor = FlightDescriptor::new_cmd("up");
/// let mut writer = client.do_put(&descriptor, &batch.schema())?;
/// writer.write(batch.clone())?;
/// writer.finish()?;
///
/// let info = client.get_flight_info(&descriptor)?;
/// let got: Vec<RecordBatch> = client.do_get(&info.endpoint[0])?.collect::<Result<_>>()?;
/// assert_eq!(got, [batch]);
/// # Ok(())
/// # }
/// ```
pub trait Handler: Send + Sync + 'static {
    /// ListFlights: the flights matching `criteria`; none by default.
    fn list_flights(&self, _criteria: &[u8]) -> Result<Vec<FlightInfo>> {
        Ok(Vec::new())
    }

    /// GetFlightInfo: where and how to read the flight `descriptor` names (its endpoints may name no location: the server fills in its own, see [`crate::Advertise`]).
    fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo>;

    /// The schema alone; by default taken from the FlightInfo.
    fn get_schema(&self, descriptor: &FlightDescriptor) -> Result<SchemaRef> {
        let info = self.get_flight_info(descriptor)?;
        Ok(std::sync::Arc::new(info.try_decode_schema()?))
    }

    /// DoGet: the stream `ticket` names.
    fn do_get(&self, ticket: &[u8]) -> Result<Output>;

    /// Starts an upload of batches with `schema`; the framework feeds it what the client sends.
    fn do_put(&self, _descriptor: &FlightDescriptor, _schema: &SchemaRef) -> Result<Box<dyn Upload>> {
        Err(Error::unimplemented("DoPut is not supported by this service"))
    }

    /// The output may read the input lazily, for a streaming exchange.
    fn do_exchange(&self, _descriptor: &FlightDescriptor, _input: Input) -> Result<Output> {
        Err(Error::unimplemented("DoExchange is not supported by this service"))
    }

    /// PollFlightInfo: how far the query `descriptor` names has come. By default the query is
    /// done at once: the whole FlightInfo, progress 1.
    fn poll_flight_info(&self, descriptor: &FlightDescriptor) -> Result<PollInfo> {
        let info = self.get_flight_info(descriptor)?;
        Ok(PollInfo { info: Some(info), flight_descriptor: None, progress: Some(1.0), expiration_time: None })
    }

    /// The CancelFlightInfo action: stops the query behind `request.info`. UNIMPLEMENTED by
    /// default (nothing to cancel).
    fn cancel_flight_info(&self, _request: &CancelFlightInfoRequest) -> Result<CancelFlightInfoResult> {
        Err(Error::unimplemented("CancelFlightInfo is not supported by this service"))
    }

    /// The RenewFlightEndpoint action: the endpoint with a later `expiration_time`.
    /// UNIMPLEMENTED by default (its tickets do not expire).
    fn renew_flight_endpoint(&self, _request: &RenewFlightEndpointRequest) -> Result<FlightEndpoint> {
        Err(Error::unimplemented("RenewFlightEndpoint is not supported by this service"))
    }

    /// Figures of its own for the server's metrics endpoint, read at each scrape; none by
    /// default.
    fn gauges(&self) -> Vec<Gauge> {
        Vec::new()
    }

    /// DoAction: runs `action`; unknown actions are UNIMPLEMENTED by default. The actions
    /// Flight defines (CancelFlightInfo, RenewFlightEndpoint, the session options) have
    /// methods of their own and never come here.
    fn do_action(&self, action: &Action) -> Result<Vec<Bytes>> {
        Err(Error::unimplemented(format!("unknown action {}", Quote::str(&action.r#type))))
    }

    /// ListActions: the actions it serves; none by default.
    fn list_actions(&self) -> Vec<ActionType> {
        Vec::new()
    }

    /// The handler for one data-plane call: a service that keeps state from the control-plane
    /// call that granted it (its middleware, the peer's identity) hands it on here, or lets
    /// the handler ask whether the client gave up. `None`: this handler.
    fn for_call(&self, _call: &PlaneCall) -> Option<Box<dyn Handler>> {
        None
    }
}
