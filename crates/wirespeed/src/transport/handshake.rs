//! Runs the sans-IO handshake over a blocking socket with an overall deadline.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::Config;
use crate::error::{Error, Result, Violation};
use crate::fabric::Fabric;
use crate::key::Key;
#[cfg(any(feature = "ucx", feature = "ofi"))]
use crate::proto::codec::{ReadFields, Writer};
use crate::proto::frame::{FrameHeader, HEADER_LEN, Limits};
use crate::proto::handshake::{Handshake, Params, Peer, error_frame};

/// Handshake frames are small; anything bigger is refused before it is read.
const HANDSHAKE_LIMITS: Limits = Limits { max_meta: 1024, max_payload: 0 };

/// A socket whose reads and writes can be bounded by a deadline.
pub(crate) trait DeadlineIo: Read + Write {
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()>;
}

impl DeadlineIo for TcpStream {
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
}

impl DeadlineIo for UnixStream {
    fn set_timeouts(&self, t: Option<Duration>) -> io::Result<()> {
        self.set_read_timeout(t)?;
        self.set_write_timeout(t)
    }
}

pub(crate) fn our_params(config: &Config, fabric: Fabric) -> Params {
    Params { fabric, max_streams: config.max_streams, stream_window: config.stream_window }
}

fn nonce() -> Result<[u8; 32]> {
    let mut n = [0u8; 32];
    getrandom::fill(&mut n).map_err(|e| Error::from(io::Error::other(e.to_string())))?;
    Ok(n)
}

/// Authenticates as the client; returns the server.
pub(crate) fn client(io: &mut impl DeadlineIo, key: &Key, config: &Config, fabric: Fabric) -> Result<Peer> {
    let (hs, hello) = Handshake::client(key.as_bytes(), our_params(config, fabric), nonce()?);
    drive(io, hs, hello, config)
}

/// Authenticates as the server; returns the client.
pub(crate) fn server(io: &mut impl DeadlineIo, key: &Key, config: &Config, fabric: Fabric) -> Result<Peer> {
    let hs = Handshake::server(key.as_bytes(), our_params(config, fabric), nonce()?);
    drive(io, hs, Vec::new(), config)
}

fn drive(io: &mut impl DeadlineIo, mut hs: Handshake, first: Vec<u8>, config: &Config) -> Result<Peer> {
    let deadline = Deadline { at: Instant::now() + config.handshake_timeout, total: config.handshake_timeout };
    write_by(io, &first, deadline)?;
    loop {
        let (h, meta) = match read_frame(io, deadline) {
            Ok(f) => f,
            Err(e @ Error::Frame(_)) => {
                // Garbage: tell the peer why before hanging up.
                let _ = write_by(io, &error_frame(e.code(), &e.to_string()), deadline);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        match hs.on_frame(&h, &meta) {
            Ok(p) => {
                write_by(io, &p.send, deadline)?;
                if let Some(peer) = p.done {
                    io.set_timeouts(None)?;
                    return Ok(peer);
                }
            }
            Err(f) => {
                let _ = write_by(io, &f.send, deadline);
                return Err(f.error);
            }
        }
    }
}

#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    total: Duration,
}

impl Deadline {
    fn remaining(self) -> Result<Duration> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout(self.total));
        }
        Ok(left)
    }

    fn io_error(self, e: io::Error) -> Error {
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::Timeout(self.total),
            _ => Error::ConnectionLost(e.to_string()),
        }
    }
}

fn write_by(io: &mut impl DeadlineIo, bytes: &[u8], deadline: Deadline) -> Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    io.set_timeouts(Some(deadline.remaining()?))?;
    io.write_all(bytes).map_err(|e| deadline.io_error(e))
}

/// Reads exactly one frame, never past it: the shared-memory rendezvous sends file
/// descriptors right after, and they must not be swallowed by a read-ahead.
fn read_frame(io: &mut impl DeadlineIo, deadline: Deadline) -> Result<(FrameHeader, Vec<u8>)> {
    let mut head = [0u8; HEADER_LEN];
    read_exact_by(io, &mut head, deadline)?;
    let h = FrameHeader::decode(&head, &HANDSHAKE_LIMITS)?;
    if h.payload_len() != 0 {
        return Err(Violation::HandshakeFrame { kind: h.kind.name(), meta_len: h.meta_len as usize }.into());
    }
    let mut meta = vec![0u8; h.meta_len as usize];
    read_exact_by(io, &mut meta, deadline)?;
    Ok((h, meta))
}

fn read_exact_by(io: &mut impl DeadlineIo, mut buf: &mut [u8], deadline: Deadline) -> Result<()> {
    while !buf.is_empty() {
        io.set_timeouts(Some(deadline.remaining()?))?;
        match io.read(buf) {
            Ok(0) => return Err(Error::ConnectionLost("the peer hung up during the handshake".into())),
            Ok(n) => buf = &mut buf[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(deadline.io_error(e)),
        }
    }
    Ok(())
}

/// Fabric addresses (UCX worker addresses, libfabric endpoint names) are at most a few
/// hundred bytes; anything near this is not one.
#[cfg(any(feature = "ucx", feature = "ofi"))]
const MAX_ADDRESS: usize = 64 << 10;

/// After the handshake, sends our fabric address over the authenticated socket and reads the
/// peer's: each a little-endian u32 length, then the bytes.
#[cfg(any(feature = "ucx", feature = "ofi"))]
pub(crate) fn swap_addresses(s: &mut TcpStream, ours: &[u8], timeout: Duration) -> Result<Vec<u8>> {
    let lost = |e: io::Error| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Error::Timeout(timeout),
        _ => Error::ConnectionLost(format!("swapping fabric addresses: {e}")),
    };
    s.set_timeouts(Some(timeout))?;
    let mut msg = Writer::with_capacity(4 + ours.len());
    msg.prefixed(ours);
    s.write_all(&msg.into_inner()).map_err(lost)?;
    let len = ReadFields::u32(s).map_err(lost)? as usize;
    if len == 0 || len > MAX_ADDRESS {
        return Err(Violation::AddressLength(len).into());
    }
    let mut theirs = vec![0u8; len];
    s.read_exact(&mut theirs).map_err(lost)?;
    s.set_timeouts(None)?;
    Ok(theirs)
}
