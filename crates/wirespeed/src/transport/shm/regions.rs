//! Sealed regions over a shared-memory connection: a payload that lies in a [`SealedRegion`]
//! travels as a reference, and neither side copies it.
//!
//! The first time a region is referenced, the sender hands its memfd to the peer over the unix
//! socket (16 bytes, `id: u64, len: u64`, with the descriptor as SCM_RIGHTS), then publishes
//! frames whose ring payload is `(id: u64, offset: u64)`. The receiver maps each region once,
//! after checking its seals, and lends out views of it. The descriptor is always sent before
//! the first frame that needs it, so the receiver finds it waiting on the socket.
//!
//! The same socket carries one-sided windows (see `windows`), their ids with the top bit set:
//! whichever reader comes across one files it for `take_window`.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use nix::poll::PollFlags;
use nix::sys::socket::MsgFlags;

use crate::error::{Error, FrameError, Result, Violation};
use crate::mem::sealed::PeerRegion;
use crate::mem::{Buf, SealedRegion, check_span};
use crate::transport::sys::{recv_with_fds, send_with_fds, wait_fd};

/// Two u64s, little-endian: a reference `(id, offset)` in the ring, or a hand-over `(id, len)`.
pub(super) type Pair = [u8; 16];
/// Bytes of a reference in the ring.
pub(super) const REF_BYTES: u64 = std::mem::size_of::<Pair>() as u64;

fn pack(a: u64, b: u64) -> Pair {
    let mut p = [0u8; 16];
    p[..8].copy_from_slice(&a.to_le_bytes());
    p[8..].copy_from_slice(&b.to_le_bytes());
    p
}

fn unpack(p: &Pair) -> (u64, u64) {
    let half = |r: &[u8]| u64::from_le_bytes(r.try_into().expect("8 bytes"));
    (half(&p[..8]), half(&p[8..]))
}
/// Payloads smaller than this are copied, which costs about as much as a reference.
pub(super) const MIN_SHARED: usize = 4 << 10;
/// Regions one connection maps at most, in each direction; past it the sender copies.
pub(super) const MAX_REGIONS: usize = 256;
/// The top bit of a one-sided window's id.
pub(super) const WINDOW: u64 = 1 << 63;
/// Windows a peer may hand over and leave untaken at once.
pub(super) const MAX_WINDOWS: usize = 1024;

/// Sender side: which regions the peer already has.
#[derive(Default)]
pub(super) struct Outgoing {
    sent: HashSet<u64>,
}

impl Outgoing {
    /// The `(id, offset)` reference for `payload` if it lies in a sealed region that the peer
    /// has, or has just been sent; `None` means copy it.
    pub(super) fn reference(&mut self, payload: &[u8], sock: &UnixStream) -> Option<Pair> {
        let (region, offset) = SealedRegion::containing(payload.as_ptr(), payload.len())?;
        if !self.sent.contains(&region.id()) {
            if self.sent.len() >= MAX_REGIONS || hand_over(sock, &region).is_err() {
                return None;
            }
            self.sent.insert(region.id());
        }
        Some(pack(region.id(), offset as u64))
    }
}

fn hand_over(sock: &UnixStream, region: &SealedRegion) -> nix::Result<()> {
    send_fd(sock, region.id(), region.len() as u64, region.fd())
}

/// Hands memory `fd` of `len` bytes to the peer as `id`. Never blocks: only small messages,
/// a bounded number, ever wait in the socket.
pub(super) fn send_fd(sock: &UnixStream, id: u64, len: u64, fd: impl AsFd) -> nix::Result<()> {
    let msg = pack(id, len);
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
    let sent = send_with_fds(sock, &msg, &[fd.as_fd().as_raw_fd()], flags)?;
    if sent == msg.len() { Ok(()) } else { Err(nix::errno::Errno::EAGAIN) }
}

/// Receiver side: the peer's regions, mapped, and its windows, until taken.
#[derive(Default)]
pub(super) struct Incoming {
    mapped: HashMap<u64, Arc<PeerRegion>>,
    windows: HashMap<u64, (OwnedFd, u64)>,
}

impl Incoming {
    /// A view of `len` bytes at `reference` (as read from the ring).
    pub(super) fn view(&mut self, reference: Pair, len: usize, sock: &UnixStream, deadline: Instant) -> Result<Buf> {
        let (id, offset) = unpack(&reference);
        let region = match self.mapped.get(&id) {
            Some(r) => r.clone(),
            None => self.receive(id, sock, deadline)?,
        };
        check_span(offset, len, region.len() as u64)
            .map_err(|_| Error::Frame(FrameError::Malformed("shared payload outside its region")))?;
        // SAFETY: in bounds of the mapping, which the view keeps alive; sealed, so unchanging.
        let ptr = unsafe { NonNull::new_unchecked(region.ptr().as_ptr().add(offset as usize)) };
        // SAFETY: as above; the lender does nothing on release.
        Ok(unsafe { Buf::lent(ptr, len, region, 0) })
    }

    /// Reads the peer's handed-over regions until region `id` arrives.
    fn receive(&mut self, id: u64, sock: &UnixStream, deadline: Instant) -> Result<Arc<PeerRegion>> {
        loop {
            self.file_next(sock, deadline)?;
            if let Some(region) = self.mapped.get(&id) {
                return Ok(region.clone());
            }
        }
    }

    /// Window `id`'s memory and length, once (reading the socket until it arrives).
    pub(super) fn take_window(&mut self, id: u64, sock: &UnixStream, deadline: Instant) -> Result<(OwnedFd, u64)> {
        loop {
            if let Some(w) = self.windows.remove(&id) {
                return Ok(w);
            }
            self.file_next(sock, deadline)?;
        }
    }

    /// Files the next handed-over region or window.
    fn file_next(&mut self, sock: &UnixStream, deadline: Instant) -> Result<()> {
        let (got, len, fd) = receive_one(sock, deadline)?;
        if got & WINDOW != 0 {
            if self.windows.len() >= MAX_WINDOWS {
                return Err(Violation::TooManyRegions(MAX_WINDOWS).into());
            }
            self.windows.insert(got, (fd, len));
            return Ok(());
        }
        if self.mapped.len() >= MAX_REGIONS {
            return Err(Violation::TooManyRegions(MAX_REGIONS).into());
        }
        self.mapped.insert(got, Arc::new(PeerRegion::map(&fd, len)?));
        Ok(())
    }
}

fn receive_one(sock: &UnixStream, deadline: Instant) -> Result<(u64, u64, OwnedFd)> {
    let lost = |why: String| Error::ConnectionLost(format!("no shared region from the peer: {why}"));
    // Sent before the frame that refers to it, so only a broken peer makes us wait.
    if wait_fd(sock.as_fd(), PollFlags::POLLIN, deadline)?.is_none() {
        return Err(Violation::UnsharedRegion.into());
    }
    let mut msg: Pair = [0; 16];
    let (got, fds) = recv_with_fds::<1>(sock, &mut msg).map_err(|e| lost(e.to_string()))?;
    match fds.into_iter().next() {
        Some(fd) if got == msg.len() => {
            let (id, len) = unpack(&msg);
            Ok((id, len, fd))
        }
        _ if got == 0 => Err(lost("the peer went away".into())),
        _ => Err(Violation::Malformed("shared-region message").into()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nix::sys::memfd::{MFdFlags, memfd_create};

    use super::*;

    fn soon() -> Instant {
        Instant::now() + Duration::from_millis(200)
    }

    #[test]
    fn a_referenced_region_arrives_once_and_is_read_in_place() {
        let (tx, rx) = UnixStream::pair().unwrap();
        let region = SealedRegion::copy_of(b"0123456789abcdef").unwrap();
        let mut out = Outgoing::default();
        let (id, offset) = unpack(&out.reference(&region[4..12], &tx).unwrap());
        assert_eq!(out.reference(&region[..], &tx), Some(pack(id, 0)), "handed over once");
        assert_eq!(out.reference(b"heap memory", &tx), None);
        let mut inc = Incoming::default();
        assert_eq!(&inc.view(pack(id, offset), 8, &rx, soon()).unwrap()[..], b"456789ab");
        assert_eq!(&inc.view(pack(id, 0), 16, &rx, soon()).unwrap()[..], b"0123456789abcdef");
        assert!(matches!(inc.view(pack(id, 10), 7, &rx, soon()), Err(Error::Frame(_))), "past the end");
    }

    #[test]
    fn forged_references_are_errors() {
        let (tx, rx) = UnixStream::pair().unwrap();
        let mut inc = Incoming::default();
        let never = inc.view(pack(9, 0), 1, &rx, Instant::now() + Duration::from_millis(20));
        assert!(matches!(never, Err(Error::PeerMisbehaved(Violation::UnsharedRegion))), "a region never handed over");

        let plain = memfd_create("plain", MFdFlags::MFD_CLOEXEC).unwrap();
        nix::unistd::ftruncate(&plain, 4096).unwrap();
        let msg = pack(9, 4096); // id 9, 4096 bytes
        send_with_fds(&tx, &msg, &[plain.as_raw_fd()], MsgFlags::empty()).unwrap();
        assert!(
            matches!(inc.view(pack(9, 0), 1, &rx, soon()), Err(Error::PeerMisbehaved(Violation::BadSharedRegion(_)))),
            "unsealed memory"
        );

        drop(tx);
        assert!(matches!(inc.view(pack(9, 0), 1, &rx, soon()), Err(Error::ConnectionLost(_))));
    }
}
