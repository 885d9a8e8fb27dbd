//! Arrow data between Rust and Python through the C data and stream interfaces: buffers are
//! shared, never copied, and a batch received over shared memory stays in the mapping it came
//! in, kept alive by pyarrow for as long as it holds the batch.

use std::sync::Arc;

use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_pyarrow::{FromPyArrow, FromPyArrowUnchecked, IntoPyArrow, ToPyArrow};
use arrow_schema::{Schema, SchemaRef};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

pub type BoxedReader = Box<dyn RecordBatchReader + Send>;

pub fn schema_to_py<'py>(py: Python<'py>, schema: &SchemaRef) -> PyResult<Bound<'py, PyAny>> {
    schema.as_ref().to_pyarrow(py)
}

/// A pyarrow Schema or anything with `__arrow_c_schema__`.
pub fn schema_from_py(obj: &Bound<'_, PyAny>) -> PyResult<SchemaRef> {
    Ok(Arc::new(Schema::from_pyarrow_bound(obj)?))
}

/// A pyarrow RecordBatch or anything with `__arrow_c_array__`. Not validated again: it comes
/// from this process, where pyarrow already holds it as valid.
pub fn batch_from_py(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    // SAFETY: the producer is in this process and hands over Arrow data it already owns.
    unsafe { RecordBatch::from_pyarrow_bound_unchecked(obj) }
}

/// A pyarrow Table, RecordBatchReader or anything with `__arrow_c_stream__`.
pub fn stream_from_py(obj: &Bound<'_, PyAny>) -> PyResult<RecordBatchStreamReader> {
    RecordBatchStreamReader::from_pyarrow_bound(obj)
}

pub fn batch_to_py<'py>(py: Python<'py>, batch: &RecordBatch) -> PyResult<Bound<'py, PyAny>> {
    batch.to_pyarrow(py)
}

/// A pyarrow Table of `batches`, built by pyarrow from one exported stream.
pub fn table_to_py<'py>(py: Python<'py>, schema: SchemaRef, batches: Vec<RecordBatch>) -> PyResult<Bound<'py, PyAny>> {
    let reader: BoxedReader = Box::new(RecordBatchIterator::new(batches.into_iter().map(Ok), schema));
    reader.into_pyarrow(py)?.call_method0("read_all")
}

/// An `arrow_array_stream` capsule (the Arrow PyCapsule interface) that hands `reader` to
/// whoever takes it; dropped untaken, it releases the stream.
pub fn stream_capsule(py: Python<'_>, reader: BoxedReader) -> PyResult<Bound<'_, PyCapsule>> {
    PyCapsule::new_with_value(py, FFI_ArrowArrayStream::new(reader), c"arrow_array_stream")
}
