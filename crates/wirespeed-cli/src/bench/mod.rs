//! `wirespeed bench`: raw transport throughput and latency, and reference figures.

pub mod flight;
mod gpu;
mod memcpy;
mod raw;
mod report;

use clap::{Args, Subcommand};

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    what: Bench,
}

#[derive(Subcommand)]
enum Bench {
    /// Send N messages of SIZE bytes to a receiver in a separate process on loopback.
    Raw(raw::RawArgs),
    /// The receiving side of `bench raw` (started by it).
    #[command(hide = true)]
    RawServer(raw::ServerArgs),
    /// Arrow Flight DoGet or DoPut over gRPC or a data plane (arrow-flight-benchmark's flags).
    Flight(flight::FlightArgs),
    /// The perf server `bench flight` talks to (started by it unless -server_host is given).
    FlightServer(flight::FlightServerArgs),
    /// Timeslices built in GPU memory: the host-to-device limit, then 1 to 8 inputs feeding
    /// one compute node over each transport.
    Gpu(gpu::GpuArgs),
    /// Single-core memcpy speed, the ceiling for one-copy transports.
    Memcpy(memcpy::MemcpyArgs),
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    match args.what {
        Bench::Raw(a) => raw::run(a),
        Bench::RawServer(a) => raw::serve(a),
        Bench::Flight(a) => flight::run(a),
        Bench::FlightServer(a) => flight::serve(a),
        Bench::Memcpy(a) => memcpy::run(a),
        Bench::Gpu(a) => gpu::run(a),
    }
}
