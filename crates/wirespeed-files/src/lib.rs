#![deny(missing_docs, unreachable_pub)]
//! wirespeed file transfer: the copy protocol and the two ends that speak it. A source walks
//! files (or reads standard input) and a sink writes them under hidden part names, checks
//! every chunk's checksum and renames each file into place only once all of it verified.
//! Small files travel batched with their entries; large files in chunks over several
//! streams. `--resume` reuses chunks the sink already holds. Connections come from the
//! wirespeed core; [`fabric_choice`] picks the fabric.

mod cached;
mod direct;
mod envelope;
pub mod error;
mod exclude;
pub mod fabric_choice;
mod link;
mod local;
mod open_files;
pub mod part;
pub mod paths;
pub mod progress;
#[doc(hidden)]
pub mod proto;
pub mod remote;
mod shared;
mod sink;
mod source;
mod walk;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wirespeed::{Connection, Stream};

use crate::link::{End, Link, Wrapping};

pub use error::{FilesError, Result};
pub use exclude::Excludes;
pub use fabric_choice::{Ports, Server};
pub use local::copy_local;
pub use progress::Progress;
pub use sink::Output;
pub use source::{Input, SourceOptions};

/// How long a transfer may stand still before it fails, by default. Its control stream is
/// quiet while a large file moves, and the sink may hash a large partial file before it
/// answers; waits on it last this long after the last bytes moved.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(300);

/// What a finished transfer covered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Files the transfer covered.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those, files (and their bytes) the destination already had and kept as they were
    /// (`--sync`, `--no-clobber`).
    pub kept: u64,
    /// See `kept`.
    pub kept_bytes: u64,
    /// Names the destination had and the source did not, removed (`--delete`).
    pub deleted: u64,
}

/// Which end opened the connection. The client opens the control stream; a sink that is
/// the client says `Ready` so the source, which always speaks first, can begin.
pub enum Side {
    /// This end connected: it opens the control stream.
    Client,
    /// The control stream [`Server::accept`] returned.
    Server(Stream),
}

/// Sends `input` over `conn`; returns once the sink has everything in place.
pub fn send(
    conn: &Connection,
    side: Side,
    input: &Input,
    opts: &SourceOptions,
    progress: &Progress,
) -> Result<Summary> {
    let wrapping = Wrapping::new(conn, End::Source, opts.compress, opts.encrypt);
    let mut control = match side {
        Side::Client => Link::new(conn.open_stream()?, &wrapping),
        Side::Server(s) => {
            let s = Link::new(s, &wrapping);
            match s.recv()? {
                Some((proto::Msg::Ready, _)) => {}
                _ => return Err(proto::Violation::Expected { expected: "Ready", got: "something else" }.into()),
            }
            s
        }
    };
    control.set_timeout(opts.stall_timeout);
    source::run_source(conn, &control, &wrapping, input, opts, progress)
}

/// What a receiving end insists on.
#[derive(Clone, Debug)]
pub struct SinkOptions {
    /// Refuse a source that does not encrypt, and encrypt what we send back.
    pub encrypt: bool,
    /// How long the transfer may stand still before it fails.
    pub stall_timeout: Duration,
    /// Let the source have what it did not send removed (`--delete`); a sink that did not ask
    /// for that refuses such a source.
    pub delete: bool,
    /// Write large files with direct I/O, past the page cache (`--direct`).
    pub direct: bool,
    /// Change nothing, and say here what would change (`--dry-run`). A source that asks for
    /// a dry run gets one even without this, with nothing said.
    pub dry_run: Option<Report>,
}

impl Default for SinkOptions {
    fn default() -> Self {
        SinkOptions { encrypt: false, stall_timeout: STALL_TIMEOUT, delete: false, direct: false, dry_run: None }
    }
}

/// Where a dry run says what it would do, a line each: a path it would write (a directory's
/// with a `/` after it, a symlink's with ` -> TARGET`), or `deleting PATH`. Paths are
/// printable: control characters, backslashes and bytes that are not UTF-8 come as `\xNN`.
#[derive(Clone)]
pub struct Report(pub Arc<dyn Fn(&str) + Send + Sync>);

impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Report")
    }
}

/// Receives a transfer over `conn` into `output`.
pub fn receive(
    conn: &Connection,
    side: Side,
    output: &Output,
    opts: &SinkOptions,
    progress: &Progress,
) -> Result<Summary> {
    let wrapping = Wrapping::new(conn, End::Sink, None, opts.encrypt);
    let mut control = match side {
        Side::Client => {
            let s = Link::new(conn.open_stream()?, &wrapping);
            s.send(&proto::Msg::Ready, &[])?;
            s
        }
        Side::Server(s) => Link::new(s, &wrapping),
    };
    control.set_timeout(opts.stall_timeout);
    sink::run_sink(conn, &control, &wrapping, output, opts, progress)
}

/// Whether `roots` can be copied, before anything starts: each exists and is a directory only
/// when `recursive` (the walk checks again), and no two would land under the same name.
pub fn check_roots(roots: &[PathBuf], recursive: bool) -> Result<()> {
    for root in roots {
        walk::check_root(root, recursive)?;
    }
    root_names(roots).map(drop)
}

/// The names several source paths land under in the destination directory, one each.
fn root_names(roots: &[PathBuf]) -> Result<Vec<Vec<u8>>> {
    let names = roots.iter().map(|p| root_name(p)).collect::<Result<Vec<_>>>()?;
    let mut sorted: Vec<_> = names.iter().collect();
    sorted.sort();
    match sorted.windows(2).find(|w| w[0] == w[1]) {
        Some(w) => Err(FilesError::Usage(format!(
            "two sources would both be copied to {:?}; copy them one at a time",
            String::from_utf8_lossy(w[0])
        ))),
        None => Ok(names),
    }
}

/// The name a source path is known by at the sink: its last component (`.` and `..` are
/// resolved first).
fn root_name(p: &Path) -> Result<Vec<u8>> {
    if let Some(name) = p.file_name() {
        return Ok(paths::bytes(name));
    }
    let abs = std::fs::canonicalize(p).map_err(|e| FilesError::io(p, e))?;
    Ok(abs.file_name().map(paths::bytes).unwrap_or_else(|| b"root".to_vec()))
}

/// What the fuzz targets reach that is not public (`cargo fuzz` builds with `--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::envelope::{Place, SealKey, open_body, open_header, wrap};
}
