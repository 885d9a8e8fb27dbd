//! A compute node's process: lends each input its rings, learns of components as the
//! inputs' pointers move, and hands each complete timeslice to a consumer as views into the
//! rings, giving the space back when the consumer returns.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use wirespeed::{Config, Connection, Key, Listener, Region};

use super::link::{Event, Link, await_closes, net, patient};
use super::{METRICS_EVERY, SAMPLE_EVERY, SAMPLES_KEPT, Settings, metrics, since, until};
use crate::error::{Lost, Result, Violation};
use crate::model::component::COMPONENT_DESCRIPTOR_LEN;
use crate::model::{ComponentDescriptor, ComponentView};
use crate::node::{ComputeAction, ComputeNode, Thinned};
use crate::sched::{Completed, Kind};
use crate::wire::Msg;

/// A complete timeslice: every input's component, viewed where it lies in the rings. The
/// space goes back to the inputs once the consumer returns.
pub struct Timeslice<'a> {
    /// The timeslice's index.
    pub index: u64,
    /// The components that arrived, in input order (none where the rings are in GPU memory,
    /// which only the frames' copies read)...
    pub components: Vec<ComponentView<'a>>,
    /// ... and the input each came from: every input, unless one was lost mid-run.
    pub inputs: Vec<usize>,
    /// Where each component lies in its ring, in the same order.
    pub(crate) places: Vec<Place>,
    /// Every input's data ring, for a consumer that keeps the timeslice.
    pub(crate) rings: &'a [Arc<DataRing>],
}

/// An input's data ring: host memory the node reads, or GPU memory that the input puts into
/// directly and only the GPU's copies read.
pub(crate) enum DataRing {
    Host(Region),
    #[cfg(feature = "gpu")]
    Gpu(wirespeed::DeviceRegion),
}

impl DataRing {
    fn descriptor(&self) -> &[u8] {
        match self {
            DataRing::Host(r) => r.descriptor(),
            #[cfg(feature = "gpu")]
            DataRing::Gpu(r) => r.descriptor(),
        }
    }

    pub(crate) fn host(&self) -> Option<&Region> {
        match self {
            DataRing::Host(r) => Some(r),
            #[cfg(feature = "gpu")]
            DataRing::Gpu(_) => None,
        }
    }
}

/// Where a component lies in its input's data ring.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub input: usize,
    pub at: usize,
    pub len: usize,
    pub microslices: u64,
}

/// What a compute node saw, for the run's report.
#[derive(Debug, Clone, Default)]
pub struct ComputeSummary {
    /// The compute node's index.
    pub index: usize,
    /// Timeslices it completed.
    pub timeslices: u64,
    /// Bytes it received.
    pub bytes: u64,
    /// Seconds from the barrier to its end.
    pub seconds: f64,
    /// Per timeslice (all of a short run's, an even sample of a long one's): index, first
    /// and last contribution's arrival, ns since the barrier.
    pub completions: Vec<(u64, u64, u64)>,
    /// The longest time from a timeslice's first contribution to its last, ns.
    pub slowest: u64,
    /// (seconds since the barrier, fullest ring's share in use).
    pub fill: Vec<(f64, f64)>,
    /// The DFS's intervals as this node measured them.
    pub intervals: Vec<Completed>,
    /// Timeslices delivered with a lost input's component missing, and the inputs lost.
    pub incomplete: u64,
    /// See `incomplete`.
    pub lost_inputs: Vec<usize>,
    /// Compute nodes lost, whose timeslices this node and the others took over.
    pub lost_computes: Vec<usize>,
}

impl ComputeSummary {
    /// What `node` recorded over the run (of `inputs` and `computes`), with its `fill` samples.
    pub(crate) fn record(&mut self, node: &ComputeNode, inputs: usize, computes: usize, fill: &[(f64, f64)]) {
        self.completions = node.completions.kept().iter().map(|c| (c.ts, c.first, c.last)).collect();
        self.slowest = node.slowest;
        self.fill = fill.to_vec();
        self.intervals = node.intervals.clone();
        self.incomplete = node.incomplete;
        self.lost_inputs = (0..inputs).filter(|&i| node.is_lost(i)).collect();
        self.lost_computes = (0..computes).filter(|&c| node.is_compute_lost(c)).collect();
    }
}

/// A compute node listening for its inputs.
///
/// One input and one compute node on this host, each on a thread of its own (a real run has
/// them in processes on many hosts, started by `wirespeed fles run` or MPI):
///
/// ```
/// use std::sync::{Arc, Barrier};
/// use std::sync::atomic::AtomicBool;
/// use std::time::Duration;
///
/// use wirespeed::{Config, Key};
/// use wirespeed_fles::model::Slicing;
/// use wirespeed_fles::node::RingSizes;
/// use wirespeed_fles::run::{ComputeListener, Settings, run_input};
/// use wirespeed_fles::sched::Kind;
///
/// # fn main() -> wirespeed_fles::Result<()> {
/// let settings = Settings {
///     inputs: 1,
///     computes: 1,
///     scheduler: Kind::RoundRobin,
///     slicing: Slicing::count(10, 1), // 10 microslices a timeslice, and 1 of overlap
///     microslice_size: 600,
///     microslice_spread: 200,
///     pattern: Default::default(),
///     input_rate: 0.0, // as fast as it goes
///     replay: None,
///     rings: RingSizes { data: 1 << 16, descs: 64 },
///     timeslices: Some(50),
///     timeout: Duration::from_secs(20),
///     corrupt: None,
///     stop: Arc::new(AtomicBool::new(false)),
///     monitor: None,
/// };
/// let key = Key::new("a shared secret").unwrap();
/// let listener = ComputeListener::bind("tcp://127.0.0.1:0", &key, &Config::default())?;
/// let urls = vec![listener.url().to_string()];
/// let start = Arc::new(Barrier::new(2)); // every node starts at once
///
/// let (s, go) = (settings.clone(), start.clone());
/// let input = std::thread::spawn(move || {
///     run_input(&s, 0, &urls, &key, &Config::default(), || Ok(drop(go.wait())))
/// });
/// let mut built = 0;
/// listener.run(&settings, 0, || Ok(drop(start.wait())), |timeslice| {
///     for (i, component) in timeslice.components.iter().enumerate() {
///         component.verify(i as u16)?; // every microslice's CRC-32C
///     }
///     built += 1;
///     Ok(())
/// })?;
/// input.join().unwrap()?;
/// assert_eq!(built, 50);
/// # Ok(())
/// # }
/// ```
pub struct ComputeListener {
    listener: Listener,
}

struct Peer {
    link: Link,
    descs: Region,
}

impl Timeslice<'_> {
    /// Whether some input's component is missing (that input was lost).
    pub fn incomplete(&self) -> bool {
        self.components.len() < self.rings.len()
    }
}

impl ComputeListener {
    /// A compute node's listener at `url`, for the inputs to connect to.
    pub fn bind(url: &str, key: &Key, config: &Config) -> Result<Self> {
        let listener = wirespeed::listen(url, key, config).map_err(|e| net(format!("listening on {url}"), e))?;
        Ok(ComputeListener { listener })
    }

    /// Where inputs connect.
    pub fn url(&self) -> &str {
        self.listener.url()
    }

    /// Runs compute node `index`: takes every input's connection, calls `barrier`, then
    /// hands each of its complete timeslices to `consume`, in order; its ring space goes back
    /// when `consume` returns.
    pub fn run(
        self,
        s: &Settings,
        index: usize,
        barrier: impl FnOnce() -> Result<()>,
        consume: impl FnMut(&Timeslice<'_>) -> Result<()>,
    ) -> Result<ComputeSummary> {
        struct Immediate<F>(F);
        impl<F: FnMut(&Timeslice<'_>) -> Result<()>> Consumer for Immediate<F> {
            fn complete(&mut self, ts: &Timeslice<'_>, _: &Sender<Event>) -> Result<bool> {
                (self.0)(ts).map(|()| true)
            }
        }
        self.drive(s, index, barrier, &mut Immediate(consume))
    }

    /// Like [`run`](Self::run), but the consumer may keep a timeslice and release it later,
    /// in any order, and hears of components as they arrive. The node stays until every input
    /// has finished, in case a compute node is lost and it must take over; but a consumer
    /// that still keeps timeslices once this node has handed over all of its own hears the
    /// end then (`delivered_all`), so that it can let them go (and takes no more).
    pub(crate) fn drive(
        self,
        s: &Settings,
        index: usize,
        barrier: impl FnOnce() -> Result<()>,
        consumer: &mut impl Consumer,
    ) -> Result<ComputeSummary> {
        let mut delivered_all = true;
        let mut slots: Vec<Option<(Peer, Arc<DataRing>)>> = (0..s.inputs).map(|_| None).collect();
        for _ in 0..s.inputs {
            let conn = self.listener.accept_timeout(s.timeout).map_err(|e| net("waiting for the inputs", e))?;
            let stream = conn.accept_stream_timeout(s.timeout).map_err(|e| net("waiting for an input's stream", e))?;
            let link = Link::new(conn, patient(stream, s.timeout));
            let Msg::Join { input } = link.recv()? else {
                return Err(Violation::Unidentified.into());
            };
            let input = input as usize;
            if input >= s.inputs || slots[input].is_some() {
                return Err(Violation::JoinedTwice { input, inputs: s.inputs }.into());
            }
            let register = |len: u64| link.conn.register(len as usize).map_err(|e| net("registering a ring", e));
            let data = match consumer.ring(&link.conn, s.rings.data as usize)? {
                Some(ring) => ring,
                None => DataRing::Host(register(s.rings.data)?),
            };
            let descs = register(s.rings.descs * COMPONENT_DESCRIPTOR_LEN as u64)?;
            link.send(&Msg::Rings { data: data.descriptor().to_vec(), descs: descs.descriptor().to_vec() })?;
            slots[input] = Some((Peer { link, descs }, Arc::new(data)));
        }
        // Each input's link and descriptor ring, and its data ring, which kept timeslices share.
        let (peers, rings): (Vec<Peer>, Vec<Arc<DataRing>>) =
            slots.into_iter().map(|p| p.expect("every input joined")).unzip();
        consumer.start(&rings)?;
        barrier()?;
        let t0 = Instant::now();
        let (tx, rx) = mpsc::channel();
        for (i, p) in peers.iter().enumerate() {
            p.link.start_reader(i, tx.clone())?;
        }
        let dfs = match &s.scheduler {
            Kind::Dfs(d) => Some(d.clone()),
            Kind::RoundRobin => None,
        };
        let mut node =
            ComputeNode::new(index, s.inputs, s.computes, s.rings, s.timeslices, dfs).with_liveness(s.liveness(), 0);
        let mut summary = ComputeSummary { index, ..ComputeSummary::default() };
        let (mut next_sample, mut next_metrics) = (Duration::ZERO, Duration::ZERO);
        let mut fill = Thinned::new(SAMPLES_KEPT);
        let mut kept = 0usize;
        let mut acks = vec![None; s.inputs];
        // Until every input has finished or is lost: nothing more can come then (a node the
        // inputs left out is not finished, but done all the same).
        while !node.inputs_gone() || kept > 0 {
            if (node.finished() || node.inputs_gone()) && kept > 0 && std::mem::take(&mut delivered_all) {
                consumer.delivered_all();
            }
            if s.stop.load(Ordering::Relaxed) {
                node.halt();
            }
            let wait = until(node.poll_timeout(), since(t0));
            let first = match rx.recv_timeout(wait) {
                Ok(ev) => Some(ev),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return Err(Lost::EveryInput.into()),
            };
            // Everything that came meanwhile is heard before any input is judged silent.
            for ev in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())) {
                let now = since(t0);
                match ev {
                    Event::Msg(i, msg) => node.handle(i, msg, now, |slot| read_descriptor(&peers[i].descs, slot))?,
                    Event::Closed(i, end) => node.on_closed(i, end.is_ok(), now)?,
                    Event::Released(ts) => {
                        node.release(ts);
                        kept -= 1;
                    }
                    Event::Failed(e) => return Err(e),
                }
            }
            node.handle_timeout(since(t0))?;
            while let Some(action) = node.next_action() {
                match action {
                    ComputeAction::Deliver { ts, components } => {
                        let ts_view = view(&rings, s, ts, &components)?;
                        let released = consumer.complete(&ts_view, &tx)?;
                        summary.timeslices += 1;
                        summary.bytes += components.iter().flatten().map(|c| c.size).sum::<u64>();
                        if released {
                            node.release(ts);
                        } else {
                            kept += 1;
                        }
                    }
                    ComputeAction::Arrived { input, desc } => consumer.arrived(desc.ts_num, place(input, s, &desc))?,
                    // Acknowledgements are cumulative: one per input and pass says all.
                    ComputeAction::Send { input, msg: Msg::Ack(p) } => acks[input] = Some(p),
                    // A send that fails means that input just died (its Closed event may
                    // still be on the way): the run goes on without it.
                    ComputeAction::Send { input, msg } => {
                        let ack = acks[input].take().map(Msg::Ack);
                        if ack.iter().chain([&msg]).any(|m| peers[input].link.send(m).is_err()) {
                            node.on_input_lost(input, since(t0))?;
                        }
                    }
                    ComputeAction::Close(input) => peers[input].link.finish(),
                }
            }
            for (input, ack) in acks.iter_mut().enumerate() {
                if let Some(p) = ack.take()
                    && !node.is_lost(input)
                    && peers[input].link.send(&Msg::Ack(p)).is_err()
                {
                    node.on_input_lost(input, since(t0))?;
                }
            }
            let elapsed = t0.elapsed();
            if elapsed >= next_sample {
                fill.push((elapsed.as_secs_f64(), node.fill()));
                next_sample = elapsed + SAMPLE_EVERY;
            }
            if elapsed >= next_metrics {
                next_metrics = elapsed + METRICS_EVERY;
                record_metrics(s, index, &mut node, &summary);
            }
        }
        if delivered_all {
            consumer.delivered_all();
        }
        summary.seconds = t0.elapsed().as_secs_f64();
        record_metrics(s, index, &mut node, &summary);
        summary.record(&node, s.inputs, s.computes, fill.kept());
        // The inputs finish their streams once they have every acknowledgement.
        for p in &peers {
            p.link.finish();
        }
        await_closes(&rx, vec![false; s.inputs], s.timeout);
        Ok(summary)
    }
}

/// This node's live metrics of the last second.
fn record_metrics(s: &Settings, index: usize, node: &mut ComputeNode, summary: &ComputeSummary) {
    let (suspected, pause) = node.liveness_seen();
    let lost_computes = (0..s.computes).filter(|&c| node.is_compute_lost(c)).count();
    let fields = vec![
        ("timeslices", summary.timeslices as f64),
        ("bytes", summary.bytes as f64),
        ("buffer_fill", node.fill()),
        ("completion_seconds_max", node.take_recent_slowest() as f64 / 1e9),
        ("incomplete", node.incomplete as f64),
        ("lost_inputs", node.lost_inputs() as f64),
        ("lost_computes", lost_computes as f64),
        ("suspected", suspected as f64),
        ("pause_seconds_longest", pause as f64 / 1e9),
    ];
    metrics(s, "fles_compute", index, fields);
}

fn read_descriptor(descs: &Region, slot: u64) -> Result<ComponentDescriptor> {
    let mut b = [0u8; COMPONENT_DESCRIPTOR_LEN];
    descs.read(slot * COMPONENT_DESCRIPTOR_LEN as u64, &mut b).map_err(|e| net("reading a descriptor", e))?;
    ComponentDescriptor::decode(&b)
}

/// Where a timeslice's consumer hears of it, from the node's loop.
pub(crate) trait Consumer {
    /// An input's data ring of `len` bytes, where the consumer wants it elsewhere than in
    /// host memory the connection registers.
    fn ring(&mut self, _conn: &Connection, _len: usize) -> Result<Option<DataRing>> {
        Ok(None)
    }

    /// Every input's data ring, once all have joined.
    fn start(&mut self, _rings: &[Arc<DataRing>]) -> Result<()> {
        Ok(())
    }

    /// A component of this node's own timeslice `ts`, not yet complete, is in its ring (and
    /// stays there until the timeslice is released).
    fn arrived(&mut self, _ts: u64, _place: Place) -> Result<()> {
        Ok(())
    }

    /// A complete timeslice: true if its space may go back now, false if the consumer keeps
    /// it and sends [`Event::Released`] later.
    fn complete(&mut self, ts: &Timeslice<'_>, release: &Sender<Event>) -> Result<bool>;

    /// This node has handed over all of its own timeslices.
    fn delivered_all(&mut self) {}
}

/// Where input `input`'s component lies in its data ring.
fn place(input: usize, s: &Settings, c: &ComponentDescriptor) -> Place {
    Place { input, at: (c.offset % s.rings.data) as usize, len: c.size as usize, microslices: c.num_microslices }
}

/// Where input `input`'s component lies in its data ring, and a view of it there when the
/// ring is in host memory. The view reads no microslice until asked: a consumer that checks
/// them (`--verify`) does, one that passes the component on does not.
fn component<'a>(
    input: usize,
    ring: &'a DataRing,
    s: &Settings,
    c: &ComponentDescriptor,
) -> Result<(Place, Option<ComponentView<'a>>)> {
    let place = place(input, s, c);
    let Some(ring) = ring.host() else { return Ok((place, None)) };
    // SAFETY: the node checked that the component lies inside the ring (it never wraps)
    // and below the input's write pointer; the input writes there again only after we
    // acknowledge it, which happens after the consumer releases the timeslice.
    let bytes = unsafe { std::slice::from_raw_parts(ring.as_ptr().add(place.at), place.len) };
    Ok((place, Some(ComponentView::deferred(bytes, c.num_microslices)?)))
}

/// Views of a timeslice's components in the data rings.
fn view<'a>(
    rings: &'a [Arc<DataRing>],
    s: &Settings,
    ts: u64,
    components: &[Option<ComponentDescriptor>],
) -> Result<Timeslice<'a>> {
    let mut views = Vec::with_capacity(components.len());
    let mut places = Vec::with_capacity(components.len());
    let mut inputs = Vec::with_capacity(components.len());
    for (i, (ring, c)) in rings.iter().zip(components).enumerate() {
        let Some(c) = c else { continue };
        let (place, view) = component(i, ring, s, c)?;
        views.extend(view);
        places.push(place);
        inputs.push(i);
    }
    Ok(Timeslice { index: ts, components: views, inputs, places, rings })
}
