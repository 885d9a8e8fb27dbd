//! The gRPC port's connections, served by our own accept loop over hyper's HTTP/2 server so that
//! each one is bounded: a socket that has not sent HTTP/2's preface within `start` is closed; a
//! connection with no call open for `idle` is sent GOAWAY; keep-alive pings find peers that died
//! or went silent; no client address holds more than `calls_per_client` calls at once; and
//! request messages together hold at most `request_bytes`.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{oneshot, watch};
use tokio::time::Sleep;
use tokio_rustls::TlsAcceptor;
use tonic::Status;
use tonic::codegen::{BoxFuture, Service, http};
use tonic::transport::server::TcpConnectInfo;

use super::budget::{Budget, Budgeted};
use super::router::Router;
use super::{CONNECTION_WINDOW, MAX_FRAME, STREAM_WINDOW};
use crate::plane::calls::{OpenCall, Shared};
use crate::telemetry::metrics::Refusal;
use crate::telemetry::{CallRecord, method_of};
use wirespeed::sync::Unpoison;

/// Bounds on what one connection or client may hold.
#[derive(Clone, Debug)]
pub struct Limits {
    /// A new connection must send HTTP/2's preface within this.
    pub start: Duration,
    /// A connection with no call open this long is asked to close (GOAWAY).
    pub idle: Duration,
    /// How often an established connection is pinged; an unanswered ping closes it.
    pub keepalive: Duration,
    /// Calls open at once on one connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS).
    pub streams_per_connection: u32,
    /// Calls open at once from one client address, over all its connections.
    pub calls_per_client: usize,
    /// Bytes of request messages held at once, over every call; at least one largest message
    /// (1 GiB) for every upload to be possible.
    pub request_bytes: usize,
    /// Bytes of responses held for readers at once, over every call; past it, the calls whose
    /// readers have waited longest are cancelled.
    pub response_bytes: usize,
    /// How long a request message may wait for room under `request_bytes`, and how long its
    /// sender may pause in the middle of it, before its call fails.
    pub message_stall: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            start: Duration::from_secs(10),
            idle: Duration::from_secs(300),
            keepalive: Duration::from_secs(30),
            streams_per_connection: 128,
            calls_per_client: 512,
            request_bytes: 2 << 30,
            response_bytes: 1 << 30,
            message_stall: Duration::from_secs(30),
        }
    }
}

/// The client connection preface every HTTP/2 connection starts with.
const PREFACE_LEN: usize = 24;
/// The largest header block HTTP/2 takes in (hyper's default is 16 MiB); a block over
/// [`super::MAX_METADATA`] is then refused as gRPC refuses it, not as HTTP/2 does (431, which
/// clients report as an unknown error).
const MAX_HEADER_LIST: u32 = 256 << 10;

/// Where gRPC connections come from.
pub(crate) enum Listener {
    Tcp(TcpListener),
    /// `grpc+unix://`: every client counts as one from loopback.
    Unix(UnixListener),
}

impl Listener {
    async fn accept(&self) -> io::Result<(Box<dyn Io>, TcpConnectInfo)> {
        match self {
            Listener::Tcp(l) => {
                let (socket, remote) = l.accept().await?;
                // Without it every small gRPC reply waits out the peer's delayed ACK (40 ms).
                let _ = socket.set_nodelay(true);
                let info = TcpConnectInfo { local_addr: socket.local_addr().ok(), remote_addr: Some(remote) };
                Ok((Box::new(socket), info))
            }
            Listener::Unix(l) => {
                let (socket, _) = l.accept().await?;
                let loopback = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0);
                Ok((Box::new(socket), TcpConnectInfo { local_addr: None, remote_addr: Some(loopback) }))
            }
        }
    }
}

/// Accepts and serves connections until `stop` fires; with `tls`, each one's handshake must
/// end within `limits.start` before HTTP/2's preface gets the same time again.
pub(crate) async fn serve(
    listener: Listener,
    router: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    shared: Arc<Shared>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2
        .timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_concurrent_streams(limits.streams_per_connection)
        .keep_alive_interval(limits.keepalive)
        .keep_alive_timeout(limits.keepalive);
    let clients = Arc::new(Clients::default());
    // Dropped with this loop at stop: each connection then says goodbye and sends what it
    // holds, so the last bytes of calls that ended reach their clients.
    let (_closing, closed) = watch::channel(());
    let budget =
        Budget::new(limits.request_bytes, limits.message_stall, shared.telemetry.metrics.request_bytes.clone());
    loop {
        let (socket, info) = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(_) => {
                    // Out of descriptors and the like: let connections close, then go on.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (active, idle) = watch::channel(0usize);
        let calls = Calls {
            router: router.clone(),
            info,
            active: Arc::new(active),
            clients: clients.clone(),
            limit: limits.calls_per_client,
            shared: shared.clone(),
            budget: budget.clone(),
        };
        let (http2, tls, limits, mut closed) = (http2.clone(), tls.clone(), limits.clone(), closed.clone());
        let telemetry = shared.telemetry.clone();
        tokio::spawn(async move {
            let _open = telemetry.metrics.connection("grpc");
            let io: Box<dyn Io> = match tls {
                None => socket,
                Some(tls) => match tokio::time::timeout(limits.start, tls.accept(socket)).await {
                    Ok(Ok(socket)) => Box::new(socket),
                    // A failed or slow handshake: the peer learns it from the TLS alert or the close.
                    _ => return telemetry.metrics.refused_connection(Refusal::TlsHandshake),
                },
            };
            let io = TokioIo::new(StartDeadline::new(io, limits.start));
            let connection = http2.serve_connection(io, TowerToHyperService::new(calls));
            serve_connection(connection, idle, limits.idle, &mut closed).await
        });
    }
}

/// A connection's byte stream: a TCP or Unix socket, or TLS over a TCP one.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type Connection = hyper::server::conn::http2::Connection<
    TokioIo<StartDeadline<Box<dyn Io>>>,
    TowerToHyperService<Calls>,
    TokioExecutor,
>;

/// How long a connection asked to close may take to do so (HTTP/2 waits for the peer's answer
/// to a ping first) before it is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Drives one connection to its end, asking it to close once idle or once the server stops.
async fn serve_connection(
    connection: Connection,
    mut active: watch::Receiver<usize>,
    idle: Duration,
    closed: &mut watch::Receiver<()>,
) {
    tokio::pin!(connection);
    closed.mark_unchanged();
    tokio::select! {
        _ = &mut connection => return,
        _ = idle_for(&mut active, idle) => connection.as_mut().graceful_shutdown(),
        _ = closed.changed() => connection.as_mut().graceful_shutdown(),
    }
    // Idle, or the server stops (its calls ended or cancelled): nothing is lost if the peer
    // does not finish the goodbye in time.
    let _ = tokio::time::timeout(CLOSE_GRACE, connection).await;
}

/// Returns once no call has been open for `after`.
async fn idle_for(active: &mut watch::Receiver<usize>, after: Duration) {
    loop {
        if active.wait_for(|n| *n == 0).await.is_err() {
            return std::future::pending().await;
        }
        if tokio::time::timeout(after, active.changed()).await.is_err() {
            return;
        }
    }
}

/// The router, for one connection: counts its calls and its client's.
#[derive(Clone)]
struct Calls {
    router: Router,
    info: TcpConnectInfo,
    active: Arc<watch::Sender<usize>>,
    clients: Arc<Clients>,
    limit: usize,
    shared: Arc<Shared>,
    budget: Arc<Budget>,
}

impl Service<http::Request<Incoming>> for Calls {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(self.info.clone());
        let ip = self.info.remote_addr.map(|a| a.ip());
        let peer = self.info.remote_addr.map_or_else(|| "-".to_string(), |a| a.to_string());
        let method = method_of(request.uri().path());
        // A probe is not logged, nor does it count as a call that draining waits for.
        let record = (method != "Health").then(|| self.shared.telemetry.start(method, "grpc", peer));
        let Some(client) = ip.and_then(|ip| self.clients.enter(ip, self.limit)) else {
            self.shared.telemetry.metrics.refused_call(Refusal::CallsPerClient);
            let status = Status::resource_exhausted(format!(
                "too many calls open from {} (at most {})",
                ip.map_or("this client".into(), |ip| ip.to_string()),
                self.limit
            ));
            record.inspect(|r| r.ended(status.code(), status.message()));
            return Box::pin(async move { Ok(status.into_http()) });
        };
        self.active.send_modify(|n| *n += 1);
        let call = record.is_some().then(|| OpenCall::new(&self.shared));
        let open = Open { _client: client, _call: call, active: self.active.clone() };
        if let Some(r) = &record {
            request.extensions_mut().insert(r.clone());
        }
        let counted = record.clone();
        let response = self.router.call(request.map(|body| Budgeted::new(body, self.budget.clone(), counted)));
        Box::pin(async move {
            let response = response.await?;
            if let Some(r) = &record {
                note_status(r, response.headers());
            }
            Ok(response.map(|body| tonic::body::Body::new(Tracked { body, record, _open: open })))
        })
    }
}

/// How many calls each client address has open.
#[derive(Default)]
struct Clients {
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl Clients {
    fn enter(self: &Arc<Self>, ip: IpAddr, limit: usize) -> Option<ClientCall> {
        let mut open = self.open.lock().unpoison();
        let n = open.entry(ip).or_default();
        if *n >= limit {
            return None;
        }
        *n += 1;
        Some(ClientCall { clients: self.clone(), ip })
    }
}

struct ClientCall {
    clients: Arc<Clients>,
    ip: IpAddr,
}

impl Drop for ClientCall {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unpoison();
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// A call counted as open until its response ends or is dropped.
struct Open {
    _client: ClientCall,
    _call: Option<OpenCall>,
    active: Arc<watch::Sender<usize>>,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.active.send_modify(|n| *n -= 1);
    }
}

/// A response body that keeps its call counted, and records what it sends and how it ends.
struct Tracked {
    body: tonic::body::Body,
    record: Option<Arc<CallRecord>>,
    _open: Open,
}

/// The gRPC status in `headers` (a response's trailers, or its headers when it has no body),
/// as tonic reads it (the message percent-decoded).
fn note_status(record: &CallRecord, headers: &http::HeaderMap) {
    if let Some(status) = Status::from_header_map(headers) {
        record.ended(status.code(), status.message());
    }
}

impl Body for Tracked {
    type Data = bytes::Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(record)) = (&polled, &self.record) {
            if let Some(data) = frame.data_ref() {
                record.sent(data.len() as u64);
            } else if let Some(trailers) = frame.trailers_ref() {
                note_status(record, trailers);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A socket whose reads fail once `start` has passed without HTTP/2's preface.
struct StartDeadline<S> {
    inner: S,
    deadline: Option<Pin<Box<Sleep>>>,
    read: usize,
}

impl<S> StartDeadline<S> {
    fn new(inner: S, start: Duration) -> Self {
        StartDeadline { inner, deadline: Some(Box::pin(tokio::time::sleep(start))), read: 0 }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StartDeadline<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if let Some(deadline) = &mut self.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "no HTTP/2 preface in time")));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            self.read += buf.filled().len() - before;
            if self.read >= PREFACE_LEN {
                self.deadline = None;
            }
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StartDeadline<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
