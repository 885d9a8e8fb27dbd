//! One-sided transfers: a side exposes a [`Region`] and sends its descriptor to the peer (in a
//! message, say); the peer then puts bytes into it or gets bytes from it without the owner
//! taking part. Fabrics that can (UCX: cma, RDMA) do this natively ([`NativeRma`](super::NativeRma)); on the
//! rest it travels as Put, Get and GetReply frames that the owner's reading thread applies.

use std::any::Any;
use std::io::IoSlice;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::Arc;

use super::NativeRemote;
use super::conn::Connection;
use super::engine::{Inner, Waiting};
use crate::error::{Result, Violation};
use crate::mem::{RegionMem, check_span};
use crate::proto::rma::{self, Descriptor};

/// Memory of ours the peer may put into and get from, for as long as this lives.
pub struct Region {
    mem: Arc<RegionMem>,
    id: u32,
    descriptor: Vec<u8>,
    conn: Arc<Inner>,
}

impl Region {
    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    /// Whether the region has no bytes.
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

/// Memory the caller has mapped from a shared-memory file and keeps, lent to the peer as a
/// [`Region`] in place of memory the connection allocates: so that the bytes a peer puts land
/// where a third party (another process mapping the same file) reads them, uncopied.
pub struct LentMemory {
    /// Where the memory starts.
    pub ptr: NonNull<u8>,
    /// How many bytes it has.
    pub len: usize,
    /// The file the memory maps, so that a peer on this host maps the same pages, and where
    /// in it the memory starts (a multiple of the page size).
    pub file: Arc<OwnedFd>,
    /// Where in `file` the memory starts (a multiple of the page size).
    pub offset: u64,
    /// What keeps the mapping alive; dropped after the fabric's registration.
    pub keep: Box<dyn Any + Send + Sync>,
}

// SAFETY: `ptr` only names memory that `keep` keeps mapped; see `Connection::lend`.
unsafe impl Send for LentMemory {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for LentMemory {}

/// The id in the descriptor of a GPU region, which the session's table never holds.
pub(super) const DEVICE_REGION: u32 = u32::MAX;

/// A peer's region, as its descriptor describes it.
pub struct RemoteRegion {
    id: u32,
    len: u64,
    pub(super) native: Option<Box<dyn NativeRemote>>,
}

impl RemoteRegion {
    /// The region's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region has no bytes.
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

    /// Lends the peer memory the caller keeps mapped, as [`register`](Self::register) lends
    /// memory it allocates. A peer on this host maps the same file (which, unlike the memory
    /// `register` allocates, cannot be sealed against shrinking: the peer trusts this side not
    /// to truncate it, as it trusts it with the key).
    ///
    /// # Safety
    /// `mem.ptr..mem.ptr+mem.len` must be valid, writable memory, mapping `mem.file` at
    /// `mem.offset`, for as long as `mem.keep` lives; nothing but the peer's puts may race
    /// with the caller's reads (messages order them, as for any region).
    pub unsafe fn lend(&self, mem: LentMemory) -> Result<Region> {
        let inner = &self.inner;
        let native = match &inner.native_rma {
            Some(n) => n.lend(&mem)?,
            None => (Box::new(()) as Box<dyn Any + Send + Sync>, Vec::new()),
        };
        let len = mem.len;
        // SAFETY: the caller vouches for the memory while `keep` lives; the registration
        // (first in the tuple) drops before it.
        let region = unsafe { RegionMem::from_fabric(mem.ptr, len, Box::new((native.0, mem.keep))) };
        let mem = Arc::new(region);
        let id = inner.lock().session.rma.add_region(mem.clone())?;
        let descriptor = Descriptor { id, len: len as u64, native: native.1 }.encode();
        Ok(Region { mem, id, descriptor, conn: inner.clone() })
    }

    /// The peer's region that `descriptor` (from its [`Region::descriptor`]) describes.
    pub fn remote_region(&self, descriptor: &[u8]) -> Result<RemoteRegion> {
        let d = Descriptor::decode(descriptor)?;
        let native = match (&self.inner.native_rma, d.native.is_empty()) {
            (Some(n), false) => Some(n.remote(&d.native)?),
            // Only the fabric reaches GPU memory: there is no frame-borne way to it.
            _ if d.id == DEVICE_REGION => return Err(Violation::Malformed("GPU region without fabric access").into()),
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
            let head = rma::put_head(remote.id, offset + at, chunk.len() as u64);
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
            .write(&rma::get_head(remote.id, offset, request, out.len() as u64), &[])
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
