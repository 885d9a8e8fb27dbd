//! Batches in sealed shared memory. [`share`] copies a batch once into a sealed region, laid out
//! exactly as its IPC bodies. Every later encoding of it then finds each body in one piece
//! inside the region, and the shm data plane hands the peer a reference instead of the bytes:
//! neither side copies the data again, however often it is sent.

use arrow_array::RecordBatch;
use arrow_buffer::Buffer;
use bytes::Bytes;
use wirespeed::SealedRegion;

use super::{Decoded, Decoder, Encoder, Frame};
use crate::error::{Error, Result};

/// Body alignment, as the encoder pads.
const ALIGN: usize = 64;

/// The same batch (dictionaries included), its buffers now in one sealed region.
///
/// Meant for data served many times, such as a table a server keeps in memory: the copy is
/// paid once, and same-host clients on the shm plane then read it in place. A peer that is
/// sent the batch can map the whole region.
pub fn share(batch: &RecordBatch) -> Result<RecordBatch> {
    let mut shared = share_all(std::slice::from_ref(batch))?;
    shared.pop().ok_or_else(|| Error::internal("the encoder produced no batch"))
}

/// As [`share`], for batches of one schema, all in one region: a peer maps at most 256 regions
/// per connection (past that, shm copies), so share a table's batches together.
pub fn share_all(batches: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let Some(first) = batches.first() else { return Ok(Vec::new()) };
    let mut encoder = Encoder::new(&first.schema())?;
    let schema = encoder.schema_frame().ok_or_else(|| Error::internal("no schema to share"))?;
    let mut frames = Vec::new();
    for batch in batches {
        frames.extend(encoder.encode(batch, Bytes::new())?);
    }
    let (mut starts, mut len) = (Vec::with_capacity(frames.len()), 0);
    for f in &frames {
        starts.push(len);
        len += f.body_len().next_multiple_of(ALIGN);
    }
    let region = SealedRegion::build(len.max(1), |mem| {
        for (frame, &start) in frames.iter().zip(&starts) {
            let mut at = start;
            for piece in &frame.body {
                mem[at..at + piece.len()].copy_from_slice(piece);
                at += piece.len();
            }
        }
    })?;
    let mut decoder = Decoder::default();
    decoder.decode(&schema.meta, Buffer::from(Bytes::new()), Bytes::new())?;
    let mut shared = Vec::with_capacity(batches.len());
    for (frame, start) in frames.iter().zip(starts) {
        let body = Buffer::from(region.slice(start, frame.body_len()));
        if let Decoded::Batch(b, _) = decoder.decode(&frame.meta, body, Bytes::new())? {
            shared.push(b);
        }
    }
    Ok(shared)
}

impl Frame {
    /// The body as one piece, if its buffers lie back to back (padding aside) inside one
    /// sealed region, as those of a [`share`]d batch do.
    pub(crate) fn body_in_region(&self) -> Option<Bytes> {
        // Empty pieces may point anywhere.
        let pieces = self.body.iter().skip_while(|p| p.is_empty());
        let first = pieces.clone().next()?;
        let len = self.body_len();
        let (region, offset) = SealedRegion::containing(first.as_ptr(), len)?;
        let mut at = first.as_ptr() as usize;
        for piece in pieces {
            // The encoder's padding is its own zeros; the region holds zeros there too.
            let padding = piece.len() < ALIGN && piece.iter().all(|&b| b == 0);
            if piece.as_ptr() as usize != at && !padding {
                return None;
            }
            at += piece.len();
        }
        Some(region.slice(offset, len))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, DictionaryArray, Int64Array, StringArray};

    use super::*;

    #[test]
    fn a_shared_batch_is_equal_and_encodes_to_bodies_in_its_region() {
        let n = 1000;
        let dict: DictionaryArray<Int32Type> = (0..n).map(|i| ["red", "green", "blue"][i % 3]).collect();
        let batch = RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from_iter_values(0..n as i64)) as ArrayRef),
            ("s", Arc::new(StringArray::from_iter((0..n).map(|i| (i % 5 != 0).then(|| format!("v{i}")))))),
            ("d", Arc::new(dict)),
        ])
        .unwrap();
        let shared = share(&batch).unwrap();
        assert_eq!(shared, batch);
        let mut encoder = Encoder::new(&batch.schema()).unwrap();
        let frames = encoder.encode(&shared, Bytes::new()).unwrap();
        assert_eq!(frames.len(), 2, "the dictionary, then the batch");
        for f in &frames {
            let body = f.body_in_region().expect("in one piece in the region");
            assert!(body == f.body_bytes(), "the same bytes");
        }
        let heap = Encoder::new(&batch.schema()).unwrap().encode(&batch, Bytes::new()).unwrap();
        assert!(heap.iter().all(|f| f.body_in_region().is_none()));

        let table = [batch.slice(0, 10), batch.slice(10, 990)];
        let shared = share_all(&table).unwrap();
        assert_eq!(shared, table);
        let region = |b: &RecordBatch| {
            wirespeed::SealedRegion::containing(b.column(0).to_data().buffers()[0].as_ptr(), 1).unwrap().0.id()
        };
        assert_eq!(region(&shared[0]), region(&shared[1]), "one region for the table");
        assert!(share_all(&[]).unwrap().is_empty());
    }
}
