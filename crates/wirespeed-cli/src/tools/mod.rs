//! The file and pipe tools: `send`, `recv`, `cp`, `pipe`, and the agents `cp` and `pipe`
//! start over ssh.

pub mod agent;
pub mod cp;
pub mod pipe;
pub mod recv;
mod remote;
mod remote_paths;
pub mod send;
pub mod stage;

use std::io::{IsTerminal, Write};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use wirespeed::Config;
use wirespeed::fabric::Choice;
use wirespeed_files::{Excludes, Progress, Report, SinkOptions, SourceOptions, Summary};

/// Options every tool shares.
#[derive(Args, Clone, Debug)]
pub struct Common {
    /// Fabric: auto (shared memory on one host, else TCP), tcp, shm, ucx or ofi+<provider>
    /// (ofi+tcp, ofi+shm, ...: libfabric).
    #[arg(long, default_value = "auto")]
    pub transport: Choice,
    /// Parallel data streams, each with its own I/O thread [default: one per core of the
    /// sending host, at most 4; over shared memory, where both ends share the cores, half].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub streams: Option<u16>,
    /// Print the bandwidth at the end.
    #[arg(short, long)]
    pub verbose: bool,
    /// Limit sending to this many MB/s (10^6 bytes); 0 for no limit.
    #[arg(long, default_value_t = 0.0)]
    pub bwlimit: f64,
    /// Compress data on the way: `zstd` (level 3) or `zstd:LEVEL` (1 to 19); `none`.
    #[arg(long, default_value = "none", value_parser = parse_compress, value_name = "zstd[:LEVEL]")]
    pub compress: Compress,
    /// Encrypt everything with AES-256-GCM under a key of this transfer's own; a receiver
    /// with --encrypt refuses a sender without it.
    #[arg(long)]
    pub encrypt: bool,
    /// Read and write files of 1 MiB and more with direct I/O (O_DIRECT), past the page
    /// cache, where the filesystem allows it: for data bigger than memory, and to leave the
    /// cache to other programs.
    #[arg(long)]
    pub direct: bool,
    /// Fail once the peer's host has been silent this many seconds (a peer whose host still
    /// answers is waited for, however long its program pauses) [default: 90, or
    /// WIRESPEED_PEER_TIMEOUT].
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub peer_timeout: Option<u64>,
}

/// `--compress`: a zstd level, or none.
#[derive(Clone, Copy, Debug)]
pub struct Compress(pub Option<i32>);

fn parse_compress(s: &str) -> Result<Compress, String> {
    match s.split_once(':') {
        _ if s == "none" => Ok(Compress(None)),
        _ if s == "zstd" => Ok(Compress(Some(3))),
        Some(("zstd", level)) => match level.parse() {
            Ok(n @ 1..=19) => Ok(Compress(Some(n))),
            _ => Err(format!("zstd level {level:?} is not between 1 and 19")),
        },
        _ => Err(format!("unknown compression {s:?} (expected none, zstd or zstd:LEVEL)")),
    }
}

/// What `cp` (and the agent it starts) copies and keeps.
#[derive(Args, Clone, Debug, Default)]
pub struct CopyFlags {
    /// Copy directories and everything in them.
    #[arg(short, long)]
    pub recursive: bool,
    /// Keep modes and modification times.
    #[arg(short, long)]
    pub preserve: bool,
    /// Continue an interrupted copy: chunks already at the destination whose checksums
    /// match are not sent again.
    #[arg(long)]
    pub resume: bool,
    /// Leave files the destination has with the same size and modification time as they
    /// are, as rsync does; implies -p, so that the next run finds them.
    #[arg(long)]
    pub sync: bool,
    /// Never replace a file or symlink that exists at the destination.
    #[arg(short = 'n', long)]
    pub no_clobber: bool,
    /// Remove what the destination holds in the copied directories that the source does not,
    /// as rsync --delete does, once everything else is in place.
    #[arg(long, requires = "recursive")]
    pub delete: bool,
    /// Leave out what matches PATTERN, as rsync --exclude does: `*.tmp` (a name at any depth),
    /// `/tree/logs` (anchored at the copied root), `cache/` (directories only); may be
    /// repeated. With --delete, what matches at the destination stays.
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
    /// Read --exclude patterns from FILE, one a line; blank lines and lines starting with `#`
    /// or `;` are skipped, as with rsync; may be repeated.
    #[arg(long, value_name = "FILE")]
    pub exclude_from: Vec<std::path::PathBuf>,
    /// Change nothing: list what would be copied (a directory with `/` after it), and with
    /// --delete what would be deleted, as rsync --dry-run does. No file's bytes are read.
    #[arg(long)]
    pub dry_run: bool,
}

impl CopyFlags {
    /// Moves the patterns of `--exclude-from` files into `exclude`, so that agents get them
    /// as plain `--exclude` arguments.
    pub fn read_exclude_files(&mut self) -> anyhow::Result<()> {
        for file in std::mem::take(&mut self.exclude_from) {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read the exclude patterns in {}", file.display()))?;
            let lines = text.lines().map(str::trim_end).filter(|l| !l.is_empty() && !l.starts_with(['#', ';']));
            self.exclude.extend(lines.map(str::to_string));
        }
        Ok(())
    }
}

impl Common {
    /// The connections' settings: the default's, with `--peer-timeout`.
    pub fn config(&self) -> Config {
        let default = Config::default();
        let peer_timeout = self.peer_timeout.map_or(default.peer_timeout, Duration::from_secs);
        Config { peer_timeout, ..default }
    }

    /// A source's options; fails on a bad `--exclude` pattern.
    pub fn source_options(&self, f: &CopyFlags) -> wirespeed_files::Result<SourceOptions> {
        Ok(SourceOptions {
            recursive: f.recursive,
            preserve: f.preserve || f.sync,
            resume: f.resume,
            sync: f.sync,
            no_clobber: f.no_clobber,
            delete: f.delete,
            streams: self.streams.map(usize::from),
            rate_limit: (self.bwlimit > 0.0).then_some((self.bwlimit * 1e6) as u64),
            compress: self.compress.0,
            encrypt: self.encrypt,
            direct: self.direct,
            exclude: Excludes::new(&f.exclude)?,
            dry_run: f.dry_run,
            ..SourceOptions::default()
        })
    }

    /// A sink's options; it allows `--delete` only when its own flags ask for it. A dry run
    /// lists on standard output.
    pub fn sink_options(&self, f: &CopyFlags) -> SinkOptions {
        SinkOptions {
            encrypt: self.encrypt,
            delete: f.delete,
            direct: self.direct,
            dry_run: f.dry_run.then(|| list_on_stdout("")),
            ..SinkOptions::default()
        }
    }
}

/// A dry run's report: each line on standard output after `prefix`. A reader that went away
/// (`| head`) loses the rest, and nothing else.
pub fn list_on_stdout(prefix: &'static str) -> Report {
    Report(Arc::new(move |line: &str| {
        let _ = writeln!(std::io::stdout().lock(), "{prefix}{line}");
    }))
}

/// Runs `f` with a progress bar on stderr when stderr is a terminal; a pipe gets silence.
/// Afterwards prints `Bandwidth X GB/s` if `verbose`.
pub fn with_progress<T>(
    progress: &Progress,
    verbose: bool,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<(T, Duration)> {
    let start = Instant::now();
    let (done, finished) = mpsc::channel::<()>();
    let r = std::thread::scope(|s| {
        if std::io::stderr().is_terminal() {
            s.spawn(|| draw(progress, finished));
        }
        let r = f();
        // Dropping the sender wakes the bar at once, so it never holds up the end.
        drop(done);
        r
    });
    let elapsed = start.elapsed();
    let r = r?;
    if verbose {
        let (bytes, _, _) = progress.get();
        eprintln!("Bandwidth {:.3} GB/s", bytes as f64 / elapsed.as_secs_f64() / 1e9);
    }
    Ok((r, elapsed))
}

fn draw(progress: &Progress, finished: mpsc::Receiver<()>) {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    while finished.recv_timeout(Duration::from_millis(100)) == Err(mpsc::RecvTimeoutError::Timeout) {
        let (bytes, total, _) = progress.get();
        bar.set_length(total.max(bytes));
        bar.set_position(bytes);
    }
    bar.finish_and_clear();
}

/// The line a dry run ends with.
pub fn dry_run_line(s: &Summary) -> String {
    let (files, bytes) = (s.files.saturating_sub(s.kept), s.bytes.saturating_sub(s.kept_bytes));
    format!(
        "dry run: {files} files ({bytes} bytes) would be copied, {} kept, {} deleted; nothing changed",
        s.kept, s.deleted
    )
}

/// The line `cp` ends with; `reused` counts bytes `--resume` did not send again. The rate
/// leaves out files kept as they were, which took no time to move.
pub fn summary_line(s: &Summary, reused: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let reused = if reused > 0 { format!(" ({reused} already in place)") } else { String::new() };
    let kept = if s.kept > 0 {
        format!(", {} files ({} bytes) kept as they were", s.kept, s.kept_bytes)
    } else {
        String::new()
    };
    let deleted = if s.deleted > 0 { format!(", {} deleted", s.deleted) } else { String::new() };
    let rate = s.bytes.saturating_sub(s.kept_bytes) as f64 / secs.max(1e-9) / 1e9;
    format!("{} files, {} bytes{reused}{kept}{deleted} in {secs:.2} s, {rate:.3} GB/s", s.files, s.bytes)
}
