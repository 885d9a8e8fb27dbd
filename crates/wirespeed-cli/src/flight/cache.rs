//! Decoded tables kept in memory for `wirespeed serve --cache-mb`: a flight read again is
//! served without reading or decoding its file, and its batches lie in one sealed region
//! ([`wirespeed_flight::share_all`]), so a client on this host over the shm plane maps the
//! server's memory instead of receiving a copy.
//!
//! A table is found again only while its file is unchanged (same inode, length and mtime);
//! an upload renames a new file into place, so it is never served stale. The least recently
//! used tables leave first once the cache would exceed its size.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};

/// Which version of a file a cached table was read from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Stamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl Stamp {
    pub fn of(path: &Path) -> std::io::Result<Stamp> {
        let m = path.metadata()?;
        Ok(Stamp { ino: m.ino(), len: m.len(), mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128 })
    }
}

/// A whole table in memory.
#[derive(Clone)]
pub struct Table {
    pub schema: SchemaRef,
    pub batches: Arc<[RecordBatch]>,
}

impl Table {
    pub fn rows(&self) -> i64 {
        self.batches.iter().map(|b| b.num_rows() as i64).sum()
    }
}

pub struct TableCache {
    limit: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tables: HashMap<PathBuf, Entry>,
    used: usize,
    /// Bumped on every hit or insert; orders entries by last use.
    clock: u64,
}

struct Entry {
    stamp: Stamp,
    table: Table,
    bytes: usize,
    used_at: u64,
}

impl TableCache {
    /// A cache of at most `limit` bytes of batches.
    pub fn new(limit: usize) -> Self {
        TableCache { limit, inner: Mutex::new(Inner::default()) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The table read from `path` while it was as `stamp` says, if it is cached.
    pub fn get(&self, path: &Path, stamp: Stamp) -> Option<Table> {
        let mut g = self.lock();
        g.clock += 1;
        let now = g.clock;
        let e = g.tables.get_mut(path).filter(|e| e.stamp == stamp)?;
        e.used_at = now;
        Some(e.table.clone())
    }

    /// Keeps `table`, read from `path` as `stamp`, taking `bytes` of the cache, unless it is
    /// larger than the whole cache; older tables leave to make room.
    pub fn insert(&self, path: &Path, stamp: Stamp, table: Table, bytes: usize) {
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

    /// Passes `batches` (read from `path` as `stamp`) on as they come, and once they have all
    /// gone by, keeps the table in one sealed region (on a thread of its own), if it fits and
    /// the file is unchanged. The first reader so waits for no copy; later ones get the region.
    /// `name` is the flight's, for the line that reports it kept.
    pub fn filling<I>(
        self: &Arc<Self>,
        name: &str,
        path: &Path,
        stamp: Stamp,
        schema: SchemaRef,
        batches: I,
    ) -> Filling<I>
    where
        I: Iterator<Item = Result<RecordBatch, ArrowError>>,
    {
        let read = Read { name: name.to_string(), path: path.to_path_buf(), stamp, schema };
        Filling { cache: self.clone(), read, held: Some(Vec::new()), bytes: 0, batches }
    }

    /// Copies the batches into one sealed region and keeps them.
    fn keep(&self, read: Read, held: &[RecordBatch], bytes: usize) {
        if Stamp::of(&read.path).ok() != Some(read.stamp) {
            return; // changed while it was read: the batches may mix two versions
        }
        // Not being able to share (out of memory for a region) only means no caching.
        if let Ok(shared) = wirespeed_flight::share_all(held) {
            self.insert(&read.path, read.stamp, Table { schema: read.schema, batches: shared.into() }, bytes);
            eprintln!("wirespeed: cached {} ({:.1} MB)", read.name, bytes as f64 / 1e6);
        }
    }

    #[cfg(test)]
    fn cached(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.lock().tables.keys().cloned().collect();
        v.sort();
        v
    }
}

/// Which table a [`Filling`] reads.
#[derive(Clone)]
struct Read {
    name: String,
    path: PathBuf,
    stamp: Stamp,
    schema: SchemaRef,
}

/// See [`TableCache::filling`].
pub struct Filling<I> {
    cache: Arc<TableCache>,
    read: Read,
    /// The batches so far; `None` once the table is known not to be kept.
    held: Option<Vec<RecordBatch>>,
    bytes: usize,
    batches: I,
}

impl<I: Iterator<Item = Result<RecordBatch, ArrowError>>> Iterator for Filling<I> {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = self.batches.next();
        match &next {
            Some(Ok(batch)) => {
                self.bytes += batch.get_array_memory_size();
                if self.bytes > self.cache.limit {
                    self.held = None;
                } else if let Some(held) = &mut self.held {
                    held.push(batch.clone());
                }
            }
            Some(Err(_)) => self.held = None,
            None => {
                if let Some(held) = self.held.take() {
                    // Off this thread, so the reader's stream ends without waiting for the copy.
                    let (cache, read, bytes) = (self.cache.clone(), self.read.clone(), self.bytes);
                    std::thread::spawn(move || cache.keep(read, &held, bytes));
                }
            }
        }
        next
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
}
