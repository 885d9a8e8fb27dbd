//! The fabrics a connection runs on, modelled once: their URL schemes, their numbers in the
//! handshake and what each can do. A new fabric is a variant here plus its backend folder
//! under `transport/`; everything above (files, Flight, the CLI) takes its set from here.

use crate::parse::ParseError;

/// What follows the handshake, and so how frames move. Declared fastest first, so sorting
/// fabrics puts the one to prefer first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Fabric {
    /// Shared-memory rings between processes on one host, set up over a unix socket.
    Shm,
    /// UCX (RDMA, CMA, shared memory or TCP, as UCX picks), introduced over a TCP socket.
    Ucx,
    /// libfabric with the named provider, introduced over a TCP socket.
    Ofi(Provider),
    /// Frames on a TCP socket.
    Tcp,
    /// Both ends in one process, joined by queues; no URL names it and no wire announces it.
    InProcess,
}

/// The libfabric providers a URL can name (`ofi+<provider>://`), fastest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Provider {
    /// Shared memory between processes on one host (single copy by CMA for large bodies).
    Shm,
    /// HPE Slingshot.
    Cxi,
    /// AWS Elastic Fabric Adapter.
    Efa,
    /// InfiniBand and RoCE through verbs, made reliable-datagram by ofi_rxm.
    Verbs,
    /// TCP sockets, made reliable-datagram by ofi_rxm.
    Tcp,
}

impl Provider {
    /// Every provider, fastest first.
    pub const ALL: [Provider; 5] = [Provider::Shm, Provider::Cxi, Provider::Efa, Provider::Verbs, Provider::Tcp];

    /// Its name in URLs: `ofi+<name>://`.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Shm => "shm",
            Provider::Cxi => "cxi",
            Provider::Efa => "efa",
            Provider::Verbs => "verbs",
            Provider::Tcp => "tcp",
        }
    }

    /// The provider (and utility provider) as libfabric names it in `fi_getinfo`.
    pub fn libfabric_name(self) -> &'static str {
        match self {
            Provider::Shm => "shm",
            Provider::Cxi => "cxi",
            Provider::Efa => "efa",
            Provider::Verbs => "verbs;ofi_rxm",
            Provider::Tcp => "tcp;ofi_rxm",
        }
    }
}

/// What a fabric can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// Reads and writes a peer's registered memory without the peer's threads taking part
    /// (RDMA, CMA); elsewhere one-sided access is emulated by messages the peer serves.
    pub native_one_sided: bool,
    /// A received body can be handed over where the fabric put it, without a copy out.
    pub zero_copy_receive: bool,
    /// Both ends must be on one host.
    pub same_host_only: bool,
}

/// How a URL of the fabric names where to meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressKind {
    /// `host:port` of a TCP listener; port 0 asks for an ephemeral one.
    HostPort,
    /// A unix socket: a path, or `@name` in Linux's abstract namespace.
    SocketPath,
}

impl Fabric {
    /// Every fabric a URL can name, fastest first: the order a client that may choose tries
    /// them in.
    pub const ALL: [Fabric; 8] = [
        Fabric::Shm,
        Fabric::Ucx,
        Fabric::Ofi(Provider::Shm),
        Fabric::Ofi(Provider::Cxi),
        Fabric::Ofi(Provider::Efa),
        Fabric::Ofi(Provider::Verbs),
        Fabric::Ofi(Provider::Tcp),
        Fabric::Tcp,
    ];

    /// The names of every fabric a URL can name, for messages: "shm, ucx, ofi+shm, ...".
    pub fn names() -> String {
        Fabric::ALL.map(Fabric::name).join(", ")
    }

    /// The URL scheme (`tcp` in `tcp://host:port`); also the fabric's name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Fabric::Shm => "shm",
            Fabric::Ucx => "ucx",
            Fabric::Ofi(Provider::Shm) => "ofi+shm",
            Fabric::Ofi(Provider::Cxi) => "ofi+cxi",
            Fabric::Ofi(Provider::Efa) => "ofi+efa",
            Fabric::Ofi(Provider::Verbs) => "ofi+verbs",
            Fabric::Ofi(Provider::Tcp) => "ofi+tcp",
            Fabric::Tcp => "tcp",
            Fabric::InProcess => "in-process",
        }
    }

    /// What the fabric can do.
    pub fn capabilities(self) -> Capabilities {
        let (native_one_sided, zero_copy_receive, same_host_only) = match self {
            // A registered region is a sealed memfd the peer maps and copies in or out of.
            Fabric::Shm => (true, true, true),
            Fabric::Ucx => (true, true, false),
            // Whether the provider has FI_RMA shows only once it is opened; without it
            // one-sided access is carried as frames.
            Fabric::Ofi(p) => (true, true, p == Provider::Shm),
            Fabric::Tcp => (false, false, false),
            Fabric::InProcess => (false, true, true),
        };
        Capabilities { native_one_sided, zero_copy_receive, same_host_only }
    }

    /// Whether this end can use the fabric where a peer on `peer_host` (its [`host_id`], if
    /// it said) offers it: anywhere, or for a same-host fabric, on this very host.
    pub fn reachable(self, peer_host: Option<&str>) -> bool {
        !self.capabilities().same_host_only || peer_host.is_some_and(|h| !h.is_empty() && h == host_id())
    }

    /// How a URL of the fabric names where to meet.
    pub fn address_kind(self) -> AddressKind {
        match self {
            Fabric::Shm => AddressKind::SocketPath,
            Fabric::Ucx | Fabric::Ofi(_) | Fabric::Tcp | Fabric::InProcess => AddressKind::HostPort,
        }
    }

    /// Its number in the handshake's Hello (PROTOCOL.md).
    pub(crate) fn wire_id(self) -> u8 {
        match self {
            Fabric::Tcp => 0,
            Fabric::Shm => 1,
            Fabric::Ucx => 2,
            Fabric::InProcess => 3,
            Fabric::Ofi(p) => 16 + p as u8,
        }
    }

    /// The fabric a peer announced; `None` for numbers no peer may send.
    pub(crate) fn from_wire_id(id: u8) -> Option<Self> {
        Fabric::ALL.into_iter().find(|f| f.wire_id() == id)
    }
}

impl std::fmt::Display for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Fabric {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        Fabric::ALL.into_iter().find(|f| f.name() == s).ok_or_else(|| ParseError::new("fabric", s, Fabric::names()))
    }
}

/// Which fabric an end may use: the fastest it can reach among those offered, or one alone
/// (then nothing else will do). Files, Flight and the CLI's `--transport` all take this.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The fastest fabric both ends can reach.
    Auto,
    /// This fabric and no other.
    Only(Fabric),
}

impl Choice {
    /// Among `offered` (each fabric with the host its offerer is on, where it said), the one to
    /// use: for `Auto` the fastest this end can reach, for `Only(f)` `f` if offered and
    /// reachable; `None` if none fits.
    pub fn pick<'a>(self, offered: impl IntoIterator<Item = (Fabric, Option<&'a str>)>) -> Option<Fabric> {
        let reachable = offered.into_iter().filter(|(f, host)| f.reachable(*host)).map(|(f, _)| f);
        match self {
            Choice::Auto => reachable.min(),
            Choice::Only(want) => reachable.into_iter().find(|&f| f == want),
        }
    }
}

impl std::str::FromStr for Choice {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        match s {
            "auto" => Ok(Choice::Auto),
            _ => s
                .parse()
                .map(Choice::Only)
                .map_err(|_| ParseError::new("transport", s, format!("auto, {}", Fabric::names()))),
        }
    }
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Choice::Auto => f.write_str("auto"),
            Choice::Only(fabric) => fabric.fmt(f),
        }
    }
}

/// This host as the same-host fabrics see it: the kernel's boot id (different on every machine
/// and every boot) and the network namespace (where shm's abstract unix socket lives). Two
/// ends with equal ids can meet over a fabric that is `same_host_only`; without /proc the id
/// is empty, and an empty id matches nothing.
pub fn host_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        let netns = std::fs::read_link("/proc/self/ns/net").map(|p| p.display().to_string()).unwrap_or_default();
        match boot.trim() {
            "" => String::new(),
            boot => format!("{boot}/{}", netns.trim_start_matches("net:").trim_matches(['[', ']'])),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_wire_ids_round_trip_and_differ() {
        for f in Fabric::ALL {
            assert_eq!(f.name().parse::<Fabric>(), Ok(f));
            assert_eq!(Fabric::from_wire_id(f.wire_id()), Some(f));
        }
        assert!("in-process".parse::<Fabric>().is_err() && "udp".parse::<Fabric>().is_err());
        assert_eq!(Fabric::from_wire_id(Fabric::InProcess.wire_id()), None);
        let mut ids: Vec<_> = Fabric::ALL.iter().map(|f| f.wire_id()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), Fabric::ALL.len());
    }

    #[test]
    fn same_host_fabrics_reach_only_this_host() {
        assert!(Fabric::Tcp.reachable(None));
        assert!(Fabric::Shm.reachable(Some(host_id())));
        assert!(!Fabric::Shm.reachable(None));
        assert!(!Fabric::Shm.reachable(Some("")));
        assert!(!Fabric::Ofi(Provider::Shm).reachable(Some("another-boot/4026531840")));
    }

    #[test]
    fn a_choice_takes_the_fastest_reachable_or_the_one_asked_for() {
        let here = Some(host_id());
        let offered = [(Fabric::Tcp, None), (Fabric::Shm, here), (Fabric::Ucx, None)];
        assert_eq!(Choice::Auto.pick(offered), Some(Fabric::Shm));
        let elsewhere = [(Fabric::Tcp, None), (Fabric::Shm, Some("another-boot/1"))];
        assert_eq!(Choice::Auto.pick(elsewhere), Some(Fabric::Tcp));
        assert_eq!(Choice::Only(Fabric::Shm).pick(elsewhere), None);
        assert_eq!(Choice::Only(Fabric::Tcp).pick(offered), Some(Fabric::Tcp));
        assert_eq!(Choice::Auto.pick([]), None);
        assert_eq!("auto".parse(), Ok(Choice::Auto));
        assert_eq!("ofi+tcp".parse(), Ok(Choice::Only(Fabric::Ofi(Provider::Tcp))));
        assert_eq!(Choice::Only(Fabric::Shm).to_string(), "shm");
        assert!("carrier-pigeon".parse::<Choice>().is_err());
    }
}
