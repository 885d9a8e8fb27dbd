//! The Boost.Interprocess managed segment that FLESnet's consumers open by name
//! (`cpp/segment.cpp` does what only Boost can: its layout and the UUID stored in it).

use std::ffi::{CString, c_char, c_void};
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{FlesError, Result};

#[repr(C)]
struct RawSegment {
    _private: [u8; 0],
}

unsafe extern "C" {
    fn ws_segment_create(
        name: *const c_char,
        size: usize,
        uuid: *mut u8,
        err: *mut c_char,
        len: usize,
    ) -> *mut RawSegment;
    fn ws_segment_open_read_only(name: *const c_char, uuid: *mut u8, err: *mut c_char, len: usize) -> *mut RawSegment;
    fn ws_segment_allocate(s: *mut RawSegment, size: usize, align: usize, err: *mut c_char, len: usize) -> *mut c_void;
    fn ws_segment_deallocate(s: *mut RawSegment, p: *mut c_void);
    fn ws_segment_base(s: *mut RawSegment) -> *mut c_void;
    fn ws_segment_size(s: *mut RawSegment) -> usize;
    fn ws_segment_close(s: *mut RawSegment);
    fn ws_segment_remove(name: *const c_char) -> i32;
}

/// Blocks are page-aligned, so that a peer maps them and fabrics register them.
const PAGE: usize = 4096;
/// What Boost's own bookkeeping takes, beyond the blocks, with room to spare.
const OVERHEAD: usize = 64 << 10;

/// A segment, mapped; the one that made it removes its name when it drops, or earlier with
/// [`Segment::remove_name`].
pub struct Segment {
    raw: NonNull<RawSegment>,
    name: CString,
    /// The segment's UUID, which work items name it by.
    pub uuid: [u8; 16],
    /// Whether this mapping still owns the name (it made it, and has not removed it yet).
    owner: AtomicBool,
}

// SAFETY: Boost's segment manager locks its own allocations; the mapping is shared memory.
unsafe impl Send for Segment {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Segment {}

fn shm_error(op: &'static str, name: &CString, err: &[u8]) -> FlesError {
    let end = err.iter().position(|&b| b == 0).unwrap_or(err.len());
    let why = String::from_utf8_lossy(&err[..end]).into_owned();
    FlesError::Shm { op, segment: name.to_string_lossy().into_owned(), why }
}

fn c_name(name: &str) -> Result<CString> {
    if name.is_empty() || name.contains('/') {
        return Err(FlesError::Config(format!("{name:?}: a shared-memory name is a plain name, without '/'")));
    }
    CString::new(name).map_err(|_| FlesError::Config(format!("{name:?}: a NUL in a shared-memory name")))
}

impl Segment {
    /// Makes segment `name` with room for blocks of `sizes` bytes (a stale one of the same name
    /// goes first), readable by this user only, with a new UUID.
    pub fn create(name: &str, sizes: &[usize]) -> Result<Arc<Segment>> {
        let name = c_name(name)?;
        let size = sizes.iter().map(|s| s.next_multiple_of(PAGE) + 2 * PAGE).sum::<usize>() + OVERHEAD;
        let (mut uuid, mut err) = ([0u8; 16], [0u8; 256]);
        // SAFETY: valid C string and out-buffers of the sizes given.
        let raw =
            unsafe { ws_segment_create(name.as_ptr(), size, uuid.as_mut_ptr(), err.as_mut_ptr().cast(), err.len()) };
        let raw = NonNull::new(raw).ok_or_else(|| shm_error("creating", &name, &err))?;
        Ok(Arc::new(Segment { raw, name, uuid, owner: AtomicBool::new(true) }))
    }

    /// Opens segment `name` read-only, as FLESnet's consumers do.
    pub fn open_read_only(name: &str) -> Result<Arc<Segment>> {
        let name = c_name(name)?;
        let (mut uuid, mut err) = ([0u8; 16], [0u8; 256]);
        // SAFETY: as in `create`.
        let raw =
            unsafe { ws_segment_open_read_only(name.as_ptr(), uuid.as_mut_ptr(), err.as_mut_ptr().cast(), err.len()) };
        let raw = NonNull::new(raw).ok_or_else(|| shm_error("opening", &name, &err))?;
        Ok(Arc::new(Segment { raw, name, uuid, owner: AtomicBool::new(false) }))
    }

    /// Removes the name, if this mapping made it, while mappings (here and in consumers) stay
    /// valid: a publisher calls it once no consumer will open the segment again, since blocks
    /// lent to connections that close in the background may outlive the process's last look.
    pub fn remove_name(&self) {
        if self.owner.swap(false, Ordering::SeqCst) {
            // SAFETY: a valid C string; removing a name leaves every mapping of it valid.
            unsafe { ws_segment_remove(self.name.as_ptr()) };
        }
    }

    /// The segment's name (in /dev/shm).
    pub fn name(&self) -> &str {
        self.name.to_str().expect("made from a str")
    }

    /// Where the segment is mapped: handles are offsets from here.
    pub fn base(&self) -> *mut u8 {
        // SAFETY: a live segment.
        unsafe { ws_segment_base(self.raw.as_ptr()).cast() }
    }

    /// The segment's size in bytes.
    pub fn size(&self) -> usize {
        // SAFETY: a live segment.
        unsafe { ws_segment_size(self.raw.as_ptr()) }
    }

    /// `len` bytes at handle `handle`, if they lie inside the segment.
    pub fn bytes(&self, handle: i64, len: u64) -> Option<&[u8]> {
        let start = usize::try_from(handle).ok()?;
        let end = start.checked_add(usize::try_from(len).ok()?)?;
        // SAFETY: inside the mapping, which lives as long as `self`; the bytes are the
        // writer's to change only once the reader has completed its item.
        (end <= self.size()).then(|| unsafe { std::slice::from_raw_parts(self.base().add(start), end - start) })
    }

    /// A new page-aligned block of `len` bytes, its offset from the base (its handle, and its
    /// place in the segment's file).
    pub fn allocate(self: &Arc<Self>, len: usize) -> Result<Block> {
        let mut err = [0u8; 256];
        // SAFETY: a live segment; out-buffer of the size given.
        let p = unsafe { ws_segment_allocate(self.raw.as_ptr(), len.max(1), PAGE, err.as_mut_ptr().cast(), err.len()) };
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| shm_error("allocating in", &self.name, &err))?;
        let offset = ptr.as_ptr() as usize - self.base() as usize;
        Ok(Block { segment: self.clone(), ptr, len, offset })
    }

    /// The segment's file, opened again, for a peer on this host to map.
    pub fn file(&self) -> Result<OwnedFd> {
        let path = format!("/{}", self.name());
        nix::sys::mman::shm_open(path.as_str(), nix::fcntl::OFlag::O_RDWR, nix::sys::stat::Mode::empty()).map_err(|e| {
            FlesError::Shm { op: "opening the file of", segment: self.name().to_string(), why: e.to_string() }
        })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        self.remove_name();
        // SAFETY: closed once; mappings of the name elsewhere stay valid.
        unsafe { ws_segment_close(self.raw.as_ptr()) };
    }
}

/// A block of a segment, freed when it drops.
pub struct Block {
    segment: Arc<Segment>,
    /// Where the block starts in this mapping.
    pub ptr: NonNull<u8>,
    /// Its length in bytes.
    pub len: usize,
    /// From the segment's base: the block's handle and its place in the file.
    pub offset: usize,
}

// SAFETY: memory in the shared segment, which the block keeps mapped.
unsafe impl Send for Block {}
// SAFETY: the same holds for shared references.
unsafe impl Sync for Block {}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: allocated from this segment, freed once.
        unsafe { ws_segment_deallocate(self.segment.raw.as_ptr(), self.ptr.as_ptr().cast()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_finds_what_the_maker_wrote() {
        let name = format!("wirespeed-segment-test-{}", std::process::id());
        let seg = Segment::create(&name, &[10_000, 5000]).unwrap();
        let a = seg.allocate(10_000).unwrap();
        let b = seg.allocate(5000).unwrap();
        assert_eq!(a.offset % PAGE, 0);
        assert!(b.offset >= a.offset + 10_000 || b.offset + 5000 <= a.offset);
        // SAFETY: the block's own bytes.
        unsafe { std::ptr::copy_nonoverlapping(b"timeslice".as_ptr(), b.ptr.as_ptr(), 9) };
        let reader = Segment::open_read_only(&name).unwrap();
        assert_eq!(reader.uuid, seg.uuid);
        assert_eq!(reader.bytes(b.offset as i64, 9), Some(&b"timeslice"[..]));
        assert_eq!(reader.bytes(-1, 1), None);
        assert_eq!(reader.bytes(reader.size() as i64 - 1, 2), None);
        assert!(seg.allocate(1 << 30).is_err(), "more than it has");
        drop((a, b, seg));
        assert!(Segment::open_read_only(&name).is_err(), "the maker removed the name");
        assert!(Segment::create("a/b", &[1]).is_err());
    }
}
