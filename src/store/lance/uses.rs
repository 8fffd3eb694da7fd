//! The `uses` table: one row per use of a memory (returned by a search, injected by a hook) and per
//! credit of one (a session that had it then saw its tests pass). Append-only, ids and times only: what
//! a memory says stays in its own table.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use uuid::Uuid;

use super::handle::{LanceStore, StoreTable, backend};
use super::rows::{self, Rows};
use super::sql::{in_list, sql_literal};
use super::tables::TableId;
use crate::domain::{MemoryUse, UseEvent};
use crate::store::{StoreError, UseStore};

/// Arrow schema of `uses`.
pub(super) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        rows::key_field("id"),
        Field::new("memory_id", DataType::Utf8, false),
        Field::new("actor_id", DataType::Utf8, false),
        Field::new("session_id", DataType::Utf8, false),
        Field::new("event", DataType::Utf8, false),
        Field::new("at", rows::timestamp_type(), false),
    ]))
}

fn to_batch(uses: &[MemoryUse]) -> Result<RecordBatch, StoreError> {
    let ids: Vec<String> = uses.iter().map(|u| u.id.to_string()).collect();
    let memory_ids: Vec<String> = uses.iter().map(|u| u.memory_id.to_string()).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            rows::strings(ids.iter().map(String::as_str)),
            rows::strings(memory_ids.iter().map(String::as_str)),
            rows::strings(uses.iter().map(|u| u.actor_id.as_str())),
            rows::strings(uses.iter().map(|u| u.session_id.as_str())),
            rows::strings(uses.iter().map(|u| u.event.as_str())),
            rows::times(uses.iter().map(|u| u.at)),
        ],
    )
    .map_err(backend)
}

fn from_batch(batch: &RecordBatch) -> Result<Vec<MemoryUse>, StoreError> {
    let r = Rows::new(batch, TableId::Uses);
    let (ids, memory_ids, actors, sessions, events, at) = (
        r.uuids("id")?,
        r.uuids("memory_id")?,
        r.strs("actor_id")?,
        r.strs("session_id")?,
        r.strs("event")?,
        r.times("at")?,
    );
    let mut uses = Vec::with_capacity(ids.len());
    for (i, event) in events.iter().enumerate() {
        let event = UseEvent::parse(event).ok_or_else(|| StoreError::Corrupt {
            table: TableId::Uses.name(),
            column: "event",
            message: format!("unknown use `{event}`"),
        })?;
        uses.push(MemoryUse {
            id: ids[i],
            memory_id: memory_ids[i],
            actor_id: actors[i].clone(),
            session_id: sessions[i].clone(),
            event,
            at: at[i],
        });
    }
    Ok(uses)
}

/// The uses matching the SQL `filter`.
async fn select(store: &LanceStore, filter: &str) -> Result<Vec<MemoryUse>, StoreError> {
    let batches = StoreTable::new(store, TableId::Uses).select(filter, None).await?;
    Ok(batches.iter().map(from_batch).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().collect())
}

#[async_trait]
impl UseStore for LanceStore {
    async fn record_uses(&self, uses: &[MemoryUse]) -> Result<(), StoreError> {
        if uses.is_empty() {
            return Ok(());
        }
        StoreTable::new(self, TableId::Uses).insert_new(to_batch(uses)?).await.map(drop)
    }

    async fn uses_of(&self, actor_id: &str, ids: &[Uuid]) -> Result<Vec<MemoryUse>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        let filter = format!(
            "actor_id = {} AND {}",
            sql_literal(actor_id),
            in_list("memory_id", ids.iter().map(String::as_str))
        );
        select(self, &filter).await
    }

    async fn actor_uses(&self, actor_id: &str) -> Result<Vec<MemoryUse>, StoreError> {
        select(self, &format!("actor_id = {}", sql_literal(actor_id))).await
    }

    async fn session_uses(&self, actor_id: &str, session_id: &str) -> Result<Vec<MemoryUse>, StoreError> {
        select(self, &format!("actor_id = {} AND session_id = {}", sql_literal(actor_id), sql_literal(session_id)))
            .await
    }
}
