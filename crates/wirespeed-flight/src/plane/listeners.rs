//! A server's data planes: a listener and accept thread per plane, the locations that lead a
//! client to one for a call (each with a capability for that call), and the answer to a
//! client's hello. The gRPC service uses it, and so does any other Flight server that serves
//! data planes beside its own gRPC (pyarrow's, in `wirespeed.flight`).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use wirespeed::fabric::AddressKind;
use wirespeed::{Fabric, Key};

use super::calls::{Calls, Shared, accept_loop};
use super::capability::Grant;
use super::proto::Method;
use crate::discovery;
use crate::error::Result;
use crate::handler::Handler;
use crate::location::PlaneLocation;

/// A data-plane listener as advertised.
#[derive(Clone, Debug)]
struct Advert {
    kind: Fabric,
    /// For host:port planes, the port (the host is the one the client reached us at); for
    /// socket paths, the URL.
    port: u16,
    url: String,
    /// Its calls' messages are sealed.
    sealed: bool,
}

/// A server's data planes (see the module's docs): what the gRPC service, or a Flight server of someone else's, serves them with.
pub struct PlaneServer {
    shared: Arc<Shared>,
    adverts: Vec<Advert>,
    key: Key,
    threads: Vec<JoinHandle<()>>,
}

impl PlaneServer {
    /// Listens on each of `planes` (host:port ones on `host`) for calls to `handler`. With
    /// `seal_tcp` (a server under TLS), calls on the tcp plane are sealed, as its bytes cross
    /// hosts; shm stays on one host, and ucx and ofi (RDMA) go unsealed, named by the operator.
    pub fn serve(handler: Arc<dyn Handler>, host: IpAddr, key: Key, planes: &[Fabric], seal_tcp: bool) -> Result<Self> {
        Self::start(Shared::new(handler, None)?, host, key, planes, seal_tcp)
    }

    pub(crate) fn start(
        shared: Arc<Shared>,
        host: IpAddr,
        key: Key,
        planes: &[Fabric],
        seal_tcp: bool,
    ) -> Result<Self> {
        let mut adverts = Vec::new();
        let mut threads = Vec::new();
        for &kind in planes {
            let url = match kind.address_kind() {
                AddressKind::SocketPath => format!("{kind}://{}", shm_name()),
                AddressKind::HostPort => format!("{kind}://{}", SocketAddr::new(host, 0)),
            };
            let listener = wirespeed::listen(&url, &key, &super::config())?;
            let url = listener.url().to_string();
            let port = url.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or(0);
            let sealed = seal_tcp && kind == Fabric::Tcp;
            adverts.push(Advert { kind, port, url, sealed });
            let shared = shared.clone();
            threads.push(std::thread::spawn(move || accept_loop(listener, shared, kind, sealed)));
        }
        Ok(PlaneServer { shared, adverts, key, threads })
    }

    /// The calls open and started so far on the data planes.
    pub fn calls(&self) -> Arc<Calls> {
        self.shared.calls.clone()
    }

    /// Refuses new calls from now (UNAVAILABLE); those open go on.
    pub fn drain(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
    }

    /// The planes served, as `(kind, listener URL)`.
    pub fn planes(&self) -> Vec<(Fabric, String)> {
        self.adverts.iter().map(|a| (a.kind, a.url.clone())).collect()
    }

    /// Where a client that reached us at `host` from `client` (None over a Unix socket) may run
    /// one call, each location with a capability for that call alone. A plane of one host
    /// (shm) is offered only to a client on this host.
    pub fn locations(&self, host: IpAddr, client: Option<IpAddr>, method: Method, target: &[u8]) -> Vec<String> {
        self.granted_locations(host, client, method, target).1
    }

    /// As [`locations`](Self::locations), with the grant they carry: the data-plane call it
    /// opens shows it to [`Handler::for_call`](crate::Handler::for_call).
    pub fn granted_locations(
        &self,
        host: IpAddr,
        client: Option<IpAddr>,
        method: Method,
        target: &[u8],
    ) -> (Grant, Vec<String>) {
        let grant = self.shared.minter.grant(method, target);
        let here = on_this_host(host, client);
        let uris = self
            .adverts
            .iter()
            .filter(|a| here || !a.kind.capabilities().same_host_only)
            .map(|a| {
                // A socket path is the same wherever the client is; a port is on the address
                // it reached us at. A fabric of one host tells which host that is.
                let url = match a.kind.address_kind() {
                    AddressKind::SocketPath => a.url.clone(),
                    AddressKind::HostPort => format!("{}://{}", a.kind, SocketAddr::new(host, a.port)),
                };
                let host = a.kind.capabilities().same_host_only.then(|| wirespeed::fabric::host_id().to_string());
                PlaneLocation { kind: a.kind, url, host, grant: Some(grant), sealed: a.sealed }.to_uri()
            })
            .collect();
        (grant, uris)
    }

    /// The planes to name to a client whose hello proves it holds our key, as
    /// [`discovery::PLANES_HEADER`] carries them; None for anyone else.
    pub fn answer(&self, hello_value: &str) -> Option<String> {
        if self.adverts.is_empty() || !discovery::verify(&self.key, hello_value) {
            return None;
        }
        Some(self.adverts.iter().map(|a| a.kind.name()).collect::<Vec<_>>().join(","))
    }
}

/// Whether a client that reached us at `host` from `client` is on this host: over a Unix socket
/// (no address), from loopback, or from the very address it reached (a host's connection to
/// its own address). Another network namespace, on this machine or not, is another host.
fn on_this_host(host: IpAddr, client: Option<IpAddr>) -> bool {
    client.is_none_or(|c| c.to_canonical().is_loopback() || c.to_canonical() == host.to_canonical())
}

impl Drop for PlaneServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A fresh rendezvous name for the shm plane, in Linux's abstract socket namespace: it leaves
/// no file behind however the server ends.
fn shm_name() -> String {
    let mut nonce = [0u8; 8];
    let _ = getrandom::fill(&mut nonce);
    format!("@wirespeed-flight-{}-{:016x}", std::process::id(), u64::from_le_bytes(nonce))
}

#[cfg(test)]
mod tests {
    use super::on_this_host;

    #[test]
    fn only_loopback_a_unix_socket_or_our_own_address_is_this_host() {
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let ours = ip("10.1.2.2");
        assert!(on_this_host(ours, None));
        assert!(on_this_host(ip("127.0.0.1"), Some(ip("127.0.0.1"))));
        assert!(on_this_host(ours, Some(ip("::1"))));
        assert!(on_this_host(ours, Some(ours)));
        assert!(on_this_host(ours, Some(ip("::ffff:10.1.2.2"))));
        assert!(!on_this_host(ours, Some(ip("10.1.2.3"))));
        assert!(!on_this_host(ip("0.0.0.0"), Some(ip("10.1.2.3"))));
    }
}
