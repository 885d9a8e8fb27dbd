//! Calls' batches as Arrow C streams, both ways. A stream we export hands out each batch's
//! buffers as they arrived (over shared memory: the ring's own blocks, held until the
//! consumer releases each array); its errors keep their Flight code for `ws_stream_error`;
//! and a stream used after its release answers EINVAL, never a crash.

use std::ffi::{CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use arrow_array::ffi::from_ffi_and_data_type;
use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::FFI_ArrowArrayStream;
use arrow_array::{Array, RecordBatch, StructArray};
use arrow_schema::{DataType, SchemaRef};
use wirespeed_flight::{Code, Error, FlightReader, Result};

use crate::args::null;
use crate::cancel::{self, Flag};
use crate::error::{WsError, WsStatus, guard, panicked};

/// How long one wait for data lasts before the cancellation token is looked at again.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// What a stream of ours holds.
struct Exported {
    reader: Option<FlightReader>,
    schema: SchemaRef,
    cancel: Option<Flag>,
    plane: CString,
    last_error: Option<(Error, CString)>,
}

impl Exported {
    fn next(&mut self) -> Result<Option<RecordBatch>> {
        let Some(reader) = self.reader.as_mut() else { return Ok(None) };
        // Only a call that can be cancelled waits in slices, looking at its token between them.
        if self.cancel.is_some() {
            while !reader.wait_ready(CANCEL_POLL)? {
                if let Err(e) = cancel::check(&self.cancel) {
                    self.reader = None; // dropped before its end: the server sees the call cancelled
                    return Err(e);
                }
            }
            cancel::check(&self.cancel)?;
        }
        match reader.next() {
            Some(batch) => batch.map(Some),
            None => {
                self.reader = None;
                Ok(None)
            }
        }
    }

    fn fail(&mut self, e: Error) -> c_int {
        let errno = errno_of(e.code());
        let text = format!("[{:?}] {}", WsStatus::from(e.code()), e.message());
        self.last_error = Some((e, CString::new(text.replace('\0', " ")).unwrap_or_default()));
        self.reader = None;
        errno
    }
}

/// The errno the C stream interface returns for a failure of Flight's `code`.
fn errno_of(code: Code) -> c_int {
    match code {
        Code::Cancelled => libc_errno::ECANCELED,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => libc_errno::EINVAL,
        Code::NotFound => libc_errno::ENOENT,
        Code::PermissionDenied | Code::Unauthenticated => libc_errno::EACCES,
        Code::ResourceExhausted => libc_errno::ENOMEM,
        Code::DeadlineExceeded => libc_errno::ETIMEDOUT,
        Code::Unimplemented => libc_errno::ENOSYS,
        _ => libc_errno::EIO,
    }
}

/// The errno values the C stream interface uses (Linux's numbers).
mod libc_errno {
    pub(super) const ENOENT: i32 = 2;
    pub(super) const EIO: i32 = 5;
    pub(super) const ENOMEM: i32 = 12;
    pub(super) const EACCES: i32 = 13;
    pub(super) const EINVAL: i32 = 22;
    pub(super) const ENOSYS: i32 = 38;
    pub(super) const ETIMEDOUT: i32 = 110;
    pub(super) const ECANCELED: i32 = 125;
}

static RELEASED: &std::ffi::CStr = c"the stream was released";

/// Our private data, or none once the stream was released (or was never ours).
///
/// # Safety
/// `stream` is null or points to an FFI_ArrowArrayStream.
unsafe fn ours<'a>(stream: *mut FFI_ArrowArrayStream) -> Option<&'a mut Exported> {
    // SAFETY: the caller's contract.
    let s = unsafe { stream.as_ref() }?;
    // Ours are told by their get_next, as ADBC tells its streams: the one function only this
    // library's streams carry.
    type GetNext = unsafe extern "C" fn(*mut FFI_ArrowArrayStream, *mut FFI_ArrowArray) -> c_int;
    let mine = s.get_next().is_some_and(|f| std::ptr::fn_addr_eq(f, get_next as GetNext));
    if !mine || s.release().is_none() {
        return None;
    }
    // SAFETY: while unreleased, our stream's private data is its Exported.
    unsafe { s.private_data().cast::<Exported>().as_mut() }
}

unsafe extern "C" fn get_schema(stream: *mut FFI_ArrowArrayStream, out: *mut FFI_ArrowSchema) -> c_int {
    // SAFETY: called by the consumer with our stream.
    let Some(me) = (unsafe { ours(stream) }) else { return libc_errno::EINVAL };
    if out.is_null() {
        return me.fail(null("the schema's out pointer"));
    }
    match FFI_ArrowSchema::try_from(me.schema.as_ref()) {
        // SAFETY: `out` is the consumer's, writable, and holds nothing we must drop.
        Ok(schema) => unsafe { out.write(schema) },
        Err(e) => return me.fail(Error::internal(e.to_string())),
    }
    0
}

unsafe extern "C" fn get_next(stream: *mut FFI_ArrowArrayStream, out: *mut FFI_ArrowArray) -> c_int {
    // SAFETY: called by the consumer with our stream.
    let Some(me) = (unsafe { ours(stream) }) else { return libc_errno::EINVAL };
    if out.is_null() {
        return me.fail(null("the array's out pointer"));
    }
    if let Some((e, _)) = &me.last_error {
        return errno_of(e.code()); // a failed stream stays failed
    }
    let next = catch_unwind(AssertUnwindSafe(|| me.next())).unwrap_or_else(|p| Err(panicked(&*p)));
    let array = match next {
        Ok(Some(batch)) => FFI_ArrowArray::new(&StructArray::from(batch).into_data()),
        Ok(None) => FFI_ArrowArray::empty(), // released: the end
        Err(e) => return me.fail(e),
    };
    // SAFETY: `out` is the consumer's, writable, and holds nothing we must drop.
    unsafe { out.write(array) };
    0
}

unsafe extern "C" fn get_last_error(stream: *mut FFI_ArrowArrayStream) -> *const c_char {
    // SAFETY: called by the consumer with our stream.
    match unsafe { ours(stream) } {
        Some(me) => me.last_error.as_ref().map_or(std::ptr::null(), |(_, text)| text.as_ptr()),
        None => RELEASED.as_ptr(),
    }
}

/// Frees the stream. The other callbacks stay set, so a consumer that calls them after this
/// gets EINVAL and "the stream was released" rather than a jump through NULL.
unsafe extern "C" fn release(stream: *mut FFI_ArrowArrayStream) {
    // SAFETY: called by the consumer with our stream.
    let Some(s) = (unsafe { stream.as_mut() }) else { return };
    if s.release().is_none() {
        return;
    }
    // SAFETY: unreleased, its private data is the Exported `export` leaked; freed once.
    let private = unsafe { s.set_private_data(std::ptr::null_mut()) };
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: as above.
        drop(unsafe { Box::from_raw(private.cast::<Exported>()) })
    }));
    // SAFETY: marks the stream released, as the C stream interface asks.
    unsafe { s.set_release(None) };
}

/// `reader` as a C stream, cancelled by `cancel`.
pub(crate) fn export(mut reader: FlightReader, cancel: Option<Flag>) -> Result<FFI_ArrowArrayStream> {
    let schema = reader.schema()?;
    let plane = CString::new(reader.plane().name()).unwrap_or_default();
    let private = Box::new(Exported { reader: Some(reader), schema, cancel, plane, last_error: None });
    // SAFETY: the callbacks implement the C stream interface over `private`, which `release`
    // frees once and marks released.
    Ok(unsafe {
        FFI_ArrowArrayStream::new_unchecked(
            Some(get_schema),
            Some(get_next),
            Some(get_last_error),
            Some(release),
            Box::into_raw(private).cast::<c_void>(),
        )
    })
}

/// A C stream given to us (moved: we release it), read batch by batch. Each batch is checked
/// whole before use (the C data interface gives no buffer sizes, and Arrow's importer trusts
/// what it is given): a malformed one is an INVALID_ARGUMENT error, never a read out of bounds.
pub(crate) struct Imported {
    stream: FFI_ArrowArrayStream,
    schema: SchemaRef,
    what: &'static str,
}

impl Imported {
    /// # Safety
    /// `stream` is null or points to an FFI_ArrowArrayStream.
    pub(crate) unsafe fn new(stream: *mut FFI_ArrowArrayStream, what: &'static str) -> Result<Self> {
        if stream.is_null() {
            return Err(null(what));
        }
        // SAFETY: the caller's contract; the struct is moved out and left released.
        let mut stream = unsafe { FFI_ArrowArrayStream::from_raw(stream) };
        let bad = |why: String| Error::invalid_argument(format!("{what}: {why}"));
        let get_schema = match (stream.release(), stream.get_schema()) {
            (None, _) => return Err(bad("it is released".into())),
            (_, None) => return Err(bad("it has no get_schema".into())),
            (_, Some(f)) => f,
        };
        let mut schema = FFI_ArrowSchema::empty();
        // SAFETY: the producer's callback, on its unreleased stream.
        let rc = unsafe { get_schema(&mut stream, &mut schema) };
        if rc != 0 {
            return Err(bad(format!("get_schema failed ({rc}): {}", last_error(&mut stream))));
        }
        let schema = arrow_schema::Schema::try_from(&schema).map_err(|e| bad(e.to_string()))?;
        Ok(Imported { stream, schema: Arc::new(schema), what })
    }

    pub(crate) fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let bad = |why: String| Error::invalid_argument(format!("{}: {why}", self.what));
        let get_next = self.stream.get_next().ok_or_else(|| bad("it has no get_next".into()))?;
        let mut array = FFI_ArrowArray::empty();
        // SAFETY: the producer's callback, on its unreleased stream.
        let rc = unsafe { get_next(&mut self.stream, &mut array) };
        if rc != 0 {
            return Err(bad(format!("get_next failed ({rc}): {}", last_error(&mut self.stream))));
        }
        if array.is_released() {
            return Ok(None);
        }
        let fields = self.schema.fields().clone();
        // SAFETY: an array the producer handed over, of the stream's type; validated below
        // before anything reads its buffers.
        let data =
            unsafe { from_ffi_and_data_type(array, DataType::Struct(fields)) }.map_err(|e| bad(e.to_string()))?;
        data.validate_full().map_err(|e| bad(e.to_string()))?;
        let (_, columns, nulls) = StructArray::from(data).into_parts();
        if nulls.is_some_and(|n| n.null_count() > 0) {
            return Err(bad("a batch has null rows".into()));
        }
        let rows = columns.first().map(|c| c.len());
        let options = arrow_array::RecordBatchOptions::new().with_row_count(rows);
        RecordBatch::try_new_with_options(self.schema.clone(), columns, &options)
            .map(Some)
            .map_err(|e| bad(e.to_string()))
    }
}

/// The producer's last error message.
fn last_error(stream: &mut FFI_ArrowArrayStream) -> String {
    let Some(f) = stream.get_last_error() else { return "no message".into() };
    // SAFETY: the producer's callback; its string is valid until the next call on the stream.
    let text = unsafe { f(stream) };
    if text.is_null() {
        return "no message".into();
    }
    // SAFETY: a NUL-terminated string, as the C stream interface says.
    unsafe { std::ffi::CStr::from_ptr(text) }.to_string_lossy().into_owned()
}

impl Iterator for Imported {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        self.next_batch().transpose()
    }
}

/// The plane a stream from `ws_client_do_get` or `ws_client_do_exchange` reads from (`shm`,
/// `tcp`, `ucx`, `grpc`, ...), or NULL for a stream that is not ours or was released. The
/// string lives as long as the stream.
///
/// # Safety
/// `stream` is null or points to an ArrowArrayStream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_stream_plane(stream: *mut FFI_ArrowArrayStream) -> *const c_char {
    // SAFETY: the caller's contract.
    unsafe { ours(stream) }.map_or(std::ptr::null(), |me| me.plane.as_ptr())
}

/// Fills `error` with the last failure of a stream of ours, with its Flight code (as ADBC's
/// AdbcErrorFromArrayStream); WS_STATUS_OK when it has none.
///
/// # Safety
/// `stream` is null or points to an ArrowArrayStream; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_stream_error(stream: *mut FFI_ArrowArrayStream, error: *mut WsError) -> WsStatus {
    guard(error, || {
        // SAFETY: the caller's contract.
        let me =
            unsafe { ours(stream) }.ok_or_else(|| Error::invalid_argument("not a wirespeed stream, or released"))?;
        match &me.last_error {
            Some((e, _)) => Err(Error::status(e.code(), e.message()).with_details(e.details())),
            None => Ok(()),
        }
    })
}
