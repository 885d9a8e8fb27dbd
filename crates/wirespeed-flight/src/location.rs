//! Data-plane locations, as the `wirespeed.*` actions hand them out (see `plane::hello`):
//! `wirespeed+tcp://host:port?exp=…&cap=…`, `wirespeed+ucx://host:port?…` and
//! `wirespeed+shm://@<abstract socket name>?host=<boot id>/<network namespace>&…`. `exp` and `cap`
//! are the call's capability; `host` tells a client whether it shares the machine (and so the
//! shared memory) and the network namespace (where the abstract socket is); `seal=aes-256-gcm`
//! that the plane's messages are sealed (a tcp plane under TLS).

use wirespeed::Fabric;

use crate::plane::capability::Grant;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlaneLocation {
    pub kind: Fabric,
    /// The wirespeed endpoint URL to connect to (`tcp://…`, `shm://…`, `ucx://…`).
    pub url: String,
    /// The server's boot id and network namespace, for shm.
    pub host: Option<String>,
    pub grant: Option<Grant>,
    /// The plane's messages are sealed (see `plane::call_stream`).
    pub sealed: bool,
}

/// The `seal` parameter's one value.
const SEAL: &str = "aes-256-gcm";

impl PlaneLocation {
    pub(crate) fn to_uri(&self) -> String {
        let mut query = Vec::new();
        if let Some(h) = &self.host {
            query.push(format!("host={h}"));
        }
        if let Some(g) = &self.grant {
            query.push(format!("exp={}", g.expiry));
            query.push(format!("cap={}", hex(&g.mac)));
        }
        if self.sealed {
            query.push(format!("seal={SEAL}"));
        }
        let mut uri = format!("wirespeed+{}", self.url);
        if !query.is_empty() {
            uri.push('?');
            uri.push_str(&query.join("&"));
        }
        uri
    }

    /// None for anything that is not a well-formed wirespeed location.
    pub(crate) fn parse(uri: &str) -> Option<Self> {
        let url = uri.strip_prefix("wirespeed+")?;
        let (url, query) = url.split_once('?').unwrap_or((url, ""));
        let kind = url.split_once("://")?.0.parse::<Fabric>().ok()?;
        let (mut host, mut expiry, mut mac, mut sealed) = (None, None, None, false);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=')? {
                ("host", v) => host = Some(v.to_string()),
                ("exp", v) => expiry = Some(v.parse().ok()?),
                ("cap", v) => mac = Some(unhex(v)?),
                // A seal this client does not know could not be honoured: no location then.
                ("seal", v) => sealed = (v == SEAL).then_some(true)?,
                _ => {} // room for later parameters
            }
        }
        let grant = match (expiry, mac) {
            (Some(expiry), Some(mac)) => Some(Grant { expiry, mac }),
            (None, None) => None,
            _ => return None,
        };
        Some(PlaneLocation { kind, url: url.to_string(), host, grant, sealed })
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips() {
        let loc = PlaneLocation {
            kind: Fabric::Shm,
            url: "shm:///tmp/x.sock".into(),
            host: Some("abc-123".into()),
            grant: Some(Grant { expiry: 42, mac: [0xab; 32] }),
            sealed: false,
        };
        assert_eq!(PlaneLocation::parse(&loc.to_uri()), Some(loc));
        let mut tcp = PlaneLocation {
            kind: Fabric::Tcp,
            url: "tcp://10.0.0.1:5000".into(),
            host: None,
            grant: None,
            sealed: false,
        };
        assert_eq!(tcp.to_uri(), "wirespeed+tcp://10.0.0.1:5000");
        assert_eq!(PlaneLocation::parse(&tcp.to_uri()), Some(tcp.clone()));
        tcp.sealed = true;
        assert_eq!(tcp.to_uri(), "wirespeed+tcp://10.0.0.1:5000?seal=aes-256-gcm");
        assert_eq!(PlaneLocation::parse(&tcp.to_uri()), Some(tcp));
    }

    #[test]
    fn foreign_and_broken_locations_are_not_ours() {
        for uri in [
            "grpc://h:1",
            "wirespeed+quic://h:1",
            "wirespeed+tcp://h:1?exp=1",
            "wirespeed+tcp://h:1?cap=zz",
            "wirespeed+tcp://h:1?exp=x&cap=00",
            "wirespeed+tcp://h:1?seal=rot13",
        ] {
            assert_eq!(PlaneLocation::parse(uri), None, "{uri}");
        }
    }

    proptest! {
        #[test]
        fn parsing_never_panics(s in "\\PC{0,80}") {
            let _ = PlaneLocation::parse(&s);
            let _ = PlaneLocation::parse(&format!("wirespeed+tcp://h:1?{s}"));
        }
    }
}
