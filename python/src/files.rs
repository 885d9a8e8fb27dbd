//! Files: copies between this and other hosts, and sending to or receiving from another
//! process, as `wirespeed cp`, `send` and `recv` do, with progress reported to a Python
//! callback.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::prelude::*;
use wirespeed::Config;
use wirespeed::fabric::Choice;
use wirespeed_files::fabric_choice;
use wirespeed_files::remote::{self, RemoteCopy, Ssh};
use wirespeed_files::{
    Excludes, Input, Output, Ports, Progress, Report, Server, Side, SinkOptions, SourceOptions, Summary,
};

use crate::errors;
use crate::keys::required_key;
use crate::wait::interruptible_with;

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<CopyOptions>()?;
    m.add_class::<Receiver>()?;
    m.add_function(wrap_pyfunction!(copy, m)?)?;
    m.add_function(wrap_pyfunction!(send_files, m)?)?;
    Ok(())
}

/// The options `cp`, `send` and `recv` share, as the CLI spells them.
#[pyclass(module = "wirespeed._native", frozen, from_py_object)]
#[derive(Clone)]
pub struct CopyOptions {
    source: SourceOptions,
    sink: SinkOptions,
    transport: Choice,
}

#[pymethods]
impl CopyOptions {
    #[new]
    #[pyo3(signature = (recursive=false, preserve=false, resume=false, sync=false, no_clobber=false, delete=false,
        exclude=Vec::new(), transport="auto", streams=None, bwlimit_mb=0.0, compress=None, encrypt=false, direct=false,
        dry_run=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        recursive: bool,
        preserve: bool,
        resume: bool,
        sync: bool,
        no_clobber: bool,
        delete: bool,
        exclude: Vec<String>,
        transport: &str,
        streams: Option<usize>,
        bwlimit_mb: f64,
        compress: Option<i32>,
        encrypt: bool,
        direct: bool,
        dry_run: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        if delete && !recursive {
            return Err(errors::usage("delete=True needs recursive=True"));
        }
        if compress.is_some_and(|l| !(1..=19).contains(&l)) {
            return Err(errors::usage("compress is a zstd level from 1 to 19"));
        }
        let transport = transport.parse::<Choice>().map_err(|e| errors::usage(e.to_string()))?;
        let source = SourceOptions {
            recursive,
            preserve: preserve || sync,
            resume,
            sync,
            no_clobber,
            delete,
            streams: streams.map(|n| n.clamp(1, 64)),
            rate_limit: (bwlimit_mb > 0.0).then_some((bwlimit_mb * 1e6) as u64),
            compress,
            encrypt,
            direct,
            exclude: Excludes::new(&exclude).map_err(errors::files)?,
            dry_run: dry_run.is_some(),
            ..SourceOptions::default()
        };
        // A dry run changes nothing and hands each line the CLI would print to the callable.
        let dry_run = dry_run.map(|list| {
            Report(Arc::new(move |line: &str| {
                Python::attach(|py| {
                    if let Err(e) = list.call1(py, (line,)) {
                        e.write_unraisable(py, None);
                    }
                })
            }))
        });
        let sink = SinkOptions { encrypt, delete, direct, dry_run, ..SinkOptions::default() };
        Ok(CopyOptions { source, sink, transport })
    }
}

/// What a finished transfer covered, as a dict.
fn summary(s: Summary, progress: &Progress) -> Vec<(&'static str, u64)> {
    vec![
        ("files", s.files),
        ("bytes", s.bytes),
        ("kept", s.kept),
        ("kept_bytes", s.kept_bytes),
        ("deleted", s.deleted),
        ("reused_bytes", progress.reused.load(Ordering::Relaxed)),
    ]
}

/// Runs `transfer`, calling `callback(bytes, total, files)` as it goes and once at the end.
fn with_progress(
    py: Python<'_>,
    callback: Option<Py<PyAny>>,
    transfer: impl FnOnce(&Progress) -> wirespeed_files::Result<Summary> + Send + 'static,
) -> PyResult<Vec<(&'static str, u64)>> {
    let progress = Arc::new(Progress::default());
    let report = |py: Python<'_>, progress: &Progress| -> PyResult<()> {
        match &callback {
            Some(f) => f.call1(py, progress.get()).map(drop),
            None => Ok(()),
        }
    };
    let shared = progress.clone();
    let done = interruptible_with(py, move || transfer(&shared), |py| report(py, &progress))?;
    let done = done.map_err(errors::files)?;
    report(py, &progress)?;
    Ok(summary(done, &progress))
}

fn inputs(paths: Vec<PathBuf>, recursive: bool) -> PyResult<Input> {
    wirespeed_files::check_roots(&paths, recursive).map_err(errors::files)?;
    Ok(Input::paths(paths))
}

/// Copies `sources` to `dst`; any may be `[user@]host:path`, where a `wirespeed agent`
/// (`remote_bin`) is started over `ssh`.
#[pyfunction]
#[pyo3(signature = (sources, dst, options, ssh="ssh", remote_bin="wirespeed", ports=None, progress=None))]
#[allow(clippy::too_many_arguments)]
fn copy(
    py: Python<'_>,
    sources: Vec<OsString>,
    dst: OsString,
    options: CopyOptions,
    ssh: &str,
    remote_bin: &str,
    ports: Option<&str>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Vec<(&'static str, u64)>> {
    let config = wirespeed::Config::default();
    let ssh = Ssh::new(ssh, remote_bin, config.peer_timeout).map_err(errors::files)?;
    let agent_extra = match ports {
        Some(p) => {
            let p: Ports = p.parse().map_err(|e| errors::usage(format!("ports {p:?}: {e}")))?;
            vec!["--ports".into(), p.to_string().into()]
        }
        None => Vec::new(),
    };
    with_progress(py, progress, move |p| {
        let how = RemoteCopy {
            ssh: &ssh,
            transport: options.transport,
            config: &config,
            source: &options.source,
            sink: &options.sink,
            agent_extra,
        };
        remote::copy(&sources, &dst, &how, p)
    })
}

/// Sends `paths` to a `Receiver` (or `wirespeed recv`) at `to` (`HOST:PORT`).
#[pyfunction]
#[pyo3(signature = (to, paths, options, key=None, progress=None))]
fn send_files(
    py: Python<'_>,
    to: String,
    paths: Vec<PathBuf>,
    options: CopyOptions,
    key: Option<Vec<u8>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Vec<(&'static str, u64)>> {
    let key = required_key(key)?;
    let input = inputs(paths, options.source.recursive)?;
    with_progress(py, progress, move |p| {
        let conn = fabric_choice::connect(&to, options.transport, &key, &Config::default())?;
        let sent = wirespeed_files::send(&conn, Side::Client, &input, &options.source, p);
        conn.close();
        sent
    })
}

/// Waits for one sender and writes what it sends under a path.
#[pyclass(module = "wirespeed._native", frozen)]
pub struct Receiver {
    server: Arc<Mutex<Server>>,
    port: u16,
    options: CopyOptions,
}

#[pymethods]
impl Receiver {
    #[new]
    #[pyo3(signature = (listen, options, key=None))]
    fn new(py: Python<'_>, listen: String, options: CopyOptions, key: Option<Vec<u8>>) -> PyResult<Self> {
        let key = required_key(key)?;
        let server =
            py.detach(|| Server::bind(&listen, options.transport, &key, &Config::default())).map_err(errors::files)?;
        Ok(Receiver { port: server.port(), server: Arc::new(Mutex::new(server)), options })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.port
    }

    /// Waits up to `timeout` seconds for the sender, then receives into `dst`.
    #[pyo3(signature = (dst, timeout=600.0, progress=None))]
    fn receive(
        &self,
        py: Python<'_>,
        dst: PathBuf,
        timeout: f64,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Vec<(&'static str, u64)>> {
        let wait = Duration::try_from_secs_f64(timeout).map_err(|_| errors::usage(format!("bad timeout {timeout}")))?;
        let (server, sink) = (self.server.clone(), self.options.sink.clone());
        with_progress(py, progress, move |p| {
            let (conn, control) = server.lock().unwrap_or_else(|p| p.into_inner()).accept(wait)?;
            let received = wirespeed_files::receive(&conn, Side::Server(control), &Output::Path(dst), &sink, p);
            conn.close();
            received
        })
    }
}
