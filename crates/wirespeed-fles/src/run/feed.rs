//! What an input sends: components from the pattern generator, built as they are planned, or
//! from a timeslice archive, loaded once and replayed round and round.

use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;

use super::Settings;
use crate::error::{FlesError, Result};
use crate::source::{Pattern, TsaReader};

/// At most this many of an archive's timeslices are held for replay.
const REPLAY_MAX: usize = 1024;

pub(crate) enum Feed {
    Pattern {
        pattern: Pattern,
        built: HashMap<u64, Vec<u8>>,
    },
    /// Each timeslice's component for this input, and its microslice count.
    Replay(Vec<(Vec<u8>, u64)>),
}

impl Feed {
    pub fn new(s: &Settings, input: usize) -> Result<Feed> {
        match &s.replay {
            None => {
                let pattern =
                    Pattern { style: s.pattern, ..Pattern::new(input as u16, s.microslice_size, s.microslice_spread) };
                Ok(Feed::Pattern { pattern, built: HashMap::new() })
            }
            Some(path) => load(path, input).map(Feed::Replay),
        }
    }

    /// Timeslice `ts`'s component size, built if need be.
    pub fn size(&mut self, ts: u64, s: &Settings) -> u64 {
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
        }
    }

    /// Timeslice `ts`'s component (sized before) and its microslice count, for `send`.
    pub fn with<T>(&mut self, ts: u64, s: &Settings, send: impl FnOnce(&[u8], u64) -> T) -> T {
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
    pub fn pin(&self, gpu: &wirespeed::gpu::Gpu) -> Vec<wirespeed::gpu::Registration> {
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
    let file = std::fs::File::open(path).map_err(|e| FlesError::Archive(format!("{}: {e}", path.display())))?;
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
        return Err(FlesError::Archive(format!("{} holds no timeslices to replay", path.display())));
    }
    Ok(out)
}
