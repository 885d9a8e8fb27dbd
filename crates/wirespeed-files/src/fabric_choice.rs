//! Which fabric a transfer runs on. The listening side tells each new connection where
//! else it listens and on which host (`Hello`); a client on the same host then moves to
//! shared memory, anywhere else it stays on TCP (or UCX when asked for).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use wirespeed::fabric::AddressKind;
use wirespeed::fabric::Choice;
use wirespeed::{Config, Connection, Fabric, Key, Listener, Stream};

use crate::error::{FilesError, Result};
use crate::link::Link;
use crate::proto::{Msg, Violation};

/// The fabric the server listens on at `HOST:PORT`: the one asked for unless it meets at a
/// socket path (shm, which the server offers beside it), else TCP.
fn far(t: Choice) -> Fabric {
    match t {
        Choice::Only(f) if f.address_kind() == AddressKind::HostPort => f,
        _ => Fabric::Tcp,
    }
}

/// Whether a client on the server's host moves to shared memory.
fn near(t: Choice) -> bool {
    t == Choice::Auto || near_only(t)
}

/// Shared memory (at the socket the server offers beside `HOST:PORT`) or an error.
fn near_only(t: Choice) -> bool {
    matches!(t, Choice::Only(f) if f.address_kind() == AddressKind::SocketPath)
}

/// The ports a listener may take (`--ports LO-HI`, for firewalls that open only some);
/// `0-0` lets the system pick a free one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ports {
    /// The lowest port of the range.
    pub first: u16,
    /// The highest.
    pub last: u16,
}

impl Ports {
    /// Any port the system picks.
    pub const ANY: Ports = Ports { first: 0, last: 0 };
}

impl std::str::FromStr for Ports {
    type Err = wirespeed::ParseError;
    fn from_str(s: &str) -> std::result::Result<Self, wirespeed::ParseError> {
        let bad = || wirespeed::ParseError::new("port range", s, "LO-HI (two port numbers, LO at most HI) or one port");
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let port = |p: &str| p.trim().parse::<u16>().map_err(|_| bad());
        let (first, last) = (port(a)?, port(b)?);
        if first > last || (first == 0) != (last == 0) {
            return Err(bad());
        }
        Ok(Ports { first, last })
    }
}

impl std::fmt::Display for Ports {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// How long a connected client may take to open its control stream.
const START_GRACE: Duration = Duration::from_secs(10);

/// A listening end: TCP (or UCX) at `HOST:PORT`, plus a shared-memory socket beside it.
pub struct Server {
    main: Listener,
    shm: Option<Listener>,
    shm_url: String,
}

impl Server {
    /// Binds `addr` (`HOST:PORT`).
    pub fn bind(addr: &str, transport: Choice, key: &Key, config: &Config) -> Result<Server> {
        let main = wirespeed::listen(&format!("{}://{addr}", far(transport)), key, config)?;
        let (shm, shm_url) = if near(transport) {
            let port = main.url().rsplit(':').next().unwrap_or("0").to_string();
            let path: PathBuf = std::env::temp_dir().join(format!("wirespeed-{}-{port}.sock", std::process::id()));
            let l = wirespeed::listen(&format!("shm://{}", path.display()), key, config)?;
            let url = l.url().to_string();
            (Some(l), url)
        } else {
            (None, String::new())
        };
        Ok(Server { main, shm, shm_url })
    }

    /// Binds `host` (a name, an IPv4 address or a bracketed IPv6 one) on the first port of
    /// `ports` that is free.
    pub fn bind_in(host: &str, ports: Ports, transport: Choice, key: &Key, config: &Config) -> Result<Server> {
        for port in ports.first..=ports.last {
            match Server::bind(&format!("{host}:{port}"), transport, key, config) {
                Err(FilesError::Connection(e)) if e.io_kind() == Some(std::io::ErrorKind::AddrInUse) => {}
                r => return r,
            }
        }
        let why = format!("cannot listen on {host}: every port in {ports} is taken");
        Err(wirespeed::Error::from(std::io::Error::new(std::io::ErrorKind::AddrInUse, why)).into())
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.main.url().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0)
    }

    /// Waits for the client that starts a transfer; returns its connection and the control
    /// stream it opened. Connections that only looked (and moved to shared memory) are
    /// skipped, and so are clients the handshake refused; when no client comes, the last
    /// refusal is the error, else a timeout.
    pub fn accept(&self, timeout: Duration) -> Result<(Connection, Stream)> {
        let deadline = Instant::now() + timeout;
        // A client refused (a wrong key, another transport) has been told why; we wait on for
        // the right one, and name the refusal if none comes.
        let mut refused = None;
        loop {
            for l in std::iter::once(&self.main).chain(self.shm.as_ref()) {
                let conn = match l.accept_timeout(Duration::from_millis(20)) {
                    Ok(c) => c,
                    Err(wirespeed::Error::Timeout(_)) => continue,
                    Err(e @ wirespeed::Error::Rejected { .. }) => {
                        refused = Some(e);
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                };
                let hello = Link::plain(conn.open_stream()?);
                hello.send(
                    &Msg::Hello { host: wirespeed::fabric::host_id().into(), shm: self.shm_url.clone().into_bytes() },
                    &[],
                )?;
                // A client that moves to shared memory hangs up here instead.
                let gone = |e: &FilesError| {
                    matches!(e, FilesError::Connection(wirespeed::Error::Closed | wirespeed::Error::ConnectionLost(_)))
                };
                // A client already here gets its own time to start, whatever is left of ours:
                // dropping it now would leave it with a dead connection.
                let wait = deadline.saturating_duration_since(Instant::now()).max(START_GRACE);
                let closed = hello.close();
                // Once no stream is open, the accept below reads the connection itself at once.
                drop(hello);
                let control = closed.and_then(|()| Ok(conn.accept_stream_timeout(wait)?));
                match control {
                    Ok(control) => return Ok((conn, control)),
                    Err(e) if gone(&e) => continue,
                    Err(e) => return Err(e),
                }
            }
            if Instant::now() >= deadline {
                return Err(refused.unwrap_or(wirespeed::Error::Timeout(timeout)).into());
            }
        }
    }
}

/// Connects to a [`Server`] at `addr` (`HOST:PORT`) over the best fabric `transport` allows.
pub fn connect(addr: &str, transport: Choice, key: &Key, config: &Config) -> Result<Connection> {
    let far = || -> Result<(Connection, Option<String>)> {
        let conn = wirespeed::connect(&format!("{}://{addr}", far(transport)), key, config)?;
        let shm = read_hello(&conn)?;
        Ok((conn, shm))
    };
    let (conn, shm) = far()?;
    if !near(transport) {
        return Ok(conn);
    }
    let Some(url) = shm else {
        if near_only(transport) {
            return Err(FilesError::Usage(format!("--transport {transport} needs both ends on one host")));
        }
        return Ok(conn);
    };
    // The server serves one connection at a time: hang up before moving.
    drop(conn);
    match wirespeed::connect(&url, key, config) {
        Ok(near) => {
            read_hello(&near)?;
            Ok(near)
        }
        Err(e) if near_only(transport) => Err(e.into()),
        Err(_) => Ok(far()?.0),
    }
}

/// Reads the server's `Hello`; returns its shared-memory URL if it is on this host.
fn read_hello(conn: &Connection) -> Result<Option<String>> {
    let s = Link::plain(conn.accept_stream()?);
    let Some((Msg::Hello { host, shm }, _)) = s.recv()? else {
        return Err(Violation::Expected { expected: "Hello", got: "something else" }.into());
    };
    if s.recv()?.is_some() {
        return Err(Violation::MoreAfter("Hello").into());
    }
    s.finish()?;
    let same_host = Fabric::Shm.reachable(std::str::from_utf8(&host).ok()) && !shm.is_empty();
    Ok(same_host.then(|| String::from_utf8_lossy(&shm).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_parse_as_a_range_or_one_port() {
        assert_eq!("50000-50100".parse(), Ok(Ports { first: 50000, last: 50100 }));
        assert_eq!("7470".parse(), Ok(Ports { first: 7470, last: 7470 }));
        assert_eq!("0".parse(), Ok(Ports::ANY));
        for bad in ["", "x", "9-1", "0-5", "1-70000", "1-2-3"] {
            assert!(bad.parse::<Ports>().is_err(), "{bad:?}");
        }
        assert_eq!(Ports { first: 1, last: 2 }.to_string(), "1-2");
    }
}
