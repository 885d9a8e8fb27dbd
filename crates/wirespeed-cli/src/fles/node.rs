//! One node of a local run: it says where it listens (a compute node) and that it is ready
//! on standard output, waits for "go" on standard input (the run's barrier), runs, and ends
//! with a summary line.

use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use serde_json::json;
use wirespeed::fabric::AddressKind;
use wirespeed::{Config, Key};
use wirespeed_fles::FlesError;
use wirespeed_fles::output::{StoredTimeslice, TsaWriter};
use wirespeed_fles::run::{ComputeListener, Timeslice, run_input};

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
    /// Write complete timeslices to this FLESnet archive (compute nodes).
    #[arg(long)]
    tsa: Option<PathBuf>,
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
            let mut archive = a.tsa.as_deref().map(Archive::create).transpose()?;
            let summary = listener.run(&s, a.index, barrier, |ts| {
                for (i, c) in ts.components.iter().enumerate() {
                    c.verify(i as u16)?;
                    crc_checked += c.len() as u64;
                }
                match &mut archive {
                    Some(w) => w.write(ts, s.slicing.core),
                    None => Ok(()),
                }
            })?;
            if let Some(w) = archive {
                w.finish()?;
            }
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

/// A timeslice archive being written under a hidden name, renamed into place only once the
/// run ends well: a half-written archive never looks complete.
struct Archive {
    writer: TsaWriter<BufWriter<File>>,
    part: PathBuf,
    path: PathBuf,
}

impl Archive {
    fn create(path: &Path) -> Result<Self, FlesError> {
        let name = path.file_name().ok_or_else(|| FlesError::Archive(format!("{} names no file", path.display())))?;
        let part = path.with_file_name(format!(".{}.part", name.to_string_lossy()));
        let io = |e: std::io::Error| FlesError::Archive(format!("{}: {e}", part.display()));
        let file = File::create(&part).map_err(io)?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let user = std::env::var("USER").unwrap_or_default();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let writer = TsaWriter::new(BufWriter::new(file), now, host.trim(), &user).map_err(io)?;
        Ok(Archive { writer, part, path: path.to_path_buf() })
    }

    fn write(&mut self, ts: &Timeslice<'_>, core: u64) -> Result<(), FlesError> {
        let start_time = ts.components.first().and_then(|c| c.descriptor(0).ok()).map_or(0, |d| d.idx);
        let stored = StoredTimeslice {
            index: ts.index,
            start_time,
            duration: 0,
            flags: 0,
            ts_pos: 0,
            num_core_microslices: core as u32,
            components: ts.components.iter().map(|c| (c.bytes(), c.len() as u64)).collect(),
        };
        self.writer.write(&stored).map_err(|e| FlesError::Archive(format!("{}: {e}", self.part.display())))
    }

    fn finish(self) -> Result<(), FlesError> {
        let io = |e: std::io::Error| FlesError::Archive(format!("{}: {e}", self.part.display()));
        let file = self.writer.finish().map_err(io)?.into_inner().map_err(|e| io(e.into_error()))?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&self.part, &self.path).map_err(io)
    }
}
