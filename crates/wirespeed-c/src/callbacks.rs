//! A Flight service of C callbacks that give or take Arrow C streams, so a C, C++, Go or Java
//! program serves its own data on gRPC and every data plane.

use std::ffi::{c_char, c_void};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{RecordBatch, RecordBatchIterator};
use arrow_flight::{FlightDescriptor, FlightInfo};
use arrow_schema::{ArrowError, SchemaRef};
use bytes::Bytes;
use prost::Message;
use wirespeed_flight::{Error, Handler, Output, Payload, Result, Upload};

use crate::args::{needs, text};
use crate::buffers::{WsBuffer, WsBuffers};
use crate::error::{WsError, WsStatus, guard, take};
use crate::options::{Options, WsOption};
use crate::server::{SERVER_OPTIONS, WsServer, start};
use crate::streams::Imported;

/// A service's callbacks. Each may be NULL (the call then fails UNIMPLEMENTED). They run on
/// the server's threads, several at once: they must be thread-safe. Each returns a WsStatus:
/// WS_STATUS_OK, or a failure's, with `error` (zeroed) filled with a message and a release
/// callback where it has one; the library calls the release.
#[repr(C)]
pub struct WsHandler {
    /// Passed to every callback.
    pub user_data: *mut c_void,
    /// ListFlights: fills `infos` with a FlightInfo (protobuf) per flight.
    pub list_flights: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            criteria: *const u8,
            criteria_len: usize,
            infos: *mut WsBuffers,
            error: *mut WsError,
        ) -> i32,
    >,
    /// GetFlightInfo: fills `info` with the FlightInfo (protobuf) of a FlightDescriptor
    /// (protobuf).
    pub get_flight_info: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            descriptor: *const u8,
            descriptor_len: usize,
            info: *mut WsBuffer,
            error: *mut WsError,
        ) -> i32,
    >,
    /// DoGet: fills `stream` with the ticket's batches, which the library releases.
    pub do_get: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            ticket: *const u8,
            ticket_len: usize,
            stream: *mut FFI_ArrowArrayStream,
            error: *mut WsError,
        ) -> i32,
    >,
    /// DoPut: reads the upload from `stream` (moved: the callback releases it). An error from
    /// the stream means the upload failed: keep none of it.
    pub do_put: Option<
        unsafe extern "C" fn(
            user_data: *mut c_void,
            descriptor: *const u8,
            descriptor_len: usize,
            stream: *mut FFI_ArrowArrayStream,
            error: *mut WsError,
        ) -> i32,
    >,
    /// Called once with `user_data` when the server no longer needs it.
    pub release: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

/// The callbacks, shared by the server's threads.
struct Callbacks(WsHandler);

// SAFETY: WsHandler's contract: the callbacks are thread-safe and `user_data` is theirs to share.
unsafe impl Send for Callbacks {}
// SAFETY: as above.
unsafe impl Sync for Callbacks {}

impl Drop for Callbacks {
    fn drop(&mut self) {
        if let Some(release) = self.0.release {
            // SAFETY: once, when the server is done with the handler.
            unsafe { release(self.0.user_data) };
        }
    }
}

fn missing(what: &str) -> Error {
    Error::unimplemented(format!("this server has no {what}"))
}

/// Runs a callback with a fresh error struct, turning its failure into an Error.
fn call(run: impl FnOnce(*mut WsError) -> i32) -> Result<()> {
    let mut error = WsError {
        code: 0,
        message: std::ptr::null(),
        extra_info: std::ptr::null(),
        extra_info_len: 0,
        private_data: std::ptr::null_mut(),
        release: None,
    };
    let status = run(&mut error);
    // SAFETY: the callback filled `error` (or not) by WsError's contract.
    let failure = unsafe { take(status, &mut error) };
    if status == WsStatus::Ok as i32 { Ok(()) } else { Err(failure) }
}

/// The bytes a callback put in `buffer`, which is then released.
fn take_buffer(buffer: &mut WsBuffer) -> Result<Vec<u8>> {
    let Some(release) = buffer.release else { return Err(Error::internal("the callback left its buffer unset")) };
    // SAFETY: a set buffer holds `len` bytes at `data`, by WsBuffer's contract.
    let bytes = unsafe { crate::args::bytes(buffer.data, buffer.len, "the callback's buffer") }.map(<[u8]>::to_vec);
    // SAFETY: the buffer's own release callback, once.
    unsafe { release(buffer) };
    bytes
}

fn decode_info(bytes: &[u8]) -> Result<FlightInfo> {
    FlightInfo::decode(bytes).map_err(|e| Error::internal(format!("the callback's FlightInfo does not decode: {e}")))
}

impl Handler for Callbacks {
    fn list_flights(&self, criteria: &[u8]) -> Result<Vec<FlightInfo>> {
        let Some(list) = self.0.list_flights else { return Ok(Vec::new()) };
        let mut infos = WsBuffers::UNSET;
        // SAFETY: WsHandler's contract; the pointers live through the call.
        call(|e| unsafe { list(self.0.user_data, criteria.as_ptr(), criteria.len(), &mut infos, e) })?;
        let Some(release) = infos.release else { return Err(Error::internal("the callback left its list unset")) };
        let decoded = (|| {
            // SAFETY: a set WsBuffers holds `count` pointers and lengths, by its contract.
            let (runs, lens) = unsafe {
                (
                    crate::args::slice(infos.data, infos.count, "the runs")?,
                    crate::args::slice(infos.lens, infos.count, "the lengths")?,
                )
            };
            runs.iter()
                .zip(lens)
                // SAFETY: each run holds its length's bytes, by WsBuffers' contract.
                .map(|(&run, &len)| decode_info(unsafe { crate::args::bytes(run, len, "a FlightInfo")? }))
                .collect()
        })();
        // SAFETY: the list's own release callback, once.
        unsafe { release(&mut infos) };
        decoded
    }

    fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        let get = self.0.get_flight_info.ok_or_else(|| missing("GetFlightInfo"))?;
        let d = descriptor.encode_to_vec();
        let mut info = WsBuffer::UNSET;
        // SAFETY: WsHandler's contract; the pointers live through the call.
        call(|e| unsafe { get(self.0.user_data, d.as_ptr(), d.len(), &mut info, e) })?;
        decode_info(&take_buffer(&mut info)?)
    }

    fn do_get(&self, ticket: &[u8]) -> Result<Output> {
        let get = self.0.do_get.ok_or_else(|| missing("DoGet"))?;
        let mut stream = FFI_ArrowArrayStream::empty();
        // SAFETY: WsHandler's contract; the pointers live through the call.
        call(|e| unsafe { get(self.0.user_data, ticket.as_ptr(), ticket.len(), &mut stream, e) })?;
        // SAFETY: `stream` is ours, filled by the callback (or left released: an error).
        let reader =
            unsafe { Imported::new(&mut stream, "the callback's stream") }.map_err(|e| Error::internal(e.message()))?;
        Ok(Output::new(reader.schema(), reader.map(|b| b.map(Payload::batch))))
    }

    fn do_put(&self, descriptor: &FlightDescriptor, schema: &SchemaRef) -> Result<Box<dyn Upload>> {
        let put = self.0.do_put.ok_or_else(|| missing("DoPut"))?;
        let (tx, rx) = sync_channel(2);
        let d = descriptor.encode_to_vec();
        let user_data = UserData(self.0.user_data);
        let schema = schema.clone();
        let reading = std::thread::Builder::new()
            .name("ws-put-callback".into())
            .spawn(move || {
                let user_data = user_data;
                let mut stream = upload_stream(schema, rx);
                // SAFETY: WsHandler's contract; the stream is moved to the callback.
                call(|e| unsafe { put(user_data.0, d.as_ptr(), d.len(), &mut stream, e) })
            })
            .map_err(|e| Error::internal(format!("starting the upload's callback: {e}")))?;
        Ok(Box::new(CallbackUpload { tx: Some(tx), reading: Mutex::new(Some(reading)) }))
    }
}

/// `user_data`, sent to the thread that runs a DoPut callback.
struct UserData(*mut c_void);
// SAFETY: WsHandler's contract: `user_data` is shared by the callbacks' threads.
unsafe impl Send for UserData {}

/// What the upload's batches come through: an error item ends the stream failed.
type Batches = Receiver<std::result::Result<RecordBatch, ArrowError>>;

fn upload_stream(schema: SchemaRef, rx: Batches) -> FFI_ArrowArrayStream {
    FFI_ArrowArrayStream::new(Box::new(RecordBatchIterator::new(rx.into_iter(), schema)))
}

/// An upload fed to a DoPut callback's stream while the client sends it.
struct CallbackUpload {
    tx: Option<SyncSender<std::result::Result<RecordBatch, ArrowError>>>,
    reading: Mutex<Option<std::thread::JoinHandle<Result<()>>>>,
}

impl CallbackUpload {
    fn outcome(&self) -> Result<()> {
        let Some(thread) = self.reading.lock().unwrap_or_else(|p| p.into_inner()).take() else { return Ok(()) };
        thread.join().map_err(|p| crate::error::panicked(&*p))?
    }
}

impl Upload for CallbackUpload {
    fn write(&mut self, payload: Payload) -> Result<Option<Bytes>> {
        let (batch, _) = payload.into_parts();
        let (Some(batch), Some(tx)) = (batch, &self.tx) else { return Ok(None) };
        if tx.send(Ok(batch)).is_err() {
            // The callback returned before the end: its answer is the call's.
            self.tx = None;
            self.outcome()?;
            return Err(Error::internal("the DoPut callback returned before reading the whole upload"));
        }
        Ok(None)
    }

    fn finish(mut self: Box<Self>) -> Result<Vec<Bytes>> {
        self.tx = None; // the end of the callback's stream
        self.outcome().map(|()| Vec::new())
    }
}

impl Drop for CallbackUpload {
    /// An upload that ends unfinished (the client failed or went away) ends the callback's
    /// stream with an error, so that it keeps nothing.
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            let _ = tx.send(Err(ArrowError::ExternalError("the upload was cut short".into())));
        }
        let _ = self.outcome();
    }
}

/// Serves `handler`'s callbacks at `listen` (`HOST:PORT`, or `grpc+unix://PATH`) with the options
/// `ws_server_serve_directory` takes but its last three. The library calls
/// `handler->release` once the server is done with them.
///
/// # Safety
/// `handler` points to a WsHandler (copied); strings NUL-terminated; `options` null or
/// `options_len` WsOptions; `server` a place for the handle; `error` null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_server_serve_callbacks(
    handler: *const WsHandler,
    listen: *const c_char,
    options: *const WsOption,
    options_len: usize,
    server: *mut *mut WsServer,
    error: *mut WsError,
) -> WsStatus {
    guard(error, || {
        needs(server, "server")?;
        // SAFETY: the caller's contract.
        let (listen, o) = unsafe { (text(listen, "listen")?, Options::read(options, options_len)?) };
        // SAFETY: the caller's contract.
        let handler = unsafe { handler.as_ref() }.ok_or_else(|| crate::args::null("handler"))?;
        // SAFETY: the caller's contract.
        unsafe { start(Callbacks(WsHandler { ..*handler }), listen, o, SERVER_OPTIONS, server) }
    })
}
