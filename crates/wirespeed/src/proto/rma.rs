//! One-sided transfers (RMA) as frames, for fabrics that cannot do them: what a region
//! descriptor and the Put, Get and GetReply frames carry, and the state that applies them.
//! See docs/PROTOCOL.md. Every decoder checks lengths and never panics.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::frame::{FrameHeader, Kind, Touched};
use crate::error::{Error, Result, Violation};
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
        let mut b = Vec::with_capacity(20 + self.native.len());
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&self.id.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        b.extend_from_slice(&(self.native.len() as u32).to_le_bytes());
        b.extend_from_slice(&self.native);
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self> {
        let bad = || Error::from(Violation::Malformed("region descriptor"));
        if b.len() < 20 || &b[..4] != MAGIC {
            return Err(bad());
        }
        let native_len = u32_at(b, 16) as usize;
        if native_len > MAX_NATIVE || b.len() != 20 + native_len {
            return Err(bad());
        }
        Ok(Descriptor { id: u32_at(b, 4), len: u64_at(b, 8), native: b[20..].to_vec() })
    }
}

/// Put meta: region id, offset. The payload is written there.
pub fn put_meta(id: u32, offset: u64) -> [u8; 12] {
    let mut m = [0; 12];
    m[..4].copy_from_slice(&id.to_le_bytes());
    m[4..].copy_from_slice(&offset.to_le_bytes());
    m
}

/// A frame's head (encoded header, then meta) for `len` payload bytes.
fn head(kind: Kind, meta: &[u8], len: u64) -> Vec<u8> {
    let mut h = FrameHeader::new(kind, 0);
    h.meta_len = meta.len() as u32;
    h.len = len;
    let mut head = h.encode().to_vec();
    head.extend_from_slice(meta);
    head
}

/// The head of a Put of `len` bytes at `offset` in region `id`.
pub fn put_head(id: u32, offset: u64, len: u64) -> Vec<u8> {
    head(Kind::Put, &put_meta(id, offset), len)
}

/// The head of a Get of `len` bytes at `offset` in region `id`, answered under `request`.
pub fn get_head(id: u32, offset: u64, request: u32, len: u64) -> Vec<u8> {
    head(Kind::Get, &get_meta(id, offset, request), len)
}

/// The head of `len` bytes answering get `request`.
pub fn get_reply_head(request: u32, len: u64) -> Vec<u8> {
    head(Kind::GetReply, &request.to_le_bytes(), len)
}

pub fn parse_put_meta(m: &[u8]) -> Result<(u32, u64)> {
    if m.len() != 12 {
        return Err(Violation::Malformed("put frame").into());
    }
    Ok((u32_at(m, 0), u64_at(m, 4)))
}

/// Get meta: region id, offset, request id (the frame's `len` holds the byte count).
pub fn get_meta(id: u32, offset: u64, request: u32) -> [u8; 16] {
    let mut m = [0; 16];
    m[..12].copy_from_slice(&put_meta(id, offset));
    m[12..].copy_from_slice(&request.to_le_bytes());
    m
}

pub fn parse_get_meta(m: &[u8]) -> Result<(u32, u64, u32)> {
    if m.len() != 16 {
        return Err(Violation::Malformed("get frame").into());
    }
    Ok((u32_at(m, 0), u64_at(m, 4), u32_at(m, 12)))
}

/// GetReply meta: the request id. Replies to one request arrive in order.
pub fn parse_reply_meta(m: &[u8]) -> Result<u32> {
    if m.len() != 4 {
        return Err(Violation::Malformed("get reply").into());
    }
    Ok(u32_at(m, 0))
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
        let id = (self.last_region.checked_add(1).filter(|&id| id < u32::MAX))
            .ok_or_else(|| Error::Limit("region ids exhausted".into()))?;
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
        let id = self.last_get.checked_add(1).ok_or_else(|| Error::Limit("get ids exhausted".into()))?;
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

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_round_trips() {
        let d = Descriptor { id: 7, len: 1 << 40, native: vec![1, 2, 3] };
        assert_eq!(Descriptor::decode(&d.encode()).unwrap(), d);
        assert_eq!(parse_get_meta(&get_meta(1, 2, 3)).unwrap(), (1, 2, 3));
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
