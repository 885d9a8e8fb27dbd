//! The data plane: Flight calls over wirespeed connections (shm, tcp, ucx) instead of gRPC.
//! One call is one stream; its messages are IPC frames whose bodies go as lists of the arrays'
//! own buffers and come back as transport memory that the arrays point into.

pub(crate) mod call_stream;
pub(crate) mod calls;
pub(crate) mod capability;
pub(crate) mod connections;
pub(crate) mod listeners;
pub(crate) mod proto;

use std::sync::Arc;
use std::time::Duration;

use arrow_buffer::Buffer;
use arrow_schema::SchemaRef;
use bytes::Bytes;
pub(crate) use call_stream::{CallStream, Side};

use crate::error::{Error, Result, Violation};
use crate::handler::{Output, Payload};
use crate::ipc::{Decoded, DecodedStream, Decoder, Frame, FrameWriter, SharedStats, WriteOptions};
use proto::Msg;

/// How long a data-plane call may wait on its peer. A Flight consumer may pause reading for
/// as long as it likes (gRPC has no deadline per message), and a producer may take long for
/// its next batch; a peer that is gone is found sooner by its connection (keepalive, hang-up).
pub(crate) const CALL_WAIT: std::time::Duration = std::time::Duration::from_secs(3600);

/// The wirespeed settings for data-plane connections: chunks large enough that a batch of up
/// to 8 MiB arrives in one piece (and so wraps transport memory without a copy), and waits
/// as patient as gRPC's.
pub(crate) fn config() -> wirespeed::Config {
    wirespeed::Config {
        timeout: CALL_WAIT,
        max_chunk: 8 << 20,
        shm_ring_bytes: 64 << 20,
        // A client collecting a large table keeps up to 2 GiB of it in the rings' areas.
        shm_ring_areas: 32,
        stream_window: 32 << 20,
        ..wirespeed::Config::default()
    }
}

fn send_frame(stream: &CallStream, frame: &Frame) -> Result<()> {
    let header = Msg::Data { app_metadata: frame.app_metadata.clone(), meta: frame.meta.clone() }.encode();
    // Owned, so a transport may keep the buffers and return before they are on the wire. A
    // body in a sealed region goes in one piece, which shm sends as a reference.
    let body: Vec<Bytes> = match frame.body_in_region() {
        Some(whole) => vec![whole],
        None => frame.body.iter().map(|b| Bytes::from_owner(b.clone())).collect(),
    };
    stream.send_bytes(&header, &body)?;
    Ok(())
}

/// Writes a schema and then payloads as IPC frames.
pub(crate) struct Writer {
    frames: FrameWriter,
}

impl Writer {
    /// Sends the schema at once, if given (else a payload begins the stream later).
    pub(crate) fn start(stream: &CallStream, schema: Option<&SchemaRef>, options: WriteOptions) -> Result<Self> {
        let (frames, first) = FrameWriter::start(schema, options)?;
        first.iter().try_for_each(|f| send_frame(stream, f))?;
        Ok(Writer { frames })
    }

    pub(crate) fn write(&mut self, stream: &CallStream, payload: Payload) -> Result<()> {
        if let Payload::Stored { batch: stored, app_metadata } = payload {
            let header = Msg::Data { app_metadata, meta: stored.meta.clone() }.encode();
            return stream.send_filled(&header, stored.body_len(), stored.filler());
        }
        self.frames.frames(payload)?.iter().try_for_each(|f| send_frame(stream, f))
    }
}

/// Sends a whole output: schema, then every payload; the first error stops it.
pub(crate) fn send_output(stream: &CallStream, output: Output) -> Result<()> {
    let mut writer = Writer::start(stream, output.schema.as_ref(), output.options)?;
    for payload in output.payloads {
        writer.write(stream, payload?)?;
    }
    Ok(())
}

/// Tells the peer why the call failed; false if it could not be told.
pub(crate) fn send_error(stream: &CallStream, error: &Error) -> bool {
    let msg = Msg::Error { code: error.code() as i32, message: error.message(), details: error.details() };
    stream.send(&msg.encode(), &[]).is_ok()
}

/// Reads IPC frames from a data-plane stream and decodes them.
pub(crate) struct Reader {
    stream: Arc<CallStream>,
    decoder: Decoder,
    done: bool,
    /// How long `wait_ready` has waited in vain since the last frame: past the stream's
    /// timeout, the wait fails as one `recv` would.
    idle: Duration,
}

impl Reader {
    pub(crate) fn new(stream: Arc<CallStream>) -> Self {
        Reader { stream, decoder: Decoder::default(), done: false, idle: Duration::ZERO }
    }
}

impl DecodedStream for Reader {
    fn next_decoded(&mut self) -> Result<Option<Decoded>> {
        while !self.done {
            let Some(msg) = self.stream.recv()? else {
                self.done = true;
                break;
            };
            match Msg::decode(&msg.header)? {
                Msg::Data { app_metadata, meta } => {
                    let body = Buffer::from(Bytes::from_owner(msg.body.into_contiguous()));
                    match self.decoder.decode(&meta, body, app_metadata)? {
                        Decoded::Dictionary => continue,
                        other => return Ok(Some(other)),
                    }
                }
                Msg::Error { code, message, details } => {
                    self.done = true;
                    self.stream.note_peer_error(code, &message, &details);
                    return Err(Error::status(code.into(), message).with_details(details));
                }
                Msg::Open { .. } => return Err(Violation::OpenMidCall.into()),
            }
        }
        Ok(None)
    }

    fn stats(&self) -> SharedStats {
        self.decoder.stats()
    }

    fn wait_ready(&mut self, within: Duration) -> Result<bool> {
        if self.done || self.stream.wait_readable(within)? {
            self.idle = Duration::ZERO;
            return Ok(true);
        }
        self.idle += within;
        match self.idle >= self.stream.timeout() {
            true => Err(wirespeed::Error::Timeout(self.stream.timeout()).into()),
            false => Ok(false),
        }
    }
}

/// Ends our direction and waits (bounded) for the peer to end theirs, discarding what it still
/// sends, so that neither side resets a stream the other is still reading.
pub(crate) fn close(stream: &CallStream, patience: Duration) {
    if stream.finish().is_err() {
        return;
    }
    let deadline = std::time::Instant::now() + patience;
    while std::time::Instant::now() < deadline {
        match stream.recv() {
            Ok(Some(_)) => continue,
            _ => return,
        }
    }
}
