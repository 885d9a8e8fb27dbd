//! Calls' batches as Arrow C streams, both ways. A stream we export hands out each batch's
//! buffers as they arrived (over shared memory: the ring's own blocks, held until the
//! consumer releases each array); its errors keep their Flight code for `ws_stream_error`;
//! and a stream used after its release answers EINVAL, never a crash.

use std::ffi::{CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use arrow_array::ffi::{FFI_ArrowArray, FFI_ArrowSchema};
use arrow_array::ffi_stream::{FFI_ArrowArrayStream, RecordBatchStreamReader};
use arrow_array::{Array, RecordBatch, RecordBatchReader, StructArray};
use arrow_schema::SchemaRef;
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
        while !reader.wait_ready(CANCEL_POLL)? {
            if let Err(e) = cancel::check(&self.cancel) {
                self.reader = None; // dropped before its end: the server sees the call cancelled
                return Err(e);
            }
        }
        cancel::check(&self.cancel)?;
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

/// A C stream the caller gives us (moved: we release it), as batches.
///
/// # Safety
/// `stream` is null or points to an FFI_ArrowArrayStream.
pub(crate) unsafe fn import(stream: *mut FFI_ArrowArrayStream, what: &str) -> Result<RecordBatchStreamReader> {
    if stream.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller's contract; the struct is moved out and marked released.
    RecordBatchStreamReader::try_new(unsafe { FFI_ArrowArrayStream::from_raw(stream) })
        .map_err(|e| Error::invalid_argument(format!("{what}: {e}")))
}

/// The batches of an imported stream, its failures as INVALID_ARGUMENT errors.
pub(crate) fn batches(
    reader: RecordBatchStreamReader,
    what: &'static str,
) -> (SchemaRef, impl Iterator<Item = Result<RecordBatch>> + Send) {
    let schema = reader.schema();
    (schema, reader.map(move |b| b.map_err(|e| Error::invalid_argument(format!("{what}: {e}")))))
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
