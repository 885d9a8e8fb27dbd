//! What an application implements to serve flights. The methods are plain blocking calls; the
//! framework runs them for either plane, so one implementation serves gRPC and every data plane.
//! Outputs are pulled and uploads pushed a message at a time, so that a call whose client is
//! slow or paused waits without holding a thread.

use arrow_array::RecordBatch;
use arrow_flight::{Action, ActionType, FlightDescriptor, FlightInfo};
use arrow_schema::SchemaRef;
use bytes::Bytes;

use crate::error::{Error, Result};

/// One message of a stream: a batch, application metadata, or both.
#[derive(Clone, Debug)]
pub struct Payload {
    pub batch: Option<RecordBatch>,
    pub app_metadata: Bytes,
}

impl Payload {
    pub fn batch(batch: RecordBatch) -> Self {
        Payload { batch: Some(batch), app_metadata: Bytes::new() }
    }

    pub fn metadata(app_metadata: Bytes) -> Self {
        Payload { batch: None, app_metadata }
    }
}

pub type Payloads = Box<dyn Iterator<Item = Result<Payload>> + Send>;

/// A stream of batches to send: the schema up front, then the payloads. An error ends the
/// stream and reaches the client with its status code.
pub struct Output {
    pub schema: SchemaRef,
    pub payloads: Payloads,
}

impl Output {
    pub fn new(schema: SchemaRef, payloads: impl Iterator<Item = Result<Payload>> + Send + 'static) -> Self {
        Output { schema, payloads: Box::new(payloads) }
    }

    pub fn batches(
        schema: SchemaRef,
        batches: impl IntoIterator<Item = RecordBatch, IntoIter: Send + 'static>,
    ) -> Self {
        Output::new(schema, batches.into_iter().map(|b| Ok(Payload::batch(b))))
    }
}

/// Waits for an input's schema; then its payloads follow.
pub(crate) type Begin = Box<dyn FnOnce() -> Result<(SchemaRef, Payloads)> + Send>;

/// A stream of batches received from a client (DoExchange): the schema, then payloads. On a
/// data plane the schema comes when the client begins writing, which may be after the handler
/// has started (and written), as on gRPC.
pub struct Input {
    schema: Option<SchemaRef>,
    /// Until the schema has come, what waits for it.
    pending: Option<Begin>,
    payloads: Payloads,
}

impl Input {
    pub(crate) fn new(schema: SchemaRef, payloads: Payloads) -> Self {
        Input { schema: Some(schema), pending: None, payloads }
    }

    /// An input whose schema is read when first wanted.
    pub(crate) fn lazy(begin: Begin) -> Self {
        Input { schema: None, pending: Some(begin), payloads: Box::new(std::iter::empty()) }
    }

    /// The client's schema, waiting for it to begin if it has not yet.
    pub fn schema(&mut self) -> Result<SchemaRef> {
        if let Some(schema) = &self.schema {
            return Ok(schema.clone());
        }
        let begin = self.pending.take().ok_or_else(|| Error::Protocol("the input has no schema".into()))?;
        let (schema, payloads) = begin()?;
        self.payloads = payloads;
        self.schema = Some(schema.clone());
        Ok(schema)
    }
}

impl Iterator for Input {
    type Item = Result<Payload>;
    fn next(&mut self) -> Option<Result<Payload>> {
        if self.schema.is_none()
            && let Err(e) = self.schema()
        {
            return Some(Err(e));
        }
        self.payloads.next()
    }
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
}

/// A Flight service. Only `get_flight_info` and `do_get` are required; the rest answer
/// Unimplemented. Its FlightInfos go out as it makes them: clients holding the key learn the
/// data planes by asking (see [`crate::plane::hello`]).
pub trait Handler: Send + Sync + 'static {
    fn list_flights(&self, _criteria: &[u8]) -> Result<Vec<FlightInfo>> {
        Ok(Vec::new())
    }

    fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo>;

    /// The schema alone; by default taken from the FlightInfo.
    fn get_schema(&self, descriptor: &FlightDescriptor) -> Result<SchemaRef> {
        let info = self.get_flight_info(descriptor)?;
        Ok(std::sync::Arc::new(info.try_decode_schema()?))
    }

    fn do_get(&self, ticket: &[u8]) -> Result<Output>;

    /// Starts an upload of batches with `schema`; the framework feeds it what the client sends.
    fn do_put(&self, _descriptor: &FlightDescriptor, _schema: &SchemaRef) -> Result<Box<dyn Upload>> {
        Err(Error::unimplemented("DoPut is not supported by this service"))
    }

    /// The output may read the input lazily, for a streaming exchange.
    fn do_exchange(&self, _descriptor: &FlightDescriptor, _input: Input) -> Result<Output> {
        Err(Error::unimplemented("DoExchange is not supported by this service"))
    }

    fn do_action(&self, action: &Action) -> Result<Vec<Bytes>> {
        Err(Error::unimplemented(format!("unknown action {:?}", action.r#type)))
    }

    fn list_actions(&self) -> Vec<ActionType> {
        Vec::new()
    }
}
