//! DLPack: memory handed to NumPy, CuPy, PyTorch or JAX without a copy, as a capsule holding a
//! `DLManagedTensor` (or, when the consumer asks for version 1, `DLManagedTensorVersioned`).
//! The capsule owns whatever keeps the memory valid; the consumer that takes the capsule calls
//! the deleter when its array goes, and a capsule nobody took deletes on its own.

use std::any::Any;
use std::ffi::{CStr, c_void};

use pyo3::ffi;
use pyo3::prelude::*;

/// `DLDeviceType`: host memory, and a CUDA device's.
pub const CPU: i32 = 1;
pub const CUDA: i32 = 2;

const LEGACY: &CStr = c"dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";
/// `kDLUInt`.
const UINT: u8 = 1;

#[repr(C)]
struct Device {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct Tensor {
    data: *mut c_void,
    device: Device,
    ndim: i32,
    dtype: DataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct Managed {
    dl_tensor: Tensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut Managed)>,
}

#[repr(C)]
struct Version {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct ManagedVersioned {
    version: Version,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut ManagedVersioned)>,
    flags: u64,
    dl_tensor: Tensor,
}

/// What a capsule points to: the managed tensor first, then what it needs to stay valid.
#[repr(C)]
struct Held<M> {
    managed: M,
    shape: i64,
    _owner: Box<dyn Any + Send>,
}

unsafe extern "C" fn delete<M>(managed: *mut M) {
    // SAFETY: `managed` is the first field of a `Held<M>` boxed in `export`, deleted once.
    drop(unsafe { Box::from_raw(managed.cast::<Held<M>>()) });
}

/// A capsule still named as made was never taken: delete its tensor. A consumer renames what
/// it takes ("used_dltensor") and calls the deleter itself.
unsafe extern "C" fn release_untaken(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule being destroyed; the names are ours.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, LEGACY.as_ptr()).cast::<Managed>();
            if let Some(d) = (*m).deleter {
                d(m);
            }
        } else if ffi::PyCapsule_IsValid(capsule, VERSIONED.as_ptr()) == 1 {
            let m = ffi::PyCapsule_GetPointer(capsule, VERSIONED.as_ptr()).cast::<ManagedVersioned>();
            if let Some(d) = (*m).deleter {
                d(m);
            }
        }
    }
}

/// Bytes as a one-dimensional uint8 tensor on `device` (`(CPU, 0)` or `(CUDA, n)`).
pub struct Bytes {
    pub address: u64,
    pub len: usize,
    pub device: (i32, i32),
}

/// A DLPack capsule over `bytes`, which stay valid while `owner` lives; `versioned` for a
/// consumer that asked for DLPack 1.0 or later.
pub fn export(py: Python<'_>, bytes: Bytes, owner: Box<dyn Any + Send>, versioned: bool) -> PyResult<Py<PyAny>> {
    let tensor = |shape: *mut i64| Tensor {
        data: bytes.address as *mut c_void,
        device: Device { device_type: bytes.device.0, device_id: bytes.device.1 },
        ndim: 1,
        dtype: DataType { code: UINT, bits: 8, lanes: 1 },
        shape,
        strides: std::ptr::null_mut(), // compact
        byte_offset: 0,
    };
    let (pointer, name) = if versioned {
        let held = Box::into_raw(Box::new(Held {
            managed: ManagedVersioned {
                version: Version { major: 1, minor: 0 },
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete::<ManagedVersioned>),
                flags: 0,
                dl_tensor: tensor(std::ptr::null_mut()),
            },
            shape: bytes.len as i64,
            _owner: owner,
        }));
        // SAFETY: just boxed; the shape lives as long as the tensor that points to it.
        unsafe { (*held).managed.dl_tensor.shape = &raw mut (*held).shape };
        (held.cast::<c_void>(), VERSIONED)
    } else {
        let held = Box::into_raw(Box::new(Held {
            managed: Managed {
                dl_tensor: tensor(std::ptr::null_mut()),
                manager_ctx: std::ptr::null_mut(),
                deleter: Some(delete::<Managed>),
            },
            shape: bytes.len as i64,
            _owner: owner,
        }));
        // SAFETY: as above.
        unsafe { (*held).managed.dl_tensor.shape = &raw mut (*held).shape };
        (held.cast::<c_void>(), LEGACY)
    };
    // SAFETY: `pointer` is a live managed tensor; the destructor deletes it unless taken.
    let capsule = unsafe { ffi::PyCapsule_New(pointer, name.as_ptr(), Some(release_untaken)) };
    if capsule.is_null() {
        // SAFETY: not handed to Python: delete it here.
        unsafe {
            if versioned {
                delete::<ManagedVersioned>(pointer.cast());
            } else {
                delete::<Managed>(pointer.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference that we own.
    Ok(unsafe { Bound::from_owned_ptr(py, capsule) }.unbind())
}
