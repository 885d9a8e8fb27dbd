//! Timeslice building in SimGrid: the same sans-IO input and compute-node state machines and
//! schedulers as real runs, as actors on a simulated platform, every message a simulated
//! transfer of its true size. Simulated time stands in for the clock.

mod compute;
pub mod engine;
pub mod events;
mod input;
mod net;
pub mod platform;

use std::path::Path;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

pub use engine::{Comm, Engine, Link, Mailbox, hosts, now, sleep_for};
pub use events::{NodeRef, SimEvent};
pub use platform::Platform;

use crate::error::{FlesError, Result};
use crate::node::{LivenessSettings, RingSizes};
use crate::run::{ComputeSummary, InputSummary};
use crate::sched::{Kind, Nanos};
use net::{Port, SimMsg};

/// A simulated run.
#[derive(Debug, Clone)]
pub struct SimSettings {
    pub inputs: usize,
    pub computes: usize,
    pub scheduler: Kind,
    /// Bytes per component, and how far sizes vary either way (evenly, from `seed`).
    pub component_size: u64,
    pub component_spread: u64,
    pub seed: u64,
    pub rings: RingSizes,
    pub timeslices: u64,
    /// Each input's source rate in bytes a nanosecond (GB/s); 0: as fast as the run takes it.
    pub input_rate: f64,
    /// How long a compute node works on each complete timeslice before releasing it.
    pub process_ns: Nanos,
    /// Components an input has in flight at once (its NIC's send queue).
    pub in_flight: usize,
    /// Simulated seconds a peer may stay silent on a quiet platform, twice (as real runs'
    /// timeout): a node turned off is found by its silence, as in a real run.
    pub timeout: f64,
    /// Simulated seconds between a node's heartbeats to each peer.
    pub heartbeat: f64,
    pub platform: Platform,
    /// SimGrid configuration, as `network/model:CM02`.
    pub config: Vec<String>,
    pub events: Vec<SimEvent>,
}

impl SimSettings {
    /// How nodes judge their peers: the real runs' rule, in simulated time.
    fn liveness(&self) -> LivenessSettings {
        LivenessSettings { every: (self.heartbeat * 1e9) as Nanos, limit: (self.timeout / 2.0 * 1e9) as Nanos }
    }

    /// The bytes of input `input`'s component of timeslice `ts`.
    pub fn component_bytes(&self, input: usize, ts: u64) -> u64 {
        if self.component_spread == 0 {
            return self.component_size;
        }
        let r = splitmix(self.seed ^ (input as u64).rotate_left(32) ^ ts) % (2 * self.component_spread + 1);
        (self.component_size + r).saturating_sub(self.component_spread).max(1)
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What a simulated run produced: the same summaries as real nodes', less those turned off.
#[derive(Debug, Clone, Default)]
pub struct SimOutcome {
    pub inputs: Vec<InputSummary>,
    pub computes: Vec<ComputeSummary>,
    /// Simulated seconds until the last actor ended.
    pub simulated: f64,
    /// The platform's hosts, and the host of each input and compute node.
    pub hosts: usize,
    pub input_hosts: Vec<String>,
    pub compute_hosts: Vec<String>,
}

/// Told of every timeslice a compute node completes: how many so far, at which simulated
/// second. A long run can show how far it got.
pub type Progress = Box<dyn Fn(u64, f64) + Send + Sync>;

/// What the actors share (they run one at a time, on one thread).
pub(crate) struct Shared {
    settings: SimSettings,
    delivered: AtomicU64,
    progress: Option<Progress>,
    /// Nodes still running; the last to end tells the events' actor.
    live: AtomicUsize,
    /// When the last node ended: the run's simulated length.
    ended: Mutex<Option<f64>>,
    inputs: Mutex<Vec<InputSummary>>,
    computes: Mutex<Vec<ComputeSummary>>,
    /// Each actor's failure, in the order they came.
    errors: Mutex<Vec<FlesError>>,
}

impl Shared {
    /// Files actor `actor`'s failure; the run reports the first.
    fn failed(&self, actor: usize, error: FlesError) {
        lock(&self.errors).push(FlesError::Simulation { actor, error: Box::new(error) });
    }

    /// Inputs, compute nodes and the events' actor.
    fn actors(&self) -> usize {
        self.settings.inputs + self.settings.computes + 1
    }

    /// A compute node completed a timeslice at `now`.
    fn delivered(&self, now: Nanos) {
        let n = self.delivered.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(progress) = &self.progress {
            progress(n, seconds(now));
        }
    }

    fn compute_id(&self, c: usize) -> usize {
        self.settings.inputs + c
    }

    fn events_id(&self) -> usize {
        self.settings.inputs + self.settings.computes
    }

    fn id(&self, node: NodeRef) -> usize {
        match node {
            NodeRef::Input(i) => i,
            NodeRef::Compute(c) => self.compute_id(c),
        }
    }
}

/// Nanoseconds as seconds.
fn seconds(ns: Nanos) -> f64 {
    ns as f64 / 1e9
}

/// Runs the simulation (once per process: SimGrid's engine is one); platform files it
/// writes go to `dir`.
pub fn simulate(s: &SimSettings, dir: &Path, progress: Option<Progress>) -> Result<SimOutcome> {
    let config_error = |why: String| Err(FlesError::Config(why));
    if s.inputs == 0 || s.computes == 0 || s.timeslices == 0 || s.in_flight == 0 || s.component_size == 0 {
        return config_error(
            "inputs, compute nodes, timeslices, components in flight and their size must be at least 1".into(),
        );
    }
    if !(s.heartbeat > 0.0 && s.timeout > 2.0 * s.heartbeat) {
        return config_error("the heartbeat must be above 0, and the timeout more than twice it".into());
    }
    for e in &s.events {
        match e {
            SimEvent::Off { node: NodeRef::Input(n), .. } if *n >= s.inputs => {
                return config_error(format!("there is no input {n}"));
            }
            SimEvent::Off { node: NodeRef::Compute(n), .. } if *n >= s.computes => {
                return config_error(format!("there is no compute node {n}"));
            }
            _ => {}
        }
    }
    let mut flags: Vec<String> = vec!["--log=root.thresh:warning".into(), "--log=xbt_cfg.thresh:warning".into()];
    let config = s.platform.sim_defaults().iter().copied().chain(s.config.iter().map(String::as_str));
    flags.extend(config.map(|c| format!("--cfg={c}")));
    let engine = Engine::start(&flags.iter().map(String::as_str).collect::<Vec<_>>())?;
    let nodes = s.inputs + s.computes;
    engine.load_platform(&s.platform.file(nodes, dir)?)?;
    // The events' actor must not fail once the nodes run: they would wait for it.
    for e in &s.events {
        if let SimEvent::BandwidthDrop { links, .. } = e {
            events::named_links(links)?;
        }
    }
    let all = platform::natural_order(hosts());
    if all.len() < nodes {
        return config_error(format!("the platform has {} hosts, fewer than the {nodes} nodes", all.len()));
    }
    let (input_hosts, compute_hosts) = place(&all, s.inputs, s.computes);
    let sh = Arc::new(Shared {
        settings: s.clone(),
        delivered: AtomicU64::new(0),
        progress,
        live: AtomicUsize::new(nodes),
        ended: Mutex::new(None),
        inputs: Mutex::new(Vec::new()),
        computes: Mutex::new(Vec::new()),
        errors: Mutex::new(Vec::new()),
    });
    for (i, host) in input_hosts.iter().enumerate() {
        let sh = sh.clone();
        engine.spawn(&format!("input-{i}"), host, move || {
            node(&sh, i, |sh, port| input::run(sh, port, i), |sh, v| lock(&sh.inputs).push(v))
        })?;
    }
    for (c, host) in compute_hosts.iter().enumerate() {
        let sh = sh.clone();
        let id = sh.compute_id(c);
        engine.spawn(&format!("compute-{c}"), host, move || {
            node(&sh, id, |sh, port| compute::run(sh, port, c), |sh, v| lock(&sh.computes).push(v))
        })?;
    }
    let events = sh.clone();
    engine.spawn("events", &all[0], move || {
        let result = Port::open(events.events_id(), events.actors())
            .and_then(|mut port| events::run(&events, &mut port).inspect(|()| port.flush()));
        if let Err(e) = result {
            events.failed(events.events_id(), e);
        }
    })?;
    engine.run()?;
    if let Some(e) = lock(&sh.errors).drain(..).next() {
        return Err(e);
    }
    let mut out = SimOutcome {
        inputs: std::mem::take(&mut *lock(&sh.inputs)),
        computes: std::mem::take(&mut *lock(&sh.computes)),
        simulated: lock(&sh.ended).unwrap_or_else(now),
        hosts: all.len(),
        input_hosts,
        compute_hosts,
    };
    out.inputs.sort_by_key(|s| s.index);
    out.computes.sort_by_key(|s| s.index);
    Ok(out)
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One node's actor: runs `body`, files its summary (None: it was turned off), and takes what
/// arrives until the run is over; the last node to end tells the events' actor.
fn node<T>(
    sh: &Shared,
    id: usize,
    body: impl FnOnce(&Shared, &mut Port) -> Result<Option<T>>,
    file: impl FnOnce(&Shared, T),
) {
    let mut port = match Port::open(id, sh.actors()) {
        Ok(p) => p,
        Err(e) => return sh.failed(id, e),
    };
    match body(sh, &mut port) {
        Ok(Some(v)) => file(sh, v),
        Ok(None) => {}
        Err(e) => sh.failed(id, e),
    }
    if sh.live.fetch_sub(1, Ordering::SeqCst) == 1 {
        *lock(&sh.ended) = Some(now());
        port.send(sh.events_id(), SimMsg::Over);
    }
    // Messages to an actor that has ended fail in its senders' waits: stay until all end.
    if let Err(e) = port.drain_until_over() {
        sh.failed(id, e);
    }
    port.flush();
}

/// Inputs and compute nodes take alternate hosts while both remain, then the rest in turn.
fn place(hosts: &[String], inputs: usize, computes: usize) -> (Vec<String>, Vec<String>) {
    let pairs = inputs.min(computes);
    let mut ins: Vec<String> = (0..pairs).map(|k| hosts[2 * k].clone()).collect();
    let mut cns: Vec<String> = (0..pairs).map(|k| hosts[2 * k + 1].clone()).collect();
    let rest = &hosts[2 * pairs..inputs + computes];
    if inputs > pairs {
        ins.extend(rest.iter().cloned());
    } else {
        cns.extend(rest.iter().cloned());
    }
    (ins, cns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_inputs_and_compute_nodes_on_alternate_hosts() {
        let hosts: Vec<String> = (0..6).map(|h| format!("h{h}")).collect();
        let (i, c) = place(&hosts, 2, 3);
        assert_eq!((i, c), (vec!["h0".to_string(), "h2".into()], vec!["h1".to_string(), "h3".into(), "h4".into()]));
        let (i, c) = place(&hosts, 3, 1);
        assert_eq!((i, c), (vec!["h0".to_string(), "h2".into(), "h3".into()], vec!["h1".to_string()]));
    }

    #[test]
    fn component_sizes_vary_evenly_around_the_mean() {
        let mut s = settings_for_sizes();
        assert_eq!(s.component_bytes(3, 9), 1000);
        s.component_spread = 100;
        let sizes: Vec<u64> = (0..1000).map(|ts| s.component_bytes(1, ts)).collect();
        assert!(sizes.iter().all(|&b| (900..=1100).contains(&b)));
        let mean = sizes.iter().sum::<u64>() as f64 / 1000.0;
        assert!((mean - 1000.0).abs() < 10.0, "{mean}");
        assert_eq!(sizes, (0..1000).map(|ts| s.component_bytes(1, ts)).collect::<Vec<_>>(), "the same again");
    }

    fn settings_for_sizes() -> SimSettings {
        SimSettings {
            inputs: 1,
            computes: 1,
            scheduler: Kind::RoundRobin,
            component_size: 1000,
            component_spread: 0,
            seed: 7,
            rings: RingSizes { data: 1 << 20, descs: 64 },
            timeslices: 1,
            input_rate: 0.0,
            process_ns: 0,
            in_flight: 1,
            timeout: 1.0,
            heartbeat: 0.1,
            platform: Platform::Xc40,
            config: Vec::new(),
            events: Vec::new(),
        }
    }
}
