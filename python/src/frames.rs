//! Timeslices built in frame memory from Python: a compute node in this process that places
//! each timeslice contiguously in a frame, on a GPU or in host memory, checks every
//! microslice's CRC there, and hands the frame out. A frame goes to CuPy, PyTorch, JAX or NumPy
//! without a copy (DLPack, `__cuda_array_interface__`, the buffer protocol) and returns to the
//! pool once the frame and every array over it are gone.

use std::ffi::c_int;
use std::sync::Arc;

use pyo3::exceptions::{PyAttributeError, PyBufferError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use wirespeed::Config;
use wirespeed::gpu::Gpu;
use wirespeed_fles::frames::{GpuFrames, HostFrames, gpu_error};
use wirespeed_fles::run::{BuiltFrame, ComputeListener, Frames};

use crate::dlpack;
use crate::errors;
use crate::fles::{NodeOutput, RunSettings, fles_error};

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FrameNode>()?;
    m.add_class::<Frame>()?;
    Ok(())
}

/// A compute node in this process whose timeslices come out as frames.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct FrameNode {
    url: String,
    /// The GPU's number; None for host memory.
    gpu: Option<usize>,
    frames: NodeOutput<Frames>,
}

#[pymethods]
impl FrameNode {
    /// Listens on `listen` as compute node `index`, with `frames` frames of `frame_bytes`
    /// (default: the largest timeslice `settings` make) on GPU `gpu`, or in host memory when
    /// `gpu` is None. `gpu_rings`: the inputs put into rings in the GPU's memory where their
    /// fabric can (shm, ucx), and frames are copied within the GPU.
    #[new]
    #[pyo3(signature = (settings, listen, index=0, key=None, gpu=None, frames=8, frame_bytes=None, gpu_rings=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        settings: RunSettings,
        listen: String,
        index: usize,
        key: Option<Vec<u8>>,
        gpu: Option<usize>,
        frames: usize,
        frame_bytes: Option<usize>,
        gpu_rings: bool,
    ) -> PyResult<Self> {
        let key = crate::keys::required_key(key)?;
        if frames == 0 || frame_bytes == Some(0) {
            return Err(errors::usage("frames and frame_bytes must be at least 1"));
        }
        if gpu_rings && gpu.is_none() {
            return Err(errors::usage("gpu_rings puts the rings in a GPU's memory: give gpu a GPU's number"));
        }
        let s = settings.settings;
        let capacity = frame_bytes.unwrap_or_else(|| s.frame_capacity());
        let started = py.detach(move || -> wirespeed_fles::Result<(String, Frames)> {
            let listener = ComputeListener::bind(&listen, &key, &Config::default())?;
            let url = listener.url().to_string();
            let ready = || Ok(());
            let frames = match gpu {
                None => listener.frames(s, index, ready, HostFrames::new(frames, capacity))?,
                Some(n) => {
                    let device = Gpu::open(n).map_err(gpu_error)?;
                    let memory = GpuFrames::new(&device, frames, capacity, s.inputs)?;
                    let memory = if gpu_rings { memory.with_gpu_rings() } else { memory };
                    listener.frames(s, index, ready, memory)?
                }
            };
            Ok((url, frames))
        });
        let (url, frames) = started.map_err(fles_error)?;
        Ok(FrameNode { url, gpu, frames: NodeOutput::new(frames) })
    }

    /// Where inputs connect.
    #[getter]
    fn url(&self) -> String {
        self.url.clone()
    }

    /// How the bytes travel to frame memory ("rings page-locked in place, copied by DMA", ...).
    #[getter]
    fn path(&self) -> String {
        self.frames.with(Frames::path).unwrap_or_default()
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next frame; StopIteration when the run ends.
    fn __next__(&self, py: Python<'_>) -> PyResult<Frame> {
        self.frames.next(py).map(|built| Frame::new(built, self.gpu))
    }

    /// Waits for the node to end and its frame memory to be freed (let go of every frame and
    /// every array over one first), and gives its summary, as `ComputeNode.finish` does.
    fn finish(&self, py: Python<'_>) -> PyResult<Vec<(&'static str, f64)>> {
        self.frames.finish(py, Frames::finish)
    }
}

/// One timeslice, contiguous in frame memory: its components one after another, each at an
/// aligned offset (`parts`), every microslice's CRC already checked (`check`).
#[pyclass(module = "wirespeed._native", frozen)]
pub struct Frame {
    built: Arc<BuiltFrame>,
    gpu: Option<usize>,
    /// Bytes from the frame's start to its last component's end.
    len: usize,
}

impl Frame {
    fn new(built: BuiltFrame, gpu: Option<usize>) -> Self {
        let len = built.parts.iter().map(|p| p.offset + p.len).max().unwrap_or(0);
        Frame { built: Arc::new(built), gpu, len }
    }

    fn device(&self) -> (i32, i32) {
        match self.gpu {
            Some(n) => (dlpack::CUDA, n as i32),
            None => (dlpack::CPU, 0),
        }
    }
}

#[pymethods]
impl Frame {
    /// The timeslice's index.
    #[getter]
    fn index(&self) -> u64 {
        self.built.index
    }

    /// Each component's (input, offset, bytes, microslices), in input order.
    #[getter]
    fn parts(&self) -> Vec<(usize, usize, usize, u64)> {
        self.built.parts.iter().map(|p| (p.input, p.offset, p.len, p.microslices)).collect()
    }

    /// (microslices checked, microslices whose CRC-32C failed).
    #[getter]
    fn check(&self) -> (u64, u64) {
        (self.built.check.microslices, self.built.check.bad)
    }

    /// Seconds from the timeslice's last component arriving to the frame being complete.
    #[getter]
    fn ready_after(&self) -> f64 {
        self.built.ready_after.as_secs_f64()
    }

    /// The frame's address: a device pointer on a GPU.
    #[getter]
    fn address(&self) -> u64 {
        self.built.address
    }

    /// "cuda:N" or "cpu".
    #[getter]
    fn device_name(&self) -> String {
        self.gpu.map_or_else(|| "cpu".into(), |n| format!("cuda:{n}"))
    }

    fn __len__(&self) -> usize {
        self.len
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        self.device()
    }

    /// A DLPack capsule over the frame's bytes (one-dimensional, uint8): what
    /// `cupy.from_dlpack`, `torch.from_dlpack` and `numpy.from_dlpack` take. The frame is
    /// complete before it is handed out, so no stream need wait.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let _ = stream;
        if copy == Some(true) {
            return Err(PyBufferError::new_err("a frame is shared, not copied: pass copy=None or False"));
        }
        if dl_device.is_some_and(|d| d != self.device()) {
            return Err(PyBufferError::new_err(format!("the frame lies on {}", self.device_name())));
        }
        let bytes = dlpack::Bytes { address: self.built.address, len: self.len, device: self.device() };
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        dlpack::export(py, bytes, Box::new(self.built.clone()), versioned)
    }

    /// CUDA's array interface (version 3), for GPU frames only: the frame as a uint8 vector.
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        if self.gpu.is_none() {
            return Err(PyAttributeError::new_err("a frame in host memory has no __cuda_array_interface__"));
        }
        let d = PyDict::new(py);
        d.set_item("shape", (self.len,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.built.address, false))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        // Complete before it was handed out: nothing to wait for.
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    /// Host frames only: `memoryview(frame)` reads the frame in place.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let frame = slf.get();
        if frame.gpu.is_some() {
            return Err(PyBufferError::new_err("a frame in GPU memory: use DLPack or __cuda_array_interface__"));
        }
        if (flags & pyo3::ffi::PyBUF_WRITABLE) == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("a frame's buffer is read-only"));
        }
        // SAFETY: host frame memory, valid while the frame is out; `obj` keeps this object,
        // and so the frame, alive until the view is released.
        unsafe {
            let ptr = frame.built.address as *mut std::ffi::c_void;
            let ret = pyo3::ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr, frame.len as isize, 1, flags);
            if ret != 0 {
                return Err(PyErr::fetch(slf.py()));
            }
        }
        Ok(())
    }
}
