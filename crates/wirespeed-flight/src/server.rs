//! Starting a server: the gRPC control plane on a tokio runtime of its own, and one thread
//! per data-plane listener.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use wirespeed::Key;

use crate::error::{Error, Result};
use crate::grpc::advertise::{Advertise, Listening};
use crate::grpc::auth::Auth;
use crate::grpc::connections::{self, Limits};
use crate::grpc::health;
use crate::grpc::held::Held;
use crate::grpc::router::Router;
use crate::grpc::service::Service;
use crate::grpc::session::Sessions;
use crate::grpc::tls::{self, ServerTls};
use crate::plane::calls::{Calls, Shared};
use crate::plane::listeners::PlaneServer;
use crate::runtime::Runtime;
use crate::telemetry::{CallObserver, CallSummary, endpoint};

/// How many threads run handler code at once unless [`ServerBuilder::handler_threads`] says:
/// the one default of the library, `wirespeed serve` and `wirespeed.flight.serve`.
pub const DEFAULT_HANDLER_THREADS: usize = 64;
use crate::handler::Handler;
use wirespeed::Fabric;

/// How a [`Server`] serves: where it listens, its key, TLS, password and limits; [`ServerBuilder::start`] starts it.
pub struct ServerBuilder {
    handler: Arc<dyn Handler>,
    listen: String,
    key: Option<Key>,
    /// None: [`default_planes`], for TLS or not.
    planes: Option<Vec<Fabric>>,
    password: Option<String>,
    password_over_plaintext: bool,
    tls: Option<ServerTls>,
    handler_threads: usize,
    limits: Limits,
    advertise: Advertise,
    metrics: Option<String>,
    observer: Option<CallObserver>,
}

impl ServerBuilder {
    /// Serves Prometheus metrics on `http://ADDR/metrics` (`host:port`, port 0 picks one).
    pub fn metrics(mut self, addr: &str) -> Self {
        self.metrics = Some(addr.to_string());
        self
    }

    /// Tells `observer` of every call as it ends, on every plane (the server's call log).
    pub fn on_call(mut self, observer: impl Fn(&CallSummary) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// `host:port` for gRPC (port 0 picks one), or `grpc+unix://PATH`, a Unix socket (as
    /// pyarrow's locations name one); data planes listen on the same host (127.0.0.1 for a
    /// Unix socket).
    pub fn listen(mut self, addr: &str) -> Self {
        self.listen = addr.to_string();
        self
    }

    /// The key data-plane clients must prove they hold. Without one, only gRPC is served.
    pub fn key(mut self, key: Key) -> Self {
        self.key = Some(key);
        self
    }

    /// Which data planes to offer (default: [`default_planes`]).
    pub fn planes(mut self, planes: &[Fabric]) -> Self {
        self.planes = Some(planes.to_vec());
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
    /// uploads); calls waiting on their clients hold none. [`DEFAULT_HANDLER_THREADS`] unless
    /// set.
    pub fn handler_threads(mut self, n: usize) -> Self {
        self.handler_threads = n.max(1);
        self
    }

    /// What endpoints that name no location are given (default: nothing); `wirespeed serve`
    /// names itself ([`Advertise::Reached`]), as Arrow's reference servers do.
    pub fn advertise(mut self, advertise: Advertise) -> Self {
        self.advertise = advertise;
        self
    }

    /// Bounds on gRPC connections and on the calls of one client.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Binds every listener and starts serving; an address in use or a bad setting is an error.
    pub fn start(self) -> Result<Server> {
        if self.password.is_some()
            && travels_in_clear(&self.listen, self.tls.is_some())
            && !self.password_over_plaintext
        {
            return Err(Error::invalid_argument(
                "a password travels in clear without TLS: give a certificate, or allow plaintext by name",
            ));
        }
        let tls = self.tls.as_ref().map(tls::acceptor).transpose()?;
        let bound = Bound::new(&self.listen, tls.is_some())?;
        let local = bound.local()?;
        let shared = Shared::new(self.handler, self.observer)?;
        let metrics = match &self.metrics {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .map_err(|e| Error::unavailable(format!("cannot serve metrics on {addr}: {e}")))?,
            ),
            None => None,
        };
        let planes = match self.key {
            Some(key) => {
                let planes = self.planes.unwrap_or_else(|| default_planes(tls.is_some()));
                Some(PlaneServer::start(shared.clone(), local.ip(), key, &planes, tls.is_some())?)
            }
            None => None,
        };
        let plane_list = planes.as_ref().map(PlaneServer::planes).unwrap_or_default();

        let default_host = if local.ip().is_unspecified() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { local.ip() };
        let service = Service {
            shared: shared.clone(),
            planes,
            auth: self.password.map(Auth::new).transpose()?,
            default_host,
            exchanges: Arc::new(tokio::sync::Semaphore::new((self.handler_threads / 2).max(1))),
            advertise: self.advertise,
            listening: match bound {
                Bound::Tcp(_) => Listening::Tcp { addr: local, tls: tls.is_some() },
                Bound::Unix(..) => Listening::Unix(self.listen.clone()),
            },
            sessions: Sessions::default(),
            held: Held::new(self.limits.response_bytes, shared.telemetry.clone()),
        };
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        let runtime = Runtime::build(builder.max_blocking_threads(self.handler_threads), "flight-grpc")?;
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let addr = matches!(bound, Bound::Tcp(_)).then(|| SocketAddr::new(default_host, local.port()));
        let url = match addr {
            Some(addr) => format!("{}://{addr}", if tls.is_some() { "grpc+tls" } else { "grpc" }),
            None => self.listen.clone(),
        };
        let (listener, unlink) = {
            let _entered = runtime.enter();
            bound.into_tokio()?
        };
        let (health, health_service) = health::service();
        runtime.block_on(health::set(&health, true));
        let (metrics_stop, metrics_addr) = match metrics {
            Some(listener) => {
                let addr = listener.local_addr().map_err(|e| Error::internal(e.to_string()))?;
                let listener = {
                    let _entered = runtime.enter();
                    listener.set_nonblocking(true).map_err(|e| Error::internal(e.to_string()))?;
                    tokio::net::TcpListener::from_std(listener).map_err(|e| Error::internal(e.to_string()))?
                };
                let (tx, rx) = oneshot::channel();
                runtime.spawn(endpoint::serve(listener, shared.telemetry.clone(), rx));
                (Some(tx), Some(addr))
            }
            None => (None, None),
        };
        let grpc = runtime.spawn(connections::serve(
            listener,
            Router::new(service, health_service),
            self.limits,
            tls,
            shared.clone(),
            stop_rx,
        ));
        Ok(Server {
            url,
            addr,
            unlink,
            planes: plane_list,
            shared,
            runtime,
            stop: Some(stop_tx),
            grpc,
            health,
            metrics_addr,
            _metrics_stop: metrics_stop,
        })
    }
}

/// Whether what a client sends to a server listening at `listen` (with TLS or not) travels in
/// clear: the one rule for where a password may go. A Unix socket's bytes never leave the host.
pub fn travels_in_clear(listen: &str, tls: bool) -> bool {
    !tls && unix_path(listen).is_none()
}

/// What removes a Unix socket's file once its server stops.
type Unlink = Box<dyn FnOnce() + Send + Sync>;

/// The socket a `grpc+unix://PATH` location names.
fn unix_path(listen: &str) -> Option<&Path> {
    listen.strip_prefix("grpc+unix://").map(Path::new)
}

/// Where gRPC listens, bound before anything else starts.
enum Bound {
    Tcp(TcpListener),
    /// The socket, and what removes its file.
    Unix(UnixListener, Unlink),
}

impl Bound {
    fn new(listen: &str, tls: bool) -> Result<Bound> {
        let cannot = |e: &dyn std::fmt::Display| Error::unavailable(format!("cannot listen on {listen}: {e}"));
        let Some(path) = unix_path(listen) else {
            return TcpListener::bind(listen).map(Bound::Tcp).map_err(|e| cannot(&e));
        };
        if tls {
            return Err(Error::invalid_argument("a Unix socket is served without TLS: it never leaves this host"));
        }
        let (listener, unlink) = wirespeed::transport::shm::bind_socket(path).map_err(|e| cannot(&e))?;
        Ok(Bound::Unix(listener, unlink))
    }

    /// The address data planes listen on, beside gRPC: loopback beside a Unix socket.
    fn local(&self) -> Result<SocketAddr> {
        match self {
            Bound::Tcp(l) => l.local_addr().map_err(|e| Error::internal(e.to_string())),
            Bound::Unix(..) => Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)),
        }
    }

    /// The listener for the gRPC runtime (entered), and what removes a socket's file.
    fn into_tokio(self) -> Result<(connections::Listener, Option<Unlink>)> {
        let internal = |e: std::io::Error| Error::internal(e.to_string());
        Ok(match self {
            Bound::Tcp(l) => {
                l.set_nonblocking(true).map_err(internal)?;
                (connections::Listener::Tcp(tokio::net::TcpListener::from_std(l).map_err(internal)?), None)
            }
            Bound::Unix(l, unlink) => {
                l.set_nonblocking(true).map_err(internal)?;
                (connections::Listener::Unix(tokio::net::UnixListener::from_std(l).map_err(internal)?), Some(unlink))
            }
        })
    }
}

/// A running server; dropping it stops it.
///
/// Its API blocks, and may be called from anywhere, an async program's tasks included (the
/// wait then moves off the runtime's worker; `spawn_blocking` spares that worker):
///
/// ```
/// use wirespeed_flight::{Client, Error, FlightDescriptor, FlightInfo, Handler, Output, Result, Server};
///
/// struct Empty;
///
/// impl Handler for Empty {
///     fn get_flight_info(&self, _: &FlightDescriptor) -> Result<FlightInfo> {
///         Err(Error::not_found("nothing here"))
///     }
///
///     fn do_get(&self, _: &[u8]) -> Result<Output> {
///         Err(Error::not_found("nothing here"))
///     }
/// }
///
/// #[tokio::main]
/// async fn main() -> Result<()> {
///     let server = Server::builder(Empty).listen("127.0.0.1:0").start()?;
///     let url = server.url();
///     let flights = tokio::task::spawn_blocking(move || Client::connect(&url)?.list_flights(b""))
///         .await
///         .expect("the task ran")?;
///     assert!(flights.is_empty());
///     // Straight from the task works too: no runtime-inside-a-runtime panic.
///     let err = Client::connect(&server.url())?.get_flight_info(&FlightDescriptor::new_cmd("x")).unwrap_err();
///     assert_eq!(err.code(), wirespeed_flight::Code::NotFound);
///     Ok(())
/// }
/// ```
pub struct Server {
    url: String,
    /// The TCP address, unless it serves a Unix socket.
    addr: Option<SocketAddr>,
    unlink: Option<Unlink>,
    planes: Vec<(Fabric, String)>,
    shared: Arc<Shared>,
    runtime: Runtime,
    stop: Option<oneshot::Sender<()>>,
    grpc: tokio::task::JoinHandle<()>,
    health: tonic_health::server::HealthReporter,
    metrics_addr: Option<SocketAddr>,
    /// Dropped with the server, which ends the metrics endpoint.
    _metrics_stop: Option<oneshot::Sender<()>>,
}

impl Server {
    /// A builder for a server of `handler`, on `127.0.0.1:0` unless told otherwise.
    pub fn builder(handler: impl Handler) -> ServerBuilder {
        ServerBuilder {
            handler: Arc::new(handler),
            listen: "127.0.0.1:0".into(),
            key: None,
            planes: None,
            password: None,
            password_over_plaintext: false,
            tls: None,
            handler_threads: DEFAULT_HANDLER_THREADS,
            limits: Limits::default(),
            advertise: Advertise::Nothing,
            metrics: None,
            observer: None,
        }
    }

    /// Where the metrics are served (`http://ADDR/metrics`), if they are.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Drains, then stops: health turns NOT_SERVING and new calls are refused (UNAVAILABLE) on
    /// every plane, while the calls open may finish within `deadline`; past it they are
    /// cancelled (an upload cut short leaves nothing); `Duration::MAX` waits for them all.
    /// Returns how many were cancelled.
    pub fn shutdown(mut self, deadline: Duration) -> usize {
        self.shared.draining.store(true, Ordering::SeqCst);
        self.runtime.block_on(health::set(&self.health, false));
        let calls = self.shared.calls.clone();
        wait_until(deadline, || calls.open() == 0);
        let cancelled = calls.open();
        self.stop_now();
        // The cancelled calls end on their own threads within a poll, and gRPC connections
        // send what they hold of calls that ended, then close. Waiting for both lets a cut
        // upload remove its part file, and the end of a finished stream reach its client,
        // before the process exits.
        let metrics = &self.shared.telemetry.metrics;
        wait_until(WIND_DOWN, || calls.open() == 0 && metrics.open_connections("grpc") == 0);
        cancelled
    }

    /// Stops serving at once: the gRPC task and its connections end with the runtime, the
    /// data planes' connections close within their poll.
    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(unlink) = self.unlink.take() {
            unlink();
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        self.grpc.abort();
    }

    /// `grpc://host:port` (or `grpc+tls://`, or `grpc+unix://PATH`), for clients.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The TCP address; None for a server on a Unix socket.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// The calls open and started so far, on every plane, as they change.
    pub fn calls(&self) -> Arc<Calls> {
        self.shared.calls.clone()
    }

    /// The data planes it serves, as `(kind, listener URL)`.
    pub fn planes(&self) -> Vec<(Fabric, String)> {
        self.planes.clone()
    }

    /// Serves for good: returns only if the gRPC server fails. To stop serving, keep the
    /// `Server` instead and drop it.
    pub fn wait(mut self) -> Result<()> {
        let grpc = std::mem::replace(&mut self.grpc, self.runtime.spawn(async {}));
        self.runtime.block_on(grpc).map_err(|e| Error::internal(format!("gRPC server task failed: {e}")))
    }
}

/// Returns once `done`, or once `at_most` has passed.
fn wait_until(at_most: Duration, done: impl Fn() -> bool) {
    let until = Instant::now().checked_add(at_most);
    while !done() && until.is_none_or(|until| Instant::now() < until) {
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// How long [`Server::shutdown`] waits for the calls it cancelled to end and for gRPC
/// connections to close.
const WIND_DOWN: Duration = Duration::from_secs(2);

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// The planes a server offers unless told otherwise. Under TLS not ucx: RDMA carries data
/// between hosts unencrypted, where the tcp plane's calls are sealed (shm stays on the host).
pub fn default_planes(tls: bool) -> Vec<Fabric> {
    Fabric::ALL.into_iter().filter(|&k| default_plane(k) && !(tls && k == Fabric::Ucx)).collect()
}

/// Whether a server offers `kind` unless told otherwise: every plane this build has but
/// libfabric's, whose providers depend on the hardware (they are offered when asked for).
fn default_plane(kind: Fabric) -> bool {
    matches!(kind, Fabric::Shm | Fabric::Tcp) || (kind == Fabric::Ucx && cfg!(feature = "ucx"))
}
