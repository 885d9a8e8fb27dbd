//! The `wirespeed` command-line tool.

mod bench;
mod exit;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "wirespeed", version, about = "Move bytes between processes and hosts at fabric speed")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Measure transports on this machine.
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
    };
    if let Err(e) = result {
        eprintln!("wirespeed: error: {e:#}");
        std::process::exit(exit::code_for(&e));
    }
}
