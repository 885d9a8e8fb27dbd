//! What every source of decoded frames (a data-plane stream, a gRPC stream) offers on top:
//! the schema first, then payloads.

use std::time::Duration;

use arrow_schema::SchemaRef;

use super::Decoded;
use crate::error::{Error, Result};
use crate::service::{Payload, Payloads};

pub trait DecodedStream: Send + 'static {
    /// The next decoded frame, dictionaries already absorbed; None once the peer finished.
    fn next_decoded(&mut self) -> Result<Option<Decoded>>;

    /// Waits up to `within` for the next frame (or the end) without taking it; false if none
    /// came. A caller that must stay responsive (to a Python Ctrl-C) waits in slices this way.
    fn wait_ready(&mut self, within: Duration) -> Result<bool>;

    /// Reads up to the schema, which every IPC stream starts with.
    fn read_schema(&mut self) -> Result<SchemaRef> {
        match self.next_decoded()? {
            Some(Decoded::Schema(schema)) => Ok(schema),
            Some(_) => Err(Error::Protocol("the stream did not start with a schema".into())),
            None => Err(Error::Protocol("the stream ended before its schema".into())),
        }
    }

    /// The next payload after the schema.
    fn next_payload(&mut self) -> Result<Option<Payload>> {
        match self.next_decoded()? {
            Some(Decoded::Batch(batch, app_metadata)) => Ok(Some(Payload { batch: Some(batch), app_metadata })),
            Some(Decoded::Metadata(app_metadata)) => Ok(Some(Payload::metadata(app_metadata))),
            Some(Decoded::Schema(_)) => Err(Error::Protocol("a second schema in one stream".into())),
            Some(Decoded::Dictionary) => Err(Error::Protocol("an undecoded dictionary".into())),
            None => Ok(None),
        }
    }

    fn into_payloads(mut self) -> Payloads
    where
        Self: Sized,
    {
        Box::new(std::iter::from_fn(move || self.next_payload().transpose()))
    }
}
