//! What an input sends: components from the pattern generator, built as they are planned;
//! from a timeslice archive, loaded once and replayed round and round; or cut from a
//! microslice archive's microslices, each once, as the run's slicing says.

use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;

use super::{Replay, Settings};
use crate::error::{FlesError, Result, io};
use crate::model::{MicrosliceDescriptor, Slicing, component_len, write_component};
use crate::source::{MsaReader, Pattern, TsaReader};

/// At most this many of an archive's timeslices are held for replay.
const REPLAY_MAX: usize = 1024;

pub(crate) enum Feed {
    Pattern {
        pattern: Pattern,
        built: HashMap<u64, Vec<u8>>,
    },
    /// Each timeslice's component for this input, and its microslice count.
    Replay(Vec<(Vec<u8>, u64)>),
    /// This input's microslices, and components cut from them as they are planned.
    Microslices {
        microslices: Vec<(MicrosliceDescriptor, Vec<u8>)>,
        built: HashMap<u64, (Vec<u8>, u64)>,
    },
}

impl Feed {
    pub(super) fn new(s: &Settings, input: usize) -> Result<Feed> {
        match &s.replay {
            None => {
                let pattern =
                    Pattern { style: s.pattern, ..Pattern::new(input as u16, s.microslice_size, s.microslice_spread) };
                Ok(Feed::Pattern { pattern, built: HashMap::new() })
            }
            Some(Replay::Timeslices(path)) => load(path, input).map(Feed::Replay),
            Some(Replay::Microslices(paths)) => {
                let microslices = load_microslices(&paths[input % paths.len()])?;
                Ok(Feed::Microslices { microslices, built: HashMap::new() })
            }
        }
    }

    /// Timeslice `ts`'s component size, built if need be.
    pub(super) fn size(&mut self, ts: u64, s: &Settings) -> u64 {
        match self {
            Feed::Pattern { pattern, built } => {
                let build = || {
                    let mut c = pattern.component(ts, s.slicing);
                    if s.corrupt == Some(ts) && pattern.input == 0 {
                        *c.last_mut().expect("a component holds its descriptors") ^= 0x5A;
                    }
                    c
                };
                built.entry(ts).or_insert_with(build).len() as u64
            }
            Feed::Replay(c) => c[(ts % c.len() as u64) as usize].0.len() as u64,
            Feed::Microslices { microslices, built } => {
                built.entry(ts).or_insert_with(|| cut(microslices, s.slicing, ts)).0.len() as u64
            }
        }
    }

    /// Timeslice `ts`'s component (sized before) and its microslice count, for `send`.
    pub(super) fn with<T>(&mut self, ts: u64, s: &Settings, send: impl FnOnce(&[u8], u64) -> T) -> T {
        match self {
            Feed::Pattern { built, .. } => {
                let bytes = built.remove(&ts).expect("sized before it was placed");
                let range = s.slicing.microslices(ts);
                send(&bytes, range.end - range.start)
            }
            Feed::Replay(c) => {
                let (bytes, n) = &c[(ts % c.len() as u64) as usize];
                send(bytes, *n)
            }
            Feed::Microslices { built, .. } => {
                let (bytes, n) = built.remove(&ts).expect("sized before it was placed");
                send(&bytes, n)
            }
        }
    }
}

impl Feed {
    /// Page-locks the replayed components for `gpu`'s copy engines, which then read them by
    /// DMA when this input's puts land in GPU memory. The driver locks whole pages and refuses
    /// a page twice, and components on the heap may share pages: each run of pages that
    /// components touch is locked once. A run the driver refuses is copied from pageable
    /// memory instead (slower, not wrong).
    #[cfg(feature = "gpu")]
    pub(super) fn pin(&self, gpu: &wirespeed::gpu::Gpu) -> Vec<wirespeed::gpu::Registration> {
        const PAGE: usize = 4096;
        let Feed::Replay(components) = self else { return Vec::new() };
        let mut spans: Vec<(usize, usize)> = components
            .iter()
            .filter(|(c, _)| !c.is_empty())
            .map(|(c, _)| {
                let start = c.as_ptr() as usize;
                (start / PAGE * PAGE, (start + c.len()).next_multiple_of(PAGE))
            })
            .collect();
        spans.sort_unstable();
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (start, end) in spans {
            match runs.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => runs.push((start, end)),
            }
        }
        // SAFETY: every page of a run holds part of a component, mapped while the feed lives;
        // the caller drops the registrations before it.
        runs.into_iter()
            .filter_map(|(start, end)| unsafe { gpu.register(start as *mut u8, end - start) }.ok())
            .collect()
    }
}

/// Input `input`'s components of the archive at `path` (component `input` mod the number
/// there are, so fewer archived inputs serve more).
fn load(path: &Path, input: usize) -> Result<Vec<(Vec<u8>, u64)>> {
    let file = std::fs::File::open(path).map_err(|e| io(format!("opening {}", path.display()), e))?;
    let mut reader = TsaReader::new(BufReader::new(file))?;
    let mut out = Vec::new();
    while out.len() < REPLAY_MAX {
        let Some(mut ts) = reader.next_timeslice()? else { break };
        if ts.components.is_empty() {
            continue;
        }
        let k = input % ts.components.len();
        out.push(ts.components.swap_remove(k));
    }
    if out.is_empty() {
        return Err(FlesError::NothingToReplay { path: path.display().to_string(), holds: "timeslices" });
    }
    Ok(out)
}

/// Every microslice of the microslice archive at `path`.
fn load_microslices(path: &Path) -> Result<Vec<(MicrosliceDescriptor, Vec<u8>)>> {
    let file = std::fs::File::open(path).map_err(|e| io(format!("opening {}", path.display()), e))?;
    let mut reader = MsaReader::new(BufReader::new(file))?;
    let microslices = std::iter::from_fn(|| reader.next_microslice().transpose()).collect::<Result<Vec<_>>>()?;
    if microslices.is_empty() {
        return Err(FlesError::NothingToReplay { path: path.display().to_string(), holds: "microslices" });
    }
    Ok(microslices)
}

/// Which of `microslices` timeslice `ts` holds: by position when cut by count; when cut by
/// time, by their `idx` (ns), from the one covering the start less the overlap before to the
/// last starting before the end plus the overlap after, as FLESnet's `find_component` does.
fn positions(microslices: &[(MicrosliceDescriptor, Vec<u8>)], slicing: Slicing, ts: u64) -> std::ops::Range<usize> {
    let len = microslices.len();
    let Some(t) = slicing.time else {
        let r = slicing.microslices(ts);
        return (r.start as usize).min(len)..(r.end as usize).min(len);
    };
    let (start, _) = slicing.start_and_duration(ts);
    let (first_ns, end_ns) = (start.saturating_sub(t.before_ns), start + t.duration_ns + t.after_ns);
    let first = microslices.partition_point(|(d, _)| d.idx <= first_ns).saturating_sub(1);
    let end = microslices.partition_point(|(d, _)| d.idx < end_ns);
    first..end.max(first)
}

/// Timeslice `ts`'s component from `microslices`: their descriptors (offsets made back to
/// back) and contents, and how many there are.
fn cut(microslices: &[(MicrosliceDescriptor, Vec<u8>)], slicing: Slicing, ts: u64) -> (Vec<u8>, u64) {
    let chosen = &microslices[positions(microslices, slicing, ts)];
    let mut offset = chosen.first().map_or(0, |(d, _)| d.offset);
    let parts: Vec<(MicrosliceDescriptor, &[u8])> = chosen
        .iter()
        .map(|(d, content)| {
            let d = MicrosliceDescriptor { offset, ..*d };
            offset += content.len() as u64;
            (d, &content[..])
        })
        .collect();
    let descs: Vec<MicrosliceDescriptor> = parts.iter().map(|(d, _)| *d).collect();
    let mut out = vec![0u8; component_len(&descs)];
    write_component(&parts, &mut out);
    (out, parts.len() as u64)
}

/// Whole timeslices a microslice archive of `microslices` (their `idx` values, in order) holds
/// for `slicing`: those whose every microslice is there.
pub(super) fn whole_timeslices(idx: &[u64], slicing: Slicing) -> u64 {
    let Some(&last) = idx.last() else { return 0 };
    let ends = |ts: u64| match slicing.time {
        None => slicing.microslices(ts).end <= idx.len() as u64,
        Some(t) => slicing.start_and_duration(ts).0 + t.duration_ns + t.after_ns <= last,
    };
    (0..).take_while(|&ts| ends(ts)).count() as u64
}
