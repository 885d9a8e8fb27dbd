//! The `wirespeed` command-line tool.

mod bench;
mod exit;
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
    /// Send a file, a directory (-r) or standard input to a waiting `recv`.
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
    /// Measure transports on this machine.
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Send(args) => tools::send::run(args),
        Command::Recv(args) => tools::recv::run(args),
        Command::Cp(args) => tools::cp::run(args),
        Command::Pipe(args) => tools::pipe::run(args),
        Command::Agent(args) => tools::agent::run(args),
        Command::Stage(args) => tools::stage::run(args),
        Command::Bench(args) => bench::run(args),
    };
    if let Err(e) = result {
        eprintln!("wirespeed: error: {e:#}");
        std::process::exit(exit::code_for(&e));
    }
}
