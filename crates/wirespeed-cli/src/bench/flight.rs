//! `wirespeed bench flight`: arrow-flight-benchmark's test, flags and output, over any plane.
//!
//! Without `-server_host` it starts `wirespeed bench flight-server` as a child process on
//! loopback, as arrow-flight-benchmark starts its perf server. Data: 4 int64 columns, so 4096
//! records make a 128 KiB batch. Latency is the time each batch took to read (or write).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, Ticket};
use arrow_schema::SchemaRef;
use bytes::Bytes;
use clap::Args;
use serde_json::json;
use wirespeed::{Fabric, Key};
use wirespeed_flight::{Client, Error, Handler, Input, Output, Payload, Server, Upload};

use super::report::Report;
use crate::flight::get::transport;

/// The flags arrow-flight-benchmark spells with one dash; `main` rewrites them to two.
pub const SINGLE_DASH_FLAGS: [&str; 8] = [
    "transport",
    "server_host",
    "server_port",
    "num_streams",
    "num_threads",
    "records_per_stream",
    "records_per_batch",
    "test_put",
];

#[derive(Args, Debug)]
pub struct FlightArgs {
    /// grpc, or a data plane: shm, tcp, ucx or ofi+<provider> (ofi+tcp, ofi+shm, ...).
    #[arg(long, default_value = "grpc")]
    transport: String,
    /// A running `wirespeed bench flight-server`; without it one is started on loopback.
    #[arg(long)]
    server_host: Option<String>,
    #[arg(long, default_value_t = 31337)]
    server_port: u16,
    /// Streams (endpoints) to read or write.
    #[arg(long, default_value_t = 4)]
    num_streams: usize,
    /// Client threads sharing the streams.
    #[arg(long, default_value_t = 4)]
    num_threads: usize,
    #[arg(long, default_value_t = 10_000_000)]
    records_per_stream: u64,
    #[arg(long, default_value_t = 4096)]
    records_per_batch: usize,
    /// Measure DoPut instead of DoGet.
    #[arg(long)]
    test_put: bool,
    /// The side that sends keeps its batch in sealed shared memory (`wirespeed_flight::share`),
    /// as a server holding a hot table would; the shm plane then sends it without copying.
    #[arg(long)]
    shared: bool,
    /// One JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The server started here serves Prometheus metrics and writes a JSON line per call, as
    /// an operator's `serve` would (to discarded stderr: the cost is the server's).
    #[arg(long)]
    metrics: bool,
}

#[derive(Args, Debug)]
pub struct FlightServerArgs {
    #[arg(long, default_value = "127.0.0.1:31337")]
    listen: String,
    /// Data planes to offer, comma-separated (default: the server's, shm, ucx and tcp);
    /// libfabric's as ofi+<provider>.
    #[arg(long, value_delimiter = ',', value_parser = fabric)]
    planes: Vec<Fabric>,
    /// Serve Prometheus metrics on http://ADDR/metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<String>,
    /// Write a JSON line per call to stderr.
    #[arg(long)]
    call_log: bool,
}

fn fabric(name: &str) -> Result<Fabric, String> {
    name.parse().map_err(|_| format!("unknown plane {name:?} ({})", Fabric::names()))
}

/// What a stream holds, as its ticket says.
#[derive(Clone, Copy)]
struct Perf {
    records: u64,
    per_batch: usize,
    shared: bool,
}

impl Perf {
    fn encode(&self) -> Bytes {
        Bytes::from(json!({"records": self.records, "per_batch": self.per_batch, "shared": self.shared}).to_string())
    }

    /// The batch every message repeats (sliced for the last one).
    fn batch(&self) -> wirespeed_flight::Result<RecordBatch> {
        let full = batch(self.per_batch);
        if self.shared { wirespeed_flight::share(&full) } else { Ok(full) }
    }

    fn decode(b: &[u8]) -> wirespeed_flight::Result<Perf> {
        let v: serde_json::Value =
            serde_json::from_slice(b).map_err(|_| Error::invalid_argument("not a perf ticket"))?;
        let field =
            |k: &str| v.get(k).and_then(|x| x.as_u64()).ok_or_else(|| Error::invalid_argument("not a perf ticket"));
        let per_batch = field("per_batch")? as usize;
        if per_batch == 0 || per_batch > 1 << 24 {
            return Err(Error::invalid_argument("records per batch must be 1 to 16M"));
        }
        let shared = v.get("shared").and_then(|x| x.as_bool()).unwrap_or(false);
        Ok(Perf { records: field("records")?, per_batch, shared })
    }
}

fn batch(rows: usize) -> RecordBatch {
    let column = |seed: i64| Arc::new(Int64Array::from_iter_values((0..rows as i64).map(|i| i * 4 + seed))) as ArrayRef;
    RecordBatch::try_from_iter([("a", column(0)), ("b", column(1)), ("c", column(2)), ("d", column(3))]).expect("valid")
}

/// The perf server: DoGet streams one prepared batch over and over, DoPut counts, DoExchange
/// echoes.
struct PerfService;

impl Handler for PerfService {
    fn get_flight_info(&self, descriptor: &FlightDescriptor) -> wirespeed_flight::Result<FlightInfo> {
        let v: serde_json::Value = serde_json::from_slice(&descriptor.cmd)
            .map_err(|_| Error::invalid_argument("send a perf command: {streams, records, per_batch}"))?;
        let streams = v.get("streams").and_then(|x| x.as_u64()).unwrap_or(1);
        let perf = Perf::decode(&descriptor.cmd)?;
        let mut info = FlightInfo::new().try_with_schema(&batch(0).schema())?.with_descriptor(descriptor.clone());
        for _ in 0..streams {
            info = info.with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(perf.encode())));
        }
        Ok(info.with_total_records((streams * perf.records) as i64))
    }

    fn do_get(&self, ticket: &[u8]) -> wirespeed_flight::Result<Output> {
        let perf = Perf::decode(ticket)?;
        let full = perf.batch()?;
        let mut left = perf.records;
        let batches = std::iter::from_fn(move || {
            let n = left.min(perf.per_batch as u64) as usize;
            left -= n as u64;
            (n > 0).then(|| Ok(Payload::batch(full.slice(0, n))))
        });
        Ok(Output::new(batch(0).schema(), batches))
    }

    fn do_put(&self, _descriptor: &FlightDescriptor, _schema: &SchemaRef) -> wirespeed_flight::Result<Box<dyn Upload>> {
        Ok(Box::new(Count(0)))
    }

    fn do_exchange(&self, _descriptor: &FlightDescriptor, mut input: Input) -> wirespeed_flight::Result<Output> {
        Ok(Output::new(input.schema()?, input))
    }
}

/// An upload that only counts its rows.
struct Count(u64);

impl Upload for Count {
    fn write(&mut self, payload: Payload) -> wirespeed_flight::Result<Option<Bytes>> {
        self.0 += payload.record_batch().map_or(0, |b| b.num_rows() as u64);
        Ok(None)
    }

    fn finish(self: Box<Self>) -> wirespeed_flight::Result<Vec<Bytes>> {
        Ok(vec![Bytes::from(self.0.to_string())])
    }
}

pub fn serve(a: FlightServerArgs) -> Result<()> {
    let mut builder = Server::builder(PerfService).listen(&a.listen);
    if let Some(key) = Key::from_env_or_file(None)? {
        builder = builder.key(key);
    }
    if !a.planes.is_empty() {
        builder = builder.planes(&a.planes);
    }
    if let Some(addr) = &a.metrics {
        builder = builder.metrics(addr);
    }
    if a.call_log {
        builder = builder.on_call(|call| drop(writeln!(std::io::stderr(), "{}", call.to_json())));
    }
    let server = builder.start()?;
    println!("listening {}", server.url());
    server.wait()?;
    Ok(())
}

pub fn run(a: FlightArgs) -> Result<()> {
    let transport = transport(&a.transport)?;
    let (key, key_text) = match std::env::var("WIRESPEED_KEY") {
        Ok(text) => (Key::new(text.clone())?, text),
        Err(_) => {
            let (k, text) = Key::generate()?;
            (k, text)
        }
    };
    let mut child = None;
    let url = match &a.server_host {
        Some(host) => format!("grpc://{host}:{}", a.server_port),
        None => {
            // The plane measured is offered whether or not the server offers it by default.
            let plane = match transport {
                wirespeed_flight::PlaneChoice::Only(k) => Some(k),
                _ => None,
            };
            let (c, url) = spawn_server(&key_text, plane, a.metrics)?;
            child = Some(ChildGuard(c));
            url
        }
    };
    let client = Client::connect(&url)?.with_key(key).with_transport(transport);
    let perf = Perf { records: a.records_per_stream, per_batch: a.records_per_batch, shared: a.shared };
    let batch_bytes = a.records_per_batch * 4 * 8;

    let Timed { records, latencies, seconds } =
        if a.test_put { put(&client, &a, perf)? } else { get(&client, &a, perf)? };
    drop(child);

    let plane = match transport {
        wirespeed_flight::PlaneChoice::Only(k) => k.name(),
        _ => "grpc",
    };
    let batches = latencies.len() as u64;
    let report = Report {
        transport: plane.to_string(),
        message_bytes: batch_bytes,
        messages: batches,
        streams: a.num_streams,
        seconds,
        latencies_ns: latencies,
    };
    report.print_flight(a.test_put, records * 32, a.json);
    Ok(())
}

/// What the timed part of a run moved.
struct Timed {
    records: u64,
    latencies: Vec<u64>,
    seconds: f64,
}

/// Runs `one(stream index)` for every stream on `num_threads` threads; sums the records each
/// returns, gathers its per-batch times, and checks the total. As in arrow-flight-benchmark,
/// the clock runs from here (after planning) and includes each stream's connection set-up.
fn streams(a: &FlightArgs, perf: Perf, one: impl Fn(usize) -> Result<(u64, Vec<u64>)> + Sync) -> Result<Timed> {
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let results = Mutex::new((0u64, Vec::new()));
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = (0..a.num_threads.max(1))
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        if i >= a.num_streams {
                            return Ok(());
                        }
                        let (records, lat) = one(i)?;
                        let mut r = results.lock().expect("results");
                        r.0 += records;
                        r.1.extend(lat);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| anyhow::anyhow!("a benchmark thread panicked"))??;
        }
        Ok(())
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let (records, latencies) = results.into_inner().expect("results");
    let expected = perf.records * a.num_streams as u64;
    if records != expected {
        bail!("{records} records arrived, expected {expected}");
    }
    Ok(Timed { records, latencies, seconds })
}

/// Reads every stream, timing each batch.
fn get(client: &Client, a: &FlightArgs, perf: Perf) -> Result<Timed> {
    let cmd =
        json!({"streams": a.num_streams, "records": perf.records, "per_batch": perf.per_batch, "shared": perf.shared})
            .to_string();
    let info = client.get_flight_info(&FlightDescriptor::new_cmd(cmd))?;
    anyhow::ensure!(info.endpoint.len() == a.num_streams, "the server offered {} streams", info.endpoint.len());
    streams(a, perf, |i| {
        let (mut records, mut lat) = (0u64, Vec::new());
        let mut t = Instant::now();
        for b in client.do_get(&info.endpoint[i])? {
            records += b?.num_rows() as u64;
            lat.push(t.elapsed().as_nanos() as u64);
            t = Instant::now();
        }
        Ok((records, lat))
    })
}

/// Writes every stream, timing each batch; the server reports the records it stored.
fn put(client: &Client, a: &FlightArgs, perf: Perf) -> Result<Timed> {
    let full = perf.batch()?;
    streams(a, perf, |_| {
        let descriptor = FlightDescriptor::new_path(vec!["perf-put".into()]);
        let mut writer = client.do_put(&descriptor, &full.schema())?;
        let (mut left, mut lat) = (perf.records, Vec::new());
        while left > 0 {
            let n = left.min(perf.per_batch as u64) as usize;
            let t = Instant::now();
            writer.write(full.slice(0, n))?;
            lat.push(t.elapsed().as_nanos() as u64);
            left -= n as u64;
        }
        let stored = writer
            .finish()?
            .first()
            .and_then(|r| std::str::from_utf8(r).ok()?.parse().ok())
            .context("the server sent no row count")?;
        Ok((stored, lat))
    })
}

struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_server(key_text: &str, plane: Option<Fabric>, metrics: bool) -> Result<(Child, String)> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(["bench", "flight-server", "--listen", "127.0.0.1:0"])
        .args(plane.map(|p| format!("--planes={p}")))
        .args(if metrics { &["--metrics", "127.0.0.1:0", "--call-log"][..] } else { &[] })
        .env("WIRESPEED_KEY", key_text)
        .stdout(Stdio::piped())
        .stderr(if metrics { Stdio::null() } else { Stdio::inherit() })
        .spawn()
        .context("starting the perf server")?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped")).read_line(&mut line)?;
    match line.trim().strip_prefix("listening ") {
        Some(url) => Ok((child, url.to_string())),
        None => {
            let _ = child.kill();
            bail!("the perf server did not start")
        }
    }
}
