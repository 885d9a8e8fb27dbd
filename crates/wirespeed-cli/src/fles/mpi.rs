//! `fles run --inputs I` under mpirun (or srun, through Open MPI): MPI only starts the run.
//! Rank 0 picks a nonce from which every rank derives the run's key (the shared key itself
//! never travels); the compute ranks' addresses are all-gathered; a barrier starts the run;
//! rank 0 collects the summaries. The data never goes through MPI.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use mpi::Threading;
use mpi::point_to_point::MatchedReceiveVec;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Destination, Root, Source};
use serde_json::Value;
use wirespeed::{Fabric, Key};
use wirespeed_fles::monitor::{Monitor, SinkSpec};

use super::frames::prepare;
use super::{RunArgs, node, report};

/// How often the first compute node logs its progress.
const PROGRESS_LOG_EVERY: Duration = Duration::from_secs(10);

/// Room for a rank's host (its `host_id`) and a compute node's address in the all-gather.
const HOST_MAX: usize = 128;
const URL_MAX: usize = 256;

/// The first compute node, of those on `hosts`, that this rank cannot reach over `fabric`.
fn first_unreachable(fabric: Fabric, hosts: &[String]) -> Option<usize> {
    hosts.iter().position(|h| !fabric.reachable(Some(h)))
}

/// `s` in a zero-padded slot of `n` bytes.
fn slot(s: &str, n: usize) -> Result<Vec<u8>> {
    if s.len() >= n {
        bail!("{s:?} is longer than the {n} bytes MPI ranks exchange for it");
    }
    let mut b = s.as_bytes().to_vec();
    b.resize(n, 0);
    Ok(b)
}

fn unslot(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.iter().position(|&b| b == 0).unwrap_or(b.len())]).into_owned()
}

pub fn run(inputs: usize, a: &RunArgs) -> Result<()> {
    // Before MPI starts its threads. mpirun passes SIGUSR1 on to every rank.
    let stop = Arc::new(AtomicBool::new(false));
    crate::interrupt::install_winding_down(stop.clone())?;
    let timeout = Duration::from_secs(a.flags.timeout);
    let starting = Watchdog::arm("starting MPI", timeout);
    let (universe, _) = mpi::initialize_with_threading(Threading::Funneled).context("MPI started twice")?;
    drop(starting);
    let world = universe.world();
    match run_rank(inputs, a, &world, timeout, stop) {
        // MPI_Finalize would wait for the other ranks; abort takes the whole job down.
        Err(e) => {
            eprintln!("wirespeed: error: rank {}: {}", world.rank(), crate::exit::one_line(&e));
            world.abort(1);
        }
        // A rank was lost (the job runs under `mpirun --enable-recovery`): MPI_Finalize would
        // wait for it for good, so the process ends without.
        Ok(true) => {
            let _ = std::io::Write::flush(&mut std::io::stdout());
            std::process::exit(0);
        }
        Ok(false) => {}
    }
    Ok(())
}

fn run_rank(
    inputs: usize,
    a: &RunArgs,
    world: &SimpleCommunicator,
    timeout: Duration,
    stop: Arc<AtomicBool>,
) -> Result<bool> {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    if inputs == 0 || inputs >= size {
        bail!("--inputs {inputs} with {size} ranks: there must be at least one input and one compute node");
    }
    let computes = size - inputs;
    let mut s = a.flags.settings(inputs, computes, stop)?;
    // Every rank sends its own points, tagged with its host and index; rank r serves its
    // Prometheus endpoint at the port given plus r.
    if !a.monitor.is_empty() {
        let specs: Vec<SinkSpec> = a.monitor.iter().map(|m| m.for_rank(rank)).collect();
        s.monitor = Some(Monitor::open(&specs)?);
    }
    let base = Key::require(a.key_file.as_deref()).context("every rank needs the same key")?;
    let mut nonce = [0u8; 64];
    if rank == 0 {
        nonce.copy_from_slice(Key::generate()?.1.as_bytes());
    }
    within(timeout, "sharing the run's nonce", || world.process_at_rank(0).broadcast_into(&mut nonce[..]));
    let key = base.derive(&[&b"wirespeed fles run "[..], &nonce].concat());
    let config = wirespeed_fles::run::connection_config(&s);

    // A compute rank makes its frame memory first: a GPU it lacks fails it before it listens.
    let frames = match (rank >= inputs, a.flags.frame_settings(&s)?) {
        (true, Some(f)) => Some(prepare(&f, inputs)?),
        _ => None,
    };
    let listener = match rank.checked_sub(inputs) {
        Some(c) => Some(node::listen(a.flags.transport, c, &node::listen_host(), &key, &config)?),
        None => None,
    };
    // Every rank's host, and each compute rank's address: inputs check that the fabric
    // reaches every compute node before they try, by the core's same-host rule.
    let url = listener.as_ref().map_or("", |l| l.url());
    let mine = [slot(wirespeed::fabric::host_id(), HOST_MAX)?, slot(url, URL_MAX)?].concat();
    let mut all = vec![0u8; mine.len() * size];
    within(timeout, "sharing addresses", || world.all_gather_into(&mine[..], &mut all[..]));
    let (hosts, mut urls): (Vec<String>, Vec<String>) =
        all.chunks(mine.len()).map(|c| (unslot(&c[..HOST_MAX]), unslot(&c[HOST_MAX..]))).unzip();
    let urls = urls.split_off(inputs);
    if rank < inputs
        && let Some(c) = first_unreachable(a.flags.transport, &hosts[inputs..])
    {
        bail!(
            "compute node {c} runs on another host, which --transport {} cannot reach; use ucx, ofi+tcp or tcp",
            a.flags.transport
        );
    }

    let barrier = || {
        within(timeout, "the barrier before the run", || world.barrier());
        Ok(())
    };
    let summary = match listener {
        Some(l) => {
            let c = rank - inputs;
            // The first compute node's progress now and then, as a sign of life in the job's log.
            let started = Instant::now();
            let mut next = PROGRESS_LOG_EVERY;
            let progress = |t: u64, b: u64| {
                if c == 0 && started.elapsed() >= next {
                    let secs = started.elapsed().as_secs_f64();
                    eprintln!("fles: compute node 0 of {computes}: {t} timeslices, {:.2} GB/s", b as f64 / secs / 1e9);
                    next += PROGRESS_LOG_EVERY;
                }
            };
            node::compute(&s, c, l, &a.output.for_compute(c, computes), a.flags.verify, frames, barrier, progress)?
        }
        None => node::input(&s, rank, &urls, &key, &config, barrier)?,
    };
    // Connections close in the background; let them finish before MPI and the process end.
    wirespeed::transport::wait_for_closing();
    s.monitor.iter().for_each(Monitor::close);

    let lost_any = lost_ranks(std::slice::from_ref(&summary), inputs) > 0;
    if rank != 0 {
        world.process_at_rank(0).send(summary.to_string().as_bytes());
        return Ok(lost_any);
    }
    // Every rank ends on its own stall limits or takes the job down, so rank 0 waits for
    // their summaries without one; it polls rather than spinning in MPI on a shared host.
    // A rank the others lost (under `mpirun --enable-recovery`) sends none.
    let mut summaries = vec![summary];
    while summaries.len() + lost_ranks(&summaries, inputs) < size {
        match world.any_process().immediate_matched_probe() {
            Some(probed) => {
                let (bytes, status) = probed.matched_receive_vec::<u8>();
                let v: Value = serde_json::from_slice(&bytes)
                    .with_context(|| format!("rank {}'s summary", status.source_rank()))?;
                summaries.push(v);
            }
            None => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    report::publish(&report::build(a.flags.describe(inputs, computes), &summaries), a.report.as_deref())?;
    Ok(lost_ranks(&summaries, inputs) > 0)
}

/// How many ranks the summaries so far name lost: inputs are ranks 0..I, compute nodes follow.
fn lost_ranks(summaries: &[Value], inputs: usize) -> usize {
    let mut lost = std::collections::BTreeSet::new();
    for s in summaries {
        for (key, first_rank) in [("lost_inputs", 0), ("lost_computes", inputs)] {
            let named = s[key].as_array().into_iter().flatten().filter_map(|v| v.as_u64());
            lost.extend(named.map(|n| n as usize + first_rank));
        }
    }
    lost.len()
}

/// Runs a collective step, ending the process with a clear line if it does not finish in
/// time: MPI has no timeouts, and a rank that never started or died would leave the others
/// blocked for good.
fn within<T>(timeout: Duration, what: &str, step: impl FnOnce() -> T) -> T {
    let _armed = Watchdog::arm(what, timeout);
    step()
}

/// Exits the process unless dropped within the timeout (dropping the sender wakes its thread).
struct Watchdog {
    _disarm: mpsc::Sender<()>,
}

impl Watchdog {
    fn arm(what: &str, timeout: Duration) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        let what = what.to_string();
        std::thread::spawn(move || {
            if let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(timeout) {
                eprintln!(
                    "wirespeed: error: {what}: not every rank got there within {timeout:?} (one did not start, or failed)"
                );
                std::process::exit(1);
            }
        });
        Watchdog { _disarm: tx }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_reaches_only_compute_nodes_on_this_host() {
        let here = wirespeed::fabric::host_id().to_string();
        let hosts = [here.clone(), "another boot/4026531840".into(), here];
        assert_eq!(first_unreachable(Fabric::Shm, &hosts), Some(1));
        assert_eq!(first_unreachable(Fabric::Tcp, &hosts), None);
        assert_eq!(first_unreachable(Fabric::Shm, &hosts[..1]), None);
        assert_eq!(unslot(&slot("abc", 8).unwrap()), "abc");
        assert!(slot("abc", 3).is_err(), "no room for the end");
    }
}
