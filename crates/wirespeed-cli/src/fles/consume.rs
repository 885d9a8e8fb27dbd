//! `wirespeed fles consume NAME`: a consumer of a compute node's `--output shm:NAME`, as
//! FLESnet's `tsclient -i shm:NAME` is: it takes the timeslices it registers for, checks every
//! microslice's CRC-32C, and reports what it took when the node ends the stream.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use wirespeed_fles::ipc::distributor::{Policy, Registration};
use wirespeed_fles::ipc::receiver::TimesliceReceiver;

#[derive(Args)]
pub struct ConsumeArgs {
    /// The node's name, as its `--output shm:NAME` gives it (NAME.0, NAME.1, ... with several
    /// compute nodes).
    name: String,
    /// Take every STRIDE-th timeslice, starting at --offset (FLESnet's stride and offset).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    stride: u64,
    #[arg(long, default_value_t = 0)]
    offset: u64,
    /// What the node keeps for this consumer while it is busy: every timeslice, the newest
    /// only, or none (FLESnet's queue policies).
    #[arg(long, value_enum, default_value_t = Queue::All)]
    queue: Queue,
    /// Consumers of one non-zero group share its timeslices, each going to one of them.
    #[arg(long, default_value_t = 0)]
    group: u64,
    /// Stop after this many timeslices rather than at the end of the stream.
    #[arg(long)]
    count: Option<u64>,
    /// How long to wait for the node to appear, in seconds.
    #[arg(long, default_value_t = 10.0)]
    wait: f64,
}

#[derive(Clone, Copy, ValueEnum)]
enum Queue {
    All,
    Newest,
    Skip,
}

pub fn run(a: ConsumeArgs) -> Result<()> {
    if a.offset >= a.stride {
        bail!("--offset {} must be below --stride {}", a.offset, a.stride);
    }
    let policy = match a.queue {
        Queue::All => Policy::QueueAll,
        Queue::Newest => Policy::PrebufferOne,
        Queue::Skip => Policy::Skip,
    };
    let registration =
        Registration { stride: a.stride, offset: a.offset, policy, group: a.group, name: "wirespeed".into() };
    let wait = Duration::try_from_secs_f64(a.wait).context("--wait takes seconds")?;
    let mut rx =
        TimesliceReceiver::connect(&a.name, registration, wait).with_context(|| format!("attaching to {}", a.name))?;
    let (mut timeslices, mut microslices, mut bytes) = (0u64, 0u64, 0u64);
    let mut started = None;
    while a.count.is_none_or(|n| timeslices < n) {
        let Some(ts) = rx.get().with_context(|| format!("consuming {}", a.name))? else { break };
        started.get_or_insert_with(Instant::now);
        for c in ts.components() {
            c.verify(0).with_context(|| format!("timeslice {}", ts.index()))?;
            microslices += c.len() as u64;
            bytes += c.bytes().len() as u64;
        }
        timeslices += 1;
    }
    let seconds = started.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let rate = if seconds > 0.0 { bytes as f64 / seconds / 1e9 } else { 0.0 };
    println!(
        "{timeslices} timeslices, {microslices} microslices, {bytes} bytes in {seconds:.2} s, {rate:.2} GB/s; every CRC right"
    );
    Ok(())
}
