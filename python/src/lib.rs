//! The native half of the `wirespeed` Python package. The pure-Python layer (`wirespeed/`)
//! gives it pyarrow's shapes; this half moves the bytes, with the GIL released while it waits.
//!
//! - `errors`: the typed Rust errors raised as the package's exception classes.
//! - `keys`: keys as Python gives them.
//! - `wait`: blocking calls that release the GIL and give way to Ctrl-C.
//! - `arrow`: Arrow data in and out through the C data and stream interfaces (no copies).
//! - `flight_client`, `flight_server`: Flight's data planes, as `wirespeed.flight` uses them
//!   beside pyarrow's gRPC; `flight_calls`: the Flight RPCs pyarrow's client lacks; `serve`: the `wirespeed serve` service in this process.
//! - `core`: connections and streams; `files`: copies and transfers of files; `fles`:
//!   timeslice building; `frames`: timeslices built in GPU (or host) frames, handed over by
//!   `dlpack` or CUDA's array interface.

mod arrow;
mod core;
mod dlpack;
mod errors;
mod files;
mod fles;
mod fles_receiver;
mod flight_calls;
mod flight_client;
mod flight_server;
mod frames;
mod keys;
mod put;
mod serve;
mod wait;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(errors::_error_classes, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_flight_classes, m)?)?;
    core::register(m)?;
    files::register(m)?;
    fles::register(m)?;
    fles_receiver::register(m)?;
    frames::register(m)?;
    flight_calls::register(m)?;
    flight_client::register(m)?;
    flight_server::register(m)?;
    serve::register(m)?;
    Ok(())
}
