//! The LanceDB backend (docs/storage.md): one directory, local or a prefix of an object store, holding
//! the `fixes`, `archival`, conversation (`session_items`) and `core_blocks` tables and a small `meta` table with the
//! store's format version and the embedding model's id and dimension. The only module that imports
//! lancedb or arrow.
//!
//! Guarantees: a write returns only after Lance committed it (a new manifest version on disk), so an
//! acknowledged write survives a crash. Appends and merge-inserts from several processes are
//! serialised by Lance's optimistic commit protocol; we retry on a commit conflict. On a local
//! directory every read checks for other processes' commits first ([`READ_CONSISTENCY`] is zero: one
//! look at the table's latest manifest per query), so a write is visible to every server on the
//! directory as soon as it returns; on object storage a read may lag by up to half a
//! second ([`remote::READ_CONSISTENCY`], `--read-consistency-ms`).
//!
//! Every table's `id` (`key` for `meta`) is its key for Lance ([`rows::key_field`]): two merge-inserts
//! that commit at once with a key in common conflict, and the second is retried against the first's
//! version. So an insert-if-absent of an archival passage or a conversation item writes its row once,
//! and a core block's next version is written by one writer (the other reads the block again), even
//! when the writers share nothing but an object store. Tag merges write only if the row is still as
//! read, and a distill run and the creation of a table hold a lease object on object storage. On a
//! local directory the same writes also run under an exclusive `flock(2)` on `<db>/<table>.lock`
//! ([`TableLock`](commit::TableLock)), which spares the writers of one machine those conflicts; there
//! the creation of a table relies on it (the processes of one machine), and nothing across machines
//! does. docs/storage.md lists what each write guarantees where.
//!
//! One file per job: `open` (opening, the `meta` checks, the full-text indexes found at open), `fts`
//! (which columns each table indexes for BM25, and which indexes are stale), `sql`
//! (filters and literals), `search` (rankings and the reading of ranked rows, for every searchable
//! table through one implementation of `store::Searchable`), `commit` (retried commits, keyed merges,
//! locks), `write` (the writes built on them: inserts, updates, deletions, what follows a write),
//! `group` (the inserts of one process committed together), `upkeep` (index building,
//! compaction, pruning), `admin` (operator views), `transfer` (export, import, re-embedding), `remote`
//! (what object storage needs); one file per table for its schema and rows (`fixes`, `archival`,
//! `conversation`, `core_blocks`, `distill`), and beside them [`io`], [`row_cache`] and `rows`.

mod admin;
mod archival;
mod browse;
mod commit;
mod conversation;
mod core_blocks;
mod distill;
mod failure;
mod fixes;
mod fts;
mod group;
pub mod io;
mod open;
mod read_cache;
mod remote;
pub mod row_cache;
mod rows;
mod search;
mod sql;
mod transfer;
mod upkeep;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;
use futures::TryStreamExt;
use lancedb::query::ExecutableQuery;
use lancedb::{Connection, Table};

use super::{Location, StoreError};
use failure::is_missing_file;

pub use crate::store::{ListedRow, TableStats};
pub use admin::preview;
pub use archival::ARCHIVAL_TABLE;
pub use conversation::CONVERSATION_TABLE;
pub use core_blocks::CORE_BLOCKS_TABLE;
pub use distill::DISTILL_RUNS_TABLE;
pub use fixes::FIXES_TABLE;
pub use open::OpenOptions;
pub use search::{ANN_EF, ANN_EF_MAX, ANN_REFINE_FACTOR, ANN_ROWS_PER_EF, ann_ef};
pub use transfer::{EXPORT_VERSION, ExportHeader, ImportReport, TableCounts, parse_export_row, read_export_header};
pub use upkeep::{
    ANN_MIN_ROWS, COMPACT_EVERY_WRITES, MAX_VECTOR_INDEX_SEGMENTS, PRUNE_OLDER_THAN_SECS, UPKEEP_EVERY_WRITES,
    UPKEEP_FRAGMENTS, wait_for_upkeep,
};
pub use write::{FTS_FLAT_MAX_ROWS, FTS_FOLD_MAX_ROWS, FTS_UNINDEXED_SHARE};

/// Ids of forgotten conversation items, so a re-import (the Claude Code hook runs at every stop) does not
/// bring them back. Holds ids only, no text.
pub const FORGOTTEN_TABLE: &str = "forgotten";

/// The tables that hold memories, in export order.
pub const TABLES: [&str; 4] = [FIXES_TABLE, ARCHIVAL_TABLE, CONVERSATION_TABLE, CORE_BLOCKS_TABLE];
/// The tables searched by embedding and full text (`core_blocks` is read whole).
pub const SEARCHABLE_TABLES: [&str; 3] = [FIXES_TABLE, ARCHIVAL_TABLE, CONVERSATION_TABLE];

/// Format version of the tables this binary writes (bumped on incompatible schema changes).
pub const FORMAT_VERSION: &str = "1";
/// How stale a read may be with respect to other processes' commits: zero, every read checks.
pub const READ_CONSISTENCY: Duration = Duration::ZERO;
pub(crate) const META_TABLE: &str = "meta";

/// An open store: a LanceDB connection and its tables, created on first open.
#[derive(Clone)]
pub struct LanceStore {
    location: Location,
    conn: Connection,
    fixes: Table,
    archival: Table,
    session_items: Table,
    core_blocks: Table,
    forgotten: Table,
    distill_runs: Table,
    /// Searchable tables whose full-text index is known to exist.
    fts_ready: Arc<tokio::sync::Mutex<std::collections::HashSet<(&'static str, &'static str)>>>,
    /// Writes committed through this handle per table, for background upkeep every
    /// [`UPKEEP_EVERY_WRITES`] writes to that table.
    writes: Arc<std::sync::Mutex<HashMap<&'static str, usize>>>,
    /// Tables seen past [`FTS_FOLD_MAX_ROWS`] rows through this handle: their writes skip the fold check
    /// (and its row count) from then on, leaving new rows to upkeep.
    past_fold_size: Arc<std::sync::Mutex<std::collections::HashSet<&'static str>>>,
    /// The full-text index checks after this handle's writes, run in the background.
    fold_checks: Arc<write::FoldChecks>,
    /// What the rankings of each searchable table read of their candidates ([`row_cache`]).
    row_caches: Arc<row_cache::RowCaches>,
    /// Lance's session of this connection: its index and metadata caches ([`io::session`]).
    session: Arc<lance::session::Session>,
}

impl LanceStore {
    /// Where the store lives: its directory (absolute) or URI.
    pub fn path(&self) -> &str {
        self.location.as_str()
    }

    /// Where the store lives, as parsed when it opened.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Bytes Lance's index and metadata caches of this connection hold now (at most
    /// [`OpenOptions::cache_mib`] MiB).
    pub fn cache_bytes(&self) -> u64 {
        self.session.size_bytes()
    }

    /// The open table called `name` (one of [`TABLES`]).
    fn table(&self, name: &str) -> &Table {
        match name {
            FIXES_TABLE => &self.fixes,
            ARCHIVAL_TABLE => &self.archival,
            CONVERSATION_TABLE => &self.session_items,
            CORE_BLOCKS_TABLE => &self.core_blocks,
            FORGOTTEN_TABLE => &self.forgotten,
            DISTILL_RUNS_TABLE => &self.distill_runs,
            other => unreachable!("no table {other}"),
        }
    }

    /// The [`row_cache`] of searchable table `name`.
    fn row_cache(&self, name: &str) -> &row_cache::RowCache {
        match name {
            FIXES_TABLE => &self.row_caches.fixes,
            ARCHIVAL_TABLE => &self.row_caches.archival,
            CONVERSATION_TABLE => &self.row_caches.session_items,
            other => unreachable!("no row cache for {other}"),
        }
    }

    /// Rows of `name` matching a SQL `filter`, at most `limit` (all when `None`).
    async fn select(
        &self,
        name: &'static str,
        filter: &str,
        limit: Option<usize>,
    ) -> Result<Vec<RecordBatch>, StoreError> {
        use lancedb::query::QueryBase;
        let mut query = self.table(name).query().only_if(filter);
        if let Some(limit) = limit {
            query = query.limit(limit);
        }
        collect(&query).await.map_err(backend)
    }
}

/// A failed call into Lance (or Arrow, DataFusion, the object store under it) as a store error: its
/// kind read from the error's variants ([`failure::classify`]), the error kept as the source.
fn backend(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Engine { kind: failure::classify(&e), source: std::sync::Arc::new(e) }
}

/// How many times a read runs when the files it read are gone ([`collect`]).
const READ_ATTEMPTS: u32 = 4;

/// Runs a query and collects its batches. A read whose files were removed under it (another process
/// compacted the table and pruned the version this read had just opened: `memory optimize
/// --prune-older-than 0`) runs again, on the table's latest version ([`READ_CONSISTENCY`]), up to
/// [`READ_ATTEMPTS`] times.
async fn collect(query: &impl ExecutableQuery) -> lancedb::Result<Vec<RecordBatch>> {
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

/// Rows the unit tests of several files write.
#[cfg(test)]
mod test_rows {
    use crate::embed::DIMENSION;

    pub(super) fn passage(actor: &str, text: &str) -> (crate::domain::Passage, Vec<f32>) {
        let now = chrono::Utc::now();
        let passage = crate::domain::Passage {
            id: crate::domain::passage_id(actor, "p", text),
            actor_id: actor.into(),
            project: "p".into(),
            session_id: String::new(),
            turn: None,
            source: "test".into(),
            tags: Vec::new(),
            text: text.into(),
            embedded_text: text.into(),
            created_at: now,
            updated_at: now,
            superseded_by: None,
        };
        // a distinct unit vector per text
        let mut vector = vec![0.0; DIMENSION];
        vector[text.len() % DIMENSION] = 1.0;
        (passage, vector)
    }
}
