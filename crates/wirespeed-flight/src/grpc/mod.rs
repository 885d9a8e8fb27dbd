//! The gRPC plane: standard Flight, so every Flight client and server works with ours.
//! Frames become FlightData and back: the server writes them itself ([`codec`]), the client
//! through prost (the body concatenated, as prost needs).

pub(crate) mod advertise;
pub(crate) mod auth;
pub(crate) mod budget;
pub(crate) mod channel;
pub(crate) mod codec;
pub(crate) mod connections;
pub(crate) mod drive;
pub(crate) mod health;
pub(crate) mod held;
pub(crate) mod reflection;
pub(crate) mod router;
pub(crate) mod service;
pub(crate) mod session;
pub(crate) mod side;
pub(crate) mod tls;

use std::time::Duration;

use arrow_buffer::Buffer;
use arrow_flight::FlightData;
use arrow_schema::SchemaRef;
use tokio::runtime::Handle;

use crate::error::{Error, Result};
use crate::handler::Payload;
use crate::ipc::{Decoded, DecodedStream, Decoder, Frame, FrameWriter, SharedStats, WriteOptions};

/// Flight's gRPC service name, as the router serves it and health reports it.
pub(crate) const FLIGHT_SERVICE: &str = "arrow.flight.protocol.FlightService";
/// gRPC's own limit is 4 MiB; Flight batches are often larger.
pub(crate) const MAX_MESSAGE: usize = 1 << 30;
/// The largest request of a call that carries no batches (a ticket, a descriptor, an action):
/// a server takes no more than this into memory for them.
pub(crate) const MAX_CONTROL_MESSAGE: usize = 16 << 20;
/// The most request metadata (headers, counted as HTTP/2 counts them) a call may carry: gRPC
/// C++'s hard limit, which pyarrow's servers apply; more is RESOURCE_EXHAUSTED.
pub(crate) const MAX_METADATA: usize = 16 << 10;
/// HTTP/2 flow-control windows: the 64 KiB default holds a stream to one small batch per
/// round trip.
pub(crate) const STREAM_WINDOW: u32 = 16 << 20;
pub(crate) const CONNECTION_WINDOW: u32 = 64 << 20;
/// Largest HTTP/2 frame we accept: a 128 KiB batch comes in one frame instead of eight of
/// the 16 KiB default.
pub(crate) const MAX_FRAME: u32 = 1 << 20;

pub(crate) fn flight_data(frame: Frame) -> FlightData {
    let data_body = frame.body_bytes();
    FlightData { flight_descriptor: None, data_header: frame.meta, app_metadata: frame.app_metadata, data_body }
}

/// Encodes payloads into frames, schema first.
pub(crate) struct Writer {
    frames: FrameWriter,
    /// What the output's batches are compressed with: a gRPC client that did not ask for
    /// compression may not be able to read it (Java's flight-core needs a module for it).
    compression: Option<arrow_ipc::CompressionType>,
}

impl Writer {
    /// The writer and the schema's frame, if given.
    pub(crate) fn start(schema: Option<&SchemaRef>, options: WriteOptions) -> Result<(Self, Vec<Frame>)> {
        let (frames, first) = FrameWriter::start(schema, options)?;
        Ok((Writer { frames, compression: options.compression }, first))
    }

    pub(crate) fn encode(&mut self, payload: Payload) -> Result<Vec<Frame>> {
        match payload {
            Payload::Begin { options, .. } => self.compression = options.compression,
            // A batch still in its file goes as the file holds it (one read, no decode), unless
            // the file compressed it otherwise than this output is.
            Payload::Stored { batch: stored, app_metadata } => {
                if stored.compression() != self.compression {
                    let batch = Payload::Batch { batch: stored.read()?, app_metadata };
                    return Ok(self.frames.frames(batch)?);
                }
                let body = vec![stored.read_body()?];
                return Ok(vec![Frame { meta: stored.meta.clone(), body, app_metadata }]);
            }
            _ => {}
        }
        Ok(self.frames.frames(payload)?)
    }
}

/// Decodes a gRPC stream of FlightData from a blocking thread.
pub(crate) struct Reader {
    stream: tonic::Streaming<FlightData>,
    runtime: Handle,
    decoder: Decoder,
    /// A message already taken off the stream (a DoPut's first, read for its descriptor).
    pending: Option<FlightData>,
    /// The end of the stream, seen while waiting for a message.
    ended: bool,
}

impl Reader {
    pub(crate) fn new(stream: tonic::Streaming<FlightData>, runtime: Handle, pending: Option<FlightData>) -> Self {
        Reader { stream, runtime, decoder: Decoder::default(), pending, ended: false }
    }
}

impl DecodedStream for Reader {
    fn next_decoded(&mut self) -> Result<Option<Decoded>> {
        loop {
            let data = match self.pending.take() {
                Some(d) => d,
                None if self.ended => return Ok(None),
                None => match crate::runtime::block_on(&self.runtime, self.stream.message()).map_err(Error::from)? {
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
        match crate::runtime::block_on(&self.runtime, async { tokio::time::timeout(within, message).await }) {
            Err(_) => Ok(false),
            Ok(next) => {
                self.pending = next.map_err(Error::from)?;
                self.ended = self.pending.is_none();
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch};
    use arrow_ipc::CompressionType;
    use arrow_ipc::writer::{FileWriter, IpcWriteOptions};
    use bytes::Bytes;

    use super::*;
    use crate::stored::{StoredBatch, StoredFile};

    fn stored(compression: Option<CompressionType>) -> (RecordBatch, StoredBatch, tempfile::NamedTempFile) {
        let batch =
            RecordBatch::try_from_iter([("x", Arc::new(Int64Array::from_iter_values(0..5000)) as ArrayRef)]).unwrap();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let options = IpcWriteOptions::default().try_with_compression(compression).unwrap();
        let mut w = FileWriter::try_new_with_options(file.as_file_mut(), &batch.schema(), options).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        let one = StoredFile::open(file.reopen().unwrap()).unwrap().unwrap().batches().next().unwrap().unwrap();
        (batch, one, file)
    }

    fn compression_of(frame: &Frame) -> Option<CompressionType> {
        let message = arrow_ipc::root_as_message(&frame.meta).unwrap();
        Some(message.header_as_record_batch()?.compression()?.codec())
    }

    /// A stored batch goes as the file holds it only where that is how the output is
    /// compressed; else it is decoded and encoded as the output asks (none by default).
    #[test]
    fn stored_batches_go_out_compressed_as_the_output_is() {
        let lz4 = Some(CompressionType::LZ4_FRAME);
        for (file, output) in [(lz4, None), (lz4, lz4), (None, None), (lz4, Some(CompressionType::ZSTD)), (None, lz4)] {
            let (batch, one, _file) = stored(file);
            let options = WriteOptions { compression: output, ..WriteOptions::default() };
            let (mut writer, _) = Writer::start(Some(&batch.schema()), options).unwrap();
            let frames = writer.encode(Payload::stored(one.clone())).unwrap();
            let frame = frames.last().unwrap();
            assert_eq!(compression_of(frame), output, "file {file:?}, output {output:?}");
            assert_eq!(frame.meta == one.meta, file == output, "as stored only when it may go so");
            let mut decoder = Decoder::with_schema(batch.schema());
            let Decoded::Batch(got, _) =
                decoder.decode(&frame.meta, Buffer::from(frame.body_bytes()), Bytes::new()).unwrap()
            else {
                panic!("not a batch")
            };
            assert_eq!(got, batch);
        }
    }
}
