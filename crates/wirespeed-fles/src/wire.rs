//! The small messages between inputs and compute nodes, on one stream per connection
//! (little-endian, a kind byte first). Component bytes and descriptors never travel here:
//! they are put into the compute node's rings.

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
        let mut b = Vec::with_capacity(32);
        let u64s = |b: &mut Vec<u8>, v: &[u64]| v.iter().for_each(|x| b.extend_from_slice(&x.to_le_bytes()));
        match self {
            Msg::Join { input } => {
                b.push(JOIN);
                b.extend_from_slice(&input.to_le_bytes());
            }
            Msg::Rings { data, descs } => {
                b.push(RINGS);
                for d in [data, descs] {
                    b.extend_from_slice(&(d.len() as u32).to_le_bytes());
                    b.extend_from_slice(d);
                }
            }
            Msg::Status(p) | Msg::Ack(p) => {
                b.push(if matches!(self, Msg::Status(_)) { STATUS } else { ACK });
                u64s(&mut b, &[p.data, p.desc]);
            }
            Msg::Report(r) => {
                b.push(REPORT);
                u64s(&mut b, &[r.input as u64, r.interval, r.start, r.duration]);
            }
            Msg::Propose(p) => {
                b.push(PROPOSE);
                u64s(&mut b, &[p.interval, p.start, p.duration]);
            }
            Msg::Halt => b.push(HALT),
            Msg::Heartbeat => b.push(HEARTBEAT),
            Msg::Stop { horizon } => {
                b.push(STOP);
                u64s(&mut b, &[*horizon]);
            }
            Msg::End { at } => {
                b.push(END);
                u64s(&mut b, &[*at]);
            }
            Msg::Lost { compute, finished } => {
                b.push(LOST);
                u64s(&mut b, &[u64::from(*compute), finished.len() as u64]);
                finished.iter().for_each(|(r, below)| u64s(&mut b, &[*r, *below]));
            }
            Msg::Leave { compute } => {
                b.push(LEAVE);
                u64s(&mut b, &[u64::from(*compute)]);
            }
        }
        b
    }

    pub fn decode(b: &[u8]) -> Result<Msg> {
        let (&kind, mut rest) = b.split_first().ok_or_else(|| malformed("message", "empty"))?;
        let mut u64s = |n: usize| -> Result<Vec<u64>> {
            if rest.len() != n * 8 {
                return Err(malformed("message", format!("kind {kind}: {} bytes, not {}", rest.len(), n * 8)));
            }
            let v = rest.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
            rest = &[];
            Ok(v)
        };
        Ok(match kind {
            JOIN => {
                let v: [u8; 4] = rest.try_into().map_err(|_| malformed("join", "not 4 bytes"))?;
                Msg::Join { input: u32::from_le_bytes(v) }
            }
            RINGS => {
                let mut parts = Vec::new();
                let mut at = rest;
                for _ in 0..2 {
                    let (len, tail) = at.split_first_chunk::<4>().ok_or_else(|| malformed("rings", "truncated"))?;
                    let len = u32::from_le_bytes(*len) as usize;
                    if len > MAX_DESCRIPTOR || tail.len() < len {
                        return Err(malformed("rings", format!("a {len}-byte descriptor")));
                    }
                    parts.push(tail[..len].to_vec());
                    at = &tail[len..];
                }
                if !at.is_empty() {
                    return Err(malformed("rings", "trailing bytes"));
                }
                let descs = parts.pop().expect("two");
                Msg::Rings { data: parts.pop().expect("two"), descs }
            }
            STATUS | ACK => {
                let v = u64s(2)?;
                let p = Pointers { data: v[0], desc: v[1] };
                if kind == STATUS { Msg::Status(p) } else { Msg::Ack(p) }
            }
            REPORT => {
                let v = u64s(4)?;
                let input = usize::try_from(v[0]).map_err(|_| malformed("report", "input"))?;
                Msg::Report(IntervalReport { input, interval: v[1], start: v[2], duration: v[3] })
            }
            PROPOSE => {
                let v = u64s(3)?;
                Msg::Propose(Proposal { interval: v[0], start: v[1], duration: v[2] })
            }
            HALT => {
                u64s(0)?;
                Msg::Halt
            }
            HEARTBEAT => {
                u64s(0)?;
                Msg::Heartbeat
            }
            STOP => Msg::Stop { horizon: u64s(1)?[0] },
            END => Msg::End { at: u64s(1)?[0] },
            LOST => {
                // The count follows the kind byte and the compute node.
                let count = b.get(9..17).ok_or_else(|| malformed("lost", "truncated"))?;
                let count = u64::from_le_bytes(count.try_into().expect("8 bytes"));
                if count > MAX_RESIDUES {
                    return Err(malformed("lost", format!("{count} residues")));
                }
                let v = u64s(2 + 2 * count as usize)?;
                let compute = u32::try_from(v[0]).map_err(|_| malformed("lost", "compute node"))?;
                Msg::Lost { compute, finished: v[2..].chunks_exact(2).map(|p| (p[0], p[1])).collect() }
            }
            LEAVE => {
                let compute = u32::try_from(u64s(1)?[0]).map_err(|_| malformed("leave", "compute node"))?;
                Msg::Leave { compute }
            }
            other => return Err(malformed("message", format!("unknown kind {other}"))),
        })
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
