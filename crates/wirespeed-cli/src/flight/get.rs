//! `wirespeed get URL PATH -o FILE`: fetches one flight from any Flight server, over the
//! fastest plane it offers, into an Arrow IPC file (or Parquet, or an IPC stream on stdout).

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use clap::Args;
use parquet::arrow::ArrowWriter;
use wirespeed_flight::{Client, FlightDescriptor, PlaneChoice};

use wirespeed_files::part::PartFile;

use super::TlsArgs;

#[derive(Args, Debug)]
pub struct GetArgs {
    /// The server: grpc://host:port, grpc+tls://host:port, or grpc+unix://PATH.
    url: String,
    /// The flight's path on the server.
    path: String,
    /// Where to write it: FILE.arrow (or .feather), FILE.parquet, or - for an IPC stream on
    /// standard output.
    #[arg(short, long)]
    output: PathBuf,
    /// Plane: auto (the fastest offered), grpc, shm, tcp, ucx or ofi+<provider> (ofi+tcp, ofi+shm, ...).
    #[arg(long, default_value = "auto")]
    transport: String,
    /// Data-plane key file instead of WIRESPEED_KEY; with neither, gRPC carries the data.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// Password file (or WIRESPEED_FLIGHT_PASSWORD) for servers that want Basic auth.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// Send the password over grpc:// too, where anyone on the path can read it.
    #[arg(long)]
    password_over_plaintext: bool,
    /// grpc+tls: trust these PEM roots instead of the system's.
    #[arg(long, value_name = "FILE")]
    tls_roots: Option<PathBuf>,
    /// grpc+tls: the name the server's certificate must carry, instead of the URL's host.
    #[arg(long, value_name = "NAME")]
    tls_server_name: Option<String>,
    /// grpc+tls: accept any server certificate (encrypted, but the server is not checked).
    #[arg(long)]
    tls_insecure: bool,
    #[command(flatten)]
    tls: TlsArgs,
    /// Print rows, bytes, plane and speed.
    #[arg(short, long)]
    verbose: bool,
}

pub fn transport(name: &str) -> anyhow::Result<PlaneChoice> {
    Ok(name.parse()?)
}

/// A server that wants client certificates ends a connection without one after its TLS 1.3
/// handshake, which a client sees only as a broken or cancelled transport: say so.
fn hint_mutual_tls(e: wirespeed_flight::Error, a: &GetArgs) -> anyhow::Error {
    let transport = matches!(e.code(), wirespeed_flight::Code::Cancelled | wirespeed_flight::Code::Unknown);
    if !transport
        || !a.url.starts_with("grpc+tls://")
        || a.tls.has_identity()
        || e.message().contains("CertificateRequired")
    {
        return e.into();
    }
    anyhow::anyhow!(
        "{e}; a server that asks for client certificates (mutual TLS) ends the connection so: give --tls-cert and --tls-key"
    )
}

pub fn run(a: GetArgs) -> anyhow::Result<()> {
    crate::interrupt::install()?;
    let transport = transport(&a.transport)?;
    let tls = a.tls.client(a.tls_roots.as_deref(), a.tls_server_name.clone(), a.tls_insecure)?;
    let mut client = Client::connect_tls(&a.url, &tls)?.with_transport(transport);
    if let Some(key) = super::key(a.key_file.as_deref())? {
        client = client.with_key(key);
    }
    if let Some(p) = super::password(a.password_file.as_deref())? {
        // A Unix socket's bytes never leave the host.
        let private = a.url.starts_with("grpc+tls://") || a.url.starts_with("grpc+unix://");
        if !private && !a.password_over_plaintext {
            anyhow::bail!("a password over {} travels in clear: use grpc+tls://, or --password-over-plaintext", a.url);
        }
        client.authenticate("wirespeed", &p)?;
    }
    let started = Instant::now();
    let descriptor = FlightDescriptor::new_path(vec![a.path.clone()]);
    let info = client
        .get_flight_info(&descriptor)
        .map_err(|e| hint_mutual_tls(e, &a))
        .with_context(|| format!("cannot get {}", a.path))?;
    let schema = std::sync::Arc::new(info.clone().try_decode_schema()?);
    let mut sink = Sink::create(&a.output, &schema)?;
    let (mut rows, mut bytes, mut plane) = (0u64, 0u64, "grpc");
    let fetched = (|| -> anyhow::Result<()> {
        for endpoint in &info.endpoint {
            let reader = client.do_get(endpoint)?;
            plane = reader.plane().name();
            for batch in reader {
                let batch = batch?;
                rows += batch.num_rows() as u64;
                bytes += data_bytes(&batch);
                sink.write(&batch)?;
            }
        }
        Ok(())
    })();
    match fetched {
        Ok(()) => sink.commit()?,
        Err(e) => {
            drop(sink);
            return Err(e.context(format!("cannot get {}", a.path)));
        }
    }
    if a.verbose {
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "wirespeed: {rows} rows, {:.1} MB over {plane} in {secs:.2} s ({:.2} GB/s)",
            bytes as f64 / 1e6,
            bytes as f64 / secs / 1e9
        );
    }
    Ok(())
}

/// The bytes of data a batch holds (its slices, not the capacity behind them).
fn data_bytes(batch: &RecordBatch) -> u64 {
    batch.columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap_or(0) as u64).sum()
}

/// The output, written under a hidden name until complete; a device or pipe (/dev/null) has
/// no part, and is written in place.
enum Sink {
    Ipc { writer: arrow_ipc::writer::FileWriter<File>, part: Option<PartFile> },
    Parquet { writer: ArrowWriter<File>, part: Option<PartFile> },
    Stdout(arrow_ipc::writer::StreamWriter<std::io::Stdout>),
}

impl Sink {
    fn create(dest: &std::path::Path, schema: &SchemaRef) -> anyhow::Result<Self> {
        if dest.as_os_str() == "-" {
            return Ok(Sink::Stdout(arrow_ipc::writer::StreamWriter::try_new(std::io::stdout(), schema)?));
        }
        let in_place = std::fs::metadata(dest).is_ok_and(|m| !m.is_dir() && !m.is_file());
        let (part, file) = match in_place {
            true => std::fs::OpenOptions::new().write(true).open(dest).map(|file| (None, file)),
            false => PartFile::create(dest).map(|(part, file)| (Some(part), file)),
        }
        .with_context(|| format!("cannot write {}", dest.display()))?;
        Ok(if dest.extension().is_some_and(|e| e == "parquet") {
            Sink::Parquet { writer: ArrowWriter::try_new(file, schema.clone(), None)?, part }
        } else {
            Sink::Ipc { writer: arrow_ipc::writer::FileWriter::try_new(file, schema)?, part }
        })
    }

    fn write(&mut self, batch: &RecordBatch) -> anyhow::Result<()> {
        match self {
            Sink::Ipc { writer, .. } => writer.write(batch)?,
            Sink::Parquet { writer, .. } => writer.write(batch)?,
            Sink::Stdout(writer) => writer.write(batch)?,
        }
        Ok(())
    }

    /// Completes the file and renames it into place; dropping a sink instead removes its part.
    fn commit(self) -> anyhow::Result<()> {
        let (file, part) = match self {
            Sink::Ipc { mut writer, part } => {
                writer.finish()?;
                (writer.into_inner()?, part)
            }
            Sink::Parquet { writer, part } => (writer.into_inner()?, part),
            Sink::Stdout(mut writer) => {
                writer.finish()?;
                writer.into_inner()?.flush()?;
                return Ok(());
            }
        };
        let Some(part) = part else { return Ok(()) };
        let shown = part.path().display().to_string();
        part.commit(file).with_context(|| format!("cannot complete {shown}"))
    }
}
