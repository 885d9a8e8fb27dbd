//! The flags every node of a run shares, and the settings they make.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};
use wirespeed::Fabric;
use wirespeed_fles::model::{Slicing, TimeSlicing};
use wirespeed_fles::node::RingSizes;
use wirespeed_fles::run::{Replay, Settings};
use wirespeed_fles::sched::{DfsSettings, Kind, dfs::Speedup};
use wirespeed_fles::source::pattern::Style;

/// Whose test pattern the inputs generate.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PatternFlag {
    /// Ours: well-mixed words under a CRC-32C, which any consumer checks without knowing the
    /// pattern.
    Wirespeed,
    /// FLESnet's ramp (subsystem 0xF0, format 0x81), as its pattern generators write it and
    /// tsclient's pattern checker verifies it; it carries no CRC.
    Flesnet,
}

impl PatternFlag {
    fn style(self) -> Style {
        match self {
            PatternFlag::Wirespeed => Style::Wirespeed,
            PatternFlag::Flesnet => Style::Flesnet,
        }
    }
}

/// Which microslices' CRCs a compute node checks before it puts a timeslice out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Verify {
    /// Every one.
    All,
    /// Those of every 16th timeslice.
    Sample,
    /// None: as FLESnet, which leaves it to the consumers.
    None,
}

impl Verify {
    /// Whether timeslice `index`'s microslices are checked.
    pub fn checks(self, index: u64) -> bool {
        match self {
            Verify::All => true,
            Verify::Sample => index.is_multiple_of(16),
            Verify::None => false,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verify::All => "all",
            Verify::Sample => "sample",
            Verify::None => "none",
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scheduler {
    /// FLESnet's round robin: timeslice t to compute node t mod C, as soon as there is room.
    Rr,
    /// The Data-Flow Scheduler: offset round robin, paced intervals, acknowledgement gate.
    Dfs,
}

/// Which scheduler a run uses, and the DFS's settings.
#[derive(Args, Clone)]
pub struct SchedulerFlags {
    #[arg(long, value_enum, default_value = "dfs")]
    pub scheduler: Scheduler,
    /// DFS: the interval is floor(L / C) rounds of C timeslices.
    #[arg(long, default_value_t = 10_000)]
    pub interval_length: u64,
    /// DFS: proposals follow the median of this many intervals.
    #[arg(long, default_value_t = 10)]
    pub history: usize,
    /// DFS: share of an interval acknowledged before the next starts.
    #[arg(long, default_value_t = 0.995)]
    pub ack_gate: f64,
    /// DFS: no staged speed-up.
    #[arg(long)]
    pub no_speedup: bool,
}

impl SchedulerFlags {
    pub fn kind(&self) -> Result<Kind> {
        if !(0.0..=1.0).contains(&self.ack_gate) {
            bail!("--ack-gate is a share, from 0 to 1");
        }
        Ok(match self.scheduler {
            Scheduler::Rr => Kind::RoundRobin,
            Scheduler::Dfs => Kind::Dfs(DfsSettings {
                interval_length: self.interval_length,
                history: self.history,
                ack_gate: self.ack_gate,
                speedup: (!self.no_speedup).then(Speedup::default),
            }),
        })
    }

    pub fn name(&self) -> &'static str {
        match self.scheduler {
            Scheduler::Rr => "rr",
            Scheduler::Dfs => "dfs",
        }
    }

    /// The flags again, for a node process.
    fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            format!("--scheduler={}", self.name()),
            format!("--interval-length={}", self.interval_length),
            format!("--history={}", self.history),
            format!("--ack-gate={}", self.ack_gate),
        ];
        if self.no_speedup {
            v.push("--no-speedup".into());
        }
        v
    }
}

#[derive(Args, Clone)]
pub struct RunFlags {
    /// tcp, shm, ucx or ofi+<provider>.
    #[arg(long, default_value = "shm")]
    pub transport: Fabric,
    #[command(flatten)]
    pub scheduling: SchedulerFlags,
    /// Core microslices per timeslice.
    #[arg(long, default_value_t = 100)]
    pub timeslice_size: u64,
    /// Microslices each timeslice shares with the next.
    #[arg(long, default_value_t = 1)]
    pub overlap: u64,
    /// Cut timeslices by time, as today's FLESnet does, rather than by count: each spans this
    /// many ns of microslice start times (`idx`), microslices being --microslice-duration ns.
    #[arg(long, conflicts_with_all = ["timeslice_size", "overlap"])]
    pub timeslice_duration: Option<u64>,
    /// With --timeslice-duration: ns of microslices before a timeslice's start it also holds.
    #[arg(long, default_value_t = 0, requires = "timeslice_duration")]
    pub overlap_before: u64,
    /// With --timeslice-duration: ns of microslices after its end it also holds.
    #[arg(long, default_value_t = 0, requires = "timeslice_duration")]
    pub overlap_after: u64,
    /// With --timeslice-duration: each microslice's span in ns (its idx is k times this).
    #[arg(long, default_value_t = 100_000, requires = "timeslice_duration")]
    pub microslice_duration: u64,
    /// Mean content bytes per microslice (650 makes a component of about 64 KiB).
    #[arg(long, default_value_t = 650)]
    pub microslice_size: u32,
    /// Microslice sizes vary uniformly by up to this many bytes either way.
    #[arg(long, default_value_t = 0)]
    pub microslice_spread: u32,
    /// The generator's pattern.
    #[arg(long, value_enum, default_value = "wirespeed")]
    pub pattern: PatternFlag,
    /// Which microslices' CRCs the compute nodes check (with --output null, tsa: or arrow:;
    /// shm: leaves them to the consumers, --gpu checks all of them on the GPU).
    #[arg(long, value_enum, default_value = "all")]
    pub verify: Verify,
    /// Replay archives instead of generating microslices: a timeslice archive (.tsa, FLESnet's
    /// or ours, maybe zstd-compressed): input i sends component i (mod the archive's count) of
    /// each archived timeslice in turn, round and round; or microslice archives (.msa, as
    /// mstool writes them), comma-separated, one per input: each input's microslices cut into
    /// components as the run slices them, each once (the run ends when one runs out).
    #[arg(long, value_delimiter = ',')]
    pub replay: Vec<PathBuf>,
    /// Each input's data rate in GB/s (10^9 bytes a second), as a detector delivers it; 0:
    /// as fast as the run takes it.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Data ring per input at each compute node, in bytes.
    #[arg(long, default_value_t = 32 << 20)]
    pub buffer_size: u64,
    /// Descriptor ring per input at each compute node, in components.
    #[arg(long, default_value_t = 4096)]
    pub descriptors: u64,
    /// Stop after this many timeslices (default: run until interrupted, then finish the
    /// timeslices begun).
    #[arg(long)]
    pub timeslices: Option<u64>,
    /// Seconds a node waits without progress before it gives up; a compute node goes on
    /// without an input it has not heard from (not even its heartbeat) for half of it.
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
    /// Build each timeslice contiguously in this GPU's memory (its number; "host": host
    /// memory, by the same path): components are copied there as they arrive, and every
    /// microslice's CRC is checked on the GPU.
    #[arg(long, value_name = "DEVICE")]
    pub gpu: Option<FrameTarget>,
    /// With --gpu: timeslices in flight in frame memory.
    #[arg(long, default_value_t = 8)]
    pub frames: usize,
    /// With --gpu DEVICE: the receive rings in GPU memory, for the inputs to put into
    /// directly (shm: by CUDA IPC, from replayed components page-locked for DMA; ucx: with
    /// its CUDA transports), so frames are copied within the GPU. Where the fabric cannot
    /// (tcp, ofi), the rings stay in host memory and the report says why.
    #[arg(long)]
    pub gpu_rings: bool,
    /// With --gpu: bytes per frame (default: the largest timeslice these settings make; when
    /// replaying, the data ring per input, at most 16 MiB).
    #[arg(long)]
    pub frame_bytes: Option<usize>,
    /// Flip one content byte of input 0's component of this timeslice (after its CRC), to
    /// show that the check finds it.
    #[arg(long, hide = true)]
    pub corrupt: Option<u64>,
}

/// Where `--gpu` builds frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameTarget {
    Gpu(usize),
    Host,
}

impl std::str::FromStr for FrameTarget {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "host" => Ok(FrameTarget::Host),
            _ => s.parse().map(FrameTarget::Gpu).map_err(|_| format!("{s}: expected a GPU's number or \"host\"")),
        }
    }
}

impl std::fmt::Display for FrameTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameTarget::Gpu(n) => write!(f, "{n}"),
            FrameTarget::Host => f.write_str("host"),
        }
    }
}

/// Frames for a compute node's timeslices (`--gpu`).
#[derive(Clone, Copy, Debug)]
pub struct FrameSettings {
    pub target: FrameTarget,
    pub frames: usize,
    pub capacity: usize,
    /// The receive rings in GPU memory (`--gpu-rings`).
    pub gpu_rings: bool,
}

impl RunFlags {
    /// The run's settings; setting `stop` winds the run down.
    pub fn settings(&self, inputs: usize, computes: usize, stop: Arc<AtomicBool>) -> Result<Settings> {
        if inputs == 0 || computes == 0 || self.timeslice_size == 0 || self.buffer_size == 0 || self.descriptors == 0 {
            bail!("inputs, compute nodes, --timeslice-size, --buffer-size and --descriptors must be at least 1");
        }
        if !(self.rate >= 0.0 && self.rate.is_finite()) {
            bail!("--rate is in GB/s, 0 or more");
        }
        let scheduler = self.scheduling.kind()?;
        let slicing = self.slicing()?;
        let replay = self.replay()?;
        let mut timeslices = self.timeslices;
        if let Some(held) = replay.as_ref().map(|r| r.timeslices(slicing)).transpose()?.flatten() {
            if timeslices.is_some_and(|n| n > held) || held == 0 {
                bail!("the microslice archives hold {held} whole timeslices; --timeslices asks for more");
            }
            timeslices = Some(timeslices.unwrap_or(held));
        }
        Ok(Settings {
            inputs,
            computes,
            scheduler,
            slicing,
            microslice_size: self.microslice_size,
            microslice_spread: self.microslice_spread.min(self.microslice_size),
            pattern: self.pattern.style(),
            input_rate: self.rate,
            replay,
            rings: RingSizes { data: self.buffer_size, descs: self.descriptors },
            timeslices,
            timeout: Duration::from_secs(self.timeout),
            corrupt: self.corrupt,
            stop,
            monitor: None,
        })
    }

    /// Where `--gpu` builds frames, and how large they are; None without it.
    pub fn frame_settings(&self, s: &Settings) -> Result<Option<FrameSettings>> {
        let Some(target) = self.gpu else {
            if self.gpu_rings {
                bail!("--gpu-rings goes with --gpu DEVICE");
            }
            return Ok(None);
        };
        if self.frames == 0 {
            bail!("--frames must be at least 1");
        }
        if self.gpu_rings && target == FrameTarget::Host {
            bail!("--gpu-rings puts the rings in a GPU's memory: give --gpu a GPU's number");
        }
        let capacity = self.frame_bytes.unwrap_or_else(|| s.frame_capacity());
        Ok(Some(FrameSettings { target, frames: self.frames, capacity, gpu_rings: self.gpu_rings }))
    }

    /// What the report says about the run.
    pub fn describe(&self, inputs: usize, computes: usize) -> serde_json::Value {
        serde_json::json!({
            "inputs": inputs, "computes": computes, "transport": self.transport.to_string(),
            "scheduler": self.scheduling.name(), "timeslice_size": self.timeslice_size, "overlap": self.overlap,
            "microslice_size": self.microslice_size, "buffer_size": self.buffer_size,
            "verify": self.verify.name(),
        })
    }

    /// `--replay`: one timeslice archive, or microslice archives (.msa).
    fn replay(&self) -> Result<Option<Replay>> {
        let msa = |p: &PathBuf| p.extension().is_some_and(|e| e == "msa");
        match self.replay.as_slice() {
            [] => Ok(None),
            paths if paths.iter().all(msa) => Ok(Some(Replay::Microslices(paths.to_vec()))),
            [one] => Ok(Some(Replay::Timeslices(one.clone()))),
            _ => bail!("--replay takes one timeslice archive, or microslice archives (.msa), one per input"),
        }
    }

    fn slicing(&self) -> Result<Slicing> {
        let Some(duration_ns) = self.timeslice_duration else {
            return Ok(Slicing::count(self.timeslice_size, self.overlap));
        };
        if duration_ns == 0 || self.microslice_duration == 0 {
            bail!("--timeslice-duration and --microslice-duration are ns, at least 1");
        }
        let (before_ns, after_ns, microslice_ns) = (self.overlap_before, self.overlap_after, self.microslice_duration);
        Ok(Slicing::time(TimeSlicing { microslice_ns, duration_ns, before_ns, after_ns }))
    }

    /// The flags again, for a node process.
    pub fn to_args(&self) -> Vec<String> {
        let mut v = vec![
            format!("--transport={}", self.transport),
            format!("--microslice-size={}", self.microslice_size),
            format!("--microslice-spread={}", self.microslice_spread),
            format!("--pattern={}", self.pattern.to_possible_value().expect("no skipped variants").get_name()),
            format!("--verify={}", self.verify.name()),
            format!("--rate={}", self.rate),
            format!("--buffer-size={}", self.buffer_size),
            format!("--descriptors={}", self.descriptors),
            format!("--timeout={}", self.timeout),
        ];
        v.extend(self.scheduling.to_args());
        if self.timeslice_duration.is_none() {
            v.push(format!("--timeslice-size={}", self.timeslice_size));
            v.push(format!("--overlap={}", self.overlap));
        }
        if let Some(ns) = self.timeslice_duration {
            v.push(format!("--timeslice-duration={ns}"));
            v.push(format!("--overlap-before={}", self.overlap_before));
            v.push(format!("--overlap-after={}", self.overlap_after));
            v.push(format!("--microslice-duration={}", self.microslice_duration));
        }
        if !self.replay.is_empty() {
            let paths: Vec<String> = self.replay.iter().map(|p| p.display().to_string()).collect();
            v.push(format!("--replay={}", paths.join(",")));
        }
        if let Some(n) = self.timeslices {
            v.push(format!("--timeslices={n}"));
        }
        if let Some(g) = self.gpu {
            v.push(format!("--gpu={g}"));
            v.push(format!("--frames={}", self.frames));
        }
        if self.gpu_rings {
            v.push("--gpu-rings".into());
        }
        if let Some(b) = self.frame_bytes {
            v.push(format!("--frame-bytes={b}"));
        }
        if let Some(ts) = self.corrupt {
            v.push(format!("--corrupt={ts}"));
        }
        v
    }
}
