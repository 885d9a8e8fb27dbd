//! Batches still in their Arrow IPC file, for a server that serves files. A data plane copies
//! each batch's body from the file straight into transport memory: one copy, no decode and no
//! zeroed buffer on the server (the client checks what it decodes, as it does any peer's).
//! gRPC sends it as the file holds it too, read once into its message; anything that wants a
//! `RecordBatch` reads it and checks it as a peer's ([`StoredBatch::read`]). Files whose
//! batches need more than their own bytes (dictionaries) or another byte order are not taken:
//! their server reads them as before.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_buffer::{Buffer, MutableBuffer};
use arrow_ipc::reader::read_footer_length;
use arrow_ipc::{CompressionType, Endianness, MessageHeader, MetadataVersion, root_as_footer, root_as_message};
use arrow_schema::{DataType, SchemaRef};
use bytes::Bytes;
use wirespeed::proto::codec::{Reader, Truncated};

use crate::error::{Error, Result};
use crate::ipc::{Decoded, Decoder};

/// One record batch as its file holds it.
#[derive(Clone, Debug)]
pub struct StoredBatch {
    file: Arc<File>,
    schema: SchemaRef,
    /// The flatbuffer `Message`, without the file's length prefix.
    pub meta: Bytes,
    body_at: u64,
    body_len: u64,
}

impl StoredBatch {
    /// Bytes of the batch's body in the file.
    pub fn body_len(&self) -> u64 {
        self.body_len
    }

    /// How the file compressed the body's buffers (pyarrow's feather default is LZ4).
    pub fn compression(&self) -> Option<CompressionType> {
        let message = root_as_message(&self.meta).ok()?;
        Some(message.header_as_record_batch()?.compression()?.codec())
    }

    /// Writes the body into the pieces it is given, in order (as `Stream::send_filled` asks).
    /// A file cut short under it is an error, never a fault.
    pub fn filler(&self) -> impl FnMut(&mut [u8]) -> io::Result<()> + '_ {
        let mut at = self.body_at;
        move |piece| {
            self.file.read_exact_at(piece, at)?;
            at += piece.len() as u64;
            Ok(())
        }
    }

    /// The body, read into memory of its own.
    pub fn read_body(&self) -> Result<Buffer> {
        let len = usize::try_from(self.body_len).map_err(|_| Error::internal("a stored batch too large to read"))?;
        let mut body = MutableBuffer::from_len_zeroed(len);
        self.filler()(body.as_slice_mut()).map_err(|e| Error::internal(format!("reading a stored batch: {e}")))?;
        Ok(body.into())
    }

    /// The batch, read and checked as one from a peer would be.
    pub fn read(&self) -> Result<RecordBatch> {
        match Decoder::with_schema(self.schema.clone()).decode(&self.meta, self.read_body()?, Bytes::new())? {
            Decoded::Batch(batch, _) => Ok(batch),
            _ => Err(Error::internal("a stored batch is not a record batch")),
        }
    }
}

/// An Arrow IPC file whose record batches can be sent as they lie.
pub struct StoredFile {
    file: Arc<File>,
    schema: SchemaRef,
    /// Each batch's block: where its message starts, its metadata's length, its body's length.
    blocks: Vec<(u64, u64, u64)>,
}

impl StoredFile {
    /// Reads the footer of the IPC file `file`; `None` if its batches cannot go as they lie
    /// (dictionaries, big-endian, a metadata version before 4).
    pub fn open(file: File) -> Result<Option<Self>> {
        let bad = |why: &str| Error::internal(format!("not a readable Arrow IPC file: {why}"));
        let size = file.metadata().map_err(|e| bad(&e.to_string()))?.len();
        let mut tail = [0u8; 10];
        let tail_at = size.checked_sub(10).ok_or_else(|| bad("too short"))?;
        file.read_exact_at(&mut tail, tail_at).map_err(|e| bad(&e.to_string()))?;
        let footer_len = read_footer_length(tail)? as u64;
        let footer_at = tail_at.checked_sub(footer_len).ok_or_else(|| bad("footer longer than the file"))?;
        let mut footer = vec![0u8; footer_len as usize];
        file.read_exact_at(&mut footer, footer_at).map_err(|e| bad(&e.to_string()))?;
        let footer = root_as_footer(&footer).map_err(|e| bad(&e.to_string()))?;
        let fb_schema = footer.schema().ok_or_else(|| bad("no schema"))?;
        if footer.version() < MetadataVersion::V4
            || fb_schema.endianness() != Endianness::Little
            || footer.dictionaries().is_some_and(|d| !d.is_empty())
        {
            return Ok(None);
        }
        let schema = Arc::new(arrow_ipc::convert::try_fb_to_schema(fb_schema)?);
        if schema.fields().iter().any(|f| has_dictionary(f.data_type())) {
            return Ok(None);
        }
        let mut blocks = Vec::new();
        for b in footer.recordBatches().into_iter().flatten() {
            let (at, meta, body) = (b.offset(), b.metaDataLength(), b.bodyLength());
            let (Ok(at), Ok(meta), Ok(body)) = (u64::try_from(at), u64::try_from(meta), u64::try_from(body)) else {
                return Err(bad("a negative block"));
            };
            if at.checked_add(meta).and_then(|m| m.checked_add(body)).is_none_or(|end| end > footer_at) {
                return Err(bad("a block outside the file"));
            }
            blocks.push((at, meta, body));
        }
        Ok(Some(StoredFile { file: Arc::new(file), schema, blocks }))
    }

    /// The file's schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The batches in order, each message's metadata read as it comes.
    pub fn batches(self) -> impl Iterator<Item = Result<StoredBatch>> + Send {
        self.blocks.into_iter().map(move |(at, meta_len, body_len)| {
            let bad = |why: String| Error::internal(format!("a batch at byte {at} of an Arrow IPC file: {why}"));
            let mut meta = vec![0u8; usize::try_from(meta_len).map_err(|_| bad("metadata too large".into()))?];
            self.file.read_exact_at(&mut meta, at).map_err(|e| bad(e.to_string()))?;
            // A message starts with 0xFFFFFFFF and its length, or (before 0.15) the length alone.
            let mut r = Reader::new(&meta);
            let mut length = || {
                Ok::<_, Truncated>(match r.i32()? {
                    -1 => r.i32()?,
                    len => len,
                })
            };
            let len = length().map_err(|_| bad("metadata cut short".into()))?;
            let prefix = meta.len() - r.rest().len();
            let end = usize::try_from(len).ok().and_then(|l| l.checked_add(prefix)).filter(|&e| e <= meta.len());
            let end = end.ok_or_else(|| bad(format!("metadata length {len}")))?;
            let message = root_as_message(&meta[prefix..end]).map_err(|e| bad(e.to_string()))?;
            if message.header_type() != MessageHeader::RecordBatch || message.bodyLength() as u64 != body_len {
                return Err(bad("not the record batch its footer says".into()));
            }
            let meta = Bytes::from(meta).slice(prefix..end);
            Ok(StoredBatch {
                file: self.file.clone(),
                schema: self.schema.clone(),
                meta,
                body_at: at + meta_len,
                body_len,
            })
        })
    }
}

fn has_dictionary(t: &DataType) -> bool {
    match t {
        DataType::Dictionary(..) => true,
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f)
        | DataType::FixedSizeList(f, _)
        | DataType::Map(f, _) => has_dictionary(f.data_type()),
        DataType::Struct(fields) => fields.iter().any(|f| has_dictionary(f.data_type())),
        DataType::Union(fields, _) => fields.iter().any(|(_, f)| has_dictionary(f.data_type())),
        DataType::RunEndEncoded(runs, values) => has_dictionary(runs.data_type()) || has_dictionary(values.data_type()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use arrow_array::types::Int32Type;
    use arrow_array::{ArrayRef, DictionaryArray, Int64Array, ListArray, StringArray};
    use arrow_ipc::writer::{FileWriter, IpcWriteOptions};

    use super::*;

    fn batch(n: i64) -> RecordBatch {
        let lists = ListArray::from_iter_primitive::<Int32Type, _, _>((0..n).map(|i| Some(vec![Some(i as i32); 3])));
        RecordBatch::try_from_iter([
            ("a", Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef),
            ("s", Arc::new(StringArray::from_iter((0..n).map(|i| (i % 5 != 0).then(|| format!("v{i}")))))),
            ("l", Arc::new(lists)),
        ])
        .unwrap()
    }

    fn write(batches: &[RecordBatch], compression: Option<CompressionType>) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        let options = IpcWriteOptions::default().try_with_compression(compression).unwrap();
        let mut w = FileWriter::try_new_with_options(file.as_file_mut(), &batches[0].schema(), options).unwrap();
        batches.iter().for_each(|b| w.write(b).unwrap());
        w.finish().unwrap();
        file
    }

    #[test]
    fn every_batch_reads_back_as_written_compressed_or_not() {
        let input = [batch(100), batch(7).slice(2, 4), batch(1).slice(0, 0), batch(1000)];
        for compression in [None, Some(CompressionType::LZ4_FRAME), Some(CompressionType::ZSTD)] {
            let file = write(&input, compression);
            let stored = StoredFile::open(file.reopen().unwrap()).unwrap().expect("taken");
            assert_eq!(stored.schema(), input[0].schema());
            let stored: Vec<StoredBatch> = stored.batches().map(Result::unwrap).collect();
            assert!(stored.iter().all(|b| b.compression() == compression), "{compression:?}");
            let got: Vec<RecordBatch> = stored.iter().map(|b| b.read().unwrap()).collect();
            assert_eq!(got, input, "{compression:?}");
        }
    }

    #[test]
    fn the_body_filled_in_pieces_is_the_files_bytes() {
        let file = write(&[batch(500)], None);
        let bytes = std::fs::read(file.path()).unwrap();
        let b = StoredFile::open(file.reopen().unwrap()).unwrap().unwrap().batches().next().unwrap().unwrap();
        let mut body = vec![0u8; b.body_len() as usize];
        let mut fill = b.filler();
        let (first, rest) = body.split_at_mut(100);
        fill(first).unwrap();
        fill(rest).unwrap();
        assert!(bytes.windows(body.len()).any(|w| w == body));
    }

    #[test]
    fn dictionaries_are_left_to_the_reader() {
        let dict: DictionaryArray<Int32Type> = ["a", "b", "a"].into_iter().collect();
        let b = RecordBatch::try_from_iter([("d", Arc::new(dict) as ArrayRef)]).unwrap();
        let file = write(&[b], None);
        assert!(StoredFile::open(file.reopen().unwrap()).unwrap().is_none());
    }

    #[test]
    fn a_file_cut_short_under_its_reader_is_an_error() {
        let file = write(&[batch(1000), batch(1000)], None);
        let stored = StoredFile::open(file.reopen().unwrap()).unwrap().unwrap();
        let len = file.as_file().metadata().unwrap().len();
        file.as_file().set_len(len / 3).unwrap();
        let mut batches = stored.batches();
        let first = batches.next().unwrap().unwrap();
        let mut body = vec![0u8; first.body_len() as usize];
        assert!(first.filler()(&mut body).is_err() || first.read().is_ok());
        assert!(batches.next().unwrap().is_err(), "the second batch lies past the end");
    }

    #[test]
    fn garbage_and_truncated_files_are_errors() {
        let whole = std::fs::read(write(&[batch(10)], None).path()).unwrap();
        for cut in [0, 5, 10, whole.len() / 2, whole.len() - 1] {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            f.write_all(&whole[..cut]).unwrap();
            assert!(StoredFile::open(f.reopen().unwrap()).is_err(), "cut at {cut}");
        }
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[0xa5; 4096]).unwrap();
        assert!(StoredFile::open(f.reopen().unwrap()).is_err());
    }
}
