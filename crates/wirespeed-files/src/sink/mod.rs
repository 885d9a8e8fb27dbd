//! The receiving side. The control thread creates directories and symlinks, hands inline
//! files to a few writing threads ([`inline`]), and asks for each large file with a `Want`
//! (listing, with `--resume`, the checksums of chunks it already holds). A thread per data
//! stream checks and writes chunks into the file's hidden part file; the last chunk renames
//! it into place. A tree copied to a new name is built under a hidden name of its own
//! ([`fresh`]).

mod fresh;
mod inline;

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use twox_hash::XxHash3_128;
use wirespeed::Connection;

use self::fresh::FreshTree;
use crate::chunks::ChunkSet;
use crate::direct::{self, AlignedBuf, Gather};
use crate::error::{FilesError, Result};
use crate::exclude::{Excludes, top_path};
use crate::link::{self, Body, Link, Wrapping};
use crate::paths::{join_under, part_path, printable};
use crate::progress::Progress;
use crate::proto::{self, Entry, Kind, Msg, STREAMED};
use crate::shared::Shared;
use crate::{Report, SinkOptions, Summary};

/// Where received data goes.
#[derive(Clone, Debug)]
pub enum Output {
    /// Into this path, or into it as a directory if it is one.
    Path(PathBuf),
    /// A byte stream (standard output, a command's input); only a single file can go there.
    Writer(Shared<Box<dyn Write + Send>>),
}

impl Output {
    pub fn stdout() -> Self {
        Output::writer(std::io::stdout())
    }

    pub fn writer(w: impl Write + Send + 'static) -> Self {
        Output::Writer(Shared::new(Box::new(w)))
    }
}

const BLOCK: usize = 4096;
/// Most bytes of a chunk gathered for one direct write.
const GATHER_MAX: usize = 16 << 20;
/// How often a chunk waiting for its turn looks whether the transfer failed.
const TURN_POLL: Duration = Duration::from_millis(100);

/// A large file being received.
struct SinkFile {
    entry: Entry,
    dest: PathBuf,
    part: PathBuf,
    /// The part file, opened when the first bytes arrive.
    out: Mutex<Option<Arc<PartFile>>>,
    /// With `--resume` the part file may start as a copy of an existing destination,
    base: Option<PathBuf>,
    /// or as the part file an interrupted copy left, kept rather than truncated.
    resumed_part: bool,
    state: Mutex<Chunks>,
    /// Signalled as a stream output moves on to its next chunk.
    turn: Condvar,
}

/// A part file being written, and with `--direct` the same file opened for direct writes
/// (`None` where its filesystem refuses them).
struct PartFile {
    file: File,
    direct: Option<File>,
}

impl SinkFile {
    /// The part file, opened (or, with `--resume`, copied from the destination) on first
    /// use; `None` when writing to standard output.
    fn part_file(&self, sh: &State) -> Result<Option<Arc<PartFile>>> {
        if sh.stream.is_some() {
            return Ok(None);
        }
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        if out.is_none() {
            if let Some(base) = &self.base {
                fs::copy(base, &self.part).map_err(|e| FilesError::io(&self.part, e))?;
            }
            let file = self.open_part()?;
            let direct = (sh.direct && self.entry.size >= direct::MIN_SIZE).then(|| direct::reopen(&file, true));
            *out = Some(Arc::new(PartFile { file, direct: direct.flatten() }));
        }
        Ok(out.clone())
    }

    /// The part file, emptied unless it carries chunks over from an interrupted copy.
    fn open_part(&self) -> Result<File> {
        open_part(&self.part, &self.dest, &self.entry, self.base.is_none() && !self.resumed_part)
    }

    /// Waits until chunk `index` is the next a stream output writes: the chunks of a file of
    /// known size may come over any data stream, so each waits for its turn, unread. Those
    /// of a streamed file come in order on one stream, and any other order is an error.
    fn wait_turn(&self, index: u32, sh: &State) -> Result<()> {
        let streamed = self.entry.size == STREAMED;
        let bad = |why: &str| FilesError::Protocol(format!("{}: chunk {index} {why}", self.dest.display()));
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // When the file last moved on; it may stall no longer than the stall timeout.
        let mut moved = (st.next, Instant::now());
        while index != st.next {
            if streamed || index < st.next {
                return Err(bad("is out of order"));
            }
            if st.next != moved.0 {
                moved = (st.next, Instant::now());
            } else if moved.1.elapsed() >= sh.stall {
                return Err(bad("waited too long for the chunks before it"));
            }
            if sh.over.load(Ordering::Relaxed) || sh.failed.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
                return Err(FilesError::Stopped);
            }
            st = self.turn.wait_timeout(st, TURN_POLL).unwrap_or_else(|p| p.into_inner()).0;
        }
        Ok(())
    }

    /// A stream output's chunk is written: the next may go.
    fn pass_turn(&self) {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).next += 1;
        self.turn.notify_all();
    }
}

struct Chunks {
    /// Chunks the file has (0 for a streamed file), those taken by a stream and those written.
    total: u64,
    seen: ChunkSet,
    written: u64,
    /// The chunk a stream output writes next.
    next: u32,
    /// Finished (renamed into place): a second finish is the peer's error.
    finished: bool,
}

struct State<'a> {
    wrapping: &'a Arc<Wrapping>,
    chunk: u64,
    preserve: bool,
    resume: bool,
    sync: bool,
    no_clobber: bool,
    delete: bool,
    /// Write large files with direct I/O.
    direct: bool,
    /// Building a new tree under its part name: small files go straight under their names.
    fresh: bool,
    /// A dry run: change nothing, say what would change.
    dry: Option<Report>,
    /// Where a single file goes in order instead of into a part file.
    stream: Option<Shared<Box<dyn Write + Send>>>,
    progress: &'a Progress,
    /// How long the transfer may stand still: no chunk, on any stream, for this long.
    stall: Duration,
    /// Streamed files (a command's output) being received: they may pause for as long as
    /// their command is silent, so waits do not time out while one is open.
    streaming: AtomicUsize,
    files: Mutex<HashMap<u64, Arc<SinkFile>>>,
    pending: Mutex<u64>,
    changed: Condvar,
    failed: Mutex<Option<FilesError>>,
    /// The transfer ended or failed: the accepting thread and the inline writers stop.
    over: AtomicBool,
}

impl State<'_> {
    fn fail(&self, e: FilesError) {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        *f = Some(match f.take() {
            Some(first) => first.or_cause(e),
            None => e,
        });
        drop(f);
        self.changed.notify_all();
    }

    /// For waits that renew while the transfer lives: bytes moved since the last look, or a
    /// streamed file is open.
    fn alive(&self) -> impl FnMut() -> bool + '_ {
        let mut moved = self.progress.mover();
        move || moved() || self.streaming.load(Ordering::Relaxed) > 0
    }

    /// In a dry run, says that `dest` would be written (`more` follows its name).
    fn say(&self, dest: &Path, more: &str) {
        if let Some(report) = &self.dry {
            report.0(&format!("{}{more}", printable(dest.as_os_str().as_bytes())));
        }
    }

    fn take_failure(&self) -> Option<FilesError> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Receives a transfer from the source at the other end of `control` into `output`.
pub fn run_sink(
    conn: &Connection,
    control: &Link,
    wrapping: &Arc<Wrapping>,
    output: &Output,
    opts: &SinkOptions,
    progress: &Progress,
) -> Result<Summary> {
    let r = receive(conn, control, wrapping, output, opts, progress);
    if let Err(e) = &r
        && !matches!(e, FilesError::Remote { .. })
    {
        control.fail(e);
    }
    r
}

fn receive(
    conn: &Connection,
    control: &Link,
    wrapping: &Arc<Wrapping>,
    output: &Output,
    opts: &SinkOptions,
    progress: &Progress,
) -> Result<Summary> {
    let Some((Msg::Begin { version, flags, chunk_size, root_name, root_kind }, _)) = control.recv()? else {
        return Err(FilesError::Protocol("expected Begin".into()));
    };
    if version != proto::VERSION {
        return Err(FilesError::Protocol(format!(
            "copy protocol version {version}; this side speaks {}",
            proto::VERSION
        )));
    }
    if !(64 << 10..=256 << 20).contains(&chunk_size) {
        return Err(FilesError::Protocol(format!("chunk size {chunk_size} is out of range")));
    }
    if flags & !proto::FLAGS != 0 {
        return Err(FilesError::Protocol(format!("unknown copy flags {:#x}", flags & !proto::FLAGS)));
    }
    if flags & proto::DELETE != 0 && !opts.delete {
        return Err(FilesError::Usage(
            "the sender asks to delete what it does not send; only a receiver started with --delete allows that".into(),
        ));
    }
    // Standard output, or a device or pipe such as /dev/null: written in order, in place.
    let stream: Option<Shared<Box<dyn Write + Send>>> = match output {
        Output::Writer(w) => Some(w.clone()),
        Output::Path(p) if fs::metadata(p).is_ok_and(|m| !m.is_dir() && !m.is_file()) => {
            Some(Shared::new(Box::new(OpenOptions::new().write(true).open(p).map_err(|e| FilesError::io(p, e))?)))
        }
        Output::Path(_) => None,
    };
    let root = match output {
        _ if stream.is_some() && root_kind != Kind::File => {
            return Err(FilesError::Usage("only a single file can be written to a stream or device".into()));
        }
        Output::Writer(_) => PathBuf::new(),
        _ if stream.is_some() => PathBuf::new(),
        // Into an existing directory, as `cp` does; the name must be one plain component.
        // Several sources come without one: their roots are entries of the directory itself.
        Output::Path(p) if p.is_dir() => join_under(p, &root_name)
            .ok()
            .filter(|_| !root_name.contains(&b'/'))
            .ok_or_else(|| FilesError::UnsafePath(String::from_utf8_lossy(&root_name).into_owned()))?,
        // `DIR/` names a directory: a file never takes that name, as with `cp`.
        Output::Path(p) if root_kind != Kind::Dir && p.as_os_str().as_bytes().ends_with(b"/") => {
            return Err(FilesError::io(p, std::io::Error::from_raw_os_error(libc::ENOTDIR)));
        }
        Output::Path(p) => p.clone(),
    };
    let resume = flags & proto::RESUME != 0;
    // Either end may ask for a dry run; only ours says what it would do.
    let dry = match &opts.dry_run {
        Some(report) => Some(report.clone()),
        None if flags & proto::DRY_RUN != 0 => Some(Report(Arc::new(|_: &str| {}))),
        None => None,
    };
    let tree = match stream {
        None if root_kind == Kind::Dir && dry.is_none() => FreshTree::begin(&root, resume)?,
        _ => None,
    };
    let shared = State {
        wrapping,
        chunk: chunk_size as u64,
        preserve: flags & proto::PRESERVE != 0,
        resume,
        sync: flags & proto::SYNC != 0,
        no_clobber: flags & proto::NO_CLOBBER != 0,
        delete: flags & proto::DELETE != 0,
        direct: opts.direct,
        fresh: tree.is_some(),
        dry,
        stream,
        progress,
        stall: opts.stall_timeout,
        streaming: AtomicUsize::new(0),
        files: Mutex::new(HashMap::new()),
        pending: Mutex::new(0),
        changed: Condvar::new(),
        failed: Mutex::new(None),
        over: AtomicBool::new(false),
    };
    let (queue, units) = mpsc::sync_channel(inline::QUEUE);
    let units = Mutex::new(units);
    thread::scope(|s| {
        s.spawn(|| accept_data_streams(conn, &shared, s));
        for _ in 0..inline_writers() {
            s.spawn(|| inline::write_units(&units, &shared));
        }
        let r = control_loop(control, (&root, &root_name), tree, &shared, queue);
        shared.over.store(true, Ordering::Relaxed);
        r
    })
}

/// Threads writing inline files: one per core, as each spends most of its time in the kernel.
fn inline_writers() -> usize {
    thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8))
}

/// Reads the source's entries until its `End`. Inline files go to the writers on `queue`,
/// which closes when this returns.
fn control_loop(
    control: &Link,
    (root, top): (&Path, &[u8]),
    tree: Option<FreshTree>,
    sh: &State,
    queue: mpsc::SyncSender<inline::Unit>,
) -> Result<Summary> {
    let root = tree.as_ref().map_or(root, |t| t.building());
    // What `--delete` leaves alone: the source's `--exclude` patterns, at paths seen from
    // the top (the root's name as the source knows it, then the path below).
    let mut protect = Excludes::default();
    let mut dirs = Vec::new();
    let mut created_links = Vec::new();
    let (mut kept, mut kept_bytes) = (0, 0);
    // With `--delete`, every path the source sent: the rest of its directories goes. So it
    // does in a new tree resumed, where the rest is left from the interrupted copy.
    let prune = sh.delete || (tree.is_some() && sh.resume);
    let mut sent = HashSet::new();
    let mut end = loop {
        let got = control.recv_while(sh.alive());
        if let Some(e) = sh.take_failure() {
            return Err(match got {
                Err(g) => e.or_cause(g),
                Ok(_) => with_cause(control, e),
            });
        }
        let Some((msg, body)) = got? else {
            return Err(FilesError::Protocol("the source ended the control stream early".into()));
        };
        match msg {
            Msg::Entries(entries) => {
                let mut units = inline::Units::new(&queue, body);
                let mut at = 0usize;
                for e in entries {
                    let dest = join_under(root, &e.path)?;
                    if created_links.iter().any(|l: &PathBuf| dest.starts_with(l) && dest != *l) {
                        return Err(FilesError::UnsafePath(String::from_utf8_lossy(&e.path).into_owned()));
                    }
                    if prune {
                        sent.insert(dest.clone());
                    }
                    let keep = keeps(&dest, &e, sh);
                    if keep && e.kind == Kind::File {
                        kept += 1;
                        kept_bytes += e.size;
                        sh.progress.keep(e.size);
                    }
                    if let (Kind::File, Some(sum)) = (e.kind, e.inline) {
                        let end = at.checked_add(e.size as usize).filter(|n| *n <= units.body().len());
                        let end = end.ok_or_else(|| FilesError::Protocol("inline bytes run short".into()))?;
                        match &sh.stream {
                            _ if keep => {}
                            _ if sh.dry.is_some() => sh.say(&dest, ""),
                            Some(out) => write_to_stream(out, &dest, &units.body()[at..end], sum, sh)?,
                            None => units.push(&dest, e, at..end, sh)?,
                        }
                        at = end;
                        continue;
                    }
                    // Whatever else the entries hold happens after the files before it.
                    units.flush(sh)?;
                    match e.kind {
                        Kind::File if keep => control.send(&Msg::Keep { id: e.id }, &[])?,
                        // Nothing is sent: the source offered no bytes.
                        Kind::File if sh.dry.is_some() => {
                            sh.say(&dest, "");
                            control.send(&Msg::Keep { id: e.id }, &[])?
                        }
                        Kind::Dir if sh.dry.is_some() => match fs::symlink_metadata(&dest) {
                            Ok(m) if m.is_dir() || (e.path.is_empty() && dest.is_dir()) => dirs.push((dest, e)),
                            _ => sh.say(&dest, "/"),
                        },
                        Kind::Dir => {
                            make_dir(&dest, e.path.is_empty())?;
                            dirs.push((dest, e));
                        }
                        Kind::Symlink => {
                            match &sh.dry {
                                _ if keep => {}
                                Some(_) => sh.say(&dest, &format!(" -> {}", printable(&e.target))),
                                None => make_symlink(&dest, &e)?,
                            }
                            // Nothing is written through it, kept or made.
                            created_links.push(dest);
                        }
                        Kind::File => ask(control, dest, e, sh)?,
                    }
                }
                units.flush(sh)?;
            }
            Msg::Exclude(patterns) => {
                protect = Excludes::new(&patterns)
                    .map_err(|e| FilesError::Protocol(format!("the source's exclude patterns: {e}")))?;
            }
            Msg::End { files, bytes } => break Summary { files, bytes, kept, kept_bytes, deleted: 0 },
            other => return Err(link::unexpected("from a source", &other)),
        }
    };
    // Wait for the data streams to finish every file. All data was sent before End, so a
    // wait with no progress for a whole timeout means the source left some out.
    let mut pending = sh.pending.lock().unwrap_or_else(|p| p.into_inner());
    let (mut seen, mut since) = (sh.progress.get().0, Instant::now());
    while *pending > 0 {
        if let Some(e) = sh.take_failure() {
            return Err(with_cause(control, e));
        }
        let now = sh.progress.get().0;
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if since.elapsed() > sh.stall {
            return Err(FilesError::Protocol(format!("{} files never arrived in full", *pending)));
        }
        pending = sh.changed.wait_timeout(pending, Duration::from_millis(200)).unwrap_or_else(|p| p.into_inner()).0;
    }
    drop(pending);
    if let Some(e) = sh.take_failure() {
        return Err(e);
    }
    if prune && sh.stream.is_none() {
        // Excluded names are the user's to keep; a resumed new tree's leftovers are not.
        let protected = |path: &Path, is_dir: bool| {
            sh.delete
                && !protect.is_empty()
                && path
                    .strip_prefix(root)
                    .is_ok_and(|rel| protect.excludes(&top_path(top, rel.as_os_str().as_bytes()), is_dir))
        };
        for (dir, _) in &dirs {
            end.deleted += delete_unsent(dir, &sent, protected, sh.dry.as_ref())?;
        }
    }
    // Directory times last, deepest first, as writing inside them changed them.
    if sh.preserve && sh.dry.is_none() {
        for (dir, e) in dirs.iter().rev() {
            set_metadata(None, dir, e)?;
        }
    }
    if let Some(tree) = tree {
        tree.finish()?;
    }
    let Summary { files, bytes, kept, kept_bytes, deleted } = end;
    control.send(&Msg::Done { files, bytes, kept, kept_bytes, deleted }, &[])?;
    // The source ends the control stream once it has read Done; wait for that so exiting
    // now cannot reset the connection under it.
    if control.recv_start()?.is_some() {
        return Err(FilesError::Protocol("the source sent more after Done".into()));
    }
    control.finish()?;
    Ok(end)
}

/// Whether what the destination has at `dest` stays instead of the source's file or symlink:
/// with `--no-clobber`, anything; with `--sync`, a file of the same size and modification
/// time (as rsync's quick check), or a symlink to the same target.
fn keeps(dest: &Path, e: &Entry, sh: &State) -> bool {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    if sh.stream.is_some() || e.kind == Kind::Dir || e.size == STREAMED || !(sh.sync || sh.no_clobber) {
        return false;
    }
    let Ok(m) = fs::symlink_metadata(dest) else { return false };
    sh.no_clobber
        || match e.kind {
            Kind::File => {
                m.is_file() && m.len() == e.size && m.mtime() == e.mtime_sec && m.mtime_nsec() == e.mtime_nsec.into()
            }
            _ => m.is_symlink() && fs::read_link(dest).is_ok_and(|t| t.as_os_str().as_bytes() == e.target),
        }
}

/// Removes what `dir` holds that the source did not send (`--delete`) and `protected` (given
/// whether it is a directory) does not keep; returns how many names went. A directory goes
/// with everything in it; a symlink goes, never what it points to. A dry run says so instead.
fn delete_unsent(
    dir: &Path,
    sent: &HashSet<PathBuf>,
    protected: impl Fn(&Path, bool) -> bool,
    dry: Option<&Report>,
) -> Result<u64> {
    let mut deleted = 0;
    for child in fs::read_dir(dir).map_err(|e| FilesError::io(dir, e))? {
        let path = child.map_err(|e| FilesError::io(dir, e))?.path();
        if sent.contains(&path) {
            continue;
        }
        let is_dir = fs::symlink_metadata(&path).map_err(|e| FilesError::io(&path, e))?.is_dir();
        if protected(&path, is_dir) {
            continue;
        }
        deleted += 1;
        if let Some(report) = dry {
            let path = printable(path.as_os_str().as_bytes());
            report.0(&format!("deleting {path}{}", if is_dir { "/" } else { "" }));
            continue;
        }
        let gone = if is_dir { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
        gone.map_err(|e| FilesError::io(&path, e))?;
    }
    Ok(deleted)
}

/// Creates a directory, or keeps one already there. Below the root an existing symlink is
/// refused: the source must not be able to write through it to elsewhere.
fn make_dir(dest: &Path, is_root: bool) -> Result<()> {
    let existing = if is_root { fs::metadata(dest) } else { fs::symlink_metadata(dest) };
    match fs::create_dir(dest) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && existing.is_ok_and(|m| m.is_dir()) => Ok(()),
        r => r.map_err(|e| FilesError::io(dest, e)),
    }
}

fn make_symlink(dest: &Path, e: &Entry) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let part = part_path(dest);
    let _ = fs::remove_file(&part);
    symlink(std::ffi::OsStr::from_bytes(&e.target), &part).map_err(|err| FilesError::io(&part, err))?;
    fs::rename(&part, dest).map_err(|err| FilesError::io(dest, err))
}

/// A single small file bound for a stream output.
fn write_to_stream(out: &Shared<Box<dyn Write + Send>>, dest: &Path, data: &[u8], sum: u128, sh: &State) -> Result<()> {
    if XxHash3_128::oneshot(data) != sum {
        return Err(FilesError::Checksum { path: dest.display().to_string(), index: 0 });
    }
    write_stream(out, data)?;
    sh.progress.add_bytes(data.len() as u64);
    sh.progress.file_done();
    Ok(())
}

/// Sets metadata on the verified part file, then renames it into place.
fn finish_file(f: &File, part: &Path, dest: &Path, e: &Entry, preserve: bool) -> Result<()> {
    if preserve {
        set_metadata(Some(f), part, e)?;
    }
    fs::rename(part, dest).map_err(|err| FilesError::io(dest, err))
}

fn set_metadata(f: Option<&File>, path: &Path, e: &Entry) -> Result<()> {
    let io = |err| FilesError::io(path, err);
    let perms = fs::Permissions::from_mode(e.mode & 0o7777);
    let mtime = if e.mtime_sec >= 0 {
        UNIX_EPOCH + Duration::new(e.mtime_sec as u64, e.mtime_nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(e.mtime_sec.unsigned_abs())
    };
    let times = fs::FileTimes::new().set_modified(mtime).set_accessed(SystemTime::now());
    match f {
        Some(f) => {
            f.set_permissions(perms).map_err(io)?;
            f.set_times(times).map_err(io)
        }
        None => {
            let d = File::open(path).map_err(io)?;
            d.set_times(times).map_err(io)?;
            fs::set_permissions(path, perms).map_err(io)
        }
    }
}

/// `e`, or when it only says that the source cancelled a stream, the source's own account,
/// which follows on the control stream (the source stops walking once it fails).
fn with_cause(control: &Link, e: FilesError) -> FilesError {
    if !e.is_peer_cancel() {
        return e;
    }
    loop {
        match control.recv() {
            Ok(Some(_)) => continue,
            Ok(None) => return e,
            Err(cause) => return e.or_cause(cause),
        }
    }
}

/// Registers a large file and asks the source for it.
fn ask(control: &Link, dest: PathBuf, e: Entry, sh: &State) -> Result<()> {
    let part = part_path(&dest);
    let chunks = if e.size == STREAMED {
        sh.streaming.fetch_add(1, Ordering::Relaxed);
        0
    } else {
        e.size.div_ceil(sh.chunk)
    };
    if chunks > u32::MAX as u64 {
        return Err(FilesError::Protocol(format!("{}: too many chunks", dest.display())));
    }
    let (mut have, mut base) = (Vec::new(), None);
    if sh.resume && sh.stream.is_none() && e.size != STREAMED {
        // Chunks already written by an interrupted copy, or a finished earlier one, are
        // checked against the source's checksums rather than sent again.
        if let Some(sums) = chunk_sums(&part, e.size, sh.chunk)? {
            have = sums;
        } else if let Some(sums) = chunk_sums(&dest, e.size, sh.chunk)? {
            have = sums;
            base = Some(dest.clone());
        }
    }
    let file = SinkFile {
        dest,
        part,
        out: Mutex::new(None),
        resumed_part: !have.is_empty() && base.is_none(),
        base,
        state: Mutex::new(Chunks { total: chunks, seen: ChunkSet::default(), written: 0, next: 0, finished: false }),
        turn: Condvar::new(),
        entry: e,
    };
    let id = file.entry.id;
    *sh.pending.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    if sh.files.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Arc::new(file)).is_some() {
        return Err(FilesError::Protocol(format!("file id {id} sent twice")));
    }
    control.send(&Msg::Want { id, ordered: sh.stream.is_some(), have }, &[])
}

/// Opens the part file of `dest`; errors name `dest`, as the user gave it (a missing or
/// read-only directory is theirs to see, not our part name).
fn open_part(part: &Path, dest: &Path, e: &Entry, truncate: bool) -> Result<File> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(truncate)
        .mode(e.mode & 0o777)
        .open(part)
        .map_err(|err| FilesError::io(dest, err))?;
    if e.size != STREAMED {
        // Holes stay holes: untouched blocks read as zeros.
        f.set_len(e.size).map_err(|err| FilesError::io(dest, err))?;
    }
    Ok(f)
}

/// The checksum of each chunk of `path` if it exists with the expected length.
fn chunk_sums(path: &Path, size: u64, chunk: u64) -> Result<Option<Vec<(u32, u128)>>> {
    let Ok(md) = fs::symlink_metadata(path) else { return Ok(None) };
    if !md.is_file() || md.len() != size {
        return Ok(None);
    }
    let f = File::open(path).map_err(|e| FilesError::io(path, e))?;
    let mut buf = vec![0u8; chunk as usize];
    let mut sums = Vec::new();
    for index in 0..size.div_ceil(chunk) {
        let off = index * chunk;
        let n = (size - off).min(chunk) as usize;
        f.read_exact_at(&mut buf[..n], off).map_err(|e| FilesError::io(path, e))?;
        sums.push((index as u32, XxHash3_128::oneshot(&buf[..n])));
    }
    Ok(Some(sums))
}

/// Accepts the source's data streams until the transfer is over, a thread for each.
fn accept_data_streams<'s>(conn: &'s Connection, sh: &'s State<'s>, s: &'s thread::Scope<'s, '_>) {
    while !sh.over.load(Ordering::Relaxed) {
        // A short slice: the sink's end (a failure above all) waits for this thread to see it.
        match conn.accept_stream_timeout(Duration::from_millis(10)) {
            Ok(stream) => {
                let mut link = Link::new(stream, sh.wrapping);
                link.set_timeout(sh.stall);
                s.spawn(move || {
                    if let Err(e) = serve_data(&link, sh) {
                        sh.fail(e);
                    }
                });
            }
            Err(wirespeed::Error::Timeout(_)) => {}
            Err(e) => {
                if !sh.over.load(Ordering::Relaxed) {
                    sh.fail(e.into());
                }
                return;
            }
        }
    }
}

fn serve_data(stream: &Link, sh: &State) -> Result<()> {
    let mut aligned = AlignedBuf::default();
    // Streams take turns with files: one may wait long for its next chunk while others move.
    while let Some((msg, body)) = stream.recv_start_while(sh.alive())? {
        let (id, index) = match msg {
            Msg::Chunk { id, index, .. } | Msg::Same { id, index } | Msg::Hole { id, index } => (id, index),
            Msg::Eof { id, size } => {
                let f = file(sh, id)?;
                if f.entry.size != STREAMED {
                    return Err(FilesError::Protocol("Eof for a file of known size".into()));
                }
                // Its chunks came in order on this stream, before it: all of them are written.
                if f.state.lock().unwrap_or_else(|p| p.into_inner()).next as u64 != size.div_ceil(sh.chunk) {
                    return Err(FilesError::Protocol(format!(
                        "{}: Eof at {size} bytes does not match the chunks sent",
                        f.dest.display()
                    )));
                }
                if let Some(part) = f.part_file(sh)? {
                    part.file.set_len(size).map_err(|e| FilesError::io(&f.part, e))?;
                }
                finish(sh, &f)?;
                continue;
            }
            other => return Err(link::unexpected("on a data stream", &other)),
        };
        let f = file(sh, id)?;
        let streamed = f.entry.size == STREAMED;
        let offset = index as u64 * sh.chunk;
        let expect = if streamed { sh.chunk } else { f.entry.size.saturating_sub(offset).min(sh.chunk) };
        let bad = |what: &str| FilesError::Protocol(format!("{}: chunk {index} {what}", f.dest.display()));
        if streamed && !matches!(msg, Msg::Chunk { .. }) {
            return Err(bad("is not data")); // a streamed file is all data chunks
        }
        if !streamed {
            let mut st = f.state.lock().unwrap_or_else(|p| p.into_inner());
            if index as u64 >= st.total || !st.seen.insert(index) {
                return Err(bad("is unknown or repeated"));
            }
        }
        // A stream output, and a streamed file anywhere, are written in order.
        let ordered = streamed || sh.stream.is_some();
        if ordered {
            f.wait_turn(index, sh)?;
        }
        let got = if let Msg::Chunk { .. } = msg {
            let (n, sum) = write_chunk(stream, body, expect, sh, &f, offset, &mut aligned)?;
            // A streamed file's chunks are full but for its last; its Eof says where it ends.
            if (!streamed && n != expect) || n == 0 {
                return Err(bad("has the wrong length"));
            }
            match stream.recv_start()? {
                Some((Msg::ChunkSum { sum: expected }, b)) if b.wire_len == 0 => {
                    if sum != expected {
                        return Err(FilesError::Checksum { path: f.dest.display().to_string(), index });
                    }
                }
                _ => return Err(bad("is not followed by its checksum")),
            }
            n
        } else if body.wire_len != 0 {
            return Err(bad("carries unexpected bytes"));
        } else {
            match (&msg, &sh.stream) {
                (Msg::Same { .. }, Some(_)) => return Err(bad("cannot be in a stream output already")),
                (Msg::Same { .. }, None) => sh.progress.add_reused(expect),
                // A hole in a stream output is its zeros.
                (_, Some(out)) => write_stream(out, &vec![0; expect as usize])?,
                _ => {}
            }
            expect
        };
        if ordered {
            f.pass_turn();
        }
        sh.progress.add_bytes(got);
        if !streamed {
            let mut st = f.state.lock().unwrap_or_else(|p| p.into_inner());
            st.written += 1;
            if st.written == st.total {
                drop(st);
                finish(sh, &f)?;
            }
        }
    }
    // The source finished this stream; finishing ours lets both drop it cleanly.
    stream.finish()
}

fn file(sh: &State, id: u64) -> Result<Arc<SinkFile>> {
    let files = sh.files.lock().unwrap_or_else(|p| p.into_inner());
    files.get(&id).cloned().ok_or_else(|| FilesError::Protocol(format!("data for file {id}, which was not asked for")))
}

/// Streams one chunk's body (at most `max` bytes) into place; returns its length and checksum.
fn write_chunk(
    stream: &Link,
    body: Body,
    max: u64,
    sh: &State,
    f: &SinkFile,
    offset: u64,
    aligned: &mut AlignedBuf,
) -> Result<(u64, u128)> {
    let mut hasher = XxHash3_128::new();
    let out = f.part_file(sh)?;
    let io = |e| FilesError::io(&f.part, e);
    if let Some(part) = out.as_deref()
        && let Some(direct) = &part.direct
    {
        // Direct writes come from aligned memory: the body gathers there first.
        let write = |data: &[u8], at| {
            if f.entry.sparse {
                write_sparse(data, at, |piece, at| direct::write_at(direct, &part.file, piece, at))
            } else {
                direct::write_at(direct, &part.file, data, at)
            }
        };
        let mut gather = Gather::new(aligned, (max as usize).min(GATHER_MAX), offset, write);
        let n = stream.read_body(body, max, |buf| {
            hasher.write(buf);
            gather.push(buf).map_err(io)
        })?;
        gather.flush().map_err(io)?;
        return Ok((n, hasher.finish_128()));
    }
    let mut at = offset;
    let n = stream.read_body(body, max, |buf| {
        hasher.write(buf);
        match out.as_deref() {
            None => write_stream(sh.stream.as_ref().expect("no part file means a stream"), buf)?,
            Some(part) if f.entry.sparse => {
                write_sparse(buf, at, |piece, at| part.file.write_all_at(piece, at)).map_err(io)?
            }
            Some(part) => part.file.write_all_at(buf, at).map_err(io)?,
        }
        at += buf.len() as u64;
        Ok(())
    })?;
    Ok((n, hasher.finish_128()))
}

fn write_stream(out: &Shared<Box<dyn Write + Send>>, data: &[u8]) -> Result<()> {
    let mut out = out.lock();
    out.write_all(data).map_err(|e| FilesError::io(Path::new("<output stream>"), e))
}

/// Writes `buf` at `offset` with `write`, skipping whole zero blocks so holes stay holes;
/// each run of blocks with data goes out in one write.
fn write_sparse(
    buf: &[u8],
    offset: u64,
    mut write: impl FnMut(&[u8], u64) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut run = None; // where the current run of blocks with data starts
    let mut i = 0;
    while i < buf.len() {
        // Up to the next block boundary of the file.
        let end = (((offset as usize + i) / BLOCK + 1) * BLOCK - offset as usize).min(buf.len());
        match (buf[i..end].iter().any(|b| *b != 0), run) {
            (true, None) => run = Some(i),
            (false, Some(r)) => {
                write(&buf[r..i], offset + r as u64)?;
                run = None;
            }
            _ => {}
        }
        i = end;
    }
    if let Some(r) = run {
        write(&buf[r..], offset + r as u64)?;
    }
    Ok(())
}

fn finish(sh: &State, f: &SinkFile) -> Result<()> {
    if std::mem::replace(&mut f.state.lock().unwrap_or_else(|p| p.into_inner()).finished, true) {
        return Err(FilesError::Protocol(format!("{}: finished twice", f.dest.display())));
    }
    if f.entry.size == STREAMED {
        sh.streaming.fetch_sub(1, Ordering::Relaxed);
    }
    if let Some(out) = &sh.stream {
        out.lock().flush().map_err(|e| FilesError::io(Path::new("<output stream>"), e))?;
    } else {
        let out = f.out.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match out.as_deref() {
            Some(part) => finish_file(&part.file, &f.part, &f.dest, &f.entry, sh.preserve)?,
            // Every chunk was already there in the destination.
            None if f.base.is_some() && sh.preserve => set_metadata(None, &f.dest, &f.entry)?,
            None if f.base.is_some() => {}
            None => {
                let file = f.open_part()?;
                finish_file(&file, &f.part, &f.dest, &f.entry, sh.preserve)?;
            }
        }
    }
    // Done with: its descriptor closes now rather than at the end of the transfer, so a
    // tree of many files stays within the descriptor limit.
    sh.files.lock().unwrap_or_else(|p| p.into_inner()).remove(&f.entry.id);
    f.out.lock().unwrap_or_else(|p| p.into_inner()).take();
    sh.progress.file_done();
    *sh.pending.lock().unwrap_or_else(|p| p.into_inner()) -= 1;
    sh.changed.notify_all();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparse_writes_skip_zero_blocks_and_join_runs_of_data() {
        // Starting 100 bytes into a block: a partial block of data, two full ones, a zero
        // block, then data again to the end.
        let mut buf = vec![1u8; BLOCK - 100 + 2 * BLOCK];
        buf.extend(vec![0u8; BLOCK]);
        buf.extend(vec![2u8; 10]);
        let mut writes = Vec::new();
        write_sparse(&buf, 100, |piece, at| {
            writes.push((at, piece.len()));
            Ok(())
        })
        .unwrap();
        assert_eq!(writes, [(100, 3 * BLOCK - 100), (4 * BLOCK as u64, 10)]);
    }
}
