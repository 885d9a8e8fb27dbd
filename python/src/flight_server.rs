//! A Flight service written in Python, served on the data planes beside pyarrow's gRPC server.
//! The planes call the Python layer's dispatcher (`wirespeed.flight._Dispatcher`) with
//! protobuf bytes and Arrow streams; uploads and exchanges, which Python handles as whole calls with a reader
//! and a writer, run on a thread of their own fed through bounded channels.

use std::net::IpAddr;
use std::sync::mpsc::{Receiver, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use arrow_flight::{FlightDescriptor, FlightInfo};
use arrow_schema::{Schema, SchemaRef};
use bytes::Bytes;
use prost::Message;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use wirespeed::Fabric;
use wirespeed_flight::{
    Code, Error, Handler, Input, Method, Output, Payload, PlaneCall, Result, SharedStats, Upload, WriteOptions,
};

use crate::arrow;
use crate::errors;
use crate::flight_client::{StatsTuple, stats_tuple, write_options};
use crate::put::{Event, Messages, PutResults, PyUpload};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PlaneServer>()?;
    m.add_class::<ServerReader>()?;
    m.add_class::<ServerWriter>()?;
    m.add_class::<PutResults>()?;
    m.add_class::<CallState>()?;
    Ok(())
}

/// How many messages may wait between the network and Python's handler.
const QUEUE: usize = 4;

/// A Python exception as a Flight error: the dispatcher names its status code.
fn from_python(py: Python<'_>, e: PyErr) -> Error {
    let status = py
        .import("wirespeed._flight_base")
        .and_then(|m| m.getattr("_status_of"))
        .and_then(|f| f.call1((e.value(py),)))
        .and_then(|s| s.extract::<(String, String, Vec<u8>)>());
    match status {
        Ok((code, message, extra_info)) => Error::status(code_named(&code), message).with_details(extra_info.into()),
        Err(_) => Error::internal(e.to_string()),
    }
}

fn code_named(name: &str) -> Code {
    match name {
        "unauthenticated" => Code::Unauthenticated,
        "permission_denied" => Code::PermissionDenied,
        "unavailable" => Code::Unavailable,
        "deadline_exceeded" => Code::DeadlineExceeded,
        "cancelled" => Code::Cancelled,
        "not_found" => Code::NotFound,
        "invalid_argument" => Code::InvalidArgument,
        "unimplemented" => Code::Unimplemented,
        "already_exists" => Code::AlreadyExists,
        "resource_exhausted" => Code::ResourceExhausted,
        "internal" => Code::Internal,
        _ => Code::Unknown,
    }
}

pub struct PyHandler {
    dispatcher: Py<PyAny>,
    /// The data-plane call this handler serves.
    call: Option<PlaneCall>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A data-plane call as the dispatcher sees it: its grant (by which it finds the state of the
/// control-plane call that made it) and whether the client gave up.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct CallState(PlaneCall);

#[pymethods]
impl CallState {
    /// The grant's MAC, in hex.
    #[getter]
    fn grant(&self) -> String {
        hex(self.0.grant())
    }

    fn cancelled(&self, py: Python<'_>) -> bool {
        py.detach(|| self.0.is_cancelled())
    }
}

impl PyHandler {
    fn call_state(&self) -> Option<CallState> {
        self.call.clone().map(CallState)
    }
}

impl PyHandler {
    fn call<T>(
        &self,
        method: &str,
        args: impl for<'py> FnOnce(Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyTuple>>,
        out: impl for<'py> FnOnce(Bound<'py, PyAny>) -> PyResult<T>,
    ) -> Result<T> {
        Python::attach(|py| {
            let result = args(py).and_then(|a| self.dispatcher.bind(py).call_method1(method, a)).and_then(out);
            result.map_err(|e| from_python(py, e))
        })
    }
}

/// What the dispatcher's do_get returns as payloads: an Arrow stream, pulled without the GIL
/// (pyarrow takes it where its stream is backed by Python), or (schema, iterator of (batch or
/// None, app_metadata or None)) for streams that carry metadata.
fn output_of(value: &Bound<'_, PyAny>) -> PyResult<Output> {
    if let Ok((schema, items)) = value.extract::<(Bound<'_, PyAny>, Bound<'_, PyAny>)>() {
        let schema = arrow::schema_from_py(&schema)?;
        let items: Py<PyAny> = items.try_iter()?.into_any().unbind();
        let payloads = std::iter::from_fn(move || {
            Python::attach(|py| match items.bind(py).call_method0("__next__") {
                Err(e) if e.is_instance_of::<pyo3::exceptions::PyStopIteration>(py) => None,
                Err(e) => Some(Err(from_python(py, e))),
                Ok(item) => Some(payload_of(&item).map_err(|e| from_python(py, e))),
            })
        });
        return Ok(Output::new(schema, payloads));
    }
    let reader = arrow::stream_from_py(value)?;
    let schema = arrow_array::RecordBatchReader::schema(&reader);
    Ok(Output::new(schema, reader.map(|b| b.map(Payload::batch).map_err(Error::from))))
}

fn payload_of(item: &Bound<'_, PyAny>) -> PyResult<Payload> {
    let (batch, metadata) = item.extract::<(Bound<'_, PyAny>, Option<Vec<u8>>)>()?;
    let batch = if batch.is_none() { None } else { Some(arrow::batch_from_py(&batch)?) };
    Ok(Payload::new(batch, Bytes::from(metadata.unwrap_or_default())))
}

impl Handler for PyHandler {
    fn get_flight_info(&self, _descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        Err(Error::status(Code::Unimplemented, "GetFlightInfo is served over gRPC"))
    }

    fn do_get(&self, ticket: &[u8]) -> Result<Output> {
        let call = self.call_state();
        self.call("do_get", |py| (PyBytes::new(py, ticket), call).into_pyobject(py), |r| output_of(&r))
    }

    fn do_put(&self, descriptor: &FlightDescriptor, schema: &SchemaRef) -> Result<Box<dyn Upload>> {
        let (tx, rx) = sync_channel::<Result<Payload>>(QUEUE);
        let (events, handler_events) = channel();
        let stats = Arc::new(OnceLock::new());
        let messages = Box::new(Messages { rx, events: events.clone() });
        let reader = ServerReader::new(Some(schema.clone()), messages, stats.clone());
        let writer = PutResults { events: events.clone() };
        let dispatcher = Python::attach(|py| self.dispatcher.clone_ref(py));
        let (bytes, call) = (descriptor.encode_to_vec(), self.call_state());
        let start = Box::new(move || {
            spawn(move || {
                let returned = Python::attach(|py| {
                    let args = (PyBytes::new(py, &bytes), reader, writer, call);
                    dispatcher.bind(py).call_method1("do_put", args).map(drop).map_err(|e| from_python(py, e))
                });
                let _ = events.send(Event::Returned);
                returned
            })
        });
        Ok(Box::new(PyUpload::new(tx, start, handler_events, stats)))
    }

    fn do_exchange(&self, descriptor: &FlightDescriptor, input: Input) -> Result<Output> {
        // The client's schema comes when it begins writing, which may be after the handler
        // has written: the reader asks for it when the handler does.
        let stats = Arc::new(OnceLock::from(input.stats()));
        let reader = ServerReader::new(None, Box::new(Mutex::new(input)), stats);
        let (writer, begun) = ServerWriter::new();
        let dispatcher = Python::attach(|py| self.dispatcher.clone_ref(py));
        let (bytes, call) = (descriptor.encode_to_vec(), self.call_state());
        let sink = writer.sink.clone();
        spawn(move || {
            // An error ends the output as that error, not as a normal end.
            let ended = Python::attach(|py| {
                let args = (PyBytes::new(py, &bytes), reader, writer, call);
                dispatcher.bind(py).call_method1("do_exchange", args).map(drop).map_err(|e| from_python(py, e))
            });
            sink.end(ended);
        })?;
        // The handler's writer.begin(schema) (or its end) says what the output is.
        let (schema, options, rx) =
            begun.recv().map_err(|_| Error::internal("the exchange handler ended without a word"))??;
        let output = match schema {
            Some(schema) => Output::new(schema, rx.into_iter()),
            None => Output::unbegun(rx.into_iter()),
        };
        Ok(output.with_options(options))
    }

    fn for_call(&self, call: &PlaneCall) -> Option<Box<dyn Handler>> {
        let dispatcher = Python::attach(|py| self.dispatcher.clone_ref(py));
        Some(Box::new(PyHandler { dispatcher, call: Some(call.clone()) }))
    }
}

fn spawn<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<JoinHandle<T>> {
    std::thread::Builder::new()
        .name("wirespeed-py-call".into())
        .spawn(work)
        .map_err(|e| Error::internal(format!("cannot start a thread: {e}")))
}

/// Where a server reader's messages come from.
trait Source: Send {
    fn next(&mut self) -> Result<Option<Payload>>;

    /// The schema, where the reader was made without it.
    fn schema(&mut self) -> Result<SchemaRef> {
        Err(Error::internal("this reader's schema was given"))
    }
}

impl Source for Messages {
    fn next(&mut self) -> Result<Option<Payload>> {
        Messages::next(self)
    }
}

impl Source for Mutex<Input> {
    fn next(&mut self) -> Result<Option<Payload>> {
        self.get_mut().unwrap_or_else(|p| p.into_inner()).next().transpose()
    }

    fn schema(&mut self) -> Result<SchemaRef> {
        self.get_mut().unwrap_or_else(|p| p.into_inner()).schema()
    }
}

/// What a Python handler reads a client's batches from (`do_put`, `do_exchange`).
#[pyclass(module = "wirespeed._native", frozen)]
pub struct ServerReader {
    /// Known from the start for an upload; an exchange's comes when the client begins.
    schema: Mutex<Option<SchemaRef>>,
    source: Mutex<Box<dyn Source>>,
    /// The decoder's counts, once the call has its decoder.
    stats: Arc<OnceLock<SharedStats>>,
}

impl ServerReader {
    fn new(schema: Option<SchemaRef>, source: Box<dyn Source>, stats: Arc<OnceLock<SharedStats>>) -> Self {
        ServerReader { schema: Mutex::new(schema), source: Mutex::new(source), stats }
    }

    /// The schema, waiting (without the GIL) for the client to begin if it has not.
    fn known_schema(&self, py: Python<'_>) -> PyResult<SchemaRef> {
        let mut schema = self.schema.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = schema.as_ref() {
            return Ok(s.clone());
        }
        let source = &self.source;
        let read = py.detach(|| source.lock().unwrap_or_else(|p| p.into_inner()).schema()).map_err(errors::flight)?;
        *schema = Some(read.clone());
        Ok(read)
    }
}

#[pymethods]
impl ServerReader {
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        arrow::schema_to_py(py, &self.known_schema(py)?)
    }

    /// What has been read so far, as the fields of pyarrow's ReadStats.
    #[getter]
    fn stats(&self) -> StatsTuple {
        stats_tuple(self.stats.get().map(SharedStats::get).unwrap_or_default())
    }

    /// The next message as (batch or None, app_metadata or None); None at the end. Read on
    /// this thread without the GIL: handlers run on threads of their own, where Python runs
    /// no signal handlers, so a helper thread (two wake-ups a batch) would buy nothing.
    fn read_chunk<'py>(&self, py: Python<'py>) -> PyResult<Option<(Bound<'py, PyAny>, Bound<'py, PyAny>)>> {
        let source = &self.source;
        let next = py.detach(|| source.lock().unwrap_or_else(|p| p.into_inner()).next()).map_err(errors::flight)?;
        let Some(payload) = next else { return Ok(None) };
        crate::flight_client::chunk(py, &payload).map(Some)
    }

    /// Every remaining batch, as one pyarrow Table.
    fn read_all<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let source = &self.source;
        let batches = py
            .detach(|| {
                let mut source = source.lock().unwrap_or_else(|p| p.into_inner());
                let mut batches = Vec::new();
                while let Some(p) = source.next()? {
                    batches.extend(p.into_parts().0);
                }
                Ok::<_, Error>(batches)
            })
            .map_err(errors::flight)?;
        arrow::table_to_py(py, self.known_schema(py)?, batches)
    }
}

/// How the handler began its output: with a schema, or (None) with application metadata, its
/// schema to come later through the payloads.
type Begun = Result<(Option<SchemaRef>, WriteOptions, Receiver<Result<Payload>>)>;

/// The output half of an exchange, which the handler begins with a schema and then writes.
struct Sink {
    state: Mutex<SinkState>,
}

enum SinkState {
    Waiting(SyncSender<Begun>),
    /// Writing, the schema sent (or not yet: metadata went first).
    Writing(SyncSender<Result<Payload>>, bool),
    Ended,
}

impl Sink {
    fn end(&self, outcome: Result<()>) {
        let state = std::mem::replace(&mut *self.state.lock().unwrap_or_else(|p| p.into_inner()), SinkState::Ended);
        match (state, outcome) {
            (SinkState::Waiting(begun), Ok(())) => {
                let (_, rx) = sync_channel(0);
                let _ = begun.send(Ok((Some(Arc::new(Schema::empty())), WriteOptions::default(), rx)));
            }
            (SinkState::Waiting(begun), Err(e)) => drop(begun.send(Err(e))),
            (SinkState::Writing(tx, _), Err(e)) => drop(tx.send(Err(e))),
            _ => {}
        }
    }
}

#[pyclass(module = "wirespeed._native", frozen)]
pub struct ServerWriter {
    sink: Arc<Sink>,
}

impl ServerWriter {
    fn new() -> (Self, Receiver<Begun>) {
        let (tx, rx) = sync_channel(1);
        (ServerWriter { sink: Arc::new(Sink { state: Mutex::new(SinkState::Waiting(tx)) }) }, rx)
    }

    /// Sends `payload`; a batch needs the schema sent, metadata does not (it begins the
    /// output without one).
    fn send(&self, py: Python<'_>, payload: Payload) -> PyResult<()> {
        let mut state = self.sink.state.lock().unwrap_or_else(|p| p.into_inner());
        if let SinkState::Waiting(begun) = &*state
            && !payload.has_batch()
        {
            let (tx, rx) = sync_channel(QUEUE);
            let _ = begun.send(Ok((None, WriteOptions::default(), rx)));
            *state = SinkState::Writing(tx, false);
        }
        let tx = match &*state {
            SinkState::Writing(tx, begun) if *begun || !payload.has_batch() => tx.clone(),
            SinkState::Waiting(_) | SinkState::Writing(..) => {
                return Err(errors::usage("call begin(schema) before writing"));
            }
            SinkState::Ended => return Err(errors::usage("the exchange has ended")),
        };
        drop(state);
        py.detach(|| tx.send(Ok(payload)))
            .map_err(|_| errors::raise("wirespeed._flight_base", "FlightCancelledError", "the client went away"))
    }
}

#[pymethods]
impl ServerWriter {
    /// Begins the output with `schema`, its batches laid out as `options` say.
    #[pyo3(signature = (schema, options=None))]
    fn begin(
        &self,
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        options: Option<(bool, Option<String>)>,
    ) -> PyResult<()> {
        let schema = arrow::schema_from_py(schema)?;
        let options = write_options(options)?;
        let mut state = self.sink.state.lock().unwrap_or_else(|p| p.into_inner());
        match &*state {
            SinkState::Waiting(begun) => {
                let (tx, rx) = sync_channel(QUEUE);
                let _ = begun.send(Ok((Some(schema), options, rx)));
                *state = SinkState::Writing(tx, true);
            }
            SinkState::Writing(tx, false) => {
                let tx = tx.clone();
                *state = SinkState::Writing(tx.clone(), true);
                drop(state);
                py.detach(|| tx.send(Ok(Payload::begin(schema, options)))).map_err(|_| {
                    errors::raise("wirespeed._flight_base", "FlightCancelledError", "the client went away")
                })?;
            }
            _ => return Err(errors::usage("begin() was already called")),
        }
        Ok(())
    }

    #[pyo3(signature = (batch, app_metadata=None))]
    fn write_batch(&self, py: Python<'_>, batch: &Bound<'_, PyAny>, app_metadata: Option<Vec<u8>>) -> PyResult<()> {
        let batch = arrow::batch_from_py(batch)?;
        self.send(py, Payload::new(Some(batch), Bytes::from(app_metadata.unwrap_or_default())))
    }

    /// Sends application metadata alone, before `begin` too.
    fn write_metadata(&self, py: Python<'_>, app_metadata: Vec<u8>) -> PyResult<()> {
        self.send(py, Payload::metadata(app_metadata.into()))
    }

    /// Ends the output; the handler's return does it too (or its exception, as an error).
    fn close(&self) {
        self.sink.end(Ok(()));
    }
}

/// The data planes of `wirespeed.flight.FlightServerBase`, beside pyarrow's gRPC server: calls
/// that arrive on them run the Python service through its dispatcher.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct PlaneServer {
    planes: Mutex<Option<wirespeed_flight::PlaneServer>>,
    listed: Vec<(String, String)>,
}

#[pymethods]
impl PlaneServer {
    /// Listens on `planes` (default: the server's), host:port ones on `host`; `seal_tcp` (a
    /// server under TLS) seals the tcp plane's calls and leaves ucx out of the default.
    #[new]
    #[pyo3(signature = (dispatcher, host, key, planes=None, seal_tcp=false))]
    fn new(
        py: Python<'_>,
        dispatcher: Py<PyAny>,
        host: &str,
        key: Option<Vec<u8>>,
        planes: Option<Vec<String>>,
        seal_tcp: bool,
    ) -> PyResult<Self> {
        let key = crate::keys::required_key(key)?;
        let host: IpAddr = host.parse().map_err(|_| errors::usage(format!("{host:?} is not an IP address")))?;
        let kinds = match planes {
            Some(names) => names
                .iter()
                .map(|p| {
                    p.parse::<Fabric>().map_err(|_| errors::usage(format!("unknown plane {p:?} ({})", Fabric::names())))
                })
                .collect::<PyResult<Vec<_>>>()?,
            None => wirespeed_flight::server::default_planes(seal_tcp),
        };
        let handler = Arc::new(PyHandler { dispatcher, call: None });
        let planes = py
            .detach(|| wirespeed_flight::PlaneServer::serve(handler, host, key, &kinds, seal_tcp))
            .map_err(errors::flight)?;
        let listed = planes.planes().into_iter().map(|(k, url)| (k.name().to_string(), url)).collect();
        Ok(PlaneServer { planes: Mutex::new(Some(planes)), listed })
    }

    /// The planes served, as (name, listener URL).
    #[getter]
    fn planes(&self) -> Vec<(String, String)> {
        self.listed.clone()
    }

    /// What to answer a hello header with: the planes' names, or None if it does not prove
    /// the key.
    fn answer(&self, hello: &str) -> Option<String> {
        self.planes.lock().unwrap_or_else(|p| p.into_inner()).as_ref()?.answer(hello)
    }

    /// Locations for one call of `method` ("get", "put" or "exchange") on `target` (a
    /// ticket, or a serialized FlightDescriptor), for a client that reached us at `host` from
    /// `client` (None over a Unix socket: a plane of one host is offered only on it), and
    /// the grant they carry (its MAC in hex), which the dispatcher's methods are given when
    /// the call comes.
    #[pyo3(signature = (method, target, host, client=None))]
    fn locations(
        &self,
        method: &str,
        target: &[u8],
        host: &str,
        client: Option<&str>,
    ) -> PyResult<(String, Vec<String>)> {
        let method =
            Method::named(method).ok_or_else(|| errors::usage(format!("unknown data-plane method {method:?}")))?;
        let ip = |a: &str| a.parse::<IpAddr>().map_err(|_| errors::usage(format!("{a:?} is not an IP address")));
        let host = ip(host)?;
        let client = client.map(ip).transpose()?;
        let guard = self.planes.lock().unwrap_or_else(|p| p.into_inner());
        let planes = guard.as_ref().ok_or_else(|| errors::usage("the planes are shut down"))?;
        let (grant, uris) = planes.granted_locations(host, client, method, target);
        Ok((hex(&grant.mac), uris))
    }

    /// Refuses new calls from now; returns how many are open.
    fn drain(&self) -> usize {
        let guard = self.planes.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map_or(0, |planes| {
            planes.drain();
            planes.calls().open()
        })
    }

    /// Stops the listeners; calls under way end.
    fn shutdown(&self, py: Python<'_>) {
        let taken = self.planes.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(move || drop(taken));
    }
}
