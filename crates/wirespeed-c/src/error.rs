//! What every call returns: a status whose numbers are Flight's (gRPC's) status codes, and an
//! error struct with the message and the binary details (pyarrow's `extra_info`), which the
//! caller releases. No panic crosses the boundary: one becomes WS_STATUS_INTERNAL.

use std::ffi::{CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use wirespeed_flight::{Code, Error};

/// A call's outcome: OK, or the Flight status code of its failure (gRPC's numbers).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WsStatus {
    /// Success.
    Ok = 0,
    /// The call was cancelled (`ws_cancel_trigger`, or the peer cancelled it).
    Cancelled = 1,
    /// An error of no known kind.
    Unknown = 2,
    /// A bad argument: a null pointer, a released handle, an unknown option, bad bytes.
    InvalidArgument = 3,
    /// The call's timeout passed.
    DeadlineExceeded = 4,
    /// No such flight or ticket.
    NotFound = 5,
    /// The flight exists already.
    AlreadyExists = 6,
    /// Authenticated, but not allowed.
    PermissionDenied = 7,
    /// A limit of the server's was reached.
    ResourceExhausted = 8,
    /// The server is not in a state to run the call.
    FailedPrecondition = 9,
    /// The call was aborted.
    Aborted = 10,
    /// Out of range.
    OutOfRange = 11,
    /// The server does not offer the call.
    Unimplemented = 12,
    /// A bug, here or in the server.
    Internal = 13,
    /// The server is unreachable, went away, or is draining.
    Unavailable = 14,
    /// Data was lost or corrupted.
    DataLoss = 15,
    /// A wrong or missing key, password or token.
    Unauthenticated = 16,
}

impl From<Code> for WsStatus {
    fn from(code: Code) -> Self {
        match code {
            Code::Ok => WsStatus::Ok,
            Code::Cancelled => WsStatus::Cancelled,
            Code::Unknown => WsStatus::Unknown,
            Code::InvalidArgument => WsStatus::InvalidArgument,
            Code::DeadlineExceeded => WsStatus::DeadlineExceeded,
            Code::NotFound => WsStatus::NotFound,
            Code::AlreadyExists => WsStatus::AlreadyExists,
            Code::PermissionDenied => WsStatus::PermissionDenied,
            Code::ResourceExhausted => WsStatus::ResourceExhausted,
            Code::FailedPrecondition => WsStatus::FailedPrecondition,
            Code::Aborted => WsStatus::Aborted,
            Code::OutOfRange => WsStatus::OutOfRange,
            Code::Unimplemented => WsStatus::Unimplemented,
            Code::Internal => WsStatus::Internal,
            Code::Unavailable => WsStatus::Unavailable,
            Code::DataLoss => WsStatus::DataLoss,
            Code::Unauthenticated => WsStatus::Unauthenticated,
        }
    }
}

impl WsStatus {
    /// A status a C callback returned (any int: unknown ones are UNKNOWN), as Flight's code.
    pub(crate) fn code_of(raw: i32) -> Code {
        Code::from_i32(raw)
    }
}

/// A failure's details. Zero it before the first call (`WsError error = {0};`); a call that
/// fails fills it, releasing what it held before. Release it with its `release` callback.
#[repr(C)]
pub struct WsError {
    /// The failed call's status (a WsStatus).
    pub code: i32,
    /// What went wrong: NUL-terminated UTF-8, or NULL.
    pub message: *const c_char,
    /// The status's binary details (Flight's `extra_info`), or NULL.
    pub extra_info: *const u8,
    /// The length of `extra_info`.
    pub extra_info_len: usize,
    /// The producer's; do not touch.
    pub private_data: *mut c_void,
    /// Frees what the struct holds and sets it to NULL; NULL when it holds nothing.
    pub release: Option<unsafe extern "C" fn(*mut WsError)>,
}

struct Held {
    message: CString,
    extra_info: Vec<u8>,
}

unsafe extern "C" fn release_error(error: *mut WsError) {
    // SAFETY: `release` is called with the struct it was set on, which we filled.
    let Some(error) = (unsafe { error.as_mut() }) else { return };
    if !error.private_data.is_null() {
        // SAFETY: `private_data` is the Box `fill` leaked, released once (it is nulled here).
        drop(unsafe { Box::from_raw(error.private_data.cast::<Held>()) });
    }
    error.message = std::ptr::null();
    error.extra_info = std::ptr::null();
    error.extra_info_len = 0;
    error.private_data = std::ptr::null_mut();
    error.release = None;
}

/// Fills `error` (if not null) with `e`, releasing what it held.
///
/// # Safety
/// `error` is null or points to a WsError that is zeroed or was filled by this library.
pub(crate) unsafe fn fill(error: *mut WsError, e: &Error) {
    if error.is_null() {
        return;
    }
    // SAFETY: the caller's contract; the release callback is the struct's own.
    unsafe {
        if let Some(release) = (*error).release {
            release(error);
        }
    }
    let held = Box::new(Held {
        message: CString::new(e.message().replace('\0', " ")).unwrap_or_default(),
        extra_info: e.details().to_vec(),
    });
    // SAFETY: the caller's contract.
    let out = unsafe { &mut *error };
    out.code = WsStatus::from(e.code()) as i32;
    out.message = held.message.as_ptr();
    out.extra_info = if held.extra_info.is_empty() { std::ptr::null() } else { held.extra_info.as_ptr() };
    out.extra_info_len = held.extra_info.len();
    out.private_data = Box::into_raw(held).cast();
    out.release = Some(release_error);
}

/// What a WsError that a C callback filled says, with the `status` it returned, as an Error;
/// the struct is released.
///
/// # Safety
/// `error` was zeroed and then filled (or not) by the callback.
pub(crate) unsafe fn take(status: i32, error: &mut WsError) -> Error {
    let message = if error.message.is_null() {
        format!("a callback failed with status {status} and no message")
    } else {
        // SAFETY: a non-null message is NUL-terminated, by WsError's contract.
        unsafe { std::ffi::CStr::from_ptr(error.message) }.to_string_lossy().into_owned()
    };
    // SAFETY: a non-null extra_info holds extra_info_len bytes, by WsError's contract.
    let details = unsafe { crate::args::bytes(error.extra_info, error.extra_info_len, "extra_info") }
        .map(bytes::Bytes::copy_from_slice)
        .unwrap_or_default();
    if let Some(release) = error.release {
        // SAFETY: the struct's own release callback.
        unsafe { release(error) };
    }
    let code = if status == WsStatus::Ok as i32 { Code::Internal } else { WsStatus::code_of(status) };
    Error::status(code, message).with_details(details)
}

/// Runs `call`, turning its error or panic into a status and `error`.
pub(crate) fn guard(error: *mut WsError, call: impl FnOnce() -> Result<(), Error>) -> WsStatus {
    let outcome = catch_unwind(AssertUnwindSafe(call)).unwrap_or_else(|panic| Err(panicked(&*panic)));
    match outcome {
        Ok(()) => WsStatus::Ok,
        Err(e) => {
            // SAFETY: every exported call takes `error` under fill's contract.
            unsafe { fill(error, &e) };
            e.code().into()
        }
    }
}

/// A panic as an error: a bug of ours, never the caller's.
pub(crate) fn panicked(panic: &(dyn std::any::Any + Send)) -> Error {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    Error::internal(format!("wirespeed: a bug (please report it): {what}"))
}
