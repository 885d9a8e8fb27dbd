//! TCP: frames written with vectored writes straight from the caller's buffers (owned ones
//! in a burst through a writer thread that coalesces them), read through a staging buffer for
//! small frames and directly into the body buffer for large ones.

mod queue;

use std::io::{self, IoSlice, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::poll::PollFlags;
use nix::sys::socket::{setsockopt, sockopt};

use super::conn::Connection;
use super::listener::{Acceptor, Listener};
use super::sys::{accept_within, wait_fd};
use super::{Config, FrameRx, FrameSink, FrameTx, handshake};
use crate::error::{Error, FrameError, Result};
use crate::fabric::Fabric;
use crate::key::Key;
use crate::mem::Buf;
use crate::proto::decoder::FrameDecoder;
use crate::proto::frame::Kind;
use crate::proto::session::Role;
use queue::SendQueue;

/// Bytes staged per read; payloads bigger than this bypass it.
const STAGING: usize = 256 << 10;
/// Bytes staged per read while frames are large: a header and typical meta.
const HEAD_READ: usize = 4 << 10;
/// How long a reader polls its socket before it sleeps in poll(2).
const SPIN: Duration = Duration::from_micros(50);
/// Owned frames sent within this of each other, with nothing but credit heard from the peer
/// in between, are a burst: a sender's loop, not replies to the peer.
const BURST_GAP: Duration = Duration::from_millis(1);
/// Owned payloads from this size on are written directly even in a stream: they are large
/// writes already.
const DIRECT_MIN: usize = 512 << 10;

pub fn connect(addr: &str, key: &Key, config: &Config) -> Result<Connection> {
    let (mut s, a) = dial(addr, config.handshake_timeout)?;
    let peer = handshake::client(&mut s, key, config, Fabric::Tcp)?;
    establish(s, Role::Client, peer, config, format!("tcp://{a}"))
}

pub fn listen(addr: &str, key: &Key, config: &Config) -> Result<Listener> {
    listen_with(Fabric::Tcp, addr, key, config, |mut s, peer, key, config, _| {
        let params = handshake::server(&mut s, key, config, Fabric::Tcp)?;
        establish(s, Role::Server, params, config, peer)
    })
}

/// Connects a TCP socket to the first address of `addr` that answers.
pub(crate) fn dial(addr: &str, timeout: Duration) -> Result<(TcpStream, SocketAddr)> {
    let mut last = None;
    let addrs = addr.to_socket_addrs().map_err(|e| Error::ConnectionLost(format!("cannot resolve {addr}: {e}")))?;
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => return Ok((s, a)),
            Err(e) => last = Some(e),
        }
    }
    Err(Error::ConnectionLost(format!(
        "cannot connect to {addr}: {}",
        last.map_or("no address".to_string(), |e| e.to_string())
    )))
}

/// Authenticates an accepted socket and builds the connection over it, on the listener's fabric.
pub(crate) type Establish = fn(TcpStream, String, &Key, &Config, Fabric) -> Result<Connection>;

/// Listens on a TCP socket whose clients `establish` turns into connections (`fabric` names
/// them in URLs).
pub(crate) fn listen_with(
    fabric: Fabric,
    addr: &str,
    key: &Key,
    config: &Config,
    establish: Establish,
) -> Result<Listener> {
    let l = TcpListener::bind(addr)
        .map_err(|e| Error::from(io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))))?;
    l.set_nonblocking(true)?; // a client that vanishes between poll and accept must not block us
    let url = format!("{fabric}://{}", l.local_addr()?);
    let acceptor = TcpAcceptor { listener: l, fabric };
    Ok(Listener::spawn(acceptor, (key.clone(), config.clone(), establish, fabric), url, config.timeout))
}

struct TcpAcceptor {
    listener: TcpListener,
    fabric: Fabric,
}

impl Acceptor for TcpAcceptor {
    type Socket = TcpStream;
    type Shared = (Key, Config, Establish, Fabric);

    fn accept(&self, wait: Duration) -> io::Result<Option<(TcpStream, String)>> {
        let client = accept_within(self.listener.as_fd(), wait, || self.listener.accept())?;
        Ok(client.map(|(s, a)| (s, format!("{}://{a}", self.fabric))))
    }

    fn establish(
        s: TcpStream,
        peer: String,
        (key, config, establish, fabric): &(Key, Config, Establish, Fabric),
    ) -> Result<Connection> {
        establish(s, peer, key, config, *fabric)
    }
}

fn establish(
    s: TcpStream,
    role: Role,
    peer: crate::proto::handshake::Peer,
    config: &Config,
    name: String,
) -> Result<Connection> {
    s.set_nodelay(true)?;
    super::sys::keep_alive(&s, config.peer_timeout);
    if config.tcp_buffer_bytes > 0 {
        // Best effort: the kernel caps these at net.core.{w,r}mem_max.
        let _ = setsockopt(&s, sockopt::SndBuf, &config.tcp_buffer_bytes);
        let _ = setsockopt(&s, sockopt::RcvBuf, &config.tcp_buffer_bytes);
    }
    s.set_nonblocking(true)?;
    let heard = Arc::new(AtomicU64::new(0));
    let rx = TcpRx {
        heard: heard.clone(),
        sock: s.try_clone()?,
        eof: false,
        decoder: FrameDecoder::new(config.limits),
        staging: vec![0; STAGING].into_boxed_slice(),
        lo: 0,
        hi: 0,
        lowat: 1,
        large_frames: false,
    };
    let tx = TcpTx {
        sock: s,
        max_payload: config.limits.max_payload as usize,
        queue: None,
        timeout: config.timeout,
        last_owned: None,
        heard,
    };
    Ok(Connection::new(role, peer, Box::new(rx), Box::new(tx), None, config, name))
}

/// How long a closed connection keeps reading what the peer still sends, so that closing the
/// socket with unread bytes (which makes the kernel send a reset) cannot destroy data of ours
/// the peer has not read yet.
const LINGER: Duration = Duration::from_secs(5);

struct TcpRx {
    sock: TcpStream,
    eof: bool,
    decoder: FrameDecoder,
    staging: Box<[u8]>,
    lo: usize,
    hi: usize,
    /// The socket's SO_RCVLOWAT: while a large payload is awaited, the kernel wakes us once
    /// this much of it has arrived instead of for every segment.
    lowat: usize,
    /// The last frame's payload was read mostly directly.
    large_frames: bool,
    /// Frames other than credit read so far, for the sender's [`TcpTx::heard`].
    heard: Arc<AtomicU64>,
}

/// The most of a payload we ask the kernel to gather before it wakes us.
const LOWAT_MAX: usize = 512 << 10;

impl FrameRx for TcpRx {
    fn read_frame(&mut self, deadline: Instant, sink: &mut FrameSink<'_>) -> Result<bool> {
        let mut spin_until = None;
        loop {
            if let Some(f) = self.decoder.take_frame() {
                if f.header.flags != 0 {
                    return Err(Error::Frame(FrameError::Reserved)); // flags belong to rings
                }
                self.large_frames = f.payload.len() >= STAGING / 4;
                if f.header.kind != Kind::Credit {
                    self.heard.fetch_add(1, Ordering::Relaxed);
                }
                sink(&f.header, &f.meta, Buf::from(f.payload))?;
                return Ok(true);
            }
            if self.lo < self.hi {
                self.lo += self.decoder.feed(&self.staging[self.lo..self.hi])?;
                continue;
            }
            let missing = self.decoder.payload_missing();
            let direct = missing >= STAGING / 4;
            let res = if direct {
                let spare = self.decoder.payload_spare();
                // SAFETY: recv writes at most `spare.len()` bytes into memory we own.
                let n = unsafe { libc::recv(self.sock.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), 0) };
                if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
            } else {
                self.lo = 0;
                self.hi = 0;
                // After a large frame, read little beyond the next header: whatever of its
                // payload lands in staging must be copied out again.
                let want = if self.large_frames { HEAD_READ } else { STAGING };
                (&self.sock).read(&mut self.staging[..want])
            };
            match res {
                Ok(0) => {
                    self.eof = true;
                    let what = if self.decoder.is_idle() {
                        "the peer hung up"
                    } else {
                        "the peer hung up in the middle of a frame"
                    };
                    return Err(Error::ConnectionLost(what.into()));
                }
                // SAFETY: recv initialised `n` bytes of the spare payload.
                Ok(n) if direct => unsafe { self.decoder.payload_filled(n) },
                Ok(n) => self.hi = n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Data a sender is streaming comes back within microseconds: retrying the
                    // read briefly saves a sleep and a wake-up per read.
                    if Instant::now() < *spin_until.get_or_insert_with(|| Instant::now() + SPIN) {
                        std::hint::spin_loop();
                        continue;
                    }
                    let lowat = if direct { missing.min(LOWAT_MAX) } else { 1 };
                    if lowat != self.lowat {
                        set_rcvlowat(&self.sock, lowat);
                        self.lowat = lowat;
                    }
                    if wait_fd(self.sock.as_fd(), PollFlags::POLLIN, deadline)?.is_none() {
                        return Ok(false);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::ConnectionLost(e.to_string())),
            }
        }
    }
}

/// Best effort: without it we are only woken more often.
fn set_rcvlowat(sock: &TcpStream, bytes: usize) {
    let v = bytes as libc::c_int;
    // SAFETY: setsockopt reads one c_int from a live local.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

impl Drop for TcpRx {
    fn drop(&mut self) {
        if self.eof {
            return;
        }
        let Ok(sock) = self.sock.try_clone() else { return };
        // Whatever the peer still sends must wake the lingering reader.
        set_rcvlowat(&sock, 1);
        let _ = std::thread::Builder::new().name("wirespeed-linger".into()).spawn(move || {
            let deadline = Instant::now() + LINGER;
            let mut sink = [0u8; 16 << 10];
            while let Ok(Some(_)) = wait_fd(sock.as_fd(), PollFlags::POLLIN, deadline) {
                match (&sock).read(&mut sink) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return,
                }
            }
        });
    }
}

struct TcpTx {
    sock: TcpStream,
    max_payload: usize,
    /// Started by the first owned frame; frames written directly wait until it is empty.
    queue: Option<SendQueue>,
    /// How long the queue's writer waits for room before it fails the connection.
    timeout: Duration,
    /// When the last owned frame was handed over, and `heard` then.
    last_owned: Option<(Instant, u64)>,
    /// Frames other than credit read from the peer so far (counted by the reader).
    heard: Arc<AtomicU64>,
}

impl FrameTx for TcpTx {
    fn write_frame(&mut self, head: &[u8], payload: &[IoSlice<'_>], timeout: Duration) -> Result<()> {
        if let Some(q) = &self.queue {
            q.drain(timeout)?;
        }
        let mut iov = Vec::with_capacity(payload.len() + 1);
        iov.push(IoSlice::new(head));
        iov.extend_from_slice(payload);
        write_all(&self.sock, &mut iov, timeout, |_| {})
    }

    fn write_frame_owned(&mut self, head: &[u8], payload: &[Bytes], timeout: Duration) -> Result<()> {
        // A frame on its own (a request, a reply) goes straight to the socket: no hand-off,
        // so no added latency; so does a large one, which is a large write already. Smaller
        // frames in a burst go to the writer thread, which coalesces them, and so does
        // whatever the socket has no room for.
        let len: usize = payload.iter().map(|b| b.len()).sum();
        let heard = self.heard.load(Ordering::Relaxed);
        let burst = len < DIRECT_MIN && self.last_owned.is_some_and(|(t, h)| h == heard && t.elapsed() < BURST_GAP);
        let (mut head, mut payload) = (head, payload.to_vec());
        if !burst && self.queue.as_ref().is_none_or(|q| q.is_empty()) {
            let mut iov: Vec<IoSlice<'_>> =
                std::iter::once(head).chain(payload.iter().map(|b| &b[..])).map(IoSlice::new).collect();
            let mut n = write_ready(&self.sock, &mut &mut iov[..])?;
            let skip = n.min(head.len());
            head = &head[skip..];
            n -= skip;
            payload.retain_mut(|b| {
                let k = n.min(b.len());
                n -= k;
                *b = b.slice(k..);
                !b.is_empty()
            });
            if head.is_empty() && payload.is_empty() {
                self.last_owned = Some((Instant::now(), heard));
                return Ok(());
            }
        }
        let q = match &mut self.queue {
            Some(q) => q,
            None => self.queue.insert(SendQueue::start(self.sock.try_clone()?, self.timeout)?),
        };
        q.push(head, &payload, timeout)?;
        self.last_owned = Some((Instant::now(), heard));
        Ok(())
    }

    fn max_payload(&self) -> usize {
        self.max_payload
    }

    fn shutdown(&mut self, graceful: bool) {
        if graceful && let Some(q) = &self.queue {
            let _ = q.drain(LINGER); // what the peer does not take by then is lost anyway
        }
        let _ = self.sock.shutdown(if graceful { Shutdown::Write } else { Shutdown::Both });
    }
}

/// Writes `bufs` whole on the non-blocking `sock`, reporting each write's bytes to `wrote`;
/// fails once the socket has taken nothing for `timeout`.
fn write_all(
    sock: &TcpStream,
    bufs: &mut [IoSlice<'_>],
    timeout: Duration,
    mut wrote: impl FnMut(usize),
) -> Result<()> {
    let mut bufs = bufs;
    loop {
        wrote(write_ready(sock, &mut bufs)?);
        if bufs.is_empty() {
            return Ok(());
        }
        if wait_fd(sock.as_fd(), PollFlags::POLLOUT, Instant::now() + timeout)?.is_none() {
            return Err(Error::Timeout(timeout));
        }
    }
}

/// Writes as much of `bufs` as `sock` takes without waiting, advancing past it; returns how
/// many bytes that was.
fn write_ready(sock: &TcpStream, bufs: &mut &mut [IoSlice<'_>]) -> Result<usize> {
    let mut done = 0;
    while !bufs.is_empty() {
        match (&*sock).write_vectored(bufs) {
            Ok(0) => return Err(Error::ConnectionLost("the socket accepts no more data".into())),
            Ok(n) => {
                IoSlice::advance_slices(bufs, n);
                done += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::ConnectionLost(e.to_string())),
        }
    }
    Ok(done)
}
