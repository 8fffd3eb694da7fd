//! Moving a store's rows out and back in: the JSONL export (a header saying which export version, store
//! format and embedding model wrote it, then every row with its ids, times and vector), the import
//! (every row checked before any is written; secrets redacted and tags normalised by the caller's
//! [`ImportRules`]; vectors recomputed when the export's model differs), and re-embedding every row
//! after a model change (`memory reindex`). Rows travel through Arrow's JSON reader and writer, so a new
//! column needs no change here.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow_schema::SchemaRef;
use lancedb::query::{QueryBase, Select};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::commit::{delete_where, retry};
use super::handle::{LanceStore, StoreTable, backend, collect};
use super::rows::{self, Rows};
use super::sql::{actor_filter, in_list, sql_literal};
use super::tables::{META_TABLE, TableId};
use crate::embed::{DIMENSION, LazyEmbedder, MODEL_ID};
use crate::store::{ImportRules, StoreError};

/// Rows embedded per batch by `import` and `reindex`.
const EMBED_BATCH: usize = 64;

/// The version of the export format `export` writes and `import` reads (`astra_mcp_export` in the header):
/// 2 added the `distill_runs` rows, 3 the `uses` rows; version 1 and 2 files import as they are, their
/// fixes and passages listed in [`ImportReport::without_uses`].
pub const EXPORT_VERSION: u32 = 3;

/// The first export version that carries the `uses` rows.
const EXPORT_WITH_USES: u32 = 3;

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
/// [`StoreError::Invalid`] when the file is empty, its first line is not a header, or it was written in
/// a newer export version or store format than this build reads.
pub fn read_export_header(text: &str) -> Result<ExportHeader, StoreError> {
    match text.lines().enumerate().find(|(_, l)| !l.trim().is_empty()) {
        Some((i, line)) => parse_export_header(i + 1, line),
        None => {
            Err(StoreError::Invalid("the export is empty: give a file written by `astra-mcp memory export`".into()))
        }
    }
}

/// Line `number` of an export (after its header) as a row: the table it belongs to and its columns.
///
/// # Errors
/// [`StoreError::Invalid`] naming the line (and the column) when it is no `{"table", "row"}` object, or
/// names no table an export holds.
pub fn parse_export_row(number: usize, line: &str) -> Result<(TableId, Map<String, Value>), StoreError> {
    #[derive(Deserialize)]
    struct Line {
        table: String,
        row: Map<String, Value>,
    }
    let parsed: Line = serde_json::from_str(line).map_err(|e| {
        // serde_json counts the line as its line 1: only the column says where
        let at = format!(" at line {} column {}", e.line(), e.column());
        let what = e.to_string();
        StoreError::Invalid(format!(
            "line {number}: not an export row ({} at column {}); give one `{{\"table\", \"row\"}}` object per line, as \
             `memory export` writes them",
            what.strip_suffix(&at).unwrap_or(&what),
            e.column()
        ))
    })?;
    let name = export_table_name(&parsed.table).map_err(|e| match e {
        StoreError::Invalid(why) => StoreError::Invalid(format!("line {number}: {why}")),
        other => other,
    })?;
    Ok((name, parsed.row))
}

/// Line `number` of an export as its header: newer export versions and store formats are refused (this
/// build cannot know what they changed); older ones are read.
fn parse_export_header(number: usize, line: &str) -> Result<ExportHeader, StoreError> {
    let header: ExportHeader = serde_json::from_str(line).map_err(|e| {
        StoreError::Invalid(format!(
            "line {number} is not an astra-mcp export header ({e}); give a file written by `astra-mcp memory export`"
        ))
    })?;
    let ours: u32 = super::handle::FORMAT_VERSION.parse().expect("FORMAT_VERSION is a number");
    let newer_format = header.format_version.parse::<u32>().map_or(true, |theirs| theirs > ours);
    if header.astra_mcp_export == 0 {
        return Err(StoreError::Invalid(format!(
            "line {number}: export version 0 does not exist (`astra_mcp_export` counts from 1); nothing was imported: \
give a file written by `astra-mcp memory export`"
        )));
    }
    if header.astra_mcp_export > EXPORT_VERSION || newer_format {
        return Err(StoreError::Invalid(format!(
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
    /// Conversation items of the export that were forgotten in this store (or in the export's) since:
    /// not imported, and not counted in `rows`.
    pub stayed_forgotten: usize,
    /// `(actor, id)` of each fix and passage imported from an export older than version 3, which could
    /// carry no uses: without a use from now, expiry would count from when it was first written elsewhere.
    pub without_uses: Vec<(String, uuid::Uuid)>,
}

/// What an export holds: every memory table, then the ids of forgotten conversation items (so an import
/// keeps them forgotten), then the distill runs (so `distill` in the new place reads only the items no
/// run has read, and `distill status` keeps the history: export version 2), then the uses of memories
/// (so what was used, and when, moves along; an export without them imports as before).
const EXPORT_TABLES: [TableId; 7] = TableId::ALL;

fn export_table_name(name: &str) -> Result<TableId, StoreError> {
    TableId::from_name(name).filter(|t| EXPORT_TABLES.contains(t)).ok_or_else(|| {
        let names: Vec<&str> = EXPORT_TABLES.iter().map(|t| t.name()).collect();
        StoreError::Invalid(format!("no table `{name}`: an export holds {}", names.join(", ")))
    })
}

/// Rows of a batch as JSON objects (timestamps as RFC 3339 strings, vectors as arrays).
pub(super) fn batch_to_json(batch: &RecordBatch) -> Result<Vec<Map<String, Value>>, StoreError> {
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
    name: TableId,
    chunk: &[Map<String, Value>],
    lines: &[usize],
) -> Option<StoreError> {
    chunk.iter().zip(lines).find_map(|(row, line)| {
        json_to_batch(schema.clone(), std::slice::from_ref(row)).err().map(|e| {
            StoreError::Invalid(format!(
                "line {line}: the {name} row does not fit the table ({e}); nothing was imported. Give rows as \
                 `astra-mcp memory export` writes them"
            ))
        })
    })
}

/// Fails when two rows of `rows_in` (of table `name`, from lines `lines`) share an `id`: an export never
/// holds the same row twice, and both would be written.
fn refuse_duplicate_ids(name: TableId, rows_in: &[Map<String, Value>], lines: &[usize]) -> Result<(), StoreError> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (row, line) in rows_in.iter().zip(lines) {
        let Some(id) = row.get("id").and_then(Value::as_str) else { continue };
        if let Some(first) = seen.insert(id, *line) {
            return Err(StoreError::Invalid(format!(
                "lines {first} and {line} both hold {name} row {id}; nothing was imported. Keep one of them"
            )));
        }
    }
    Ok(())
}

impl StoreTable<'_> {
    /// Fails when a row of `rows_in` (import rows of this table of `schema`, from lines `lines`) has the `id` of a
    /// row this store keeps for another actor: an upsert by id would hand that actor's memory to the
    /// export's actor. Tables without `id` and `actor_id` columns are not checked.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] naming the first such line, the id and both actors; a failed read.
    async fn refuse_actor_changes(
        self,
        schema: &SchemaRef,
        rows_in: &[Map<String, Value>],
        lines: &[usize],
    ) -> Result<(), StoreError> {
        if schema.column_with_name("id").is_none() || schema.column_with_name("actor_id").is_none() {
            return Ok(());
        }
        let str_of =
            |row: &Map<String, Value>, column: &str| row.get(column).and_then(Value::as_str).map(str::to_string);
        let stored = self.stored_by_id(rows_in, "actor_id").await?;
        for (row, line) in rows_in.iter().zip(lines) {
            let (Some(id), Some(actor)) = (str_of(row, "id"), str_of(row, "actor_id")) else { continue };
            if let Some(owner) = stored.get(&id).filter(|owner| **owner != actor) {
                return Err(StoreError::Invalid(format!(
                    "line {line}: {} row {id} belongs to actor `{owner}` in this store, but the export gives it to \
                     `{actor}`; nothing was imported. An import never moves a memory between actors: drop that line \
                     from the file, or delete the stored row first (`astra-mcp memory rm {id} --actor {owner}`)",
                    self.id
                )));
            }
        }
        Ok(())
    }

    /// `column` of the rows of this table stored under the ids of `rows_in` (import rows), by id.
    async fn stored_by_id(
        self,
        rows_in: &[Map<String, Value>],
        column: &'static str,
    ) -> Result<HashMap<String, String>, StoreError> {
        let table = self.table();
        let mut stored = HashMap::new();
        for chunk in rows_in.chunks(500) {
            let ids = chunk.iter().filter_map(|row| row.get("id").and_then(Value::as_str));
            let query = table.query().only_if(in_list("id", ids)).select(Select::columns(&["id", column]));
            for batch in collect(&query).await.map_err(backend)? {
                let rows = Rows::new(&batch, self.id);
                stored.extend(rows.strs("id")?.into_iter().zip(rows.strs(column)?));
            }
        }
        Ok(stored)
    }
}

/// [`LanceStore::export`].
pub(super) async fn export(
    store: &LanceStore,
    out: &mut (dyn Write + Send),
    actor: Option<&str>,
) -> Result<TableCounts, StoreError> {
    let header = ExportHeader {
        astra_mcp_export: EXPORT_VERSION,
        format_version: super::handle::FORMAT_VERSION.to_string(),
        embedding_model: MODEL_ID.to_string(),
        embedding_dimension: DIMENSION,
        exported_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    let io = |e: std::io::Error| StoreError::Backend(format!("writing the export: {e}"));
    writeln!(out, "{}", serde_json::to_string(&header).map_err(backend)?).map_err(io)?;
    let mut counts = TableCounts::new();
    for name in EXPORT_TABLES {
        let mut query = StoreTable::new(store, name).table().query();
        if let Some(f) = actor_filter(actor) {
            query = query.only_if(f);
        }
        let mut n = 0;
        for batch in collect(&query).await.map_err(backend)? {
            for row in batch_to_json(&batch)? {
                let line = serde_json::json!({ "table": name.name(), "row": row });
                writeln!(out, "{line}").map_err(io)?;
                n += 1;
            }
        }
        counts.insert(name.to_string(), n);
    }
    Ok(counts)
}

/// [`LanceStore::import`].
pub(super) async fn import(
    store: &LanceStore,
    text: &str,
    embedder: &LazyEmbedder,
    rules: &ImportRules,
) -> Result<ImportReport, StoreError> {
    let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    let header = match lines.next() {
        Some((i, line)) => parse_export_header(i + 1, line)?,
        None => return Err(StoreError::Invalid("the export is empty".into())),
    };
    let reembed = header.embedding_model != MODEL_ID || header.embedding_dimension != DIMENSION;
    let mut by_table: BTreeMap<TableId, Vec<Map<String, Value>>> = BTreeMap::new();
    let mut line_numbers: BTreeMap<TableId, Vec<usize>> = BTreeMap::new();
    // per row: its vector must be recomputed, since redaction changed its embedded text
    let mut stale_vectors: BTreeMap<TableId, Vec<bool>> = BTreeMap::new();
    let mut report = ImportReport::default();
    for (i, line) in lines {
        let (name, mut row) = parse_export_row(i + 1, line)?;
        if TableId::SEARCHABLE.contains(&name) || name == TableId::Forgotten {
            // ids are compared as strings: only the canonical spelling may enter
            let id = row.get("id").and_then(Value::as_str).and_then(|id| uuid::Uuid::parse_str(id).ok());
            let Some(id) = id else {
                return Err(StoreError::Invalid(format!(
                    "line {}: a {name} row needs a UUID `id` (as `memory export` writes it)",
                    i + 1
                )));
            };
            row.insert("id".into(), Value::String(id.to_string()));
        } else if let Some(id) = row.get("id").and_then(Value::as_str).and_then(|id| uuid::Uuid::parse_str(id).ok()) {
            row.insert("id".into(), Value::String(id.to_string()));
        }
        let embedded_before = row.get("embedded_text").cloned();
        if name == TableId::Archival {
            // a passage is embedded as its text: a text edited by hand takes its embedding along
            if let Some(text) = row.get("text").cloned() {
                row.insert("embedded_text".into(), text);
            }
        }
        // secrets are redacted before anything is stored (docs/storage.md), in a hand-edited file too
        let redacted = redact_row(&mut row, rules);
        // a row whose embedded text changed, or whose vector was left out, is embedded again
        let no_vector = TableId::SEARCHABLE.contains(&name) && !row.contains_key("vector");
        let stale_vector = no_vector || row.get("embedded_text") != embedded_before.as_ref();
        if (reembed || stale_vector) && (row.contains_key("vector") || no_vector) {
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
    let mut decoded: Vec<(TableId, usize, RecordBatch, &[bool])> = Vec::new();
    for (name, rows_in) in &by_table {
        let lines = &line_numbers[name];
        let schema = StoreTable::new(store, *name).table().schema().await.map_err(backend)?;
        refuse_duplicate_ids(*name, rows_in, lines)?;
        StoreTable::new(store, *name).refuse_actor_changes(&schema, rows_in, lines).await?;
        if *name == TableId::CoreBlocks {
            refuse_core_history_changes(store, rows_in, lines).await?;
        }
        let stale = rows_in.chunks(1000).zip(stale_vectors[name].chunks(1000));
        for ((chunk, stale), chunk_lines) in stale.zip(lines.chunks(1000)) {
            match json_to_batch(schema.clone(), chunk) {
                Ok(Some(batch)) => decoded.push((*name, chunk.len(), batch, stale)),
                Ok(None) => {}
                Err(e) => return Err(first_unfit_row(&schema, *name, chunk, chunk_lines).unwrap_or(e)),
            }
        }
    }
    for (name, n, mut batch, stale) in decoded {
        if reembed && TableId::SEARCHABLE.contains(&name) {
            batch = reembed_batch(&batch, name, embedder, None).await?;
            report.reembedded = true;
        } else if stale.contains(&true) {
            batch = reembed_batch(&batch, name, embedder, Some(stale)).await?;
        }
        StoreTable::new(store, name).upsert_batch(batch).await?;
        *report.rows.entry(name.to_string()).or_default() += n;
    }
    // a passage or fix of an export that could carry no uses: the caller may count it as used now
    if header.astra_mcp_export < EXPORT_WITH_USES {
        for name in [TableId::Fixes, TableId::Archival] {
            for row in by_table.get(&name).into_iter().flatten() {
                let text = |column: &str| row.get(column).and_then(Value::as_str);
                if let (Some(id), Some(actor)) =
                    (text("id").and_then(|id| uuid::Uuid::parse_str(id).ok()), text("actor_id"))
                {
                    report.without_uses.push((actor.to_string(), id));
                }
            }
        }
    }
    // an item forgotten after an older export was made stays forgotten (only its own actor's item)
    let mut forgotten: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for batch in collect(&StoreTable::new(store, TableId::Forgotten).table().query()).await.map_err(backend)? {
        let rows = Rows::new(&batch, TableId::Forgotten);
        for (id, actor) in rows.strs("id")?.into_iter().zip(rows.strs("actor_id")?) {
            forgotten.entry(actor).or_default().push(id);
        }
    }
    // and its words leave the context (`search_text`) of the items after it once more, which the
    // export's rows of those items still hold (as `forget_item` did when it was forgotten)
    let table = StoreTable::new(store, TableId::Conversation).table();
    for (actor, ids) in &forgotten {
        for chunk in ids.chunks(500) {
            let ids = in_list("id", chunk.iter().map(String::as_str));
            let filter = format!("actor_id = {} AND {ids}", sql_literal(actor));
            let mut revived = Vec::new();
            for batch in StoreTable::new(store, TableId::Conversation).select(&filter, None).await? {
                revived.extend(super::conversation::from_batch(&batch)?);
            }
            if revived.is_empty() {
                continue;
            }
            delete_where(table, &filter).await?;
            for (item, _) in &revived {
                super::conversation::forget_item(store, item).await?;
            }
            report.stayed_forgotten += revived.len();
            if let Some(n) = report.rows.get_mut(TableId::Conversation.name()) {
                *n = n.saturating_sub(revived.len());
            }
        }
    }
    Ok(report)
}

/// Fails when a `core_blocks` row of `rows_in` (from lines `lines`) would change a block's history: its
/// `id` is not its version's key ([`super::core_blocks::version_key_id`] of actor, project, section and
/// version), so that one block could get two rows of one version, or this store holds that version
/// with another value (two histories of one block, from two stores, cannot be merged row by row).
///
/// # Errors
/// [`StoreError::Invalid`] naming the first such line and what to do; a failed read.
async fn refuse_core_history_changes(
    store: &LanceStore,
    rows_in: &[Map<String, Value>],
    lines: &[usize],
) -> Result<(), StoreError> {
    let str_of = |row: &Map<String, Value>, column: &str| {
        row.get(column).and_then(Value::as_str).unwrap_or_default().to_string()
    };
    for (row, line) in rows_in.iter().zip(lines) {
        let (actor, project, section) = (str_of(row, "actor_id"), str_of(row, "project"), str_of(row, "section"));
        let version = row.get("version").and_then(Value::as_i64).unwrap_or_default();
        let key = super::core_blocks::version_key_id(&actor, &project, &section, version);
        if str_of(row, "id") != key {
            return Err(StoreError::Invalid(format!(
                "line {line}: core_blocks row {} is not version {version} of block `{section}` (its id would be \
                 {key}); nothing was imported. A block version's id is derived from its actor, project, section \
                 and version: keep the ids `memory export` wrote",
                str_of(row, "id")
            )));
        }
    }
    let stored = StoreTable::new(store, TableId::CoreBlocks).stored_by_id(rows_in, "value").await?;
    for (row, line) in rows_in.iter().zip(lines) {
        if stored.get(&str_of(row, "id")).is_some_and(|value| *value != str_of(row, "value")) {
            return Err(StoreError::Invalid(format!(
                "line {line}: this store already holds version {} of core block `{}` (actor `{}`, project `{}`) \
                 with another value; nothing was imported. An import does not rewrite a block's history: drop \
                 that block's core_blocks lines from the file (this store keeps its own history of the block)",
                row.get("version").and_then(Value::as_i64).unwrap_or_default(),
                str_of(row, "section"),
                str_of(row, "actor_id"),
                str_of(row, "project"),
            )));
        }
    }
    Ok(())
}

/// [`LanceStore::reindex`].
pub(super) async fn reindex(store: &LanceStore, embedder: &LazyEmbedder) -> Result<TableCounts, StoreError> {
    let mut counts = TableCounts::new();
    for name in TableId::SEARCHABLE {
        let batches = collect(&StoreTable::new(store, name).table().query()).await.map_err(backend)?;
        let mut n = 0;
        for batch in batches {
            for start in (0..batch.num_rows()).step_by(1000) {
                let part = batch.slice(start, (batch.num_rows() - start).min(1000));
                n += part.num_rows();
                let part = reembed_batch(&part, name, embedder, None).await?;
                // update only: a row deleted while we re-embedded stays deleted
                StoreTable::new(store, name).update_batch(part).await?;
            }
        }
        counts.insert(name.to_string(), n);
    }
    write_meta_model(store).await?;
    Ok(counts)
}

async fn write_meta_model(store: &LanceStore) -> Result<(), StoreError> {
    let meta = store.conn.open_table(META_TABLE).execute().await.map_err(backend)?;
    let schema = super::open::meta_schema();
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            rows::strings(["embedding_model", "embedding_dimension"]),
            Arc::new(StringArray::from(vec![MODEL_ID.to_string(), DIMENSION.to_string()])),
        ],
    )
    .map_err(backend)?;
    retry(&meta, || {
        let mut merge = meta.merge_insert(&["key"]);
        merge.when_matched_update_all(None).when_not_matched_insert_all();
        let reader = arrow_array::RecordBatchIterator::new(vec![Ok(batch.clone())], schema.clone());
        async move { merge.execute(Box::new(reader)).await }
    })
    .await
    .map_err(backend)?;
    Ok(())
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

/// `batch` with its `vector` column recomputed from `embedded_text` (a conversation item's without UUIDs:
/// [`crate::domain::conversation_vector_text`]): every row's, or with `only` (one flag per row) those
/// flagged, the others keeping theirs.
async fn reembed_batch(
    batch: &RecordBatch,
    name: TableId,
    embedder: &LazyEmbedder,
    only: Option<&[bool]>,
) -> Result<RecordBatch, StoreError> {
    let rows = Rows::new(batch, name);
    let texts = rows.strs("embedded_text")?;
    let wanted = |i: usize| only.is_none_or(|only| only[i]);
    let vector_text = |t: String| {
        if name == TableId::Conversation { crate::domain::conversation_vector_text(&t).into_owned() } else { t }
    };
    let todo: Vec<String> =
        texts.into_iter().enumerate().filter(|(i, _)| wanted(*i)).map(|(_, t)| vector_text(t)).collect();
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
