//! The gRPC plane: standard Flight, so every Flight client and server works with ours.
//! Frames become FlightData and back: the server writes them itself ([`codec`]), the client
//! through prost (the body concatenated, as prost needs).

pub mod auth;
pub mod budget;
pub mod channel;
pub mod codec;
pub mod connections;
pub mod drive;
pub mod router;
pub mod server;
pub mod tls;

use std::time::Duration;

use arrow_buffer::Buffer;
use arrow_flight::FlightData;
use arrow_schema::SchemaRef;
use tokio::runtime::Handle;

use crate::error::{Error, Result};
use crate::ipc::{Decoded, DecodedStream, Decoder, Frame, FrameWriter, SharedStats, WriteOptions};
use crate::service::Payload;

/// gRPC's own limit is 4 MiB; Flight batches are often larger.
pub const MAX_MESSAGE: usize = 1 << 30;
/// The largest request of a call that carries no batches (a ticket, a descriptor, an action):
/// a server takes no more than this into memory for them.
pub const MAX_CONTROL_MESSAGE: usize = 16 << 20;
/// HTTP/2 flow-control windows: the 64 KiB default holds a stream to one small batch per
/// round trip.
pub const STREAM_WINDOW: u32 = 16 << 20;
pub const CONNECTION_WINDOW: u32 = 64 << 20;
/// Largest HTTP/2 frame we accept: a 128 KiB batch comes in one frame instead of eight of
/// the 16 KiB default.
pub const MAX_FRAME: u32 = 1 << 20;

pub fn flight_data(frame: Frame) -> FlightData {
    let data_body = frame.body_bytes();
    FlightData { flight_descriptor: None, data_header: frame.meta, app_metadata: frame.app_metadata, data_body }
}

/// Encodes payloads into frames, schema first.
pub struct Writer {
    frames: FrameWriter,
}

impl Writer {
    /// The writer and the schema's frame, if given.
    pub fn start(schema: Option<&SchemaRef>, options: WriteOptions) -> Result<(Self, Vec<Frame>)> {
        let (frames, first) = FrameWriter::start(schema, options)?;
        Ok((Writer { frames }, first))
    }

    pub fn encode(&mut self, payload: Payload) -> Result<Vec<Frame>> {
        // A batch still in its file goes as the file holds it: one read, no decode.
        if let Some(stored) = &payload.stored {
            let body = vec![stored.read_body()?];
            return Ok(vec![Frame { meta: stored.meta.clone(), body, app_metadata: payload.app_metadata }]);
        }
        Ok(self.frames.frames(payload)?)
    }
}

/// Decodes a gRPC stream of FlightData from a blocking thread.
pub struct Reader {
    stream: tonic::Streaming<FlightData>,
    runtime: Handle,
    decoder: Decoder,
    /// A message already taken off the stream (a DoPut's first, read for its descriptor).
    pending: Option<FlightData>,
    /// The end of the stream, seen while waiting for a message.
    ended: bool,
}

impl Reader {
    pub fn new(stream: tonic::Streaming<FlightData>, runtime: Handle, pending: Option<FlightData>) -> Self {
        Reader { stream, runtime, decoder: Decoder::default(), pending, ended: false }
    }
}

impl DecodedStream for Reader {
    fn next_decoded(&mut self) -> Result<Option<Decoded>> {
        loop {
            let data = match self.pending.take() {
                Some(d) => d,
                None if self.ended => return Ok(None),
                None => match self.runtime.block_on(self.stream.message()).map_err(Error::from)? {
                    Some(d) => d,
                    None => return Ok(None),
                },
            };
            match self.decoder.decode(&data.data_header, Buffer::from(data.data_body), data.app_metadata)? {
                Decoded::Dictionary => continue,
                other => return Ok(Some(other)),
            }
        }
    }

    fn stats(&self) -> SharedStats {
        self.decoder.stats()
    }

    fn wait_ready(&mut self, within: Duration) -> Result<bool> {
        if self.pending.is_some() || self.ended {
            return Ok(true);
        }
        // Streaming::message keeps its state in the stream, so a wait cut short loses nothing.
        let message = self.stream.message();
        match self.runtime.block_on(async { tokio::time::timeout(within, message).await }) {
            Err(_) => Ok(false),
            Ok(next) => {
                self.pending = next.map_err(Error::from)?;
                self.ended = self.pending.is_none();
                Ok(true)
            }
        }
    }
}
