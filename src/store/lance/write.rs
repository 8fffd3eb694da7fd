//! Writes, on the commits of `commit`: inserts that must not duplicate a row, under the table's
//! [`TableLock`] (see the module docs of `store::lance`; `group` gathers them into commits); upserts and
//! updates keyed on `id` ([`merge_keyed`]); deletions with what goes with them (a forgotten
//! conversation item's distilled memories, a forgotten memory's texts in distill runs); and what follows
//! a committed write, in the background: the full-text index of a small table kept empty
//! ([`FTS_FLAT_MAX_ROWS`]) or new rows folded into a larger one's ([`FTS_FOLD_MAX_ROWS`]), upkeep every
//! [`UPKEEP_EVERY_WRITES`] writes to a table, and compaction of its newest fragments in between
//! ([`upkeep::COMPACT_EVERY_WRITES`]).

use arrow_array::RecordBatch;
use serde_json::Value;

use super::commit::{Merge, TableLock, delete_where, merge_keyed, retry};
use super::sql::{in_list, sql_literal};
use super::upkeep::{self, UPKEEP_EVERY_WRITES};
use super::{
    CONVERSATION_TABLE, CORE_BLOCKS_TABLE, FORGOTTEN_TABLE, LanceStore, SEARCHABLE_TABLES, backend, collect, rows,
};
use crate::store::{CoreBlockStore, Purge, StoreError};

/// Tables of up to this many rows fold new rows into their full-text indexes as soon as the rows the
/// index does not cover exceed [`FTS_UNINDEXED_SHARE`] of those it does; larger ones leave it to upkeep.
/// Lance 14 scores the rows an FTS index covers with the index's statistics (document count, document
/// frequency of each term) and the rows it does not cover with those statistics plus the new rows'
/// (`lance::io::exec::fts`, `residual_bm25_scorer`), so a new row sharing a rare term with an indexed
/// one scores lower for it (the term's document frequency counts the new row on one side only). While
/// such rows are a large share of a small table a passage could rank below its neighbours for its own
/// words.
pub const FTS_FOLD_MAX_ROWS: usize = 1_000;

/// Tables of up to this many rows keep their full-text indexes empty: every row is scanned and scored
/// with the same statistics (the empty index's plus all rows'), so no row is scored apart from the
/// others (with a partly filled index, a new "Use pnpm not npm" ranked below an indexed "pnpm not npm
/// use" for its own words), and no write or upkeep pays for folding rows into an index (about 20 ms per
/// insert when every write folded, docs/internals/writes.md, "Full-text fold"). The scan costs little at
/// this size.
/// An index that covers rows of such a table (a store that shrank, or one written by an earlier
/// version) is rebuilt empty after the table's next write.
pub const FTS_FLAT_MAX_ROWS: usize = 250;

/// The share of unindexed rows (against indexed ones) above which a table of more than
/// [`FTS_FLAT_MAX_ROWS`] and at most [`FTS_FOLD_MAX_ROWS`] rows folds them in: 1/8, so the folds
/// of a growing table come at every 12.5 % of growth (about 60 for its first 1,000 rows), not at every
/// write, since each fold writes a new copy of the index until upkeep prunes old versions. The first
/// fold, past [`FTS_FLAT_MAX_ROWS`], takes in every row.
pub const FTS_UNINDEXED_SHARE: f64 = 0.125;

/// Whether a write to a table of `rows` rows folds the rows its full-text index does not cover
/// (`unindexed`) into it, the index covering `indexed`: see [`FTS_FLAT_MAX_ROWS`] (never while the
/// table is that small) and [`FTS_UNINDEXED_SHARE`]. Larger tables than [`FTS_FOLD_MAX_ROWS`] leave the
/// fold to upkeep.
pub(super) fn fts_fold_due(rows: usize, indexed: usize, unindexed: usize) -> bool {
    if unindexed == 0 || rows <= FTS_FLAT_MAX_ROWS || rows > FTS_FOLD_MAX_ROWS {
        false
    } else {
        unindexed as f64 > FTS_UNINDEXED_SHARE * indexed as f64
    }
}

/// The full-text index checks that follow one handle's writes ([`LanceStore::check_fts_in_background`]).
#[derive(Default)]
pub(super) struct FoldChecks {
    /// Tables with a check waiting to run (at most one each).
    pending: std::sync::Mutex<std::collections::HashSet<&'static str>>,
    /// Held by the check that runs.
    running: tokio::sync::Mutex<()>,
}

impl LanceStore {
    /// After a write to `name`: checks its full-text indexes in the background
    /// ([`Self::fold_into_fts_while_small`]), so that the write's answer waits for no index work. Checks run one at a time and coalesce: while one waits, later writes
    /// add none, and the one that runs sees their rows. Searches meanwhile scan the rows the index does
    /// not cover, so nothing is missed; a new row is scored apart from indexed ones until the fold (see
    /// [`FTS_FOLD_MAX_ROWS`]).
    fn check_fts_in_background(&self, name: &'static str) {
        if self.past_fold_size.lock().unwrap_or_else(|p| p.into_inner()).contains(name) {
            return;
        }
        if !self.fold_checks.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(name) {
            return;
        }
        let store = self.clone();
        upkeep::spawn(async move {
            let _running = store.fold_checks.running.lock().await;
            store.fold_checks.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
            if let Err(e) = store.fold_into_fts_while_small(name).await {
                tracing::warn!(table = name, "new rows not folded into the full-text index yet: {e}");
            }
        });
    }

    /// Folds the rows not yet indexed into the full-text indexes of `name` when [`fts_fold_due`] says
    /// so; in a table of at most [`FTS_FLAT_MAX_ROWS`] rows, rebuilds empty an index that covers rows.
    /// Once a table is seen larger than [`FTS_FOLD_MAX_ROWS`], this handle stops checking it (no row
    /// count per write).
    async fn fold_into_fts_while_small(&self, name: &'static str) -> Result<(), StoreError> {
        use lancedb::table::{OptimizeAction, OptimizeOptions};
        let table = self.table(name);
        let rows = table.count_rows(None).await.map_err(backend)?;
        if rows > FTS_FOLD_MAX_ROWS {
            self.past_fold_size.lock().unwrap_or_else(|p| p.into_inner()).insert(name);
            return Ok(());
        }
        let coverage = self.fts_index_coverage(name).await?;
        if rows <= FTS_FLAT_MAX_ROWS {
            if coverage.iter().any(|&(_, indexed, _)| indexed > 0) {
                let _maintenance = self.maintenance_lock(name).await;
                self.empty_fts_indexes_of_a_small_table(name).await?;
            }
            return Ok(());
        }
        let stale: Vec<String> = coverage
            .into_iter()
            .filter(|&(_, indexed, unindexed)| fts_fold_due(rows, indexed, unindexed))
            .map(|(index, _, _)| index)
            .collect();
        if stale.is_empty() {
            return Ok(());
        }
        let _maintenance = self.maintenance_lock(name).await;
        retry(table, || table.optimize(OptimizeAction::Index(OptimizeOptions::default().index_names(stale.clone()))))
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Each full-text index of `name`: (index name, rows it covers, rows of the table it does not).
    pub(super) async fn fts_index_coverage(
        &self,
        name: &'static str,
    ) -> Result<Vec<(String, usize, usize)>, StoreError> {
        let table = self.table(name);
        let mut coverage = Vec::new();
        for ix in table.list_indices().await.map_err(backend)? {
            if ix.index_type != lancedb::index::IndexType::FTS {
                continue;
            }
            if let Some(stats) = table.index_stats(&ix.name).await.map_err(backend)? {
                coverage.push((ix.name, stats.num_indexed_rows, stats.num_unindexed_rows));
            }
        }
        Ok(coverage)
    }

    /// After a committed write: make sure the full-text index exists (once per table and process), then
    /// start in the background what keeps it and the table in shape ([`Self::check_fts_in_background`],
    /// compaction and upkeep). A failure only degrades keyword search to the vector ranking, so it is
    /// logged, not returned (the write itself succeeded).
    pub(super) async fn after_write(&self, name: &'static str) {
        if let Err(e) = self.ensure_fts(name).await {
            tracing::warn!(table = name, "full-text index not built yet: {e}");
        } else {
            self.check_fts_in_background(name);
        }
        let n = {
            let mut writes = self.writes.lock().unwrap_or_else(|p| p.into_inner());
            let n = writes.entry(name).or_default();
            *n += 1;
            *n
        };
        let many_fragments =
            || async { self.fragments(name).await.is_ok_and(|fragments| fragments > upkeep::UPKEEP_FRAGMENTS) };
        let upkeep = n.is_multiple_of(UPKEEP_EVERY_WRITES) || (n == 1 && many_fragments().await);
        if upkeep || n.is_multiple_of(upkeep::COMPACT_EVERY_WRITES) {
            let store = self.clone();
            upkeep::spawn(async move {
                let done = if upkeep {
                    store
                        .optimize_table(
                            name,
                            Some(chrono::Duration::seconds(upkeep::PRUNE_OLDER_THAN_SECS)),
                            upkeep::MAX_VECTOR_INDEX_SEGMENTS,
                            lancedb::table::CompactionOptions::default(),
                        )
                        .await
                } else {
                    store.compact_table(name).await
                };
                if let Err(e) = done {
                    tracing::warn!(table = name, "background upkeep failed (run `astra-mcp memory optimize`): {e}");
                }
            });
        }
    }

    /// Inserts the rows of `batch` whose `id` is not in `name` yet (nor earlier in `batch`), holding the
    /// table's `lock` until the commit (see the module docs), retrying on commit conflicts. Returns the
    /// ids this call stored: not those stored before, nor those another writer stored meanwhile (the
    /// commit conflicts on them and skips them). Writers reach it through [`Self::insert_new`], which
    /// groups the inserts waiting in this process into one call.
    pub(super) async fn insert_absent(
        &self,
        name: &'static str,
        batch: RecordBatch,
        lock: TableLock,
    ) -> Result<Vec<uuid::Uuid>, StoreError> {
        let ids = rows::Rows::new(&batch, name).strs("id")?;
        // rows already stored are skipped by the merge-insert itself (no read before it); forgotten
        // conversation items live in another table
        let present = if name == CONVERSATION_TABLE {
            self.ids_present(FORGOTTEN_TABLE, &ids).await?
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
    async fn ids_written_as(&self, name: &'static str, batch: &RecordBatch) -> Result<Vec<uuid::Uuid>, StoreError> {
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
            table = name,
            ours = ours.len(),
            written = written.len(),
            "ids inserted meanwhile by another writer"
        );
        Ok(written)
    }

    /// Which of `ids` are stored in `name`.
    pub(super) async fn ids_present(
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

impl LanceStore {
    /// Deletes the memory `id` of `actor` from whichever table holds it (a core block id purges that
    /// one version from the block's history), and with it from that table's vector and full-text indexes (Lance marks the row deleted; every query skips it,
    /// and `optimize` removes it from the files). Returns the table, `None` when no such row exists.
    pub async fn delete_row(&self, actor: &str, id: &str) -> Result<Option<&'static str>, StoreError> {
        let filter = format!("actor_id = {} AND id = {}", sql_literal(actor), sql_literal(id));
        // Each table from its latest version, not a view that lags other machines (a bucket's reads may):
        // a memory stored on another machine a moment ago is found and deleted too.
        for name in SEARCHABLE_TABLES {
            let table = self.table(name);
            table.checkout_latest().await.map_err(backend)?;
            if name == super::CONVERSATION_TABLE {
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
                if name == super::ARCHIVAL_TABLE {
                    self.scrub_distill_changes(actor, id).await?;
                }
                return Ok(Some(name));
            }
        }
        // a version of a core block (ids from `memory list --table core_blocks`): purged from the history,
        // unless it is the block's current value
        self.table(CORE_BLOCKS_TABLE).checkout_latest().await.map_err(backend)?;
        let found = self.select(CORE_BLOCKS_TABLE, &filter, Some(1)).await?;
        let Some(v) =
            found.iter().map(super::core_blocks::from_batch).next().transpose()?.and_then(|v| v.into_iter().next())
        else {
            return Ok(None);
        };
        match self.purge_block_version(&v.actor_id, &v.project, &v.section, v.version).await? {
            Purge::Purged => Ok(Some(CORE_BLOCKS_TABLE)),
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
        let table = self.table(super::ARCHIVAL_TABLE);
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
        for batch in self.select(super::ARCHIVAL_TABLE, &filter, None).await? {
            derived.extend(super::archival::from_batch(&batch)?.into_iter().map(|(p, _)| p.id.to_string()));
        }
        for run in self.runs(Some(actor)).await? {
            for change in run.changes.iter().filter(|c| cites(c) && c["action"] != "unchanged") {
                if let Some(id) = change["memory_id"].as_str() {
                    derived.insert(id.to_string());
                }
            }
        }
        let table = self.table(super::ARCHIVAL_TABLE);
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
        for batch in self.select(super::ARCHIVAL_TABLE, &filter, None).await? {
            for (mut passage, vector) in super::archival::from_batch(&batch)? {
                passage.superseded_by = None;
                passage.updated_at = chrono::Utc::now();
                revived.push((passage, vector));
            }
        }
        if !revived.is_empty() {
            self.upsert_batch(super::ARCHIVAL_TABLE, super::archival::to_batch(&revived)?).await?;
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
    pub(super) async fn update_batch(&self, name: &'static str, batch: RecordBatch) -> Result<(), StoreError> {
        merge_keyed(self.table(name), &batch, Merge::Update(None)).await?;
        Ok(())
    }

    /// Replaces the rows of `batch` whose stored row meets `condition` (SQL over `target.` and `source.`
    /// columns), by `id`; inserts nothing. Returns how many rows it replaced. A concurrent change of the
    /// same row conflicts at commit, and the retry evaluates `condition` on the row the other writer left.
    pub(super) async fn update_if(
        &self,
        name: &'static str,
        batch: RecordBatch,
        condition: &str,
    ) -> Result<u64, StoreError> {
        let updated = merge_keyed(self.table(name), &batch, Merge::Update(Some(condition))).await?.num_updated_rows;
        if updated > 0 && SEARCHABLE_TABLES.contains(&name) {
            self.after_write(name).await;
        }
        Ok(updated)
    }

    /// Upserts a batch keyed on `id` (new rows inserted, existing rows replaced).
    pub(super) async fn upsert_batch(&self, name: &'static str, batch: RecordBatch) -> Result<(), StoreError> {
        merge_keyed(self.table(name), &batch, Merge::Upsert).await?;
        if SEARCHABLE_TABLES.contains(&name) {
            self.after_write(name).await;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl crate::store::ForgetStore for LanceStore {
    async fn forget(&self, actor_id: &str, id: uuid::Uuid) -> Result<Option<&'static str>, StoreError> {
        self.delete_row(actor_id, &id.to_string()).await
    }
}

/// What replaces a forgotten text in a distillation run's change list.
const FORGOTTEN: &str = "[forgotten]";
