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
use crate::grpc::router::Router;
use crate::grpc::server::{Advert, Service};
use crate::grpc::{CONNECTION_WINDOW, MAX_FRAME, STREAM_WINDOW};
use crate::location::PlaneKind;
use crate::plane::capability::Minter;
use crate::plane::server::{Shared, accept_loop};
use crate::service::Handler;

pub struct ServerBuilder {
    handler: Arc<dyn Handler>,
    listen: String,
    key: Option<Key>,
    planes: Vec<PlaneKind>,
    password: Option<String>,
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

    /// Which data planes to offer (default: all this build has).
    pub fn planes(mut self, planes: &[PlaneKind]) -> Self {
        self.planes = planes.to_vec();
        self
    }

    /// Requires Basic auth at the Flight handshake and a bearer token on every call.
    pub fn password(mut self, password: String) -> Self {
        self.password = Some(password);
        self
    }

    pub fn start(self) -> Result<Server> {
        let std_listener = TcpListener::bind(&self.listen)
            .map_err(|e| Error::unavailable(format!("cannot listen on {}: {e}", self.listen)))?;
        let local = std_listener.local_addr().map_err(|e| Error::internal(e.to_string()))?;
        let shared = Arc::new(Shared { handler: self.handler, minter: Minter::new()?, stop: AtomicBool::new(false) });

        let mut adverts = Vec::new();
        let mut threads = Vec::new();
        if let Some(key) = &self.key {
            for kind in self.planes {
                let url = match kind {
                    PlaneKind::Shm => format!("shm://{}", shm_path().display()),
                    kind => format!("{}://{}", kind.scheme(), SocketAddr::new(local.ip(), 0)),
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
            auth: self.password.map(Auth::new).transpose()?,
            default_host,
            grpc_port: local.port(),
            host_id: host_id(),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("flight-grpc")
            .build()
            .map_err(|e| Error::internal(format!("cannot start the gRPC runtime: {e}")))?;
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        std_listener.set_nonblocking(true).map_err(|e| Error::internal(e.to_string()))?;
        let grpc = runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener)?;
            // The builder's tcp_nodelay applies only to listeners tonic binds itself; without it
            // every small gRPC reply waits out the peer's delayed ACK (40 ms).
            let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            tonic::transport::Server::builder()
                .initial_stream_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .max_frame_size(MAX_FRAME)
                .add_service(Router::new(service))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = stop_rx.await;
                })
                .await
                .map_err(std::io::Error::other)
        });
        Ok(Server {
            addr: SocketAddr::new(default_host, local.port()),
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
    adverts: Vec<Advert>,
    shared: Arc<Shared>,
    runtime: tokio::runtime::Runtime,
    stop: Option<oneshot::Sender<()>>,
    grpc: tokio::task::JoinHandle<std::io::Result<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl Server {
    pub fn builder(handler: impl Handler) -> ServerBuilder {
        ServerBuilder {
            handler: Arc::new(handler),
            listen: "127.0.0.1:0".into(),
            key: None,
            planes: PlaneKind::ALL.into_iter().filter(|k| *k != PlaneKind::Ucx || cfg!(feature = "ucx")).collect(),
            password: None,
        }
    }

    /// `grpc://host:port`, for clients.
    pub fn url(&self) -> String {
        format!("grpc://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The data planes it serves, as `(kind, listener URL)`.
    pub fn planes(&self) -> Vec<(PlaneKind, String)> {
        self.adverts.iter().map(|a| (a.kind, a.url.clone())).collect()
    }

    /// Serves until the gRPC server fails (it does not stop by itself).
    pub fn wait(mut self) -> Result<()> {
        let grpc = std::mem::replace(&mut self.grpc, self.runtime.spawn(async { Ok(()) }));
        let result = self.runtime.block_on(grpc);
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::unavailable(format!("gRPC server failed: {e}"))),
            Err(e) => Err(Error::internal(format!("gRPC server task failed: {e}"))),
        }
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

/// A fresh rendezvous socket path for the shm plane.
fn shm_path() -> std::path::PathBuf {
    let dir = std::env::var_os("XDG_RUNTIME_DIR").map(Into::into).unwrap_or_else(std::env::temp_dir);
    let mut nonce = [0u8; 8];
    let _ = getrandom::fill(&mut nonce);
    dir.join(format!("wirespeed-flight-{}-{:016x}.sock", std::process::id(), u64::from_le_bytes(nonce)))
}

/// This machine's boot id: clients with the same one can use shared memory.
pub(crate) fn host_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id").map(|s| s.trim().to_string()).unwrap_or_default()
}
