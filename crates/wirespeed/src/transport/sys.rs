//! Small syscall helpers shared by the backends.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// Milliseconds until `deadline`, rounded up and capped at `cap_ms`.
pub(crate) fn ms_until(deadline: Instant, cap_ms: u64) -> u16 {
    let left = deadline.saturating_duration_since(Instant::now());
    let ms = (left.as_micros().div_ceil(1000) as u64).min(cap_ms);
    ms.min(u16::MAX as u64) as u16
}

/// Waits until `fd` has any of `events` or `deadline` passes; returns the events seen.
pub(crate) fn wait_fd(fd: BorrowedFd<'_>, events: PollFlags, deadline: Instant) -> std::io::Result<Option<PollFlags>> {
    loop {
        let mut fds = [PollFd::new(fd.as_fd(), events)];
        let ms = ms_until(deadline, 1000);
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) if Instant::now() >= deadline => return Ok(None),
            Ok(0) => continue,
            Ok(_) => return Ok(fds[0].revents()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Waits up to `wait` for a client on a non-blocking listener, then takes it.
pub(crate) fn accept_within<T>(
    fd: BorrowedFd<'_>,
    wait: std::time::Duration,
    accept: impl FnOnce() -> std::io::Result<T>,
) -> std::io::Result<Option<T>> {
    if wait_fd(fd, PollFlags::POLLIN, Instant::now() + wait)?.is_none() {
        return Ok(None);
    }
    match accept() {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}
