//! Small syscall helpers shared by the backends.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// Fails the connection once the peer's host has been silent to the kernel for `peer_timeout`
/// ([`crate::Config::peer_timeout`]): keepalive probes from a third of it on (6 of them, in
/// the rest), and sent bytes left unacknowledged that long (TCP_USER_TIMEOUT), so that a host
/// that vanished without a word (power, a cut network) is found even while a transfer rightly
/// waits on (a streamed command that says nothing for an hour). A peer whose kernel answers,
/// with a window of zero while its program pauses, stays alive. Best effort.
pub(crate) fn keep_alive(s: &std::net::TcpStream, peer_timeout: std::time::Duration) {
    use nix::sys::socket::{setsockopt, sockopt};
    let total = peer_timeout.as_secs().clamp(1, i32::MAX as u64 / 1000) as u32;
    let idle = (total / 3).max(1);
    let interval = ((total - idle.min(total)) / 6).max(1);
    let _ = setsockopt(s, sockopt::KeepAlive, &true);
    let _ = setsockopt(s, sockopt::TcpKeepIdle, &idle);
    let _ = setsockopt(s, sockopt::TcpKeepInterval, &interval);
    let _ = setsockopt(s, sockopt::TcpKeepCount, &6);
    let _ = setsockopt(s, sockopt::TcpUserTimeout, &(total * 1000));
}

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

/// Sends `bytes` on a unix socket with `fds` attached (SCM_RIGHTS); returns the bytes sent.
pub(crate) fn send_with_fds(
    sock: &std::os::unix::net::UnixStream,
    bytes: &[u8],
    fds: &[std::os::fd::RawFd],
    flags: nix::sys::socket::MsgFlags,
) -> nix::Result<usize> {
    use nix::sys::socket::{ControlMessage, UnixAddr, sendmsg};
    use std::os::fd::AsRawFd;
    let iov = [std::io::IoSlice::new(bytes)];
    sendmsg::<UnixAddr>(sock.as_raw_fd(), &iov, &[ControlMessage::ScmRights(fds)], flags, None)
}

/// Receives up to `buf.len()` bytes from a unix socket and the descriptors attached to them (at
/// most `N` fit; the kernel drops the rest); returns the bytes received and the descriptors.
pub(crate) fn recv_with_fds<const N: usize>(
    sock: &std::os::unix::net::UnixStream,
    buf: &mut [u8],
) -> nix::Result<(usize, Vec<std::os::fd::OwnedFd>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, UnixAddr, recvmsg};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; N]);
    let msg = recvmsg::<UnixAddr>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(v) = c {
            // SAFETY: the kernel just installed these descriptors for us; we own them now.
            fds.extend(v.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
        }
    }
    Ok((msg.bytes, fds))
}
