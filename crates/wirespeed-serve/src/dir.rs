//! A directory as a Flight service: every Arrow IPC file (`.arrow`, `.feather`, `.arrows`)
//! and Parquet file below the root is a flight keyed by its relative path. Uploads land under
//! a hidden temporary name of their own and are renamed into place only once complete. With a cache
//! (`--cache-mb`), tables read once are served from memory while their files stay unchanged.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use arrow_flight::{
    CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, FlightDescriptor, FlightEndpoint, FlightInfo,
    RenewFlightEndpointRequest,
};
use arrow_ipc::CompressionType;
use arrow_ipc::reader::{FileReader, StreamReader};
use arrow_schema::{ArrowError, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use wirespeed_files::paths::join_under;
use wirespeed_flight::error::Quote;
use wirespeed_flight::{Error, Gauge, Handler, Output, Payload, Result, StoredFile, Upload, WriteOptions};

use crate::cache::{Batches, Stamp, Table, TableCache};
use crate::format::{Format, format_of, io_error};
use crate::ticket::Tickets;
use crate::upload::DirUpload;

/// A Flight service of the Arrow IPC and Parquet files under a directory, as `wirespeed serve` serves them: each file a flight keyed by its relative path, uploads landing whole or not at all.
pub struct DirService {
    root: PathBuf,
    cache: Option<Arc<TableCache>>,
    /// How batches go out: uncompressed unless the operator asks, since a client that did not
    /// ask may have no codec (Java's flight-core needs a module for it).
    options: WriteOptions,
    tickets: Tickets,
    /// Uploads in progress.
    uploads: Arc<AtomicUsize>,
}

/// Opens a flight's file; errors name the flight, not the server's paths.
fn open(path: &Path, name: &str) -> Result<(SchemaRef, Batches, Option<i64>)> {
    let format = format_of(path)
        .ok_or_else(|| Error::not_found(format!("{}: not an Arrow or Parquet file", Quote::str(name))))?;
    let file = File::open(path).map_err(|e| io_error(name, e))?;
    let bad = |e: &dyn std::fmt::Display| Error::internal(format!("{}: {e}", Quote::str(name)));
    match format {
        Format::IpcFile => {
            let r = FileReader::try_new_buffered(file, None).map_err(|e| bad(&e))?;
            Ok((r.schema(), Box::new(r), None))
        }
        Format::IpcStream => {
            let r = StreamReader::try_new(BufReader::new(file), None).map_err(|e| bad(&e))?;
            Ok((r.schema(), Box::new(r), None))
        }
        Format::Parquet => {
            let b = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad(&e))?;
            let rows = b.metadata().file_metadata().num_rows();
            let schema = b.schema().clone();
            let r = b.build().map_err(|e| bad(&e))?;
            Ok((schema, Box::new(r), Some(rows)))
        }
    }
}

/// Longer than any file this host can name (Linux: 255 bytes a component, 4 KiB a path).
fn too_long(name: &str) -> bool {
    name.len() >= 4096 || name.split('/').any(|part| part.len() > 255)
}

fn decoded(schema: SchemaRef, batches: Batches) -> Output {
    Output::new(schema, batches.map(|b| b.map(Payload::batch).map_err(Error::from)))
}

impl DirService {
    /// Serves `root`, keeping up to `cache_bytes` of decoded tables in memory (0: none).
    pub fn new(root: PathBuf, cache_bytes: usize) -> Result<Self> {
        if !root.is_dir() {
            return Err(Error::invalid_argument(format!("{} is not a directory", root.display())));
        }
        // What uploads cut short by a killed server left (live ones are locked).
        wirespeed_files::part::sweep_uploads(&root, std::time::Duration::from_secs(10));
        let cache = (cache_bytes > 0).then(|| Arc::new(TableCache::new(cache_bytes)));
        Ok(DirService {
            root,
            cache,
            options: WriteOptions::default(),
            tickets: Tickets::new(None)?,
            uploads: Arc::default(),
        })
    }

    /// Sends batches compressed with `compression` (pyarrow's `IpcWriteOptions` choice), stored
    /// batches compressed otherwise decompressed and compressed again.
    pub fn compression(self, compression: Option<CompressionType>) -> Self {
        DirService { options: WriteOptions { compression, ..self.options }, ..self }
    }

    /// Gives tickets that expire `ttl` after they are issued (None: tickets that are names and
    /// never expire), renewed by RenewFlightEndpoint.
    pub fn ticket_ttl(self, ttl: Option<Duration>) -> Result<Self> {
        Ok(DirService { tickets: Tickets::new(ttl)?, ..self })
    }

    /// The cache, and the stamp of the file at `path`; `None` without a cache.
    fn stamp(&self, path: &Path, name: &str) -> Result<Option<(&Arc<TableCache>, Stamp)>> {
        let Some(cache) = &self.cache else { return Ok(None) };
        Ok(Some((cache, Stamp::of(path).map_err(|e| io_error(name, e))?)))
    }

    /// The table at `path` if the cache holds it as the file is now.
    fn hit(&self, path: &Path, name: &str) -> Result<Option<Table>> {
        Ok(self.stamp(path, name)?.and_then(|(cache, stamp)| cache.get(path, stamp)))
    }

    /// A flight's batches: from the cache when it holds the file as it is now; otherwise from
    /// the file, through the cache's one load of it when it may fit.
    fn read(&self, path: &Path, name: &str) -> Result<Output> {
        if let Some((cache, stamp)) = self.stamp(path, name)? {
            if let Some(t) = cache.get(path, stamp) {
                let b = t.batches;
                return Ok(Output::new(t.schema, (0..b.len()).map(move |i| Ok(Payload::batch(b[i].clone())))));
            }
            if stamp.len() <= cache.limit() as u64 {
                let (owned, flight) = (path.to_path_buf(), name.to_string());
                let reopen = move || {
                    open(&owned, &flight).map(|(s, b, _)| (s, b)).map_err(|e| ArrowError::ExternalError(Box::new(e)))
                };
                let (schema, batches) = cache
                    .load(name, path, stamp, reopen)
                    .map_err(|e| Error::internal(format!("{}: {e}", Quote::str(name))))?;
                return Ok(decoded(schema, batches));
            }
        }
        if format_of(path) == Some(Format::IpcFile) {
            let file = File::open(path).map_err(|e| io_error(name, e))?;
            let stored = StoredFile::open(file)
                .map_err(|e| Error::internal(format!("{}: {}", Quote::str(name), e.message())))?;
            if let Some(stored) = stored {
                return Ok(Output::new(stored.schema(), stored.batches().map(|b| b.map(Payload::stored))));
            }
        }
        let (schema, batches, _) = open(path, name)?;
        Ok(decoded(schema, batches))
    }

    /// The file a flight name points at, refusing names that leave the root or pass through
    /// a symlink.
    fn resolve(&self, name: &str) -> Result<PathBuf> {
        if too_long(name) {
            return Err(Error::not_found(format!("no flight {}: longer than a file's name can be", Quote::str(name))));
        }
        let path = join_under(&self.root, name.as_bytes())
            .map_err(|_| Error::invalid_argument(format!("bad flight name {}", Quote::str(name))))?;
        let mut at = self.root.clone();
        for part in Path::new(name).components() {
            at.push(part);
            if at.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(Error::permission_denied(format!("{} passes through a symlink", Quote::str(name))));
            }
        }
        Ok(path)
    }

    fn name_of(descriptor: &FlightDescriptor) -> Result<String> {
        if descriptor.path.is_empty() {
            return Err(Error::invalid_argument("this server takes path descriptors (the file's path under its root)"));
        }
        Ok(descriptor.path.join("/"))
    }

    fn info(&self, name: &str) -> Result<FlightInfo> {
        let path = self.resolve(name)?;
        let (schema, rows) = match self.hit(&path, name)? {
            Some(t) => (t.schema.clone(), t.rows()),
            None => {
                let (schema, batches, rows) = open(&path, name)?;
                let rows = match rows {
                    Some(r) => r,
                    None => batches.map(|b| b.map(|b| b.num_rows() as i64).unwrap_or(0)).sum(),
                };
                (schema, rows)
            }
        };
        let meta = path.metadata().ok();
        let bytes = meta.as_ref().map_or(-1, |m| m.len() as i64);
        let modified = meta.and_then(|m| m.modified().ok()).and_then(|t| t.duration_since(UNIX_EPOCH).ok());
        // What a client may want to know of the file without reading it: whether it changed.
        let about = format!(
            r#"{{"format":"{}","modified_unix_ms":{}}}"#,
            format_of(&path).map_or("", Format::name),
            modified.map_or(0, |d| d.as_millis())
        );
        Ok(FlightInfo::new()
            .try_with_schema(&schema)?
            .with_descriptor(FlightDescriptor::new_path(vec![name.to_string()]))
            .with_endpoint(self.tickets.endpoint(name))
            .with_total_records(rows)
            .with_total_bytes(bytes)
            .with_ordered(true)
            .with_app_metadata(about))
    }

    /// Every servable file below the root, as relative names, sorted.
    fn names(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let Ok(kind) = e.file_type() else { continue };
                let path = e.path();
                let hidden = e.file_name().to_string_lossy().starts_with('.');
                if kind.is_dir() && !hidden {
                    stack.push(path);
                } else if kind.is_file()
                    && !hidden
                    && format_of(&path).is_some()
                    && let Some(rel) = path.strip_prefix(&self.root).ok().and_then(|p| p.to_str())
                {
                    out.push(rel.to_string());
                }
            }
        }
        out.sort();
        out
    }
}

impl Handler for DirService {
    fn list_flights(&self, criteria: &[u8]) -> Result<Vec<FlightInfo>> {
        let prefix = String::from_utf8_lossy(criteria);
        // A file that cannot be read is left out of the listing rather than failing it.
        Ok(self.names().iter().filter(|n| n.starts_with(&*prefix)).filter_map(|n| self.info(n).ok()).collect())
    }

    fn get_flight_info(&self, descriptor: &FlightDescriptor) -> Result<FlightInfo> {
        self.info(&Self::name_of(descriptor)?)
    }

    fn get_schema(&self, descriptor: &FlightDescriptor) -> Result<SchemaRef> {
        let name = Self::name_of(descriptor)?;
        let path = self.resolve(&name)?;
        match self.hit(&path, &name)? {
            Some(t) => Ok(t.schema),
            None => Ok(open(&path, &name)?.0),
        }
    }

    fn do_get(&self, ticket: &[u8]) -> Result<Output> {
        let name = self.tickets.redeem(ticket)?;
        Ok(self.read(&self.resolve(&name)?, &name)?.with_options(self.options))
    }

    fn gauges(&self) -> Vec<Gauge> {
        let (bytes, tables) = self.cache.as_ref().map_or((0, 0), |c| c.held());
        vec![
            Gauge {
                name: "wirespeed_serve_cache_bytes",
                help: "Bytes of decoded tables the cache holds",
                value: bytes as f64,
            },
            Gauge { name: "wirespeed_serve_cache_tables", help: "Tables the cache holds", value: tables as f64 },
            Gauge {
                name: "wirespeed_serve_uploads",
                help: "Uploads in progress (part files being written)",
                value: self.uploads.load(Ordering::Relaxed) as f64,
            },
        ]
    }

    /// A file's FlightInfo is ready when asked for: nothing runs to cancel.
    fn cancel_flight_info(&self, _request: &CancelFlightInfoRequest) -> Result<CancelFlightInfoResult> {
        Ok(CancelFlightInfoResult::new(CancelStatus::NotCancellable))
    }

    fn renew_flight_endpoint(&self, request: &RenewFlightEndpointRequest) -> Result<FlightEndpoint> {
        let endpoint =
            request.endpoint.as_ref().ok_or_else(|| Error::invalid_argument("the request has no endpoint"))?;
        self.tickets.renew(endpoint)
    }

    fn do_put(&self, descriptor: &FlightDescriptor, schema: &SchemaRef) -> Result<Box<dyn Upload>> {
        let name = Self::name_of(descriptor)?;
        if too_long(&name) {
            return Err(Error::invalid_argument(format!("{}: longer than a file's name can be", Quote::str(&name))));
        }
        let dest = self.resolve(&name)?;
        let format = format_of(&dest).ok_or_else(|| {
            Error::invalid_argument(format!("{}: name it .arrow, .feather, .arrows or .parquet", Quote::str(&name)))
        })?;
        Ok(Box::new(DirUpload::start(&name, &dest, format, schema, &self.uploads)?))
    }
}
