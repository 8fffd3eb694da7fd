//! Upkeep (docs/storage.md): the indexes built and kept current — full-text once a table has rows, vector
//! and scalar ones once it has [`policy::ANN_MIN_ROWS`] — new rows folded into them, vector index segments
//! merged, small fragments compacted and old versions pruned. `memory optimize` runs it on every table;
//! a store handle runs it in the background when [`super::policy::chore_after_write`] says so, and an
//! exiting process waits for that ([`wait_for_upkeep`]). What is due is decided in [`policy`]; this
//! file runs it.

use lancedb::table::{CompactionOptions, OptimizeAction, OptimizeOptions};

use super::commit::{retry, retry_at_most};
use super::failure::is_conflict;
use super::fts::{fts_columns, fts_index_name, has_fts_index, stale_fts_indexes};
use super::handle::{LanceStore, StoreTable, backend};
use super::policy::{self, FTS_FLAT_MAX_ROWS, scalar_index_columns};
use super::tables::TableId;
use crate::store::StoreError;

/// Background upkeep tasks of this process, so that exiting can wait for them ([`wait_for_upkeep`]).
pub(super) fn upkeep_tasks() -> &'static std::sync::Mutex<tokio::task::JoinSet<()>> {
    static TASKS: std::sync::OnceLock<std::sync::Mutex<tokio::task::JoinSet<()>>> = std::sync::OnceLock::new();
    TASKS.get_or_init(Default::default)
}

/// Runs `task` among the background upkeep tasks of this process (reaping those that have finished).
pub(super) fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) {
    let mut tasks = upkeep_tasks().lock().unwrap_or_else(|p| p.into_inner());
    while tasks.try_join_next().is_some() {}
    tasks.spawn(task);
}

/// Waits for the background upkeep started by this process (call before exiting: an aborted compaction
/// loses nothing, but leaves its work undone and logs an error).
pub async fn wait_for_upkeep() {
    let mut tasks = std::mem::take(&mut *upkeep_tasks().lock().unwrap_or_else(|p| p.into_inner()));
    while tasks.join_next().await.is_some() {}
}

impl StoreTable<'_> {
    /// Fragments of the latest version of this table, from its manifest (no data is read).
    pub(super) async fn fragments(self) -> Result<usize, StoreError> {
        let Some(dataset) = self.table().dataset() else { return Ok(0) };
        Ok(dataset.get().await.map_err(backend)?.manifest().fragments.len())
    }
}

/// The full-text index settings of table `name`.
///
/// - Fixes: Lance's `code` analyzer with identifier splitting: each identifier is indexed whole
///   (`retry_limits`, `x-api-key` as its parts) and as its subwords (`retry`, `limits`), lower-cased, with
///   no stemming and no stop words. Fixes are full of identifiers that differ by a character
///   (`retry_limit` / `retry_limits`, `ALLOWED_ORIGIN` / `ALLOWED_ORIGINS`), which English stemming made
///   one token: on the tune split of the fix evaluation set (`astra-mcp-dev eval fixes`) a numpy emulation of
///   BM25 put the right fix first for 0.66 of the symptoms with stemming and 0.88 without; the product's
///   BM25 with this analyzer gets 0.83 (docs/retrieval.md). Positions are kept, for the phrases of the
///   identifier ranking ([`super::search::identifier_phrases`]).
/// - Archival passages and conversation items (prose): Lance's `simple` tokenizer (splits on
///   non-alphanumerics), lower-casing, ASCII folding, English Snowball stemming and stop-word removal
///   (Lance's defaults), on which the LoCoMo figures were measured. `E0502` and `lru.rs` stay tokens.
fn fts_params(name: TableId) -> lancedb::index::scalar::FtsIndexBuilder {
    let text = lancedb::index::scalar::FtsIndexBuilder::default();
    if name == TableId::Fixes {
        text.analyzer("code").expect("`code` is one of Lance's analyzers").split_identifiers(true).with_position(true)
    } else {
        text
    }
}

impl StoreTable<'_> {
    /// Builds the full-text indexes of this table ([`fts_columns`]) once the table has rows (Lance cannot
    /// train an index on an empty table). Rows added later are searched unindexed (Lance scans them)
    /// until upkeep folds them into the index.
    pub(super) async fn ensure_fts(self) -> Result<(), StoreError> {
        let mut ready = self.handle().fts_ready.lock().await;
        let table = self.table();
        for &column in fts_columns(self.id) {
            if ready.contains(column) {
                continue;
            }
            if has_fts_index(table, self.id, column).await.map_err(backend)? {
                ready.insert(column);
                continue;
            }
            let rows = table.count_rows(None).await.map_err(backend)?;
            if rows == 0 {
                return Ok(());
            }
            // an index of this column built with another analyzer goes first (one FTS index per column)
            for stale in stale_fts_indexes(table, self.id, column).await.map_err(backend)? {
                match table.drop_index(&stale).await {
                    Ok(()) => tracing::info!(
                        table = %self.id,
                        column,
                        index = stale,
                        "full-text index rebuilt with this version's analyzer"
                    ),
                    Err(e) => {
                        tracing::debug!(table = %self.id, index = stale, "stale full-text index already gone: {e}")
                    }
                }
            }
            // empty while the table is small: its rows are all scanned and scored alike (FTS_FLAT_MAX_ROWS)
            let result = table
                .create_index(&[column], lancedb::index::Index::FTS(fts_params(self.id)))
                .name(fts_index_name(self.id, column))
                .train(rows > FTS_FLAT_MAX_ROWS)
                .execute()
                .await;
            match result {
                Ok(()) => {
                    ready.insert(column);
                }
                Err(e) => {
                    // Another process may have built it at the same moment, in a version this handle has
                    // not read yet (it reads new versions at most every `--read-consistency-ms`): without
                    // reading it, each write would try again and meet the same conflict.
                    if let Err(reload) = table.checkout_latest().await {
                        tracing::debug!(table = %self.id, "reading the latest version: {reload}");
                    }
                    if !has_fts_index(table, self.id, column).await.unwrap_or(false) {
                        return Err(backend(e));
                    }
                    tracing::debug!(table = %self.id, column, "full-text index created concurrently: {e}");
                    ready.insert(column);
                }
            }
        }
        Ok(())
    }

    /// Rebuilds the full-text index `index` of this table empty, as [`Self::ensure_fts`] builds it for a
    /// table of at most [`FTS_FLAT_MAX_ROWS`] rows: its rows are then all scanned and scored alike.
    /// For an index that covers rows of such a table (a store written by an earlier version, or one
    /// that shrank). An index name of no column of this table is left alone.
    async fn empty_fts_index(self, index: &str) -> Result<(), StoreError> {
        let Some(&column) = fts_columns(self.id).iter().find(|&&column| fts_index_name(self.id, column) == index)
        else {
            return Ok(());
        };
        let table = self.table();
        retry(table, || {
            table
                .create_index(&[column], lancedb::index::Index::FTS(fts_params(self.id)))
                .name(index.to_string())
                .train(false)
                .execute()
        })
        .await
        .map_err(backend)?;
        tracing::info!(table = %self.id, index, "full-text index of a small table emptied: its rows are scanned");
        Ok(())
    }

    /// [`LanceStore::ensure_vector_index`] for this table.
    pub async fn ensure_vector_index(self) -> Result<bool, StoreError> {
        let table = self.table();
        let rows = table.count_rows(None).await.map_err(backend)?;
        if !policy::needs_large_table_indexes(rows) {
            return Ok(false);
        }
        let indexed = match self.vector_index().await? {
            None => None,
            // without statistics the index is taken to cover the table: not rebuilt
            Some(ix) => Some(table.index_stats(&ix.name).await.map_err(backend)?.map_or(rows, |s| s.num_indexed_rows)),
        };
        if !policy::vector_index_due(rows, indexed) {
            return Ok(false);
        }
        let started = std::time::Instant::now();
        let params =
            lancedb::index::vector::IvfHnswSqIndexBuilder::default().distance_type(lancedb::DistanceType::Cosine);
        table
            .create_index(&["vector"], lancedb::index::Index::IvfHnswSq(params))
            .replace(true)
            .execute()
            .await
            .map_err(backend)?;
        tracing::info!(table = %self.id, rows, ms = started.elapsed().as_millis() as u64, "vector index built");
        Ok(true)
    }

    /// [`LanceStore::ensure_large_table_indexes`] for this table.
    pub async fn ensure_large_table_indexes(self) -> Result<bool, StoreError> {
        let rebuilt = self.ensure_vector_index().await?;
        self.ensure_scalar_indexes().await?;
        Ok(rebuilt)
    }

    /// [`LanceStore::ensure_scalar_indexes`] for this table.
    pub async fn ensure_scalar_indexes(self) -> Result<Vec<&'static str>, StoreError> {
        let table = self.table();
        let wanted = scalar_index_columns(self.id);
        if wanted.is_empty() || !policy::needs_large_table_indexes(table.count_rows(None).await.map_err(backend)?) {
            return Ok(Vec::new());
        }
        let indices = table.list_indices().await.map_err(backend)?;
        let mut built = Vec::new();
        for &(column, bitmap) in wanted {
            if indices.iter().any(|ix| ix.columns.iter().any(|c| c == column)) {
                continue;
            }
            let index = if bitmap {
                lancedb::index::Index::Bitmap(Default::default())
            } else {
                lancedb::index::Index::BTree(Default::default())
            };
            match table.create_index(&[column], index).execute().await {
                Ok(()) => built.push(column),
                // another process may have built it at the same moment
                Err(e)
                    if table
                        .list_indices()
                        .await
                        .is_ok_and(|ix| ix.iter().any(|i| i.columns.iter().any(|c| c == column))) =>
                {
                    tracing::debug!(table = %self.id, column, "scalar index created concurrently: {e}");
                }
                Err(e) => return Err(backend(e)),
            }
        }
        if !built.is_empty() {
            tracing::info!(table = %self.id, columns = ?built, "scalar indexes built");
        }
        Ok(built)
    }

    /// [`LanceStore::vector_index_segments`] for this table.
    pub async fn vector_index_segments(self) -> Result<Option<(String, usize)>, StoreError> {
        let Some(ix) = self.vector_index().await? else { return Ok(None) };
        let stats = self.table().index_stats(&ix.name).await.map_err(backend)?;
        let segments = stats.and_then(|s| s.num_indices).unwrap_or(1);
        Ok(Some((ix.name, segments as usize)))
    }

    /// When the table's vector index has more than `max_segments` segments (at least 2), merges all but
    /// the first into one (Lance's `num_indices_to_merge`), so that compaction can join the fragments
    /// they cover. The first segment, built over the table when it was indexed or last doubled, is left
    /// as it is: the merge rebuilds the graphs of the rows written since (HNSW per IVF partition, with
    /// the existing partitions and quantiser), not the whole index. Returns the segments merged.
    ///
    /// Cost, measured over 10,000 single inserts (docs/internals/search-latency.md, "Vector index segments are
    /// merged"):
    /// 79 ms with about 500 rows written since the first segment, 0.6–0.7 s with about 5,000 (building
    /// the first over 5,000 rows took 1.2 s); background upkeep merges about every 500th write.
    pub(super) async fn merge_vector_index_segments(self, max_segments: usize) -> Result<Option<usize>, StoreError> {
        let Some((index, segments)) = self.vector_index_segments().await? else { return Ok(None) };
        let Some(merged) = policy::segments_to_merge(segments, max_segments) else { return Ok(None) };
        let started = std::time::Instant::now();
        let options = OptimizeOptions::merge(merged).index_names(vec![index]);
        let table = self.table();
        retry(table, || table.optimize(OptimizeAction::Index(options.clone()))).await.map_err(backend)?;
        tracing::info!(
            table = %self.id,
            segments = merged,
            ms = started.elapsed().as_millis() as u64,
            "vector index segments merged"
        );
        Ok(Some(merged))
    }

    /// The table's index on `vector`, if it has one.
    async fn vector_index(self) -> Result<Option<lancedb::index::IndexConfig>, StoreError> {
        let indices = self.table().list_indices().await.map_err(backend)?;
        Ok(indices.into_iter().find(|ix| ix.columns.iter().any(|c| c == "vector")))
    }

    /// [`LanceStore::has_vector_index`] for this table.
    pub async fn has_vector_index(self) -> Result<bool, StoreError> {
        Ok(self.vector_index().await?.is_some())
    }

    /// [`LanceStore::fold_new_rows_into_indexes`] for this table.
    pub async fn fold_new_rows_into_indexes(self) -> Result<(), StoreError> {
        let _maintenance = self.maintenance_lock().await;
        self.fold_new_rows_into_indexes_locked().await
    }

    /// [`Self::fold_new_rows_into_indexes`] for a caller holding [`Self::maintenance_lock`].
    async fn fold_new_rows_into_indexes_locked(self) -> Result<(), StoreError> {
        self.ensure_fts().await?;
        self.ensure_large_table_indexes().await?;
        let table = self.table();
        let held = self.empty_fts_indexes_of_a_small_table().await?;
        let options = if held.is_empty() {
            OptimizeOptions::default()
        } else {
            let others: Vec<String> = table
                .list_indices()
                .await
                .map_err(backend)?
                .into_iter()
                .map(|ix| ix.name)
                .filter(|ix| !held.contains(ix))
                .collect();
            if others.is_empty() {
                return Ok(());
            }
            OptimizeOptions::default().index_names(others)
        };
        retry(table, || table.optimize(OptimizeAction::Index(options.clone()))).await.map_err(backend)?;
        Ok(())
    }

    /// The full-text indexes of this table that stay empty: every one of a table of at most
    /// [`FTS_FLAT_MAX_ROWS`] rows, whose rows are all scanned and scored alike. One that covers
    /// rows (as an earlier version left it) is rebuilt empty first ([`Self::empty_fts_index`]). Call it
    /// under the table's [`Self::maintenance_lock`].
    pub(super) async fn empty_fts_indexes_of_a_small_table(self) -> Result<Vec<String>, StoreError> {
        if self.table().count_rows(None).await.map_err(backend)? > FTS_FLAT_MAX_ROWS {
            return Ok(Vec::new());
        }
        let mut held = Vec::new();
        for ix in self.fts_index_coverage().await? {
            if ix.indexed > 0 {
                self.empty_fts_index(&ix.index).await?;
            }
            held.push(ix.index);
        }
        Ok(held)
    }

    /// Compaction and index refresh of one table, leaving its vector index at most `max_segments`
    /// segments ([`Self::merge_vector_index_segments`]), plus removal of versions older than `prune`.
    /// Compaction alone, as [`Self::optimize_table`] runs it: between two upkeeps, only the fragments
    /// no index covers yet are joined ([`policy::COMPACT_EVERY_WRITES`]). It holds the table's write lock, so
    /// the writers of this machine wait for it (about 20 rows rewritten) rather than commit beside it:
    /// a compaction that loses the commit race leaves its rewritten files to Lance's cleanup, which
    /// keeps them 7 days. Skipped while upkeep runs on the table (it compacts too). One attempt: a
    /// compaction that loses to another process's write (a deletion in a fragment it rewrote, another
    /// compaction) is left to the next one, [`policy::COMPACT_EVERY_WRITES`] writes later, rather than retried
    /// with backoff while this machine's writers wait for the lock (seconds, with another machine
    /// forgetting memories as this one inserts).
    pub(super) async fn compact_table(self) -> Result<(), StoreError> {
        // the write lock first, as writers take it before a fold's maintenance lock
        let _lock = super::commit::TableLock::acquire(&self.store.location, self.id.name()).await?;
        let Some(_maintenance) = self.try_maintenance_lock() else { return Ok(()) };
        match self.compact_locked(1, CompactionOptions::default()).await {
            Err(e) if is_conflict(&e) => {
                tracing::debug!(table = %self.id, "compaction lost to a concurrent write, left to the next one: {e}");
                Ok(())
            }
            other => other.map_err(backend),
        }
    }

    /// Compacts this table as `options` say in up to `attempts` attempts ([`retry_at_most`]).
    async fn compact_locked(self, attempts: usize, options: CompactionOptions) -> lancedb::Result<()> {
        let table = self.table();
        let started = std::time::Instant::now();
        let metrics = retry_at_most(attempts, table, || {
            table.optimize(OptimizeAction::Compact { options: options.clone(), remap_options: None })
        })
        .await?;
        tracing::debug!(
            table = %self.id,
            fragments_removed = metrics.compaction.as_ref().map_or(0, |m| m.fragments_removed),
            ms = started.elapsed().as_millis() as u64,
            "fragments joined"
        );
        // the compacted rows have new addresses; the next search fills the cache again
        self.row_cache().clear();
        Ok(())
    }

    /// Upkeep of this table: folds new rows into its indexes, merges its vector index down to
    /// `max_segments` segments, compacts it as `compaction` says, and prunes versions older than `prune`.
    pub(super) async fn optimize_table(
        self,
        prune: Option<chrono::Duration>,
        max_segments: usize,
        compaction: CompactionOptions,
    ) -> Result<(), StoreError> {
        // Pruning versions younger than a minute can remove the versions a writer of another process
        // is committing on top of, and its write with them. Such writers hold the table's lock from
        // their read to their commit, so a prune that young holds it too, for the whole upkeep: the
        // writers on this machine wait. (Other machines of a bucket have no lock to wait on.)
        let young = prune.is_some_and(|p| p < chrono::Duration::seconds(policy::PRUNE_OLDER_THAN_SECS));
        let _writers = if young {
            Some(super::commit::TableLock::acquire(&self.store.location, self.id.name()).await?)
        } else {
            None
        };
        let _maintenance = self.maintenance_lock().await;
        let table = self.table();
        // Fold new rows into the indexes first: Lance compacts fragments an index covers separately from
        // fragments it does not, so compacting before would leave two groups.
        if self.id.is_searchable() {
            self.fold_new_rows_into_indexes_locked().await?;
            self.merge_vector_index_segments(max_segments).await?;
        }
        self.compact_locked(super::commit::WRITE_ATTEMPTS, compaction).await.map_err(backend)?;
        if let Some(older_than) = prune {
            retry(table, || {
                table.optimize(OptimizeAction::Prune {
                    older_than: Some(older_than),
                    delete_unverified: None,
                    error_if_tagged_old_versions: None,
                })
            })
            .await
            .map_err(backend)?;
        }
        Ok(())
    }
}

/// [`LanceStore::ensure_indexes`].
pub(super) async fn ensure_indexes(store: &LanceStore) -> Result<(), StoreError> {
    for name in TableId::SEARCHABLE {
        StoreTable::new(store, name).ensure_fts().await?;
    }
    Ok(())
}

/// [`LanceStore::optimize`].
pub(super) async fn optimize(store: &LanceStore, prune_older_than: chrono::Duration) -> Result<(), StoreError> {
    let compaction = CompactionOptions { materialize_deletions_threshold: 0.0, ..CompactionOptions::default() };
    for name in TableId::MEMORY {
        StoreTable::new(store, name).optimize_table(Some(prune_older_than), 2, compaction.clone()).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::store::lance::handle::StoreTable;
    use lancedb::table::CompactionOptions;

    use super::wait_for_upkeep;
    use crate::store::ArchivalStore;
    use crate::store::lance::test_rows::passage;
    use crate::store::lance::{LanceStore, TableId};

    /// Between upkeeps, every [`crate::store::lance::COMPACT_EVERY_WRITES`] writes of one handle join the table's
    /// newest
    /// fragments: one commit per insert leaves one fragment each, and every read visits them all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_newest_fragments_are_joined_between_upkeeps() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        let writes = crate::store::lance::COMPACT_EVERY_WRITES;
        for i in 0..writes - 1 {
            store.insert_passages(&[passage("ann", &format!("note {i} of the billing service"))]).await.unwrap();
        }
        wait_for_upkeep().await;
        assert_eq!(
            StoreTable::new(&store, TableId::Archival).fragments().await.unwrap(),
            writes - 1,
            "one fragment per commit so far"
        );
        store.insert_passages(&[passage("ann", "the last note of the billing service")]).await.unwrap();
        wait_for_upkeep().await;
        assert_eq!(
            StoreTable::new(&store, TableId::Archival).fragments().await.unwrap(),
            1,
            "joined at the {writes}th write"
        );
        assert_eq!(
            StoreTable::new(&store, TableId::Archival).table().count_rows(None).await.unwrap(),
            writes,
            "no row lost"
        );
    }

    /// A read of a version whose files upkeep pruned fails with an error [`collect`] reads as a missing
    /// file (so a server's read that lost that race runs again on the latest version), while a read of
    /// the latest version succeeds.
    #[tokio::test]
    async fn a_read_of_a_pruned_version_fails_as_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        for i in 0..3 {
            store.insert_passages(&[passage("ann", &format!("note {i} of the billing service"))]).await.unwrap();
        }
        // another process's handle, pinned to the latest version and not read yet: Lance caches the files
        // it has read
        let other = lancedb::connect(dir.path().to_str().unwrap()).execute().await.unwrap();
        let pinned = other.open_table(TableId::Archival.name()).execute().await.unwrap();
        pinned.checkout(pinned.version().await.unwrap()).await.unwrap();
        store.optimize(chrono::Duration::zero()).await.unwrap();
        let err = rows(&pinned).await.expect_err("the pinned version's files are pruned");
        assert!(crate::store::lance::failure::is_missing_file(&err), "not read as a missing file: {err}");
        assert_eq!(rows(StoreTable::new(&store, TableId::Archival).table()).await.unwrap(), 3, "the latest version");
    }

    /// Two processes that find rows and no full-text index both build it at once; the one whose commit
    /// loses counts the winner's index as built, although its view of the table predates that commit
    /// (it reads new versions once an hour here), instead of failing (the write's answer waited, a
    /// warning was logged, and its next write tried again and lost again).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_text_index_another_process_built_at_the_same_moment_counts_as_built() {
        use crate::store::lance::OpenOptions;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap();
        let first = LanceStore::open(path).await.unwrap();
        first.insert_passages(&[passage("ann", "the billing service drains its queue")]).await.unwrap();
        wait_for_upkeep().await;
        let index = super::fts_index_name(TableId::Archival, super::fts_columns(TableId::Archival)[0]);
        StoreTable::new(&first, TableId::Archival).table().drop_index(&index).await.unwrap();
        let hourly =
            || OpenOptions { read_consistency: Some(std::time::Duration::from_secs(3600)), ..Default::default() };
        let a = LanceStore::open_with(path, hourly()).await.unwrap();
        let b = LanceStore::open_with(path, hourly()).await.unwrap();
        let (built_a, built_b) = tokio::join!(
            StoreTable::new(&a, TableId::Archival).ensure_fts(),
            StoreTable::new(&b, TableId::Archival).ensure_fts()
        );
        built_a.unwrap();
        built_b.unwrap();
        let later = LanceStore::open(path).await.unwrap();
        let indices = StoreTable::new(&later, TableId::Archival).table().list_indices().await.unwrap();
        assert_eq!(indices.iter().filter(|ix| ix.name == index).count(), 1, "{indices:?}");
    }

    async fn rows(table: &lancedb::Table) -> lancedb::Result<usize> {
        use lancedb::query::QueryBase;
        let batches =
            crate::store::lance::handle::collect(&table.query().select(lancedb::query::Select::columns(&["text"])))
                .await?;
        Ok(batches.iter().map(|b| b.num_rows()).sum())
    }

    /// A table of at most [`crate::store::lance::FTS_FLAT_MAX_ROWS`] rows keeps its full-text index empty through
    /// single writes and upkeep (every row scanned and scored alike, no fold on the request path); the
    /// write that takes it past that size folds every row in.
    #[tokio::test]
    async fn a_small_table_keeps_its_full_text_index_empty_until_it_grows_past_the_flat_size() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        for i in 0..30 {
            store.insert_passages(&[passage("ann", &format!("note {i} of the billing service"))]).await.unwrap();
        }
        assert_eq!(fts_coverage(&store).await, (0, 30), "indexed and unindexed rows after 30 single inserts");
        StoreTable::new(&store, TableId::Archival).optimize_table(None, 2, CompactionOptions::default()).await.unwrap();
        assert_eq!(fts_coverage(&store).await, (0, 30), "after upkeep");
        let more: Vec<_> = (30..260).map(|i| passage("ann", &format!("note {i} of the billing service"))).collect();
        store.insert_passages(&more).await.unwrap();
        wait_for_upkeep().await; // the fold runs after the write
        assert_eq!(fts_coverage(&store).await, (260, 0), "past the flat size");
    }

    /// The fold a write makes due runs after the write has answered: with the table's maintenance held
    /// (upkeep running), the write that takes the table past the flat size still returns, and its rows
    /// are folded in once the maintenance is over.
    #[tokio::test]
    async fn a_write_answers_before_its_rows_are_folded_into_the_full_text_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        store.insert_passages(&[passage("ann", "the first note")]).await.unwrap();
        let maintenance = StoreTable::new(&store, TableId::Archival).maintenance_lock().await;
        let more: Vec<_> = (0..260).map(|i| passage("ann", &format!("note {i} of the billing service"))).collect();
        let write = tokio::time::timeout(std::time::Duration::from_secs(60), store.insert_passages(&more)).await;
        assert_eq!(write.expect("the write waited for the fold").unwrap().len(), 260);
        assert_eq!(fts_coverage(&store).await, (0, 261), "not folded while the maintenance is held");
        drop(maintenance);
        wait_for_upkeep().await;
        assert_eq!(fts_coverage(&store).await, (261, 0), "folded after it");
    }

    /// A small table whose full-text index covers its rows (as an earlier version left it, folding at
    /// every write) gets the index rebuilt empty after its next write, and keeps it empty; upkeep
    /// empties it too.
    #[tokio::test]
    async fn a_small_table_s_index_that_covers_rows_is_emptied_after_the_next_write() {
        use lancedb::table::{OptimizeAction, OptimizeOptions};
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        for i in 0..20 {
            store.insert_passages(&[passage("ann", &format!("note {i} of the billing service"))]).await.unwrap();
        }
        wait_for_upkeep().await; // the compaction of the 20th write
        // what an earlier version's per-write fold left: every row in the index
        StoreTable::new(&store, TableId::Archival)
            .table()
            .optimize(OptimizeAction::Index(OptimizeOptions::default()))
            .await
            .unwrap();
        assert_eq!(fts_coverage(&store).await, (20, 0), "the rows folded in, as an earlier version did");
        store.insert_passages(&[passage("ann", "note 20 of the billing service")]).await.unwrap();
        wait_for_upkeep().await;
        assert_eq!(fts_coverage(&store).await, (0, 21), "emptied after the next write");
        store.insert_passages(&[passage("ann", "note 21 of the billing service")]).await.unwrap();
        wait_for_upkeep().await;
        assert_eq!(fts_coverage(&store).await, (0, 22), "and left empty");
        // upkeep does the same, rather than folding the rows in
        StoreTable::new(&store, TableId::Archival)
            .table()
            .optimize(OptimizeAction::Index(OptimizeOptions::default()))
            .await
            .unwrap();
        assert_eq!(fts_coverage(&store).await, (22, 0));
        StoreTable::new(&store, TableId::Archival).optimize_table(None, 2, CompactionOptions::default()).await.unwrap();
        assert_eq!(fts_coverage(&store).await, (0, 22), "emptied by upkeep");
    }

    /// A process that writes a few times (a hook, a short session) never reaches
    /// UPKEEP_EVERY_WRITES nor COMPACT_EVERY_WRITES; its first write to a table of many fragments runs
    /// upkeep instead.
    #[tokio::test]
    async fn a_first_write_to_a_table_of_many_fragments_compacts_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap();
        for session in 0..4 {
            let earlier = LanceStore::open(path).await.unwrap();
            for i in 0..10 {
                let text = format!("note {i} of earlier session {session}");
                earlier.insert_passages(&[passage("ann", &text)]).await.unwrap();
            }
            wait_for_upkeep().await;
            let fragments = StoreTable::new(&earlier, TableId::Archival).fragments().await.unwrap();
            assert_eq!(fragments, 10 * (session + 1), "one fragment per insert, no upkeep yet");
        }
        let next = LanceStore::open(path).await.unwrap();
        next.insert_passages(&[passage("ann", "the first note of the next session")]).await.unwrap();
        wait_for_upkeep().await;
        assert_eq!(
            StoreTable::new(&next, TableId::Archival).fragments().await.unwrap(),
            1,
            "compacted at the first write"
        );
        assert_eq!(StoreTable::new(&next, TableId::Archival).table().count_rows(None).await.unwrap(), 41);
    }

    /// (indexed, unindexed) rows of the archival table's full-text index.
    async fn fts_coverage(store: &LanceStore) -> (usize, usize) {
        let table = StoreTable::new(store, TableId::Archival).table();
        let indices = table.list_indices().await.unwrap();
        let fts: Vec<_> = indices.iter().filter(|ix| ix.index_type == lancedb::index::IndexType::FTS).collect();
        assert_eq!(fts.len(), 1, "{indices:?}");
        let stats = table.index_stats(&fts[0].name).await.unwrap().unwrap();
        (stats.num_indexed_rows, stats.num_unindexed_rows)
    }

    /// Upkeep while writes fold their rows into the same table's full-text index: the two are
    /// serialised ([`StoreTable::maintenance_lock`]), so no fold is retried after a commit conflict, and
    /// pruning leaves one index folder per index. A retried fold's first files belong to no version, and
    /// Lance keeps such files for 7 days (2.5 × raw instead of 1.9 × after 400 inserts, measured).
    #[tokio::test]
    async fn upkeep_beside_the_folds_of_writes_leaves_no_orphan_index_files() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        let row = |round: usize, i: usize| passage("ann", &format!("round {round}: the billing service note {i}"));
        // past FTS_FLAT_MAX_ROWS, so that writes fold their rows into the index
        let base: Vec<_> = (0..260).map(|i| passage("ann", &format!("an older note {i}"))).collect();
        store.insert_passages(&base).await.unwrap();
        for round in 0..4 {
            for i in 0..10 {
                store.insert_passages(&[row(round, i)]).await.unwrap();
            }
            let writes = async {
                for i in 10..25 {
                    store.insert_passages(&[row(round, i)]).await.unwrap();
                }
            };
            let (upkeep, ()) = tokio::join!(
                StoreTable::new(&store, TableId::Archival).optimize_table(None, 2, CompactionOptions::default()),
                writes
            );
            upkeep.unwrap();
        }
        wait_for_upkeep().await;
        store.optimize(chrono::Duration::zero()).await.unwrap();
        let indexes = StoreTable::new(&store, TableId::Archival).table().list_indices().await.unwrap().len();
        let folders =
            std::fs::read_dir(dir.path().join(format!("{}.lance/_indices", TableId::Archival))).unwrap().count();
        assert_eq!(folders, indexes, "index folders on disk against indexes of the table");
    }
}
