//! What a search's rankings read of their candidates before fusion, kept in memory per table and keyed
//! by Lance row address (`_rowid`): each candidate's `id`, the columns of the broad filter (`actor_id`,
//! `superseded_by`) and, for the vector ranking, its `vector` (`[f32; 384]`, L2-normalized, as stored).
//!
//! Why: at 10k rows the vector ranking's read of its 50 candidates by address was 1.9 ms of the 4.3 ms
//! its stage took (docs/internals/search-latency.md, "Where the vector stage's 4.3 ms go at 10k"), and the full-text
//! rankings read the same columns of theirs. A table of up to `row_cache_rows` rows ([`super::OpenOptions`]) is read into the
//! cache once, in the background after its first search ([`RowCache::should_fill`]); then a search
//! reads no row before fusion, only the hits it returns.
//!
//! Why it cannot serve a wrong row: Lance never writes two rows at one address. A row address is a
//! fragment id and an offset in it; a fragment's data files never change after they are written (an
//! update or merge-insert of whole rows deletes the old rows and writes them into a new fragment, a
//! compaction writes new fragments), and Lance does not reuse fragment ids (the manifest counts them up).
//! So what the cache holds for an address is what the table holds there for as long as the row lives;
//! a deleted row's address is no longer returned by a ranking of a later table version (Lance applies
//! the deletion files to its scans and indexes). The test
//! `a_current_only_search_never_returns_a_row_superseded_after_its_address_was_cached` checks that last
//! point. Entries of rows that moved are only dead weight: a compaction by this process clears its
//! table's cache ([`RowCache::clear`]), and a cache that would grow past its size starts over.
//!
//! Row addresses are unique within one table's history, not across tables: a store directory replaced
//! under a running server (restored from a backup, or deleted and written again) starts them again.
//! Before each ranking the cache compares the table's version and highest fragment id with those it saw
//! last ([`RowCache::observe`]); when either went down it starts over. A replacement whose version and
//! fragment ids both passed the old ones between two searches is not noticed: restart a server after
//! replacing its store directory.
//!
//! The one difference a cache makes: a ranking made just before another handle deletes or moves one of
//! its rows keeps that row where the read would have found its address empty and ranked again; the
//! search then answers as of the table version it ranked (the hits' rows are still read from the table,
//! so a forgotten row is never returned).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use uuid::Uuid;

/// Rows per table the cache holds by default (`--row-cache-rows`): a table of up to this many rows is
/// held whole. About 1.6 KiB per row (the vector is 1,536 bytes), so 26 MiB for a full table; a 10k
/// table cost 35 MiB of resident memory in the benchmark (docs/internals/search-latency.md, "Row cache").
pub const DEFAULT_ROW_CACHE_ROWS: usize = 16_384;

/// What a ranking needs of one row before fusion.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CachedRow {
    pub id: Uuid,
    pub actor_id: Arc<str>,
    /// `superseded_by IS NOT NULL` (false in tables without the column).
    pub superseded: bool,
    /// The stored vector, when it was read (the vector ranking reads it, the full-text ones do not).
    pub vector: Option<Arc<[f32]>>,
}

/// The cache of one table: at most `capacity` rows, by row address.
#[derive(Debug)]
pub(super) struct RowCache {
    capacity: usize,
    rows: Mutex<HashMap<u64, CachedRow>>,
    /// Bumped by [`Self::clear`]: rows read before a clear are not cached after it.
    generation: AtomicU64,
    /// The table version and highest fragment id last seen ([`Self::observe`]).
    lineage: Mutex<Option<(u64, u64)>>,
    /// A fill ([`Self::should_fill`]) is running.
    filling: AtomicBool,
    /// Reads of the table made for this cache: takes of rows it lacked, and whole-table fills (tests count
    /// them).
    reads: AtomicU64,
}

impl RowCache {
    /// An empty cache of at most `capacity` rows (0: never holds any).
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            rows: Mutex::default(),
            generation: AtomicU64::new(0),
            lineage: Mutex::default(),
            filling: AtomicBool::new(false),
            reads: AtomicU64::new(0),
        }
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<u64, CachedRow>> {
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached rows at `addresses`, in their order; `None` where a row is not cached, or (with
    /// `vectors`) is cached without its vector.
    pub fn get(&self, addresses: &[u64], vectors: bool) -> Vec<Option<CachedRow>> {
        let rows = self.rows();
        addresses.iter().map(|a| rows.get(a).filter(|r| !vectors || r.vector.is_some()).cloned()).collect()
    }

    /// The generation to pass to [`Self::insert`] for rows about to be read: taken before the read.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Caches `read` (rows read from the table at their addresses since [`Self::generation`] gave
    /// `generation`; nothing when the cache was cleared meanwhile). A row read with its vector is not
    /// replaced by the same row read without. When the new rows would not fit, the cache starts over:
    /// the rows of a table that moved (a compaction by another process) leave no dead weight past the
    /// capacity.
    pub fn insert(&self, generation: u64, read: impl IntoIterator<Item = (u64, CachedRow)>) {
        if self.capacity == 0 {
            return;
        }
        let mut rows = self.rows();
        if generation != self.generation() {
            return;
        }
        let read: Vec<(u64, CachedRow)> =
            read.into_iter().filter(|(a, r)| r.vector.is_some() || !rows.contains_key(a)).collect();
        let new = read.iter().filter(|(a, _)| !rows.contains_key(a)).count();
        if rows.len() + new > self.capacity {
            rows.clear();
        }
        for (address, row) in read {
            if rows.len() < self.capacity || rows.contains_key(&address) {
                rows.insert(address, row);
            }
        }
    }

    /// Drops every row (after this process compacted the table: every address changed), and every row
    /// read before (see [`Self::insert`]).
    pub fn clear(&self) {
        let mut rows = self.rows();
        self.generation.fetch_add(1, Ordering::AcqRel);
        rows.clear();
    }

    /// Notes the table's latest `version` and its highest fragment id (`max_fragment_id`, 0 for none),
    /// read from its manifest before a ranking. Both only grow over one table's history, and row
    /// addresses are unique only within it: when either went down, the directory was replaced under
    /// this process (restored from a backup, or deleted and written again), its addresses hold other
    /// rows, and the cache is cleared. Returns whether it was.
    pub fn observe(&self, version: u64, max_fragment_id: u64) -> bool {
        let mut seen = self.lineage.lock().unwrap_or_else(|p| p.into_inner());
        let replaced = seen.is_some_and(|(v, f)| version < v || max_fragment_id < f);
        if replaced {
            self.clear();
        }
        *seen = Some((version, max_fragment_id));
        replaced
    }

    /// Rows cached now.
    pub fn len(&self) -> usize {
        self.rows().len()
    }

    /// Counts one read of the table for this cache.
    pub fn count_read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads of the table made for this cache since it was created.
    #[cfg(test)]
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Should a table of `table_rows` rows be read into the cache whole now? When it fits, less than
    /// half of it is cached, and no fill is running; `true` also marks a fill as running, until
    /// [`Self::filled`].
    pub fn should_fill(&self, table_rows: usize) -> bool {
        table_rows > 0
            && table_rows <= self.capacity
            && self.len() * 2 < table_rows
            && !self.filling.swap(true, Ordering::AcqRel)
    }

    /// Marks the fill that [`Self::should_fill`] started as done (or failed).
    pub fn filled(&self) {
        self.filling.store(false, Ordering::Release);
    }
}

/// Marks a fill as done when dropped ([`RowCache::filled`]), so a fill that fails or panics does not
/// leave its table unfillable.
pub(super) struct Filling<'a>(pub &'a RowCache);

impl Drop for Filling<'_> {
    fn drop(&mut self) {
        self.0.filled();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: u128, vector: bool) -> CachedRow {
        CachedRow {
            id: Uuid::from_u128(n),
            actor_id: "ann".into(),
            superseded: false,
            vector: vector.then(|| Arc::from(vec![n as f32; 4])),
        }
    }

    #[test]
    fn rows_come_back_by_address_and_a_vector_ranking_misses_rows_cached_without_vectors() {
        let cache = RowCache::new(10);
        cache.insert(0, [(7, row(1, true)), (9, row(2, false))]);
        assert_eq!(cache.get(&[9, 8, 7], false), vec![Some(row(2, false)), None, Some(row(1, true))]);
        assert_eq!(cache.get(&[9, 7], true), vec![None, Some(row(1, true))]);
        cache.insert(0, [(9, row(2, true))]);
        assert_eq!(cache.get(&[9], true), vec![Some(row(2, true))], "read again with its vector");
        cache.insert(0, [(9, row(2, false))]);
        assert_eq!(cache.get(&[9], true), vec![Some(row(2, true))], "not replaced by a read without it");
        assert_eq!(cache.len(), 2);
    }

    #[test]
    fn a_full_cache_starts_over_and_never_holds_more_than_its_capacity() {
        let cache = RowCache::new(3);
        cache.insert(0, [(1, row(1, false)), (2, row(2, false))]);
        cache.insert(0, [(2, row(2, true)), (1, row(1, true))]);
        assert_eq!(cache.len(), 2, "rows read again take no more room");
        cache.insert(0, [(3, row(3, false)), (4, row(4, false))]);
        assert_eq!(cache.len(), 2, "four rows do not fit in three: the cache started over");
        assert_eq!(cache.get(&[1, 3, 4], false), vec![None, Some(row(3, false)), Some(row(4, false))]);
        cache.insert(0, (10..20).map(|n| (n, row(n as u128, false))));
        assert_eq!(cache.len(), 3, "a read larger than the cache fills it and no more");
        let off = RowCache::new(0);
        off.insert(0, [(1, row(1, false))]);
        assert_eq!(off.len(), 0, "capacity 0 holds nothing");
    }

    #[test]
    fn a_table_is_filled_once_while_it_fits_and_is_mostly_uncached() {
        let cache = RowCache::new(100);
        assert!(!cache.should_fill(0), "nothing to read");
        assert!(!cache.should_fill(101), "does not fit");
        assert!(cache.should_fill(100));
        assert!(!cache.should_fill(100), "a fill is running");
        {
            let _filling = Filling(&cache);
            cache.insert(0, (0..60).map(|n| (n, row(n as u128, true))));
        }
        assert!(!cache.should_fill(100), "more than half cached");
        cache.clear();
        assert!(cache.should_fill(100), "after a compaction cleared it");
    }

    #[test]
    fn a_table_whose_version_or_fragment_ids_went_down_was_replaced_and_its_cache_is_cleared() {
        let cache = RowCache::new(10);
        assert!(!cache.observe(5, 3), "the first look");
        cache.insert(cache.generation(), [(1, row(1, true))]);
        assert!(!cache.observe(6, 4), "a write");
        assert!(!cache.observe(7, 4), "a deletion");
        assert_eq!(cache.len(), 1);
        assert!(cache.observe(2, 4), "version 2 after 7: another table at the same path");
        assert_eq!(cache.len(), 0);
        cache.insert(cache.generation(), [(1, row(2, true))]);
        assert!(!cache.observe(3, 4));
        assert!(cache.observe(9, 1), "fragment ids restarted while the version passed the old one");
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn rows_read_before_a_clear_are_not_cached_after_it() {
        let cache = RowCache::new(10);
        let before = cache.generation();
        cache.clear();
        cache.insert(before, [(1, row(1, true))]);
        assert_eq!(cache.len(), 0, "read before the compaction: dropped");
        cache.insert(cache.generation(), [(1, row(1, true))]);
        assert_eq!(cache.len(), 1);
    }
}
