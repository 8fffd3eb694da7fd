//! The LanceDB backend (design.md §4): one embedded directory holding the `fixes` table and a small
//! `meta` table with the store's format version and the embedding model's id and dimension. The only
//! module that imports lancedb or arrow.
//!
//! Guarantees: a write returns only after Lance committed it (a new manifest version on disk), so an
//! acknowledged write survives a crash. Appends and merge-inserts from several processes are
//! serialised by Lance's optimistic commit protocol; we retry on a commit conflict. Reads check for
//! other processes' commits at most [`READ_CONSISTENCY`] old.

mod fixes;

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use lancedb::query::ExecutableQuery;
use lancedb::{Connection, Table};

use super::StoreError;
use crate::embed::{DIMENSION, MODEL_ID};

pub use fixes::FIXES_TABLE;

/// Format version of the tables this binary writes (bumped on incompatible schema changes).
pub const FORMAT_VERSION: &str = "1";
/// How stale a read may be with respect to other processes' commits.
pub const READ_CONSISTENCY: Duration = Duration::from_millis(500);
const META_TABLE: &str = "meta";
/// Attempts for a write that meets a commit conflict or a concurrent table creation.
const WRITE_ATTEMPTS: usize = 8;

/// An open store: a LanceDB connection and its tables, created on first open.
#[derive(Clone)]
pub struct LanceStore {
    fixes: Table,
    fts_ready: Arc<tokio::sync::Mutex<bool>>,
}

impl LanceStore {
    /// Opens (creating when absent) the store at `path`, checking the `meta` table's format version and
    /// embedding model.
    ///
    /// # Errors
    /// [`StoreError::Open`] when the directory is unusable, [`StoreError::ModelMismatch`] /
    /// [`StoreError::FormatVersion`] when the store was built differently.
    pub async fn open(path: &str) -> Result<Self, StoreError> {
        let open_err = |e: &dyn std::fmt::Display| StoreError::Open { path: path.to_string(), message: e.to_string() };
        if !path.contains("://") {
            std::fs::create_dir_all(path).map_err(|e| open_err(&e))?;
        }
        let conn = lancedb::connect(path)
            .read_consistency_interval(READ_CONSISTENCY)
            .execute()
            .await
            .map_err(|e| open_err(&e))?;
        let meta = open_or_create(&conn, META_TABLE, meta_schema()).await.map_err(|e| open_err(&e))?;
        check_meta(path, &meta).await?;
        let fixes = open_or_create(&conn, FIXES_TABLE, fixes::schema()).await.map_err(|e| open_err(&e))?;
        let fts_ready = has_fts_index(&fixes).await.map_err(|e| open_err(&e))?;
        Ok(Self { fixes, fts_ready: Arc::new(tokio::sync::Mutex::new(fts_ready)) })
    }

    /// Is the full-text index there? Checks again while it is not, so a store opened before another
    /// process built the index starts using it.
    async fn fts_available(&self) -> bool {
        let mut ready = self.fts_ready.lock().await;
        if !*ready {
            *ready = has_fts_index(&self.fixes).await.unwrap_or(false);
        }
        *ready
    }

    /// Builds the full-text index on `embedded_text` once the table has rows (Lance cannot train an
    /// index on an empty table). Rows added later are searched unindexed (Lance scans them): nothing
    /// here compacts or re-indexes yet (design.md §4 "Upkeep" is still to be built).
    async fn ensure_fts(&self) -> Result<(), StoreError> {
        let mut ready = self.fts_ready.lock().await;
        if *ready {
            return Ok(());
        }
        if has_fts_index(&self.fixes).await.map_err(backend)? {
            *ready = true;
            return Ok(());
        }
        if self.fixes.count_rows(None).await.map_err(backend)? == 0 {
            return Ok(());
        }
        let result =
            self.fixes.create_index(&["embedded_text"], lancedb::index::Index::FTS(Default::default())).execute().await;
        match result {
            Ok(()) => *ready = true,
            // Another process may have built it at the same moment.
            Err(e) if has_fts_index(&self.fixes).await.unwrap_or(false) => {
                tracing::debug!("full-text index created concurrently: {e}");
                *ready = true;
            }
            Err(e) => return Err(backend(e)),
        }
        Ok(())
    }
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// Runs a query and collects its batches.
async fn collect(query: &impl ExecutableQuery) -> lancedb::Result<Vec<RecordBatch>> {
    query.execute().await?.try_collect().await
}

/// `'` doubled, for a string literal inside a Lance SQL filter.
fn sql_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

async fn has_fts_index(table: &Table) -> lancedb::Result<bool> {
    Ok(table
        .list_indices()
        .await?
        .iter()
        .any(|ix| ix.index_type == lancedb::index::IndexType::FTS && ix.columns.iter().any(|c| c == "embedded_text")))
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

fn meta_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Utf8, false)]))
}

/// Writes the meta rows into a new store, or checks an existing store's rows against this binary.
async fn check_meta(path: &str, meta: &Table) -> Result<(), StoreError> {
    let expected = [
        ("format_version", FORMAT_VERSION.to_string()),
        ("embedding_model", MODEL_ID.to_string()),
        ("embedding_dimension", DIMENSION.to_string()),
    ];
    let batches = collect(&meta.query()).await.map_err(backend)?;
    let mut found = std::collections::HashMap::new();
    for batch in &batches {
        let keys = fixes::column::<StringArray>(batch, "meta", "key")?;
        let values = fixes::column::<StringArray>(batch, "meta", "value")?;
        for i in 0..batch.num_rows() {
            found.insert(keys.value(i).to_string(), values.value(i).to_string());
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
    if model != MODEL_ID || dim != DIMENSION.to_string() {
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
