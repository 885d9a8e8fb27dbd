//! RecordBatches to IPC frames, with arrow-ipc's own encoder doing the layout.
//!
//! `StreamEncoder` emits the IPC stream format as a list of buffers in which every uncompressed
//! array buffer is the array's own (reference counted, not copied). We cut that list back into
//! messages: an 8-byte prefix, the flatbuffer metadata, then `bodyLength` bytes of body. The
//! schema goes first, before any batch, so that a stream of metadata alone still has one.

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use arrow_ipc::writer::{DictionaryHandling, DictionaryTracker, IpcDataGenerator, IpcWriteOptions, StreamEncoder};
use arrow_ipc::{CompressionType, MessageHeader};
use arrow_schema::{ArrowError, Schema, SchemaRef};
use bytes::Bytes;
use wirespeed::proto::codec;

use crate::handler::Payload;

/// One IPC message: metadata, body pieces (each a multiple of 8 bytes long, 64 in practice) and
/// the application's metadata. A frame with empty `meta` carries only `app_metadata`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Frame {
    pub meta: Bytes,
    pub body: Vec<Buffer>,
    pub app_metadata: Bytes,
}

impl Frame {
    pub(crate) fn metadata_only(app_metadata: Bytes) -> Self {
        Frame { app_metadata, ..Frame::default() }
    }

    pub(crate) fn body_len(&self) -> usize {
        self.body.iter().map(|b| b.len()).sum()
    }

    /// The body in one piece, for transports that need it so (gRPC).
    pub(crate) fn body_bytes(&self) -> Bytes {
        match self.body.as_slice() {
            [] => Bytes::new(),
            [one] => Bytes::from_owner(one.clone()),
            pieces => {
                let mut v = Vec::with_capacity(self.body_len());
                for p in pieces {
                    v.extend_from_slice(p);
                }
                Bytes::from(v)
            }
        }
    }
}

/// How a writer lays its batches out, as pyarrow's `IpcWriteOptions` say the same.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// A dictionary that grows goes as a delta (its new values only), not whole again.
    pub dictionary_deltas: bool,
    /// Bodies compressed with LZ4 (frame) or Zstandard.
    pub compression: Option<CompressionType>,
}

/// Encodes one stream's batches: the schema, then dictionaries as they appear, then batches.
pub(crate) struct Encoder {
    inner: StreamEncoder,
    schema: Option<Frame>,
    encoded_once: bool,
}

impl Encoder {
    pub(crate) fn new(schema: &Schema) -> Result<Self, ArrowError> {
        Self::with_options(schema, WriteOptions::default())
    }

    pub(crate) fn with_options(schema: &Schema, layout: WriteOptions) -> Result<Self, ArrowError> {
        let handling = if layout.dictionary_deltas { DictionaryHandling::Delta } else { DictionaryHandling::Resend };
        let options = IpcWriteOptions::try_new(64, false, arrow_ipc::MetadataVersion::V5)?
            .try_with_compression(layout.compression)?
            .with_dictionary_handling(handling);
        // The stream encoder would send the schema with the first batch; we send it up front
        // instead (assigning dictionary ids the same way) and drop its copy.
        let encoded = IpcDataGenerator::default().schema_to_bytes_with_dictionary_tracker(
            schema,
            &mut DictionaryTracker::new(false),
            &options,
        );
        let schema_frame = Frame { meta: Bytes::from(encoded.ipc_message), ..Frame::default() };
        Ok(Encoder {
            inner: StreamEncoder::try_new_with_options(schema, options)?,
            schema: Some(schema_frame),
            encoded_once: false,
        })
    }

    /// The schema frame, once; the stream starts with it.
    pub(crate) fn schema_frame(&mut self) -> Option<Frame> {
        self.schema.take()
    }

    /// The frames for `batch`: any dictionaries it needs, then the batch with `app_metadata`.
    pub(crate) fn encode(&mut self, batch: &RecordBatch, app_metadata: Bytes) -> Result<Vec<Frame>, ArrowError> {
        let mut frames = split(self.inner.encode(batch)?)?;
        // Only the stream encoder's first output starts with its schema.
        if !self.encoded_once {
            self.encoded_once = true;
            if frames.first().is_some_and(|f| is_schema(&f.meta)) {
                frames.remove(0);
            }
        }
        if let Some(last) = frames.last_mut() {
            last.app_metadata = app_metadata;
        }
        Ok(frames)
    }
}

/// An output's payloads as frames, as Flight sends them: the schema when the output begins (at
/// once, or by a payload that begins it after application metadata alone, as an exchange may),
/// then dictionaries and batches. Stored batches are the caller's to send.
#[derive(Default)]
pub(crate) struct FrameWriter {
    encoder: Option<Encoder>,
}

impl FrameWriter {
    /// A writer, and the schema's frame if `schema` begins the output now.
    pub(crate) fn start(schema: Option<&SchemaRef>, options: WriteOptions) -> Result<(Self, Vec<Frame>), ArrowError> {
        let mut writer = FrameWriter::default();
        let frames = match schema {
            Some(schema) => writer.begin(schema, options)?,
            None => Vec::new(),
        };
        Ok((writer, frames))
    }

    fn begin(&mut self, schema: &SchemaRef, options: WriteOptions) -> Result<Vec<Frame>, ArrowError> {
        if self.encoder.is_some() {
            return Err(ArrowError::InvalidArgumentError("the stream has begun already".into()));
        }
        let mut encoder = Encoder::with_options(schema, options)?;
        let frames = encoder.schema_frame().into_iter().collect();
        self.encoder = Some(encoder);
        Ok(frames)
    }

    pub(crate) fn frames(&mut self, payload: Payload) -> Result<Vec<Frame>, ArrowError> {
        match (payload, &mut self.encoder) {
            (Payload::Begin { schema, options }, _) => self.begin(&schema, options),
            (Payload::Batch { batch, app_metadata }, Some(encoder)) => encoder.encode(&batch, app_metadata),
            (Payload::Batch { .. }, None) => Err(ArrowError::InvalidArgumentError("a batch before the schema".into())),
            (Payload::Stored { .. }, _) => {
                Err(ArrowError::InvalidArgumentError("a stored batch, which its plane sends itself".into()))
            }
            (Payload::Metadata(app_metadata), _) => Ok(vec![Frame::metadata_only(app_metadata)]),
        }
    }
}

fn is_schema(meta: &[u8]) -> bool {
    arrow_ipc::root_as_message(meta).is_ok_and(|m| m.header_type() == MessageHeader::Schema)
}

/// Cuts an IPC stream fragment into messages, dropping the end-of-stream marker.
fn split(buffers: Vec<Buffer>) -> Result<Vec<Frame>, ArrowError> {
    let mut cursor = Cursor { buffers: buffers.into_iter().collect(), offset: 0 };
    let mut frames = Vec::new();
    while cursor.remaining() > 0 {
        // 0xFFFFFFFF, then the metadata's length.
        let prefix = cursor.gather(8)?;
        let meta_len = codec::read_all(&prefix, |r| Ok((r.u32()?, r.i32()?)).map(|(_, len)| len))
            .ok_or_else(|| ArrowError::IpcError("a short message prefix".into()))?;
        if meta_len == 0 {
            continue; // end of stream
        }
        let meta = cursor.gather(meta_len as usize)?;
        let body_len = arrow_ipc::root_as_message(&meta)
            .map_err(|e| ArrowError::IpcError(format!("encoder produced bad metadata: {e}")))?
            .bodyLength();
        let body = cursor.take(body_len as usize)?;
        frames.push(Frame { meta: Bytes::from(meta), body, app_metadata: Bytes::new() });
    }
    Ok(frames)
}

/// Reads across a list of buffers, slicing (not copying) where it can.
struct Cursor {
    buffers: std::collections::VecDeque<Buffer>,
    offset: usize,
}

impl Cursor {
    fn remaining(&self) -> usize {
        self.buffers.iter().map(|b| b.len()).sum::<usize>() - self.offset
    }

    /// The next `n` bytes as slices of the buffers they lie in.
    fn take(&mut self, mut n: usize) -> Result<Vec<Buffer>, ArrowError> {
        let mut out = Vec::new();
        while n > 0 {
            let front = self.buffers.front().ok_or_else(|| ArrowError::IpcError("IPC message ends early".into()))?;
            let here = (front.len() - self.offset).min(n);
            out.push(front.slice_with_length(self.offset, here));
            self.offset += here;
            n -= here;
            if self.offset == front.len() {
                self.buffers.pop_front();
                self.offset = 0;
            }
        }
        Ok(out)
    }

    /// The next `n` bytes in one piece (small metadata only).
    fn gather(&mut self, n: usize) -> Result<Vec<u8>, ArrowError> {
        let mut v = Vec::with_capacity(n);
        for piece in self.take(n)? {
            v.extend_from_slice(&piece);
        }
        Ok(v)
    }
}
