//! A consumer of a compute node's `--output shm:NAME` from Python, as FLESnet's
//! `fles::TimesliceReceiver` is one in C++: iterating takes one timeslice after another as
//! views into the node's shared memory. Taking the next releases the one before, so the
//! node may reuse its space; a released timeslice refuses new views (copy what you keep).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use wirespeed_fles::consumers::distributor::{Policy, Registration};
use wirespeed_fles::consumers::receiver::{Taken, TimesliceReceiver};
use wirespeed_fles::model::ComponentView;

use crate::errors;
use crate::fles::{Component, RELEASED, fles_error};
use crate::wait::interruptible;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Receiver>()?;
    m.add_class::<TakenTimeslice>()?;
    Ok(())
}

/// The receiver, and the released flag of the timeslice it handed out last.
struct State {
    receiver: TimesliceReceiver,
    last: Option<Arc<AtomicBool>>,
}

#[pyclass(module = "wirespeed._native", name = "TimesliceReceiver", frozen)]
pub struct Receiver {
    state: Arc<Mutex<Option<State>>>,
}

#[pymethods]
impl Receiver {
    #[new]
    #[allow(clippy::too_many_arguments)] // Python's keyword arguments
    #[pyo3(signature = (name, *, stride = 1, offset = 0, queue = "all", group = 0, client = "python", wait = 10.0))]
    fn new(
        py: Python<'_>,
        name: String,
        stride: u64,
        offset: u64,
        queue: &str,
        group: u64,
        client: &str,
        wait: f64,
    ) -> PyResult<Self> {
        let policy = match queue {
            "all" => Policy::QueueAll,
            "newest" => Policy::PrebufferOne,
            "skip" => Policy::Skip,
            other => return Err(errors::usage(format!("queue={other:?}: expected \"all\", \"newest\" or \"skip\""))),
        };
        if stride == 0 || offset >= stride || client.is_empty() {
            return Err(errors::usage("stride must be positive, offset below it, and client not empty"));
        }
        let wait = Duration::try_from_secs_f64(wait).map_err(|_| errors::usage("wait is a number of seconds"))?;
        let registration = Registration { stride, offset, policy, group, name: client.to_string() };
        let receiver = interruptible(py, move || TimesliceReceiver::connect(&name, registration, wait))?;
        let receiver = receiver.map_err(fles_error)?;
        Ok(Receiver { state: Arc::new(Mutex::new(Some(State { receiver, last: None }))) })
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next timeslice, releasing the one before; StopIteration at the end of the stream.
    fn __next__(&self, py: Python<'_>) -> PyResult<TakenTimeslice> {
        let state = self.state.clone();
        let taken = interruptible(py, move || {
            let mut guard = state.lock().unwrap_or_else(|p| p.into_inner());
            let Some(s) = guard.as_mut() else { return Ok(None) };
            if let Some(last) = s.last.take() {
                last.store(true, Ordering::SeqCst);
            }
            // SAFETY: the timeslice handed out before is marked released above, so no new view
            // of it is made; views already made are the caller's to drop (see the module).
            let taken = unsafe { s.receiver.take() }?;
            let released = Arc::new(AtomicBool::new(false));
            s.last = Some(released.clone());
            Ok(taken.map(|t| (t, released)))
        })?;
        match taken.map_err(fles_error)? {
            Some((taken, released)) => Ok(TakenTimeslice { taken: Arc::new(taken), released }),
            None => Err(PyStopIteration::new_err(())),
        }
    }

    /// Detaches: the node gets back whatever this consumer holds.
    fn close(&self) {
        if let Some(s) = self.state.lock().unwrap_or_else(|p| p.into_inner()).take() {
            s.last.inspect(|l| l.store(true, Ordering::SeqCst));
        }
    }
}

/// A timeslice a consumer took: FLESnet's descriptor fields and its components in place.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct TakenTimeslice {
    taken: Arc<Taken>,
    released: Arc<AtomicBool>,
}

impl TakenTimeslice {
    fn views(&self) -> PyResult<Vec<ComponentView<'_>>> {
        if self.released.load(Ordering::SeqCst) {
            return Err(errors::usage(RELEASED));
        }
        let t = &self.taken;
        (0..t.components.len()).map(|c| ComponentView::new(t.bytes(c), t.components[c].2).map_err(fles_error)).collect()
    }
}

#[pymethods]
impl TakenTimeslice {
    #[getter]
    fn index(&self) -> u64 {
        self.taken.descriptor.index
    }

    #[getter]
    fn start_time(&self) -> u64 {
        self.taken.descriptor.start_time
    }

    #[getter]
    fn duration(&self) -> u64 {
        self.taken.descriptor.duration
    }

    #[getter]
    fn flags(&self) -> u32 {
        self.taken.descriptor.flags
    }

    #[getter]
    fn num_core_microslices(&self) -> u32 {
        self.taken.descriptor.num_core_microslices
    }

    /// Whether the next timeslice has been taken, so that this one's space is the node's again.
    #[getter]
    fn released(&self) -> bool {
        self.released.load(Ordering::SeqCst)
    }

    /// Each component as a read-only buffer in the node's shared memory.
    fn components(&self) -> PyResult<Vec<Component>> {
        let keep: Arc<dyn std::any::Any + Send + Sync> = self.taken.clone();
        Ok(self.views()?.iter().map(|c| Component::new(c, keep.clone(), Some(self.released.clone()))).collect())
    }

    /// Checks every microslice's CRC-32C; raises ChecksumError naming the first that fails.
    fn verify(&self) -> PyResult<()> {
        for (c, view) in self.views()?.iter().enumerate() {
            view.verify(c as u16).map_err(fles_error)?;
        }
        Ok(())
    }
}
