//! Endpoint URLs: `tcp://host:port`, `ucx://host:port` and `shm://<rendezvous socket>` (a path,
//! or `@name` in the abstract namespace); the scheme is the fabric's name.

use crate::error::{Error, Result};
use crate::fabric::{AddressKind, Fabric};

/// An endpoint URL, parsed: the fabric, and where it meets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The fabric the scheme names.
    pub fabric: Fabric,
    /// `host:port`, or the socket where two processes of one host meet (see [`AddressKind`]).
    pub address: String,
}

impl Endpoint {
    /// Parses `scheme://address`; an unknown scheme or a malformed address is an error.
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::Url { url: url.to_string(), reason };
        let (scheme, address) = url.split_once("://").ok_or_else(|| bad("expected scheme://address".into()))?;
        let fabric: Fabric = scheme.parse().map_err(|e: crate::parse::ParseError| bad(e.to_string()))?;
        match fabric.address_kind() {
            AddressKind::HostPort => {
                let (host, port) =
                    address.rsplit_once(':').ok_or_else(|| bad(format!("expected {scheme}://host:port")))?;
                if host.is_empty() {
                    return Err(bad("missing host".into()));
                }
                port.parse::<u16>().map_err(|_| bad("the port is not a number from 0 to 65535".into()))?;
            }
            AddressKind::SocketPath if address.is_empty() => {
                return Err(bad(format!("expected {scheme}://<socket path>")));
            }
            AddressKind::SocketPath => {}
        }
        Ok(Endpoint { fabric, address: address.to_string() })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.fabric, self.address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for u in ["tcp://127.0.0.1:7000", "tcp://[::1]:0", "shm:///tmp/ws.sock", "shm://@ws", "ucx://10.0.0.1:7000"] {
            assert_eq!(Endpoint::parse(u).unwrap().to_string(), u);
        }
        for u in ["tcp://host", "tcp://:80", "udp://x:1", "shm://", "nonsense", "tcp://h:99999", "ucx://h"] {
            assert!(Endpoint::parse(u).is_err(), "{u}");
        }
        let unknown = Endpoint::parse("in-process://x:1").unwrap_err().to_string();
        assert!(unknown.contains("expected shm, ucx, ofi+shm,"), "{unknown}");
    }
}
