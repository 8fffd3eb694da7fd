//! Writes, on the commits of `commit`: inserts that must not duplicate a row, under the table's
//! [`TableLock`] (see the module docs of `store::lance`; `group` gathers them into commits); upserts and
//! updates keyed on `id` ([`merge_keyed`]); deletions with what goes with them (a forgotten
//! conversation item's distilled memories, a forgotten memory's texts in distill runs); and what follows
//! a committed write, in the background: the full-text index of a small table kept empty
//! or new rows folded into a larger one's, upkeep or compaction of the newest fragments, as
//! [`policy`] decides.

use std::sync::atomic::Ordering;

use arrow_array::RecordBatch;
use serde_json::Value;

use super::commit::{Merge, TableLock, delete_where, merge_keyed, retry};
use super::handle::{LanceStore, StoreTable, backend, collect};
use super::policy::{self, Chore, FtsChore, FtsCoverage};
use super::rows;
use super::sql::{in_list, sql_literal};
use super::tables::TableId;
use super::upkeep;
use crate::store::{CoreBlockStore, Purge, StoreError};

impl StoreTable<'_> {
    /// After a write to this table: checks its full-text indexes in the background
    /// ([`Self::fold_into_fts_while_small`]), so that the write's answer waits for no index work. Checks
    /// run one at a time and coalesce: while one waits, later writes add none, and the one that runs
    /// sees their rows. Searches meanwhile scan the rows the index does not cover, so nothing is missed;
    /// a new row is scored apart from indexed ones until the fold (see [`policy::FTS_FOLD_MAX_ROWS`]).
    fn check_fts_in_background(self) {
        let handle = self.handle();
        if handle.past_fold_size.load(Ordering::Relaxed) || handle.fold_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let (store, id) = (self.store.clone(), self.id);
        upkeep::spawn(async move {
            let table = StoreTable::new(&store, id);
            let _running = store.fold_running.lock().await;
            table.handle().fold_pending.store(false, Ordering::Release);
            if let Err(e) = table.fold_into_fts_while_small().await {
                tracing::warn!(table = %id, "new rows not folded into the full-text index yet: {e}");
            }
        });
    }

    /// Runs the full-text chore [`policy::fts_chore`] gives this table now: rebuilds empty the indexes of a
    /// small table that cover rows, folds the unindexed rows into the indexes due, or, once the table is
    /// larger than [`policy::FTS_FOLD_MAX_ROWS`], stops this handle's checks of it (no row count per
    /// write).
    async fn fold_into_fts_while_small(self) -> Result<(), StoreError> {
        use lancedb::table::{OptimizeAction, OptimizeOptions};
        let table = self.table();
        let rows = table.count_rows(None).await.map_err(backend)?;
        let coverage = if policy::reads_fts_coverage(rows) { self.fts_index_coverage().await? } else { Vec::new() };
        match policy::fts_chore(rows, &coverage) {
            FtsChore::Nothing => {}
            FtsChore::LeaveToUpkeep => self.handle().past_fold_size.store(true, Ordering::Relaxed),
            FtsChore::Empty => {
                let _maintenance = self.maintenance_lock().await;
                self.empty_fts_indexes_of_a_small_table().await?;
            }
            FtsChore::Fold(due) => {
                let _maintenance = self.maintenance_lock().await;
                let fold =
                    || table.optimize(OptimizeAction::Index(OptimizeOptions::default().index_names(due.clone())));
                retry(table, fold).await.map_err(backend)?;
            }
        }
        Ok(())
    }

    /// Each full-text index of this table: its name, the rows it covers, the rows of the table it does not.
    pub(super) async fn fts_index_coverage(self) -> Result<Vec<FtsCoverage>, StoreError> {
        let table = self.table();
        let mut coverage = Vec::new();
        for ix in table.list_indices().await.map_err(backend)? {
            if ix.index_type != lancedb::index::IndexType::FTS {
                continue;
            }
            if let Some(stats) = table.index_stats(&ix.name).await.map_err(backend)? {
                coverage.push(FtsCoverage {
                    index: ix.name,
                    indexed: stats.num_indexed_rows,
                    unindexed: stats.num_unindexed_rows,
                });
            }
        }
        Ok(coverage)
    }

    /// After a committed write: make sure the full-text index exists (once per table and process), then
    /// start in the background what keeps it and the table in shape ([`Self::check_fts_in_background`],
    /// and the chore [`policy::chore_after_write`] gives: upkeep or compaction). A failure only degrades
    /// keyword search to the vector ranking, so it is logged, not returned (the write itself succeeded).
    pub(super) async fn after_write(self) {
        if let Err(e) = self.ensure_fts().await {
            tracing::warn!(table = %self.id, "full-text index not built yet: {e}");
        } else {
            self.check_fts_in_background();
        }
        let writes = self.handle().writes.fetch_add(1, Ordering::AcqRel) + 1;
        let fragments = if policy::counts_fragments(writes) { self.fragments().await.ok() } else { None };
        let Some(chore) = policy::chore_after_write(writes, fragments) else { return };
        let (store, id) = (self.store.clone(), self.id);
        upkeep::spawn(async move {
            let table = StoreTable::new(&store, id);
            let done = match chore {
                Chore::Upkeep => {
                    let prune = chrono::Duration::seconds(policy::PRUNE_OLDER_THAN_SECS);
                    let compaction = lancedb::table::CompactionOptions::default();
                    table.optimize_table(Some(prune), policy::MAX_VECTOR_INDEX_SEGMENTS, compaction).await
                }
                Chore::Compact => table.compact_table().await,
            };
            if let Err(e) = done {
                tracing::warn!(table = %id, "background upkeep failed (run `astra-mcp memory optimize`): {e}");
            }
        });
    }

    /// Inserts the rows of `batch` whose `id` is not in this table yet (nor earlier in `batch`), holding the
    /// table's `lock` until the commit (see the module docs), retrying on commit conflicts. Returns the
    /// ids this call stored: not those stored before, nor those another writer stored meanwhile (the
    /// commit conflicts on them and skips them). Writers reach it through [`Self::insert_new`], which
    /// groups the inserts waiting in this process into one call.
    pub(super) async fn insert_absent(
        self,
        batch: RecordBatch,
        lock: TableLock,
    ) -> Result<Vec<uuid::Uuid>, StoreError> {
        let ids = rows::Rows::new(&batch, self.id).strs("id")?;
        // rows already stored are skipped by the merge-insert itself (no read before it); forgotten
        // conversation items live in another table
        let present = if self.id == TableId::Conversation {
            StoreTable::new(self.store, TableId::Forgotten).ids_present(&ids).await?
        } else {
            std::collections::HashSet::new()
        };
        let mut seen = std::collections::HashSet::new();
        let keep: Vec<u32> = (0..ids.len() as u32)
            .filter(|&i| {
                uuid::Uuid::parse_str(&ids[i as usize]).is_ok_and(|id| !present.contains(&id) && seen.insert(id))
            })
            .collect();
        if keep.is_empty() {
            return Ok(Vec::new());
        }
        let batch = arrow_select_rows(&batch, &keep)?;
        let new_ids = rows::Rows::new(&batch, self.id).uuids("id")?;
        let inserted = merge_keyed(self.table(), &batch, Merge::InsertAbsent).await?.num_inserted_rows;
        drop(lock);
        let new_ids = if inserted == new_ids.len() as u64 {
            new_ids
        } else {
            // Some of these ids were stored already, or another writer (another machine: the flock
            // covers this one) inserted them before our commit, which then conflicted on those keys and
            // Lance's retry skipped them. Ours are the rows stored with our `created_at`.
            self.ids_written_as(&batch).await?
        };
        self.after_write().await;
        Ok(new_ids)
    }

    /// Which rows of `batch` are stored as they are in it: by `id`, with the same `created_at`
    /// (microseconds) and `session_id`, which tell this writer's row from another's of the same id. The
    /// time alone does not: two processes that receive the same insert at the same moment stamp the
    /// same microsecond often enough (about 1 in 150 simultaneous inserts of one text on two
    /// processes), and the one whose merge found the other's row then reported it as its own, so its
    /// tags were never merged. Each MCP session has its own id; inserts of one process are serialised
    /// by its lock.
    async fn ids_written_as(self, batch: &RecordBatch) -> Result<Vec<uuid::Uuid>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        type Stamp = (chrono::DateTime<chrono::Utc>, String);
        let ours = rows::Rows::new(batch, self.id);
        let ours: std::collections::HashMap<uuid::Uuid, Stamp> = ours
            .uuids("id")?
            .into_iter()
            .zip(ours.times("created_at")?.into_iter().zip(ours.strs("session_id")?))
            .collect();
        let ids: Vec<String> = ours.keys().map(uuid::Uuid::to_string).collect();
        let mut written = Vec::new();
        for chunk in ids.chunks(500) {
            let query = self
                .table()
                .query()
                .only_if(in_list("id", chunk.iter().map(String::as_str)))
                .select(Select::columns(&["id", "created_at", "session_id"]));
            for stored in collect(&query).await.map_err(backend)? {
                let stored = rows::Rows::new(&stored, self.id);
                let stamps = stored.times("created_at")?.into_iter().zip(stored.strs("session_id")?);
                for (id, stamp) in stored.uuids("id")?.into_iter().zip(stamps) {
                    if ours.get(&id) == Some(&stamp) {
                        written.push(id);
                    }
                }
            }
        }
        tracing::debug!(
            table = %self.id,
            ours = ours.len(),
            written = written.len(),
            "ids inserted meanwhile by another writer"
        );
        Ok(written)
    }

    /// Which of `ids` are stored in this table.
    pub(super) async fn ids_present(self, ids: &[String]) -> Result<std::collections::HashSet<uuid::Uuid>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let mut present = std::collections::HashSet::new();
        for chunk in ids.chunks(500) {
            let query = self
                .table()
                .query()
                .only_if(in_list("id", chunk.iter().map(String::as_str)))
                .select(Select::columns(&["id"]));
            for batch in collect(&query).await.map_err(backend)? {
                present.extend(rows::Rows::new(&batch, self.id).uuids("id")?);
            }
        }
        Ok(present)
    }
}

/// The rows of `batch` at `indices`.
pub(super) fn arrow_select_rows(batch: &RecordBatch, indices: &[u32]) -> Result<RecordBatch, StoreError> {
    let indices = arrow_array::UInt32Array::from(indices.to_vec());
    let columns = batch
        .columns()
        .iter()
        .map(|c| arrow_select::take::take(c.as_ref(), &indices, None))
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend)?;
    RecordBatch::try_new(batch.schema(), columns).map_err(backend)
}

impl StoreTable<'_> {
    /// Replaces the rows of `batch` that still exist, by `id`; inserts nothing.
    pub(super) async fn update_batch(self, batch: RecordBatch) -> Result<(), StoreError> {
        merge_keyed(self.table(), &batch, Merge::Update(None)).await?;
        Ok(())
    }

    /// Replaces the rows of `batch` whose stored row meets `condition` (SQL over `target.` and `source.`
    /// columns), by `id`; inserts nothing. Returns how many rows it replaced. A concurrent change of the
    /// same row conflicts at commit, and the retry evaluates `condition` on the row the other writer left.
    pub(super) async fn update_if(self, batch: RecordBatch, condition: &str) -> Result<u64, StoreError> {
        let updated = merge_keyed(self.table(), &batch, Merge::Update(Some(condition))).await?.num_updated_rows;
        if updated > 0 && TableId::SEARCHABLE.contains(&self.id) {
            self.after_write().await;
        }
        Ok(updated)
    }

    /// Upserts a batch keyed on `id` (new rows inserted, existing rows replaced).
    pub(super) async fn upsert_batch(self, batch: RecordBatch) -> Result<(), StoreError> {
        merge_keyed(self.table(), &batch, Merge::Upsert).await?;
        if TableId::SEARCHABLE.contains(&self.id) {
            self.after_write().await;
        }
        Ok(())
    }
}

/// [`LanceStore::delete_row`].
pub(super) async fn delete_row(store: &LanceStore, actor: &str, id: &str) -> Result<Option<TableId>, StoreError> {
    let filter = format!("actor_id = {} AND id = {}", sql_literal(actor), sql_literal(id));
    // Each table from its latest version, not a view that lags other machines (a bucket's reads may):
    // a memory stored on another machine a moment ago is found and deleted too.
    for name in TableId::SEARCHABLE {
        let table = StoreTable::new(store, name).table();
        table.checkout_latest().await.map_err(backend)?;
        if name == TableId::Conversation {
            let rows_found = StoreTable::new(store, name).select(&filter, Some(1)).await?;
            let Some(item) = rows_found
                .iter()
                .map(super::conversation::from_batch)
                .next()
                .transpose()?
                .and_then(|v| v.into_iter().next())
            else {
                continue;
            };
            delete_where(table, &filter).await?;
            super::conversation::forget_item(store, &item.0).await?;
            forget_distilled_from(store, &item.0).await?;
            return Ok(Some(name));
        }
        let deleted = delete_where(table, &filter).await?;
        if deleted > 0 {
            if name == TableId::Archival {
                scrub_distill_changes(store, actor, id).await?;
            }
            return Ok(Some(name));
        }
    }
    // a version of a core block (ids from `memory list --table core_blocks`): purged from the history,
    // unless it is the block's current value
    StoreTable::new(store, TableId::CoreBlocks).table().checkout_latest().await.map_err(backend)?;
    let found = StoreTable::new(store, TableId::CoreBlocks).select(&filter, Some(1)).await?;
    let Some(v) =
        found.iter().map(super::core_blocks::from_batch).next().transpose()?.and_then(|v| v.into_iter().next())
    else {
        return Ok(None);
    };
    match store.purge_block_version(&v.actor_id, &v.project, &v.section, v.version).await? {
        Purge::Purged => Ok(Some(TableId::CoreBlocks)),
        Purge::Absent => Ok(None),
        Purge::Current => Err(StoreError::Invalid(format!(
            "{id} is version {} of core block `{}`, its current value: change the block first (`core_memory_replace`, \
             the memory browser, or `astra-mcp core restore`), then purge this version",
            v.version, v.section
        ))),
    }
}

/// [`LanceStore::append_passages`].
pub(super) async fn append_passages(
    store: &LanceStore,
    rows_in: &[(crate::domain::Passage, Vec<f32>)],
) -> Result<(), StoreError> {
    let batch = super::archival::to_batch(rows_in)?;
    let table = StoreTable::new(store, TableId::Archival).table();
    retry(table, || table.add(batch.clone()).execute()).await.map_err(backend)?;
    Ok(())
}

/// After the conversation item `item` was forgotten: deletes every archival memory `distill` derived from
/// it, as `memory_forget` deletes a memory (its runs' changes scrubbed, memories it superseded current
/// again), and replaces with `[forgotten]` the texts of every run change that quotes the item. A memory
/// is derived from the item when its provenance (session and turn) is the item, or when a run added,
/// rewrote or superseded a memory with it (a memory later restated from another item goes too: it
/// was first written from this one).
async fn forget_distilled_from(store: &LanceStore, item: &crate::domain::ConversationItem) -> Result<(), StoreError> {
    use crate::store::DistillRunStore;
    let actor = item.actor_id.as_str();
    let cites = |change: &Value| change["session_id"] == item.session_id.as_str() && change["turn"] == item.turn;
    let filter = format!(
        "actor_id = {} AND session_id = {} AND turn = {} AND source LIKE 'distill:%'",
        sql_literal(actor),
        sql_literal(&item.session_id),
        item.turn
    );
    let mut derived = std::collections::BTreeSet::new();
    for batch in StoreTable::new(store, TableId::Archival).select(&filter, None).await? {
        derived.extend(super::archival::from_batch(&batch)?.into_iter().map(|(p, _)| p.id.to_string()));
    }
    for run in store.runs(Some(actor)).await? {
        for change in run.changes.iter().filter(|c| cites(c) && c["action"] != "unchanged") {
            if let Some(id) = change["memory_id"].as_str() {
                derived.insert(id.to_string());
            }
        }
    }
    let table = StoreTable::new(store, TableId::Archival).table();
    for id in &derived {
        let filter = format!("actor_id = {} AND id = {}", sql_literal(actor), sql_literal(id));
        delete_where(table, &filter).await?;
        scrub_distill_changes(store, actor, id).await?;
    }
    // changes that quote the item without a memory derived from it (`unchanged`: already stored)
    for mut run in store.runs(Some(actor)).await? {
        let mut touched = false;
        for change in run.changes.iter_mut().filter(|c| cites(c)) {
            for key in ["text", "previous_text"] {
                if change.get(key).is_some_and(|v| *v != FORGOTTEN) {
                    change[key] = Value::String(FORGOTTEN.into());
                    touched = true;
                }
            }
        }
        if touched {
            store.put_run(&run).await?;
        }
    }
    if !derived.is_empty() {
        tracing::info!(item = %item.id, memories = derived.len(), "forgot the memories distilled from the item");
    }
    Ok(())
}

/// After archival memory `id` was forgotten: memories it superseded are current again, and its texts
/// are removed from the change lists of the actor's distill runs (the ids and actions stay), so no
/// copy of it is left there.
async fn scrub_distill_changes(store: &LanceStore, actor: &str, id: &str) -> Result<(), StoreError> {
    use crate::store::DistillRunStore;
    // memories it had superseded are current again: nothing replaces them any more
    let filter = format!("actor_id = {} AND superseded_by = {}", sql_literal(actor), sql_literal(id));
    let mut revived = Vec::new();
    for batch in StoreTable::new(store, TableId::Archival).select(&filter, None).await? {
        for (mut passage, vector) in super::archival::from_batch(&batch)? {
            passage.superseded_by = None;
            passage.updated_at = chrono::Utc::now();
            revived.push((passage, vector));
        }
    }
    if !revived.is_empty() {
        StoreTable::new(store, TableId::Archival).upsert_batch(super::archival::to_batch(&revived)?).await?;
    }
    for mut run in store.runs(Some(actor)).await? {
        let mut touched = false;
        for change in &mut run.changes {
            if change["memory_id"] == id || change["target_id"] == id {
                for key in ["text", "previous_text"] {
                    if change.get(key).is_some() {
                        change[key] = Value::String(FORGOTTEN.into());
                        touched = true;
                    }
                }
            }
        }
        if touched {
            store.put_run(&run).await?;
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl crate::store::ForgetStore for LanceStore {
    async fn forget(&self, actor_id: &str, id: uuid::Uuid) -> Result<Option<&'static str>, StoreError> {
        Ok(delete_row(self, actor_id, &id.to_string()).await?.map(TableId::tier))
    }
}

/// What replaces a forgotten text in a distillation run's change list.
const FORGOTTEN: &str = "[forgotten]";
