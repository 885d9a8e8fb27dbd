//! Decoded tables kept in memory for `wirespeed serve --cache-mb`: a flight read again is
//! served without reading or decoding its file, and its batches lie in one sealed region
//! ([`wirespeed_flight::share_all`]), so a client on this host over the shm plane maps the
//! server's memory instead of receiving a copy.
//!
//! A table is found again only while its file is unchanged (same inode, length and mtime);
//! an upload renames a new file into place, so it is never served stale. The least recently
//! used tables leave first once the cache would exceed its size, counted in the bytes the
//! batches really hold. Readers that miss at once share one load of the file: a loader thread
//! reads it at the disk's pace while they all read from what it has loaded. A table that turns
//! out larger than the cache stops loading there, and each reader goes on from the file itself.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use wirespeed::sync::Unpoison;

/// Batches read from a file, in order.
pub(crate) type Batches = Box<dyn Iterator<Item = Result<RecordBatch, ArrowError>> + Send>;

/// Which version of a file a cached table was read from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Stamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl Stamp {
    pub(crate) fn of(path: &Path) -> std::io::Result<Stamp> {
        let m = path.metadata()?;
        Ok(Stamp { ino: m.ino(), len: m.len(), mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128 })
    }

    /// The file's length, which a table read from it roughly fills when uncompressed.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }
}

/// A whole table in memory.
#[derive(Clone)]
pub(crate) struct Table {
    pub schema: SchemaRef,
    pub batches: Arc<[RecordBatch]>,
}

impl Table {
    pub(crate) fn rows(&self) -> i64 {
        self.batches.iter().map(|b| b.num_rows() as i64).sum()
    }
}

/// The bytes a batch's arrays hold (their slices, not whole buffers they may share).
pub(crate) fn batch_bytes(batch: &RecordBatch) -> usize {
    batch.columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap_or(0)).sum()
}

pub(crate) struct TableCache {
    limit: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tables: HashMap<PathBuf, Entry>,
    loading: HashMap<PathBuf, Arc<Load>>,
    used: usize,
    /// Bumped on every hit or insert; orders entries by last use.
    clock: u64,
    /// Loads started, for the tests.
    loads: usize,
}

struct Entry {
    stamp: Stamp,
    table: Table,
    bytes: usize,
    used_at: u64,
}

impl TableCache {
    /// A cache of at most `limit` bytes of batches.
    pub(crate) fn new(limit: usize) -> Self {
        TableCache { limit, inner: Mutex::new(Inner::default()) }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// The bytes of batches held, and the tables they make.
    pub(crate) fn held(&self) -> (usize, usize) {
        let g = self.lock();
        (g.used, g.tables.len())
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unpoison()
    }

    /// The table read from `path` while it was as `stamp` says, if it is cached.
    pub(crate) fn get(&self, path: &Path, stamp: Stamp) -> Option<Table> {
        let mut g = self.lock();
        g.clock += 1;
        let now = g.clock;
        let e = g.tables.get_mut(path).filter(|e| e.stamp == stamp)?;
        e.used_at = now;
        Some(e.table.clone())
    }

    /// Keeps `table`, read from `path` as `stamp`, taking `bytes` of the cache, unless it is
    /// larger than the whole cache; older tables leave to make room.
    pub(crate) fn insert(&self, path: &Path, stamp: Stamp, table: Table, bytes: usize) {
        if bytes > self.limit {
            return;
        }
        let mut g = self.lock();
        if let Some(old) = g.tables.remove(path) {
            g.used -= old.bytes;
        }
        while g.used + bytes > self.limit {
            let Some(oldest) = g.tables.iter().min_by_key(|(_, e)| e.used_at).map(|(p, _)| p.clone()) else { break };
            let gone = g.tables.remove(&oldest).expect("just found");
            g.used -= gone.bytes;
        }
        g.clock += 1;
        let used_at = g.clock;
        g.used += bytes;
        g.tables.insert(path.to_path_buf(), Entry { stamp, table, bytes, used_at });
    }

    /// Reads the file at `path` (as `stamp`) through the cache's one load of it: joins the load
    /// in progress, or starts one with what `open` gives. `open` also serves a reader that has
    /// to go on from the file itself (see the module's doc). `name` is the flight's, for the
    /// line that reports it kept.
    pub(crate) fn load(
        self: &Arc<Self>,
        name: &str,
        path: &Path,
        stamp: Stamp,
        open: impl Fn() -> Result<(SchemaRef, Batches), ArrowError> + Send + 'static,
    ) -> Result<(SchemaRef, Batches), ArrowError> {
        let joined = self.lock().loading.get(path).filter(|l| l.stamp == stamp).cloned();
        let load = match joined {
            Some(load) => load,
            None => {
                // Opened outside the lock, so that a slow open holds up no other flight.
                let (schema, batches) = open()?;
                let mut g = self.lock();
                match g.loading.get(path).filter(|l| l.stamp == stamp) {
                    Some(theirs) => theirs.clone(), // another reader started it meanwhile
                    None => {
                        let load = Arc::new(Load { stamp, schema, state: Mutex::default(), grew: Condvar::new() });
                        g.loading.insert(path.to_path_buf(), load.clone());
                        g.loads += 1;
                        let (cache, load2) = (self.clone(), load.clone());
                        let (name, path) = (name.to_string(), path.to_path_buf());
                        std::thread::spawn(move || cache.fill(&name, &path, &load2, batches));
                        load
                    }
                }
            }
        };
        let schema = load.schema.clone();
        Ok((schema, Box::new(Reading { load, next: 0, own: None, open: Box::new(open) })))
    }

    /// The loader: reads `batches` into `load` while they fit the cache, then keeps the table if
    /// it is whole and its file unchanged.
    fn fill(&self, name: &str, path: &Path, load: &Arc<Load>, batches: Batches) {
        let _ends = Ends(load);
        let mut bytes = 0;
        let mut end = End::Complete;
        for batch in batches {
            match batch {
                Ok(batch) => {
                    bytes += batch_bytes(&batch);
                    if bytes > self.limit {
                        end = End::TooBig;
                        break;
                    }
                    load.lock().batches.push(batch);
                    load.grew.notify_all();
                }
                Err(e) => {
                    end = End::Failed(e.to_string());
                    break;
                }
            }
        }
        let complete = end == End::Complete;
        load.lock().end = Some(end);
        load.grew.notify_all();
        {
            let mut g = self.lock();
            if g.loading.get(path).is_some_and(|l| Arc::ptr_eq(l, load)) {
                g.loading.remove(path);
            }
        }
        if !complete || Stamp::of(path).ok() != Some(load.stamp) {
            return; // cut short, or changed while read: the batches may mix two versions
        }
        let held = load.lock().batches.clone();
        // Not being able to share (out of memory for a region) only means no caching.
        if let Ok(shared) = wirespeed_flight::share_all(&held) {
            let table = Table { schema: load.schema.clone(), batches: shared.into() };
            self.insert(path, load.stamp, table, bytes);
            eprintln!("wirespeed: cached {name} ({:.1} MB)", bytes as f64 / 1e6);
        }
    }

    /// Bytes the cached tables take.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.lock().used
    }

    #[cfg(test)]
    fn loads(&self) -> usize {
        self.lock().loads
    }

    #[cfg(test)]
    fn cached(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.lock().tables.keys().cloned().collect();
        v.sort();
        v
    }
}

/// One load of a file, shared by the readers that missed while it ran.
struct Load {
    stamp: Stamp,
    schema: SchemaRef,
    state: Mutex<LoadState>,
    grew: Condvar,
}

#[derive(Default)]
struct LoadState {
    batches: Vec<RecordBatch>,
    end: Option<End>,
}

#[derive(Clone, PartialEq, Eq)]
enum End {
    Complete,
    /// Larger than the cache: readers go on from the file.
    TooBig,
    Failed(String),
}

impl Load {
    fn lock(&self) -> MutexGuard<'_, LoadState> {
        self.state.lock().unpoison()
    }
}

/// Ends a load whose loader stopped without saying how (a panic in a decoder), so that no
/// reader waits for it forever.
struct Ends<'a>(&'a Load);

impl Drop for Ends<'_> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        if state.end.is_none() {
            state.end = Some(End::Failed("the file could not be read".into()));
        }
        drop(state);
        self.0.grew.notify_all();
    }
}

/// One reader of a [`Load`].
struct Reading {
    load: Arc<Load>,
    next: usize,
    /// The file opened anew, once the load stopped short of the whole table.
    own: Option<Batches>,
    open: Box<dyn Fn() -> Result<(SchemaRef, Batches), ArrowError> + Send>,
}

impl Iterator for Reading {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(own) = &mut self.own {
            return own.next();
        }
        let mut state = self.load.lock();
        while self.next >= state.batches.len() && state.end.is_none() {
            state = self.load.grew.wait(state).unpoison();
        }
        if let Some(batch) = state.batches.get(self.next) {
            self.next += 1;
            return Some(Ok(batch.clone()));
        }
        match state.end.clone()? {
            End::Complete => None,
            End::Failed(e) => Some(Err(ArrowError::IoError(e.clone(), std::io::Error::other(e)))),
            End::TooBig => {
                drop(state);
                let skip = self.next;
                let own = (self.open)().map(|(_, batches)| batches.skip(skip));
                match own {
                    Ok(own) => {
                        self.own = Some(Box::new(own));
                        self.next()
                    }
                    Err(e) => Some(Err(e)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;
    use arrow_schema::{DataType, Field, Schema};

    fn table(rows: i64) -> Table {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(0..rows))]).unwrap();
        Table { schema, batches: vec![batch].into() }
    }

    #[test]
    fn a_changed_file_misses_and_the_least_recently_used_table_leaves_first() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (dir.path().join("a"), dir.path().join("b"), dir.path().join("c"));
        for p in [&a, &b, &c] {
            std::fs::write(p, b"v1").unwrap();
        }
        let cache = TableCache::new(300);
        let sa = Stamp::of(&a).unwrap();
        cache.insert(&a, sa, table(1), 100);
        cache.insert(&b, Stamp::of(&b).unwrap(), table(2), 100);
        assert_eq!(cache.get(&a, sa).unwrap().rows(), 1);

        // A new version of the file, renamed into place as uploads are: a miss.
        std::fs::write(dir.path().join("a.new"), b"v2 longer").unwrap();
        std::fs::rename(dir.path().join("a.new"), &a).unwrap();
        let sa2 = Stamp::of(&a).unwrap();
        assert_ne!(sa, sa2);
        assert!(cache.get(&a, sa2).is_none());

        // `a` was used after `b`, so `b` makes room for `c`.
        cache.insert(&c, Stamp::of(&c).unwrap(), table(3), 150);
        assert_eq!(cache.cached(), vec![a.clone(), c.clone()]);
        // Too big for the whole cache: not kept, and nothing is evicted for it.
        cache.insert(&b, Stamp::of(&b).unwrap(), table(4), 301);
        assert_eq!(cache.cached(), vec![a, c]);
    }

    /// An IPC file of `batches` batches of 1 MiB each (one int64 column).
    fn ipc_file(path: &Path, batches: usize) -> Vec<RecordBatch> {
        let t = table(1 << 17);
        let mut w = arrow_ipc::writer::FileWriter::try_new(std::fs::File::create(path).unwrap(), &t.schema).unwrap();
        let written: Vec<_> = (0..batches).map(|_| t.batches[0].clone()).collect();
        for b in &written {
            w.write(b).unwrap();
        }
        w.finish().unwrap();
        written
    }

    fn opener(path: &Path) -> impl Fn() -> Result<(SchemaRef, Batches), ArrowError> + Send + Sync + 'static {
        let path = path.to_path_buf();
        move || {
            let r = arrow_ipc::reader::FileReader::try_new_buffered(std::fs::File::open(&path)?, None)?;
            Ok((r.schema(), Box::new(r) as Batches))
        }
    }

    /// Sixteen readers miss at once: one load, each gets the whole table, and the cache counts
    /// the bytes the table holds.
    #[test]
    fn concurrent_first_readers_share_one_load_counted_in_real_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.arrow");
        let written = ipc_file(&path, 24);
        let cache = Arc::new(TableCache::new(64 << 20));
        let stamp = Stamp::of(&path).unwrap();
        let readers: Vec<_> = (0..16)
            .map(|_| {
                let (cache, path) = (cache.clone(), path.clone());
                std::thread::spawn(move || {
                    let (_, batches) = cache.load("t", &path, stamp, opener(&path)).unwrap();
                    batches.collect::<Result<Vec<_>, _>>().unwrap()
                })
            })
            .collect();
        for r in readers {
            assert_eq!(r.join().unwrap(), written);
        }
        assert_eq!(cache.loads(), 1, "one load for readers that missed together");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while cache.get(&path, stamp).is_none() {
            assert!(std::time::Instant::now() < deadline, "never cached");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(cache.used(), 24 << 20, "24 batches of 1 MiB");
    }

    /// A table larger than the cache: readers get all of it, from the file past what was
    /// loaded, and nothing is kept.
    #[test]
    fn a_table_larger_than_the_cache_is_read_whole_and_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.arrow");
        let written = ipc_file(&path, 12);
        let cache = Arc::new(TableCache::new(5 << 20));
        let stamp = Stamp::of(&path).unwrap();
        for _ in 0..2 {
            let (_, batches) = cache.load("t", &path, stamp, opener(&path)).unwrap();
            assert_eq!(batches.collect::<Result<Vec<_>, _>>().unwrap(), written);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(cache.cached().is_empty());
        assert_eq!(cache.used(), 0);
    }
}
