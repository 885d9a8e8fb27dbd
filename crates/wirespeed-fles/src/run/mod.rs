//! Running real nodes: each input connects to every compute node, which lends it a data ring
//! and a descriptor ring as one-sided regions; components are put there, and small messages
//! carry the pointers, acknowledgements and the DFS's reports and proposals. One loop per
//! node drives its sans-IO state machine; a reader thread per connection feeds it.

mod compute;
mod consumer;
mod feed;
mod frames;
mod input;
mod link;
mod publish;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

pub use compute::{ComputeListener, ComputeSummary, Timeslice};
pub use consumer::{KeptTimeslice, Timeslices};
pub use frames::{BuiltFrame, Frames};
pub use input::{InputSummary, run_input};
pub use publish::ShmOutput;

use crate::error::Result;
use crate::model::Slicing;
use crate::monitor::{Monitor, Point};
use crate::node::{LivenessSettings, RingSizes};
use crate::sched::Kind;
use crate::source::pattern::Style;

/// What inputs replay instead of generating microslices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// A timeslice archive: input i sends component i (mod their count) of each timeslice
    /// in turn (at most its first 1,024), round and round.
    Timeslices(PathBuf),
    /// Microslice archives (.msa), one per input (input i replays file i mod their count),
    /// cut into components as the run's slicing says, each microslice once.
    Microslices(Vec<PathBuf>),
}

impl Replay {
    /// Whole timeslices the microslice archives hold for `slicing` (the fewest of any file);
    /// None for a timeslice archive, which goes round and round.
    pub fn timeslices(&self, slicing: Slicing) -> Result<Option<u64>> {
        let Replay::Microslices(paths) = self else { return Ok(None) };
        let mut fewest = u64::MAX;
        for path in paths {
            let file =
                std::fs::File::open(path).map_err(|e| crate::error::io(format!("opening {}", path.display()), e))?;
            let mut reader = crate::source::MsaReader::new(std::io::BufReader::new(file))?;
            let mut idx = Vec::new();
            while let Some((d, _)) = reader.next_microslice()? {
                idx.push(d.idx);
            }
            fewest = fewest.min(feed::whole_timeslices(&idx, slicing));
        }
        Ok(Some(fewest))
    }
}

/// What every node of a run agrees on.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How many inputs the run has.
    pub inputs: usize,
    /// How many compute nodes.
    pub computes: usize,
    /// Which scheduler places timeslices on compute nodes.
    pub scheduler: Kind,
    /// How timeslices are cut.
    pub slicing: Slicing,
    /// Mean content bytes per microslice, and the spread around it.
    pub microslice_size: u32,
    /// See `microslice_size`.
    pub microslice_spread: u32,
    /// Whose pattern the generator writes.
    pub pattern: Style,
    /// Replay archives instead of generating microslices.
    pub replay: Option<Replay>,
    /// Each input's source rate in 10^9 bytes a second (1 byte a nanosecond); 0: as fast
    /// as the run takes it.
    pub input_rate: f64,
    /// Each compute node's data ring per input, in bytes, and its descriptor ring, in entries.
    pub rings: RingSizes,
    /// Stop after this many timeslices (None: until stopped).
    pub timeslices: Option<u64>,
    /// How long a node waits without any progress before it gives up.
    pub timeout: Duration,
    /// Flip one content byte of input 0's component of this timeslice after its CRC was
    /// computed, to show that the compute node's check finds it.
    pub corrupt: Option<u64>,
    /// Set on any node to wind the run down: the inputs stop, agree with the compute nodes
    /// on the last timeslice, build everything before it, and finish.
    pub stop: Arc<AtomicBool>,
    /// Where each node's live metrics go, every second (None: nowhere).
    pub monitor: Option<Monitor>,
}

impl Settings {
    /// Bytes a frame needs for the largest timeslice these settings make: every input's
    /// largest component, each aligned. A replayed archive's components are bounded by the
    /// ring they must fit (at most 16 MiB each, so that frames stay modest).
    pub fn frame_capacity(&self) -> usize {
        let per_input = match &self.replay {
            Some(_) => self.rings.data.min(16 << 20) as usize,
            None => {
                let microslices = self.slicing.per_component() as usize;
                let most = (self.microslice_size + self.microslice_spread.min(self.microslice_size)) as usize;
                microslices * (crate::model::microslice::DESCRIPTOR_LEN + most)
            }
        };
        self.inputs * (per_input + crate::frames::PART_ALIGN)
    }

    /// How nodes judge their peers: beats every second, and a peer silent for half the
    /// timeout on a quiet host is given up (see [`crate::node::liveness`]).
    pub fn liveness(&self) -> LivenessSettings {
        LivenessSettings { every: HEARTBEAT_EVERY.as_nanos() as u64, limit: (self.timeout / 2).as_nanos() as u64 }
    }
}

/// Node `index`'s metrics of this second, as `measurement` (tagged with its host and index).
fn metrics(s: &Settings, measurement: &str, index: usize, fields: Vec<(&str, f64)>) {
    let Some(monitor) = &s.monitor else { return };
    let time = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let tags = vec![("host".into(), monitor.host().into()), ("node".into(), index.to_string())];
    let fields = fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    monitor.record(vec![Point { measurement: measurement.into(), tags, fields, time }]);
}

/// How often nodes record their metrics.
const METRICS_EVERY: Duration = Duration::from_secs(1);

/// The connection settings for a run's nodes. Their waits sleep at once rather than poll,
/// since every core is busy moving and checking data. A wait on one peer (a put into the ring
/// of a compute node whose link went down) lasts half the silence after which the others give
/// a node up, so that a node held up by one dead peer is back with the others before they
/// would take it for dead; and a peer whose host is gone is found by its connection within the
/// run's timeout.
pub fn connection_config(s: &Settings) -> wirespeed::Config {
    wirespeed::Config {
        shm_spin: Duration::ZERO,
        timeout: (s.timeout / 4).max(Duration::from_secs(1)),
        peer_timeout: s.timeout.max(Duration::from_secs(1)),
        ..wirespeed::Config::default()
    }
}

/// Nanoseconds since `t0`, the node's barrier.
fn since(t0: Instant) -> u64 {
    t0.elapsed().as_nanos() as u64
}

/// How long to wait at `now` for a node that must act again at `deadline`: never past
/// [`STOP_POLL`], so that the stop flag is seen.
fn until(deadline: Option<u64>, now: u64) -> Duration {
    deadline.map_or(STOP_POLL, |t| Duration::from_nanos(t.saturating_sub(now)).min(STOP_POLL))
}

const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// How long a node's loop may sleep before it looks at `Settings::stop` again.
const STOP_POLL: Duration = Duration::from_millis(50);

/// How often a node records its bandwidth and buffer fill, and how many samples it keeps (a
/// long run's are thinned evenly).
const SAMPLE_EVERY: Duration = Duration::from_millis(10);
const SAMPLES_KEPT: usize = 20_000;
