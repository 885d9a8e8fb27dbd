//! Sources of decoded frames (a data-plane stream, a gRPC stream), and [`PayloadStream`], which
//! reads one as Flight lets a side write it: application metadata may come before the schema,
//! batches only after it.

use std::collections::VecDeque;
use std::time::Duration;

use arrow_schema::SchemaRef;

use super::{Decoded, SharedStats};
use crate::error::{Result, Violation};
use crate::handler::Payload;

pub(crate) trait DecodedStream: Send + 'static {
    /// The next decoded frame, dictionaries already absorbed; None once the peer finished.
    fn next_decoded(&mut self) -> Result<Option<Decoded>>;

    /// Waits up to `within` for the next frame (or the end) without taking it; false if none
    /// came. A caller that must stay responsive (to a Python Ctrl-C) waits in slices this way.
    fn wait_ready(&mut self, within: Duration) -> Result<bool>;

    /// What has been decoded so far.
    fn stats(&self) -> SharedStats;

    /// The stream as batches and metadata.
    fn payloads(self) -> PayloadStream
    where
        Self: Sized,
    {
        PayloadStream::new(Box::new(self))
    }
}

/// A stream read as Flight reads one: application metadata may come before the schema (a side
/// of an exchange may talk before it begins), batches only after it.
pub(crate) struct PayloadStream {
    source: Box<dyn DecodedStream>,
    schema: Option<SchemaRef>,
    /// Metadata that came while waiting for the schema, not yet taken.
    early: VecDeque<Payload>,
}

impl PayloadStream {
    pub(crate) fn new(source: Box<dyn DecodedStream>) -> Self {
        PayloadStream { source, schema: None, early: VecDeque::new() }
    }

    /// Waits for the schema, keeping the metadata that comes first for
    /// [`next_payload`](Self::next_payload); an error if the stream ends without one.
    pub(crate) fn schema(&mut self) -> Result<SchemaRef> {
        self.schema_or_end()?.ok_or_else(|| Violation::EndedBeforeSchema.into())
    }

    /// As [`schema`](Self::schema); None if the stream ended without one.
    pub(crate) fn schema_or_end(&mut self) -> Result<Option<SchemaRef>> {
        while self.schema.is_none() {
            match self.source.next_decoded()? {
                Some(Decoded::Schema(schema)) => self.schema = Some(schema),
                Some(Decoded::Metadata(m)) => self.early.push_back(Payload::metadata(m)),
                Some(_) => return Err(Violation::BatchBeforeSchema.into()),
                None => return Ok(None),
            }
        }
        Ok(self.schema.clone())
    }

    /// The next batch or metadata; None at the end.
    pub(crate) fn next_payload(&mut self) -> Result<Option<Payload>> {
        if let Some(early) = self.early.pop_front() {
            return Ok(Some(early));
        }
        loop {
            match self.source.next_decoded()? {
                Some(Decoded::Schema(_)) if self.schema.is_some() => {
                    return Err(Violation::SecondSchema("stream").into());
                }
                Some(Decoded::Schema(schema)) => self.schema = Some(schema),
                Some(Decoded::Batch(batch, app_metadata)) => return Ok(Some(Payload::new(Some(batch), app_metadata))),
                Some(Decoded::Metadata(app_metadata)) => return Ok(Some(Payload::metadata(app_metadata))),
                Some(Decoded::Dictionary) => continue,
                None => return Ok(None),
            }
        }
    }

    /// As [`DecodedStream::wait_ready`].
    pub(crate) fn wait_ready(&mut self, within: Duration) -> Result<bool> {
        Ok(!self.early.is_empty() || self.source.wait_ready(within)?)
    }

    pub(crate) fn stats(&self) -> SharedStats {
        self.source.stats()
    }
}
