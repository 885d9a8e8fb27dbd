//! `wirespeed fles`: timeslice building. `run --local I:C` starts I input and C compute
//! node processes on this host and reports on the run; `node` is one of those processes.

mod args;
mod local;
mod node;
mod report;

use anyhow::Result;
use clap::{Args, Subcommand};

#[derive(Args)]
pub struct FlesArgs {
    #[command(subcommand)]
    command: FlesCommand,
}

#[derive(Subcommand)]
enum FlesCommand {
    /// Build timeslices: inputs generate microslices, compute nodes gather every input's
    /// contribution to each timeslice and check every CRC.
    Run(local::RunArgs),
    /// One node of a run, started by `run --local`.
    #[command(hide = true)]
    Node(node::NodeArgs),
}

pub fn run(a: FlesArgs) -> Result<()> {
    match a.command {
        FlesCommand::Run(a) => local::run(a),
        FlesCommand::Node(a) => node::run(a),
    }
}
