//! Where metrics go, named as FLESnet names its monitor sinks (`-m`), plus Prometheus:
//!
//! - `file:PATH` (`file:cout`, `file:cerr`): line protocol, a line a point;
//! - `influx1:HOST:PORT:DB`: InfluxDB 1's `/write`;
//! - `influx2:HOST:[PORT]:[BUCKET]:[TOKEN]`: InfluxDB 2's `/api/v2/write?org=CBM`, the token
//!   from `CBM_INFLUX_TOKEN` when not given (as FLESnet takes it);
//! - `prometheus:[HOST:]PORT`: a `/metrics` endpoint with each series' newest value.
//!
//! HTTP goes to loopback hosts in clear and to any other over TLS, so that a token never
//! travels in clear.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::point::{Point, prometheus_text};
use crate::error::{FlesError, Result};

/// How often queued points go out, and how long a write may take.
const FLUSH_EVERY: Duration = Duration::from_secs(1);
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// Points kept while a database is unreachable; older ones are dropped.
const MAX_QUEUED: usize = 100_000;

/// Where metrics go, as FLESnet's `-m` names a sink (see the module's docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkSpec {
    /// Line protocol into a file (`cout`, `cerr` for the standard streams).
    File(String),
    /// InfluxDB 1's `/write`.
    Influx1 {
        /// The server's host.
        host: String,
        /// Its port.
        port: u16,
        /// The database.
        db: String,
    },
    /// InfluxDB 2's `/api/v2/write`.
    Influx2 {
        /// The server's host.
        host: String,
        /// Its port.
        port: u16,
        /// The bucket.
        bucket: String,
        /// The API token (as given, or from `CBM_INFLUX_TOKEN`, as FLESnet takes it).
        token: String,
    },
    /// A Prometheus `/metrics` endpoint at `[HOST:]PORT`.
    Prometheus(String),
}

impl std::str::FromStr for SinkSpec {
    type Err = FlesError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why: &str| FlesError::Config(format!("monitor sink {s:?}: {why}"));
        let (kind, rest) = s.split_once(':').ok_or_else(|| bad("expected KIND:WHERE"))?;
        let port = |p: &str, default: u16| -> Result<u16> {
            if p.is_empty() { Ok(default) } else { p.parse().map_err(|_| bad("a port is a number")) }
        };
        match kind {
            "file" if !rest.is_empty() => Ok(SinkSpec::File(rest.into())),
            "influx1" => match rest.split(':').collect::<Vec<_>>().as_slice() {
                [host, p, db] if !host.is_empty() && !db.is_empty() => {
                    Ok(SinkSpec::Influx1 { host: host.to_string(), port: port(p, 8086)?, db: db.to_string() })
                }
                _ => Err(bad("expected influx1:HOST:PORT:DB")),
            },
            "influx2" => match rest.splitn(4, ':').collect::<Vec<_>>().as_slice() {
                [host, p, bucket, token] if !host.is_empty() => {
                    let token = match token {
                        t if !t.is_empty() => t.to_string(),
                        _ => std::env::var("CBM_INFLUX_TOKEN")
                            .map_err(|_| bad("no token given and CBM_INFLUX_TOKEN is not set"))?,
                    };
                    let bucket = if bucket.is_empty() { "cbm" } else { bucket };
                    Ok(SinkSpec::Influx2 { host: host.to_string(), port: port(p, 8086)?, bucket: bucket.into(), token })
                }
                _ => Err(bad("expected influx2:HOST:[PORT]:[BUCKET]:[TOKEN]")),
            },
            "prometheus" if !rest.is_empty() => {
                let (host, p) = rest.rsplit_once(':').unwrap_or(("0.0.0.0", rest));
                Ok(SinkSpec::Prometheus(format!("{host}:{}", port(p, 9464)?)))
            }
            _ => Err(bad("expected file:, influx1:, influx2: or prometheus:")),
        }
    }
}

impl SinkSpec {
    /// The sink for one of several processes on a host: a Prometheus endpoint at the port
    /// plus `rank` (the others as they are).
    pub fn for_rank(&self, rank: usize) -> SinkSpec {
        match self {
            SinkSpec::Prometheus(addr) => {
                let (host, port) = addr.rsplit_once(':').expect("HOST:PORT");
                let port = port.parse::<usize>().map_or(0, |p| p + rank);
                SinkSpec::Prometheus(format!("{host}:{port}"))
            }
            other => other.clone(),
        }
    }
}

/// Sends points to the sinks from a thread of its own, so that a slow or absent database
/// never holds up a node. Cheap to clone; [`close`](Self::close) sends what is left.
#[derive(Clone)]
pub struct Monitor {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Mutex<Option<Sender<Vec<Point>>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    host: String,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Monitor")
    }
}

impl Monitor {
    /// Opens the sinks (a Prometheus endpoint listens from now on).
    pub fn open(specs: &[SinkSpec]) -> Result<Monitor> {
        let sinks = specs.iter().map(Sink::open).collect::<Result<Vec<_>>>()?;
        Monitor::start(sinks)
    }

    /// Points as lines `metrics LINE` on standard output, for the process that started this
    /// one to pass on ([`Point::from_line`] reads them).
    pub fn to_parent() -> Result<Monitor> {
        Monitor::start(vec![Sink::Parent])
    }

    fn start(sinks: Vec<Sink>) -> Result<Monitor> {
        let (queue, points) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("fles-monitor".into())
            .spawn(move || forward(points, sinks))
            .map_err(|e| FlesError::Config(format!("starting the monitor: {e}")))?;
        let host = nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_default();
        let inner = Inner { queue: Mutex::new(Some(queue)), thread: Mutex::new(Some(thread)), host };
        Ok(Monitor { inner: Arc::new(inner) })
    }

    /// This host's name, the tag FLESnet puts on every point.
    pub fn host(&self) -> &str {
        &self.inner.host
    }

    /// Hands `points` to the sink's thread; a full queue drops them rather than wait.
    pub fn record(&self, points: Vec<Point>) {
        if let Some(q) = &*lock(&self.inner.queue) {
            let _ = q.send(points);
        }
    }

    /// Sends the points still queued (one last try each) and stops; later points are dropped.
    pub fn close(&self) {
        drop(lock(&self.inner.queue).take());
        if let Some(t) = lock(&self.inner.thread).take() {
            let _ = t.join();
        }
    }
}

enum Sink {
    File(Box<dyn Write + Send>),
    Parent,
    Http { url: String, auth: Option<String>, agent: ureq::Agent },
    Prometheus(Arc<Mutex<BTreeMap<String, Point>>>),
}

impl Sink {
    fn open(spec: &SinkSpec) -> Result<Sink> {
        let http = |host: &str, port: u16, path: String, auth: Option<String>| {
            let loopback = matches!(host, "localhost" | "127.0.0.1" | "::1" | "[::1]");
            let scheme = if loopback { "http" } else { "https" };
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .timeout_global(Some(HTTP_TIMEOUT))
                .http_status_as_error(false)
                .build()
                .into();
            Sink::Http { url: format!("{scheme}://{host}:{port}{path}"), auth, agent }
        };
        Ok(match spec {
            SinkSpec::File(name) => Sink::File(match name.as_str() {
                "cout" => Box::new(std::io::stdout()),
                "cerr" => Box::new(std::io::stderr()),
                path => Box::new(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .map_err(|e| FlesError::Config(format!("monitor file {path}: {e}")))?,
                ),
            }),
            SinkSpec::Influx1 { host, port, db } => http(host, *port, format!("/write?db={db}&precision=ns"), None),
            SinkSpec::Influx2 { host, port, bucket, token } => http(
                host,
                *port,
                format!("/api/v2/write?org=CBM&bucket={bucket}&precision=ns"),
                Some(format!("Token {token}")),
            ),
            SinkSpec::Prometheus(addr) => {
                let server = tiny_http::Server::http(addr.as_str())
                    .map_err(|e| FlesError::Config(format!("serving metrics on {addr}: {e}")))?;
                let newest = Arc::new(Mutex::new(BTreeMap::new()));
                let shown = newest.clone();
                std::thread::Builder::new()
                    .name("fles-metrics".into())
                    .spawn(move || serve(server, shown))
                    .map_err(|e| FlesError::Config(format!("starting the metrics endpoint: {e}")))?;
                Sink::Prometheus(newest)
            }
        })
    }

    /// Writes `points`; a failure is said once per flush and the points are kept for the next.
    fn write(&mut self, points: &[Point]) -> std::result::Result<(), String> {
        let lines = |prefix: &str| -> String { points.iter().map(|p| format!("{prefix}{}\n", p.to_line())).collect() };
        match self {
            Sink::File(out) => {
                out.write_all(lines("").as_bytes()).and_then(|()| out.flush()).map_err(|e| e.to_string())
            }
            Sink::Parent => {
                let mut out = std::io::stdout().lock();
                out.write_all(lines("metrics ").as_bytes()).and_then(|()| out.flush()).map_err(|e| e.to_string())
            }
            Sink::Http { url, auth, agent } => {
                let mut req = agent.post(url.as_str()).header("Content-Type", "text/plain; charset=utf-8");
                if let Some(auth) = auth {
                    req = req.header("Authorization", auth.as_str());
                }
                match req.send(lines("")) {
                    Ok(r) if r.status().is_success() => Ok(()),
                    Ok(r) => Err(format!("{url}: HTTP {}", r.status())),
                    Err(e) => Err(format!("{url}: {e}")),
                }
            }
            Sink::Prometheus(newest) => {
                let mut newest = lock(newest);
                for p in points {
                    let series = format!("{}{:?}", p.measurement, p.tags);
                    newest.insert(series, p.clone());
                }
                Ok(())
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The monitor's thread: every second, the points queued meanwhile go to every sink. A sink
/// that fails keeps its points for the next try (the newest [`MAX_QUEUED`]), and says so once
/// until it works again.
fn forward(points: Receiver<Vec<Point>>, mut sinks: Vec<Sink>) {
    let mut pending: Vec<Vec<Point>> = vec![Vec::new(); sinks.len()];
    let mut failing = vec![false; sinks.len()];
    let mut next = Instant::now() + FLUSH_EVERY;
    let mut open = true;
    while open || pending.iter().any(|p| !p.is_empty()) {
        match points.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Ok(batch) => pending.iter_mut().for_each(|p| p.extend(batch.iter().cloned())),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => open = false,
        }
        if open && Instant::now() < next {
            continue;
        }
        next = Instant::now() + FLUSH_EVERY;
        for ((sink, queued), failing) in sinks.iter_mut().zip(&mut pending).zip(&mut failing) {
            match sink.write(queued) {
                Ok(()) => {
                    queued.clear();
                    *failing = false;
                }
                Err(why) if open => {
                    if !std::mem::replace(failing, true) {
                        eprintln!("wirespeed: monitor: {why}; keeping the points for the next tries");
                    }
                    let excess = queued.len().saturating_sub(MAX_QUEUED);
                    queued.drain(..excess);
                }
                Err(why) => {
                    eprintln!("wirespeed: monitor: {why}; {} points dropped at the end", queued.len());
                    queued.clear();
                }
            }
        }
    }
}

/// Answers `GET /metrics` with the newest value of every series.
fn serve(server: tiny_http::Server, newest: Arc<Mutex<BTreeMap<String, Point>>>) {
    for request in server.incoming_requests() {
        let response = if request.url() == "/metrics" {
            let points: Vec<Point> = lock(&newest).values().cloned().collect();
            let kind = "Content-Type: text/plain; version=0.0.4".parse::<tiny_http::Header>().expect("a header");
            tiny_http::Response::from_string(prometheus_text(&points)).with_header(kind)
        } else {
            tiny_http::Response::from_string("see /metrics\n").with_status_code(404)
        };
        let _ = request.respond(response);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// InfluxDB 2 cannot run here: a listener takes the request as InfluxDB 2 would, and the
    /// test reads what came.
    #[test]
    fn writes_to_influxdb_2_as_flesnet_does() {
        use std::io::{BufRead, BufReader, Read};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut head = Vec::new();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                head.push(line.trim().to_string());
            }
            let len: usize = head.iter().find_map(|h| h.strip_prefix("content-length: ")?.parse().ok()).unwrap();
            let mut body = vec![0; len];
            reader.read_exact(&mut body).unwrap();
            std::io::Write::write_all(&mut &conn, b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n").unwrap();
            (head, String::from_utf8(body).unwrap())
        });
        let spec = format!("influx2:localhost:{port}:b:t0ken").parse::<SinkSpec>().unwrap();
        let monitor = Monitor::open(&[spec]).unwrap();
        let point = Point { measurement: "m".into(), tags: vec![], fields: vec![("f".into(), 1.5)], time: 7 };
        monitor.record(vec![point]);
        monitor.close();
        let (head, body) = server.join().unwrap();
        assert_eq!(head[0], "POST /api/v2/write?org=CBM&bucket=b&precision=ns HTTP/1.1");
        assert!(head.iter().any(|h| h == "authorization: Token t0ken"), "{head:?}");
        assert_eq!(body, "m f=1.5 7\n");
    }

    #[test]
    fn parses_flesnets_sink_names() {
        assert_eq!("file:cout".parse().ok(), Some(SinkSpec::File("cout".into())));
        assert_eq!(
            "influx1:db.example:8086:cbm".parse().ok(),
            Some(SinkSpec::Influx1 { host: "db.example".into(), port: 8086, db: "cbm".into() })
        );
        assert_eq!(
            "influx2:db.example:::t0k:en".parse().ok(),
            Some(SinkSpec::Influx2 {
                host: "db.example".into(),
                port: 8086,
                bucket: "cbm".into(),
                token: "t0k:en".into()
            })
        );
        assert_eq!("prometheus:9100".parse().ok(), Some(SinkSpec::Prometheus("0.0.0.0:9100".into())));
        assert_eq!("prometheus:127.0.0.1:9100".parse().ok(), Some(SinkSpec::Prometheus("127.0.0.1:9100".into())));
        assert_eq!(
            "prometheus:9100".parse::<SinkSpec>().unwrap().for_rank(3),
            SinkSpec::Prometheus("0.0.0.0:9103".into())
        );
        for bad in ["influx1:h:x:db", "influx2:h", "udp:h:1", "file:", "prometheus:", "prometheus:x"] {
            assert!(bad.parse::<SinkSpec>().is_err(), "{bad}");
        }
    }
}
