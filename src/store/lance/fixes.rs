//! The `fixes` table: its Arrow schema, the `FixRecord` <-> `RecordBatch` mapping, and [`FixStore`].
//!
//! The receipt is stored as a JSON string column (`receipt`): it is read back whole and never filtered on.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::types::Float32Type;
use arrow_array::{
    Array, BooleanArray, FixedSizeListArray, Float32Array, ListArray, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, SchemaRef, TimeUnit};
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lancedb::query::{QueryBase, Select};
use uuid::Uuid;

use super::commit::delete_where;
use super::handle::{LanceStore, StoreTable, backend, collect};
use super::sql::sql_literal;
use super::tables::TableId;
use crate::domain::{FixRecord, Receipt};
use crate::embed::DIMENSION;
use crate::store::{FixFilter, FixStore, StoreError};

fn timestamp_type() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// Arrow schema of `fixes`. `vector` is `FixedSizeList<Float32, 384>` (docs/storage.md).
pub(super) fn schema() -> SchemaRef {
    super::rows::schema_with_provenance(vec![
        Field::new("created_at", timestamp_type(), false),
        Field::new("updated_at", timestamp_type(), false),
        Field::new("fix_description", DataType::Utf8, false),
        Field::new("error_type", DataType::Utf8, false),
        // lower-cased, trimmed `error_type`: the exact, case-insensitive pre-filter
        Field::new("error_type_key", DataType::Utf8, false),
        Field::new("file_paths", DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))), false),
        Field::new("outcome", DataType::Utf8, false),
        Field::new("verified", DataType::Boolean, false),
        Field::new("receipt", DataType::Utf8, true),
        Field::new("embedded_text", DataType::Utf8, false),
        Field::new(
            "vector",
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), DIMENSION as i32),
            false,
        ),
    ])
}

/// The normalised key of an error type for the exact, case-insensitive filter.
pub fn error_type_key(error_type: &str) -> String {
    error_type.trim().to_lowercase()
}

fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

fn to_batch(fix: &FixRecord, vector: &[f32]) -> Result<RecordBatch, StoreError> {
    if vector.len() != DIMENSION {
        return Err(StoreError::Backend(format!("vector has {} floats, expected {DIMENSION}", vector.len())));
    }
    let receipt = fix
        .receipt
        .as_ref()
        .map(serde_json::to_string)
        .transpose()
        .map_err(|e| StoreError::Backend(format!("receipt: {e}")))?;
    let mut paths = ListBuilder::new(StringBuilder::new());
    for p in &fix.file_paths {
        paths.values().append_value(p);
    }
    paths.append(true);
    let vectors = FixedSizeListArray::from_iter_primitive::<Float32Type, _, _>(
        [Some(vector.iter().copied().map(Some).collect::<Vec<_>>())],
        DIMENSION as i32,
    );
    let s = |v: &str| Arc::new(StringArray::from(vec![v.to_string()])) as Arc<dyn Array>;
    let ts = |t| Arc::new(TimestampMicrosecondArray::from(vec![micros(t)]).with_timezone("UTC")) as Arc<dyn Array>;
    RecordBatch::try_new(
        schema(),
        vec![
            s(&fix.memory_id.to_string()),
            s(&fix.actor_id),
            s(&fix.project),
            s(&fix.session_id),
            ts(fix.created_at),
            ts(fix.updated_at),
            s(&fix.fix_description),
            s(&fix.error_type),
            s(&error_type_key(&fix.error_type)),
            Arc::new(paths.finish()),
            s(&fix.outcome),
            Arc::new(BooleanArray::from(vec![fix.verified])),
            Arc::new(StringArray::from(vec![receipt])),
            s(&fix.embedded_text),
            Arc::new(vectors),
        ],
    )
    .map_err(backend)
}

/// A column of `batch` by name, downcast to `T`.
pub(super) fn column<'a, T: 'static>(
    batch: &'a RecordBatch,
    table: &'static str,
    name: &'static str,
) -> Result<&'a T, StoreError> {
    batch.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<T>()).ok_or_else(|| StoreError::Corrupt {
        table,
        column: name,
        message: "missing or of the wrong type".into(),
    })
}

fn from_micros(us: i64, column: &'static str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::from_timestamp_micros(us).ok_or_else(|| StoreError::Corrupt {
        table: TableId::Fixes.name(),
        column,
        message: format!("timestamp {us} out of range"),
    })
}

/// Every column of the `fixes` table but `vector`: what a [`FixRecord`] holds.
fn record_columns() -> Vec<String> {
    schema().fields().iter().map(|f| f.name().clone()).filter(|name| name != "vector").collect()
}

/// Decodes every row of `batch`, with each row's stored vector (empty when `batch` was read without
/// its `vector` column: [`record_columns`]).
fn from_batch(batch: &RecordBatch) -> Result<Vec<(FixRecord, Vec<f32>)>, StoreError> {
    let t = TableId::Fixes.name();
    let id = column::<StringArray>(batch, t, "id")?;
    let actor = column::<StringArray>(batch, t, "actor_id")?;
    let project = column::<StringArray>(batch, t, "project")?;
    let session = column::<StringArray>(batch, t, "session_id")?;
    let created = column::<TimestampMicrosecondArray>(batch, t, "created_at")?;
    let updated = column::<TimestampMicrosecondArray>(batch, t, "updated_at")?;
    let fix = column::<StringArray>(batch, t, "fix_description")?;
    let error_type = column::<StringArray>(batch, t, "error_type")?;
    let paths = column::<ListArray>(batch, t, "file_paths")?;
    let outcome = column::<StringArray>(batch, t, "outcome")?;
    let verified = column::<BooleanArray>(batch, t, "verified")?;
    let receipt = column::<StringArray>(batch, t, "receipt")?;
    let text = column::<StringArray>(batch, t, "embedded_text")?;
    let vectors = match batch.column_by_name("vector") {
        Some(_) => Some(column::<FixedSizeListArray>(batch, t, "vector")?),
        None => None,
    };
    let mut out = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let memory_id = Uuid::parse_str(id.value(i)).map_err(|e| StoreError::Corrupt {
            table: t,
            column: "id",
            message: e.to_string(),
        })?;
        let path_values = paths.value(i);
        let path_values = path_values.as_any().downcast_ref::<StringArray>().ok_or_else(|| StoreError::Corrupt {
            table: t,
            column: "file_paths",
            message: "not strings".into(),
        })?;
        let receipt = if receipt.is_null(i) {
            None
        } else {
            Some(serde_json::from_str::<Receipt>(receipt.value(i)).map_err(|e| StoreError::Corrupt {
                table: t,
                column: "receipt",
                message: e.to_string(),
            })?)
        };
        let vector = match vectors {
            Some(vectors) => vectors
                .value(i)
                .as_any()
                .downcast_ref::<Float32Array>()
                .ok_or_else(|| StoreError::Corrupt { table: t, column: "vector", message: "not f32".into() })?
                .values()
                .to_vec(),
            None => Vec::new(),
        };
        out.push((
            FixRecord {
                memory_id,
                actor_id: actor.value(i).to_string(),
                project: project.value(i).to_string(),
                session_id: session.value(i).to_string(),
                created_at: from_micros(created.value(i), "created_at")?,
                updated_at: from_micros(updated.value(i), "updated_at")?,
                fix_description: fix.value(i).to_string(),
                error_type: error_type.value(i).to_string(),
                file_paths: (0..path_values.len()).map(|j| path_values.value(j).to_string()).collect(),
                outcome: outcome.value(i).to_string(),
                verified: verified.value(i),
                receipt,
                embedded_text: text.value(i).to_string(),
            },
            vector,
        ));
    }
    Ok(out)
}

impl super::search::TableRow for FixRecord {
    const TABLE: TableId = TableId::Fixes;
    fn actor_id(&self) -> &str {
        &self.actor_id
    }
    fn decode(batch: &RecordBatch) -> Result<Vec<(Self, Vec<f32>)>, StoreError> {
        from_batch(batch)
    }
    fn filter(filter: &FixFilter) -> super::sql::Filter {
        fix_filter(filter)
    }
}

/// The filter of a search: the actor's fixes, of the error type when given.
fn fix_filter(query: &FixFilter) -> super::sql::Filter {
    let mut sql = format!("actor_id = {}", sql_literal(&query.actor_id));
    if let Some(error_type) = &query.error_type {
        sql.push_str(&format!(" AND error_type_key = {}", sql_literal(&error_type_key(error_type))));
    }
    let broad =
        query.error_type.is_none().then(|| super::sql::Broad { actor_id: query.actor_id.clone(), current_only: false });
    super::sql::Filter { sql, broad }
}

fn id_filter(actor_id: &str, memory_id: Uuid) -> String {
    format!("actor_id = {} AND id = {}", sql_literal(actor_id), sql_literal(&memory_id.to_string()))
}

#[async_trait]
impl FixStore for LanceStore {
    async fn upsert_fix(&self, fix: &FixRecord, vector: &[f32]) -> Result<bool, StoreError> {
        // with the other fixes stored in this process meanwhile, in one commit (`group`): on a bucket
        // a commit is several round trips, and a commit per fix made every writer wait for all others
        let created = StoreTable::new(self, TableId::Fixes).upsert_grouped(to_batch(fix, vector)?).await?;
        Ok(!created.is_empty())
    }

    async fn recent_fixes(&self, actor_id: &str, project: &str, limit: usize) -> Result<Vec<FixRecord>, StoreError> {
        // a project's fixes are few (one per passing fix); sorted here, Lance scans have no ORDER BY
        let filter =
            format!("actor_id = {} AND project = {} AND verified = true", sql_literal(actor_id), sql_literal(project));
        // the records without their vectors (1.5 KiB each): renewal and the browser's list need none
        let query = StoreTable::new(self, TableId::Fixes)
            .table()
            .query()
            .only_if(filter)
            .select(Select::columns(&record_columns()));
        let batches = collect(&query).await.map_err(backend)?;
        let mut fixes: Vec<FixRecord> =
            batches.iter().map(from_batch).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().map(|r| r.0).collect();
        let confirmed = |f: &FixRecord| f.receipt.as_ref().map_or(f.created_at, |r| r.finished_at);
        fixes.sort_by(|a, b| confirmed(b).cmp(&confirmed(a)).then_with(|| a.memory_id.cmp(&b.memory_id)));
        fixes.truncate(limit);
        Ok(fixes)
    }

    async fn renew_fixes(&self, actor_id: &str, renewed: &[FixRecord]) -> Result<u64, StoreError> {
        if renewed.is_empty() {
            return Ok(0);
        }
        let ids: Vec<String> = renewed.iter().map(|f| sql_literal(&f.memory_id.to_string())).collect();
        let filter = format!("actor_id = {} AND id IN ({})", sql_literal(actor_id), ids.join(", "));
        let _lock = super::commit::TableLock::acquire(&self.location, TableId::Fixes.name()).await?;
        let stored = StoreTable::new(self, TableId::Fixes).select(&filter, None).await?;
        let mut batches = Vec::with_capacity(renewed.len());
        for (row, vector) in stored.iter().map(from_batch).collect::<Result<Vec<_>, _>>()?.into_iter().flatten() {
            // only the receipt changes, and only on the row as the caller read it (not re-stored since)
            if let Some(new) = renewed.iter().find(|f| f.memory_id == row.memory_id && f.updated_at == row.updated_at) {
                batches.push(to_batch(&FixRecord { receipt: new.receipt.clone(), ..row }, &vector)?);
            }
        }
        if batches.is_empty() {
            return Ok(0);
        }
        let batch = arrow_select::concat::concat_batches(&schema(), &batches).map_err(backend)?;
        // a row stored again while this ran keeps what that store wrote (timestamps compared as
        // microseconds: see `archival`'s tag merge)
        let unchanged = "CAST(target.updated_at AS BIGINT) = CAST(source.updated_at AS BIGINT)";
        StoreTable::new(self, TableId::Fixes).update_if(batch, unchanged).await
    }

    async fn get_fix(&self, actor_id: &str, memory_id: Uuid) -> Result<Option<FixRecord>, StoreError> {
        let lookup =
            StoreTable::new(self, TableId::Fixes).table().query().only_if(id_filter(actor_id, memory_id)).limit(1);
        let batches = collect(&lookup).await.map_err(backend)?;
        Ok(batches.iter().map(from_batch).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().next().map(|(r, _)| r))
    }

    async fn delete_fix(&self, actor_id: &str, memory_id: Uuid) -> Result<bool, StoreError> {
        let filter = id_filter(actor_id, memory_id);
        let _lock = super::commit::TableLock::acquire(&self.location, TableId::Fixes.name()).await?;
        Ok(delete_where(StoreTable::new(self, TableId::Fixes).table(), &filter).await? > 0)
    }
}
