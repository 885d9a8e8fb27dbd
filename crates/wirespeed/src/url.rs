//! Endpoint URLs: `tcp://host:port`, `ucx://host:port` and `shm://<rendezvous-socket-path>`.

use std::path::PathBuf;

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `host:port`; port 0 asks the listener for an ephemeral port.
    Tcp(String),
    /// The unix socket where the two sides meet; the rings go over it as a memfd.
    Shm(PathBuf),
    /// `host:port` of the TCP socket that authenticates and introduces the UCX workers.
    Ucx(String),
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |reason| Error::Url { url: url.to_string(), reason };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("expected scheme://address"))?;
        let host_port = || {
            let (host, port) = rest.rsplit_once(':').ok_or_else(|| bad("expected scheme://host:port"))?;
            if host.is_empty() {
                return Err(bad("missing host"));
            }
            port.parse::<u16>().map_err(|_| bad("the port is not a number from 0 to 65535"))?;
            Ok(rest.to_string())
        };
        match scheme {
            "tcp" => Ok(Endpoint::Tcp(host_port()?)),
            "ucx" => Ok(Endpoint::Ucx(host_port()?)),
            "shm" => {
                if rest.is_empty() {
                    return Err(bad("expected shm://<socket path>"));
                }
                Ok(Endpoint::Shm(PathBuf::from(rest)))
            }
            _ => Err(bad("unknown scheme (expected tcp, shm or ucx)")),
        }
    }

    pub fn scheme(&self) -> &'static str {
        match self {
            Endpoint::Tcp(_) => "tcp",
            Endpoint::Shm(_) => "shm",
            Endpoint::Ucx(_) => "ucx",
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
            Endpoint::Shm(p) => write!(f, "shm://{}", p.display()),
            Endpoint::Ucx(a) => write!(f, "ucx://{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for u in ["tcp://127.0.0.1:7000", "tcp://[::1]:0", "shm:///tmp/ws.sock", "ucx://10.0.0.1:7000"] {
            assert_eq!(Endpoint::parse(u).unwrap().to_string(), u);
        }
        for u in ["tcp://host", "tcp://:80", "udp://x:1", "shm://", "nonsense", "tcp://h:99999", "ucx://h"] {
            assert!(Endpoint::parse(u).is_err(), "{u}");
        }
    }
}
