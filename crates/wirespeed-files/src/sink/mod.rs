//! The receiving side. The control thread creates directories and symlinks, hands inline
//! files to a few writing threads ([`inline`]), and asks for each large file with a `Want`
//! (listing, with `--resume`, the checksums of chunks it already holds). A thread per data
//! stream checks and writes chunks into the file's hidden part file; the last chunk renames
//! it into place. A tree copied to a new name is built under a hidden name of its own
//! ([`fresh`]).

mod data;
mod fresh;
mod inline;
mod large;

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use twox_hash::XxHash3_128;
use wirespeed::Connection;

use self::data::{accept_data_streams, write_stream};
use self::fresh::FreshTree;
use self::large::{SinkFile, ask};
use crate::error::{FilesError, Result};
use crate::exclude::{Excludes, top_path};
use crate::link::{self, Link, Wrapping};
use crate::paths::{join_under, part_path, printable};
use crate::progress::Progress;
use crate::proto::{self, Entry, Kind, Msg, STREAMED, Violation};
use crate::shared::Shared;
use crate::{Report, SinkOptions, Summary};
use wirespeed::sync::Unpoison;

/// Where received data goes.
#[derive(Clone, Debug)]
pub enum Output {
    /// Into this path, or into it as a directory if it is one.
    Path(PathBuf),
    /// A byte stream (standard output, a command's input); only a single file can go there.
    Writer(Shared<Box<dyn Write + Send>>),
}

impl Output {
    /// This process's standard output.
    pub fn stdout() -> Self {
        Output::writer(std::io::stdout())
    }

    /// Any writer: the single file sent goes there.
    pub fn writer(w: impl Write + Send + 'static) -> Self {
        Output::Writer(Shared::new(Box::new(w)))
    }
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
        let mut f = self.failed.lock().unpoison();
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
        self.failed.lock().unpoison().take()
    }
}

/// Receives a transfer from the source at the other end of `control` into `output`.
pub(crate) fn run_sink(
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
        return Err(Violation::Expected { expected: "Begin", got: "something else" }.into());
    };
    proto::check_begin(version, flags, chunk_size)?;
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
            return Err(Violation::EndedEarly.into());
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
                        let end = end.ok_or(Violation::InlineShort)?;
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
                protect = Excludes::new(&patterns).map_err(|e| Violation::BadExclude(e.to_string()))?;
            }
            Msg::End { files, bytes } => break Summary { files, bytes, kept, kept_bytes, deleted: 0 },
            other => return Err(link::unexpected("from a source", &other)),
        }
    };
    // Wait for the data streams to finish every file. All data was sent before End, so a
    // wait with no progress for a whole timeout means the source left some out.
    let mut pending = sh.pending.lock().unpoison();
    let (mut seen, mut since) = (sh.progress.get().0, Instant::now());
    while *pending > 0 {
        if let Some(e) = sh.take_failure() {
            return Err(with_cause(control, e));
        }
        let now = sh.progress.get().0;
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if since.elapsed() > sh.stall {
            return Err(Violation::FilesMissing(*pending).into());
        }
        pending = sh.changed.wait_timeout(pending, Duration::from_millis(200)).unpoison().0;
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
        return Err(Violation::MoreAfter("Done").into());
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
