//! Timeslice building from Python: a compute node in this process whose complete timeslices
//! come out as zero-copy views of its rings (or pyarrow batches), and inputs to feed it.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::{PyBufferError, PyStopIteration};
use pyo3::prelude::*;
use wirespeed_fles::FlesError;
use wirespeed_fles::model::{ComponentView, Slicing, TimeSlicing};
use wirespeed_fles::monitor::{Monitor, SinkSpec};
use wirespeed_fles::node::ring::RingSizes;
use wirespeed_fles::run::{ComputeListener, ComputeSummary, KeptTimeslice, Settings, Timeslices, run_input};
use wirespeed_fles::sched::{DfsSettings, Kind};
use wirespeed_fles::source::pattern::Style;

use crate::arrow;
use crate::errors;
use crate::wait::interruptible;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RunSettings>()?;
    m.add_class::<ComputeNode>()?;
    m.add_class::<Timeslice>()?;
    m.add_class::<Component>()?;
    m.add_function(wrap_pyfunction!(feed, m)?)?;
    Ok(())
}

/// What a timeslice a consumer took says once the next is taken.
pub(crate) const RELEASED: &str = "this timeslice was released when the next was taken: copy what you keep";

pub(crate) fn fles_error(e: FlesError) -> PyErr {
    errors::of_class(e.class(), e.to_string())
}

/// What every node of a run agrees on, as `wirespeed fles run` takes it.
#[pyclass(module = "wirespeed._native", frozen, from_py_object)]
#[derive(Clone)]
pub struct RunSettings {
    pub(crate) settings: Settings,
}

#[pymethods]
impl RunSettings {
    #[new]
    #[pyo3(signature = (inputs, computes=1, scheduler="dfs", timeslices=None, timeslice_size=100, overlap=1,
        microslice_size=650, microslice_spread=0, rate=0.0, buffer_size=33_554_432, descriptors=4096, timeout=30.0,
        interval_length=10_000, pattern="wirespeed", timeslice_duration=None, overlap_before=0, overlap_after=0,
        microslice_duration=100_000, monitor=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        inputs: usize,
        computes: usize,
        scheduler: &str,
        timeslices: Option<u64>,
        timeslice_size: u64,
        overlap: u64,
        microslice_size: u32,
        microslice_spread: u32,
        rate: f64,
        buffer_size: u64,
        descriptors: u64,
        timeout: f64,
        interval_length: u64,
        pattern: &str,
        timeslice_duration: Option<u64>,
        overlap_before: u64,
        overlap_after: u64,
        microslice_duration: u64,
        monitor: Option<Vec<String>>,
    ) -> PyResult<Self> {
        if inputs == 0 || computes == 0 || timeslice_size == 0 || buffer_size == 0 || descriptors == 0 {
            return Err(errors::usage(
                "inputs, computes, timeslice_size, buffer_size and descriptors must be at least 1",
            ));
        }
        if !(rate >= 0.0 && rate.is_finite()) {
            return Err(errors::usage("rate is in GB/s, 0 or more"));
        }
        let scheduler = match scheduler {
            "rr" => Kind::RoundRobin,
            "dfs" => Kind::Dfs(DfsSettings { interval_length, ..DfsSettings::default() }),
            other => return Err(errors::usage(format!("unknown scheduler {other:?} (rr or dfs)"))),
        };
        let pattern = match pattern {
            "wirespeed" => Style::Wirespeed,
            "flesnet" => Style::Flesnet,
            other => return Err(errors::usage(format!("unknown pattern {other:?} (wirespeed or flesnet)"))),
        };
        let timeout =
            Duration::try_from_secs_f64(timeout).map_err(|_| errors::usage(format!("bad timeout {timeout}")))?;
        let settings = Settings {
            inputs,
            computes,
            scheduler,
            slicing: match timeslice_duration {
                None => Slicing::count(timeslice_size, overlap),
                Some(0) => return Err(errors::usage("timeslice_duration is in ns, at least 1")),
                Some(_) if microslice_duration == 0 => {
                    return Err(errors::usage("microslice_duration is in ns, at least 1"));
                }
                Some(duration_ns) => Slicing::time(TimeSlicing {
                    microslice_ns: microslice_duration,
                    duration_ns,
                    before_ns: overlap_before,
                    after_ns: overlap_after,
                }),
            },
            microslice_size,
            microslice_spread: microslice_spread.min(microslice_size),
            pattern,
            replay: None,
            input_rate: rate,
            rings: RingSizes { data: buffer_size, descs: descriptors },
            timeslices,
            timeout,
            corrupt: None,
            stop: Arc::new(AtomicBool::new(false)),
            // Each node of this process sends its points itself, as an MPI rank does.
            monitor: match monitor.unwrap_or_default() {
                sinks if sinks.is_empty() => None,
                sinks => {
                    let specs = sinks.iter().map(|m| m.parse::<SinkSpec>()).collect::<Result<Vec<_>, _>>();
                    Some(Monitor::open(&specs.map_err(fles_error)?).map_err(fles_error)?)
                }
            },
        };
        Ok(RunSettings { settings })
    }

    #[getter]
    fn inputs(&self) -> usize {
        self.settings.inputs
    }

    #[getter]
    fn computes(&self) -> usize {
        self.settings.computes
    }
}

/// Runs input `index` of a run (generated microslices) against the compute nodes at `urls`,
/// until the run's last timeslice is acknowledged; returns (components, bytes) sent.
#[pyfunction]
#[pyo3(signature = (settings, index, urls, key=None))]
fn feed(
    py: Python<'_>,
    settings: RunSettings,
    index: usize,
    urls: Vec<String>,
    key: Option<Vec<u8>>,
) -> PyResult<(u64, u64)> {
    let key = crate::keys::required_key(key)?;
    let s = settings.settings;
    let summary = interruptible(py, move || {
        run_input(&s, index, &urls, &key, &wirespeed_fles::run::connection_config(&s), || Ok(()))
    })?
    .map_err(fles_error)?;
    Ok((summary.components, summary.bytes))
}

/// A compute node in this process: listens, and hands out each complete timeslice in order.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct ComputeNode {
    url: String,
    timeslices: NodeOutput<Timeslices>,
}

#[pymethods]
impl ComputeNode {
    /// Listens on `listen` (`shm://@name`, `tcp://HOST:0`, ...) as compute node `index`.
    #[new]
    #[pyo3(signature = (settings, listen, index=0, key=None))]
    fn new(
        py: Python<'_>,
        settings: RunSettings,
        listen: String,
        index: usize,
        key: Option<Vec<u8>>,
    ) -> PyResult<Self> {
        let key = crate::keys::required_key(key)?;
        let config = wirespeed_fles::run::connection_config(&settings.settings);
        let listener = py.detach(|| ComputeListener::bind(&listen, &key, &config)).map_err(fles_error)?;
        let url = listener.url().to_string();
        let timeslices = listener.timeslices(settings.settings, index, || Ok(())).map_err(fles_error)?;
        Ok(ComputeNode { url, timeslices: NodeOutput::new(timeslices) })
    }

    /// Where inputs connect.
    #[getter]
    fn url(&self) -> String {
        self.url.clone()
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next complete timeslice; StopIteration when the run ends.
    fn __next__(&self, py: Python<'_>) -> PyResult<Timeslice> {
        self.timeslices.next(py).map(Timeslice::new)
    }

    /// Waits for the node to end and gives its summary: timeslices, bytes, seconds, and the
    /// inputs and compute nodes lost.
    fn finish(&self, py: Python<'_>) -> PyResult<Vec<(&'static str, f64)>> {
        self.timeslices.finish(py, Timeslices::finish)
    }
}

/// What a compute node in this process hands out, shared with the helper thread each wait
/// runs on (see [`interruptible`]); taken away when the node finishes.
pub(crate) struct NodeOutput<T>(Arc<Mutex<Option<T>>>);

impl<T> NodeOutput<T>
where
    T: Iterator + Send + 'static,
    T::Item: Send + 'static,
{
    pub(crate) fn new(output: T) -> Self {
        NodeOutput(Arc::new(Mutex::new(Some(output))))
    }

    /// Looks at the output while the node runs.
    pub(crate) fn with<R>(&self, look: impl FnOnce(&T) -> R) -> Option<R> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(look)
    }

    /// The next item, waiting for it; StopIteration once the run (or the node) has ended.
    pub(crate) fn next(&self, py: Python<'_>) -> PyResult<T::Item> {
        let output = self.0.clone();
        let next = interruptible(py, move || output.lock().unwrap_or_else(|p| p.into_inner()).as_mut()?.next())?;
        next.ok_or_else(|| PyStopIteration::new_err(()))
    }

    /// Ends the node, once: waits for `finish` and gives its summary.
    pub(crate) fn finish(
        &self,
        py: Python<'_>,
        finish: fn(T) -> wirespeed_fles::Result<ComputeSummary>,
    ) -> PyResult<Vec<(&'static str, f64)>> {
        let output = self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
        let output = output.ok_or_else(|| errors::usage("the node has finished already"))?;
        let s = interruptible(py, move || finish(output))?.map_err(fles_error)?;
        Ok(summary(&s))
    }
}

/// A compute node's summary as Python gets it: timeslices, bytes, seconds, and the timeslices
/// left incomplete, inputs and compute nodes lost.
pub(crate) fn summary(s: &ComputeSummary) -> Vec<(&'static str, f64)> {
    vec![
        ("timeslices", s.timeslices as f64),
        ("bytes", s.bytes as f64),
        ("seconds", s.seconds),
        ("incomplete", s.incomplete as f64),
        ("lost_inputs", s.lost_inputs.len() as f64),
        ("lost_computes", s.lost_computes.len() as f64),
    ]
}

type Kept = Arc<Mutex<KeptTimeslice>>;

/// A complete timeslice: its components stay in the compute node's rings, whose space comes
/// back once this and every view of it are gone.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct Timeslice {
    kept: Kept,
    index: u64,
    inputs: Vec<usize>,
    incomplete: bool,
}

impl Timeslice {
    fn new(kept: KeptTimeslice) -> Self {
        let (index, inputs, incomplete) = (kept.index, kept.inputs.clone(), kept.incomplete);
        Timeslice { kept: Arc::new(Mutex::new(kept)), index, inputs, incomplete }
    }
}

#[pymethods]
impl Timeslice {
    #[getter]
    fn index(&self) -> u64 {
        self.index
    }

    /// The input of each component, in order.
    #[getter]
    fn inputs(&self) -> Vec<usize> {
        self.inputs.clone()
    }

    /// Whether a lost input's component is missing.
    #[getter]
    fn incomplete(&self) -> bool {
        self.incomplete
    }

    /// Each component (its microslice descriptors, then their contents, as FLESnet lays
    /// them out) as a read-only buffer over the ring: `memoryview(c)` reads it in place.
    fn components(&self) -> Vec<Component> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.components().iter().map(|c| Component::new(c, self.kept.clone(), None)).collect()
    }

    /// Checks every microslice's CRC-32C; raises ChecksumError naming the first that fails.
    fn verify(&self) -> PyResult<()> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        for (input, c) in self.inputs.iter().zip(kept.components()) {
            c.verify(*input as u16).map_err(fles_error)?;
        }
        Ok(())
    }

    /// One pyarrow RecordBatch, a row per microslice: timeslice, component, every descriptor
    /// field, and the content (copied), as `fles run --output arrow:` writes them.
    fn to_arrow<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let batch = {
            let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            let components = kept.components();
            wirespeed_fles::output::arrow::record_batch(self.index, &components, &self.inputs, self.incomplete)
                .map_err(fles_error)?
        };
        arrow::batch_to_py(py, &batch)
    }
}

/// One component of a timeslice, as a buffer; it keeps the timeslice held (or, for one a
/// consumer took, its segment mapped, while `released` says whether the node may reuse it).
#[pyclass(module = "wirespeed._native", frozen)]
pub struct Component {
    ptr: usize,
    bytes: usize,
    /// Microslices.
    len: usize,
    keep: Arc<dyn std::any::Any + Send + Sync>,
    released: Option<Arc<AtomicBool>>,
}

impl Component {
    pub(crate) fn new(
        c: &ComponentView<'_>,
        keep: Arc<dyn std::any::Any + Send + Sync>,
        released: Option<Arc<AtomicBool>>,
    ) -> Self {
        Component { ptr: c.bytes().as_ptr() as usize, len: c.len(), bytes: c.bytes().len(), keep, released }
    }
}

#[pymethods]
impl Component {
    /// Microslices in the component.
    #[getter]
    fn microslices(&self) -> usize {
        self.len
    }

    fn __len__(&self) -> usize {
        self.bytes
    }

    #[getter]
    fn address(&self) -> usize {
        self.ptr
    }

    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut pyo3::ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if (flags & pyo3::ffi::PyBUF_WRITABLE) == pyo3::ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("a timeslice's component is read-only"));
        }
        if slf.get().released.as_ref().is_some_and(|r| r.load(Ordering::SeqCst)) {
            return Err(PyBufferError::new_err(RELEASED));
        }
        let (ptr, len) = (slf.get().ptr, slf.get().bytes);
        let _ = &slf.get().keep; // the ring space stays taken while this object (and so the view) lives
        // SAFETY: the component lies in ring memory the kept timeslice holds; `obj` keeps this
        // object, and so the timeslice, alive until the view is released.
        unsafe {
            let ret = pyo3::ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr as *mut c_void, len as isize, 1, flags);
            if ret != 0 {
                return Err(PyErr::fetch(slf.py()));
            }
        }
        Ok(())
    }
}
