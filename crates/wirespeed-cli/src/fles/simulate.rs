//! `wirespeed fles simulate`: the same inputs, compute nodes and schedulers as `fles run`, on a
//! simulated cluster in SimGrid, with the same report.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde_json::{Value, json};
use wirespeed_fles::node::RingSizes;
use wirespeed_fles::sim::{Platform, Progress, SimEvent, SimSettings, simulate};

use super::args::SchedulerFlags;
use super::{node, report};

#[derive(Args)]
pub struct SimulateArgs {
    /// xc40 (Cray XC40, Aries dragonfly), fat-tree (InfiniBand EDR), switch:BANDWIDTH:LATENCY
    /// (one switch, as switch:10GBps:1us) or a SimGrid platform file (.xml).
    #[arg(long, default_value = "xc40")]
    platform: Platform,
    /// Nodes: half inputs, half compute nodes.
    #[arg(long, conflicts_with_all = ["inputs", "computes"])]
    nodes: Option<usize>,
    #[arg(long, requires = "computes")]
    inputs: Option<usize>,
    #[arg(long, requires = "inputs")]
    computes: Option<usize>,
    #[command(flatten)]
    scheduling: SchedulerFlags,
    /// Timeslices to build.
    #[arg(long, default_value_t = 1000)]
    timeslices: u64,
    /// Bytes per component (the seed's micro-timeslices are 64 KiB).
    #[arg(long, default_value_t = 64 << 10)]
    component_size: u64,
    /// Component sizes vary evenly by up to this many bytes either way.
    #[arg(long, default_value_t = 0)]
    component_spread: u64,
    /// Seed of the sizes' variation.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Data ring per input at each compute node, in bytes.
    #[arg(long, default_value_t = 32 << 20)]
    buffer_size: u64,
    /// Descriptor ring per input at each compute node, in components.
    #[arg(long, default_value_t = 4096)]
    descriptors: u64,
    /// Each input's data rate in GB/s; 0: as fast as the run takes it.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Microseconds a compute node works on each complete timeslice before releasing it.
    #[arg(long, default_value_t = 0.0)]
    process_us: f64,
    /// Components an input has in flight at once (its NIC's send queue).
    #[arg(long, default_value_t = 8)]
    in_flight: usize,
    /// drop:FROM-TO:SHARE[:LINKS] (links whose names hold LINKS lose SHARE of their bandwidth
    /// from FROM to TO simulated seconds) or off:input|compute:N@SECONDS; repeatable.
    #[arg(long = "event")]
    events: Vec<SimEvent>,
    /// Simulated seconds between a node's heartbeats to each peer.
    #[arg(long, default_value_t = 1.0)]
    heartbeat: f64,
    /// Simulated seconds a node waits for a silent peer, twice: a node turned off is found by
    /// its silence, as in a real run.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// SimGrid configuration (as network/model:CM02); repeatable.
    #[arg(long = "sim-cfg")]
    config: Vec<String>,
    /// Write the run's figures and time series here, as JSON (`fles plot` draws it).
    #[arg(long)]
    report: Option<PathBuf>,
}

pub fn run(a: SimulateArgs) -> Result<()> {
    let (inputs, computes) = match (a.nodes, a.inputs, a.computes) {
        (Some(n), _, _) if n >= 2 => (n / 2, n - n / 2),
        (Some(_), _, _) => bail!("--nodes must be at least 2"),
        (None, Some(i), Some(c)) => (i, c),
        _ => bail!("say how many nodes: --nodes N, or --inputs I --computes C"),
    };
    let usable = |v: f64| v >= 0.0 && v.is_finite();
    if !usable(a.rate) || !usable(a.process_us) {
        bail!("--rate and --process-us are 0 or more");
    }
    let settings = SimSettings {
        inputs,
        computes,
        scheduler: a.scheduling.kind()?,
        component_size: a.component_size,
        component_spread: a.component_spread.min(a.component_size.saturating_sub(1)),
        seed: a.seed,
        rings: RingSizes { data: a.buffer_size, descs: a.descriptors },
        timeslices: a.timeslices,
        input_rate: a.rate,
        process_ns: (a.process_us * 1e3).round() as u64,
        in_flight: a.in_flight,
        timeout: a.timeout,
        heartbeat: a.heartbeat,
        platform: a.platform.clone(),
        config: a.config.clone(),
        events: a.events.clone(),
    };
    let started = Instant::now();
    let bar = progress_bar(a.timeslices);
    let shown = bar.clone();
    let progress: Progress = Box::new(move |done, simulated| {
        shown.set_position(done);
        shown.set_message(format!("{simulated:.4}"));
    });
    let out = simulate(&settings, &std::env::temp_dir(), Some(progress));
    bar.finish_and_clear();
    let out = out.context("simulating")?;
    let wall = started.elapsed().as_secs_f64();
    let mut summaries: Vec<Value> = out.inputs.iter().map(node::input_json).collect();
    summaries.extend(out.computes.iter().map(|c| node::compute_json(c, 0)));
    let description = json!({
        "inputs": inputs, "computes": computes, "transport": format!("simulated: {}", a.platform),
        "scheduler": a.scheduling.name(), "component_size": a.component_size, "buffer_size": a.buffer_size,
        "timeslices": a.timeslices, "in_flight": a.in_flight, "process_us": a.process_us,
        "events": a.events.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>(),
        "simulation": {
            "platform": a.platform.to_string(), "hosts": out.hosts, "simulated_s": out.simulated, "wall_s": wall,
            "peak_memory_mib": peak_memory_mib(),
            "input_hosts": out.input_hosts, "compute_hosts": out.compute_hosts,
        },
    });
    let mut r = report::build(description, &summaries);
    if let Some(drop) = a.events.iter().find_map(|e| match e {
        SimEvent::BandwidthDrop { from, to, .. } => Some((*from, *to)),
        _ => None,
    }) {
        r["recovery"] = recovery(&r, drop);
    }
    report::publish(&r, a.report.as_deref())
}

/// The process's peak resident memory, from /proc (0 where there is none).
fn peak_memory_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok());
    kib.unwrap_or(0.0) / 1024.0
}

/// How the DFS's intervals went around a bandwidth drop from `drop.0` to `drop.1` seconds, as
/// compute node 0 learnt them (every compute node learns the same): the median duration of
/// those that ended before the drop, of those during it, and how many intervals after its
/// end it took until one came within 10 % of the median before.
fn recovery(r: &Value, drop: (f64, f64)) -> Value {
    let intervals: Vec<(f64, f64)> = r["computes"][0]["intervals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| Some((i[1].as_f64()? / 1e9, i[2].as_f64()? / 1e9)))
        .collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let before = median(intervals.iter().filter(|(s, d)| s + d <= drop.0).map(|i| i.1).collect());
    let during = median(intervals.iter().filter(|(s, d)| s + d > drop.0 && *s < drop.1).map(|i| i.1).collect());
    let after: Vec<f64> = intervals.iter().filter(|(s, _)| *s >= drop.1).map(|i| i.1).collect();
    let recovered = before.and_then(|b| after.iter().position(|d| (d - b).abs() <= 0.1 * b)).map(|k| k + 1);
    json!({
        "drop_s": [drop.0, drop.1], "median_before_ms": before.map(|v| v * 1e3),
        "median_during_ms": during.map(|v| v * 1e3), "intervals_after": after.len(),
        "intervals_to_recover": recovered,
    })
}

/// A bar on a terminal (hidden otherwise): a large cluster can take an hour to simulate.
fn progress_bar(timeslices: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(timeslices);
    let style = "{bar:30} {pos}/{len} timeslices, {msg} s simulated, {elapsed} of wall time ({eta} left)";
    bar.set_style(indicatif::ProgressStyle::with_template(style).expect("a valid template"));
    bar
}
