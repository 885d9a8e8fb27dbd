//! wirespeed's own connections and streams: `listen`, `connect`, and messages whose bodies
//! are sent straight from any bytes-like object and received as read-only buffers over the
//! transport's memory.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};
use wirespeed::{Buf, Config, Connection, Listener, Stream};

use crate::errors;
use crate::keys::required_key;
use crate::wait::interruptible;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyListener>()?;
    m.add_class::<PyConnection>()?;
    m.add_class::<PyStream>()?;
    m.add_class::<Body>()?;
    m.add_function(wrap_pyfunction!(listen, m)?)?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    Ok(())
}

fn config(timeout: Option<f64>) -> PyResult<Config> {
    let mut config = Config { max_chunk: 8 << 20, shm_ring_bytes: 64 << 20, shm_ring_areas: 16, ..Config::default() };
    if let Some(t) = timeout {
        config.timeout = Duration::try_from_secs_f64(t).map_err(|_| errors::usage(format!("bad timeout {t}")))?;
    }
    Ok(config)
}

/// Listens on `url` (`tcp://HOST:PORT`, `shm://PATH`, `ucx://HOST:PORT`, `ofi+tcp://…`).
#[pyfunction]
#[pyo3(signature = (url, key=None, timeout=None))]
fn listen(py: Python<'_>, url: String, key: Option<Vec<u8>>, timeout: Option<f64>) -> PyResult<PyListener> {
    let (key, config) = (required_key(key)?, config(timeout)?);
    let listener = py.detach(|| wirespeed::listen(&url, &key, &config)).map_err(errors::transport)?;
    Ok(PyListener { url: listener.url().to_string(), listener: Arc::new(Mutex::new(listener)) })
}

/// Connects to `url` and proves it holds `key`.
#[pyfunction]
#[pyo3(signature = (url, key=None, timeout=None))]
fn connect(py: Python<'_>, url: String, key: Option<Vec<u8>>, timeout: Option<f64>) -> PyResult<PyConnection> {
    let (key, config) = (required_key(key)?, config(timeout)?);
    let conn = interruptible(py, move || wirespeed::connect(&url, &key, &config))?.map_err(errors::transport)?;
    Ok(PyConnection { conn: Arc::new(conn) })
}

fn wait_for(timeout: Option<f64>) -> PyResult<Duration> {
    let t = timeout.unwrap_or(3600.0);
    Duration::try_from_secs_f64(t).map_err(|_| errors::usage(format!("bad timeout {t}")))
}

#[pyclass(module = "wirespeed._native", name = "Listener", frozen)]
pub struct PyListener {
    listener: Arc<Mutex<Listener>>,
    url: String,
}

#[pymethods]
impl PyListener {
    #[getter]
    fn url(&self) -> String {
        self.url.clone()
    }

    /// The next authenticated connection; peers that fail the handshake are turned away.
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<PyConnection> {
        let (listener, timeout) = (self.listener.clone(), wait_for(timeout)?);
        let conn =
            interruptible(py, move || listener.lock().unwrap_or_else(|p| p.into_inner()).accept_timeout(timeout))?
                .map_err(errors::transport)?;
        Ok(PyConnection { conn: Arc::new(conn) })
    }
}

#[pyclass(module = "wirespeed._native", name = "Connection", frozen)]
pub struct PyConnection {
    conn: Arc<Connection>,
}

#[pymethods]
impl PyConnection {
    #[getter]
    fn peer(&self) -> String {
        self.conn.peer().to_string()
    }

    fn open_stream(&self, py: Python<'_>) -> PyResult<PyStream> {
        let stream = py.detach(|| self.conn.open_stream()).map_err(errors::transport)?;
        Ok(PyStream { stream: Arc::new(stream) })
    }

    #[pyo3(signature = (timeout=None))]
    fn accept_stream(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<PyStream> {
        let (conn, timeout) = (self.conn.clone(), wait_for(timeout)?);
        let stream = interruptible(py, move || conn.accept_stream_timeout(timeout))?.map_err(errors::transport)?;
        Ok(PyStream { stream: Arc::new(stream) })
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.conn.close());
    }
}

#[pyclass(module = "wirespeed._native", name = "Stream", frozen)]
pub struct PyStream {
    stream: Arc<Stream>,
}

#[pymethods]
impl PyStream {
    #[getter]
    fn id(&self) -> u32 {
        self.stream.id()
    }

    /// Sends one message: `body` is any bytes-like object, or a list of them sent as one body
    /// without joining them; none is copied first.
    #[pyo3(signature = (body, header=None))]
    fn send(&self, py: Python<'_>, body: &Bound<'_, PyAny>, header: Option<Vec<u8>>) -> PyResult<()> {
        let parts: Vec<Bound<'_, PyAny>> = match body.is_instance_of::<PyList>() || body.is_instance_of::<PyTuple>() {
            true => body.try_iter()?.collect::<PyResult<_>>()?,
            false => vec![body.clone()],
        };
        let buffers = parts.iter().map(PyBuffer::<u8>::get).collect::<PyResult<Vec<_>>>()?;
        if let Some(b) = buffers.iter().find(|b| !b.is_c_contiguous()) {
            return Err(errors::usage(format!("a body part of {} bytes is not contiguous", b.len_bytes())));
        }
        // SAFETY: each buffer stays acquired (and its memory alive) until this call returns.
        let slices: Vec<&[u8]> = buffers
            .iter()
            .map(|b| unsafe { std::slice::from_raw_parts(b.buf_ptr() as *const u8, b.len_bytes()) })
            .collect();
        let header = header.unwrap_or_default();
        let stream = &self.stream;
        let sent = py.detach(|| stream.send(&header, &slices));
        drop(slices);
        drop(buffers);
        sent.map_err(errors::transport)
    }

    /// The next message as (header bytes, body buffer); None once the peer finished. Waits
    /// as long as the connection's timeout.
    fn recv<'py>(&self, py: Python<'py>) -> PyResult<Option<(Bound<'py, PyBytes>, Body)>> {
        let stream = self.stream.clone();
        let message = interruptible(py, move || stream.recv_contiguous())?.map_err(errors::transport)?;
        Ok(message.map(|m| (PyBytes::new(py, &m.header), Body { buf: m.body.into_contiguous() })))
    }

    /// Ends this side of the stream; the peer's recv then returns None.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.stream.finish()).map_err(errors::transport)
    }
}

/// A received body: read-only, contiguous, in the transport's memory where it arrived in one
/// piece. `memoryview(body)` reads it in place; the memory is released when the last view of
/// it goes.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct Body {
    buf: Buf,
}

#[pymethods]
impl Body {
    fn __len__(&self) -> usize {
        self.buf.len()
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.buf)
    }

    /// The address of the first byte, to check where a body lies.
    #[getter]
    fn address(&self) -> usize {
        self.buf.as_ptr() as usize
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if (flags & pyo3::ffi::PyBUF_WRITABLE) == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("a received body is read-only"));
        }
        let (ptr, len) = (slf.get().buf.as_ptr(), slf.get().buf.len());
        // SAFETY: `view` is the caller's to fill; the exporter (this object) is kept alive by
        // the reference stored in `obj` until the view is released.
        unsafe {
            let ret = pyo3::ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                ptr as *mut c_void,
                len as pyo3::ffi::Py_ssize_t,
                1,
                flags,
            );
            if ret != 0 {
                return Err(PyErr::fetch(slf.py()));
            }
        }
        Ok(())
    }
}
