//! Cancelling a call from another thread: a token passed to the call, triggered at any time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use wirespeed_flight::{Code, Error, Result};

use crate::args::out;
use crate::error::{WsError, WsStatus, guard};
use crate::handles::Handles;

/// A cancellation token (opaque): pass it to calls, trigger it from any thread.
pub struct WsCancel {
    _opaque: [u8; 0],
}

pub(crate) type Flag = Arc<AtomicBool>;

static TOKENS: Handles<Flag> = Handles::new("the cancellation token");

/// The token's flag, or none for a null token (a call that cannot be cancelled).
pub(crate) fn flag(token: *const WsCancel) -> Result<Option<Flag>> {
    if token.is_null() {
        return Ok(None);
    }
    TOKENS.get(token).map(|f| Some((*f).clone()))
}

/// An error if `flag` was triggered.
pub(crate) fn check(flag: &Option<Flag>) -> Result<()> {
    match flag {
        Some(f) if f.load(Ordering::Relaxed) => Err(cancelled()),
        _ => Ok(()),
    }
}

pub(crate) fn cancelled() -> Error {
    Error::status(Code::Cancelled, "the call was cancelled")
}

/// A new token.
///
/// # Safety
/// `token` points to writable memory for a pointer; `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_cancel_new(token: *mut *mut WsCancel, error: *mut WsError) -> WsStatus {
    // SAFETY: the caller's contract.
    guard(error, || unsafe { out(token, "token", TOKENS.insert(Flag::default())) })
}

/// Cancels every call given `token`, now and later: each ends with WS_STATUS_CANCELLED, and
/// the server sees its call cancelled.
///
/// # Safety
/// `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_cancel_trigger(token: *const WsCancel, error: *mut WsError) -> WsStatus {
    guard(error, || {
        TOKENS.get(token)?.store(true, Ordering::Relaxed);
        Ok(())
    })
}

/// Releases `token`; the calls already given it can no longer be cancelled.
///
/// # Safety
/// `error` is null or a WsError.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ws_cancel_release(token: *const WsCancel, error: *mut WsError) -> WsStatus {
    guard(error, || TOKENS.remove(token).map(drop))
}
