//! A client's gRPC channel: `grpc://` over TCP, `grpc+unix://PATH` over a Unix socket, or
//! `grpc+tls://` with TLS (see [`super::tls`]) done by our own connector, so that every TLS
//! choice (roots, identity, name, no verification) is ours to make.

use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};

use super::tls::{self, ClientTls};
use super::{CONNECTION_WINDOW, MAX_FRAME, STREAM_WINDOW};
use crate::error::{Error, Result};

const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connects to `url`; `tls` applies to `grpc+tls://` only.
pub(crate) async fn connect(url: &str, tls: &ClientTls) -> Result<Channel> {
    let (addr, secure, unix) = match url.split_once("://") {
        Some(("grpc" | "grpc+tcp", addr)) => (addr, false, None),
        Some(("grpc+tls", addr)) => (addr, true, None),
        // A Unix socket's requests name localhost, as gRPC's own clients' do.
        Some(("grpc+unix", path)) => ("localhost", false, Some(PathBuf::from(path))),
        _ => {
            return Err(Error::invalid_argument(format!(
                "{url:?}: expected grpc://host:port, grpc+tls://host:port or grpc+unix://PATH"
            )));
        }
    };
    let bad_url = |e: &dyn std::fmt::Display| Error::invalid_argument(format!("{url:?}: {e}"));
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| bad_url(&e))?
        .connect_timeout(CONNECT_TIMEOUT)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_frame_size(MAX_FRAME)
        .tcp_nodelay(true);
    let connected = if let Some(path) = unix {
        let connect = tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
        });
        endpoint.connect_with_connector(connect).await
    } else if secure {
        let host = endpoint.uri().host().unwrap_or_default().to_string();
        let (connector, name) = tls::connector(tls, &host)?;
        // Requests name the https scheme and the server's authority, as any gRPC client's do.
        let origin: Uri = format!("https://{addr}").parse().map_err(|e| bad_url(&e))?;
        let connect = tower::service_fn(move |uri: Uri| {
            let (connector, name) = (connector.clone(), name.clone());
            async move {
                let authority = uri.authority().map(|a| a.as_str().to_string()).unwrap_or_default();
                let tcp = tokio::net::TcpStream::connect(authority).await?;
                tcp.set_nodelay(true)?;
                Ok::<_, std::io::Error>(TokioIo::new(connector.connect(name, tcp).await?))
            }
        });
        endpoint.origin(origin).connect_with_connector(connect).await
    } else {
        endpoint.connect().await
    };
    connected.map_err(|e| Error::unavailable(format!("cannot reach {url}: {}", chain(&e))))
}

/// The host a `grpc://` or `grpc+tls://` URL names; loopback for `grpc+unix://`, beside
/// which a server's data planes listen.
pub(crate) fn host(url: &str) -> Option<String> {
    if url.starts_with("grpc+unix://") {
        return Some("127.0.0.1".into());
    }
    let uri: Uri = format!("http://{}", url.split_once("://")?.1).parse().ok()?;
    Some(uri.host()?.trim_matches(['[', ']']).to_string())
}

/// An error with its sources, which name what failed (a refused connection, an unknown CA).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        // Wrappers often repeat their source's words.
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
