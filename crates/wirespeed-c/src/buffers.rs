//! Bytes that leave the library (FlightInfo's protobuf, action and put results), each set
//! with the release callback that frees it, as the Arrow C data interface hands out arrays.

use std::ffi::c_void;

use bytes::Bytes;

/// One run of bytes the library hands out; release it with `release`.
#[repr(C)]
pub struct WsBuffer {
    /// The bytes, or NULL when `len` is 0.
    pub data: *const u8,
    /// How many.
    pub len: usize,
    /// The producer's; do not touch.
    pub private_data: *mut c_void,
    /// Frees the bytes and sets this to NULL; NULL once released.
    pub release: Option<unsafe extern "C" fn(*mut WsBuffer)>,
}

/// A list of byte runs (ListFlights' FlightInfos, an action's results, PutResults).
#[repr(C)]
pub struct WsBuffers {
    /// How many runs.
    pub count: usize,
    /// `count` pointers to each run's bytes.
    pub data: *const *const u8,
    /// `count` lengths.
    pub lens: *const usize,
    /// The producer's; do not touch.
    pub private_data: *mut c_void,
    /// Frees the runs and sets this to NULL; NULL once released.
    pub release: Option<unsafe extern "C" fn(*mut WsBuffers)>,
}

impl WsBuffer {
    /// Released: what an out struct holds before a producer fills it.
    pub(crate) const UNSET: WsBuffer =
        WsBuffer { data: std::ptr::null(), len: 0, private_data: std::ptr::null_mut(), release: None };

    pub(crate) fn new(bytes: Bytes) -> Self {
        let held = Box::new(bytes);
        WsBuffer {
            data: if held.is_empty() { std::ptr::null() } else { held.as_ptr() },
            len: held.len(),
            private_data: Box::into_raw(held).cast(),
            release: Some(release_buffer),
        }
    }
}

unsafe extern "C" fn release_buffer(buffer: *mut WsBuffer) {
    // SAFETY: called with the struct it was set on.
    let Some(b) = (unsafe { buffer.as_mut() }) else { return };
    if !b.private_data.is_null() {
        // SAFETY: the Box `new` leaked, freed once (nulled below).
        drop(unsafe { Box::from_raw(b.private_data.cast::<Bytes>()) });
    }
    *b = WsBuffer::UNSET;
}

struct Runs {
    _runs: Vec<Bytes>,
    data: Vec<*const u8>,
    lens: Vec<usize>,
}

impl WsBuffers {
    /// Released: what an out struct holds before a producer fills it.
    pub(crate) const UNSET: WsBuffers = WsBuffers {
        count: 0,
        data: std::ptr::null(),
        lens: std::ptr::null(),
        private_data: std::ptr::null_mut(),
        release: None,
    };

    pub(crate) fn new(runs: Vec<Bytes>) -> Self {
        let data = runs.iter().map(|r| r.as_ptr()).collect();
        let lens = runs.iter().map(Bytes::len).collect();
        let held = Box::new(Runs { _runs: runs, data, lens });
        WsBuffers {
            count: held.lens.len(),
            data: held.data.as_ptr(),
            lens: held.lens.as_ptr(),
            private_data: Box::into_raw(held).cast(),
            release: Some(release_buffers),
        }
    }
}

unsafe extern "C" fn release_buffers(buffers: *mut WsBuffers) {
    // SAFETY: called with the struct it was set on.
    let Some(b) = (unsafe { buffers.as_mut() }) else { return };
    if !b.private_data.is_null() {
        // SAFETY: the Box `new` leaked, freed once (nulled below).
        drop(unsafe { Box::from_raw(b.private_data.cast::<Runs>()) });
    }
    *b = WsBuffers::UNSET;
}
