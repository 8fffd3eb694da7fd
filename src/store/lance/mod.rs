//! The LanceDB backend (docs/storage.md): one embedded directory holding the `fixes`, `archival`,
//! `session_items` and `core_blocks` tables and a small `meta` table with the store's format version and
//! the embedding model's id and dimension. The only module that imports lancedb or arrow.
//!
//! Guarantees: a write returns only after Lance committed it (a new manifest version on disk), so an
//! acknowledged write survives a crash. Appends and merge-inserts from several processes are
//! serialised by Lance's optimistic commit protocol; we retry on a commit conflict. Every read checks
//! for other processes' commits first ([`READ_CONSISTENCY`] is zero: one look at the table's latest
//! manifest per query), so a write is visible to every server on the directory as soon as it returns.
//!
//! Lance does not detect two concurrent inserts of the same key, so the writes that must not duplicate a
//! row — an insert-if-absent of an archival passage or a conversation item, a core block's next version —
//! run under an exclusive `flock(2)` on `<db>/<table>.lock` ([`TableLock`]), held from the existence
//! check to the commit. That covers every process on this machine; a store on an object-store URI has no
//! lock file, and there two processes inserting the same text at once can write it twice.

mod archival;
mod core_blocks;
mod distill;
mod fixes;
pub mod io;
pub mod manage;
pub mod row_cache;
mod rows;
mod sessions;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use lancedb::query::ExecutableQuery;
use lancedb::{Connection, Table};

use super::StoreError;
use crate::embed::{DIMENSION, MODEL_ID};

pub use archival::ARCHIVAL_TABLE;
pub use core_blocks::CORE_BLOCKS_TABLE;
pub use distill::DISTILL_RUNS_TABLE;
pub use fixes::FIXES_TABLE;
pub use sessions::SESSION_ITEMS_TABLE;

/// Ids of forgotten conversation items, so a re-import (the Claude Code hook runs at every stop) does not
/// bring them back. Holds ids only, no text.
pub const FORGOTTEN_TABLE: &str = "forgotten";

/// The tables that hold memories, in export order.
pub const TABLES: [&str; 4] = [FIXES_TABLE, ARCHIVAL_TABLE, SESSION_ITEMS_TABLE, CORE_BLOCKS_TABLE];
/// The tables searched by embedding and full text (`core_blocks` is read whole).
pub const SEARCHABLE_TABLES: [&str; 3] = [FIXES_TABLE, ARCHIVAL_TABLE, SESSION_ITEMS_TABLE];

/// Format version of the tables this binary writes (bumped on incompatible schema changes).
pub const FORMAT_VERSION: &str = "1";
/// How stale a read may be with respect to other processes' commits: zero, every read checks.
pub const READ_CONSISTENCY: Duration = Duration::ZERO;
pub(crate) const META_TABLE: &str = "meta";
/// Attempts for a write that meets a commit conflict or a concurrent table creation (backoff doubles
/// from 20 ms to 640 ms: about 4.5 s in all, enough to outlast a concurrent compaction or re-embedding).
const WRITE_ATTEMPTS: usize = 12;

/// An open store: a LanceDB connection and its tables, created on first open.
#[derive(Clone)]
pub struct LanceStore {
    path: String,
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
    /// What the rankings of each searchable table read of their candidates ([`row_cache`]).
    row_caches: Arc<row_cache::RowCaches>,
}

/// Background upkeep (compaction, index refresh, pruning; docs/storage.md) runs on a table after this many
/// writes to it through one store handle.
pub const UPKEEP_EVERY_WRITES: usize = 100;

/// Tables of up to this many rows fold new rows into their full-text indexes as soon as the rows the
/// index does not cover exceed [`FTS_UNINDEXED_SHARE`] of those it does; larger ones leave it to upkeep.
/// Lance 14 scores the rows an FTS index covers with the index's statistics (document count, document
/// frequency of each term) and the rows it does not cover with those statistics plus the new rows'
/// (`lance::io::exec::fts`, `residual_bm25_scorer`), so a new row sharing a rare term with an indexed
/// one scores lower for it (the term's document frequency counts the new row on one side only). While
/// such rows are a large share of a small table (a fresh store's index covers its first row only) a
/// passage could rank below its neighbours for its own words.
pub const FTS_FOLD_MAX_ROWS: usize = 1_000;

/// Tables of up to this many rows fold every new row into their full-text indexes at once, so no row of
/// a small store is scored apart from the others (above: a new "Use pnpm not npm" ranked below an indexed
/// "pnpm not npm use" for its own words). Cost, measured over 400 single inserts (BENCHMARKS.md,
/// "Full-text fold"): about 20 ms per insert (p50 105–111 against 89 ms at 26–100 rows), and the index
/// copies each fold writes (34 against 15.5 MiB) until upkeep prunes them.
pub const FTS_FOLD_EVERY_WRITE_ROWS: usize = 250;

/// The share of unindexed rows (against indexed ones) above which a table of more than
/// [`FTS_FOLD_EVERY_WRITE_ROWS`] and at most [`FTS_FOLD_MAX_ROWS`] rows folds them in: 1/8, so the folds
/// of a growing table come at every 12.5 % of growth (about 60 for its first 1,000 rows), not at every
/// write, since each fold writes a new copy of the index until upkeep prunes old versions.
pub const FTS_UNINDEXED_SHARE: f64 = 0.125;

/// Rows from which a searchable table gets an ANN index on its vectors and scalar indexes on its filter
/// columns (built by upkeep). Below it, an exact (flat) scan is fast enough: 6–11 ms at 10k rows of 384
/// floats here, by machine (BENCHMARKS.md, "Exact search below 5,000 rows").
pub const ANN_MIN_ROWS: usize = 5_000;
/// HNSW candidate list of a query (`ef`), at least; raised to 4 × the limit for larger limits, and to
/// one per [`ANN_ROWS_PER_EF`] rows of the table for large tables ([`ann_ef`]).
pub const ANN_EF: usize = 100;
/// Table rows per HNSW candidate in large tables: `ef` grows with the table, since a fixed `ef` loses
/// recall there. Measured on the 1M benchmark store (100 queries, store only; BENCHMARKS.md, "HNSW `ef`
/// grows with the table"): `ef` 200 gave recall@10 0.830 at p50 22.7 ms, 400 0.892 (21.8 ms), 1,000 0.942 (22.2 ms), 2,000 0.982 (24.7 ms);
/// at 10k every `ef` up to 2,000 gave 1.000, and p50 5.0 ms (200), 5.9–6.4 (1,000), 6.7–7.0 (2,000).
pub const ANN_ROWS_PER_EF: usize = 500;
/// The largest `ef` [`ann_ef`] chooses (for tables of 1M rows and more) unless the limit asks for more.
pub const ANN_EF_MAX: usize = 2_000;

/// The HNSW candidate list (`ef`) of a query for `limit` rows in a table of `rows` rows: 4 × `limit`
/// and at least [`ANN_EF`], growing by one per [`ANN_ROWS_PER_EF`] rows up to [`ANN_EF_MAX`]. 200 for a
/// search of 50 candidates up to 100k rows, 2,000 at 1M.
pub fn ann_ef(rows: usize, limit: usize) -> usize {
    let least = ANN_EF.max(4 * limit);
    (rows / ANN_ROWS_PER_EF).clamp(least, ANN_EF_MAX.max(least))
}
/// Rows re-ranked with their full vectors per row returned, correcting the scalar quantisation's order.
/// 1 re-ranks exactly the rows returned: at 1M rows it costs about 4 ms less per search than 4
/// (BENCHMARKS.md, "Refine factor 1"); recall@10 there is measured of the 50 candidates it re-ranks.
pub const ANN_REFINE_FACTOR: u32 = 1;

/// How a store is opened: how it reads its files and how many rows per table its row cache holds.
/// Settings of one opening, not of the process (`--lance-io`, `--row-cache-rows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// How a local directory's files are read ([`io`]).
    pub read_io: io::ReadIo,
    /// Rows per searchable table the [`row_cache`] holds; 0 turns it off.
    pub row_cache_rows: usize,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self { read_io: io::ReadIo::Auto, row_cache_rows: row_cache::DEFAULT_ROW_CACHE_ROWS }
    }
}

impl LanceStore {
    /// Opens (creating when absent) the store at `path` (a directory, a `file://` URL of one, or an
    /// object-store URI) with the default [`OpenOptions`], checking the `meta` table's format version
    /// and embedding model.
    ///
    /// # Errors
    /// As [`Self::open_with`].
    pub async fn open(path: &str) -> Result<Self, StoreError> {
        Self::open_checked(path, OpenOptions::default(), true).await
    }

    /// Opens (creating when absent) the store at `path` as `options` say, checking the `meta` table's
    /// format version and embedding model.
    ///
    /// # Errors
    /// [`StoreError::Open`] when the directory is unusable, [`StoreError::ReadIo`] when `--lance-io
    /// uring` cannot be honoured here or `path` is a `file+uring://` URL, [`StoreError::ModelMismatch`] /
    /// [`StoreError::FormatVersion`] when the store was built differently.
    pub async fn open_with(path: &str, options: OpenOptions) -> Result<Self, StoreError> {
        Self::open_checked(path, options, true).await
    }

    /// Opens the store without checking the embedding model (for `memory reindex`, which re-embeds a
    /// store built with another model). The format version is still checked.
    pub async fn open_for_reindex(path: &str, options: OpenOptions) -> Result<Self, StoreError> {
        Self::open_checked(path, options, false).await
    }

    async fn open_checked(path: &str, options: OpenOptions, check_model: bool) -> Result<Self, StoreError> {
        let open_err = |e: &dyn std::fmt::Display| StoreError::Open { path: path.to_string(), message: e.to_string() };
        if path.starts_with("file+uring:") {
            return Err(StoreError::ReadIo {
                path: path.to_string(),
                message: "a file+uring:// URL is not a store path (Lance would commit to it unsafely); give the \
                          directory's path, and --lance-io uring"
                    .into(),
            });
        }
        // A `file://` URL is a local directory: its path gets the locks and the reads of one.
        let local;
        let path = match url::Url::parse(path).ok().filter(|u| u.scheme() == "file").map(|u| u.to_file_path()) {
            Some(Ok(p)) => {
                local = p.to_string_lossy().into_owned();
                local.as_str()
            }
            Some(Err(())) => return Err(open_err(&format!("{path} is not a local file:// URL"))),
            None => path,
        };
        let absolute;
        let (path, session) = if path.contains("://") {
            (path, None)
        } else {
            // how a local directory is read (see `io`), settled before anything is created
            let session = io::session(options.read_io)
                .map_err(|message| StoreError::ReadIo { path: path.to_string(), message })?;
            // made absolute: lancedb reads a bare name such as `db` as a cloud URI
            std::fs::create_dir_all(path).map_err(|e| open_err(&e))?;
            absolute = std::path::absolute(path).map_err(|e| open_err(&e))?.to_string_lossy().into_owned();
            (absolute.as_str(), session)
        };
        let mut connect = lancedb::connect(path);
        if let Some(session) = session {
            connect = connect.session(session);
        }
        let conn = connect.read_consistency_interval(READ_CONSISTENCY).execute().await.map_err(|e| open_err(&e))?;
        let meta = open_or_create(&conn, META_TABLE, meta_schema()).await.map_err(|e| open_err(&e))?;
        check_meta(path, &meta, check_model).await?;
        let fixes = open_or_create(&conn, FIXES_TABLE, fixes::schema()).await.map_err(|e| open_err(&e))?;
        let archival = open_or_create(&conn, ARCHIVAL_TABLE, archival::schema()).await.map_err(|e| open_err(&e))?;
        let session_items =
            open_or_create(&conn, SESSION_ITEMS_TABLE, sessions::schema()).await.map_err(|e| open_err(&e))?;
        let core_blocks =
            open_or_create(&conn, CORE_BLOCKS_TABLE, core_blocks::schema()).await.map_err(|e| open_err(&e))?;
        let forgotten = open_or_create(&conn, FORGOTTEN_TABLE, forgotten_schema()).await.map_err(|e| open_err(&e))?;
        let distill_runs =
            open_or_create(&conn, DISTILL_RUNS_TABLE, distill::schema()).await.map_err(|e| open_err(&e))?;
        let row_caches = Arc::new(row_cache::RowCaches {
            fixes: row_cache::RowCache::new(row_cache_capacity(&fixes, options.row_cache_rows).await),
            archival: row_cache::RowCache::new(row_cache_capacity(&archival, options.row_cache_rows).await),
            session_items: row_cache::RowCache::new(row_cache_capacity(&session_items, options.row_cache_rows).await),
        });
        let store = Self {
            path: path.to_string(),
            conn,
            fixes,
            archival,
            session_items,
            core_blocks,
            forgotten,
            distill_runs,
            fts_ready: Arc::default(),
            writes: Arc::default(),
            past_fold_size: Arc::default(),
            row_caches,
        };
        for name in SEARCHABLE_TABLES {
            for &column in fts_columns(name) {
                if has_fts_index(store.table(name), name, column).await.map_err(|e| open_err(&e))? {
                    store.fts_ready.lock().await.insert((name, column));
                } else if has_stale_fts_index(store.table(name), name, column).await.map_err(|e| open_err(&e))? {
                    // an index built with another analyzer (an older version of this program): rebuilt
                    // now, so no search reads it with this version's query tokenizer
                    store.ensure_fts(name).await.map_err(|e| open_err(&e))?;
                }
            }
        }
        Ok(store)
    }

    /// Where the store lives (the `--db` value).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The open table called `name` (one of [`TABLES`]).
    fn table(&self, name: &str) -> &Table {
        match name {
            FIXES_TABLE => &self.fixes,
            ARCHIVAL_TABLE => &self.archival,
            SESSION_ITEMS_TABLE => &self.session_items,
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
            SESSION_ITEMS_TABLE => &self.row_caches.session_items,
            other => unreachable!("no row cache for {other}"),
        }
    }

    /// Reads a table of at most `rows` rows into its [`row_cache`] in the background, when
    /// [`row_cache::RowCache::should_fill`] says so: after a table's first search, after this process
    /// compacted it, and when it has grown to twice what is cached.
    fn fill_row_cache_if_due(&self, name: &'static str, rows: usize) {
        if !self.row_cache(name).should_fill(rows) {
            return;
        }
        let store = self.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let cache = store.row_cache(name);
            let _filling = row_cache::Filling(cache);
            let generation = cache.generation();
            match store.read_rows_at(name, None, true).await {
                Ok(Some(read)) => {
                    let n = read.len();
                    cache.insert(generation, read);
                    tracing::debug!(table = name, rows = n, ms = ms_since(started), "row cache filled");
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(table = name, "row cache not filled: {e}"),
            }
        });
    }

    /// Is the full-text index of `name.column` there? Checks again while it is not, so a store opened
    /// before another process built the index starts using it.
    async fn fts_available(&self, name: &'static str, column: &'static str) -> bool {
        let mut ready = self.fts_ready.lock().await;
        if !ready.contains(&(name, column)) && has_fts_index(self.table(name), name, column).await.unwrap_or(false) {
            ready.insert((name, column));
        }
        ready.contains(&(name, column))
    }

    /// Builds the full-text indexes of `name` ([`fts_columns`]) once the table has rows (Lance cannot
    /// train an index on an empty table). Rows added later are searched unindexed (Lance scans them)
    /// until upkeep folds them into the index.
    async fn ensure_fts(&self, name: &'static str) -> Result<(), StoreError> {
        let mut ready = self.fts_ready.lock().await;
        let table = self.table(name);
        for &column in fts_columns(name) {
            if ready.contains(&(name, column)) {
                continue;
            }
            if has_fts_index(table, name, column).await.map_err(backend)? {
                ready.insert((name, column));
                continue;
            }
            if table.count_rows(None).await.map_err(backend)? == 0 {
                return Ok(());
            }
            // an index of this column built with another analyzer goes first (one FTS index per column)
            for stale in stale_fts_indexes(table, name, column).await.map_err(backend)? {
                match table.drop_index(&stale).await {
                    Ok(()) => tracing::info!(
                        table = name,
                        column,
                        index = stale,
                        "full-text index rebuilt with this version's analyzer"
                    ),
                    Err(e) => tracing::debug!(table = name, index = stale, "stale full-text index already gone: {e}"),
                }
            }
            let result = table
                .create_index(&[column], lancedb::index::Index::FTS(fts_params(name)))
                .name(fts_index_name(name, column))
                .execute()
                .await;
            match result {
                Ok(()) => {
                    ready.insert((name, column));
                }
                // Another process may have built it at the same moment.
                Err(e) if has_fts_index(table, name, column).await.unwrap_or(false) => {
                    tracing::debug!("full-text index created concurrently: {e}");
                    ready.insert((name, column));
                }
                Err(e) => return Err(backend(e)),
            }
        }
        Ok(())
    }

    /// Folds the rows not yet indexed into the full-text indexes of `name`: any of them while the table
    /// has at most [`FTS_FOLD_EVERY_WRITE_ROWS`] rows, more than [`FTS_UNINDEXED_SHARE`] of the indexed
    /// ones while it has at most [`FTS_FOLD_MAX_ROWS`]. Once a table is seen larger, this handle stops
    /// checking it (no row count per write).
    async fn fold_into_fts_while_small(&self, name: &'static str) -> Result<(), StoreError> {
        use lancedb::table::{OptimizeAction, OptimizeOptions};
        if self.past_fold_size.lock().unwrap_or_else(|p| p.into_inner()).contains(name) {
            return Ok(());
        }
        let table = self.table(name);
        let rows = table.count_rows(None).await.map_err(backend)?;
        if rows > FTS_FOLD_MAX_ROWS {
            self.past_fold_size.lock().unwrap_or_else(|p| p.into_inner()).insert(name);
            return Ok(());
        }
        let mut stale = Vec::new();
        for ix in table.list_indices().await.map_err(backend)? {
            if ix.index_type != lancedb::index::IndexType::FTS {
                continue;
            }
            let Some(stats) = table.index_stats(&ix.name).await.map_err(backend)? else { continue };
            let unindexed = stats.num_unindexed_rows;
            if (rows <= FTS_FOLD_EVERY_WRITE_ROWS && unindexed > 0)
                || unindexed as f64 > FTS_UNINDEXED_SHARE * stats.num_indexed_rows as f64
            {
                stale.push(ix.name);
            }
        }
        if stale.is_empty() {
            return Ok(());
        }
        let _maintenance = self.maintenance_lock(name).await;
        retry(|| table.optimize(OptimizeAction::Index(OptimizeOptions::default().index_names(stale.clone()))))
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Builds every full-text index a table with rows lacks (a store written by an older version, or
    /// before an index was added).
    pub async fn ensure_indexes(&self) -> Result<(), StoreError> {
        for name in SEARCHABLE_TABLES {
            self.ensure_fts(name).await?;
        }
        Ok(())
    }

    /// After a committed write: make sure the full-text index exists. A failure only degrades keyword
    /// search to the vector ranking, so it is logged, not returned (the write itself succeeded).
    async fn after_write(&self, name: &'static str) {
        if let Err(e) = self.ensure_fts(name).await {
            tracing::warn!(table = name, "full-text index not built yet: {e}");
        } else if let Err(e) = self.fold_into_fts_while_small(name).await {
            tracing::warn!(table = name, "new rows not folded into the full-text index yet: {e}");
        }
        let n = {
            let mut writes = self.writes.lock().unwrap_or_else(|p| p.into_inner());
            let n = writes.entry(name).or_default();
            *n += 1;
            *n
        };
        if n.is_multiple_of(UPKEEP_EVERY_WRITES) {
            let store = self.clone();
            let mut tasks = upkeep_tasks().lock().unwrap_or_else(|p| p.into_inner());
            while tasks.try_join_next().is_some() {}
            tasks.spawn(async move {
                if let Err(e) = store
                    .optimize_table(
                        name,
                        Some(chrono::Duration::seconds(manage::PRUNE_OLDER_THAN_SECS)),
                        manage::MAX_VECTOR_INDEX_SEGMENTS,
                    )
                    .await
                {
                    tracing::warn!(table = name, "background upkeep failed (run `astra-mcp memory optimize`): {e}");
                }
            });
        }
    }

    /// One full-text (BM25) ranking per indexed column ([`fts_columns`]) of `name` for `text`, filtered
    /// (see [`Self::rank_then_filter`]), as row references: the rows are read only for the hits a search
    /// returns. A query the full-text parser rejects leaves that ranking empty rather than failing the
    /// search.
    async fn keyword_rankings(
        &self,
        name: &'static str,
        filter: &Filter,
        text: &str,
        limit: usize,
    ) -> Result<crate::store::KeywordRankings, StoreError> {
        let started = std::time::Instant::now();
        if filter.broad.is_some() {
            // the rankings below read through the row cache: check it is still this table's (a failure
            // here fails the rankings too, which are left empty below)
            if let Err(e) = self.latest_rows(name).await {
                tracing::debug!(table = name, "no look at the table's latest version: {e}");
            }
        }
        let mut rankings = Vec::new();
        for &column in fts_columns(name) {
            let mut refs = Vec::new();
            if !text.trim().is_empty() && self.fts_available(name, column).await {
                match self.keyword_ranking(name, column, filter, text, limit).await {
                    Ok(ranked) => refs = ranked,
                    Err(e) => tracing::warn!(table = name, column, "full-text search failed, ranking without it: {e}"),
                }
            }
            rankings.push(refs);
        }
        Ok(crate::store::KeywordRankings { rankings, ms: ms_since(started) })
    }

    /// The BM25 ranking of `name.column` for `text`, at most `limit` rows: unfiltered, then checked
    /// against a broad filter ([`Self::rank_then_filter`]); with Lance's prefilter when that fails or
    /// the filter is narrow.
    async fn keyword_ranking(
        &self,
        name: &'static str,
        column: &str,
        filter: &Filter,
        text: &str,
        limit: usize,
    ) -> Result<Vec<crate::store::Scored<crate::store::RowRef>>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let query = lancedb::index::scalar::FullTextSearchQuery::new(text.to_string())
            .with_column(column.to_string())
            .map_err(backend)?;
        let fts = self.table(name).query().full_text_search(query).limit(limit);
        if let Some(broad) = &filter.broad {
            let unfiltered = fts.clone().select(Select::columns(&["_score"])).with_row_id();
            if let Some(ranked) = self.rank_then_filter(name, unfiltered, broad, false).await? {
                return Ok(by_score(ranked.into_iter().map(|r| (r.row, r.score)), |_| f32::NAN));
            }
        }
        let fts = fts.select(Select::columns(&["id", "_score"])).with_row_id();
        let mut refs = Vec::new();
        for batch in &prefiltered(fts, filter).await.map_err(backend)? {
            refs.extend(row_refs(batch, name)?);
        }
        Ok(by_score(refs, |_| f32::NAN))
    }

    /// The vector ranking of `name` for `vector` (filtered, see [`Self::rank_then_filter`]) as row references with
    /// their cosine.
    async fn vector_ranking(
        &self,
        name: &'static str,
        filter: &Filter,
        vector: &[f32],
        limit: usize,
    ) -> Result<crate::store::VectorRanking, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let started = std::time::Instant::now();
        let ranked = match &filter.broad {
            Some(broad) => {
                let (query, rows) = self.nearest_approx(name, vector, limit).await?;
                let unfiltered = query.select(Select::columns(&["_distance"])).with_row_id();
                let ranked = self.rank_then_filter(name, unfiltered, broad, true).await?;
                self.fill_row_cache_if_due(name, rows);
                ranked
            }
            None => None,
        };
        let by_vector = match ranked {
            // re-ranked by the exact cosine of the stored vectors, as Lance's refine step would
            Some(ranked) => {
                let mut scored: Vec<(crate::store::RowRef, Option<f32>)> =
                    ranked.into_iter().map(|r| (r.row, r.vector.map(|v| crate::embed::cosine(vector, &v)))).collect();
                scored.sort_by(|a, b| b.1.unwrap_or(f32::NAN).total_cmp(&a.1.unwrap_or(f32::NAN)));
                by_score(scored, |cosine| cosine)
            }
            None => {
                let nearest = self
                    .nearest(name, vector, limit)
                    .await?
                    .select(Select::columns(&["id", "_distance"]))
                    .with_row_id();
                let mut refs = Vec::new();
                for batch in &prefiltered(nearest, filter).await.map_err(backend)? {
                    // Lance's cosine distance is 1 - cosine
                    refs.extend(
                        row_refs(batch, name)?.into_iter().map(|(row, distance)| (row, distance.map(|d| 1.0 - d))),
                    );
                }
                by_score(refs, |cosine| cosine)
            }
        };
        Ok(crate::store::VectorRanking { ranked: by_vector, ms: ms_since(started) })
    }

    /// The rows of `refs` in `T`'s table that are still stored for `actor_id`, in the order of `refs`.
    /// Read by row address (`_rowid`), then, for any ref whose address now holds another row or none (a
    /// compaction or deletion in between), by id.
    async fn rows_by_ref<T: SearchedRow>(
        &self,
        actor_id: &str,
        refs: &[crate::store::RowRef],
    ) -> Result<Vec<(T, Vec<f32>)>, StoreError> {
        use futures::TryStreamExt;
        use lancedb::query::ExecutableQuery;
        if refs.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: std::collections::HashSet<uuid::Uuid> = refs.iter().map(|r| r.id).collect();
        let mut found: HashMap<uuid::Uuid, (T, Vec<f32>)> = HashMap::new();
        let name = T::TABLE;
        let take = self.table(name).take_row_ids(refs.iter().map(|r| r.row_id).collect());
        // the take leaves out addresses that no longer hold a row (a deletion or compaction since the
        // ranking); those, and any take that fails, are read by id below
        let taken: Vec<RecordBatch> = match take.execute().await {
            Ok(stream) => stream.try_collect().await.unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        for batch in &taken {
            for (row, vector) in T::decode(batch)? {
                if wanted.contains(&row.id()) && row.actor_id() == actor_id {
                    found.insert(row.id(), (row, vector));
                }
            }
        }
        let missing: Vec<String> =
            refs.iter().filter(|r| !found.contains_key(&r.id)).map(|r| r.id.to_string()).collect();
        if !missing.is_empty() {
            let filter = format!(
                "actor_id = {} AND {}",
                sql_literal(actor_id),
                in_list("id", missing.iter().map(String::as_str))
            );
            for batch in self.select(name, &filter, None).await? {
                for (row, vector) in T::decode(&batch)? {
                    found.insert(row.id(), (row, vector));
                }
            }
        }
        Ok(refs.iter().filter_map(|r| found.remove(&r.id)).collect())
    }

    /// The `limit` rows of `name` nearest to `vector` by cosine, with the ANN settings of every search
    /// ([`ann_ef`], [`ANN_REFINE_FACTOR`]; Lance searches exactly where there is no index yet).
    async fn nearest(
        &self,
        name: &'static str,
        vector: &[f32],
        limit: usize,
    ) -> Result<lancedb::query::VectorQuery, StoreError> {
        Ok(self.nearest_approx(name, vector, limit).await?.0.refine_factor(ANN_REFINE_FACTOR))
    }

    /// [`Self::nearest`] without the refine step: through the vector index, the rows come in the order
    /// of their quantised distances, which the caller corrects from the stored vectors. With the table's
    /// row count.
    async fn nearest_approx(
        &self,
        name: &'static str,
        vector: &[f32],
        limit: usize,
    ) -> Result<(lancedb::query::VectorQuery, usize), StoreError> {
        use lancedb::query::QueryBase;
        let table = self.table(name);
        let rows = self.latest_rows(name).await?;
        let query = table
            .query()
            .nearest_to(vector)
            .map_err(backend)?
            .distance_type(lancedb::DistanceType::Cosine)
            .ef(ann_ef(rows, limit))
            .limit(limit);
        Ok((query, rows))
    }

    /// The row count of the latest version of `name`, from its manifest (no data is read; one look for a
    /// newer version, as every read makes). On the way, the table's [`row_cache`] checks that the
    /// directory was not replaced under this process ([`row_cache::RowCache::observe`]).
    async fn latest_rows(&self, name: &'static str) -> Result<usize, StoreError> {
        let table = self.table(name);
        let Some(dataset) = table.dataset() else { return table.count_rows(None).await.map_err(backend) };
        let dataset = dataset.get().await.map_err(backend)?;
        let manifest = dataset.manifest();
        if self.row_cache(name).observe(manifest.version, manifest.max_fragment_id().unwrap_or(0)) {
            tracing::info!(
                table = name,
                version = manifest.version,
                "the table was replaced on disk: row cache cleared"
            );
        }
        dataset.count_rows(None).await.map_err(backend)
    }

    /// Runs `query` — a ranking of `name` that selects only its score column and `_rowid` — without a
    /// filter, then reads the ranked rows' `id`, the columns of the broad filter and (with `vectors`)
    /// their `vector` in one read by address (those the [`row_cache`] lacks), and applies the filter
    /// here. Lance's own postfilter and refine step read those columns one take at a time (about 0.7 ms
    /// each at 10k rows, where the ranking itself takes 1 ms).
    ///
    /// Returns the ranking in order when it is the filtered ranking, i.e. every ranked row passed the
    /// filter (then the ranking's top is the filtered top). Returns `None` when a row failed the filter,
    /// or its address no longer holds it (a compaction or deletion since the ranking): the caller then
    /// ranks with Lance's prefilter. An address never holds another row, since Lance does not reuse
    /// fragment ids.
    async fn rank_then_filter<Q>(
        &self,
        name: &'static str,
        query: Q,
        filter: &Broad,
        vectors: bool,
    ) -> Result<Option<Vec<Ranked>>, StoreError>
    where
        Q: ExecutableQuery,
    {
        let mut addresses = Vec::new();
        let mut scores = Vec::new();
        for batch in collect(&query).await.map_err(backend)? {
            addresses.extend(row_addresses(&batch, name)?);
            scores.extend(ranking_scores(&batch));
        }
        let ranked = self.read_ranked(name, addresses, filter, vectors).await?;
        Ok(ranked.map(|rows| rows.into_iter().zip(scores).map(|(r, score)| Ranked { score, ..r }).collect()))
    }

    /// The reading half of [`Self::rank_then_filter`]: the rows at `addresses` (a ranking, best first)
    /// with their ids and, with `vectors`, their vectors, in the same order; `None` when one of them
    /// fails `filter` or is no longer at its address. Rows in the table's [`row_cache`] are not read
    /// again; the others are read in one take by address and cached.
    async fn read_ranked(
        &self,
        name: &'static str,
        addresses: Vec<u64>,
        filter: &Broad,
        vectors: bool,
    ) -> Result<Option<Vec<Ranked>>, StoreError> {
        if addresses.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let cache = self.row_cache(name);
        let generation = cache.generation();
        let mut rows = cache.get(&addresses, vectors);
        let missing: Vec<u64> = addresses.iter().zip(&rows).filter(|(_, r)| r.is_none()).map(|(a, _)| *a).collect();
        if !missing.is_empty() {
            let Some(read) = self.read_rows_at(name, Some(missing), vectors).await? else {
                return Ok(None);
            };
            let mut by_address: HashMap<u64, row_cache::CachedRow> = read.iter().cloned().collect();
            cache.insert(generation, read);
            for (address, row) in addresses.iter().zip(&mut rows) {
                if row.is_none() {
                    *row = by_address.remove(address);
                }
            }
        }
        let mut ranked = Vec::with_capacity(addresses.len());
        for (address, row) in addresses.into_iter().zip(rows) {
            // a row no longer at its address, or one the filter leaves out: rank again with the filter
            let Some(row) = row.filter(|r| filter.passes(&r.actor_id, r.superseded)) else { return Ok(None) };
            let vector = if vectors { row.vector } else { None };
            ranked.push(Ranked { row: crate::store::RowRef { id: row.id, row_id: address }, vector, score: None });
        }
        Ok(Some(ranked))
    }

    /// What the [`row_cache`] holds of the rows of `name` at `addresses` (with `None`, of every row of
    /// the table), read from the table: `id`, `actor_id`, `superseded_by` where the table has it, and
    /// with `vectors` the `vector`. A take leaves out the addresses that no longer hold a row (a
    /// deletion or compaction since the ranking); `Ok(None)` when it fails.
    async fn read_rows_at(
        &self,
        name: &'static str,
        addresses: Option<Vec<u64>>,
        vectors: bool,
    ) -> Result<Option<Vec<(u64, row_cache::CachedRow)>>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let superseded = name == ARCHIVAL_TABLE;
        let mut columns = vec!["id", "actor_id"];
        if superseded {
            columns.push("superseded_by");
        }
        if vectors {
            columns.push("vector");
        }
        self.row_cache(name).count_read();
        let table = self.table(name);
        let batches = match addresses {
            Some(addresses) => {
                let take = table.take_row_ids(addresses).select(Select::columns(&columns)).with_row_id();
                match collect(&take).await {
                    Ok(batches) => batches,
                    Err(e) => {
                        tracing::debug!(table = name, "ranked rows moved before they were read, ranking again: {e}");
                        return Ok(None);
                    }
                }
            }
            None => {
                let scan = table.query().select(Select::columns(&columns)).with_row_id();
                collect(&scan).await.map_err(backend)?
            }
        };
        let mut out = Vec::new();
        let mut actor: Option<Arc<str>> = None;
        for batch in &batches {
            let r = rows::Rows::new(batch, name);
            let ids = r.uuids("id")?;
            let actors = r.strs("actor_id")?;
            let replaced = if superseded { r.opt_strs("superseded_by")? } else { vec![None; ids.len()] };
            let mut stored: Vec<Option<Arc<[f32]>>> =
                if vectors { r.shared_vectors("vector")?.into_iter().map(Some).collect() } else { Vec::new() };
            stored.resize(ids.len(), None);
            let rows = row_addresses(batch, name)?.into_iter().zip(ids).zip(actors).zip(replaced).zip(stored);
            for ((((address, id), actor_id), replaced), vector) in rows {
                // one allocation per run of rows of the same actor
                let actor_id = match &actor {
                    Some(a) if **a == *actor_id => a.clone(),
                    _ => actor.insert(Arc::from(actor_id)).clone(),
                };
                out.push((address, row_cache::CachedRow { id, actor_id, superseded: replaced.is_some(), vector }));
            }
        }
        Ok(Some(out))
    }

    /// Inserts the rows of `batch` whose `id` is not in `name` yet, under the table's lock (see the
    /// module docs), retrying on commit conflicts. Returns the ids that were new.
    async fn insert_new(&self, name: &'static str, batch: RecordBatch) -> Result<Vec<uuid::Uuid>, StoreError> {
        if batch.num_rows() == 0 {
            return Ok(Vec::new());
        }
        let _lock = TableLock::acquire(&self.path, name).await?;
        let ids = rows::Rows::new(&batch, name).strs("id")?;
        let mut present = self.ids_present(name, &ids).await?;
        if name == SESSION_ITEMS_TABLE {
            present.extend(self.ids_present(FORGOTTEN_TABLE, &ids).await?);
        }
        let keep: Vec<u32> = (0..ids.len() as u32)
            .filter(|&i| uuid::Uuid::parse_str(&ids[i as usize]).is_ok_and(|id| !present.contains(&id)))
            .collect();
        if keep.is_empty() {
            return Ok(Vec::new());
        }
        let batch = arrow_select_rows(&batch, &keep)?;
        let new_ids = rows::Rows::new(&batch, name).uuids("id")?;
        let table = self.table(name);
        let result = retry(|| {
            let mut merge = table.merge_insert(&["id"]);
            merge.when_not_matched_insert_all();
            let reader = RecordBatchIterator::new(vec![Ok(batch.clone())], batch.schema());
            async move { merge.execute(Box::new(reader)).await }
        })
        .await
        .map_err(backend)?;
        drop(_lock);
        if result.num_inserted_rows != new_ids.len() as u64 {
            tracing::warn!(
                table = name,
                expected = new_ids.len(),
                inserted = result.num_inserted_rows,
                "insert count differs"
            );
        }
        self.after_write(name).await;
        Ok(new_ids)
    }

    /// Which of `ids` are stored in `name`.
    async fn ids_present(
        &self,
        name: &'static str,
        ids: &[String],
    ) -> Result<std::collections::HashSet<uuid::Uuid>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let mut present = std::collections::HashSet::new();
        for chunk in ids.chunks(500) {
            let query = self
                .table(name)
                .query()
                .only_if(in_list("id", chunk.iter().map(String::as_str)))
                .select(Select::columns(&["id"]));
            for batch in collect(&query).await.map_err(backend)? {
                present.extend(rows::Rows::new(&batch, name).uuids("id")?);
            }
        }
        Ok(present)
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

/// The rows of `batch` at `indices`.
fn arrow_select_rows(batch: &RecordBatch, indices: &[u32]) -> Result<RecordBatch, StoreError> {
    let indices = arrow_array::UInt32Array::from(indices.to_vec());
    let columns = batch
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c.as_ref(), &indices, None))
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend)?;
    RecordBatch::try_new(batch.schema(), columns).map_err(backend)
}

/// An exclusive lock on one table for one write: first an in-process async mutex, then `flock(2)` on
/// `<db>/<table>.lock` (other processes), both released when dropped. The flock is a no-op for
/// object-store URIs. Held only around one insert-if-absent, read-modify-write or fix upsert.
///
/// The in-process mutex comes first so that at most one task per table and process waits in `flock`:
/// each waiter there occupies a thread of Tokio's blocking pool (512 threads), which Lance's own file
/// I/O needs too. Without it, 512 concurrent inserts filled the pool and the holder of the lock could
/// never finish its write (a deadlock seen with 600 concurrent archival inserts).
pub(super) struct TableLock {
    #[allow(dead_code, reason = "held for its descriptor: closing it releases the lock")]
    file: Option<std::fs::File>,
    #[allow(dead_code, reason = "held: dropping it lets the next task of this process in")]
    local: tokio::sync::OwnedMutexGuard<()>,
}

/// The in-process half of [`TableLock`], one mutex per lock file.
fn local_lock(key: String) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: std::sync::OnceLock<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        std::sync::OnceLock::new();
    let mut locks = LOCKS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    locks.entry(key).or_default().clone()
}

impl TableLock {
    pub(super) async fn acquire(db: &str, table: &str) -> Result<Self, StoreError> {
        let local = local_lock(format!("{db}\0{table}")).lock_owned().await;
        if db.contains("://") {
            return Ok(Self { file: None, local });
        }
        let path = std::path::Path::new(db).join(format!("{table}.lock"));
        let file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            use std::os::fd::AsRawFd;
            let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
            // SAFETY: flock on a descriptor we own; blocks this pool thread until the lock is ours.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(file)
        })
        .await
        .map_err(backend)?
        .map_err(|e| StoreError::Backend(format!("locking {table} for a write: {e}")))?;
        Ok(Self { file: Some(file), local })
    }
}

impl LanceStore {
    /// Serialises index maintenance of table `name` within this process: the fold a write runs
    /// ([`Self::fold_into_fts_while_small`]) and upkeep ([`Self::optimize_table`],
    /// [`Self::fold_new_rows_into_indexes`]). Two of them at once conflict at commit; the loser is
    /// retried, and the index files its first attempt wrote are referenced by no version, so Lance's
    /// cleanup keeps them for 7 days as possibly in progress (`lance::dataset::cleanup`,
    /// `UNVERIFIED_THRESHOLD_DAYS`). Other processes on the same store are not serialised by it.
    pub(super) async fn maintenance_lock(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        local_lock(format!("{}\0{name}\0maintenance", self.path)).lock_owned().await
    }
}

/// Background upkeep tasks of this process, so that exiting can wait for them ([`wait_for_upkeep`]).
fn upkeep_tasks() -> &'static std::sync::Mutex<tokio::task::JoinSet<()>> {
    static TASKS: std::sync::OnceLock<std::sync::Mutex<tokio::task::JoinSet<()>>> = std::sync::OnceLock::new();
    TASKS.get_or_init(Default::default)
}

/// Waits for the background upkeep started by this process (call before exiting: an aborted compaction
/// loses nothing, but leaves its work undone and logs an error).
pub async fn wait_for_upkeep() {
    let mut tasks = std::mem::take(&mut *upkeep_tasks().lock().unwrap_or_else(|p| p.into_inner()));
    while tasks.join_next().await.is_some() {}
}

/// The full-text index settings of table `name`.
///
/// - Fixes: Lance's `code` analyzer with identifier splitting: each identifier is indexed whole
///   (`retry_limits`, `x-api-key` as its parts) and as its subwords (`retry`, `limits`), lower-cased, with
///   no stemming and no stop words. Fixes are full of identifiers that differ by a character
///   (`retry_limit` / `retry_limits`, `ALLOWED_ORIGIN` / `ALLOWED_ORIGINS`), which English stemming made
///   one token: on the tune split of the fix evaluation set (`astra-mcp eval fixes`) a numpy emulation of
///   BM25 put the right fix first for 0.66 of the symptoms with stemming and 0.88 without; the product's
///   BM25 with this analyzer gets 0.83 (docs/retrieval.md).
/// - Archival passages and conversation items (prose): Lance's `simple` tokenizer (splits on
///   non-alphanumerics), lower-casing, ASCII folding, English Snowball stemming and stop-word removal
///   (Lance's defaults), on which the LoCoMo figures were measured. `E0502` and `lru.rs` stay tokens.
fn fts_params(name: &str) -> lancedb::index::scalar::FtsIndexBuilder {
    let text = lancedb::index::scalar::FtsIndexBuilder::default();
    if name == FIXES_TABLE {
        text.analyzer("code").expect("`code` is one of Lance's analyzers").split_identifiers(true)
    } else {
        text
    }
}

/// The name of the full-text index of `name.column`: Lance's default (`{column}_idx`), but for the fixes
/// table's code-analysed index `{column}_code_idx`, so that an index built with the text analyzer (by an
/// earlier version) is told apart and rebuilt ([`LanceStore::open`]).
fn fts_index_name(name: &str, column: &str) -> String {
    if name == FIXES_TABLE { format!("{column}_code_idx") } else { format!("{column}_idx") }
}

/// [`filter_sql`] with its [`Broad`] form when it is broad (see [`Filter`]).
fn search_filter(filter: &crate::store::SearchFilter, has_tags: bool, has_roles: bool) -> Filter {
    let narrow = filter.session_ids.is_some()
        || (has_tags && !filter.tags_any.is_empty())
        || (has_roles && !filter.roles.is_empty())
        || filter.start.is_some()
        || filter.end.is_some();
    let broad = (!narrow)
        .then(|| Broad { actor_id: filter.actor_id.clone(), current_only: has_tags && !filter.include_superseded });
    Filter { sql: filter_sql(filter, has_tags, has_roles), broad }
}

/// A SQL filter over a table's `actor_id`, `session_id`, time, and (where the table has them) tags,
/// roles and supersession.
fn filter_sql(filter: &crate::store::SearchFilter, has_tags: bool, has_roles: bool) -> String {
    let mut parts = vec![format!("actor_id = {}", sql_literal(&filter.actor_id))];
    if let Some(sessions) = &filter.session_ids {
        parts.push(in_list("session_id", sessions.iter().map(String::as_str)));
    }
    if has_tags && !filter.tags_any.is_empty() {
        let any = filter
            .tags_any
            .iter()
            .map(|t| format!("array_has(tags, {})", sql_literal(t)))
            .collect::<Vec<_>>()
            .join(" OR ");
        parts.push(format!("({any})"));
    }
    if has_tags && !filter.include_superseded {
        parts.push("superseded_by IS NULL".to_string());
    }
    if has_roles && !filter.roles.is_empty() {
        parts.push(in_list("role", filter.roles.iter().map(|r| r.as_str())));
    }
    if let Some(start) = filter.start {
        parts.push(format!("created_at >= {}", timestamp_literal(start)));
    }
    if let Some(end) = filter.end {
        parts.push(format!("created_at <= {}", timestamp_literal(end)));
    }
    parts.join(" AND ")
}

/// `column IN ('a', 'b')`; `FALSE` for an empty list.
pub(super) fn in_list<'a>(column: &str, values: impl IntoIterator<Item = &'a str>) -> String {
    let values: Vec<String> = values.into_iter().map(sql_literal).collect();
    if values.is_empty() { "FALSE".to_string() } else { format!("{column} IN ({})", values.join(", ")) }
}

/// A timestamp literal Lance's SQL compares with a `Timestamp(µs, UTC)` column.
fn timestamp_literal(t: chrono::DateTime<chrono::Utc>) -> String {
    format!("arrow_cast('{}', 'Timestamp(Microsecond, Some(\"UTC\"))')", t.format("%Y-%m-%dT%H:%M:%S%.6fZ"))
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// The filter of a search as Lance SQL, and, when it is broad (the actor's rows, current ones only
/// where the table has supersession), the same filter in a form checked here ([`Broad`]). A narrow
/// filter (tags, times, sessions, roles, an error type) keeps a small part of the table; it has no
/// `broad` form and is always applied by Lance, before ranking.
pub(super) struct Filter {
    pub sql: String,
    pub broad: Option<Broad>,
}

/// A broad filter: the rows of `actor_id`, and with `current_only` only those no newer memory
/// superseded (`superseded_by IS NULL`). Equal to its [`Filter::sql`].
pub(super) struct Broad {
    pub actor_id: String,
    pub current_only: bool,
}

impl Broad {
    /// Does a row of `actor_id`, superseded or not, pass?
    fn passes(&self, actor_id: &str, superseded: bool) -> bool {
        actor_id == self.actor_id && !(self.current_only && superseded)
    }
}

/// Runs `query` with `filter` applied before ranking (Lance's prefilter): the filtered top of the
/// ranking, whatever share of the table passes.
async fn prefiltered<Q>(query: Q, filter: &Filter) -> lancedb::Result<Vec<RecordBatch>>
where
    Q: lancedb::query::QueryBase + ExecutableQuery,
{
    collect(&query.only_if(&filter.sql)).await
}

/// The row type of a searchable table, as its searches read it.
pub(super) trait SearchedRow: Sized + Send {
    /// The table it is stored in.
    const TABLE: &'static str;
    /// Its id (the `id` column).
    fn id(&self) -> uuid::Uuid;
    /// The actor it belongs to (the `actor_id` column).
    fn actor_id(&self) -> &str;
    /// Every row of `batch` (all columns of the table) with its vector (`[f32; 384]`).
    fn decode(batch: &RecordBatch) -> Result<Vec<(Self, Vec<f32>)>, StoreError>;
}

/// One row of a ranking read by [`LanceStore::rank_then_filter`]: where it is, its stored vector
/// (`[f32; 384]`, L2-normalized) when asked for, and the ranking's score (`_distance` or `_score`).
struct Ranked {
    row: crate::store::RowRef,
    vector: Option<Arc<[f32]>>,
    score: Option<f32>,
}

/// The rows `table`'s [`row_cache`] may hold: `rows` ([`OpenOptions::row_cache_rows`]), or none when the table
/// was created with Lance's stable row ids, where `_rowid` is a row's id across updates, not its
/// address (an updated row keeps it), so what the cache holds for it could be out of date. This
/// store never creates such tables; another program could.
async fn row_cache_capacity(table: &Table, rows: usize) -> usize {
    let stable = match table.as_native() {
        Some(native) => native.manifest().await.map(|m| m.uses_stable_row_ids()).unwrap_or(true),
        None => true,
    };
    if stable { 0 } else { rows }
}

/// A ranking (best first) as [`Scored`](crate::store::Scored) refs: ranks from the ranking's scores,
/// ties sharing one ([`competition_ranks`](crate::store::competition_ranks)); `cosine(score)` gives the
/// cosine where the score is one (NaN for BM25). A missing score is NaN, which ties with nothing.
fn by_score(
    ranking: impl IntoIterator<Item = (crate::store::RowRef, Option<f32>)>,
    cosine: impl Fn(f32) -> f32,
) -> Vec<crate::store::Scored<crate::store::RowRef>> {
    let (refs, scores): (Vec<_>, Vec<f32>) =
        ranking.into_iter().map(|(row, score)| (row, score.unwrap_or(f32::NAN))).unzip();
    let ranks = crate::store::competition_ranks(scores.iter().copied());
    refs.into_iter()
        .zip(scores)
        .zip(ranks)
        .map(|((row, score), rank)| crate::store::Scored { row, cosine: cosine(score), score, rank })
        .collect()
}

/// The ranking score of each row of `batch`: `_distance` (vector) or `_score` (BM25), `None` without
/// either column.
fn ranking_scores(batch: &RecordBatch) -> Vec<Option<f32>> {
    let column = ["_distance", "_score"]
        .iter()
        .find_map(|name| batch.column_by_name(name))
        .and_then(|c| c.as_any().downcast_ref::<arrow_array::Float32Array>());
    (0..batch.num_rows()).map(|i| column.map(|c| c.value(i))).collect()
}

/// The `_rowid` of each row of `batch`.
fn row_addresses(batch: &RecordBatch, table: &'static str) -> Result<Vec<u64>, StoreError> {
    let row_ids = batch
        .column_by_name("_rowid")
        .and_then(|c| c.as_any().downcast_ref::<arrow_array::UInt64Array>())
        .ok_or_else(|| StoreError::Backend(format!("{table}: a ranking without _rowid")))?;
    Ok(row_ids.values().to_vec())
}

/// The `(id, _rowid)` of each row of `batch`, with its ranking score ([`ranking_scores`]).
fn row_refs(batch: &RecordBatch, table: &'static str) -> Result<Vec<(crate::store::RowRef, Option<f32>)>, StoreError> {
    let ids = rows::Rows::new(batch, table).uuids("id")?;
    let row_ids = row_addresses(batch, table)?;
    Ok(ids
        .into_iter()
        .zip(row_ids)
        .zip(ranking_scores(batch))
        .map(|((id, row_id), score)| (crate::store::RowRef { id, row_id }, score))
        .collect())
}

/// Milliseconds since `t`.
fn ms_since(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Runs a query and collects its batches.
async fn collect(query: &impl ExecutableQuery) -> lancedb::Result<Vec<RecordBatch>> {
    query.execute().await?.try_collect().await
}

/// `'` doubled, for a string literal inside a Lance SQL filter.
fn sql_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Has `table` (named `name`) this version's full-text index of `column` ([`fts_index_name`])?
async fn has_fts_index(table: &Table, name: &str, column: &str) -> lancedb::Result<bool> {
    let wanted = fts_index_name(name, column);
    Ok(table
        .list_indices()
        .await?
        .iter()
        .any(|ix| ix.index_type == lancedb::index::IndexType::FTS && ix.name == wanted))
}

/// The full-text indexes of `column` in `table` (named `name`) other than this version's: built with
/// another analyzer.
async fn stale_fts_indexes(table: &Table, name: &str, column: &str) -> lancedb::Result<Vec<String>> {
    let wanted = fts_index_name(name, column);
    Ok(table
        .list_indices()
        .await?
        .into_iter()
        .filter(|ix| ix.index_type == lancedb::index::IndexType::FTS && ix.columns.iter().any(|c| c == column))
        .filter(|ix| ix.name != wanted)
        .map(|ix| ix.name)
        .collect())
}

async fn has_stale_fts_index(table: &Table, name: &str, column: &str) -> lancedb::Result<bool> {
    Ok(!stale_fts_indexes(table, name, column).await?.is_empty())
}

/// The columns a table's full-text indexes cover: for conversation items `search_text` (the item in its
/// context) and `embedded_text` (the item alone); `embedded_text` elsewhere.
fn fts_columns(name: &str) -> &'static [&'static str] {
    if name == SESSION_ITEMS_TABLE { &["search_text", "embedded_text"] } else { &["embedded_text"] }
}

/// Opens `name`, creating it empty when absent. Creation is not retried by Lance on a commit conflict,
/// so a concurrent creator's "already exists" sends us back to opening it.
async fn open_or_create(conn: &Connection, name: &str, schema: SchemaRef) -> lancedb::Result<Table> {
    let mut last = None;
    for attempt in 0..WRITE_ATTEMPTS {
        match conn.open_table(name).execute().await {
            Ok(table) => return Ok(table),
            Err(lancedb::Error::TableNotFound { .. }) => {}
            Err(e) => return Err(e),
        }
        match conn.create_empty_table(name, schema.clone()).execute().await {
            Ok(table) => return Ok(table),
            Err(e) => {
                tracing::debug!(table = name, attempt, "create raced or failed: {e}");
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(20 * (attempt as u64 + 1))).await;
            }
        }
    }
    Err(last.unwrap_or_else(|| lancedb::Error::Runtime { message: format!("could not open or create {name}") }))
}

fn forgotten_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("actor_id", DataType::Utf8, false),
        Field::new("forgotten_at", rows::timestamp_type(), false),
    ]))
}

fn meta_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Utf8, false)]))
}

/// Writes the meta rows into a new store, or checks an existing store's rows against this binary.
async fn check_meta(path: &str, meta: &Table, check_model: bool) -> Result<(), StoreError> {
    let expected = [
        ("format_version", FORMAT_VERSION.to_string()),
        ("embedding_model", MODEL_ID.to_string()),
        ("embedding_dimension", DIMENSION.to_string()),
    ];
    let batches = collect(&meta.query()).await.map_err(backend)?;
    let mut found = std::collections::HashMap::new();
    for batch in &batches {
        let rows = rows::Rows::new(batch, "meta");
        for (k, v) in rows.strs("key")?.into_iter().zip(rows.strs("value")?) {
            found.insert(k, v);
        }
    }
    if found.is_empty() {
        let schema = meta_schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(expected.iter().map(|(k, _)| *k))),
                Arc::new(StringArray::from_iter_values(expected.iter().map(|(_, v)| v.as_str()))),
            ],
        )
        .map_err(backend)?;
        // Keyed upsert: two processes initialising one store at once write the same rows once.
        retry(|| {
            let mut merge = meta.merge_insert(&["key"]);
            merge.when_not_matched_insert_all();
            let reader = RecordBatchIterator::new(vec![Ok(batch.clone())], schema.clone());
            async move { merge.execute(Box::new(reader)).await }
        })
        .await
        .map_err(backend)?;
        return Ok(());
    }
    let version = found.get("format_version").map(String::as_str).unwrap_or("none");
    if version != FORMAT_VERSION {
        return Err(StoreError::FormatVersion {
            path: path.to_string(),
            found: version.to_string(),
            expected: FORMAT_VERSION.to_string(),
        });
    }
    let model = found.get("embedding_model").cloned().unwrap_or_default();
    let dim = found.get("embedding_dimension").cloned().unwrap_or_default();
    if check_model && (model != MODEL_ID || dim != DIMENSION.to_string()) {
        return Err(StoreError::ModelMismatch {
            path: path.to_string(),
            found: format!("{model} ({dim}-d)"),
            expected: format!("{MODEL_ID} ({DIMENSION}-d)"),
        });
    }
    Ok(())
}

/// Runs a write, retrying on Lance commit conflicts (another process committed first).
async fn retry<T, F, Fut>(mut op: F) -> lancedb::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = lancedb::Result<T>>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt + 1 < WRITE_ATTEMPTS && is_conflict(&e) => {
                attempt += 1;
                tracing::debug!(attempt, "commit conflict, retrying: {e}");
                tokio::time::sleep(Duration::from_millis(10 * (1 << attempt.min(6)))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn is_conflict(e: &lancedb::Error) -> bool {
    let text = e.to_string().to_lowercase();
    text.contains("conflict") || text.contains("retryable") || text.contains("concurrent")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ArchivalStore, ForgetStore};

    fn passage(actor: &str, text: &str) -> (crate::domain::Passage, Vec<f32>) {
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

    /// The row addresses of `name`, by id.
    async fn addresses(store: &LanceStore, name: &'static str) -> HashMap<uuid::Uuid, u64> {
        use lancedb::query::{QueryBase, Select};
        let query = store.table(name).query().select(Select::columns(&["id"])).with_row_id();
        let mut out = HashMap::new();
        for batch in collect(&query).await.unwrap() {
            out.extend(row_refs(&batch, name).unwrap().into_iter().map(|(r, _)| (r.id, r.row_id)));
        }
        out
    }

    /// Rows read by address from deep inside one large fragment, where a column holds one value or
    /// null on every row (Lance stores it as a constant page with definition levels): each comes back
    /// with its own nulls. Guards the patched jump in `ConstantPageDecoder::skip_to_row`
    /// (vendor/lance-encoding/PATCHED.md), which must land on the same level the row-by-row walk did.
    #[tokio::test]
    async fn rows_read_by_address_deep_in_a_constant_column_keep_their_own_nulls() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        let turn = |i: usize| (i % 3 != 0).then_some(7);
        let rows: Vec<_> = (0..12_000)
            .map(|i| {
                let (mut p, v) = passage("ann", &format!("note {i}"));
                p.turn = turn(i);
                (p, v)
            })
            .collect();
        store.insert_passages(&rows).await.unwrap();
        let at = addresses(&store, ARCHIVAL_TABLE).await;
        let picks = [11_999, 5, 6_000, 11_998, 7, 9_001, 4];
        let refs: Vec<crate::store::RowRef> =
            picks.iter().map(|&i| crate::store::RowRef { id: rows[i].0.id, row_id: at[&rows[i].0.id] }).collect();
        let got: Vec<crate::domain::Passage> =
            store.rows_by_ref("ann", &refs).await.unwrap().into_iter().map(|(p, _)| p).collect();
        assert_eq!(got.iter().map(|p| p.id).collect::<Vec<_>>(), refs.iter().map(|r| r.id).collect::<Vec<_>>());
        for (p, &i) in got.iter().zip(&picks) {
            assert_eq!((p.text.as_str(), p.turn), (format!("note {i}").as_str(), turn(i)), "row {i}");
            assert_eq!((p.actor_id.as_str(), p.project.as_str(), p.source.as_str()), ("ann", "p", "test"));
        }
    }

    /// A ranking's rows are read by address and filtered here; any doubt (a row of another actor, a
    /// superseded row, a row no longer at its address) sends the search back to Lance's prefilter.
    #[tokio::test]
    async fn ranked_rows_are_read_by_address_and_any_doubt_returns_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        let rows = [passage("ann", "a"), passage("ann", "bb"), passage("ann", "ccc"), passage("bob", "dddd")];
        store.insert_passages(&rows).await.unwrap();
        let at = addresses(&store, ARCHIVAL_TABLE).await;
        let (a, b, c, d) = (rows[0].0.id, rows[1].0.id, rows[2].0.id, rows[3].0.id);
        let ann = |current_only| Broad { actor_id: "ann".into(), current_only };
        let read = |ids: Vec<uuid::Uuid>, filter: Broad| {
            let store = store.clone();
            let addresses: Vec<u64> = ids.iter().map(|id| at[id]).collect();
            async move { store.read_ranked(ARCHIVAL_TABLE, addresses, &filter, true).await.unwrap() }
        };

        let got = read(vec![c, a, b], ann(true)).await.expect("all of ann's, all current");
        assert_eq!(got.iter().map(|r| r.row.id).collect::<Vec<_>>(), vec![c, a, b], "in ranking order");
        assert_eq!(got.iter().map(|r| r.row.row_id).collect::<Vec<_>>(), vec![at[&c], at[&a], at[&b]]);
        assert_eq!(got[0].vector.as_deref(), Some(rows[2].1.as_slice()), "each with its own vector");
        assert!(read(vec![a, d], ann(true)).await.is_none(), "bob's row fails ann's filter");

        let mut superseded = rows[1].0.clone();
        superseded.superseded_by = Some(a);
        store.apply_passages(&[], &[(superseded, None)]).await.unwrap();
        let at_now = addresses(&store, ARCHIVAL_TABLE).await;
        let moved = |id| (at_now[&id], at[&id]);
        assert_ne!(moved(b).0, moved(b).1, "an update writes the row at a new address");
        let (_, old_b) = moved(b);
        // the reads above cached b's old address; a ranking never returns it again (see
        // `a_current_only_search_never_returns_a_row_superseded_after_its_address_was_cached`), and past
        // the cache a read of it finds nothing
        assert!(store.row_cache(ARCHIVAL_TABLE).get(&[old_b], false)[0].is_some());
        store.row_cache(ARCHIVAL_TABLE).clear();
        let stale = store.read_ranked(ARCHIVAL_TABLE, vec![at[&a], old_b], &ann(false), false).await.unwrap();
        assert!(stale.is_none(), "the old address of an updated row holds nothing now");
        let fresh = store.read_ranked(ARCHIVAL_TABLE, vec![at_now[&a], at_now[&b]], &ann(false), false).await.unwrap();
        assert_eq!(fresh.map(|r| r.len()), Some(2), "superseded rows pass when they are asked for");
        let current = store.read_ranked(ARCHIVAL_TABLE, vec![at_now[&a], at_now[&b]], &ann(true), false).await.unwrap();
        assert!(current.is_none(), "a superseded row fails a current-only filter");

        store.forget("ann", c).await.unwrap();
        store.row_cache(ARCHIVAL_TABLE).clear();
        assert!(read(vec![a, c], ann(false)).await.is_none(), "a forgotten row is gone from its address");
        let before_compaction = vec![at_now[&a]];
        assert!(store.row_cache(ARCHIVAL_TABLE).get(&before_compaction, false)[0].is_some());
        store.optimize(chrono::Duration::zero()).await.unwrap();
        assert_eq!(store.row_cache(ARCHIVAL_TABLE).len(), 0, "a compaction clears the cache");
        let after = store.read_ranked(ARCHIVAL_TABLE, before_compaction, &ann(false), false).await.unwrap();
        assert!(after.is_none(), "a compaction moved every row");
    }

    fn nearest_to(vector: &[f32], limit: usize, include_superseded: bool) -> crate::store::TextQuery {
        let filter = crate::store::SearchFilter { actor_id: "ann".into(), include_superseded, ..Default::default() };
        crate::store::TextQuery { filter, vector: vector.to_vec(), text: String::new(), limit }
    }

    fn ranked(ranking: &crate::store::VectorRanking) -> Vec<(uuid::Uuid, f32, usize)> {
        ranking.ranked.iter().map(|s| (s.row.id, s.cosine, s.rank)).collect()
    }

    /// A ranking's second read of the same candidates comes from the row cache, with the same ids,
    /// cosines and ranks; a row superseded after its old address was cached (an update moves it) is
    /// read at its new address and left out of a current-only search: Lance does not return a deleted
    /// row's address, which is what makes the cache safe ([`row_cache`]).
    #[tokio::test]
    async fn a_current_only_search_never_returns_a_row_superseded_after_its_address_was_cached() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        // all of one actor's, so the rankings take the path that reads their candidates
        let rows = [passage("ann", "a"), passage("ann", "bb"), passage("ann", "ccc")];
        store.insert_passages(&rows).await.unwrap();
        let (a, b) = (rows[0].0.id, rows[1].0.id);
        let old_b = addresses(&store, ARCHIVAL_TABLE).await[&b];
        let cache = store.row_cache(ARCHIVAL_TABLE);

        let first = store.passage_nearest(&nearest_to(&rows[1].1, 10, false)).await.unwrap();
        assert_eq!(first.ranked.iter().map(|s| s.row.id).collect::<Vec<_>>()[..1], [b], "b is nearest to itself");
        assert_eq!(first.ranked.len(), 3);
        assert!((first.ranked[0].cosine - 1.0).abs() < 1e-6, "the cosine of b's stored vector");
        let reads = cache.reads();
        let again = store.passage_nearest(&nearest_to(&rows[1].1, 10, false)).await.unwrap();
        assert_eq!(ranked(&again), ranked(&first), "the same ranking from the cache");
        assert_eq!(cache.reads(), reads, "and no read of the table for it");

        let mut superseded = rows[1].0.clone();
        superseded.superseded_by = Some(a);
        store.apply_passages(&[], &[(superseded, None)]).await.unwrap();
        assert!(cache.get(&[old_b], true)[0].as_ref().is_some_and(|r| !r.superseded), "cached as current");
        let current = store.passage_nearest(&nearest_to(&rows[1].1, 10, false)).await.unwrap();
        assert!(!current.ranked.iter().any(|s| s.row.id == b), "superseded b is left out: {:?}", ranked(&current));
        assert_eq!(current.ranked.len(), 2);
        let all = store.passage_nearest(&nearest_to(&rows[1].1, 10, true)).await.unwrap();
        assert_eq!(all.ranked[0].row.id, b, "asked for, b is found at its new address");
        assert_ne!(all.ranked[0].row.row_id, old_b);
    }

    /// A table that fits is read into the row cache in the background after its first search; then a
    /// ranking of any query reads no row of the table.
    #[tokio::test]
    async fn a_small_table_is_read_into_the_row_cache_after_its_first_search() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        let rows: Vec<_> = (0..300).map(|i| passage("ann", &"x".repeat(1 + i))).collect();
        store.insert_passages(&rows).await.unwrap();
        let cache = store.row_cache(ARCHIVAL_TABLE);
        let first = store.passage_nearest(&nearest_to(&rows[7].1, 10, false)).await.unwrap();
        assert_eq!(first.ranked[0].row.id, rows[7].0.id);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while cache.len() < rows.len() {
            assert!(std::time::Instant::now() < deadline, "filled {} of {} rows", cache.len(), rows.len());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let reads = cache.reads();
        let other = store.passage_nearest(&nearest_to(&rows[250].1, 50, false)).await.unwrap();
        assert_eq!(other.ranked.len(), 50);
        assert_eq!(other.ranked[0].row.id, rows[250].0.id);
        assert_eq!(cache.reads(), reads, "50 candidates, none read from the table");
    }

    /// A store directory replaced under an open store (deleted, then written again by another handle)
    /// starts its row addresses again: the row cache notices that the table's version went down, and a
    /// search finds the new rows, not the old ones it cached at the same addresses.
    #[tokio::test]
    async fn a_directory_replaced_under_an_open_store_is_not_answered_from_its_old_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let path = path.to_str().unwrap();
        let store = LanceStore::open(path).await.unwrap();
        // the same lengths, so the same vectors (see `passage`), under other texts and ids
        let old: Vec<_> = (0..20).map(|i| passage("ann", &format!("o{i:02}{}", "x".repeat(i)))).collect();
        let new: Vec<_> = (0..20).map(|i| passage("ann", &format!("n{i:02}{}", "x".repeat(i)))).collect();
        for chunk in old.chunks(5) {
            store.insert_passages(chunk).await.unwrap();
        }
        let before = store.passage_nearest(&nearest_to(&old[3].1, 5, false)).await.unwrap();
        assert_eq!(before.ranked[0].row.id, old[3].0.id);
        let at = before.ranked[0].row.row_id;
        assert_eq!(store.row_cache(ARCHIVAL_TABLE).get(&[at], true)[0].as_ref().map(|r| r.id), Some(old[3].0.id));

        std::fs::remove_dir_all(path).unwrap();
        LanceStore::open(path).await.unwrap().insert_passages(&new).await.unwrap();
        let after = store.passage_nearest(&nearest_to(&new[3].1, 5, false)).await.unwrap();
        assert_eq!(after.ranked[0].row.row_id, at, "the new row sits at the old one's address");
        assert_eq!(after.ranked[0].row.id, new[3].0.id, "and is read as itself");
        assert!(after.ranked.iter().all(|s| new.iter().any(|(p, _)| p.id == s.row.id)), "only new rows");
    }

    /// Upkeep while writes fold their rows into the same table's full-text index: the two are
    /// serialised ([`LanceStore::maintenance_lock`]), so no fold is retried after a commit conflict, and
    /// pruning leaves one index folder per index. A retried fold's first files belong to no version, and
    /// Lance keeps such files for 7 days (2.5 × raw instead of 1.9 × after 400 inserts, measured).
    #[tokio::test]
    async fn upkeep_beside_the_folds_of_writes_leaves_no_orphan_index_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        let row = |round: usize, i: usize| passage("ann", &format!("round {round}: the billing service note {i}"));
        for round in 0..4 {
            for i in 0..10 {
                store.insert_passages(&[row(round, i)]).await.unwrap();
            }
            let writes = async {
                for i in 10..25 {
                    store.insert_passages(&[row(round, i)]).await.unwrap();
                }
            };
            let (upkeep, ()) = tokio::join!(store.optimize_table(ARCHIVAL_TABLE, None, 2), writes);
            upkeep.unwrap();
        }
        store.optimize(chrono::Duration::zero()).await.unwrap();
        let indexes = store.table(ARCHIVAL_TABLE).list_indices().await.unwrap().len();
        let folders = std::fs::read_dir(dir.path().join(format!("{ARCHIVAL_TABLE}.lance/_indices"))).unwrap().count();
        assert_eq!(folders, indexes, "index folders on disk against indexes of the table");
    }

    #[test]
    fn ef_grows_with_the_table_between_its_bounds() {
        assert_eq!(super::ann_ef(0, 50), 200, "4 x the limit");
        assert_eq!(super::ann_ef(100_000, 50), 200);
        assert_eq!(super::ann_ef(400_000, 50), 800, "one per 500 rows");
        assert_eq!(super::ann_ef(1_000_000, 50), 2_000);
        assert_eq!(super::ann_ef(10_000_000, 50), 2_000, "capped");
        assert_eq!(super::ann_ef(10_000_000, 1_000), 4_000, "a larger limit still gets 4 x");
        assert_eq!(super::ann_ef(0, 5), 100, "at least ANN_EF");
    }

    /// More writers than Tokio has blocking threads, each needing a blocking thread while it holds the
    /// lock (as Lance's file I/O does): all of them must get through, none may starve the holder.
    #[test]
    fn lock_waiters_never_starve_the_holder_of_blocking_threads() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().to_str().unwrap().to_string();
        let done = runtime.block_on(async move {
            let writers = (0..32).map(|_| {
                let db = db.clone();
                tokio::spawn(async move {
                    let _lock = TableLock::acquire(&db, "archival").await.unwrap();
                    tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1))).await.unwrap();
                })
            });
            let all = futures::future::join_all(writers);
            tokio::time::timeout(Duration::from_secs(30), all).await.map(|r| r.len())
        });
        assert_eq!(done, Ok(32), "the writers deadlocked");
    }
}
