//! Message bodies: owned heap memory, a sender's own bytes handed over within one process,
//! or views lent by a transport (a shared-memory ring, or a peer's sealed region) that go
//! back to it when dropped.

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

mod mapping;
mod recycler;
pub mod sealed;
pub(crate) mod stream_copy;
pub(crate) mod trimmer;

pub(crate) use mapping::Mapping;
pub use recycler::Recycler;
pub use sealed::SealedRegion;

/// A transport that lends out views of its memory and takes them back on drop.
pub trait Lender: Send + Sync {
    /// Called once per lent view, with the token it was lent under.
    fn release(&self, token: u64);
}

/// One contiguous, immutable body buffer.
pub struct Buf(Inner);

enum Inner {
    Owned(Vec<u8>),
    Lent {
        ptr: NonNull<u8>,
        len: usize,
        lender: Arc<dyn Lender>,
        token: u64,
    },
    /// The sender's own reference-counted bytes, handed over within one process.
    Shared(Bytes),
}

// SAFETY: lent memory is read-only while lent and stays mapped while the lender lives (the
// Arc keeps it alive); owned memory is an ordinary Vec.
unsafe impl Send for Buf {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Buf {}

impl Buf {
    pub fn empty() -> Self {
        Buf(Inner::Owned(Vec::new()))
    }

    /// A view of transport memory.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay valid and unmodified until `lender.release(token)` runs.
    pub unsafe fn lent(ptr: NonNull<u8>, len: usize, lender: Arc<dyn Lender>, token: u64) -> Self {
        Buf(Inner::Lent { ptr, len, lender, token })
    }

    /// True if this buffer is a view of memory it does not own (zero-copy).
    pub fn is_lent(&self) -> bool {
        !matches!(self.0, Inner::Owned(_))
    }

    /// The bytes as a Vec, copying only if they are lent.
    pub fn into_vec(mut self) -> Vec<u8> {
        match &mut self.0 {
            Inner::Owned(v) => std::mem::take(v),
            Inner::Shared(b) => Vec::from(std::mem::take(b)),
            Inner::Lent { .. } => self.to_vec(),
        }
    }
}

impl From<Vec<u8>> for Buf {
    fn from(v: Vec<u8>) -> Self {
        Buf(Inner::Owned(v))
    }
}

impl From<Bytes> for Buf {
    fn from(b: Bytes) -> Self {
        Buf(Inner::Shared(b))
    }
}

impl Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Owned(v) => v,
            Inner::Shared(b) => b,
            // SAFETY: guaranteed by the contract of `Buf::lent`.
            Inner::Lent { ptr, len, .. } => unsafe { std::slice::from_raw_parts(ptr.as_ptr(), *len) },
        }
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        if let Inner::Lent { lender, token, .. } = &self.0 {
            lender.release(*token);
        }
    }
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buf({} bytes{})", self.len(), if self.is_lent() { ", lent" } else { "" })
    }
}

/// The buffers of a body. Most bodies arrive in one, which this holds without an allocation.
pub(crate) type Chunks = smallvec::SmallVec<[Buf; 1]>;

/// A received message body: the buffers it arrived in, in order.
#[derive(Debug, Default)]
pub struct Body {
    chunks: Chunks,
}

impl Body {
    pub fn new(chunks: Vec<Buf>) -> Self {
        Body { chunks: Chunks::from_vec(chunks) }
    }

    pub(crate) fn from_chunks(chunks: Chunks) -> Self {
        Body { chunks }
    }

    pub fn len(&self) -> u64 {
        self.chunks.iter().map(|c| c.len() as u64).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn chunks(&self) -> &[Buf] {
        &self.chunks
    }

    /// One contiguous buffer: free if the body arrived in one piece, a copy otherwise.
    pub fn into_contiguous(mut self) -> Buf {
        match self.chunks.len() {
            0 => Buf::empty(),
            1 => self.chunks.pop().expect("one chunk"),
            _ => {
                let mut v = Vec::with_capacity(self.len() as usize);
                for c in &self.chunks {
                    v.extend_from_slice(c);
                }
                Buf::from(v)
            }
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len() as usize);
        for c in &self.chunks {
            v.extend_from_slice(c);
        }
        v
    }
}

/// Page-aligned, zeroed memory that a peer may write into or read from while we hold it
/// (one-sided transfers). Accesses copy through raw pointers: who writes when is up to the
/// application, which orders them with messages.
pub struct RegionMem {
    ptr: NonNull<u8>,
    len: usize,
    /// Memory a fabric allocated: dropping this frees it. `None`: ours, on the heap.
    owner: Option<Box<dyn std::any::Any + Send + Sync>>,
}

// SAFETY: the memory is only reached through raw copies; ordering them is the application's
// contract (see the type's docs), as with any memory a NIC may write.
unsafe impl Send for RegionMem {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for RegionMem {}

const PAGE: usize = 4096;

/// Checks that `len` bytes at `offset` lie inside a region of `region_len` bytes.
pub fn check_span(offset: u64, len: usize, region_len: u64) -> crate::Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= region_len => Ok(()),
        _ => Err(crate::error::Limit::OutsideRegion { offset, len: len as u64, region_len }.into()),
    }
}

impl RegionMem {
    pub fn new(len: usize) -> crate::Result<Self> {
        let layout = Self::layout(len)?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(crate::error::Limit::Memory(len as u64))?;
        Ok(RegionMem { ptr, len, owner: None })
    }

    /// Memory a fabric allocated (and registered), freed when `owner` drops.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid, writable memory until `owner` drops.
    pub unsafe fn from_fabric(ptr: NonNull<u8>, len: usize, owner: Box<dyn std::any::Any + Send + Sync>) -> Self {
        RegionMem { ptr, len, owner: Some(owner) }
    }

    /// Whether a fabric allocated this memory.
    pub fn is_fabric(&self) -> bool {
        self.owner.is_some()
    }

    fn layout(len: usize) -> crate::Result<std::alloc::Layout> {
        std::alloc::Layout::from_size_align(len.max(1), PAGE)
            .map_err(|_| crate::error::Limit::Memory(len as u64).into())
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Checks that `offset..offset+len` lies inside; returns the start as a usize.
    pub fn check(&self, offset: u64, len: usize) -> crate::Result<usize> {
        check_span(offset, len, self.len as u64).map(|()| offset as usize)
    }

    pub fn write(&self, offset: u64, data: &[u8]) -> crate::Result<()> {
        let at = self.check(offset, data.len())?;
        // SAFETY: bounds checked above; the source is a distinct slice.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(at), data.len()) };
        Ok(())
    }

    pub fn read(&self, offset: u64, out: &mut [u8]) -> crate::Result<()> {
        let at = self.check(offset, out.len())?;
        // SAFETY: bounds checked above; the destination is a distinct slice.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(at), out.as_mut_ptr(), out.len()) };
        Ok(())
    }
}

impl Drop for RegionMem {
    fn drop(&mut self) {
        if self.owner.is_some() {
            return; // the owner frees it
        }
        let layout = Self::layout(self.len).expect("checked in new");
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
    }
}
