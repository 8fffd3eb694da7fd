//! An open store ([`LanceStore`]): its connection, one [`TableHandle`] per table holding that table's
//! state in this process, [`StoreTable`] (one table of the store, the receiver of every per-table
//! operation), and the two ways every other file calls into Lance — [`backend`] for its errors,
//! [`collect`] for its reads. The store's own methods are in `store::lance` itself (its `mod.rs`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::time::Duration;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use lancedb::query::ExecutableQuery;
use lancedb::{Connection, Table};

use super::failure::{self, is_missing_file};
use super::row_cache::RowCache;
use super::tables::TableId;
use crate::store::{Location, StoreError};

/// Format version of the tables this binary writes (bumped on incompatible schema changes).
pub const FORMAT_VERSION: &str = "1";
/// How stale a read may be with respect to other processes' commits: zero, every read checks.
pub const READ_CONSISTENCY: Duration = Duration::ZERO;

/// One open table and what this process keeps about it.
pub(super) struct TableHandle {
    pub table: Table,
    /// What the rankings read of their candidates ([`super::row_cache`]); holds nothing (capacity 0)
    /// for a table no search ranks.
    pub row_cache: RowCache,
    /// Columns whose full-text index is known to exist; held while one is built.
    pub fts_ready: tokio::sync::Mutex<HashSet<&'static str>>,
    /// Writes committed through this handle, for background upkeep ([`super::policy::chore_after_write`]).
    pub writes: AtomicUsize,
    /// Seen past [`super::policy::FTS_FOLD_MAX_ROWS`] rows: writes skip the full-text check (and its row
    /// count) from then on, leaving new rows to upkeep.
    pub past_fold_size: AtomicBool,
    /// A full-text check after a write waits to run (at most one per table).
    pub fold_pending: AtomicBool,
}

impl TableHandle {
    pub(super) fn new(table: Table, row_cache_rows: usize) -> Self {
        Self {
            table,
            row_cache: RowCache::new(row_cache_rows),
            fts_ready: Default::default(),
            writes: AtomicUsize::new(0),
            past_fold_size: AtomicBool::new(false),
            fold_pending: AtomicBool::new(false),
        }
    }
}

/// An open store: a LanceDB connection and its tables, created on first open.
#[derive(Clone)]
pub struct LanceStore {
    pub(super) location: Location,
    pub(super) conn: Connection,
    /// Every table, at its [`TableId::index`].
    pub(super) tables: Arc<[TableHandle; TableId::ALL.len()]>,
    /// Held by the full-text check that runs after a write: one at a time per handle.
    pub(super) fold_running: Arc<tokio::sync::Mutex<()>>,
    /// Lance's session of this connection: its index and metadata caches ([`super::io::session`]).
    pub(super) session: Arc<lance::session::Session>,
}

/// One table of an open store: what every operation on a single table is a method of (its rankings in
/// `search`, its writes in `write` and `group`, its locks in `commit`, its upkeep in `upkeep`). Copied
/// freely: a store and a [`TableId`].
#[derive(Clone, Copy)]
pub(super) struct StoreTable<'a> {
    pub store: &'a LanceStore,
    pub id: TableId,
}

impl<'a> StoreTable<'a> {
    pub(super) fn new(store: &'a LanceStore, id: TableId) -> Self {
        Self { store, id }
    }

    /// What this process keeps about the table.
    pub(super) fn handle(self) -> &'a TableHandle {
        &self.store.tables[self.id.index()]
    }

    /// The open table.
    pub(super) fn table(self) -> &'a Table {
        &self.handle().table
    }

    /// The table's [`super::row_cache`].
    pub(super) fn row_cache(self) -> &'a RowCache {
        &self.handle().row_cache
    }

    /// Rows matching a SQL `filter`, at most `limit` (all when `None`).
    pub(super) async fn select(self, filter: &str, limit: Option<usize>) -> Result<Vec<RecordBatch>, StoreError> {
        use lancedb::query::QueryBase;
        let mut query = self.table().query().only_if(filter);
        if let Some(limit) = limit {
            query = query.limit(limit);
        }
        collect(&query).await.map_err(backend)
    }
}

/// A failed call into Lance (or Arrow, DataFusion, the object store under it) as a store error: its
/// kind read from the error's variants ([`failure::classify`]), the error kept as the source.
pub(super) fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Engine { kind: failure::classify(&e), source: Arc::new(e) }
}

/// How many times a read runs when the files it read are gone ([`collect`]).
const READ_ATTEMPTS: u32 = 4;

/// Runs a query and collects its batches. A read whose files were removed under it (another process
/// compacted the table and pruned the version this read had just opened: `memory optimize
/// --prune-older-than 0`) runs again, on the table's latest version ([`READ_CONSISTENCY`]), up to
/// [`READ_ATTEMPTS`] times.
pub(super) async fn collect(query: &impl ExecutableQuery) -> lancedb::Result<Vec<RecordBatch>> {
    let mut attempt = 1;
    loop {
        let result = match query.execute().await {
            Ok(stream) => stream.try_collect().await,
            Err(e) => Err(e),
        };
        match result {
            Err(e) if attempt < READ_ATTEMPTS && is_missing_file(&e) => {
                tracing::debug!(attempt, "a file of the version read was pruned, reading again: {e}");
                tokio::time::sleep(Duration::from_millis(5 * u64::from(attempt))).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}
