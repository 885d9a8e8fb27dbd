//! The small messages between inputs and compute nodes, on one stream per connection
//! (little-endian, a kind byte first). Component bytes and descriptors never travel here:
//! they are put into the compute node's rings.

use wirespeed::proto::codec::{Reader, Writer};

use crate::error::{Result, malformed};
use crate::node::Pointers;
use crate::sched::{IntervalReport, Proposal};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// Input → compute node, first: which input this connection is.
    Join { input: u32 },
    /// Compute node → input: its rings for this input, as region descriptors.
    Rings { data: Vec<u8>, descs: Vec<u8> },
    /// Input → compute node: written up to here (after the puts).
    Status(Pointers),
    /// Compute node → input: given back up to here.
    Ack(Pointers),
    /// Input → compute node (DFS).
    Report(IntervalReport),
    /// Compute node → input (DFS).
    Propose(Proposal),
    /// Compute node → input: the run is winding down, stop.
    Halt,
    /// Input → compute node: stopped; nothing at or past this timeslice is sent yet.
    Stop { horizon: u64 },
    /// Compute node → input: the agreed end; send everything below it, then finish.
    End { at: u64 },
    /// Both ways, every second: still here.
    Heartbeat,
    /// Input → compute node: this input gave compute node `compute` up; per residue
    /// (t mod C), below which timeslice that node had acknowledged everything to it.
    Lost { compute: u32, finished: Vec<(u64, u64)> },
    /// Compute node → input: compute node `compute` is lost, leave it out.
    Leave { compute: u32 },
}

const JOIN: u8 = 1;
const RINGS: u8 = 2;
const STATUS: u8 = 3;
const ACK: u8 = 4;
const REPORT: u8 = 5;
const PROPOSE: u8 = 6;
const HALT: u8 = 7;
const STOP: u8 = 8;
const END: u8 = 9;
const HEARTBEAT: u8 = 10;
const LOST: u8 = 11;
const LEAVE: u8 = 12;

/// A lost compute node's report has at most one bound per compute node.
const MAX_RESIDUES: u64 = 1 << 16;

/// Region descriptors are small; anything larger is garbage.
const MAX_DESCRIPTOR: usize = 4096;

impl Msg {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(32);
        let mut u64s = |kind: u8, v: &[u64]| {
            w.u8(kind);
            v.iter().for_each(|&x| w.u64(x));
        };
        match self {
            Msg::Join { input } => {
                w.u8(JOIN);
                w.u32(*input);
            }
            Msg::Rings { data, descs } => {
                w.u8(RINGS);
                w.prefixed(data);
                w.prefixed(descs);
            }
            Msg::Status(p) => u64s(STATUS, &[p.data, p.desc]),
            Msg::Ack(p) => u64s(ACK, &[p.data, p.desc]),
            Msg::Report(r) => u64s(REPORT, &[r.input as u64, r.interval, r.start, r.duration]),
            Msg::Propose(p) => u64s(PROPOSE, &[p.interval, p.start, p.duration]),
            Msg::Halt => u64s(HALT, &[]),
            Msg::Heartbeat => u64s(HEARTBEAT, &[]),
            Msg::Stop { horizon } => u64s(STOP, &[*horizon]),
            Msg::End { at } => u64s(END, &[*at]),
            Msg::Lost { compute, finished } => {
                u64s(LOST, &[u64::from(*compute), finished.len() as u64]);
                finished.iter().for_each(|&(r, below)| {
                    w.u64(r);
                    w.u64(below);
                });
            }
            Msg::Leave { compute } => u64s(LEAVE, &[u64::from(*compute)]),
        }
        w.into_inner()
    }

    pub fn decode(b: &[u8]) -> Result<Msg> {
        let mut r = Reader::new(b);
        let kind = r.u8().map_err(|_| malformed("message", "empty"))?;
        let msg = match kind {
            JOIN => Msg::Join { input: r.u32()? },
            RINGS => {
                let mut descriptor = || match r.prefixed()? {
                    d if d.len() > MAX_DESCRIPTOR => Err(malformed("rings", format!("a {}-byte descriptor", d.len()))),
                    d => Ok(d.to_vec()),
                };
                let (data, descs) = (descriptor()?, descriptor()?);
                Msg::Rings { data, descs }
            }
            STATUS => Msg::Status(Pointers { data: r.u64()?, desc: r.u64()? }),
            ACK => Msg::Ack(Pointers { data: r.u64()?, desc: r.u64()? }),
            REPORT => {
                let input = usize::try_from(r.u64()?).map_err(|_| malformed("report", "input"))?;
                Msg::Report(IntervalReport { input, interval: r.u64()?, start: r.u64()?, duration: r.u64()? })
            }
            PROPOSE => Msg::Propose(Proposal { interval: r.u64()?, start: r.u64()?, duration: r.u64()? }),
            HALT => Msg::Halt,
            HEARTBEAT => Msg::Heartbeat,
            STOP => Msg::Stop { horizon: r.u64()? },
            END => Msg::End { at: r.u64()? },
            LOST => {
                let compute = u32::try_from(r.u64()?).map_err(|_| malformed("lost", "compute node"))?;
                let count = r.u64()?;
                if count > MAX_RESIDUES {
                    return Err(malformed("lost", format!("{count} residues")));
                }
                let finished = (0..count).map(|_| Ok((r.u64()?, r.u64()?))).collect::<Result<Vec<_>>>()?;
                Msg::Lost { compute, finished }
            }
            LEAVE => Msg::Leave { compute: u32::try_from(r.u64()?).map_err(|_| malformed("leave", "compute node"))? },
            other => return Err(malformed("message", format!("unknown kind {other}"))),
        };
        match r.is_empty() {
            true => Ok(msg),
            false => Err(malformed("message", format!("kind {kind}: trailing bytes"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips() {
        let all = [
            Msg::Join { input: 7 },
            Msg::Rings { data: vec![1, 2, 3], descs: vec![] },
            Msg::Status(Pointers { data: 1 << 40, desc: 9 }),
            Msg::Ack(Pointers { data: 5, desc: 1 }),
            Msg::Report(IntervalReport { input: 3, interval: 4, start: 5, duration: 6 }),
            Msg::Propose(Proposal { interval: 1, start: 2, duration: 3 }),
            Msg::Halt,
            Msg::Stop { horizon: 12 },
            Msg::End { at: 13 },
            Msg::Heartbeat,
            Msg::Lost { compute: 2, finished: vec![(2, 40), (1, 7)] },
            Msg::Lost { compute: 0, finished: vec![] },
            Msg::Leave { compute: 3 },
        ];
        for m in all {
            assert_eq!(Msg::decode(&m.encode()).ok(), Some(m));
        }
    }

    /// A test vector for docs/PROTOCOL.md.
    #[test]
    fn status_bytes() {
        let b = Msg::Status(Pointers { data: 0x0102, desc: 3 }).encode();
        assert_eq!(b, [3, 2, 1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0]);
    }

    /// A test vector for docs/PROTOCOL.md.
    #[test]
    fn lost_bytes() {
        let b = Msg::Lost { compute: 1, finished: vec![(1, 9)] }.encode();
        let mut want = vec![11];
        for v in [1u64, 1, 1, 9] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(b, want);
        assert!(Msg::decode(&b[..b.len() - 8]).is_err(), "truncated");
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            if let Ok(m) = Msg::decode(&bytes) {
                prop_assert_eq!(Msg::decode(&m.encode()).ok(), Some(m));
            }
        }
    }
}
