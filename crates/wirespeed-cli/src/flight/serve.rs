//! `wirespeed serve DIR [--listen HOST:PORT]`: a Flight server for the Arrow and Parquet files
//! under DIR, with uploads, on gRPC and on every data plane.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use arrow_ipc::CompressionType;
use clap::Args;
use wirespeed::Key;
use wirespeed_flight::server::{default_planes, travels_in_clear};
use wirespeed_flight::{Advertise, Calls, Fabric, Limits, Server};

use wirespeed_serve::DirService;

use super::TlsArgs;

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The directory to serve; uploads land in it too.
    dir: PathBuf,
    /// gRPC address (HOST:PORT), or a Unix socket as grpc+unix://PATH; the data planes listen
    /// on the same host (127.0.0.1 beside a Unix socket).
    #[arg(long, default_value = "0.0.0.0:8815")]
    listen: String,
    /// The location the flights' endpoints name, for a server that clients reach through NAT
    /// or a proxy (grpc+tls://flight.example.org:443, say). Default: the server as each client
    /// reached it (its :authority, under grpc+tcp:// or grpc+tls://), or its Unix socket.
    #[arg(long, value_name = "URI")]
    advertise: Option<String>,
    /// Data planes to offer besides gRPC: any of shm, tcp, ucx, ofi+<provider> (shm, tcp,
    /// verbs, efa, cxi), or none. Default: shm,ucx,tcp; with TLS, shm,tcp, tcp's calls sealed
    /// with AES-256-GCM, as ucx and ofi carry data unencrypted between hosts.
    #[arg(long, value_delimiter = ',')]
    planes: Option<Vec<String>>,
    /// Data-plane key file instead of WIRESPEED_KEY; with neither, one is generated and printed.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Require this password (Flight Basic auth, then bearer tokens) instead of
    /// WIRESPEED_FLIGHT_PASSWORD; with neither, gRPC is open.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// Ask for the password without TLS, where anyone on the path can read it.
    #[arg(long)]
    password_over_plaintext: bool,
    #[command(flatten)]
    tls: TlsArgs,
    /// Keep up to this many MiB of decoded tables in memory (0: none). A table read again is
    /// then served without reading its file, and same-host clients on the shm plane map it
    /// instead of receiving a copy. A changed file is read afresh.
    #[arg(long, default_value_t = 0, value_name = "MIB")]
    cache_mb: usize,
    /// Compress the batches sent (lz4 or zstd, as pyarrow's IpcWriteOptions offers). Default:
    /// none, so that every client reads them; a file's batches compressed otherwise are
    /// decompressed first.
    #[arg(long, value_enum, value_name = "CODEC")]
    compression: Option<Compression>,
    /// Most threads running handler work at once (reading files, decoding and writing
    /// uploads); calls that wait on their clients hold none.
    #[arg(long, default_value_t = wirespeed_flight::DEFAULT_HANDLER_THREADS, value_name = "N")]
    handler_threads: usize,
    /// Most gRPC calls open at once from one client address; more are refused
    /// (RESOURCE_EXHAUSTED) until some end.
    #[arg(long, default_value_t = 512, value_name = "N")]
    calls_per_client: usize,
    /// Most MiB of request messages (upload and exchange batches) held at once over every
    /// client; more wait, and fail after 30 s. At least 1024 lets any batch gRPC carries in.
    #[arg(long, default_value_t = 2048, value_name = "MIB")]
    request_memory_mb: usize,
    /// Most MiB of responses encoded ahead of their readers, over every client (a reader that
    /// pauses leaves its call's queue full). Past it, the calls whose readers have waited
    /// longest are cancelled (RESOURCE_EXHAUSTED) and the others go on.
    #[arg(long, default_value_t = 1024, value_name = "MIB")]
    max_buffered_mb: usize,
    /// Serve Prometheus metrics on http://ADDR/metrics (calls by method and status, their
    /// durations, bytes and batches by plane, open calls and connections, refusals).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<String>,
    /// How each call's line is written to stderr: text, json (one object a line), or none.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// On SIGTERM or SIGINT, how long calls in flight may take to finish while new ones are
    /// refused (UNAVAILABLE) and health says NOT_SERVING; then they are cancelled. A second
    /// signal stops at once.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    drain_timeout: f64,
    /// Give tickets that expire this long after GetFlightInfo issues them (the endpoint's
    /// expiration_time; RenewFlightEndpoint extends one). Expired or forged tickets are refused
    /// (NOT_FOUND, INVALID_ARGUMENT). Unset, a ticket is the flight's name and never expires.
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds)]
    ticket_ttl: Option<Duration>,
}

fn positive_seconds(text: &str) -> Result<Duration, String> {
    match text.parse::<f64>().ok().and_then(|s| Duration::try_from_secs_f64(s).ok()) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(format!("{text:?}: expected a number of seconds above 0")),
    }
}

/// How the call log is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
    None,
}

/// The body compressions Arrow IPC has.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Compression {
    Lz4,
    Zstd,
}

impl Compression {
    fn codec(self) -> CompressionType {
        match self {
            Compression::Lz4 => CompressionType::LZ4_FRAME,
            Compression::Zstd => CompressionType::ZSTD,
        }
    }
}

pub fn run(a: ServeArgs) -> anyhow::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    crate::interrupt::install_winding_down(stop.clone())?;
    let service = DirService::new(a.dir.clone(), a.cache_mb << 20)?
        .compression(a.compression.map(Compression::codec))
        .ticket_ttl(a.ticket_ttl)?;
    let tls = a.tls.server()?;
    // Unnamed, the server's own default (under TLS, tcp's calls are sealed and ucx left out).
    let mut planes = Vec::new();
    for p in a.planes.iter().flatten().filter(|p| p.as_str() != "none") {
        planes.push(
            p.parse::<Fabric>()
                .map_err(|_| anyhow::anyhow!("unknown plane {p:?} (expected {} or none)", Fabric::names()))?,
        );
    }
    if a.planes.is_none() {
        planes = default_planes(tls.is_some());
    }
    let limits = Limits {
        calls_per_client: a.calls_per_client.max(1),
        request_bytes: a.request_memory_mb.max(1) << 20,
        response_bytes: a.max_buffered_mb.max(1) << 20,
        ..Limits::default()
    };
    let advertise = a.advertise.map_or(Advertise::Reached, Advertise::Uri);
    let mut builder = Server::builder(service)
        .listen(&a.listen)
        .planes(&planes)
        .handler_threads(a.handler_threads)
        .limits(limits)
        .advertise(advertise);
    match a.log_format {
        // A log nobody reads (a closed stderr) must not stop the server: write errors are dropped.
        LogFormat::Text => builder = builder.on_call(|call| drop(writeln!(std::io::stderr(), "wirespeed: {call}"))),
        LogFormat::Json => builder = builder.on_call(|call| drop(writeln!(std::io::stderr(), "{}", call.to_json()))),
        LogFormat::None => {}
    }
    if let Some(addr) = &a.metrics {
        builder = builder.metrics(addr);
    }
    if !planes.is_empty() {
        let key = match super::key(a.key_file.as_deref())? {
            Some(k) => k,
            None => {
                let (k, text) = Key::generate()?;
                eprintln!("wirespeed: key {text} (clients need it as WIRESPEED_KEY for the data planes)");
                k
            }
        };
        builder = builder.key(key);
    }
    // Where a password may travel is the library's rule; this only names the flags.
    if let Some(p) = super::password(a.password_file.as_deref())? {
        if travels_in_clear(&a.listen, tls.is_some()) && !a.password_over_plaintext {
            let why = format!(
                "a password over {} travels in clear: give --tls-cert and --tls-key, or --password-over-plaintext",
                a.listen
            );
            return Err(wirespeed_flight::Error::invalid_argument(why).into()); // a usage error: exit 2
        }
        builder = builder.password(p).password_over_plaintext();
    }
    if let Some(tls) = tls {
        builder = builder.tls(tls);
    }
    let server = builder.start().with_context(|| format!("cannot serve on {}", a.listen))?;
    let planes: Vec<&str> = server.planes().iter().map(|(k, _)| k.name()).collect();
    let planes = if planes.is_empty() { "none".to_string() } else { planes.join(", ") };
    eprintln!("wirespeed: serving {} on {} (data planes: {planes})", a.dir.display(), listen_url(&a.listen, &server));
    if let Some(addr) = server.metrics_addr() {
        eprintln!("wirespeed: metrics on http://{addr}/metrics");
    }
    let calls = server.calls();
    std::thread::Builder::new().name("wirespeed-trim".into()).spawn(move || trim_when_idle(&calls))?;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let drain = Duration::try_from_secs_f64(a.drain_timeout).unwrap_or_default();
    eprintln!("wirespeed: draining: {} calls open, {drain:?} for them to finish", server.calls().open());
    let cancelled = server.shutdown(drain);
    eprintln!("wirespeed: stopped ({cancelled} calls cancelled at the drain timeout)");
    Ok(())
}

/// Gives freed memory back to the system once calls have come and none is open. main raises
/// glibc's trim threshold so that transfers keep their buffers mapped; without this, a server
/// would keep a burst's peak for good.
fn trim_when_idle(calls: &Calls) {
    let mut trimmed_at = 0;
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let started = calls.started();
        if started != trimmed_at && calls.open() == 0 {
            trimmed_at = started;
            // SAFETY: malloc_trim only returns free memory to the system.
            #[cfg(target_env = "gnu")]
            unsafe {
                libc::malloc_trim(0);
            }
        }
    }
}

/// What to print as the address: the port the server got, on the host asked for, or its
/// Unix socket.
fn listen_url(listen: &str, server: &Server) -> String {
    let url = server.url();
    match (server.addr(), url.split_once("://")) {
        (Some(addr), Some((scheme, _))) => {
            let host = listen.rsplit_once(':').map(|(h, _)| h).unwrap_or("0.0.0.0");
            format!("{scheme}://{host}:{}", addr.port())
        }
        _ => url,
    }
}
