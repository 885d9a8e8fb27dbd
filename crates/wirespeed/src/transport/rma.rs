//! One-sided transfers: a side exposes a [`Region`] and sends its descriptor to the peer (in a
//! message, say); the peer then puts bytes into it or gets bytes from it without the owner
//! taking part. Fabrics that can (UCX: cma, RDMA) do this natively ([`NativeRma`]); on the
//! rest it travels as Put, Get and GetReply frames that the owner's reading thread applies.

use std::io::IoSlice;
use std::sync::Arc;
use std::time::Duration;

use super::conn::{Connection, Inner, Waiting};
use crate::error::Result;
use crate::mem::{RegionMem, check_span};
use crate::proto::frame::{FrameHeader, Kind};
use crate::proto::rma::{self, Descriptor};

/// A backend whose fabric moves bytes one-sidedly.
pub(crate) trait NativeRma: Send + Sync {
    /// Allocates `len` zeroed bytes registered with the fabric (where it can reach them
    /// fastest: shared memory a peer on the same host maps, say), and the access information
    /// a peer needs. Dropping the memory revokes access and frees it.
    fn register(&self, len: usize) -> Result<(RegionMem, Vec<u8>)>;
    /// Makes a peer's access information usable on this connection.
    fn remote(&self, native: &[u8]) -> Result<Box<dyn NativeRemote>>;
}

/// A peer's region as the fabric reaches it. Offsets are checked before these are called.
pub(crate) trait NativeRemote: Send + Sync {
    /// Returns once the bytes are in the peer's memory.
    fn put(&self, offset: u64, data: &[u8], timeout: Duration) -> Result<()>;
    fn get(&self, offset: u64, out: &mut [u8], timeout: Duration) -> Result<()>;
}

/// Memory of ours the peer may put into and get from, for as long as this lives.
pub struct Region {
    mem: Arc<RegionMem>,
    id: u32,
    descriptor: Vec<u8>,
    conn: Arc<Inner>,
}

impl Region {
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mem.is_empty()
    }

    /// What the peer passes to [`Connection::remote_region`]. Send it only over this
    /// connection: it grants access to the memory.
    pub fn descriptor(&self) -> &[u8] {
        &self.descriptor
    }

    /// Copies bytes out; order this after the peer's puts with a message.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        self.mem.read(offset, out)
    }

    /// Copies bytes in, for the peer to get.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.mem.write(offset, data)
    }

    /// The memory itself, for zero-copy use. While the peer may put or get, reading or
    /// writing through it races with the peer; messages tell when it is done.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.as_ptr()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let mut g = self.conn.lock();
        g.session.rma.remove_region(self.id);
        if self.mem.is_fabric() {
            g.retired.push(self.mem.clone());
        }
    }
}

/// A peer's region, as its descriptor describes it.
pub struct RemoteRegion {
    id: u32,
    len: u64,
    native: Option<Box<dyn NativeRemote>>,
}

impl RemoteRegion {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Connection {
    /// Allocates `len` zeroed, page-aligned bytes that the peer may put into and get from;
    /// send it [`Region::descriptor`].
    pub fn register(&self, len: usize) -> Result<Region> {
        let inner = &self.inner;
        let (mem, native) = match &inner.native_rma {
            Some(n) => n.register(len)?,
            None => (RegionMem::new(len)?, Vec::new()),
        };
        let mem = Arc::new(mem);
        let id = inner.lock().session.rma.add_region(mem.clone())?;
        let descriptor = Descriptor { id, len: len as u64, native }.encode();
        Ok(Region { mem, id, descriptor, conn: inner.clone() })
    }

    /// The peer's region that `descriptor` (from its [`Region::descriptor`]) describes.
    pub fn remote_region(&self, descriptor: &[u8]) -> Result<RemoteRegion> {
        let d = Descriptor::decode(descriptor)?;
        let native = match (&self.inner.native_rma, d.native.is_empty()) {
            (Some(n), false) => Some(n.remote(&d.native)?),
            _ => None,
        };
        Ok(RemoteRegion { id: d.id, len: d.len, native })
    }

    /// Whether puts and gets bypass the peer's CPU on this connection.
    pub fn has_native_rma(&self) -> bool {
        self.inner.native_rma.is_some()
    }

    /// Writes `data` into the peer's region at `offset`. The peer sees the bytes before any
    /// message sent after this returns.
    pub fn put(&self, remote: &RemoteRegion, offset: u64, data: &[u8]) -> Result<()> {
        check_span(offset, data.len(), remote.len)?;
        if let Some(n) = &remote.native {
            return n.put(offset, data, self.inner.timeout);
        }
        let mut at = 0;
        for chunk in data.chunks(self.inner.max_chunk as usize) {
            let head = frame(Kind::Put, &rma::put_meta(remote.id, offset + at), chunk.len() as u64);
            self.inner.write(&head, &[IoSlice::new(chunk)])?;
            at += chunk.len() as u64;
        }
        Ok(())
    }

    /// Reads the peer's region at `offset` into `out`.
    pub fn get(&self, remote: &RemoteRegion, offset: u64, out: &mut [u8]) -> Result<()> {
        check_span(offset, out.len(), remote.len)?;
        if let Some(n) = &remote.native {
            return n.get(offset, out, self.inner.timeout);
        }
        if out.is_empty() {
            return Ok(());
        }
        let inner = &self.inner;
        let request = inner.lock().session.start_get(out.len() as u64)?;
        let got = inner
            .write(&frame(Kind::Get, &rma::get_meta(remote.id, offset, request), out.len() as u64), &[])
            .and_then(|()| inner.wait_for(inner.timeout, Waiting::OnGet(request), |s| s.poll_get(request)));
        let parts = got.inspect_err(|_| inner.lock().session.rma.abandon_get(request))?;
        let mut at = 0;
        for p in parts {
            out[at..at + p.len()].copy_from_slice(&p);
            at += p.len();
        }
        Ok(())
    }
}

/// A frame head followed by its meta; `len` as the frame kind defines it.
fn frame(kind: Kind, meta: &[u8], len: u64) -> Vec<u8> {
    let mut h = FrameHeader::new(kind, 0);
    h.meta_len = meta.len() as u32;
    h.len = len;
    let mut head = h.encode().to_vec();
    head.extend_from_slice(meta);
    head
}

/// Answers the gets the peer asked for (emulated transfers), from the thread that read them.
pub(super) fn serve_gets(inner: &Inner) {
    let chunk = inner.max_chunk as usize;
    let mut scratch = Vec::new();
    while let Some(job) = inner.lock().session.rma.next_job() {
        let mut done = 0;
        while done < job.len {
            let n = (job.len - done).min(chunk as u64) as usize;
            scratch.resize(n, 0);
            // Checked when the Get arrived; a copy, since the owner may be writing meanwhile.
            if job.mem.read(job.offset + done, &mut scratch).is_err() {
                return;
            }
            let head = frame(Kind::GetReply, &job.request.to_le_bytes(), n as u64);
            if inner.write(&head, &[IoSlice::new(&scratch)]).is_err() {
                return; // `write` failed the connection
            }
            done += n as u64;
        }
    }
}
