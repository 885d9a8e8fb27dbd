//! Timeslices as an Arrow IPC file, for pyarrow and other Arrow readers: one row per
//! microslice with its timeslice, its component (the input), every descriptor field and its
//! content; one record batch per timeslice.

use std::io::Write;
use std::sync::Arc;

use arrow_array::builder::{LargeBinaryBuilder, UInt8Builder, UInt16Builder, UInt32Builder, UInt64Builder};
use arrow_array::{ArrayRef, BooleanArray, RecordBatch};
use arrow_ipc::writer::FileWriter;
use arrow_schema::{ArrowError, DataType, Field, Schema};

use crate::error::{FlesError, Result};
use crate::model::ComponentView;

/// The file's schema.
pub fn schema() -> Schema {
    let f = |name: &str, t: DataType| Field::new(name, t, false);
    Schema::new(vec![
        f("timeslice", DataType::UInt64),
        f("component", DataType::UInt16),
        f("incomplete", DataType::Boolean),
        f("hdr_id", DataType::UInt8),
        f("hdr_ver", DataType::UInt8),
        f("eq_id", DataType::UInt16),
        f("flags", DataType::UInt16),
        f("sys_id", DataType::UInt8),
        f("sys_ver", DataType::UInt8),
        f("idx", DataType::UInt64),
        f("crc", DataType::UInt32),
        f("size", DataType::UInt32),
        f("offset", DataType::UInt64),
        f("content", DataType::LargeBinary),
    ])
}

/// Writes timeslices to `out`; `finish` writes the file's footer.
pub struct ArrowWriter<W: Write> {
    writer: FileWriter<W>,
}

fn arrow_error(e: ArrowError) -> FlesError {
    FlesError::Arrow(std::sync::Arc::new(e))
}

impl<W: Write> ArrowWriter<W> {
    /// A writer of an Arrow IPC file onto `out`, its schema written first.
    pub fn new(out: W) -> Result<Self> {
        let schema = Arc::new(schema());
        let writer = FileWriter::try_new(out, &schema).map_err(arrow_error)?;
        Ok(ArrowWriter { writer })
    }

    /// Writes timeslice `index`: `components` in input order, `inputs[k]` the input of the
    /// k-th; incomplete when some input's component is missing.
    pub fn write(
        &mut self,
        index: u64,
        components: &[ComponentView<'_>],
        inputs: &[usize],
        incomplete: bool,
    ) -> Result<()> {
        let batch = record_batch(index, components, inputs, incomplete)?;
        self.writer.write(&batch).map_err(arrow_error)?;
        self.writer.flush().map_err(arrow_error)
    }

    /// Writes the footer and hands back the output.
    pub fn finish(mut self) -> Result<W> {
        self.writer.finish().map_err(arrow_error)?;
        self.writer.into_inner().map_err(arrow_error)
    }
}

/// Timeslice `index` as one batch of [`schema`]: a row per microslice, as [`ArrowWriter`]
/// writes it.
pub fn record_batch(
    index: u64,
    components: &[ComponentView<'_>],
    inputs: &[usize],
    incomplete: bool,
) -> Result<RecordBatch> {
    let rows: usize = components.iter().map(|c| c.len()).sum();
    let mut component = UInt16Builder::with_capacity(rows);
    let (mut hdr_id, mut hdr_ver, mut sys_id, mut sys_ver) =
        (UInt8Builder::new(), UInt8Builder::new(), UInt8Builder::new(), UInt8Builder::new());
    let (mut eq_id, mut flags) = (UInt16Builder::new(), UInt16Builder::new());
    let (mut idx, mut offset) = (UInt64Builder::new(), UInt64Builder::new());
    let (mut crc, mut size) = (UInt32Builder::new(), UInt32Builder::new());
    let content_bytes = components.iter().map(|c| c.bytes().len()).sum();
    let mut content = LargeBinaryBuilder::with_capacity(rows, content_bytes);
    for (&i, c) in inputs.iter().zip(components) {
        for microslice in c.microslices() {
            let (d, bytes) = microslice?;
            component.append_value(i as u16);
            hdr_id.append_value(d.hdr_id);
            hdr_ver.append_value(d.hdr_ver);
            eq_id.append_value(d.eq_id);
            flags.append_value(d.flags);
            sys_id.append_value(d.sys_id);
            sys_ver.append_value(d.sys_ver);
            idx.append_value(d.idx);
            crc.append_value(d.crc);
            size.append_value(d.size);
            offset.append_value(d.offset);
            content.append_value(bytes);
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(arrow_array::UInt64Array::from(vec![index; rows])),
        Arc::new(component.finish()),
        Arc::new(BooleanArray::from(vec![incomplete; rows])),
        Arc::new(hdr_id.finish()),
        Arc::new(hdr_ver.finish()),
        Arc::new(eq_id.finish()),
        Arc::new(flags.finish()),
        Arc::new(sys_id.finish()),
        Arc::new(sys_ver.finish()),
        Arc::new(idx.finish()),
        Arc::new(crc.finish()),
        Arc::new(size.finish()),
        Arc::new(offset.finish()),
        Arc::new(content.finish()),
    ];
    RecordBatch::try_new(Arc::new(schema()), columns).map_err(arrow_error)
}

#[cfg(test)]
mod tests {
    use arrow_array::cast::AsArray;
    use arrow_array::types::UInt64Type;
    use arrow_ipc::reader::FileReader;

    use super::*;
    use crate::model::Slicing;
    use crate::source::Pattern;

    #[test]
    fn one_row_per_microslice_read_back_by_arrow() {
        let slicing = Slicing::count(4, 1);
        let parts: Vec<Vec<u8>> = (0..2).map(|i| Pattern::new(i, 100, 20).component(7, slicing)).collect();
        let views: Vec<ComponentView> =
            parts.iter().map(|p| ComponentView::new(p, slicing.per_component()).unwrap()).collect();
        let mut w = ArrowWriter::new(Vec::new()).unwrap();
        w.write(7, &views, &[0, 1], false).unwrap();
        let file = w.finish().unwrap();
        let batches: Vec<RecordBatch> =
            FileReader::try_new(std::io::Cursor::new(file), None).unwrap().map(|b| b.unwrap()).collect();
        assert_eq!(batches.len(), 1);
        let b = &batches[0];
        assert_eq!(b.num_rows(), 10);
        assert!(b.column(0).as_primitive::<UInt64Type>().values().iter().all(|&t| t == 7));
        let content = b.column_by_name("content").unwrap().as_binary::<i64>();
        let (d, bytes) = views[1].microslice(2).unwrap();
        assert_eq!(content.value(7), bytes);
        assert_eq!(b.column_by_name("idx").unwrap().as_primitive::<UInt64Type>().value(7), d.idx);
    }
}
