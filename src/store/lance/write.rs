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
use super::handle::{LanceStore, backend, collect};
use super::policy::{self, Chore, FtsChore, FtsCoverage};
use super::rows;
use super::sql::{in_list, sql_literal};
use super::tables::TableId;
use super::upkeep;
use crate::store::{CoreBlockStore, Purge, StoreError};

impl LanceStore {
    /// After a write to `name`: checks its full-text indexes in the background
    /// ([`Self::fold_into_fts_while_small`]), so that the write's answer waits for no index work. Checks
    /// run one at a time and coalesce: while one waits, later writes add none, and the one that runs
    /// sees their rows. Searches meanwhile scan the rows the index does not cover, so nothing is missed;
    /// a new row is scored apart from indexed ones until the fold (see [`policy::FTS_FOLD_MAX_ROWS`]).
    fn check_fts_in_background(&self, name: TableId) {
        let handle = self.handle(name);
        if handle.past_fold_size.load(Ordering::Relaxed) || handle.fold_pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let store = self.clone();
        upkeep::spawn(async move {
            let _running = store.fold_running.lock().await;
            store.handle(name).fold_pending.store(false, Ordering::Release);
            if let Err(e) = store.fold_into_fts_while_small(name).await {
                tracing::warn!(table = %name, "new rows not folded into the full-text index yet: {e}");
            }
        });
    }

    /// Runs the full-text chore [`policy::fts_chore`] gives `name` now: rebuilds empty the indexes of a
    /// small table that cover rows, folds the unindexed rows into the indexes due, or, once the table is
    /// larger than [`policy::FTS_FOLD_MAX_ROWS`], stops this handle's checks of it (no row count per
    /// write).
    async fn fold_into_fts_while_small(&self, name: TableId) -> Result<(), StoreError> {
        use lancedb::table::{OptimizeAction, OptimizeOptions};
        let table = self.table(name);
        let rows = table.count_rows(None).await.map_err(backend)?;
        let coverage = if policy::reads_fts_coverage(rows) { self.fts_index_coverage(name).await? } else { Vec::new() };
        match policy::fts_chore(rows, &coverage) {
            FtsChore::Nothing => {}
            FtsChore::LeaveToUpkeep => self.handle(name).past_fold_size.store(true, Ordering::Relaxed),
            FtsChore::Empty => {
                let _maintenance = self.maintenance_lock(name).await;
                self.empty_fts_indexes_of_a_small_table(name).await?;
            }
            FtsChore::Fold(due) => {
                let _maintenance = self.maintenance_lock(name).await;
                let fold =
                    || table.optimize(OptimizeAction::Index(OptimizeOptions::default().index_names(due.clone())));
                retry(table, fold).await.map_err(backend)?;
            }
        }
        Ok(())
    }

    /// Each full-text index of `name`: its name, the rows it covers, the rows of the table it does not.
    pub(super) async fn fts_index_coverage(&self, name: TableId) -> Result<Vec<FtsCoverage>, StoreError> {
        let table = self.table(name);
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
    pub(super) async fn after_write(&self, name: TableId) {
        if let Err(e) = self.ensure_fts(name).await {
            tracing::warn!(table = %name, "full-text index not built yet: {e}");
        } else {
            self.check_fts_in_background(name);
        }
        let writes = self.handle(name).writes.fetch_add(1, Ordering::AcqRel) + 1;
        let fragments = if policy::counts_fragments(writes) { self.fragments(name).await.ok() } else { None };
        let Some(chore) = policy::chore_after_write(writes, fragments) else { return };
        let store = self.clone();
        upkeep::spawn(async move {
            let done = match chore {
                Chore::Upkeep => {
                    let prune = chrono::Duration::seconds(policy::PRUNE_OLDER_THAN_SECS);
                    let compaction = lancedb::table::CompactionOptions::default();
                    store.optimize_table(name, Some(prune), policy::MAX_VECTOR_INDEX_SEGMENTS, compaction).await
                }
                Chore::Compact => store.compact_table(name).await,
            };
            if let Err(e) = done {
                tracing::warn!(table = %name, "background upkeep failed (run `astra-mcp memory optimize`): {e}");
            }
        });
    }

    /// Inserts the rows of `batch` whose `id` is not in `name` yet (nor earlier in `batch`), holding the
    /// table's `lock` until the commit (see the module docs), retrying on commit conflicts. Returns the
    /// ids this call stored: not those stored before, nor those another writer stored meanwhile (the
    /// commit conflicts on them and skips them). Writers reach it through [`Self::insert_new`], which
    /// groups the inserts waiting in this process into one call.
    pub(super) async fn insert_absent(
        &self,
        name: TableId,
        batch: RecordBatch,
        lock: TableLock,
    ) -> Result<Vec<uuid::Uuid>, StoreError> {
        let ids = rows::Rows::new(&batch, name).strs("id")?;
        // rows already stored are skipped by the merge-insert itself (no read before it); forgotten
        // conversation items live in another table
        let present = if name == TableId::Conversation {
            self.ids_present(TableId::Forgotten, &ids).await?
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
        let new_ids = rows::Rows::new(&batch, name).uuids("id")?;
        let inserted = merge_keyed(self.table(name), &batch, Merge::InsertAbsent).await?.num_inserted_rows;
        drop(lock);
        let new_ids = if inserted == new_ids.len() as u64 {
            new_ids
        } else {
            // Some of these ids were stored already, or another writer (another machine: the flock
            // covers this one) inserted them before our commit, which then conflicted on those keys and
            // Lance's retry skipped them. Ours are the rows stored with our `created_at`.
            self.ids_written_as(name, &batch).await?
        };
        self.after_write(name).await;
        Ok(new_ids)
    }

    /// Which rows of `batch` are stored as they are in it: by `id`, with the same `created_at`
    /// (microseconds) and `session_id`, which tell this writer's row from another's of the same id. The
    /// time alone does not: two processes that receive the same insert at the same moment stamp the
    /// same microsecond often enough (about 1 in 150 simultaneous inserts of one text on two
    /// processes), and the one whose merge found the other's row then reported it as its own, so its
    /// tags were never merged. Each MCP session has its own id; inserts of one process are serialised
    /// by its lock.
    async fn ids_written_as(&self, name: TableId, batch: &RecordBatch) -> Result<Vec<uuid::Uuid>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        type Stamp = (chrono::DateTime<chrono::Utc>, String);
        let ours = rows::Rows::new(batch, name);
        let ours: std::collections::HashMap<uuid::Uuid, Stamp> = ours
            .uuids("id")?
            .into_iter()
            .zip(ours.times("created_at")?.into_iter().zip(ours.strs("session_id")?))
            .collect();
        let ids: Vec<String> = ours.keys().map(uuid::Uuid::to_string).collect();
        let mut written = Vec::new();
        for chunk in ids.chunks(500) {
            let query = self
                .table(name)
                .query()
                .only_if(in_list("id", chunk.iter().map(String::as_str)))
                .select(Select::columns(&["id", "created_at", "session_id"]));
            for stored in collect(&query).await.map_err(backend)? {
                let stored = rows::Rows::new(&stored, name);
                let stamps = stored.times("created_at")?.into_iter().zip(stored.strs("session_id")?);
                for (id, stamp) in stored.uuids("id")?.into_iter().zip(stamps) {
                    if ours.get(&id) == Some(&stamp) {
                        written.push(id);
                    }
                }
            }
        }
        tracing::debug!(
            table = %name,
            ours = ours.len(),
            written = written.len(),
            "ids inserted meanwhile by another writer"
        );
        Ok(written)
    }

    /// Which of `ids` are stored in `name`.
    pub(super) async fn ids_present(
        &self,
        name: TableId,
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

impl LanceStore {
    /// Deletes the memory `id` of `actor` from whichever table holds it (a core block id purges that
    /// one version from the block's history), and with it from that table's vector and full-text indexes (Lance marks the row deleted; every query skips it,
    /// and `optimize` removes it from the files). Returns the table, `None` when no such row exists.
    pub async fn delete_row(&self, actor: &str, id: &str) -> Result<Option<TableId>, StoreError> {
        let filter = format!("actor_id = {} AND id = {}", sql_literal(actor), sql_literal(id));
        // Each table from its latest version, not a view that lags other machines (a bucket's reads may):
        // a memory stored on another machine a moment ago is found and deleted too.
        for name in TableId::SEARCHABLE {
            let table = self.table(name);
            table.checkout_latest().await.map_err(backend)?;
            if name == TableId::Conversation {
                let rows_found = self.select(name, &filter, Some(1)).await?;
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
                self.forget_item(&item.0).await?;
                self.forget_distilled_from(&item.0).await?;
                return Ok(Some(name));
            }
            let deleted = delete_where(table, &filter).await?;
            if deleted > 0 {
                if name == TableId::Archival {
                    self.scrub_distill_changes(actor, id).await?;
                }
                return Ok(Some(name));
            }
        }
        // a version of a core block (ids from `memory list --table core_blocks`): purged from the history,
        // unless it is the block's current value
        self.table(TableId::CoreBlocks).checkout_latest().await.map_err(backend)?;
        let found = self.select(TableId::CoreBlocks, &filter, Some(1)).await?;
        let Some(v) =
            found.iter().map(super::core_blocks::from_batch).next().transpose()?.and_then(|v| v.into_iter().next())
        else {
            return Ok(None);
        };
        match self.purge_block_version(&v.actor_id, &v.project, &v.section, v.version).await? {
            Purge::Purged => Ok(Some(TableId::CoreBlocks)),
            Purge::Absent => Ok(None),
            Purge::Current => Err(StoreError::Invalid(format!(
                "{id} is version {} of core block `{}`, its current value: change the block first (`core_memory_replace`, \
                 the memory browser, or `astra-mcp core restore`), then purge this version",
                v.version, v.section
            ))),
        }
    }

    /// Appends passages without the insert-if-absent check (benchmark loading into a fresh store).
    pub async fn append_passages(&self, rows_in: &[(crate::domain::Passage, Vec<f32>)]) -> Result<(), StoreError> {
        let batch = super::archival::to_batch(rows_in)?;
        let table = self.table(TableId::Archival);
        retry(table, || table.add(batch.clone()).execute()).await.map_err(backend)?;
        Ok(())
    }

    /// After the conversation item `item` was forgotten: deletes every archival memory `distill` derived from
    /// it, as `memory_forget` deletes a memory (its runs' changes scrubbed, memories it superseded current
    /// again), and replaces with `[forgotten]` the texts of every run change that quotes the item. A memory
    /// is derived from the item when its provenance (session and turn) is the item, or when a run added,
    /// rewrote or superseded a memory with it (a memory later restated from another item goes too: it
    /// was first written from this one).
    async fn forget_distilled_from(&self, item: &crate::domain::ConversationItem) -> Result<(), StoreError> {
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
        for batch in self.select(TableId::Archival, &filter, None).await? {
            derived.extend(super::archival::from_batch(&batch)?.into_iter().map(|(p, _)| p.id.to_string()));
        }
        for run in self.runs(Some(actor)).await? {
            for change in run.changes.iter().filter(|c| cites(c) && c["action"] != "unchanged") {
                if let Some(id) = change["memory_id"].as_str() {
                    derived.insert(id.to_string());
                }
            }
        }
        let table = self.table(TableId::Archival);
        for id in &derived {
            let filter = format!("actor_id = {} AND id = {}", sql_literal(actor), sql_literal(id));
            delete_where(table, &filter).await?;
            self.scrub_distill_changes(actor, id).await?;
        }
        // changes that quote the item without a memory derived from it (`unchanged`: already stored)
        for mut run in self.runs(Some(actor)).await? {
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
                self.put_run(&run).await?;
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
    async fn scrub_distill_changes(&self, actor: &str, id: &str) -> Result<(), StoreError> {
        use crate::store::DistillRunStore;
        // memories it had superseded are current again: nothing replaces them any more
        let filter = format!("actor_id = {} AND superseded_by = {}", sql_literal(actor), sql_literal(id));
        let mut revived = Vec::new();
        for batch in self.select(TableId::Archival, &filter, None).await? {
            for (mut passage, vector) in super::archival::from_batch(&batch)? {
                passage.superseded_by = None;
                passage.updated_at = chrono::Utc::now();
                revived.push((passage, vector));
            }
        }
        if !revived.is_empty() {
            self.upsert_batch(TableId::Archival, super::archival::to_batch(&revived)?).await?;
        }
        for mut run in self.runs(Some(actor)).await? {
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
                self.put_run(&run).await?;
            }
        }
        Ok(())
    }

    /// Replaces the rows of `batch` that still exist, by `id`; inserts nothing.
    pub(super) async fn update_batch(&self, name: TableId, batch: RecordBatch) -> Result<(), StoreError> {
        merge_keyed(self.table(name), &batch, Merge::Update(None)).await?;
        Ok(())
    }

    /// Replaces the rows of `batch` whose stored row meets `condition` (SQL over `target.` and `source.`
    /// columns), by `id`; inserts nothing. Returns how many rows it replaced. A concurrent change of the
    /// same row conflicts at commit, and the retry evaluates `condition` on the row the other writer left.
    pub(super) async fn update_if(
        &self,
        name: TableId,
        batch: RecordBatch,
        condition: &str,
    ) -> Result<u64, StoreError> {
        let updated = merge_keyed(self.table(name), &batch, Merge::Update(Some(condition))).await?.num_updated_rows;
        if updated > 0 && TableId::SEARCHABLE.contains(&name) {
            self.after_write(name).await;
        }
        Ok(updated)
    }

    /// Upserts a batch keyed on `id` (new rows inserted, existing rows replaced).
    pub(super) async fn upsert_batch(&self, name: TableId, batch: RecordBatch) -> Result<(), StoreError> {
        merge_keyed(self.table(name), &batch, Merge::Upsert).await?;
        if TableId::SEARCHABLE.contains(&name) {
            self.after_write(name).await;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl crate::store::ForgetStore for LanceStore {
    async fn forget(&self, actor_id: &str, id: uuid::Uuid) -> Result<Option<&'static str>, StoreError> {
        Ok(self.delete_row(actor_id, &id.to_string()).await?.map(TableId::tier))
    }
}

/// What replaces a forgotten text in a distillation run's change list.
const FORGOTTEN: &str = "[forgotten]";
