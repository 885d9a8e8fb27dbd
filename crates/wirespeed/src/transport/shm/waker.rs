//! Wake-ups between the two sides: spin on shared memory briefly, then sleep on an eventfd
//! the other side writes only when this side said it sleeps.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU32, Ordering, fence};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::error::{Error, Result};
use crate::transport::sys::ms_until;
/// Sleeps on an eventfd after a bounded spin; the unix socket reports a dead peer.
pub(super) struct Waker {
    pub(super) efd: OwnedFd,
    pub(super) sock: UnixStream,
    /// How long a waiting side polls shared memory before it sleeps on its eventfd.
    pub(super) spin: Duration,
}

impl Waker {
    pub(super) fn wait(&self, sleeping: &AtomicU32, deadline: Instant, ready: impl Fn() -> bool) -> Result<bool> {
        self.wait_announced(sleeping, deadline, ready, || {})
    }

    /// As `wait`, calling `announce` once the sleeping flag is up (before the first sleep).
    pub(super) fn wait_announced(
        &self,
        sleeping: &AtomicU32,
        deadline: Instant,
        ready: impl Fn() -> bool,
        announce: impl Fn(),
    ) -> Result<bool> {
        if ready() {
            return Ok(true);
        }
        let spin_end = Instant::now() + self.spin;
        let mut i = 0u32;
        loop {
            if ready() {
                return Ok(true);
            }
            i = i.wrapping_add(1);
            if i.is_multiple_of(64) && Instant::now() >= spin_end {
                break;
            }
            std::hint::spin_loop();
        }
        sleeping.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        announce();
        let result = loop {
            if ready() {
                break Ok(true);
            }
            if Instant::now() >= deadline {
                break Ok(false);
            }
            // Hang-ups only: the socket also carries the peer's sealed regions (see `regions`).
            // nix does not know POLLRDHUP, so its `revents` reads `None` when that is set.
            let hang_up = PollFlags::from_bits_retain(libc::POLLRDHUP);
            let mut fds = [PollFd::new(self.efd.as_fd(), PollFlags::POLLIN), PollFd::new(self.sock.as_fd(), hang_up)];
            match poll(&mut fds, PollTimeout::from(ms_until(deadline, 100))) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => break Err(Error::from(std::io::Error::from(e))),
            }
            if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                let mut b = [0u8; 8];
                let _ = nix::unistd::read(&self.efd, &mut b);
            }
            if fds[1].revents().is_none_or(|r| !r.is_empty()) && !ready() {
                break Err(Error::ConnectionLost("the peer went away".into()));
            }
        };
        sleeping.store(0, Ordering::Relaxed);
        result
    }
}

/// Wakes the other side if it is asleep on `efd`.
pub(super) fn notify(sleeping: &AtomicU32, efd: &OwnedFd) {
    fence(Ordering::SeqCst);
    if sleeping.load(Ordering::Relaxed) != 0 {
        let _ = nix::unistd::write(efd, &1u64.to_ne_bytes());
    }
}
