//! `wirespeed serve` in a Python process: the directory service on our own gRPC server and
//! every data plane, and tables put in sealed shared memory for it (or any server) to send.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use arrow_ipc::CompressionType;
use pyo3::prelude::*;
use wirespeed::Fabric;
use wirespeed_flight::{Advertise, Handler, Server, ServerTls};
use wirespeed_serve::DirService;

use crate::arrow;
use crate::errors;
use crate::wait::interruptible;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FlightServer>()?;
    m.add_function(wrap_pyfunction!(serve_directory, m)?)?;
    m.add_function(wrap_pyfunction!(share_table, m)?)?;
    Ok(())
}

/// A running server; `shutdown` stops it.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct FlightServer {
    server: Mutex<Option<Server>>,
    stopped: Arc<(Mutex<bool>, Condvar)>,
    port: u16,
    planes: Vec<(String, String)>,
}

/// PEM: certificate chain, private key, and the client CA for mutual TLS.
type TlsFiles = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// Who may call a server, and how they reach it.
struct Access {
    password: Option<String>,
    password_over_plaintext: bool,
    tls: Option<ServerTls>,
    advertise: Advertise,
}

impl FlightServer {
    /// Starts `handler` on gRPC at `listen` and, with a key, on `planes` (default: the
    /// server's, which under TLS seals tcp and leaves out ucx).
    fn start(
        py: Python<'_>,
        handler: impl Handler,
        listen: &str,
        key: Option<Vec<u8>>,
        planes: Option<Vec<String>>,
        access: Access,
        handler_threads: usize,
    ) -> PyResult<Self> {
        let mut builder =
            Server::builder(handler).listen(listen).handler_threads(handler_threads).advertise(access.advertise);
        if let Some(planes) = planes {
            let kinds = planes
                .iter()
                .map(|p| {
                    p.parse::<Fabric>().map_err(|_| errors::usage(format!("unknown plane {p:?} ({})", Fabric::names())))
                })
                .collect::<PyResult<Vec<_>>>()?;
            builder = builder.planes(&kinds);
        }
        if let Some(k) = crate::keys::key(key)? {
            builder = builder.key(k);
        }
        if let Some(p) = access.password {
            builder = builder.password(p);
        }
        if access.password_over_plaintext {
            builder = builder.password_over_plaintext();
        }
        if let Some(tls) = access.tls {
            builder = builder.tls(tls);
        }
        let server = py.detach(|| builder.start()).map_err(errors::flight)?;
        let planes = server.planes().into_iter().map(|(k, url)| (k.name().to_string(), url)).collect();
        Ok(FlightServer {
            port: server.addr().map_or(0, |a| a.port()),
            planes,
            server: Mutex::new(Some(server)),
            stopped: Arc::default(),
        })
    }
}

/// The batches of `data` (a Table or any Arrow stream) copied once into one sealed shared
/// region: served over the shm plane, clients on this host map them and nobody copies again.
#[pyfunction]
pub fn share_table<'py>(py: Python<'py>, data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let stream = arrow::stream_from_py(data)?;
    let schema = arrow_array::RecordBatchReader::schema(&stream);
    let batches = stream.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| errors::usage(e.to_string()))?;
    let shared = py.detach(|| wirespeed_flight::share_all(&batches)).map_err(errors::flight)?;
    arrow::table_to_py(py, schema, shared)
}

/// `s` seconds as a Duration (inf: `Duration::MAX`); negative or NaN is a usage error.
fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    if s == f64::INFINITY {
        return Ok(Duration::MAX);
    }
    Duration::try_from_secs_f64(s).map_err(|_| errors::usage(format!("{what} {s}: expected seconds, or None")))
}

/// `wirespeed serve`: the Arrow and Parquet files under `root` as flights, with uploads.
/// `tls`: (certificate chain, private key, client CA for mutual TLS), all PEM.
#[pyfunction]
#[pyo3(signature = (root, listen, key=None, planes=None, password=None, password_over_plaintext=false, tls=None,
                    handler_threads=None, cache_mb=0, advertise=None, compression=None, ticket_ttl=None))]
#[allow(clippy::too_many_arguments)]
pub fn serve_directory(
    py: Python<'_>,
    root: PathBuf,
    listen: String,
    key: Option<Vec<u8>>,
    planes: Option<Vec<String>>,
    password: Option<String>,
    password_over_plaintext: bool,
    tls: Option<TlsFiles>,
    handler_threads: Option<usize>,
    cache_mb: usize,
    advertise: Option<String>,
    compression: Option<String>,
    ticket_ttl: Option<f64>,
) -> PyResult<FlightServer> {
    let codec = match compression.as_deref() {
        None => None,
        Some("lz4") => Some(CompressionType::LZ4_FRAME),
        Some("zstd") => Some(CompressionType::ZSTD),
        Some(other) => return Err(errors::usage(format!("compression {other:?}: expected lz4, zstd or None"))),
    };
    let ttl = match ticket_ttl.map(|s| seconds("ticket_ttl", s)).transpose()? {
        Some(d) if d.is_zero() => return Err(errors::usage("ticket_ttl 0: a ticket must live a while, or take None")),
        ttl => ttl,
    };
    let service = DirService::new(root, cache_mb << 20)
        .and_then(|s| s.compression(codec).ticket_ttl(ttl))
        .map_err(errors::flight)?;
    let tls = tls.map(|(cert_chain, private_key, client_ca)| ServerTls { cert_chain, private_key, client_ca });
    let advertise = advertise.map_or(Advertise::Reached, Advertise::Uri);
    let access = Access { password, password_over_plaintext, tls, advertise };
    let threads = handler_threads.unwrap_or(wirespeed_flight::DEFAULT_HANDLER_THREADS);
    FlightServer::start(py, service, &listen, key, planes, access, threads)
}

#[pymethods]
impl FlightServer {
    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// The data planes served, as (name, listener URL).
    #[getter]
    fn planes(&self) -> Vec<(String, String)> {
        self.planes.clone()
    }

    /// Blocks until `shutdown` (from another thread) or Ctrl-C.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        let stopped = self.stopped.clone();
        interruptible(py, move || {
            let (lock, cv) = &*stopped;
            let mut done = lock.lock().unwrap_or_else(|p| p.into_inner());
            while !*done {
                done = cv.wait(done).unwrap_or_else(|p| p.into_inner());
            }
        })
    }

    /// Stops at once (`deadline` None), or drains: health NOT_SERVING, new calls refused
    /// UNAVAILABLE, and those open given `deadline` seconds (inf: all they need) to finish
    /// before they are cancelled. Returns how many were cancelled.
    #[pyo3(signature = (deadline=None))]
    fn shutdown(&self, py: Python<'_>, deadline: Option<f64>) -> PyResult<usize> {
        let drain = deadline.map(|s| seconds("deadline", s)).transpose()?;
        let server = self.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        let cancelled = py.detach(move || match (server, drain) {
            (Some(server), Some(drain)) => server.shutdown(drain),
            _ => 0,
        });
        let (lock, cv) = &*self.stopped;
        *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
        cv.notify_all();
        Ok(cancelled)
    }
}
