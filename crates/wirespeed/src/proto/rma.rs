//! One-sided transfers (RMA) as frames, for fabrics that cannot do them: what a region
//! descriptor and the Put, Get and GetReply frames carry, and the state that applies them.
//! See docs/PROTOCOL.md. Every decoder checks lengths and never panics.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::codec::{self, Writer};
use super::frame::{FrameHeader, HEADER_LEN, Kind, Touched};
use crate::error::{Limit, Result, Violation};
use crate::mem::{Buf, RegionMem};

const MAGIC: &[u8; 4] = b"WSRG";
/// Native access information (a UCX address and packed rkey) is a few hundred bytes.
const MAX_NATIVE: usize = 64 << 10;

/// What a peer needs to reach a region: its id on the connection, its length, and, on
/// fabrics with native RMA, the fabric's own access information.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    pub id: u32,
    pub len: u64,
    pub native: Vec<u8>,
}

impl Descriptor {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::with_capacity(20 + self.native.len());
        w.bytes(MAGIC);
        w.u32(self.id);
        w.u64(self.len);
        w.prefixed(&self.native);
        w.into_inner()
    }

    pub fn decode(b: &[u8]) -> Result<Self> {
        match codec::read_all(b, |r| Ok((r.array::<4>()?, r.u32()?, r.u64()?, r.prefixed()?))) {
            Some((magic, id, len, native)) if &magic == MAGIC && native.len() <= MAX_NATIVE => {
                Ok(Descriptor { id, len, native: native.to_vec() })
            }
            _ => Err(Violation::Malformed("region descriptor").into()),
        }
    }
}

/// A frame's head (encoded header, then the meta `meta` writes) for `len` payload bytes.
fn head(kind: Kind, len: u64, meta: impl FnOnce(&mut Writer)) -> Vec<u8> {
    let mut w = Writer::with_capacity(HEADER_LEN + 16);
    w.bytes(&[0; HEADER_LEN]);
    meta(&mut w);
    let mut head = w.into_inner();
    let mut h = FrameHeader::new(kind, 0);
    h.meta_len = (head.len() - HEADER_LEN) as u32;
    h.len = len;
    head[..HEADER_LEN].copy_from_slice(&h.encode());
    head
}

/// The head of a Put of `len` bytes at `offset` in region `id`. Put meta: region id, offset;
/// the payload is written there.
pub fn put_head(id: u32, offset: u64, len: u64) -> Vec<u8> {
    head(Kind::Put, len, |w| {
        w.u32(id);
        w.u64(offset);
    })
}

/// The head of a Get of `len` bytes at `offset` in region `id`, answered under `request`. Get
/// meta: region id, offset, request id (the frame's `len` holds the byte count).
pub fn get_head(id: u32, offset: u64, request: u32, len: u64) -> Vec<u8> {
    head(Kind::Get, len, |w| {
        w.u32(id);
        w.u64(offset);
        w.u32(request);
    })
}

/// The head of `len` bytes answering get `request`. GetReply meta: the request id; replies to
/// one request arrive in order.
pub fn get_reply_head(request: u32, len: u64) -> Vec<u8> {
    head(Kind::GetReply, len, |w| w.u32(request))
}

pub fn parse_put_meta(m: &[u8]) -> Result<(u32, u64)> {
    codec::read_all(m, |r| Ok((r.u32()?, r.u64()?))).ok_or(Violation::Malformed("put frame").into())
}

pub fn parse_get_meta(m: &[u8]) -> Result<(u32, u64, u32)> {
    codec::read_all(m, |r| Ok((r.u32()?, r.u64()?, r.u32()?))).ok_or(Violation::Malformed("get frame").into())
}

pub fn parse_reply_meta(m: &[u8]) -> Result<u32> {
    codec::read_all(m, |r| r.u32()).ok_or(Violation::Malformed("get reply").into())
}

/// A get the peer asked for, to answer with GetReply frames from `mem`.
pub struct GetJob {
    pub request: u32,
    pub mem: Arc<RegionMem>,
    pub offset: u64,
    pub len: u64,
}

/// A get we asked for: what has come back so far.
struct PendingGet {
    len: u64,
    got: u64,
    parts: Vec<Buf>,
}

/// Regions the peer may reach, gets we wait for, and gets the peer wants answered.
#[derive(Default)]
pub struct Rma {
    regions: HashMap<u32, Arc<RegionMem>>,
    last_region: u32,
    gets: HashMap<u32, PendingGet>,
    last_get: u32,
    jobs: VecDeque<GetJob>,
}

impl Rma {
    /// Applies a Put, queues a Get's answer, or collects a GetReply. An error is fatal.
    pub fn on_frame(&mut self, h: &FrameHeader, meta: &[u8], payload: Buf) -> Result<Touched> {
        match h.kind {
            Kind::Put => {
                let (id, offset) = parse_put_meta(meta)?;
                self.region(id)?.write(offset, &payload).map_err(|_| Violation::OutsideRegion { region: id })?;
                Ok(Touched::Nobody)
            }
            Kind::Get => {
                let (id, offset, request) = parse_get_meta(meta)?;
                let mem = self.region(id)?;
                mem.check(offset, usize::try_from(h.len).unwrap_or(usize::MAX))
                    .map_err(|_| Violation::OutsideRegion { region: id })?;
                self.jobs.push_back(GetJob { request, mem, offset, len: h.len });
                Ok(Touched::Nobody)
            }
            _ => {
                let request = parse_reply_meta(meta)?;
                let Some(g) = self.gets.get_mut(&request) else {
                    if request <= self.last_get {
                        return Ok(Touched::Nobody); // a get we gave up on
                    }
                    return Err(Violation::UnrequestedReply(request.into()).into());
                };
                g.got += payload.len() as u64;
                if g.got > g.len {
                    return Err(Violation::ReplyTooLong(request.into()).into());
                }
                g.parts.push(payload);
                Ok(Touched::Get(request))
            }
        }
    }

    fn region(&self, id: u32) -> Result<Arc<RegionMem>> {
        self.regions.get(&id).cloned().ok_or(Violation::UnknownRegion(id).into())
    }

    /// Exposes `mem` to the peer's puts and gets; returns the region's id.
    pub fn add_region(&mut self, mem: Arc<RegionMem>) -> Result<u32> {
        // The top id is kept for GPU regions, which only a fabric reaches.
        let id = (self.last_region.checked_add(1).filter(|&id| id < u32::MAX)).ok_or(Limit::IdsExhausted("region"))?;
        self.last_region = id;
        self.regions.insert(id, mem);
        Ok(id)
    }

    /// Stops exposing a region; later puts and gets into it fail the connection.
    pub fn remove_region(&mut self, id: u32) {
        self.regions.remove(&id);
    }

    /// Registers a get of `len` bytes and returns its request id.
    pub fn start_get(&mut self, len: u64) -> Result<u32> {
        let id = self.last_get.checked_add(1).ok_or(Limit::IdsExhausted("get"))?;
        self.last_get = id;
        self.gets.insert(id, PendingGet { len, got: 0, parts: Vec::new() });
        Ok(id)
    }

    /// The bytes of get `id`, once all have come.
    pub fn take_get(&mut self, id: u32) -> Option<Vec<Buf>> {
        if self.gets.get(&id).is_some_and(|g| g.got == g.len) {
            return self.gets.remove(&id).map(|g| g.parts);
        }
        None
    }

    /// Forgets a get we stopped waiting for; its late replies are dropped.
    pub fn abandon_get(&mut self, id: u32) {
        self.gets.remove(&id);
    }

    /// The next get the peer asked for, to answer.
    pub fn next_job(&mut self) -> Option<GetJob> {
        self.jobs.pop_front()
    }

    pub fn has_jobs(&self) -> bool {
        !self.jobs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_round_trips() {
        let d = Descriptor { id: 7, len: 1 << 40, native: vec![1, 2, 3] };
        assert_eq!(Descriptor::decode(&d.encode()).unwrap(), d);
        assert_eq!(parse_get_meta(&get_head(1, 2, 3, 4)[HEADER_LEN..]).unwrap(), (1, 2, 3));
        assert_eq!(parse_put_meta(&put_head(1, 2, 4)[HEADER_LEN..]).unwrap(), (1, 2));
        assert_eq!(parse_reply_meta(&get_reply_head(5, 4)[HEADER_LEN..]).unwrap(), 5);
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = Descriptor::decode(&b);
            let _ = parse_put_meta(&b);
            let _ = parse_get_meta(&b);
            let _ = parse_reply_meta(&b);
            let mut d = b"WSRG".to_vec();
            d.extend_from_slice(&b);
            let _ = Descriptor::decode(&d);
        }
    }
}
