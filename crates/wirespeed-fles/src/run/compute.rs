//! A compute node's process: lends each input its rings, learns of components as the
//! inputs' pointers move, and hands each complete timeslice to a consumer as views into the
//! rings, giving the space back when the consumer returns.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use wirespeed::{Config, Key, Listener, Region};

use super::link::{Event, Link, net, patient};
use super::{SAMPLE_EVERY, SAMPLES_KEPT, STOP_POLL, Settings, since};
use crate::error::{FlesError, Result};
use crate::model::component::COMPONENT_DESCRIPTOR_LEN;
use crate::model::{ComponentDescriptor, ComponentView};
use crate::node::{ComputeAction, ComputeNode, Thinned};
use crate::sched::{Completed, Kind};
use crate::wire::Msg;

/// A complete timeslice: every input's component, viewed where it lies in the rings. The
/// space goes back to the inputs once the consumer returns.
pub struct Timeslice<'a> {
    pub index: u64,
    pub components: Vec<ComponentView<'a>>,
    /// The rings the views lie in, for a consumer that keeps the timeslice.
    pub(crate) rings: Vec<Arc<Region>>,
}

/// What a compute node saw, for the run's report.
#[derive(Debug, Clone, Default)]
pub struct ComputeSummary {
    pub index: usize,
    pub timeslices: u64,
    pub bytes: u64,
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
}

/// A compute node listening for its inputs.
pub struct ComputeListener {
    listener: Listener,
}

struct Peer {
    link: Link,
    data: Arc<Region>,
    descs: Region,
}

impl ComputeListener {
    pub fn bind(url: &str, key: &Key, config: &Config) -> Result<Self> {
        let listener = wirespeed::listen(url, key, config).map_err(|e| net(&format!("listening on {url}"), e))?;
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
        mut consume: impl FnMut(&Timeslice<'_>) -> Result<()>,
    ) -> Result<ComputeSummary> {
        self.drive(s, index, barrier, |ts, _| consume(ts).map(|()| true), || {})
    }

    /// Like [`run`](Self::run), but `consume` may keep a timeslice (returning false) and
    /// release it later with an [`Event::Released`] on the loop's channel, in any order;
    /// `delivered_all` is called once the last timeslice has been handed over.
    pub(crate) fn drive(
        self,
        s: &Settings,
        index: usize,
        barrier: impl FnOnce() -> Result<()>,
        mut consume: impl FnMut(&Timeslice<'_>, &Sender<Event>) -> Result<bool>,
        delivered_all: impl FnOnce(),
    ) -> Result<ComputeSummary> {
        let mut delivered_all = Some(delivered_all);
        let mut slots: Vec<Option<Peer>> = (0..s.inputs).map(|_| None).collect();
        for _ in 0..s.inputs {
            let conn = self.listener.accept_timeout(s.timeout).map_err(|e| net("waiting for the inputs", e))?;
            let stream = conn.accept_stream_timeout(s.timeout).map_err(|e| net("waiting for an input's stream", e))?;
            let link = Link::new(conn, patient(stream, s.timeout));
            let Msg::Join { input } = link.recv()? else {
                return Err(FlesError::Protocol("an input did not say which it is".into()));
            };
            let input = input as usize;
            if input >= s.inputs || slots[input].is_some() {
                return Err(FlesError::Protocol(format!("input {input} joined twice or is not one of {}", s.inputs)));
            }
            let register = |len: u64| link.conn.register(len as usize).map_err(|e| net("registering a ring", e));
            let data = register(s.rings.data)?;
            let descs = register(s.rings.descs * COMPONENT_DESCRIPTOR_LEN as u64)?;
            link.send(&Msg::Rings { data: data.descriptor().to_vec(), descs: descs.descriptor().to_vec() })?;
            slots[input] = Some(Peer { link, data: Arc::new(data), descs });
        }
        let peers: Vec<Peer> = slots.into_iter().map(|p| p.expect("every input joined")).collect();
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
        let mut node = ComputeNode::new(index, s.inputs, s.computes, s.rings, s.timeslices, dfs);
        let mut summary = ComputeSummary { index, ..ComputeSummary::default() };
        let mut next_sample = Duration::ZERO;
        let mut fill = Thinned::new(SAMPLES_KEPT);
        let mut quiet_since = Instant::now();
        let mut kept = 0usize;
        while !node.finished() || kept > 0 {
            if node.finished()
                && let Some(f) = delivered_all.take()
            {
                f();
            }
            if s.stop.load(Ordering::Relaxed) {
                node.halt();
            }
            let ev = match rx.recv_timeout(STOP_POLL) {
                Ok(ev) => Some(ev),
                // A consumer holding timeslices is no stall of the inputs.
                Err(RecvTimeoutError::Timeout) if kept > 0 || quiet_since.elapsed() < s.timeout => None,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(FlesError::Net(format!("nothing from any input for {:?}", s.timeout)));
                }
                Err(RecvTimeoutError::Disconnected) => return Err(FlesError::Net("every input is gone".into())),
            };
            if ev.is_some() {
                quiet_since = Instant::now();
            }
            let now = since(t0);
            match ev {
                None => {}
                Some(Event::Msg(i, Msg::Status(p))) => {
                    for slot in node.on_status(i, p)? {
                        let desc = read_descriptor(&peers[i].descs, slot % s.rings.descs)?;
                        node.on_component(i, desc, now)?;
                    }
                }
                Some(Event::Released(ts)) => {
                    node.release(ts);
                    kept -= 1;
                }
                Some(Event::Msg(_, Msg::Report(r))) => node.on_report(r)?,
                Some(Event::Msg(i, Msg::Stop { horizon })) => node.on_stop(i, horizon)?,
                Some(Event::Msg(i, other)) => return Err(FlesError::Protocol(format!("input {i} sent {other:?}"))),
                Some(Event::Closed(i, Ok(()))) => return Err(FlesError::Net(format!("input {i} left before the end"))),
                Some(Event::Closed(i, Err(e))) => return Err(FlesError::Net(format!("input {i}: {e}"))),
            }
            while let Some(action) = node.next_action() {
                match action {
                    ComputeAction::Deliver { ts, components } => {
                        let ts_view = view(&peers, s, ts, &components)?;
                        let released = consume(&ts_view, &tx)?;
                        summary.timeslices += 1;
                        summary.bytes += components.iter().map(|c| c.size).sum::<u64>();
                        if released {
                            node.release(ts);
                        } else {
                            kept += 1;
                        }
                    }
                    ComputeAction::Ack { input, acked } => peers[input].link.send(&Msg::Ack(acked))?,
                    ComputeAction::Propose(p) => peers.iter().try_for_each(|q| q.link.send(&Msg::Propose(p)))?,
                    ComputeAction::Halt => peers.iter().try_for_each(|q| q.link.send(&Msg::Halt))?,
                    ComputeAction::End(at) => peers.iter().try_for_each(|q| q.link.send(&Msg::End { at }))?,
                }
            }
            let elapsed = t0.elapsed();
            if elapsed >= next_sample {
                fill.push((elapsed.as_secs_f64(), node.fill()));
                next_sample = elapsed + SAMPLE_EVERY;
            }
        }
        summary.seconds = t0.elapsed().as_secs_f64();
        summary.completions = node.completions.kept().iter().map(|c| (c.ts, c.first, c.last)).collect();
        summary.slowest = node.slowest;
        summary.fill = fill.kept().to_vec();
        summary.intervals = node.intervals.clone();
        // The inputs finish their streams once they have every acknowledgement.
        for p in &peers {
            p.link.finish();
        }
        Ok(summary)
    }
}

fn read_descriptor(descs: &Region, slot: u64) -> Result<ComponentDescriptor> {
    let mut b = [0u8; COMPONENT_DESCRIPTOR_LEN];
    descs.read(slot * COMPONENT_DESCRIPTOR_LEN as u64, &mut b).map_err(|e| net("reading a descriptor", e))?;
    ComponentDescriptor::decode(&b)
}

/// Views of a timeslice's components in the data rings.
fn view<'a>(peers: &'a [Peer], s: &Settings, ts: u64, components: &[ComponentDescriptor]) -> Result<Timeslice<'a>> {
    let mut views = Vec::with_capacity(components.len());
    for (p, c) in peers.iter().zip(components) {
        let at = (c.offset % s.rings.data) as usize;
        // SAFETY: the node checked that the component lies inside the ring (it never wraps)
        // and below the input's write pointer; the input writes there again only after we
        // acknowledge it, which happens after the consumer returns.
        let bytes = unsafe { std::slice::from_raw_parts(p.data.as_ptr().add(at), c.size as usize) };
        views.push(ComponentView::new(bytes, c.num_microslices)?);
    }
    Ok(Timeslice { index: ts, components: views, rings: peers.iter().map(|p| p.data.clone()).collect() })
}
