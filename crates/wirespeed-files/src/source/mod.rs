//! The sending side. The walking thread sends entries on the control stream, small files
//! inline and batched; the sink answers each large file with a `Want`, which becomes chunk
//! jobs that several threads read, checksum and send, each on its own data stream.

mod batch;
mod data;

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::Duration;

use wirespeed::Connection;

use crate::Summary;
use crate::direct::{self};
use crate::error::{FilesError, Result};
use crate::exclude::Excludes;
use crate::link::{self, Link, Wrapping};
use crate::open_files::{Held, OpenFiles};
use crate::progress::Progress;
use crate::proto::{self, Entry, Kind, Msg, STREAMED, Violation};
use crate::shared::Shared;
use crate::walk::{self, Found, Walk};

use self::batch::{Batch, Small};
use self::data::serve_jobs;
use wirespeed::sync::Unpoison;

/// Files up to this size travel inline with their entries.
pub(crate) const INLINE_MAX: u64 = 64 << 10;

/// What the source end does, as `cp` and `send` take it.
#[derive(Clone, Debug)]
pub struct SourceOptions {
    /// Copy directories and what they hold (`-r`).
    pub recursive: bool,
    /// Keep modification times and permissions (`-p`).
    pub preserve: bool,
    /// Send only what the destination lacks of files it has in part (`--resume`).
    pub resume: bool,
    /// Leave files the destination has with the same size and modification time as they are.
    pub sync: bool,
    /// Leave whatever exists at the destination as it is.
    pub no_clobber: bool,
    /// Remove what the destination's copies of the directories hold beyond the source's.
    pub delete: bool,
    /// Data streams, each with its own reading thread (and a writing thread at the sink);
    /// `None` for as many as suit the connection's fabric.
    pub streams: Option<usize>,
    /// Bytes per chunk, each checksummed on its own.
    pub chunk_size: u32,
    /// Most file bytes per second over all streams (`--bwlimit`); `None` for no limit.
    pub rate_limit: Option<u64>,
    /// zstd level for bodies (`--compress zstd`); `None` sends them as they are.
    pub compress: Option<i32>,
    /// Seal everything (`--encrypt`), and require the sink to.
    pub encrypt: bool,
    /// How long the transfer may stand still before it fails.
    pub stall_timeout: Duration,
    /// Read large files with direct I/O, past the page cache (`--direct`).
    pub direct: bool,
    /// What the walk leaves out (`--exclude`).
    pub exclude: Excludes,
    /// Send entries only: the sink says what it would do (`--dry-run`).
    pub dry_run: bool,
}

impl Default for SourceOptions {
    fn default() -> Self {
        SourceOptions {
            recursive: false,
            preserve: false,
            resume: false,
            sync: false,
            no_clobber: false,
            delete: false,
            streams: None,
            chunk_size: 4 << 20,
            rate_limit: None,
            compress: None,
            encrypt: false,
            stall_timeout: crate::STALL_TIMEOUT,
            direct: false,
            exclude: Excludes::default(),
            dry_run: false,
        }
    }
}

/// One stream per core, at most 4. Each stream keeps a thread busy on both ends, and more
/// of them than cores only contend: on 2 cores, 4 streams copied a file over shared memory
/// at half the speed of 2. Writes into one file serialise in the kernel anyway. Over shared
/// memory both ends run on this host's cores, so half as many: there, on 2 cores, one
/// stream copied 2 GiB to tmpfs in 0.93 s and two in 1.02 s.
fn default_streams(conn: &Connection) -> usize {
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    let cores = if conn.fills_in_place() { cores / 2 } else { cores };
    cores.clamp(1, 4)
}

/// What to send.
#[derive(Clone, Debug)]
pub enum Input {
    /// One file or directory.
    Path(PathBuf),
    /// Several paths, each landing under its own name in the destination, which is (or
    /// becomes) a directory, as with `cp a b dir/` and `rsync a b dir/`.
    Paths(Vec<PathBuf>),
    /// A byte stream (standard input, a command's output), as one file of unknown length.
    Reader(Shared<Box<dyn Read + Send>>),
}

impl Input {
    /// A single path as itself; several, each under its own name.
    pub fn paths(mut paths: Vec<PathBuf>) -> Self {
        match paths.len() {
            1 => Input::Path(paths.remove(0)),
            _ => Input::Paths(paths),
        }
    }

    /// This process's standard input, as one file.
    pub fn stdin() -> Self {
        Input::reader(std::io::stdin())
    }

    /// Any reader, as one file.
    pub fn reader(r: impl Read + Send + 'static) -> Self {
        Input::Reader(Shared::new(Box::new(r)))
    }
}

/// A large file waiting for, or being served to, the sink.
struct SrcFile {
    id: u64,
    path: PathBuf,
    /// `None` for standard input.
    file: Option<File>,
    size: u64,
    sparse: bool,
    /// With `--direct`, the file opened for direct reads (`None`: its filesystem refuses).
    direct: OnceLock<Option<File>>,
    _held: Option<Held>,
}

impl SrcFile {
    /// The descriptor for direct reads, if `--direct` asked for them and this file gets them.
    fn direct(&self, sh: &State) -> Option<&File> {
        let file = self.file.as_ref().filter(|_| sh.direct && self.size >= direct::MIN_SIZE)?;
        self.direct.get_or_init(|| direct::reopen(file, false)).as_ref()
    }
}

enum Job {
    Chunk {
        file: Arc<SrcFile>,
        index: u32,
        have: Option<u128>,
    },
    /// All chunks in order on one stream.
    Whole(Arc<SrcFile>),
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// Files sent without inline bytes, once the walk is over.
    asks: Option<u64>,
    wants: u64,
}

struct State<'a> {
    /// The byte stream being sent, if that is the input.
    reader: Option<&'a Shared<Box<dyn Read + Send>>>,
    wrapping: &'a Arc<Wrapping>,
    chunk: u64,
    /// Bytes per second for each stream.
    stream_rate: Option<u64>,
    /// How long the transfer may stand still.
    stall: Duration,
    progress: &'a Progress,
    /// The connection's frames are filled in place (a shared ring).
    in_place: bool,
    /// Read large files with direct I/O.
    direct: bool,
    waiting: Mutex<HashMap<u64, Arc<SrcFile>>>,
    open_files: Arc<OpenFiles>,
    queue: Mutex<Queue>,
    ready: Condvar,
    failed: AtomicBool,
}

impl State<'_> {
    fn stop(&self) {
        self.failed.store(true, Ordering::Relaxed);
        self.ready.notify_all();
    }

    /// The next job, or `None` once every wanted file is handed out (or the transfer failed).
    fn next_job(&self) -> Option<Job> {
        let mut q = self.queue.lock().unpoison();
        loop {
            if self.failed.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(job) = q.jobs.pop_front() {
                return Some(job);
            }
            if q.asks == Some(q.wants) {
                return None;
            }
            q = self.ready.wait(q).unpoison();
        }
    }
}

/// Sends `input` to the sink at the other end of `control`, and returns once the sink has
/// written, verified and renamed everything.
pub(crate) fn run_source(
    conn: &Connection,
    control: &Link,
    wrapping: &Arc<Wrapping>,
    input: &Input,
    opts: &SourceOptions,
    progress: &Progress,
) -> Result<Summary> {
    let streams = opts.streams.unwrap_or_else(|| default_streams(conn)).max(1);
    let shared = State {
        reader: match input {
            Input::Reader(r) => Some(r),
            Input::Path(_) | Input::Paths(_) => None,
        },
        wrapping,
        chunk: opts.chunk_size as u64,
        stream_rate: opts.rate_limit.map(|r| (r / streams as u64).max(1)),
        stall: opts.stall_timeout,
        progress,
        in_place: conn.fills_in_place(),
        direct: opts.direct,
        waiting: Mutex::new(HashMap::new()),
        open_files: OpenFiles::new(),
        queue: Mutex::new(Queue::default()),
        ready: Condvar::new(),
        failed: AtomicBool::new(false),
    };
    let (root_name, root_kind) = match input {
        Input::Path(p) => (crate::root_name(p)?, if p.is_dir() { Kind::Dir } else { Kind::File }),
        // No name: the roots are entries of the destination directory itself.
        Input::Paths(_) => (Vec::new(), Kind::Dir),
        Input::Reader(_) => (b"stdin".to_vec(), Kind::File),
    };
    let flags = [
        (opts.preserve, proto::PRESERVE),
        (opts.resume, proto::RESUME),
        (opts.sync, proto::SYNC),
        (opts.no_clobber, proto::NO_CLOBBER),
        (opts.delete, proto::DELETE),
        (opts.dry_run, proto::DRY_RUN),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .fold(0, |flags, (_, flag)| flags | flag);
    let begin = Msg::Begin {
        version: proto::VERSION,
        flags,
        chunk_size: opts.chunk_size,
        root_name: root_name.clone(),
        root_kind,
    };
    control.send(&begin, &[])?;
    // Only a deleting sink needs the patterns: it leaves what they match alone.
    if opts.delete && !opts.exclude.is_empty() {
        control.send(&Msg::Exclude(opts.exclude.patterns().to_vec()), &[])?;
    }

    thread::scope(|s| {
        let reader = s.spawn(|| read_control(control, &shared));
        let workers: Vec<_> = (0..streams).map(|_| s.spawn(|| serve_jobs(conn, &shared))).collect();
        let mut result = send_entries(control, input, &root_name, opts, &shared);
        if result.is_err() {
            shared.stop();
        }
        for w in workers {
            let r = w.join().unwrap_or(Err(FilesError::Internal("a reading thread panicked")));
            if let Err(e) = r {
                result = first_cause(result, e);
            }
        }
        let join = |h: thread::ScopedJoinHandle<'_, Result<Summary>>| {
            h.join().unwrap_or(Err(FilesError::Internal("the control thread panicked")))
        };
        let mut reader = Some(reader);
        if matches!(result, Err(FilesError::Stopped))
            && let Some(h) = reader.take()
        {
            // Only the control reader is left to have stopped us; it has ended with the cause.
            result = Err(join(h).err().unwrap_or(FilesError::Stopped));
        }
        match (result, reader) {
            (Ok((files, bytes)), Some(h)) => {
                control.send(&Msg::End { files, bytes }, &[])?;
                join(h)
            }
            (Ok(_), None) => Err(FilesError::Stopped),
            (Err(e), reader) => {
                // Remote failures need no echo; ours the sink must hear, which also makes it
                // drop the connection and so ends our control reader.
                if !matches!(e, FilesError::Remote { .. }) {
                    control.fail(&e);
                }
                match reader {
                    // The sink cancelled a stream because it failed: its account of why is
                    // on its way to our control reader.
                    Some(h) if e.is_peer_cancel() => first_cause(Err(e), join(h).err().unwrap_or(FilesError::Stopped)),
                    _ => Err(e),
                }
            }
        }
    })
}

/// `current`, unless `e` tells better why the transfer failed: a thread that stopped
/// because another failed does not know the cause.
fn first_cause<T>(current: Result<T>, e: FilesError) -> Result<T> {
    match current {
        Ok(_) => Err(e),
        Err(c) => Err(c.or_cause(e)),
    }
}

/// Walks the input and sends its entries; returns the files and bytes it covers.
fn send_entries(
    control: &Link,
    input: &Input,
    top_name: &[u8],
    opts: &SourceOptions,
    shared: &State,
) -> Result<(u64, u64)> {
    let mut batch = Batch::new();
    // Small files whose bytes storage is still reading, oldest first; at most this many
    // before the walk waits for the oldest.
    let mut reading: VecDeque<Small> = VecDeque::new();
    let reading_max = shared.open_files.small_reads();
    let (mut files, mut bytes, mut asks) = (0u64, 0u64, 0u64);
    let mut visit = |found: Found| -> Result<()> {
        if shared.failed.load(Ordering::Relaxed) {
            return Err(FilesError::Stopped);
        }
        let Found { path, entry, file } = found;
        files += u64::from(entry.kind == Kind::File);
        match file {
            // A dry run reads no file: the sink answers each with what it would do.
            Some(file) if entry.kind == Kind::File && entry.size <= INLINE_MAX && !opts.dry_run => {
                // The oldest still being read has had the longest to arrive: take it if it has.
                if let Some(oldest) = reading.pop_front() {
                    let wait = reading.len() + 1 >= reading_max;
                    if let Some(oldest) = batch.add_small(oldest, wait, shared.progress)? {
                        reading.push_front(oldest);
                    }
                }
                if let Some(small) = batch.add_small(Small { path, entry, file }, false, shared.progress)? {
                    reading.push_back(small);
                }
            }
            file => {
                if entry.kind == Kind::File {
                    asks += 1;
                    // Only an open file takes a slot (standard input has none).
                    let held = match file.as_ref().map(|_| shared.open_files.try_hold()) {
                        None => None,
                        Some(Some(h)) => Some(h),
                        Some(None) => {
                            // The sink asks only for files it has heard of: send those first.
                            batch.flush(control, shared.progress)?;
                            Some(shared.open_files.hold(&shared.failed)?)
                        }
                    };
                    let src = SrcFile {
                        id: entry.id,
                        path,
                        file,
                        size: entry.size,
                        sparse: entry.sparse,
                        direct: OnceLock::new(),
                        _held: held,
                    };
                    shared.waiting.lock().unpoison().insert(entry.id, Arc::new(src));
                    if entry.size != STREAMED {
                        bytes += entry.size;
                        shared.progress.add_total(entry.size);
                    }
                }
                batch.push(entry);
            }
        }
        if batch.full() {
            batch.flush(control, shared.progress)?;
        }
        Ok(())
    };
    match input {
        Input::Path(p) => {
            let how = Walk { recursive: opts.recursive, excludes: &opts.exclude, top: top_name };
            walk::walk(p, Vec::new(), &mut 0, &how, &mut visit)?
        }
        Input::Paths(roots) => {
            let (mut next_id, how) = (0, Walk { recursive: opts.recursive, excludes: &opts.exclude, top: b"" });
            for (root, name) in roots.iter().zip(crate::root_names(roots)?) {
                walk::walk(root, name, &mut next_id, &how, &mut visit)?;
            }
        }
        Input::Reader(_) => visit(Found { path: PathBuf::from("-"), entry: stream_entry(), file: None })?,
    }
    for small in reading.drain(..) {
        batch.add_small(small, true, shared.progress)?;
        if batch.full() {
            batch.flush(control, shared.progress)?;
        }
    }
    batch.flush(control, shared.progress)?;
    shared.queue.lock().unpoison().asks = Some(asks);
    shared.ready.notify_all();
    Ok((files, bytes + batch.inline_bytes))
}

fn stream_entry() -> Entry {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Entry {
        id: 0,
        kind: Kind::File,
        path: Vec::new(),
        size: STREAMED,
        mode: 0o100644,
        mtime_sec: now.as_secs() as i64,
        mtime_nsec: now.subsec_nanos(),
        sparse: false,
        target: Vec::new(),
        inline: None,
    }
}

/// Reads the sink's wants (turning them into jobs) until its final `Done`.
fn read_control(control: &Link, shared: &State) -> Result<Summary> {
    let r = read_control_inner(control, shared);
    if r.is_err() {
        shared.stop();
    }
    r
}

fn read_control_inner(control: &Link, shared: &State) -> Result<Summary> {
    loop {
        // A streamed input (a command's output) may pause as long as its command is silent.
        let mut moved = shared.progress.mover();
        let Some((msg, _)) = control.recv_while(|| moved() || shared.reader.is_some())? else {
            return Err(Violation::EndedEarly.into());
        };
        match msg {
            Msg::Want { id, ordered, have } => {
                let file = shared.waiting.lock().unpoison().remove(&id);
                let Some(file) = file else {
                    return Err(Violation::NotOffered(id).into());
                };
                let mut q = shared.queue.lock().unpoison();
                q.wants += 1;
                // Chunks for an ordered output spread over the streams, except over a shared
                // ring: there one stream already reads straight into it, and chunks waiting
                // their turn would hold ring space the others need.
                if file.size == STREAMED || (ordered && shared.in_place) {
                    q.jobs.push_back(Job::Whole(file));
                } else {
                    let have: HashMap<u32, u128> = have.into_iter().collect();
                    for index in 0..file.size.div_ceil(shared.chunk) as u32 {
                        q.jobs.push_back(Job::Chunk { file: file.clone(), index, have: have.get(&index).copied() });
                    }
                }
                drop(q);
                shared.ready.notify_all();
            }
            Msg::Keep { id } => {
                let file = shared.waiting.lock().unpoison().remove(&id);
                let Some(file) = file else {
                    return Err(Violation::NotOffered(id).into());
                };
                // Dropping it closes the file, which frees its slot for the walk.
                shared.progress.keep(file.size);
                shared.queue.lock().unpoison().wants += 1;
                shared.ready.notify_all();
            }
            Msg::Done { files, bytes, kept, kept_bytes, deleted } => {
                // Closing the control stream ends the transfer: the sink waits for it before
                // it goes, so its Done is never cut off by its own exit.
                control.close()?;
                return Ok(Summary { files, bytes, kept, kept_bytes, deleted });
            }
            other => return Err(link::unexpected("from a sink", &other)),
        }
    }
}
