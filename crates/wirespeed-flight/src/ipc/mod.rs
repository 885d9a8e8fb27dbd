//! Arrow IPC messages without the stream framing, for both planes (sans-IO).
//!
//! A message is what one FlightData carries: the flatbuffer `Message` (metadata), the body
//! buffers it describes, and the application's metadata. On the way out the body stays a list of
//! the arrays' own buffers (plus padding), so a transport can write it without concatenating; on
//! the way in the body is one buffer, ideally transport memory, that the arrays point into.

mod decode;
mod encode;
mod share;
mod stream;

pub(crate) use decode::Decoded;
pub use decode::{Decoder, ReadStats, SharedStats};
pub use encode::WriteOptions;
pub(crate) use encode::{Encoder, Frame, FrameWriter};
pub use share::{share, share_all};
pub(crate) use stream::{DecodedStream, PayloadStream};

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, DictionaryArray, Int64Array, RecordBatch, StringArray};
    use arrow_buffer::Buffer;
    use bytes::Bytes;

    use super::*;

    fn batch(n: i64) -> RecordBatch {
        let dict: DictionaryArray<Int32Type> = (0..n).map(|i| ["red", "green", "blue"][i as usize % 3]).collect();
        RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef),
            ("s", Arc::new(StringArray::from_iter((0..n).map(|i| (i % 5 != 0).then(|| format!("v{i}")))))),
            ("d", Arc::new(dict)),
        ])
        .unwrap()
    }

    fn body(frame: &Frame) -> Buffer {
        Buffer::from(frame.body_bytes())
    }

    /// Encodes and decodes, returning what came out.
    fn round_trip(batches: &[RecordBatch]) -> Vec<Decoded> {
        let mut enc = Encoder::new(&batches[0].schema()).unwrap();
        let mut frames = vec![enc.schema_frame().unwrap()];
        for (i, b) in batches.iter().enumerate() {
            frames.extend(enc.encode(b, Bytes::from(format!("md{i}"))).unwrap());
        }
        let mut dec = Decoder::default();
        frames.iter().map(|f| dec.decode(&f.meta, body(f), f.app_metadata.clone()).unwrap()).collect()
    }

    #[test]
    fn batches_dictionaries_and_metadata_survive() {
        let input = [batch(100), batch(7).slice(2, 4), batch(100).slice(0, 0)];
        let out = round_trip(&input);
        assert!(matches!(&out[0], Decoded::Schema(s) if *s == input[0].schema()));
        let got: Vec<_> = out
            .into_iter()
            .filter_map(|d| match d {
                Decoded::Batch(b, md) => Some((b, md)),
                _ => None,
            })
            .collect();
        assert_eq!(got.len(), 3);
        for (i, (b, md)) in got.iter().enumerate() {
            assert_eq!(b, &input[i]);
            assert_eq!(md, &Bytes::from(format!("md{i}")));
        }
    }

    #[test]
    fn bodies_are_the_arrays_own_buffers() {
        let b = batch(1000);
        let mut enc = Encoder::new(&b.schema()).unwrap();
        enc.schema_frame();
        let frames = enc.encode(&b, Bytes::new()).unwrap();
        let column = b.column(0).to_data().buffers()[0].as_ptr();
        let pieces: Vec<*const u8> = frames.last().unwrap().body.iter().map(|p| p.as_ptr()).collect();
        assert!(pieces.contains(&column), "the int64 column travels as itself");
        assert!(frames.iter().all(|f| f.body_len() % 64 == 0), "bodies are padded to 64 bytes");
    }

    /// A body that starts off its alignment, as one cut from a gRPC message may: a dense union
    /// (whose offsets arrow-ipc reads in place) decodes all the same.
    #[test]
    fn an_unaligned_body_decodes() {
        use arrow_array::{Int32Array, UnionArray};
        use arrow_buffer::ScalarBuffer;
        use arrow_schema::{DataType, Field, UnionFields, UnionMode};
        let fields = UnionFields::try_new(
            [0, 1],
            [Field::new("i", DataType::Int64, true), Field::new("s", DataType::Utf8, true)],
        )
        .unwrap();
        let union = UnionArray::try_new(
            fields.clone(),
            ScalarBuffer::from(vec![0i8, 1, 0, 1, 0]),
            Some(ScalarBuffer::from(vec![0i32, 0, 1, 1, 2])),
            vec![Arc::new(Int64Array::from(vec![1, 2, 3])), Arc::new(StringArray::from(vec!["a", "b"]))],
        )
        .unwrap();
        assert_eq!(arrow_array::Array::data_type(&union), &DataType::Union(fields, UnionMode::Dense));
        let b = RecordBatch::try_from_iter([
            ("u", Arc::new(union) as ArrayRef),
            ("n", Arc::new(Int32Array::from(vec![1, 2, 3, 4, 5]))),
        ])
        .unwrap();
        let mut enc = Encoder::new(&b.schema()).unwrap();
        let schema = enc.schema_frame().unwrap();
        let frame = enc.encode(&b, Bytes::new()).unwrap().pop().unwrap();
        let mut shifted = vec![0u8; 1];
        shifted.extend_from_slice(&frame.body_bytes());
        let body = Buffer::from(Bytes::from(shifted)).slice(1);
        assert_ne!(body.as_ptr().align_offset(8), 0);
        let mut dec = Decoder::default();
        dec.decode(&schema.meta, Buffer::from(Bytes::new()), Bytes::new()).unwrap();
        assert!(matches!(dec.decode(&frame.meta, body, Bytes::new()).unwrap(), Decoded::Batch(x, _) if x == b));
    }

    #[test]
    fn metadata_only_frames_decode_as_metadata() {
        let f = Frame::metadata_only(Bytes::from_static(b"hello"));
        let d = Decoder::default().decode(&f.meta, body(&f), f.app_metadata.clone()).unwrap();
        assert!(matches!(d, Decoded::Metadata(m) if m == "hello"));
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        let b = batch(50);
        let mut enc = Encoder::new(&b.schema()).unwrap();
        let schema = enc.schema_frame().unwrap();
        let frames = enc.encode(&b, Bytes::new()).unwrap();
        let last = frames.last().unwrap();
        let mut dec = Decoder::default();
        // A batch before any schema.
        assert!(dec.decode(&last.meta, body(last), Bytes::new()).is_err());
        dec.decode(&schema.meta, Buffer::from(Bytes::new()), Bytes::new()).unwrap();
        for f in &frames[..frames.len() - 1] {
            dec.decode(&f.meta, body(f), Bytes::new()).unwrap();
        }
        // A body shorter than its metadata says.
        let full = body(last);
        assert!(dec.decode(&last.meta, full.slice_with_length(0, full.len() / 2), Bytes::new()).is_err());
        // Garbage metadata, and every truncation of the real one.
        assert!(dec.decode(b"not a flatbuffer at all", full.clone(), Bytes::new()).is_err());
        for n in 1..last.meta.len() {
            let _ = dec.decode(&last.meta[..n], full.clone(), Bytes::new());
        }
        // Flipped bytes in the metadata: errors or correct batches, never a panic.
        for i in 0..last.meta.len() {
            let mut meta = last.meta.to_vec();
            meta[i] ^= 0xff;
            let _ = dec.decode(&meta, full.clone(), Bytes::new());
        }
        // Garbage in the body (string offsets out of range) is caught by validation.
        let mut junk = full.to_vec();
        junk.iter_mut().for_each(|b| *b = 0xff);
        assert!(dec.decode(&last.meta, Buffer::from(junk), Bytes::new()).is_err());
        // The real message still decodes afterwards.
        assert!(matches!(dec.decode(&last.meta, full, Bytes::new()).unwrap(), Decoded::Batch(x, _) if x == b));
    }
}
