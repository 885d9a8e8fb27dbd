//! Arguments from C: nulls and bad text become errors, never a crash.

use std::ffi::{CStr, c_char};

use wirespeed_flight::{Error, Result};

/// A null where a pointer was needed.
pub(crate) fn null(what: &str) -> Error {
    Error::invalid_argument(format!("{what} is NULL"))
}

/// `len` items at `data` (NULL is fine when `len` is 0).
///
/// # Safety
/// `data` is null or points to `len` readable items that outlive the call.
pub(crate) unsafe fn slice<'a, T>(data: *const T, len: usize, what: &str) -> Result<&'a [T]> {
    match (data.is_null(), len) {
        (_, 0) => Ok(&[]),
        (true, _) => Err(null(what)),
        // SAFETY: the caller's contract.
        (false, _) => Ok(unsafe { std::slice::from_raw_parts(data, len) }),
    }
}

/// `len` bytes at `data`: [`slice`] of bytes.
///
/// # Safety
/// As [`slice`].
pub(crate) unsafe fn bytes<'a>(data: *const u8, len: usize, what: &str) -> Result<&'a [u8]> {
    // SAFETY: the caller's contract.
    unsafe { slice(data, len, what) }
}

/// The UTF-8 text of a NUL-terminated string.
///
/// # Safety
/// `text` is null or a NUL-terminated string that outlives the call.
pub(crate) unsafe fn text<'a>(text: *const c_char, what: &str) -> Result<&'a str> {
    if text.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller's contract.
    unsafe { CStr::from_ptr(text) }.to_str().map_err(|_| Error::invalid_argument(format!("{what} is not UTF-8")))
}

/// An error if there is no place for a result, checked before a call starts, so that none runs
/// whose result would be lost.
pub(crate) fn needs<T>(out: *mut T, what: &str) -> Result<()> {
    if out.is_null() { Err(null(what)) } else { Ok(()) }
}

/// The place `out` points to, for a result.
///
/// # Safety
/// `out` is null or points to writable memory for a `T` (initialised or not).
pub(crate) unsafe fn out<T>(out: *mut T, what: &str, value: T) -> Result<()> {
    if out.is_null() {
        return Err(null(what));
    }
    // SAFETY: the caller's contract; what was there is not dropped (it may be uninitialised).
    unsafe { out.write(value) };
    Ok(())
}
