//! One node of a local run: it says where it listens (a compute node) and that it is ready
//! on standard output, waits for "go" on standard input (the run's barrier), runs, and ends
//! with a summary line.

use std::io::{BufRead, Write};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use serde_json::json;
use wirespeed::fabric::AddressKind;
use wirespeed::{Config, Key};
use wirespeed_fles::FlesError;
use wirespeed_fles::run::{ComputeListener, run_input};

use super::args::RunFlags;

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
    #[command(flatten)]
    flags: RunFlags,
}

/// The barrier: ready on stdout, then "go" on stdin.
fn barrier() -> Result<(), FlesError> {
    println!("ready");
    std::io::stdout().flush().map_err(|e| FlesError::Net(format!("stdout: {e}")))?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).map_err(|e| FlesError::Net(format!("stdin: {e}")))?;
    match line.trim() {
        "go" => Ok(()),
        _ => Err(FlesError::Net("the run was called off before it started".into())),
    }
}

pub fn run(a: NodeArgs) -> Result<()> {
    let s = a.flags.settings(a.inputs, a.computes)?;
    let key = Key::require(None)?;
    let config = Config::default();
    let summary = match a.role {
        Role::Compute => {
            let fabric = a.flags.transport;
            let url = match fabric.address_kind() {
                AddressKind::SocketPath => format!("{fabric}://@wirespeed-fles-{}-{}", std::process::id(), a.index),
                AddressKind::HostPort => format!("{fabric}://127.0.0.1:0"),
            };
            let listener = ComputeListener::bind(&url, &key, &config)?;
            println!("listening {}", listener.url());
            let mut crc_checked = 0u64;
            let summary = listener.run(&s, a.index, barrier, |ts| {
                for (i, c) in ts.components.iter().enumerate() {
                    c.verify(i as u16)?;
                    crc_checked += c.len() as u64;
                }
                Ok(())
            })?;
            json!({
                "role": "compute", "index": summary.index, "timeslices": summary.timeslices,
                "bytes": summary.bytes, "seconds": summary.seconds, "microslices_checked": crc_checked,
                "completions": summary.completions, "fill": summary.fill,
                "intervals": summary.intervals.iter().map(|c| (c.interval, c.start, c.duration)).collect::<Vec<_>>(),
            })
        }
        Role::Input => {
            if a.connect.len() != a.computes {
                bail!("--connect names {} compute nodes, not {}", a.connect.len(), a.computes);
            }
            let summary = run_input(&s, a.index, &a.connect, &key, &config, barrier)
                .with_context(|| format!("input {}", a.index))?;
            json!({
                "role": "input", "index": summary.index, "components": summary.components,
                "bytes": summary.bytes, "seconds": summary.seconds, "sent": summary.sent,
            })
        }
    };
    println!("summary {summary}");
    Ok(())
}
