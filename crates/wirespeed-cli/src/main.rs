//! The `wirespeed` command-line tool.

mod bench;
mod exit;
mod fles;
mod flight;
mod interrupt;
mod tools;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "wirespeed", version, about = "Move bytes between processes and hosts at fabric speed")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Send files, directories (-r) or standard input to a waiting `recv`.
    Send(tools::send::SendArgs),
    /// Wait for one `send` and write what it sends to a file, a directory or standard output.
    Recv(tools::recv::RecvArgs),
    /// Copy files and directories between hosts (remote ends over ssh), verified and resumable.
    Cp(tools::cp::CpArgs),
    /// Run a pipeline of commands across hosts: HOST:'CMD' HOST:'CMD' ...
    Pipe(tools::pipe::PipeArgs),
    /// The remote end of `cp`, started over ssh.
    #[command(hide = true)]
    Agent(tools::agent::AgentArgs),
    /// One stage of `pipe`, started over ssh.
    #[command(hide = true)]
    Stage(tools::stage::StageArgs),
    /// Serve the Arrow and Parquet files under a directory over Arrow Flight (and take uploads).
    Serve(flight::serve::ServeArgs),
    /// Fetch one flight from a Flight server into a file.
    Get(flight::get::GetArgs),
    /// Measure transports on this machine.
    Bench(bench::BenchArgs),
    /// Build timeslices from many inputs on many compute nodes (FLESnet's pattern).
    Fles(fles::FlesArgs),
}

/// Transfers allocate and free buffers of 64 KiB to a few MiB per message. glibc hands those
/// out as fresh mmaps and trims freed heap at once, so every message paid page faults and TLB
/// shoot-downs; keep them on a heap that stays mapped instead.
fn keep_buffers_mapped() {
    // SAFETY: mallopt only changes allocator parameters, before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

fn main() {
    keep_buffers_mapped();
    let cli = Cli::parse_from(flight_benchmark_flags(std::env::args_os()));
    let result = match cli.command {
        Command::Send(args) => tools::send::run(args),
        Command::Recv(args) => tools::recv::run(args),
        Command::Cp(args) => tools::cp::run(args),
        Command::Pipe(args) => tools::pipe::run(args),
        Command::Agent(args) => tools::agent::run(args),
        Command::Stage(args) => tools::stage::run(args),
        Command::Serve(args) => flight::serve::run(args),
        Command::Get(args) => flight::get::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Fles(args) => fles::run(args),
    };
    if let Err(e) = result {
        eprintln!("wirespeed: error: {}", exit::one_line(&e));
        std::process::exit(exit::code_for(&e));
    }
}

/// `bench flight` takes arrow-flight-benchmark's one-dash flags (`-num_streams 4`) as well.
fn flight_benchmark_flags(args: impl Iterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let args: Vec<_> = args.collect();
    if !(args.len() > 2 && args[1] == "bench" && args[2] == "flight") {
        return args;
    }
    args.into_iter()
        .map(|a| match a.to_str().and_then(|s| s.strip_prefix('-')).map(|s| s.split_once('=').unwrap_or((s, ""))) {
            Some((name, value)) if bench::flight::SINGLE_DASH_FLAGS.contains(&name) => {
                let flag = format!("--{}", name.replace('_', "-"));
                if value.is_empty() { flag.into() } else { format!("{flag}={value}").into() }
            }
            _ => a,
        })
        .collect()
}
