//! Message bodies: owned heap memory, or views lent by a transport (a shared-memory ring,
//! later a registered region) that go back to it when dropped.

use std::ops::Deref;
use std::ptr::NonNull;
use std::sync::Arc;

/// A transport that lends out views of its memory and takes them back on drop.
pub trait Lender: Send + Sync {
    /// Called once per lent view, with the token it was lent under.
    fn release(&self, token: u64);
}

/// One contiguous, immutable body buffer.
pub struct Buf(Inner);

enum Inner {
    Owned(Vec<u8>),
    Lent { ptr: NonNull<u8>, len: usize, lender: Arc<dyn Lender>, token: u64 },
}

// SAFETY: lent memory is read-only while lent and stays mapped while the lender lives (the
// Arc keeps it alive); owned memory is an ordinary Vec.
unsafe impl Send for Buf {}
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

    /// True if this buffer is a view of transport memory (zero-copy).
    pub fn is_lent(&self) -> bool {
        matches!(self.0, Inner::Lent { .. })
    }

    /// Copies a lent view onto the heap and gives the transport memory back at once.
    pub fn detach(&mut self) {
        if self.is_lent() {
            *self = Buf::from(self.to_vec());
        }
    }

    /// The bytes as a Vec, copying only if they are lent.
    pub fn into_vec(mut self) -> Vec<u8> {
        match &mut self.0 {
            Inner::Owned(v) => std::mem::take(v),
            Inner::Lent { .. } => self.to_vec(),
        }
    }
}

impl From<Vec<u8>> for Buf {
    fn from(v: Vec<u8>) -> Self {
        Buf(Inner::Owned(v))
    }
}

impl Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.0 {
            Inner::Owned(v) => v,
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

/// A received message body: the buffers it arrived in, in order.
#[derive(Debug, Default)]
pub struct Body {
    chunks: Vec<Buf>,
}

impl Body {
    pub fn new(chunks: Vec<Buf>) -> Self {
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
