//! One node of a run, however it was launched: a compute node listens, gathers timeslices
//! and puts them out; an input connects and sends. Each ends with a summary for the report.
//! `fles node` is such a node started by `run --local`: it says where it listens and that it
//! is ready on standard output, waits for "go" on standard input (the run's barrier), and
//! prints its summary last.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use wirespeed::fabric::AddressKind;
use wirespeed::{Config, Fabric, Key};
use wirespeed_fles::FlesError;
use wirespeed_fles::monitor::Monitor;
use wirespeed_fles::run::{ComputeListener, ComputeSummary, InputSummary, Settings, Timeslice, run_input};

use super::Progress;
use super::args::RunFlags;
use super::args::Verify;
use super::frames::{Prepared, prepare};
use super::output::Output;
use super::sink::Sink;

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Role {
    Input,
    Compute,
}

#[derive(Args)]
pub struct NodeArgs {
    #[arg(long, value_enum)]
    role: Role,
    #[arg(long)]
    index: usize,
    #[arg(long)]
    inputs: usize,
    #[arg(long)]
    computes: usize,
    /// The compute nodes' addresses, in order (inputs).
    #[arg(long, value_delimiter = ',')]
    connect: Vec<String>,
    /// This compute node's own output.
    #[arg(long, default_value = "null")]
    output: Output,
    /// Print live metrics for `run --local` to pass on.
    #[arg(long)]
    metrics: bool,
    #[command(flatten)]
    flags: RunFlags,
}

/// Listens for inputs on `fabric`, at `host` where the fabric takes a host.
pub fn listen(
    fabric: Fabric,
    index: usize,
    host: &str,
    key: &Key,
    config: &Config,
) -> Result<ComputeListener, FlesError> {
    let url = match fabric.address_kind() {
        AddressKind::SocketPath => format!("{fabric}://@wirespeed-fles-{}-{index}", std::process::id()),
        AddressKind::HostPort => format!("{fabric}://{host}:0"),
    };
    ComputeListener::bind(&url, key, config)
}

/// The host inputs reach this one at: `WIRESPEED_FLES_HOST` if set, else the address this
/// host's name resolves to when other hosts can reach it, else loopback.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub fn listen_host() -> String {
    if let Ok(h) = std::env::var("WIRESPEED_FLES_HOST") {
        return h;
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let addrs = std::net::ToSocketAddrs::to_socket_addrs(&(name.trim(), 0)).map(|a| a.collect::<Vec<_>>());
    // The first IPv4 address of this host's name that is not loopback and that we can bind.
    let usable = addrs
        .unwrap_or_default()
        .into_iter()
        .find(|a| a.is_ipv4() && !a.ip().is_loopback() && std::net::TcpListener::bind((a.ip(), 0)).is_ok());
    usable.map_or_else(|| "127.0.0.1".into(), |a| a.ip().to_string())
}

/// Runs a compute node until its last timeslice, putting each out through `output` (checked
/// as `verify` says) or building it in `frames`, and calling `progress(timeslices, bytes)`
/// every second or so.
#[allow(clippy::too_many_arguments)]
pub fn compute(
    s: &Settings,
    index: usize,
    listener: ComputeListener,
    output: &Output,
    verify: Verify,
    frames: Option<Prepared>,
    barrier: impl FnOnce() -> Result<(), FlesError>,
    progress: impl FnMut(u64, u64),
) -> Result<Value> {
    let mut progress = Progress::new(progress);
    if let Some(f) = frames {
        if *output != Output::Null {
            bail!("--gpu keeps the timeslices in frame memory: leave out --output");
        }
        let built = super::frames::compute(s, index, listener, f, barrier, progress)?;
        let mut v = compute_json(&built.summary, built.microslices_checked);
        v["frames"] = built.figures;
        return Ok(v);
    }
    let mut checked = 0u64;
    let bytes = |ts: &Timeslice<'_>| ts.components.iter().map(|c| c.bytes().len() as u64).sum::<u64>();
    if let Output::Shm(shm) = output {
        // The consumers check what they take; the node only counts.
        let summary = listener
            .publish(s, index, barrier, shm, |ts| progress.add(bytes(ts)))
            .with_context(|| format!("compute node {index}, publishing as {}", shm.name))?;
        return Ok(compute_json(&summary, 0));
    }
    let mut sink = Sink::open(output, s.slicing, verify)?;
    let summary = listener
        .run(s, index, barrier, |ts| {
            checked += sink.write(ts)?;
            progress.add(bytes(ts));
            Ok(())
        })
        .with_context(|| format!("compute node {index}"))?;
    sink.finish()?;
    Ok(compute_json(&summary, checked))
}

/// A compute node's summary as the report reads it.
pub(super) fn compute_json(summary: &ComputeSummary, checked: u64) -> Value {
    json!({
        "role": "compute", "index": summary.index, "timeslices": summary.timeslices,
        "bytes": summary.bytes, "seconds": summary.seconds, "microslices_checked": checked,
        "completions": summary.completions, "slowest_ns": summary.slowest, "fill": summary.fill,
        "incomplete": summary.incomplete, "lost_inputs": summary.lost_inputs,
        "lost_computes": summary.lost_computes,
        "intervals": summary.intervals.iter().map(|c| (c.interval, c.start, c.duration)).collect::<Vec<_>>(),
    })
}

/// Runs an input until its last timeslice is acknowledged.
pub fn input(
    s: &Settings,
    index: usize,
    urls: &[String],
    key: &Key,
    config: &Config,
    barrier: impl FnOnce() -> Result<(), FlesError>,
) -> Result<Value> {
    let summary = run_input(s, index, urls, key, config, barrier).with_context(|| format!("input {index}"))?;
    Ok(input_json(&summary))
}

/// An input's summary as the report reads it.
pub(super) fn input_json(summary: &InputSummary) -> Value {
    json!({
        "role": "input", "index": summary.index, "components": summary.components,
        "bytes": summary.bytes, "seconds": summary.seconds, "sent": summary.sent,
        "lost_computes": summary.lost_computes,
    })
}

/// The barrier: ready on stdout, then "go" on stdin.
fn barrier() -> Result<(), FlesError> {
    println!("ready");
    std::io::stdout().flush().map_err(|e| FlesError::Io { what: "stdout".into(), source: e.into() })?;
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| FlesError::Io { what: "stdin".into(), source: e.into() })?;
    match line.trim() {
        "go" => Ok(()),
        _ => Err(FlesError::CalledOff),
    }
}

pub fn run(a: NodeArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    crate::interrupt::install_winding_down(stop.clone())?;
    let mut s = a.flags.settings(a.inputs, a.computes, stop)?;
    if a.metrics {
        s.monitor = Some(Monitor::to_parent()?);
    }
    let key = Key::require(None)?;
    let config = wirespeed_fles::run::connection_config(&s);
    let summary = match a.role {
        Role::Compute => {
            let frames = a.flags.frame_settings(&s)?.map(|f| prepare(&f, s.inputs)).transpose()?;
            let listener = listen(a.flags.transport, a.index, "127.0.0.1", &key, &config)?;
            println!("listening {}", listener.url());
            let progress = |t, b| println!("progress {t} {b}");
            compute(&s, a.index, listener, &a.output, a.flags.verify, frames, barrier, progress)?
        }
        Role::Input => {
            if a.connect.len() != a.computes {
                bail!("--connect names {} compute nodes, not {}", a.connect.len(), a.computes);
            }
            input(&s, a.index, &a.connect, &key, &config, barrier)?
        }
    };
    // Connections close in the background; let them finish before the process exits.
    wirespeed::transport::wait_for_closing();
    // The last points before the summary, which ends what the launcher reads.
    s.monitor.iter().for_each(Monitor::close);
    println!("summary {summary}");
    Ok(())
}
