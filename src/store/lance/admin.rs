//! Operator views of the whole store (`astra-mcp memory list`, `show`, `stats`): rows listed newest first
//! with a one-line preview, one row in full, and the size and shape of every table. They read every
//! table generically through Arrow, so a new column needs no change here.

use arrow_array::RecordBatch;
use lancedb::query::{QueryBase, Select};
use serde_json::Value;

use super::handle::{LanceStore, StoreTable, backend, collect};
use super::rows::Rows;
use super::sql::{actor_filter, sql_literal};
use super::tables::TableId;
use super::transfer::batch_to_json;
use crate::embed::DIMENSION;
use crate::store::{ListedRow, StoreError, TableStats};

/// The text column shown for a row of `table`.
pub(super) fn main_text_column(table: TableId) -> &'static str {
    match table {
        TableId::Fixes => "fix_description",
        TableId::CoreBlocks => "value",
        _ => "text",
    }
}

/// The table of a memory tier as `memory list --table` names it: `fixes`, `archival`, `conversation`,
/// `core`, or the table's own name.
fn table_name(name: &str) -> Result<TableId, StoreError> {
    TableId::from_tier(name).filter(|t| TableId::MEMORY.contains(t)).ok_or_else(|| {
        StoreError::Invalid(format!("no memory tier `{name}`: choose fixes, archival, conversation or core"))
    })
}

/// One line of text, at most `max` characters (an ellipsis marks a cut). Control and bidirectional
/// characters are shown escaped (`\u{1b}`), so stored text cannot drive the operator's terminal.
pub fn preview(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let line = crate::domain::text::escape_controls(&line);
    if line.chars().count() <= max { line } else { format!("{}…", line.chars().take(max - 1).collect::<String>()) }
}

/// The rows of `batch` (of `table`, main text column `text`) one line each, with their creation time.
pub(super) fn listed_rows(
    batch: &RecordBatch,
    table: TableId,
    text: &'static str,
) -> Result<Vec<(chrono::DateTime<chrono::Utc>, ListedRow)>, StoreError> {
    let r = Rows::new(batch, table);
    let (ids, actors, projects, sessions, created, texts) = (
        r.strs("id")?,
        r.strs("actor_id")?,
        r.strs("project")?,
        r.strs("session_id")?,
        r.times("created_at")?,
        r.strs(text)?,
    );
    Ok((0..r.len())
        .map(|i| {
            let row = ListedRow {
                table: table.name(),
                id: ids[i].clone(),
                actor_id: actors[i].clone(),
                project: projects[i].clone(),
                session_id: sessions[i].clone(),
                created_at: created[i].to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                preview: preview(&texts[i], 100),
            };
            (created[i], row)
        })
        .collect())
}

/// [`LanceStore::list_rows`].
pub(super) async fn list_rows(
    store: &LanceStore,
    table: Option<&str>,
    actor: Option<&str>,
    limit: usize,
) -> Result<Vec<ListedRow>, StoreError> {
    let tables: Vec<TableId> = match table {
        Some(t) => vec![table_name(t)?],
        None => TableId::MEMORY.to_vec(),
    };
    let mut out = Vec::new();
    for name in tables {
        let text_col = main_text_column(name);
        let mut columns = vec!["id", "actor_id", "project", "session_id", "created_at", text_col];
        if name == TableId::CoreBlocks {
            columns.extend(["section", "version"]);
        }
        let mut query = StoreTable::new(store, name).table().query().select(Select::columns(columns.as_slice()));
        if let Some(f) = actor_filter(actor) {
            query = query.only_if(f);
        }
        let mut listed = Vec::new();
        for batch in collect(&query).await.map_err(backend)? {
            let mut rows = listed_rows(&batch, name, text_col)?;
            if name == TableId::CoreBlocks {
                // a version's id alone does not say which block it is
                let r = Rows::new(&batch, name);
                for ((_, row), (section, version)) in
                    rows.iter_mut().zip(r.strs("section")?.into_iter().zip(r.opt_ints("version")?))
                {
                    let version = version.map(|v| format!(" v{v}")).unwrap_or_default();
                    row.preview = format!("`{}`{version}: {}", preview(&section, 64), row.preview);
                }
            }
            listed.extend(rows);
        }
        listed.sort_by_key(|row| std::cmp::Reverse(row.0));
        out.extend(listed.into_iter().take(limit).map(|(_, row)| row));
    }
    Ok(out)
}

/// [`LanceStore::holds_project`].
pub(super) async fn holds_project(store: &LanceStore, actor: &str, project: &str) -> Result<bool, StoreError> {
    let filter = format!("actor_id = {} AND project = {}", sql_literal(actor), sql_literal(project));
    for name in TableId::MEMORY {
        let query = StoreTable::new(store, name)
            .table()
            .query()
            .only_if(filter.as_str())
            .select(Select::columns(&["id"]))
            .limit(1);
        if collect(&query).await.map_err(backend)?.iter().any(|batch| batch.num_rows() > 0) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// [`LanceStore::actor_counts`].
pub(super) async fn actor_counts(store: &LanceStore) -> Result<Vec<(String, usize)>, StoreError> {
    let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for name in TableId::MEMORY {
        let query = StoreTable::new(store, name).table().query().select(Select::columns(&["actor_id"]));
        for batch in collect(&query).await.map_err(backend)? {
            for actor in Rows::new(&batch, name).strs("actor_id")? {
                *counts.entry(actor).or_default() += 1;
            }
        }
    }
    let mut counts: Vec<(String, usize)> = counts.into_iter().collect();
    counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Ok(counts)
}

/// [`LanceStore::show_row`].
pub(super) async fn show_row(
    store: &LanceStore,
    id: &str,
    actor: Option<&str>,
) -> Result<Option<(&'static str, Value)>, StoreError> {
    let mut filter = format!("id = {}", sql_literal(id));
    if let Some(f) = actor_filter(actor) {
        filter = format!("{filter} AND {f}");
    }
    for name in TableId::MEMORY {
        for batch in StoreTable::new(store, name).select(&filter, Some(1)).await? {
            if let Some(mut row) = batch_to_json(&batch)?.into_iter().next() {
                if row.remove("vector").is_some() {
                    row.insert("vector".into(), Value::String(format!("[f32; {DIMENSION}]")));
                }
                return Ok(Some((name.name(), Value::Object(row))));
            }
        }
    }
    Ok(None)
}

/// [`LanceStore::stats`].
pub(super) async fn stats(store: &LanceStore) -> Result<Vec<TableStats>, StoreError> {
    let mut out = Vec::new();
    for name in TableId::ALL {
        let table = StoreTable::new(store, name).table();
        let s = table.stats().await.map_err(backend)?;
        out.push(TableStats {
            table: name.name(),
            rows: s.num_rows,
            deleted_rows: s.num_deleted_rows,
            bytes: s.total_bytes,
            fragments: s.fragment_stats.num_fragments,
            small_fragments: s.fragment_stats.num_small_fragments,
            indices: s.num_indices,
            vector_index_segments: StoreTable::new(store, name).vector_index_segments().await?.map(|(_, n)| n),
            versions: table.list_versions().await.map_err(backend)?.len(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn previews_escape_control_characters() {
        assert_eq!(super::preview("a\u{1b}[31mred\u{0}", 100), "a\\u{1b}[31mred\\u{0}");
        assert_eq!(super::preview("one\ntwo   three", 100), "one two three");
    }
}
