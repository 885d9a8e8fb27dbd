//! The location a server names in its own endpoints, as Arrow's reference servers do: a client
//! that reads `endpoint.location[0]` (Arrow's integration client, the example clients) connects
//! there for the data. The data planes are not named here: a client holding the key learns them
//! by asking (see [`crate::discovery`]).
//!
//! How it is chosen, first that applies:
//! 1. the URI the operator gave ([`Advertise::Uri`]: a server behind NAT or a proxy);
//! 2. a Unix socket's own `grpc+unix://PATH`;
//! 3. the server as this client reached it: the request's `:authority` under the scheme it
//!    came in on (`grpc+tls://` over TLS, `grpc+tcp://` otherwise), which is a name that
//!    reaches the server from where this client is (and that its certificate was checked for);
//! 4. without an `:authority`, the address the server listens on, unless that is unspecified
//!    (0.0.0.0 or ::), and then the address the connection came in on.

use std::net::SocketAddr;

use arrow_flight::{FlightInfo, Location};
use tonic::codegen::http::uri::Authority;

/// What a server's endpoints without a location are given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Advertise {
    /// Nothing: the handler's endpoints go out as it makes them.
    #[default]
    Nothing,
    /// The server itself, as the client reached it (see the module's doc).
    Reached,
    /// This URI (`grpc+tls://flight.example.org:443`, say).
    Uri(String),
}

/// The `:authority` a request came with, put in its extensions by the router.
#[derive(Clone, Debug)]
pub(crate) struct RequestAuthority(pub Authority);

/// Where the server listens, to name it by.
#[derive(Clone, Debug)]
pub(crate) enum Listening {
    Tcp { addr: SocketAddr, tls: bool },
    Unix(String),
}

impl Listening {
    /// The location to name to a client that reached us at `authority` over a connection to
    /// `local` (see the module's doc); None for [`Advertise::Nothing`].
    pub(crate) fn location(
        &self,
        advertise: &Advertise,
        authority: Option<&Authority>,
        local: Option<SocketAddr>,
    ) -> Option<String> {
        let (addr, tls) = match (advertise, self) {
            (Advertise::Nothing, _) => return None,
            (Advertise::Uri(uri), _) => return Some(uri.clone()),
            (Advertise::Reached, Listening::Unix(url)) => return Some(url.clone()),
            (Advertise::Reached, &Listening::Tcp { addr, tls }) => (addr, tls),
        };
        let scheme = if tls { "grpc+tls" } else { "grpc+tcp" };
        if let Some(authority) = authority.filter(|a| !a.host().is_empty()) {
            // A client that reached a default port names none; ours is never one.
            let port = authority.port_u16().unwrap_or(addr.port());
            let host = authority.host();
            return Some(format!("{scheme}://{host}:{port}"));
        }
        let at = if addr.ip().is_unspecified() { local.unwrap_or(addr) } else { addr };
        Some(format!("{scheme}://{}", SocketAddr::new(at.ip(), addr.port())))
    }
}

/// Gives every endpoint of `info` that names no location this one.
pub(crate) fn locate(info: &mut FlightInfo, location: Option<&str>) {
    let Some(uri) = location else { return };
    for endpoint in info.endpoint.iter_mut().filter(|e| e.location.is_empty()) {
        endpoint.location.push(Location { uri: uri.to_string() });
    }
}

#[cfg(test)]
mod tests {
    use arrow_flight::{FlightEndpoint, Ticket};

    use super::*;

    fn tcp(addr: &str, tls: bool) -> Listening {
        Listening::Tcp { addr: addr.parse().unwrap(), tls }
    }

    fn authority(a: &str) -> Authority {
        a.parse().unwrap()
    }

    #[test]
    fn the_location_is_chosen_as_documented() {
        let any = tcp("0.0.0.0:8815", false);
        let local = Some("10.1.2.3:8815".parse().unwrap());
        let reached =
            |l: &Listening, a: Option<&str>| l.location(&Advertise::Reached, a.map(authority).as_ref(), local);
        assert_eq!(any.location(&Advertise::Nothing, None, local), None);
        let given = Advertise::Uri("grpc+tls://flight.example.org:443".into());
        assert_eq!(any.location(&given, Some(&authority("h:1")), local).unwrap(), "grpc+tls://flight.example.org:443");
        assert_eq!(reached(&any, Some("db7:8815")).unwrap(), "grpc+tcp://db7:8815");
        assert_eq!(reached(&any, Some("db7")).unwrap(), "grpc+tcp://db7:8815", "no port: ours");
        assert_eq!(reached(&tcp("[::]:9000", true), Some("[fd00::1]:9000")).unwrap(), "grpc+tls://[fd00::1]:9000");
        assert_eq!(reached(&any, None).unwrap(), "grpc+tcp://10.1.2.3:8815", "unspecified: the connection's");
        assert_eq!(reached(&tcp("192.168.7.1:8815", true), None).unwrap(), "grpc+tls://192.168.7.1:8815");
        let unix = Listening::Unix("grpc+unix:///run/flight.sock".into());
        assert_eq!(reached(&unix, Some("localhost")).unwrap(), "grpc+unix:///run/flight.sock");
    }

    #[test]
    fn only_endpoints_without_a_location_get_one() {
        let named = FlightEndpoint::new().with_ticket(Ticket::new("a")).with_location("grpc+tcp://elsewhere:1");
        let bare = FlightEndpoint::new().with_ticket(Ticket::new("b"));
        let mut info = FlightInfo::new().with_endpoint(named).with_endpoint(bare);
        locate(&mut info, Some("grpc+tcp://here:2"));
        let uris: Vec<_> = info.endpoint.iter().map(|e| e.location[0].uri.as_str()).collect();
        assert_eq!(uris, ["grpc+tcp://elsewhere:1", "grpc+tcp://here:2"]);
        assert!(info.endpoint.iter().all(|e| e.location.len() == 1));
        let mut untouched = FlightInfo::new().with_endpoint(FlightEndpoint::new());
        locate(&mut untouched, None);
        assert!(untouched.endpoint[0].location.is_empty());
    }
}
