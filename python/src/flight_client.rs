//! The data-plane client, reader and writer that `wirespeed.flight` wraps (its gRPC is
//! pyarrow's). Descriptors cross as their protobuf bytes (pyarrow.flight's `serialize()`);
//! schemas and batches through the Arrow C interfaces.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use arrow_array::RecordBatch;
use arrow_flight::FlightDescriptor;
use arrow_ipc::CompressionType;
use arrow_schema::{ArrowError, SchemaRef};
use bytes::Bytes;
use prost::Message;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule};
use wirespeed_flight::{Payload, PlaneChoice, ReadStats, SharedStats, WriteOptions};

use crate::arrow;
use crate::errors;
use crate::wait::{Signals, TICK, interruptible, signals_without_attach};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PlaneClient>()?;
    m.add_class::<PendingReader>()?;
    m.add_class::<FlightReader>()?;
    m.add_class::<FlightWriter>()?;
    // The discovery handshake's names, from its one definition (wirespeed_flight::discovery).
    use pyo3::types::IntoPyDict;
    use wirespeed_flight::{Method, discovery};
    m.add("HELLO_HEADER", discovery::HELLO_HEADER)?;
    m.add("CALL_HEADER", discovery::CALL_HEADER)?;
    m.add("PLANES_HEADER", discovery::PLANES_HEADER)?;
    let actions: Vec<(String, &str)> =
        Method::ALL.into_iter().map(|m| (discovery::plane_action(m), m.name())).collect();
    m.add("PLANE_ACTIONS", actions.into_py_dict(m.py())?)?;
    Ok(())
}

fn decode<M: Message + Default>(what: &str, bytes: &[u8]) -> PyResult<M> {
    M::decode(bytes).map_err(|e| errors::usage(format!("not a serialized {what}: {e}")))
}

pub fn transport(name: &str) -> PyResult<PlaneChoice> {
    name.parse().map_err(|e: wirespeed::ParseError| errors::usage(e.to_string()))
}

/// The data-plane half of `wirespeed.flight.FlightClient`, whose gRPC is pyarrow's own: it
/// makes the hello the client's middleware sends, and runs a call on the locations the server
/// handed out for it.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct PlaneClient {
    planes: Arc<wirespeed_flight::PlaneClient>,
}

impl PlaneClient {
    fn run<T: Send + 'static>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&wirespeed_flight::PlaneClient) -> wirespeed_flight::Result<T> + Send + 'static,
    ) -> PyResult<T> {
        let planes = self.planes.clone();
        interruptible(py, move || call(&planes))?.map_err(errors::flight)
    }
}

#[pymethods]
impl PlaneClient {
    /// `reached`: the host the client's location names, where a plane on every address is.
    #[new]
    #[pyo3(signature = (key, transport, reached))]
    fn new(key: Option<Vec<u8>>, transport: &str, reached: &str) -> PyResult<Self> {
        let key = crate::keys::required_key(key)?;
        let planes =
            wirespeed_flight::PlaneClient::new(key).with_transport(self::transport(transport)?).reached(reached);
        Ok(PlaneClient { planes: Arc::new(planes) })
    }

    /// A fresh value for the hello header.
    fn hello(&self) -> PyResult<String> {
        wirespeed_flight::discovery::hello(self.planes.key()).map_err(errors::flight)
    }

    /// Reads `ticket` over one of `uris`; None when none fits (the call then goes over gRPC).
    fn get(&self, py: Python<'_>, uris: Vec<String>, ticket: Vec<u8>) -> PyResult<Option<FlightReader>> {
        Ok(self.run(py, move |p| p.get(&uris, &ticket))?.map(FlightReader::new))
    }

    /// Starts an upload over one of `uris`, laid out as `options` say (see write_options).
    #[pyo3(signature = (uris, descriptor, schema, options=None))]
    fn put(
        &self,
        py: Python<'_>,
        uris: Vec<String>,
        descriptor: &[u8],
        schema: &Bound<'_, PyAny>,
        options: Option<(bool, Option<String>)>,
    ) -> PyResult<Option<FlightWriter>> {
        let descriptor: FlightDescriptor = decode("FlightDescriptor", descriptor)?;
        let schema = arrow::schema_from_py(schema)?;
        let options = write_options(options)?;
        Ok(self.run(py, move |p| p.put(&uris, &descriptor, &schema, options))?.map(FlightWriter::new))
    }

    /// Starts an exchange: its writer (to begin with a schema), and the reader to open once
    /// answers are wanted.
    fn exchange(
        &self,
        py: Python<'_>,
        uris: Vec<String>,
        descriptor: &[u8],
    ) -> PyResult<Option<(FlightWriter, PendingReader)>> {
        let descriptor: FlightDescriptor = decode("FlightDescriptor", descriptor)?;
        let pair = self.run(py, move |p| p.exchange(&uris, &descriptor))?;
        Ok(pair.map(|(w, r)| (FlightWriter::new(w), PendingReader(Mutex::new(Some(r))))))
    }
}

/// An exchange's reader before the server's schema has come.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct PendingReader(Mutex<Option<wirespeed_flight::ExchangeReader>>);

#[pymethods]
impl PendingReader {
    /// Waits for the server's schema; once only.
    fn open(&self, py: Python<'_>) -> PyResult<FlightReader> {
        let pending = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        let pending = pending.ok_or_else(|| errors::usage("the exchange's reader is open already"))?;
        let reader = interruptible(py, move || pending.open())?.map_err(errors::flight)?;
        Ok(FlightReader::new(reader))
    }
}

/// One message as Python sees it: (batch or None, app_metadata or None).
pub fn chunk<'py>(py: Python<'py>, payload: &Payload) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>)> {
    let batch = match payload.record_batch() {
        Some(b) => arrow::batch_to_py(py, b)?,
        None => py.None().into_bound(py),
    };
    let metadata = match payload.app_metadata().is_empty() {
        true => py.None().into_bound(py),
        false => PyBytes::new(py, payload.app_metadata()).into_any(),
    };
    Ok((batch, metadata))
}

type SharedReader = Arc<Mutex<Option<wirespeed_flight::FlightReader>>>;

/// pyarrow's ReadStats fields, in its order.
pub type StatsTuple = (u64, u64, u64, u64, u64);

pub fn stats_tuple(s: ReadStats) -> StatsTuple {
    (s.messages, s.record_batches, s.dictionary_batches, s.dictionary_deltas, s.replaced_dictionaries)
}

/// What wirespeed.flight makes of pyarrow's IpcWriteOptions: (emit_dictionary_deltas,
/// compression: "lz4", "zstd" or None).
pub fn write_options(given: Option<(bool, Option<String>)>) -> PyResult<WriteOptions> {
    let Some((dictionary_deltas, compression)) = given else { return Ok(WriteOptions::default()) };
    let compression = match compression.as_deref() {
        None => None,
        Some("lz4" | "lz4_frame") => Some(CompressionType::LZ4_FRAME),
        Some("zstd") => Some(CompressionType::ZSTD),
        Some(other) => return Err(errors::usage(format!("IPC compression {other:?}: lz4 or zstd"))),
    };
    Ok(WriteOptions { dictionary_deltas, compression })
}

#[pyclass(module = "wirespeed._native", frozen)]
pub struct FlightReader {
    reader: SharedReader,
    /// Once it has come: an exchange's server may send application metadata first.
    schema: OnceLock<SchemaRef>,
    plane: &'static str,
    stats: SharedStats,
    /// The stream went to an Arrow consumer (`__arrow_c_stream__`); else a reader that is gone
    /// was cancelled.
    handed_on: AtomicBool,
}

/// Why a reader has no stream left: cancelled (as pyarrow says it, so that a read after
/// `cancel()` raises FlightCancelledError), or handed on.
fn gone(handed_on: bool) -> wirespeed_flight::Error {
    match handed_on {
        true => wirespeed_flight::Error::invalid_argument("the reader's stream was handed on (__arrow_c_stream__)"),
        false => wirespeed_flight::Error::status(wirespeed_flight::Code::Cancelled, "the call was cancelled"),
    }
}

impl FlightReader {
    pub fn new(reader: wirespeed_flight::FlightReader) -> Self {
        let (plane, stats) = (reader.plane().name(), reader.stats());
        let reader = Arc::new(Mutex::new(Some(reader)));
        FlightReader { reader, schema: OnceLock::new(), plane, stats, handed_on: AtomicBool::new(false) }
    }

    fn handed_on(&self) -> bool {
        self.handed_on.load(Ordering::Relaxed)
    }

    /// The schema, waiting for it (interruptibly) if it has not come.
    fn known_schema(&self, py: Python<'_>) -> PyResult<SchemaRef> {
        if let Some(schema) = self.schema.get() {
            return Ok(schema.clone());
        }
        let (reader, handed_on) = (self.reader.clone(), self.handed_on());
        let schema = interruptible(py, move || match reader.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(r) => r.schema(),
            None => Err(gone(handed_on)),
        })?
        .map_err(errors::flight)?;
        Ok(self.schema.get_or_init(|| schema).clone())
    }

    /// The next message, read on this thread: a hand-off to a helper would cost two thread
    /// wake-ups a batch, more than the batch itself. Waits without the GIL in slices, running
    /// Python's signal handlers between them, so Ctrl-C interrupts before anything is taken.
    fn next_payload(&self, py: Python<'_>) -> PyResult<Option<Payload>> {
        let reader = &self.reader;
        let mut signals = Signals::default();
        loop {
            let next = py.detach(|| {
                let mut guard = reader.lock().unwrap_or_else(|p| p.into_inner());
                let Some(r) = guard.as_mut() else { return Some(Err(gone(self.handed_on()))) };
                match r.wait_ready(TICK) {
                    Ok(true) => Some(r.next_payload()),
                    Ok(false) => None,
                    Err(e) => Some(Err(e)),
                }
            });
            match next {
                Some(payload) => return payload.map_err(errors::flight),
                None => signals.check(py)?,
            }
        }
    }
}

#[pymethods]
impl FlightReader {
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        arrow::schema_to_py(py, &self.known_schema(py)?)
    }

    /// Waits for the schema or the end of the answers, raising the call's error if it failed
    /// first; an exchange that answered with metadata alone is fine.
    fn started(&self, py: Python<'_>) -> PyResult<()> {
        let reader = self.reader.clone();
        interruptible(py, move || match reader.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(r) => r.started(),
            None => Ok(()),
        })?
        .map_err(errors::flight)
    }

    /// The plane carrying the call: grpc, shm, tcp, ucx or ofi+<provider>.
    #[getter]
    fn plane(&self) -> &'static str {
        self.plane
    }

    /// What has been read so far, as the fields of pyarrow's ReadStats.
    #[getter]
    fn stats(&self) -> StatsTuple {
        stats_tuple(self.stats.get())
    }

    /// The next message as (batch or None, app_metadata or None); None at the end.
    fn read_chunk<'py>(&self, py: Python<'py>) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
        let Some(payload) = self.next_payload(py)? else { return Ok(None) };
        chunk(py, &payload).map(Some)
    }

    /// Every remaining batch, as one pyarrow Table. pyarrow pulls the batches on this thread
    /// without the GIL and takes each in as it arrives, while the server sends the next ones;
    /// between waits for a batch, Python's signal handlers run, so Ctrl-C interrupts.
    fn read_all<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let stopped = Arc::new(Mutex::new(None));
        let batches = Batches {
            schema: self.known_schema(py)?,
            reader: self.reader.clone(),
            stopped: Some(stopped.clone()),
            checked: Instant::now(),
            signals: Signals::default(),
        };
        let table = arrow::read_all(py, Box::new(batches));
        let stop = stopped.lock().unwrap_or_else(|p| p.into_inner()).take();
        if stop.is_some() || table.is_err() {
            // What was read went into a table nobody gets: the rest alone would look complete.
            self.cancel(py);
        }
        match stop {
            Some(Stop::Interrupted(e)) => Err(e),
            Some(Stop::Failed(e)) => Err(errors::flight(e)),
            None => table,
        }
    }

    /// Hands the rest of the stream to the caller (pyarrow, polars, duckdb) without a copy.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema; // best effort by the interface's rules: the stream's own schema
        let schema = self.known_schema(py)?;
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take();
        let reader = reader.ok_or_else(|| errors::flight(gone(self.handed_on())))?;
        self.handed_on.store(true, Ordering::Relaxed);
        let reader = Arc::new(Mutex::new(Some(reader)));
        arrow::stream_capsule(
            py,
            Box::new(Batches { schema, reader, stopped: None, checked: Instant::now(), signals: Signals::default() }),
        )
    }

    /// Stops reading; the server sees the call cancelled.
    fn cancel(&self, py: Python<'_>) {
        let taken = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(move || drop(taken));
    }
}

/// Why pyarrow's read_all stopped early, for read_all to raise.
enum Stop {
    Interrupted(PyErr),
    Failed(wirespeed_flight::Error),
}

/// A reader handed to an Arrow consumer, which pulls batches on its own thread.
struct Batches {
    schema: SchemaRef,
    reader: SharedReader,
    /// Set for pyarrow's read_all on the caller's thread: waits are cut into slices with
    /// Python's signal handlers run between them, and why reading stopped is kept here.
    stopped: Option<Arc<Mutex<Option<Stop>>>>,
    /// When Python's signal handlers last ran.
    checked: Instant,
    signals: Signals,
}

impl Batches {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>, Stop> {
        let mut guard = self.reader.lock().unwrap_or_else(|p| p.into_inner());
        let reader = guard.as_mut().ok_or_else(|| Stop::Failed(gone(false)))?;
        if self.stopped.is_some() {
            // Between waits, and every TICK of a stream that never makes us wait.
            if self.checked.elapsed() >= TICK {
                self.checked = Instant::now();
                signals_without_attach(&mut self.signals).map_err(Stop::Interrupted)?;
            }
            while !reader.wait_ready(TICK).map_err(Stop::Failed)? {
                signals_without_attach(&mut self.signals).map_err(Stop::Interrupted)?;
            }
        }
        reader.next().transpose().map_err(Stop::Failed)
    }
}

impl Iterator for Batches {
    type Item = Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        let stop = match self.next_batch() {
            Ok(batch) => return batch.map(Ok),
            Err(stop) => stop,
        };
        let message = match &stop {
            Stop::Interrupted(_) => "interrupted".to_string(),
            Stop::Failed(e) => e.to_string(),
        };
        match &self.stopped {
            Some(slot) => *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(stop),
            None => drop(stop), // only Failed: no Python object
        }
        Some(Err(ArrowError::ExternalError(message.into())))
    }
}

impl arrow_array::RecordBatchReader for Batches {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

type SharedWriter = Arc<Mutex<Option<wirespeed_flight::FlightWriter>>>;

#[pyclass(module = "wirespeed._native", frozen)]
pub struct FlightWriter {
    writer: SharedWriter,
    /// A DoPut's PutResults, apart so that one thread may wait for them while another writes.
    results: Arc<Mutex<Option<wirespeed_flight::PutResults>>>,
    plane: &'static str,
}

impl FlightWriter {
    pub fn new(mut writer: wirespeed_flight::FlightWriter) -> Self {
        let plane = writer.plane().name();
        let results = Arc::new(Mutex::new(writer.take_results()));
        FlightWriter { writer: Arc::new(Mutex::new(Some(writer))), results, plane }
    }

    fn write(&self, py: Python<'_>, payloads: Vec<Payload>) -> PyResult<()> {
        let writer = self.writer.clone();
        interruptible(py, move || {
            let mut guard = writer.lock().unwrap_or_else(|p| p.into_inner());
            let w = guard.as_mut().ok_or_else(|| wirespeed_flight::Error::invalid_argument("the writer is closed"))?;
            payloads.into_iter().try_for_each(|p| w.write_payload(p))
        })?
        .map_err(errors::flight)
    }
}

#[pymethods]
impl FlightWriter {
    #[getter]
    fn plane(&self) -> &'static str {
        self.plane
    }

    /// Sends an exchange's schema; its batches go laid out as `options` say.
    #[pyo3(signature = (schema, options=None))]
    fn begin(
        &self,
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        options: Option<(bool, Option<String>)>,
    ) -> PyResult<()> {
        let schema = arrow::schema_from_py(schema)?;
        let options = write_options(options)?;
        let writer = self.writer.clone();
        interruptible(py, move || {
            let mut guard = writer.lock().unwrap_or_else(|p| p.into_inner());
            let w = guard.as_mut().ok_or_else(|| wirespeed_flight::Error::invalid_argument("the writer is closed"))?;
            w.begin_with(&schema, options)
        })?
        .map_err(errors::flight)
    }

    /// Sends one batch (a pyarrow RecordBatch or anything with `__arrow_c_array__`), with
    /// optional application metadata.
    #[pyo3(signature = (batch, app_metadata=None))]
    fn write_batch(&self, py: Python<'_>, batch: &Bound<'_, PyAny>, app_metadata: Option<Vec<u8>>) -> PyResult<()> {
        let payload = Payload::new(Some(arrow::batch_from_py(batch)?), Bytes::from(app_metadata.unwrap_or_default()));
        self.write(py, vec![payload])
    }

    fn write_metadata(&self, py: Python<'_>, app_metadata: Vec<u8>) -> PyResult<()> {
        self.write(py, vec![Payload::metadata(app_metadata.into())])
    }

    /// Sends every batch of a pyarrow Table, RecordBatchReader or anything with
    /// `__arrow_c_stream__`.
    fn write_stream(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let stream = arrow::stream_from_py(data)?;
        let batches = stream.collect::<Result<Vec<_>, _>>().map_err(|e| errors::usage(e.to_string()))?;
        self.write(py, batches.into_iter().map(Payload::batch).collect())
    }

    /// A DoPut's next PutResult, as the server sends it while we write; None once the call
    /// has ended.
    fn next_result<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let results = self.results.clone();
        let result = interruptible(py, move || match results.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(r) => r.next_result(),
            None => Ok(None),
        })?
        .map_err(errors::flight)?;
        Ok(result.map(|r| PyBytes::new(py, &r)))
    }

    /// Ends the upload; returns the server's PutResults not read yet (for an exchange, none).
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let (writer, results) = (self.writer.clone(), self.results.clone());
        let results = interruptible(py, move || {
            let taken = writer.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(w) = taken {
                w.finish()?;
            }
            match results.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                Some(r) => r.rest(),
                None => Ok(Vec::new()),
            }
        })?
        .map_err(errors::flight)?;
        Ok(results.iter().map(|r| PyBytes::new(py, r)).collect())
    }
}
