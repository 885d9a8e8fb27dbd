//! Arrow data between Rust and Python through the C data and stream interfaces: buffers are
//! shared, never copied, and a batch received over shared memory stays in the mapping it came
//! in, kept alive by pyarrow for as long as it holds the batch.

use std::sync::Arc;

use arrow_array::ffi::{FFI_ArrowSchema, to_ffi};
use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{Array, RecordBatch, RecordBatchIterator, RecordBatchReader, StructArray};
use arrow_pyarrow::{FromPyArrow, FromPyArrowUnchecked, IntoPyArrow, ToPyArrow};
use arrow_schema::{ArrowError, Schema, SchemaRef};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyType};

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

/// A pyarrow RecordBatch over the same buffers, through the C data interface's capsules
/// (cheaper per batch than arrow-pyarrow's route through a one-batch stream).
pub fn batch_to_py<'py>(py: Python<'py>, batch: &RecordBatch) -> PyResult<Bound<'py, PyAny>> {
    let bad = |e: ArrowError| PyValueError::new_err(e.to_string());
    let (array, _) = to_ffi(&StructArray::from(batch.clone()).into_data()).map_err(bad)?;
    let schema = FFI_ArrowSchema::try_from(batch.schema().as_ref()).map_err(bad)?;
    let array = PyCapsule::new_with_value(py, array, c"arrow_array")?;
    let schema = PyCapsule::new_with_value(py, schema, c"arrow_schema")?;
    static CLASS: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    CLASS.import(py, "pyarrow", "RecordBatch")?.call_method1("_import_from_c_capsule", (schema, array))
}

/// A pyarrow Table of `batches`, built by pyarrow from one exported stream.
pub fn table_to_py<'py>(py: Python<'py>, schema: SchemaRef, batches: Vec<RecordBatch>) -> PyResult<Bound<'py, PyAny>> {
    read_all(py, Box::new(RecordBatchIterator::new(batches.into_iter().map(Ok), schema)))
}

/// A pyarrow Table of everything `reader` yields, read by pyarrow's `read_all`, which pulls
/// the batches on this thread without the GIL.
pub fn read_all<'py>(py: Python<'py>, reader: BoxedReader) -> PyResult<Bound<'py, PyAny>> {
    reader.into_pyarrow(py)?.call_method0("read_all")
}

/// An `arrow_array_stream` capsule (the Arrow PyCapsule interface) that hands `reader` to
/// whoever takes it; dropped untaken, it releases the stream.
pub fn stream_capsule(py: Python<'_>, reader: BoxedReader) -> PyResult<Bound<'_, PyCapsule>> {
    PyCapsule::new_with_value(py, FFI_ArrowArrayStream::new(reader), c"arrow_array_stream")
}
