//! `wirespeed fles consume NAME`: a consumer of a compute node's `--output shm:NAME`, as
//! FLESnet's `tsclient -i shm:NAME` is: it takes the timeslices it registers for, checks every
//! microslice's CRC-32C, and reports what it took when the node ends the stream. FLESnet's
//! protocol hands a worker one timeslice at a time, so `--workers N` attaches N of them as one
//! group, sharing the timeslices, to keep the next one coming while one is checked.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use wirespeed_fles::consumers::distributor::{Policy, Registration};
use wirespeed_fles::consumers::receiver::TimesliceReceiver;

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
    /// Workers (connections, each on a thread of its own) sharing the timeslices as one group.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    workers: u64,
    /// Stop after this many timeslices (per worker) rather than at the end of the stream.
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

/// What one worker took.
#[derive(Default)]
struct Took {
    timeslices: u64,
    microslices: u64,
    bytes: u64,
    first: Option<Instant>,
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
    // Several workers share the timeslices as a group: theirs, unless one was given.
    let group = if a.group == 0 && a.workers > 1 { u64::from(std::process::id()) } else { a.group };
    let registration = Registration { stride: a.stride, offset: a.offset, policy, group, name: "wirespeed".into() };
    let wait = Duration::try_from_secs_f64(a.wait).context("--wait takes seconds")?;
    let took: Vec<Result<Took>> = std::thread::scope(|scope| {
        let workers: Vec<_> =
            (0..a.workers).map(|_| scope.spawn(|| take(&a.name, registration.clone(), wait, a.count))).collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| bail!("a worker panicked"))).collect()
    });
    let mut all = Took::default();
    for t in took {
        let t = t?;
        all.timeslices += t.timeslices;
        all.microslices += t.microslices;
        all.bytes += t.bytes;
        all.first = all.first.into_iter().chain(t.first).min();
    }
    let seconds = all.first.map_or(0.0, |t| t.elapsed().as_secs_f64());
    let rate = if seconds > 0.0 { all.bytes as f64 / seconds / 1e9 } else { 0.0 };
    let Took { timeslices, microslices, bytes, .. } = all;
    println!(
        "{timeslices} timeslices, {microslices} microslices, {bytes} bytes in {seconds:.2} s, {rate:.2} GB/s; every CRC right"
    );
    Ok(())
}

/// One worker's loop: take, check, until the end of the stream (or `count`).
fn take(name: &str, registration: Registration, wait: Duration, count: Option<u64>) -> Result<Took> {
    let mut rx =
        TimesliceReceiver::connect(name, registration, wait).with_context(|| format!("attaching to {name}"))?;
    let mut took = Took::default();
    while count.is_none_or(|n| took.timeslices < n) {
        let Some(ts) = rx.get().with_context(|| format!("consuming {name}"))? else { break };
        took.first.get_or_insert_with(Instant::now);
        for c in ts.components() {
            c.verify(0).with_context(|| format!("timeslice {}", ts.index()))?;
            took.microslices += c.len() as u64;
            took.bytes += c.bytes().len() as u64;
        }
        took.timeslices += 1;
    }
    Ok(took)
}
