//! IPC frames back to RecordBatches, validating everything a peer controls.
//!
//! arrow-ipc slices the body by the offsets in the metadata and panics on ones out of range, so
//! every buffer is checked against the body first; the arrays are then validated in full by
//! arrow itself (the decoder's default), and any panic left in arrow is caught, not unwound.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use arrow_array::{ArrayRef, RecordBatch};
use arrow_buffer::Buffer;
use arrow_ipc::reader::{RecordBatchDecoder, read_dictionary_impl};
use arrow_ipc::{MessageHeader, root_as_message};
use arrow_schema::{Schema, SchemaRef};
use bytes::Bytes;

use crate::error::{Error, IpcViolation, Result, Violation};

/// What one frame turned into.
#[derive(Debug)]
pub enum Decoded {
    Schema(SchemaRef),
    Batch(RecordBatch, Bytes),
    /// A frame with application metadata and no IPC message.
    Metadata(Bytes),
    /// A dictionary, kept for the batches that follow; nothing to hand on.
    Dictionary,
}

/// How many IPC messages of each kind a stream has decoded, as pyarrow's `ReadStats` counts
/// them (a message of application metadata alone is none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// IPC messages decoded.
    pub messages: u64,
    /// Record batches among them.
    pub record_batches: u64,
    /// Dictionary batches among them.
    pub dictionary_batches: u64,
    /// Dictionary batches that were deltas.
    pub dictionary_deltas: u64,
    /// Dictionary batches that replaced a dictionary.
    pub replaced_dictionaries: u64,
}

/// A decoder's [`ReadStats`] as they grow, for whoever hands its batches on.
#[derive(Clone, Debug, Default)]
pub struct SharedStats(Arc<Mutex<ReadStats>>);

impl SharedStats {
    /// The counts now.
    pub fn get(&self) -> ReadStats {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn count(&self, f: impl FnOnce(&mut ReadStats)) {
        let mut stats = self.0.lock().unwrap_or_else(|p| p.into_inner());
        stats.messages += 1;
        f(&mut stats);
    }
}

/// The state of one stream of frames: its schema, the dictionaries seen so far, and counts.
#[derive(Default)]
pub struct Decoder {
    schema: Option<SchemaRef>,
    dictionaries: HashMap<i64, ArrayRef>,
    stats: SharedStats,
}

impl Decoder {
    /// A decoder that has seen `schema` already (a file's, from its footer).
    pub fn with_schema(schema: SchemaRef) -> Self {
        Decoder { schema: Some(schema), ..Decoder::default() }
    }

    /// The counts as they grow, to hand on.
    pub fn stats(&self) -> SharedStats {
        self.stats.clone()
    }

    /// Decodes one IPC message (its flatbuffer `meta` and its `body`); dictionaries are kept for the batches that follow.
    pub fn decode(&mut self, meta: &[u8], body: Buffer, app_metadata: Bytes) -> Result<Decoded> {
        if meta.is_empty() {
            return Ok(Decoded::Metadata(app_metadata));
        }
        let body = aligned(body);
        let message = root_as_message(meta).map_err(|e| bad(IpcViolation::NotAMessage(e.to_string())))?;
        match message.header_type() {
            MessageHeader::Schema => {
                let fb = message.header_as_schema().ok_or_else(|| bad(IpcViolation::NoHeader("Schema")))?;
                let schema: Schema = guarded(|| arrow_ipc::convert::try_fb_to_schema(fb))?;
                let schema = Arc::new(schema);
                self.schema = Some(schema.clone());
                self.dictionaries.clear();
                self.stats.count(|_| ());
                Ok(Decoded::Schema(schema))
            }
            MessageHeader::DictionaryBatch => {
                let schema = self.schema.clone().ok_or_else(|| bad(IpcViolation::BeforeSchema("dictionary")))?;
                let dict = message
                    .header_as_dictionary_batch()
                    .ok_or_else(|| bad(IpcViolation::NoHeader("DictionaryBatch")))?;
                let data = dict.data().ok_or_else(|| bad(IpcViolation::NoHeader("DictionaryBatch's data")))?;
                check_buffers(data.buffers().map(|b| b.iter().map(|b| (b.offset(), b.length()))), body.len())?;
                let version = message.version();
                let (delta, replaced) = (dict.isDelta(), self.dictionaries.contains_key(&dict.id()));
                let dictionaries = &mut self.dictionaries;
                guarded(|| {
                    read_dictionary_impl(&body, dict, &schema, dictionaries, &version, false, Default::default())
                })?;
                self.stats.count(|s| {
                    s.dictionary_batches += 1;
                    s.dictionary_deltas += delta as u64;
                    s.replaced_dictionaries += (replaced && !delta) as u64;
                });
                Ok(Decoded::Dictionary)
            }
            MessageHeader::RecordBatch => {
                let schema = self.schema.clone().ok_or_else(|| bad(IpcViolation::BeforeSchema("record batch")))?;
                let batch =
                    message.header_as_record_batch().ok_or_else(|| bad(IpcViolation::NoHeader("RecordBatch")))?;
                check_buffers(batch.buffers().map(|b| b.iter().map(|b| (b.offset(), b.length()))), body.len())?;
                let version = message.version();
                let dictionaries = &self.dictionaries;
                let batch = guarded(|| {
                    RecordBatchDecoder::try_new(&body, batch, schema, dictionaries, &version)?.read_record_batch()
                })?;
                self.stats.count(|s| s.record_batches += 1);
                Ok(Decoded::Batch(batch, app_metadata))
            }
            other => Err(bad(IpcViolation::Unexpected(other.variant_name().unwrap_or("of unknown type")))),
        }
    }
}

/// The body where arrow can read every buffer in place: IPC lays buffers out at multiples of 8
/// from the body's start, but a body cut from a gRPC message starts wherever protobuf put it, and
/// arrow-ipc reads some (union offsets) without checking. Such a body is copied once.
fn aligned(body: Buffer) -> Buffer {
    if body.as_ptr().align_offset(8) == 0 { body } else { Buffer::from_slice_ref(body.as_slice()) }
}

fn bad(reason: IpcViolation) -> Error {
    Violation::Ipc(reason).into()
}

/// Every buffer must lie inside the body.
fn check_buffers(buffers: Option<impl Iterator<Item = (i64, i64)>>, body_len: usize) -> Result<()> {
    for (offset, length) in buffers.into_iter().flatten() {
        let end = offset.checked_add(length);
        if offset < 0 || length < 0 || end.is_none_or(|end| end as u64 > body_len as u64) {
            return Err(bad(IpcViolation::BufferOutside { offset, length, body_len }));
        }
    }
    Ok(())
}

/// Runs arrow's decoding, turning its errors and any panic into a protocol error.
fn guarded<T>(f: impl FnOnce() -> std::result::Result<T, arrow_schema::ArrowError>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(bad(IpcViolation::Malformed(e.to_string()))),
        Err(_) => Err(bad(IpcViolation::Malformed("rejected by arrow".into()))),
    }
}
