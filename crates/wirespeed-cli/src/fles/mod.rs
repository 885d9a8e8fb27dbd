//! `wirespeed fles`: timeslice building. `run --local I:C` starts I input and C compute
//! node processes on this host; under `mpirun`, `run --inputs I` makes the first I ranks
//! inputs and the rest compute nodes. `node` is one process of a local run.

mod args;
mod consume;
mod frames;
mod local;
#[cfg(feature = "mpi")]
mod mpi;
mod node;
mod output;
mod plot;
mod report;
mod simulate;
mod sink;

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::{Args, Subcommand};

use args::RunFlags;
use output::Output;
use wirespeed_fles::monitor::SinkSpec;

/// How often a compute node tells its progress.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// A compute node's counts so far, told to `tell(timeslices, bytes)` at most once every
/// `PROGRESS_EVERY`.
struct Progress<F: FnMut(u64, u64)> {
    tell: F,
    timeslices: u64,
    bytes: u64,
    next: std::time::Instant,
}

impl<F: FnMut(u64, u64)> Progress<F> {
    fn new(tell: F) -> Self {
        Progress { tell, timeslices: 0, bytes: 0, next: std::time::Instant::now() + PROGRESS_EVERY }
    }

    /// Counts one more timeslice of `bytes`.
    fn add(&mut self, bytes: u64) {
        self.timeslices += 1;
        self.bytes += bytes;
        let now = std::time::Instant::now();
        if now >= self.next {
            (self.tell)(self.timeslices, self.bytes);
            self.next = now + PROGRESS_EVERY;
        }
    }
}

#[derive(Args)]
pub struct FlesArgs {
    #[command(subcommand)]
    command: FlesCommand,
}

#[derive(Subcommand)]
enum FlesCommand {
    /// Build timeslices: inputs generate microslices, compute nodes gather every input's
    /// contribution to each timeslice and check every CRC.
    Run(RunArgs),
    /// Simulate a run on a cluster in SimGrid: the same nodes and schedulers, every message a
    /// simulated transfer of its true size, the same report.
    Simulate(simulate::SimulateArgs),
    /// Draw a run's report: bandwidth over time, completion times, buffer fill (SVG).
    Plot(plot::PlotArgs),
    /// Take a compute node's timeslices from its `--output shm:NAME`, as FLESnet's tsclient
    /// does, and check every CRC.
    Consume(consume::ConsumeArgs),
    /// One node of a run, started by `run --local`.
    #[command(hide = true)]
    Node(node::NodeArgs),
}

#[derive(Args)]
pub struct RunArgs {
    /// Inputs and compute nodes as processes on this host: I:C.
    #[arg(long, value_parser = local::parse_layout, conflicts_with = "inputs")]
    local: Option<(usize, usize)>,
    /// Under mpirun: the first I ranks are inputs, the others compute nodes.
    #[arg(long)]
    inputs: Option<usize>,
    /// Under mpirun: the file holding the key every rank shares (else WIRESPEED_KEY); each run
    /// derives its own key from it.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Where complete timeslices go: `null` checks every CRC and keeps nothing; `tsa:PATH`
    /// writes FLESnet timeslice archives (`?zstd[=LEVEL]` compressed, `&per-file=N` as a
    /// sequence of files of N timeslices, PATH's %n numbering them) and `arrow:PATH` Arrow IPC
    /// files, one row per microslice: one file per compute node (PATH, or run.0.tsa,
    /// run.1.tsa, ... for run.tsa), each renamed into place once whole; `shm:NAME` serves them
    /// to FLESnet's consumers (`tsclient -i shm:NAME`, fles::TimesliceReceiver), NAME.0,
    /// NAME.1, ... with several compute nodes; `?hold=SECONDS` (10) is how long a consumer
    /// may hold one, `&consumers=N` waits for N consumers before the run starts.
    #[arg(long, default_value = "null")]
    output: Output,
    /// Write the run's figures and time series here, as JSON.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Live metrics, every second, as FLESnet's monitor sinks take them: `influx2:HOST:[PORT]:
    /// [BUCKET]:[TOKEN]` (the token from CBM_INFLUX_TOKEN when left out), `influx1:HOST:PORT:DB`,
    /// `file:PATH` (or file:cout) in InfluxDB's line protocol, or `prometheus:[HOST:]PORT` for a
    /// /metrics endpoint; repeatable. HTTP to other hosts than this one goes over TLS.
    #[arg(long, short = 'm')]
    monitor: Vec<SinkSpec>,
    #[command(flatten)]
    flags: RunFlags,
}

pub fn run(a: FlesArgs) -> Result<()> {
    match a.command {
        FlesCommand::Run(a) => match (a.local, a.inputs) {
            (Some(layout), _) => local::run(layout, &a),
            (None, Some(inputs)) => run_mpi(inputs, &a),
            (None, None) => bail!("say where the nodes run: --local I:C on this host, or --inputs I under mpirun"),
        },
        FlesCommand::Simulate(a) => simulate::run(a),
        FlesCommand::Plot(a) => plot::run(a),
        FlesCommand::Consume(a) => consume::run(a),
        FlesCommand::Node(a) => node::run(a),
    }
}

#[cfg(feature = "mpi")]
fn run_mpi(inputs: usize, a: &RunArgs) -> Result<()> {
    mpi::run(inputs, a)
}

#[cfg(not(feature = "mpi"))]
fn run_mpi(_: usize, _: &RunArgs) -> Result<()> {
    bail!("this wirespeed was built without MPI (cargo feature `mpi`); use --local I:C")
}
