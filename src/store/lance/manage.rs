//! Operator views of the whole store (`astra-mcp memory …`): list, show, delete, stats, JSONL export
//! and import, upkeep (`optimize`, docs/storage.md) and re-embedding (`reindex`). These read and write
//! every table generically through Arrow, so a new column needs no change here.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::SchemaRef;
use lancedb::query::{QueryBase, Select};
use lancedb::table::{CompactionOptions, OptimizeAction, OptimizeOptions};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::rows::{self, Rows};
use super::{
    ANN_MIN_ROWS, CORE_BLOCKS_TABLE, FIXES_TABLE, LanceStore, META_TABLE, SEARCHABLE_TABLES, TABLES, backend, collect,
    retry, sql_literal,
};
use crate::embed::{DIMENSION, LazyEmbedder, MODEL_ID};
use crate::store::{ImportRules, StoreError};

/// Rows embedded per batch by `import` and `reindex`.
const EMBED_BATCH: usize = 64;
/// Versions younger than this are kept by background upkeep and by default by `memory optimize` (a
/// reader in another process may still be on them).
pub const PRUNE_OLDER_THAN_SECS: i64 = 60;
/// Segments a vector index may have before background upkeep merges them. Each upkeep folds the rows
/// written since the last one into the vector index as a new segment (a delta, Lance's default), and
/// Lance compacts only neighbouring fragments covered by the same index segments: without merging,
/// every upkeep leaves one more fragment and one more segment for every search to visit. Past this
/// many, upkeep merges every segment but the first (the one built over the bulk of the table) into
/// one, and compaction then joins their fragments. `memory optimize` merges down to two segments.
pub const MAX_VECTOR_INDEX_SEGMENTS: usize = 4;

/// One row in `memory list`.
#[derive(Debug, Clone, Serialize)]
pub struct ListedRow {
    pub table: &'static str,
    pub id: String,
    pub actor_id: String,
    pub project: String,
    pub session_id: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// The row's main text on one line, at most 100 characters.
    pub preview: String,
}

/// Size and shape of one table (`memory stats`).
#[derive(Debug, Clone, Serialize)]
pub struct TableStats {
    pub table: &'static str,
    pub rows: usize,
    /// Rows marked deleted but not yet compacted away.
    pub deleted_rows: Option<usize>,
    /// Bytes of data and index files the manifest records.
    pub bytes: usize,
    pub fragments: usize,
    pub small_fragments: usize,
    pub indices: usize,
    /// Segments of the vector index (`None`: no vector index), at most
    /// [`MAX_VECTOR_INDEX_SEGMENTS`] after upkeep.
    pub vector_index_segments: Option<usize>,
    /// Versions (commits) still on disk; `optimize` prunes old ones.
    pub versions: usize,
}

/// The version of the export format `export` writes and `import` reads (`astra_mcp_export` in the header).
pub const EXPORT_VERSION: u32 = 1;

/// The first line of an export: what made it, so an import knows whether vectors are comparable.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExportHeader {
    pub astra_mcp_export: u32,
    pub format_version: String,
    pub embedding_model: String,
    pub embedding_dimension: usize,
    pub exported_at: String,
}

/// The header of the export `text` (its first non-blank line), checked as [`LanceStore::import`] checks
/// it; for callers that refuse a file before opening a store.
///
/// # Errors
/// [`StoreError::Backend`] when the file is empty, its first line is not a header, or it was written in
/// a newer export version or store format than this build reads.
pub fn read_export_header(text: &str) -> Result<ExportHeader, StoreError> {
    match text.lines().enumerate().find(|(_, l)| !l.trim().is_empty()) {
        Some((i, line)) => parse_export_header(i + 1, line),
        None => {
            Err(StoreError::Backend("the export is empty: give a file written by `astra-mcp memory export`".into()))
        }
    }
}

/// Line `number` of an export as its header: newer export versions and store formats are refused (this
/// build cannot know what they changed); older ones would be read (there are none yet).
fn parse_export_header(number: usize, line: &str) -> Result<ExportHeader, StoreError> {
    let header: ExportHeader = serde_json::from_str(line).map_err(|e| {
        StoreError::Backend(format!(
            "line {number} is not an astra-mcp export header ({e}); give a file written by `astra-mcp memory export`"
        ))
    })?;
    let ours: u32 = super::FORMAT_VERSION.parse().expect("FORMAT_VERSION is a number");
    let newer_format = header.format_version.parse::<u32>().map_or(true, |theirs| theirs > ours);
    if header.astra_mcp_export > EXPORT_VERSION || newer_format {
        return Err(StoreError::Backend(format!(
            "line {number}: this export is version {} of store format {}, which this astra-mcp (export version \
{EXPORT_VERSION}, store format {ours}) cannot read; nothing was imported: import it with a newer astra-mcp",
            header.astra_mcp_export, header.format_version
        )));
    }
    Ok(header)
}

/// Rows written or read, by table.
pub type TableCounts = BTreeMap<String, usize>;

/// What `import` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ImportReport {
    /// Rows upserted, by table.
    pub rows: TableCounts,
    /// True when the export was made with another embedding model and the imported rows' vectors were
    /// recomputed (false when none of its rows has a vector).
    pub reembedded: bool,
    /// Rows of which a text held a secret, now redacted (an export written by `memory export` has none:
    /// its rows were redacted when stored; a hand-edited or hand-made file may). Those whose embedded text
    /// changed were re-embedded.
    pub redacted: usize,
}

/// The text column shown for a row of `table`.
fn main_text_column(table: &str) -> &'static str {
    match table {
        FIXES_TABLE => "fix_description",
        CORE_BLOCKS_TABLE => "value",
        _ => "text",
    }
}

fn table_name(name: &str) -> Result<&'static str, StoreError> {
    TABLES
        .into_iter()
        .find(|t| *t == name)
        .ok_or_else(|| StoreError::Backend(format!("no table `{name}`: the tables are {}", TABLES.join(", "))))
}

/// What an export holds: every memory table, then the ids of forgotten conversation items (so an import
/// keeps them forgotten).
const EXPORT_TABLES: [&str; 5] = [TABLES[0], TABLES[1], TABLES[2], TABLES[3], super::FORGOTTEN_TABLE];

fn export_table_name(name: &str) -> Result<&'static str, StoreError> {
    EXPORT_TABLES
        .into_iter()
        .find(|t| *t == name)
        .ok_or_else(|| StoreError::Backend(format!("no table `{name}`: an export holds {}", EXPORT_TABLES.join(", "))))
}

/// One line of text, at most `max` characters (an ellipsis marks a cut). Control and bidirectional
/// characters are shown escaped (`\u{1b}`), so stored text cannot drive the operator's terminal.
pub fn preview(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = crate::domain::text::escape_controls(&line);
    if line.chars().count() <= max { line } else { format!("{}…", line.chars().take(max - 1).collect::<String>()) }
}

/// Rows of a batch as JSON objects (timestamps as RFC 3339 strings, vectors as arrays).
fn batch_to_json(batch: &RecordBatch) -> Result<Vec<Map<String, Value>>, StoreError> {
    let mut buffer = Vec::new();
    let mut writer = arrow_json::WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, arrow_json::writer::JsonArray>(&mut buffer);
    writer.write_batches(&[batch]).map_err(backend)?;
    writer.finish().map_err(backend)?;
    drop(writer);
    if buffer.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_slice(&buffer).map_err(backend)
}

/// JSON rows back into a batch of `schema` (strict: unknown columns are refused).
fn json_to_batch(schema: SchemaRef, rows_in: &[Map<String, Value>]) -> Result<Option<RecordBatch>, StoreError> {
    let mut decoder = arrow_json::ReaderBuilder::new(schema).with_strict_mode(true).build_decoder().map_err(backend)?;
    decoder.serialize(rows_in).map_err(backend)?;
    decoder.flush().map_err(backend)
}

/// The first row of `chunk` (from lines `lines`) that does not fit `schema` on its own, as an error naming
/// its line; `None` when each fits alone.
fn first_unfit_row(
    schema: &SchemaRef,
    name: &str,
    chunk: &[Map<String, Value>],
    lines: &[usize],
) -> Option<StoreError> {
    chunk.iter().zip(lines).find_map(|(row, line)| {
        json_to_batch(schema.clone(), std::slice::from_ref(row)).err().map(|e| {
            StoreError::Backend(format!(
                "line {line}: the {name} row does not fit the table ({e}); nothing was imported. Give rows as \
                 `astra-mcp memory export` writes them"
            ))
        })
    })
}

/// Fails when two rows of `rows_in` (of table `name`, from lines `lines`) share an `id`: an export never
/// holds the same row twice, and both would be written.
fn refuse_duplicate_ids(name: &str, rows_in: &[Map<String, Value>], lines: &[usize]) -> Result<(), StoreError> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (row, line) in rows_in.iter().zip(lines) {
        let Some(id) = row.get("id").and_then(Value::as_str) else { continue };
        if let Some(first) = seen.insert(id, *line) {
            return Err(StoreError::Backend(format!(
                "lines {first} and {line} both hold {name} row {id}; nothing was imported. Keep one of them"
            )));
        }
    }
    Ok(())
}

impl LanceStore {
    fn actor_filter(actor: Option<&str>) -> Option<String> {
        actor.map(|a| format!("actor_id = {}", sql_literal(a)))
    }

    /// Rows of one table or all, newest first, at most `limit` per table.
    ///
    /// # Errors
    /// [`StoreError::Backend`] for an unknown table name or a failed read.
    pub async fn list_rows(
        &self,
        table: Option<&str>,
        actor: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ListedRow>, StoreError> {
        let tables: Vec<&'static str> = match table {
            Some(t) => vec![table_name(t)?],
            None => TABLES.to_vec(),
        };
        let mut out = Vec::new();
        for name in tables {
            let text_col = main_text_column(name);
            let mut query = self.table(name).query().select(Select::columns(&[
                "id",
                "actor_id",
                "project",
                "session_id",
                "created_at",
                text_col,
            ]));
            if let Some(f) = Self::actor_filter(actor) {
                query = query.only_if(f);
            }
            let mut listed = Vec::new();
            for batch in collect(&query).await.map_err(backend)? {
                let r = Rows::new(&batch, name);
                let (ids, actors, projects, sessions, created) = (
                    r.strs("id")?,
                    r.strs("actor_id")?,
                    r.strs("project")?,
                    r.strs("session_id")?,
                    r.times("created_at")?,
                );
                let texts = r.strs(text_col)?;
                for i in 0..r.len() {
                    listed.push((
                        created[i],
                        ListedRow {
                            table: name,
                            id: ids[i].clone(),
                            actor_id: actors[i].clone(),
                            project: projects[i].clone(),
                            session_id: sessions[i].clone(),
                            created_at: created[i].to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                            preview: preview(&texts[i], 100),
                        },
                    ));
                }
            }
            listed.sort_by_key(|row| std::cmp::Reverse(row.0));
            out.extend(listed.into_iter().take(limit).map(|(_, row)| row));
        }
        Ok(out)
    }

    /// The full row with `id` (any table), as JSON without its vector, with the table's name.
    pub async fn show_row(&self, id: &str, actor: Option<&str>) -> Result<Option<(&'static str, Value)>, StoreError> {
        let mut filter = format!("id = {}", sql_literal(id));
        if let Some(f) = Self::actor_filter(actor) {
            filter = format!("{filter} AND {f}");
        }
        for name in TABLES {
            for batch in self.select(name, &filter, Some(1)).await? {
                if let Some(mut row) = batch_to_json(&batch)?.into_iter().next() {
                    if row.remove("vector").is_some() {
                        row.insert("vector".into(), Value::String(format!("[f32; {DIMENSION}]")));
                    }
                    return Ok(Some((name, Value::Object(row))));
                }
            }
        }
        Ok(None)
    }

    /// Deletes the memory `id` of `actor` from whichever table holds it (a core block id purges that
    /// one version from the block's history), and with it from that table's vector and full-text indexes (Lance marks the row deleted; every query skips it,
    /// and `optimize` removes it from the files). Returns the table, `None` when no such row exists.
    pub async fn delete_row(&self, actor: &str, id: &str) -> Result<Option<&'static str>, StoreError> {
        let filter = format!("actor_id = {} AND id = {}", sql_literal(actor), sql_literal(id));
        for name in SEARCHABLE_TABLES {
            let table = self.table(name);
            if name == super::SESSION_ITEMS_TABLE {
                let rows_found = self.select(name, &filter, Some(1)).await?;
                let Some(item) = rows_found
                    .iter()
                    .map(super::sessions::from_batch)
                    .next()
                    .transpose()?
                    .and_then(|v| v.into_iter().next())
                else {
                    continue;
                };
                retry(|| table.delete(filter.as_str())).await.map_err(backend)?;
                self.forget_item(&item.0).await?;
                self.forget_distilled_from(&item.0).await?;
                return Ok(Some(name));
            }
            let result = retry(|| table.delete(filter.as_str())).await.map_err(backend)?;
            if result.num_deleted_rows > 0 {
                if name == super::ARCHIVAL_TABLE {
                    self.scrub_distill_changes(actor, id).await?;
                }
                return Ok(Some(name));
            }
        }
        // a version of a core block (ids from `memory list --table core_blocks`): purged from the history
        let table = self.table(CORE_BLOCKS_TABLE);
        let result = retry(|| table.delete(filter.as_str())).await.map_err(backend)?;
        Ok((result.num_deleted_rows > 0).then_some(CORE_BLOCKS_TABLE))
    }

    /// Builds the ANN index on `vector` (IVF-HNSW-SQ, cosine) once the table has [`ANN_MIN_ROWS`] rows,
    /// and rebuilds it when the table has doubled since (so its partitions follow the data); rows added
    /// in between are folded in by the index optimisation of upkeep, and until then searched flat.
    /// Returns whether an index was (re)built.
    pub async fn ensure_vector_index(&self, name: &'static str) -> Result<bool, StoreError> {
        let table = self.table(name);
        let rows = table.count_rows(None).await.map_err(backend)?;
        if rows < ANN_MIN_ROWS {
            return Ok(false);
        }
        let build = match self.vector_index(name).await? {
            None => true,
            Some(ix) => table
                .index_stats(&ix.name)
                .await
                .map_err(backend)?
                .is_some_and(|stats| stats.num_indexed_rows.saturating_mul(2) <= rows),
        };
        if !build {
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
        tracing::info!(table = name, rows, ms = started.elapsed().as_millis() as u64, "vector index built");
        Ok(true)
    }

    /// The indexes a table needs at scale ([`ANN_MIN_ROWS`] rows and more): the vector index
    /// ([`Self::ensure_vector_index`]), then the scalar indexes of its filter columns
    /// ([`Self::ensure_scalar_indexes`]). Returns whether the vector index was (re)built.
    pub async fn ensure_large_table_indexes(&self, name: &'static str) -> Result<bool, StoreError> {
        let rebuilt = self.ensure_vector_index(name).await?;
        self.ensure_scalar_indexes(name).await?;
        Ok(rebuilt)
    }

    /// Builds the scalar indexes of `name`'s filter columns ([`scalar_index_columns`]: a bitmap on
    /// `actor_id`, a B-tree on `superseded_by`) once the table has [`ANN_MIN_ROWS`] rows. Without them
    /// every filtered search evaluates its filter by scanning those columns of every row (about 60 ms at
    /// 1M rows); with them the filter is an index lookup. Upkeep's index optimisation keeps them current.
    /// Returns the columns indexed now.
    pub async fn ensure_scalar_indexes(&self, name: &'static str) -> Result<Vec<&'static str>, StoreError> {
        let table = self.table(name);
        let wanted = scalar_index_columns(name);
        if wanted.is_empty() || table.count_rows(None).await.map_err(backend)? < ANN_MIN_ROWS {
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
                    tracing::debug!(table = name, column, "scalar index created concurrently: {e}");
                }
                Err(e) => return Err(backend(e)),
            }
        }
        if !built.is_empty() {
            tracing::info!(table = name, columns = ?built, "scalar indexes built");
        }
        Ok(built)
    }

    /// The name of `name`'s vector index and how many segments it has (`None`: no vector index).
    pub async fn vector_index_segments(&self, name: &'static str) -> Result<Option<(String, usize)>, StoreError> {
        let Some(ix) = self.vector_index(name).await? else { return Ok(None) };
        let stats = self.table(name).index_stats(&ix.name).await.map_err(backend)?;
        let segments = stats.and_then(|s| s.num_indices).unwrap_or(1);
        Ok(Some((ix.name, segments as usize)))
    }

    /// When `name`'s vector index has more than `max_segments` segments (at least 2), merges all but
    /// the first into one (Lance's `num_indices_to_merge`), so that compaction can join the fragments
    /// they cover. The first segment, built over the table when it was indexed or last doubled, is left
    /// as it is: the merge rebuilds the graphs of the rows written since (HNSW per IVF partition, with
    /// the existing partitions and quantiser), not the whole index. Returns the segments merged.
    ///
    /// Cost, measured over 10,000 single inserts (BENCHMARKS.md, "Vector index segments are merged"):
    /// 79 ms with about 500 rows written since the first segment, 0.6–0.7 s with about 5,000 (building
    /// the first over 5,000 rows took 1.2 s); background upkeep merges about every 500th write.
    pub(super) async fn merge_vector_index_segments(
        &self,
        name: &'static str,
        max_segments: usize,
    ) -> Result<Option<usize>, StoreError> {
        let Some((index, segments)) = self.vector_index_segments(name).await? else { return Ok(None) };
        if segments <= max_segments.max(2) {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        let options = OptimizeOptions::merge(segments - 1).index_names(vec![index]);
        let table = self.table(name);
        retry(|| table.optimize(OptimizeAction::Index(options.clone()))).await.map_err(backend)?;
        tracing::info!(
            table = name,
            segments = segments - 1,
            ms = started.elapsed().as_millis() as u64,
            "vector index segments merged"
        );
        Ok(Some(segments - 1))
    }

    /// `name`'s index on `vector`, if it has one.
    async fn vector_index(&self, name: &'static str) -> Result<Option<lancedb::index::IndexConfig>, StoreError> {
        let indices = self.table(name).list_indices().await.map_err(backend)?;
        Ok(indices.into_iter().find(|ix| ix.columns.iter().any(|c| c == "vector")))
    }

    /// Whether `name` has an index on `vector`.
    pub async fn has_vector_index(&self, name: &'static str) -> Result<bool, StoreError> {
        Ok(self.vector_index(name).await?.is_some())
    }

    /// Ids of the `k` rows of `actor` nearest to `vector` by cosine, through the vector index (as the
    /// searches run) or, with `exact`, by a flat scan (the ground truth of a recall measurement).
    pub async fn nearest_ids(
        &self,
        name: &'static str,
        actor: &str,
        vector: &[f32],
        k: usize,
        exact: bool,
    ) -> Result<Vec<String>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let mut query = self
            .nearest(name, vector, k)
            .await?
            .only_if(format!("actor_id = {}", sql_literal(actor)))
            .select(Select::columns(&["id", "_distance"]));
        if exact {
            query = query.bypass_vector_index();
        }
        let mut ids = Vec::new();
        for batch in collect(&query).await.map_err(backend)? {
            ids.extend(Rows::new(&batch, name).strs("id")?);
        }
        Ok(ids)
    }

    /// Appends passages without the insert-if-absent check (benchmark loading into a fresh store).
    pub async fn append_passages(&self, rows_in: &[(crate::domain::Passage, Vec<f32>)]) -> Result<(), StoreError> {
        let batch = super::archival::to_batch(rows_in)?;
        let table = self.table(super::ARCHIVAL_TABLE);
        retry(|| table.add(batch.clone()).execute()).await.map_err(backend)?;
        Ok(())
    }

    /// After archival memory `id` was forgotten: memories it superseded are current again, and its texts
    /// are removed from the change lists of the actor's distill runs (the ids and actions stay), so no
    /// copy of it is left there.
    /// After the session item `item` was forgotten: deletes every archival memory `distill` derived from
    /// it, as `memory_forget` deletes a memory (its runs' changes scrubbed, memories it superseded current
    /// again), and replaces with `[forgotten]` the texts of every run change that quotes the item. A memory
    /// is derived from the item when its provenance (session and turn) is the item, or when a run added,
    /// rewrote or superseded a memory with it (a memory later restated from another item goes too: it
    /// was first written from this one).
    async fn forget_distilled_from(&self, item: &crate::domain::SessionItem) -> Result<(), StoreError> {
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
            retry(|| table.delete(filter.as_str())).await.map_err(backend)?;
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

    /// Rows, size, fragments, indexes, vector index segments and versions of every table.
    pub async fn stats(&self) -> Result<Vec<TableStats>, StoreError> {
        let mut out = Vec::new();
        for name in TABLES {
            let table = self.table(name);
            let s = table.stats().await.map_err(backend)?;
            out.push(TableStats {
                table: name,
                rows: s.num_rows,
                deleted_rows: s.num_deleted_rows,
                bytes: s.total_bytes,
                fragments: s.fragment_stats.num_fragments,
                small_fragments: s.fragment_stats.num_small_fragments,
                indices: s.num_indices,
                vector_index_segments: self.vector_index_segments(name).await?.map(|(_, n)| n),
                versions: table.list_versions().await.map_err(backend)?.len(),
            });
        }
        Ok(out)
    }

    /// Upkeep of docs/storage.md for every table: compacts small fragments (dropping deleted rows), folds
    /// unindexed rows into the indexes, and prunes versions older than `prune_older_than`.
    pub async fn optimize(&self, prune_older_than: chrono::Duration) -> Result<(), StoreError> {
        for name in TABLES {
            self.optimize_table(name, Some(prune_older_than), 2).await?;
        }
        Ok(())
    }

    /// Brings every index of the searchable table `name` up to its rows: builds the full-text indexes
    /// if missing, the vector and scalar indexes once the table is large enough
    /// ([`Self::ensure_large_table_indexes`]), and folds the rows written since into all of them (into
    /// the vector index as a new segment, which upkeep merges). Bulk commands (`memory ingest`, `memory
    /// import`) run it at their end: rows a full-text index does not cover are scored apart from the
    /// others (see [`super::FTS_FOLD_MAX_ROWS`]), so an ingested passage could otherwise rank below an
    /// older one with its words in another order until the next upkeep.
    pub async fn fold_new_rows_into_indexes(&self, name: &'static str) -> Result<(), StoreError> {
        let _maintenance = self.maintenance_lock(name).await;
        self.fold_new_rows_into_indexes_locked(name).await
    }

    /// [`Self::fold_new_rows_into_indexes`] for a caller holding [`Self::maintenance_lock`].
    async fn fold_new_rows_into_indexes_locked(&self, name: &'static str) -> Result<(), StoreError> {
        self.ensure_fts(name).await?;
        self.ensure_large_table_indexes(name).await?;
        let table = self.table(name);
        retry(|| table.optimize(OptimizeAction::Index(OptimizeOptions::default()))).await.map_err(backend)?;
        Ok(())
    }

    /// Compaction and index refresh of one table, leaving its vector index at most `max_segments`
    /// segments ([`Self::merge_vector_index_segments`]), plus removal of versions older than `prune`.
    pub(super) async fn optimize_table(
        &self,
        name: &'static str,
        prune: Option<chrono::Duration>,
        max_segments: usize,
    ) -> Result<(), StoreError> {
        let _maintenance = self.maintenance_lock(name).await;
        let table = self.table(name);
        // Fold new rows into the indexes first: Lance compacts fragments an index covers separately from
        // fragments it does not, so compacting before would leave two groups.
        if SEARCHABLE_TABLES.contains(&name) {
            self.fold_new_rows_into_indexes_locked(name).await?;
            self.merge_vector_index_segments(name, max_segments).await?;
        }
        retry(|| {
            table.optimize(OptimizeAction::Compact { options: CompactionOptions::default(), remap_options: None })
        })
        .await
        .map_err(backend)?;
        if SEARCHABLE_TABLES.contains(&name) {
            // the compacted rows have new addresses; the next search fills the cache again
            self.row_cache(name).clear();
        }
        if let Some(older_than) = prune {
            retry(|| {
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

    /// Writes every row of every table (of `actor`, or all) as JSONL: a header line ([`ExportHeader`]),
    /// then `{"table": …, "row": {…}}` per row with ids, times and vectors, so `import` restores it
    /// exactly.
    pub async fn export(&self, out: &mut dyn Write, actor: Option<&str>) -> Result<TableCounts, StoreError> {
        let header = ExportHeader {
            astra_mcp_export: EXPORT_VERSION,
            format_version: super::FORMAT_VERSION.to_string(),
            embedding_model: MODEL_ID.to_string(),
            embedding_dimension: DIMENSION,
            exported_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        };
        let io = |e: std::io::Error| StoreError::Backend(format!("writing the export: {e}"));
        writeln!(out, "{}", serde_json::to_string(&header).map_err(backend)?).map_err(io)?;
        let mut counts = TableCounts::new();
        for name in EXPORT_TABLES {
            let mut query = self.table(name).query();
            if let Some(f) = Self::actor_filter(actor) {
                query = query.only_if(f);
            }
            let mut n = 0;
            for batch in collect(&query).await.map_err(backend)? {
                for row in batch_to_json(&batch)? {
                    let line = serde_json::json!({ "table": name, "row": row });
                    writeln!(out, "{line}").map_err(io)?;
                    n += 1;
                }
            }
            counts.insert(name.to_string(), n);
        }
        Ok(counts)
    }

    /// Reads an export made by [`Self::export`] and upserts every row by id (an import repeated adds
    /// nothing), each row's text passed through `rules` (the memory layer's redaction and tags). When the export's embedding model differs from this binary's, vectors are recomputed
    /// from each row's `embedded_text`.
    ///
    /// # Errors
    /// A missing or unknown header, a line that is not a row of a known table, or a row that does not
    /// fit its table's columns, with the line number.
    pub async fn import(
        &self,
        text: &str,
        embedder: &LazyEmbedder,
        rules: &ImportRules,
    ) -> Result<ImportReport, StoreError> {
        let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
        let header = match lines.next() {
            Some((i, line)) => parse_export_header(i + 1, line)?,
            None => return Err(StoreError::Backend("the export is empty".into())),
        };
        let reembed = header.embedding_model != MODEL_ID || header.embedding_dimension != DIMENSION;
        let mut by_table: BTreeMap<&'static str, Vec<Map<String, Value>>> = BTreeMap::new();
        let mut line_numbers: BTreeMap<&'static str, Vec<usize>> = BTreeMap::new();
        // per row: its vector must be recomputed, since redaction changed its embedded text
        let mut stale_vectors: BTreeMap<&'static str, Vec<bool>> = BTreeMap::new();
        let mut report = ImportReport::default();
        for (i, line) in lines {
            #[derive(Deserialize)]
            struct Line {
                table: String,
                row: Map<String, Value>,
            }
            let parsed: Line = serde_json::from_str(line)
                .map_err(|e| StoreError::Backend(format!("line {}: not an export row: {e}", i + 1)))?;
            let name =
                export_table_name(&parsed.table).map_err(|e| StoreError::Backend(format!("line {}: {e}", i + 1)))?;
            let mut row = parsed.row;
            if SEARCHABLE_TABLES.contains(&name) || name == super::FORGOTTEN_TABLE {
                // ids are compared as strings: only the canonical spelling may enter
                let id = row.get("id").and_then(Value::as_str).and_then(|id| uuid::Uuid::parse_str(id).ok());
                let Some(id) = id else {
                    return Err(StoreError::Backend(format!(
                        "line {}: a {name} row needs a UUID `id` (as `memory export` writes it)",
                        i + 1
                    )));
                };
                row.insert("id".into(), Value::String(id.to_string()));
            } else if let Some(id) = row.get("id").and_then(Value::as_str).and_then(|id| uuid::Uuid::parse_str(id).ok())
            {
                row.insert("id".into(), Value::String(id.to_string()));
            }
            // secrets are redacted before anything is stored (docs/storage.md), in a hand-edited file too
            let embedded_before = row.get("embedded_text").cloned();
            let redacted = redact_row(&mut row, rules);
            let stale_vector = redacted && row.get("embedded_text") != embedded_before.as_ref();
            if (reembed || stale_vector) && row.contains_key("vector") {
                // placeholder of the right shape; replaced below
                row.insert("vector".into(), Value::Array(vec![Value::from(0.0); DIMENSION]));
            }
            by_table.entry(name).or_default().push(row);
            line_numbers.entry(name).or_default().push(i + 1);
            stale_vectors.entry(name).or_default().push(stale_vector);
            report.redacted += usize::from(redacted);
        }
        // Everything is checked before anything is written: a row that does not fit its table, or that
        // would move a memory to another actor, fails the whole import.
        let mut decoded: Vec<(&'static str, usize, RecordBatch, &[bool])> = Vec::new();
        for (name, rows_in) in &by_table {
            let lines = &line_numbers[name];
            let schema = self.table(name).schema().await.map_err(backend)?;
            refuse_duplicate_ids(name, rows_in, lines)?;
            self.refuse_actor_changes(name, &schema, rows_in, lines).await?;
            let stale = rows_in.chunks(1000).zip(stale_vectors[name].chunks(1000));
            for ((chunk, stale), chunk_lines) in stale.zip(lines.chunks(1000)) {
                match json_to_batch(schema.clone(), chunk) {
                    Ok(Some(batch)) => decoded.push((name, chunk.len(), batch, stale)),
                    Ok(None) => {}
                    Err(e) => return Err(first_unfit_row(&schema, name, chunk, chunk_lines).unwrap_or(e)),
                }
            }
        }
        for (name, n, mut batch, stale) in decoded {
            if reembed && SEARCHABLE_TABLES.contains(&name) {
                batch = reembed_batch(&batch, name, embedder, None).await?;
                report.reembedded = true;
            } else if stale.contains(&true) {
                batch = reembed_batch(&batch, name, embedder, Some(stale)).await?;
            }
            self.upsert_batch(name, batch).await?;
            *report.rows.entry(name.to_string()).or_default() += n;
        }
        // an item forgotten after an older export was made stays forgotten (only its own actor's item)
        let mut forgotten: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for batch in collect(&self.table(super::FORGOTTEN_TABLE).query()).await.map_err(backend)? {
            let rows = Rows::new(&batch, super::FORGOTTEN_TABLE);
            for (id, actor) in rows.strs("id")?.into_iter().zip(rows.strs("actor_id")?) {
                forgotten.entry(actor).or_default().push(id);
            }
        }
        let table = self.table(super::SESSION_ITEMS_TABLE);
        for (actor, ids) in &forgotten {
            for chunk in ids.chunks(500) {
                let ids = super::in_list("id", chunk.iter().map(String::as_str));
                let filter = format!("actor_id = {} AND {ids}", sql_literal(actor));
                retry(|| table.delete(filter.as_str())).await.map_err(backend)?;
            }
        }
        Ok(report)
    }

    /// Fails when a row of `rows_in` (import rows of table `name` of `schema`, from lines `lines`) has the `id` of a
    /// row this store keeps for another actor: an upsert by id would hand that actor's memory to the
    /// export's actor. Tables without `id` and `actor_id` columns are not checked.
    ///
    /// # Errors
    /// [`StoreError::Backend`] naming the first such line, the id and both actors, or a failed read.
    async fn refuse_actor_changes(
        &self,
        name: &'static str,
        schema: &SchemaRef,
        rows_in: &[Map<String, Value>],
        lines: &[usize],
    ) -> Result<(), StoreError> {
        let table = self.table(name);
        if schema.column_with_name("id").is_none() || schema.column_with_name("actor_id").is_none() {
            return Ok(());
        }
        let str_of =
            |row: &Map<String, Value>, column: &str| row.get(column).and_then(Value::as_str).map(str::to_string);
        let mut stored: HashMap<String, String> = HashMap::new();
        for chunk in rows_in.chunks(500) {
            let ids: Vec<String> = chunk.iter().filter_map(|row| str_of(row, "id")).collect();
            let query = table
                .query()
                .only_if(super::in_list("id", ids.iter().map(String::as_str)))
                .select(Select::columns(&["id", "actor_id"]));
            for batch in collect(&query).await.map_err(backend)? {
                let rows = Rows::new(&batch, name);
                stored.extend(rows.strs("id")?.into_iter().zip(rows.strs("actor_id")?));
            }
        }
        for (row, line) in rows_in.iter().zip(lines) {
            let (Some(id), Some(actor)) = (str_of(row, "id"), str_of(row, "actor_id")) else { continue };
            if let Some(owner) = stored.get(&id).filter(|owner| **owner != actor) {
                return Err(StoreError::Backend(format!(
                    "line {line}: {name} row {id} belongs to actor `{owner}` in this store, but the export gives it to \
                     `{actor}`; nothing was imported. An import never moves a memory between actors: drop that line \
                     from the file, or delete the stored row first (`astra-mcp memory rm {id} --actor {owner}`)"
                )));
            }
        }
        Ok(())
    }

    /// Replaces the rows of `batch` that still exist, by `id`; inserts nothing.
    async fn update_batch(&self, name: &'static str, batch: RecordBatch) -> Result<(), StoreError> {
        let table = self.table(name);
        retry(|| {
            let mut merge = table.merge_insert(&["id"]);
            merge.when_matched_update_all(None);
            let reader = arrow_array::RecordBatchIterator::new(vec![Ok(batch.clone())], batch.schema());
            async move { merge.execute(Box::new(reader)).await }
        })
        .await
        .map_err(backend)?;
        Ok(())
    }

    /// Upserts a batch keyed on `id` (new rows inserted, existing rows replaced).
    pub(super) async fn upsert_batch(&self, name: &'static str, batch: RecordBatch) -> Result<(), StoreError> {
        let table = self.table(name);
        retry(|| {
            let mut merge = table.merge_insert(&["id"]);
            merge.when_matched_update_all(None).when_not_matched_insert_all();
            let reader = arrow_array::RecordBatchIterator::new(vec![Ok(batch.clone())], batch.schema());
            async move { merge.execute(Box::new(reader)).await }
        })
        .await
        .map_err(backend)?;
        if SEARCHABLE_TABLES.contains(&name) {
            self.after_write(name).await;
        }
        Ok(())
    }

    /// Re-embeds every row of every searchable table with this binary's model (after a model change),
    /// then records the model in `meta`, so the store opens normally again. Returns rows re-embedded by
    /// table. Safe to rerun after an interruption: rows are rewritten by id.
    pub async fn reindex(&self, embedder: &LazyEmbedder) -> Result<TableCounts, StoreError> {
        let mut counts = TableCounts::new();
        for name in SEARCHABLE_TABLES {
            let batches = collect(&self.table(name).query()).await.map_err(backend)?;
            let mut n = 0;
            for batch in batches {
                for start in (0..batch.num_rows()).step_by(1000) {
                    let part = batch.slice(start, (batch.num_rows() - start).min(1000));
                    n += part.num_rows();
                    let part = reembed_batch(&part, name, embedder, None).await?;
                    // update only: a row deleted while we re-embedded stays deleted
                    self.update_batch(name, part).await?;
                }
            }
            counts.insert(name.to_string(), n);
        }
        self.write_meta_model().await?;
        Ok(counts)
    }

    async fn write_meta_model(&self) -> Result<(), StoreError> {
        let meta = self.conn.open_table(META_TABLE).execute().await.map_err(backend)?;
        let schema = super::meta_schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                rows::strings(["embedding_model", "embedding_dimension"]),
                Arc::new(StringArray::from(vec![MODEL_ID.to_string(), DIMENSION.to_string()])),
            ],
        )
        .map_err(backend)?;
        retry(|| {
            let mut merge = meta.merge_insert(&["key"]);
            merge.when_matched_update_all(None).when_not_matched_insert_all();
            let reader = arrow_array::RecordBatchIterator::new(vec![Ok(batch.clone())], schema.clone());
            async move { merge.execute(Box::new(reader)).await }
        })
        .await
        .map_err(backend)?;
        Ok(())
    }
}

/// Columns that name or date a row rather than hold its text: never rewritten by [`redact_row`] (an
/// `actor_id` that looked like a token must not move a memory to another actor).
const IDENTITY_COLUMNS: [&str; 10] = [
    "id",
    "actor_id",
    "project",
    "session_id",
    "source_key",
    "superseded_by",
    "created_at",
    "updated_at",
    "forgotten_at",
    "vector",
];

/// Redacts secrets (`rules.redact`) in every text of an imported `row`, nested ones included, but its
/// [`IDENTITY_COLUMNS`]; archival `tags` are also normalised as inserts normalise them
/// (`rules.normalize_tags`). Returns whether a secret was redacted.
fn redact_row(row: &mut Map<String, Value>, rules: &ImportRules) -> bool {
    fn redact_value(value: &mut Value, rules: &ImportRules) -> bool {
        match value {
            // a column holding JSON (a fix's `receipt`) is redacted field by field: a rule run over the
            // compact JSON would swallow the fields after a secret
            Value::String(s) if s.starts_with('{') || s.starts_with('[') => match serde_json::from_str::<Value>(s) {
                Ok(mut inner) if inner.is_object() || inner.is_array() => {
                    let redacted = redact_value(&mut inner, rules);
                    if redacted {
                        *s = inner.to_string();
                    }
                    redacted
                }
                _ => redact_text(s, rules),
            },
            Value::String(s) => redact_text(s, rules),
            Value::Array(items) => items.iter_mut().fold(false, |any, v| redact_value(v, rules) | any),
            Value::Object(fields) => fields.values_mut().fold(false, |any, v| redact_value(v, rules) | any),
            _ => false,
        }
    }
    /// Whether redaction changed `s` (text redacted before, `password=[REDACTED:secret]`, matches a rule
    /// again and comes out the same).
    fn redact_text(s: &mut String, rules: &ImportRules) -> bool {
        match (rules.redact)(s) {
            std::borrow::Cow::Owned(clean) if clean != *s => {
                *s = clean;
                true
            }
            _ => false,
        }
    }
    let mut redacted = false;
    for (column, value) in row.iter_mut() {
        if !IDENTITY_COLUMNS.contains(&column.as_str()) {
            redacted |= redact_value(value, rules);
        }
    }
    if let Some(Value::Array(tags)) = row.get_mut("tags") {
        // null tags are dropped; a tag of another type is left for the table's schema to refuse
        let texts: Option<Vec<String>> =
            tags.iter().filter(|t| !t.is_null()).map(|t| t.as_str().map(str::to_string)).collect();
        if let Some(texts) = texts {
            *tags = (rules.normalize_tags)(&texts).into_iter().map(Value::String).collect();
        }
    }
    // a fix's error type filter key follows its (redacted) error type, so no secret stays in the key
    if let (Some(Value::String(error_type)), true) = (row.get("error_type"), row.contains_key("error_type_key")) {
        let key = super::fixes::error_type_key(error_type);
        row.insert("error_type_key".into(), Value::String(key));
    }
    redacted
}

/// `batch` with its `vector` column recomputed from `embedded_text`: every row's, or with `only` (one
/// flag per row) those flagged, the others keeping theirs.
async fn reembed_batch(
    batch: &RecordBatch,
    name: &'static str,
    embedder: &LazyEmbedder,
    only: Option<&[bool]>,
) -> Result<RecordBatch, StoreError> {
    let rows = Rows::new(batch, name);
    let texts = rows.strs("embedded_text")?;
    let wanted = |i: usize| only.is_none_or(|only| only[i]);
    let todo: Vec<String> = texts.into_iter().enumerate().filter(|(i, _)| wanted(*i)).map(|(_, t)| t).collect();
    let mut fresh: Vec<Vec<f32>> = Vec::with_capacity(todo.len());
    for chunk in todo.chunks(EMBED_BATCH) {
        fresh.extend(
            embedder
                .embed_documents(chunk.to_vec())
                .await
                .map_err(|e| StoreError::Backend(format!("re-embedding {name}: {e}")))?,
        );
    }
    let mut fresh = fresh.into_iter();
    let vectors: Vec<Vec<f32>> = match only {
        None => fresh.collect(),
        Some(_) => rows
            .vectors("vector")?
            .into_iter()
            .enumerate()
            .map(|(i, kept)| if wanted(i) { fresh.next().unwrap_or(kept) } else { kept })
            .collect(),
    };
    let column: ArrayRef = rows::vectors(vectors.iter().map(Vec::as_slice))?;
    let schema = batch.schema();
    let index = schema.index_of("vector").map_err(backend)?;
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    debug_assert_eq!(columns[index].len(), column.len());
    columns[index] = column;
    RecordBatch::try_new(schema, columns).map_err(backend)
}

#[async_trait::async_trait]
impl crate::store::ForgetStore for LanceStore {
    async fn forget(&self, actor_id: &str, id: uuid::Uuid) -> Result<Option<&'static str>, StoreError> {
        self.delete_row(actor_id, &id.to_string()).await
    }
}

/// What replaces a forgotten text in a distillation run's change list.
const FORGOTTEN: &str = "[forgotten]";

/// The filter columns of `name` that get a scalar index at scale, each with whether it is a bitmap
/// (few distinct values) or a B-tree: `actor_id` filters every search; `superseded_by IS NULL` every
/// archival search.
pub(super) fn scalar_index_columns(name: &str) -> &'static [(&'static str, bool)] {
    match name {
        super::ARCHIVAL_TABLE => &[("actor_id", true), ("superseded_by", false)],
        super::FIXES_TABLE | super::SESSION_ITEMS_TABLE => &[("actor_id", true)],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn previews_escape_control_characters() {
        assert_eq!(super::preview("a\u{1b}[31mred\u{0}", 100), "a\\u{1b}[31mred\\u{0}");
        assert_eq!(super::preview("one\ntwo   three", 100), "one two three");
    }
}
