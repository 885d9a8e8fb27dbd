//! Starting a server: the gRPC control plane on a tokio runtime of its own, and one thread
//! per data-plane listener.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use tokio::sync::oneshot;
use wirespeed::Key;

use crate::error::{Error, Result};
use crate::grpc::auth::Auth;
use crate::grpc::connections::{self, Limits};
use crate::grpc::router::Router;
use crate::grpc::server::{Advert, Service};
use crate::grpc::tls::{self, ServerTls};
use crate::plane::capability::Minter;
use crate::plane::server::{Calls, Shared, accept_loop};
use crate::service::Handler;
use wirespeed::Fabric;
use wirespeed::fabric::AddressKind;

pub struct ServerBuilder {
    handler: Arc<dyn Handler>,
    listen: String,
    key: Option<Key>,
    planes: Vec<Fabric>,
    password: Option<String>,
    password_over_plaintext: bool,
    tls: Option<ServerTls>,
    handler_threads: usize,
    limits: Limits,
}

impl ServerBuilder {
    /// `host:port` for gRPC (port 0 picks one); data planes listen on the same host.
    pub fn listen(mut self, addr: &str) -> Self {
        self.listen = addr.to_string();
        self
    }

    /// The key data-plane clients must prove they hold. Without one, only gRPC is served.
    pub fn key(mut self, key: Key) -> Self {
        self.key = Some(key);
        self
    }

    /// Which data planes to offer (default: shm, ucx where this build has it, and tcp).
    pub fn planes(mut self, planes: &[Fabric]) -> Self {
        self.planes = planes.to_vec();
        self
    }

    /// Requires Basic auth at the Flight handshake and a bearer token on every call. Without
    /// TLS, [`ServerBuilder::start`] refuses it unless [`ServerBuilder::password_over_plaintext`].
    pub fn password(mut self, password: String) -> Self {
        self.password = Some(password);
        self
    }

    /// Lets a password be asked for without TLS, where it travels readable by anyone on the path.
    pub fn password_over_plaintext(mut self) -> Self {
        self.password_over_plaintext = true;
        self
    }

    /// Serves gRPC over TLS (`grpc+tls://`), with mutual TLS when it names a client CA.
    pub fn tls(mut self, tls: ServerTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// The most threads that run handler code at once (reading files, decoding and writing
    /// uploads); calls waiting on their clients hold none.
    pub fn handler_threads(mut self, n: usize) -> Self {
        self.handler_threads = n.max(1);
        self
    }

    /// Bounds on gRPC connections and on the calls of one client.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    pub fn start(self) -> Result<Server> {
        if self.password.is_some() && self.tls.is_none() && !self.password_over_plaintext {
            return Err(Error::invalid_argument(
                "a password travels in clear without TLS: give a certificate, or allow plaintext by name",
            ));
        }
        let tls = self.tls.as_ref().map(tls::acceptor).transpose()?;
        let std_listener = TcpListener::bind(&self.listen)
            .map_err(|e| Error::unavailable(format!("cannot listen on {}: {e}", self.listen)))?;
        let local = std_listener.local_addr().map_err(|e| Error::internal(e.to_string()))?;
        let shared = Arc::new(Shared {
            handler: self.handler,
            minter: Minter::new()?,
            stop: AtomicBool::new(false),
            calls: Arc::default(),
        });

        let mut adverts = Vec::new();
        let mut threads = Vec::new();
        if let Some(key) = &self.key {
            for kind in self.planes {
                let url = match kind.address_kind() {
                    AddressKind::SocketPath => format!("{kind}://{}", shm_name()),
                    AddressKind::HostPort => format!("{kind}://{}", SocketAddr::new(local.ip(), 0)),
                };
                let listener = wirespeed::listen(&url, key, &crate::plane::config())?;
                let url = listener.url().to_string();
                let port = url.rsplit_once(':').and_then(|(_, p)| p.parse().ok()).unwrap_or(0);
                adverts.push(Advert { kind, port, url });
                let shared = shared.clone();
                threads.push(std::thread::spawn(move || accept_loop(listener, shared)));
            }
        }

        let default_host = if local.ip().is_unspecified() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { local.ip() };
        let service = Service {
            shared: shared.clone(),
            adverts: adverts.clone(),
            key: self.key.clone(),
            auth: self.password.map(Auth::new).transpose()?,
            default_host,
            grpc_port: local.port(),
            host_id: host_id(),
            tls: tls.is_some(),
            exchanges: Arc::new(tokio::sync::Semaphore::new((self.handler_threads / 2).max(1))),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("flight-grpc")
            .max_blocking_threads(self.handler_threads)
            .build()
            .map_err(|e| Error::internal(format!("cannot start the gRPC runtime: {e}")))?;
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        std_listener.set_nonblocking(true).map_err(|e| Error::internal(e.to_string()))?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(std_listener).map_err(|e| Error::internal(e.to_string()))?
        };
        let scheme = if tls.is_some() { "grpc+tls" } else { "grpc" };
        let grpc = runtime.spawn(connections::serve(
            listener,
            Router::new(service),
            self.limits,
            tls,
            shared.clone(),
            stop_rx,
        ));
        Ok(Server {
            addr: SocketAddr::new(default_host, local.port()),
            scheme,
            adverts,
            shared,
            runtime,
            stop: Some(stop_tx),
            grpc,
            threads,
        })
    }
}

/// A running server; dropping it stops it.
pub struct Server {
    addr: SocketAddr,
    scheme: &'static str,
    adverts: Vec<Advert>,
    shared: Arc<Shared>,
    runtime: tokio::runtime::Runtime,
    stop: Option<oneshot::Sender<()>>,
    grpc: tokio::task::JoinHandle<()>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    pub fn builder(handler: impl Handler) -> ServerBuilder {
        ServerBuilder {
            handler: Arc::new(handler),
            listen: "127.0.0.1:0".into(),
            key: None,
            planes: Fabric::ALL.into_iter().filter(|k| default_plane(*k)).collect(),
            password: None,
            password_over_plaintext: false,
            tls: None,
            handler_threads: 512,
            limits: Limits::default(),
        }
    }

    /// `grpc://host:port` (or `grpc+tls://`), for clients.
    pub fn url(&self) -> String {
        format!("{}://{}", self.scheme, self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The calls open and started so far, on every plane, as they change.
    pub fn calls(&self) -> Arc<Calls> {
        self.shared.calls.clone()
    }

    /// The data planes it serves, as `(kind, listener URL)`.
    pub fn planes(&self) -> Vec<(Fabric, String)> {
        self.adverts.iter().map(|a| (a.kind, a.url.clone())).collect()
    }

    /// Serves until the server is dropped (from another thread) or its runtime fails.
    pub fn wait(mut self) -> Result<()> {
        let grpc = std::mem::replace(&mut self.grpc, self.runtime.spawn(async {}));
        self.runtime.block_on(grpc).map_err(|e| Error::internal(format!("gRPC server task failed: {e}")))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Whether a server offers `kind` unless told otherwise: every plane this build has but
/// libfabric's, whose providers depend on the hardware (they are offered when asked for).
fn default_plane(kind: Fabric) -> bool {
    match kind {
        Fabric::Ucx => cfg!(feature = "ucx"),
        Fabric::Ofi(_) | Fabric::InProcess => false,
        Fabric::Shm | Fabric::Tcp => true,
    }
}

/// A fresh rendezvous name for the shm plane, in Linux's abstract socket namespace: it leaves
/// no file behind however the server ends.
fn shm_name() -> String {
    let mut nonce = [0u8; 8];
    let _ = getrandom::fill(&mut nonce);
    format!("@wirespeed-flight-{}-{:016x}", std::process::id(), u64::from_le_bytes(nonce))
}

/// Who can use this server's shared memory: the same boot of the same machine, and the same
/// network namespace (where its abstract socket lives).
pub(crate) fn host_id() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let netns = std::fs::read_link("/proc/self/ns/net").map(|p| p.display().to_string()).unwrap_or_default();
    format!("{}/{}", boot.trim(), netns.trim_start_matches("net:").trim_matches(['[', ']']))
}
