//! FLESnet's data model, byte for byte: microslice descriptors, components (one input's
//! contribution to a timeslice) and which microslices make timeslice t.

pub mod component;
pub mod microslice;
pub mod ramp;

pub use component::{ComponentDescriptor, ComponentView, component_len, timeslice_flags, write_component};
pub use microslice::{MicrosliceDescriptor, flags};

/// FLESnet's TimesliceDescriptor (class version 2), as archives and work items carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimesliceDescriptor {
    /// The timeslice's index.
    pub index: u64,
    /// When it starts (ns, by time slicing; else its first microslice's index).
    pub start_time: u64,
    /// How long it lasts (ns, by time slicing).
    pub duration: u64,
    /// FLESnet's timeslice flags (a component missing, an overflow).
    pub flags: u32,
    /// Where it starts in each component's microslices.
    pub ts_pos: u64,
    /// Microslices of its core, without the overlap.
    pub num_core_microslices: u32,
    /// How many components it has: one per input.
    pub num_components: u32,
}

impl TimesliceDescriptor {
    /// Its fields as Boost stores them (after the class information), 44 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(44);
        for v in [self.index, self.start_time, self.duration] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&self.flags.to_le_bytes());
        b.extend_from_slice(&self.ts_pos.to_le_bytes());
        b.extend_from_slice(&self.num_core_microslices.to_le_bytes());
        b.extend_from_slice(&self.num_components.to_le_bytes());
        b
    }
}

/// How timeslices are cut from each input's microslices.
///
/// By count (FLESnet's legacy builder): timeslice t holds microslices
/// [t·core, t·core + core + overlap), the overlap copied into both neighbours, and a
/// microslice's `idx` is its index.
///
/// By time (today's FLESnet, `time`): microslice k starts at k·microslice_ns (its `idx`), and
/// timeslice t, which starts at t·duration_ns, holds the microslices from the one covering
/// t·duration_ns − before_ns to the last that starts before (t + 1)·duration_ns + after_ns,
/// as FLESnet's `find_component` cuts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slicing {
    /// Microslices of a timeslice's core.
    pub core: u64,
    /// Microslices after the core, copied into both neighbours.
    pub overlap: u64,
    /// By time instead, as today's FLESnet cuts timeslices.
    pub time: Option<TimeSlicing>,
}

/// Timeslices cut by time, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeSlicing {
    /// How long a microslice lasts.
    pub microslice_ns: u64,
    /// How long a timeslice lasts.
    pub duration_ns: u64,
    /// How far before its start a timeslice reaches.
    pub before_ns: u64,
    /// How far past its end a timeslice reaches.
    pub after_ns: u64,
}

impl Slicing {
    /// Cut by count: `core` microslices each, and `overlap` shared with the next.
    pub fn count(core: u64, overlap: u64) -> Self {
        Slicing { core, overlap, time: None }
    }

    /// Cut by time (all in ns); `core` is then the microslices a duration holds.
    pub fn time(t: TimeSlicing) -> Self {
        Slicing { core: t.duration_ns.div_ceil(t.microslice_ns), overlap: 0, time: Some(t) }
    }

    /// The microslice indices timeslice `ts` holds.
    pub fn microslices(&self, ts: u64) -> std::ops::Range<u64> {
        match self.time {
            None => ts * self.core..ts * self.core + self.core + self.overlap,
            Some(t) => {
                let start = ts * t.duration_ns;
                let first = start.saturating_sub(t.before_ns) / t.microslice_ns;
                let end = (start + t.duration_ns + t.after_ns).div_ceil(t.microslice_ns);
                first..end
            }
        }
    }

    /// The most microslices a component holds.
    pub fn per_component(&self) -> u64 {
        match self.time {
            None => self.core + self.overlap,
            Some(t) => (t.before_ns + t.duration_ns + t.after_ns).div_ceil(t.microslice_ns) + 1,
        }
    }

    /// Microslice `k`'s `idx`: its index, or its start time in ns.
    pub fn idx(&self, k: u64) -> u64 {
        self.time.map_or(k, |t| k * t.microslice_ns)
    }

    /// Timeslice `ts`'s start time and duration as its descriptor gives them: in ns when cut
    /// by time; by count, the first core microslice's index and no duration, as FLESnet's
    /// legacy builder left them.
    pub fn start_and_duration(&self, ts: u64) -> (u64, u64) {
        match self.time {
            None => (ts * self.core, 0),
            Some(t) => (ts * t.duration_ns, t.duration_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_share_the_overlap() {
        let s = Slicing::count(100, 1);
        assert_eq!(s.microslices(0), 0..101);
        assert_eq!(s.microslices(3), 300..401);
        assert_eq!(s.microslices(2).end - 1, s.microslices(3).start);
        assert_eq!((s.idx(7), s.start_and_duration(3)), (7, (300, 0)));
    }

    /// By hand: microslices of 100 µs, timeslices of 1 ms with 150 µs before and 250 µs after.
    /// Timeslice 2 starts at 2,000,000 ns: from the microslice covering 1,850,000 (k = 18, at
    /// 1,800,000) to the last starting before 3,250,000 (k = 32, at 3,200,000).
    #[test]
    fn by_time_as_flesnet_cuts() {
        let t = TimeSlicing { microslice_ns: 100_000, duration_ns: 1_000_000, before_ns: 150_000, after_ns: 250_000 };
        let s = Slicing::time(t);
        assert_eq!(s.microslices(2), 18..33);
        assert_eq!(s.idx(18), 1_800_000);
        assert_eq!(s.start_and_duration(2), (2_000_000, 1_000_000));
        // The first timeslice cannot reach before time 0.
        assert_eq!(s.microslices(0), 0..13);
        assert_eq!(s.core, 10);
        assert!((0..50).all(|ts| s.microslices(ts).end - s.microslices(ts).start <= s.per_component()));
        // A duration that is not a whole number of microslices: the microslice covering a
        // boundary goes to both neighbours, since each takes the one covering its start.
        let s = Slicing::time(TimeSlicing { microslice_ns: 300, duration_ns: 1000, before_ns: 0, after_ns: 0 });
        assert_eq!([s.microslices(0), s.microslices(1), s.microslices(2)], [0..4, 3..7, 6..10]);
    }
}
