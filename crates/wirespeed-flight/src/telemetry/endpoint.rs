//! `/metrics` over HTTP/1.1, for Prometheus to scrape: GET only, every connection bounded in
//! time (its request must arrive within [`REQUEST_TIME`]) and the whole answer built before it
//! is sent. It runs on the gRPC runtime, so a busy handler pool never holds up a scrape.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::Telemetry;

/// How long a scraper may take to send its request, and to take the answer.
const REQUEST_TIME: Duration = Duration::from_secs(10);

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `listener` until `stop` fires or is dropped.
pub(crate) async fn serve(listener: TcpListener, telemetry: Arc<Telemetry>, mut stop: oneshot::Receiver<()>) {
    loop {
        let socket = tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let telemetry = telemetry.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |r| answer(r, telemetry.clone()));
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(REQUEST_TIME)
                .keep_alive(false)
                .serve_connection(TokioIo::new(socket), service);
            let _ = tokio::time::timeout(REQUEST_TIME * 2, connection).await;
        });
    }
}

async fn answer(request: Request<Incoming>, telemetry: Arc<Telemetry>) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, kind: &str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(kind) = kind.parse() {
            response.headers_mut().insert(hyper::header::CONTENT_TYPE, kind);
        }
        Ok(response)
    };
    if request.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "text/plain", "only /metrics is served here\n".into());
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET /metrics\n".into());
    }
    let text = telemetry.metrics.encode();
    let accept = request.headers().get(hyper::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("");
    if accept.contains("application/openmetrics-text") {
        return reply(StatusCode::OK, OPENMETRICS, text);
    }
    reply(StatusCode::OK, PROMETHEUS_TEXT, classic(&text))
}

/// OpenMetrics text as Prometheus's own text format has it, for scrapers and tools that ask
/// for no OpenMetrics (curl, promtool): a counter's HELP and TYPE name its `_total` samples,
/// and there is no UNIT line and no EOF.
fn classic(openmetrics: &str) -> String {
    let mut counters = std::collections::HashSet::new();
    for line in openmetrics.lines() {
        if let Some(name) = line.strip_prefix("# TYPE ").and_then(|l| l.strip_suffix(" counter")) {
            counters.insert(name.to_string());
        }
    }
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let named = ["# HELP ", "# TYPE "].iter().find_map(|p| Some((*p, line.strip_prefix(p)?)));
        match named {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) { "_total" } else { "" };
                out.push_str(&format!("{prefix}{name}{total} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}
