//! The conversation table: every stored conversation item (MemGPT recall storage). On disk it is named
//! `session_items` (each item belongs to one session of an agent), as stores written by earlier
//! versions name it.

use std::collections::HashSet;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, SchemaRef};
use async_trait::async_trait;
use uuid::Uuid;

use super::handle::{LanceStore, StoreTable, backend};
use super::rows::{self, Rows};
use super::sql::{filter_sql, search_filter, sql_literal};
use super::tables::TableId;
use crate::domain::{ConversationItem, Role};
use crate::store::{ConversationStore, SearchFilter, StoreError};

/// Arrow schema of `session_items`.
pub(super) fn schema() -> SchemaRef {
    rows::schema_with_provenance(vec![
        Field::new("turn", DataType::Int64, false),
        Field::new("role", DataType::Utf8, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("source_key", DataType::Utf8, false),
        Field::new("text", DataType::Utf8, false),
        Field::new("created_at", rows::timestamp_type(), false),
        Field::new("updated_at", rows::timestamp_type(), false),
        Field::new("embedded_text", DataType::Utf8, false),
        Field::new("search_text", DataType::Utf8, false),
        Field::new("vector", rows::vector_type(), false),
    ])
}

pub(super) fn to_batch(rows_in: &[(ConversationItem, Vec<f32>)]) -> Result<RecordBatch, StoreError> {
    let it = || rows_in.iter().map(|(r, _)| r);
    let ids: Vec<String> = it().map(|r| r.id.to_string()).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            rows::strings(ids.iter().map(String::as_str)),
            rows::strings(it().map(|r| r.actor_id.as_str())),
            rows::strings(it().map(|r| r.project.as_str())),
            rows::strings(it().map(|r| r.session_id.as_str())),
            rows::ints(it().map(|r| Some(r.turn))),
            rows::strings(it().map(|r| r.role.as_str())),
            rows::strings(it().map(|r| r.source.as_str())),
            rows::strings(it().map(|r| r.source_key.as_str())),
            rows::strings(it().map(|r| r.text.as_str())),
            rows::times(it().map(|r| r.created_at)),
            rows::times(it().map(|r| r.updated_at)),
            rows::strings(it().map(|r| r.embedded_text.as_str())),
            rows::strings(it().map(|r| r.search_text.as_str())),
            rows::vectors(rows_in.iter().map(|(_, v)| v.as_slice()))?,
        ],
    )
    .map_err(backend)
}

/// Decodes every row of `batch` with its stored vector.
pub(super) fn from_batch(batch: &RecordBatch) -> Result<Vec<(ConversationItem, Vec<f32>)>, StoreError> {
    let r = Rows::new(batch, TableId::Conversation);
    let (ids, actors, projects, sessions, turns) =
        (r.uuids("id")?, r.strs("actor_id")?, r.strs("project")?, r.strs("session_id")?, r.opt_ints("turn")?);
    let (roles, sources, keys, texts) = (r.strs("role")?, r.strs("source")?, r.strs("source_key")?, r.strs("text")?);
    let (created, updated, embedded, search, vectors) = (
        r.times("created_at")?,
        r.times("updated_at")?,
        r.strs("embedded_text")?,
        r.strs("search_text")?,
        r.vectors("vector")?,
    );
    let mut out = Vec::with_capacity(r.len());
    for i in 0..r.len() {
        let role = Role::parse(&roles[i]).ok_or_else(|| StoreError::Corrupt {
            table: TableId::Conversation.name(),
            column: "role",
            message: format!("unknown role `{}`", roles[i]),
        })?;
        out.push((
            ConversationItem {
                id: ids[i],
                actor_id: actors[i].clone(),
                project: projects[i].clone(),
                session_id: sessions[i].clone(),
                turn: turns[i].unwrap_or_default(),
                role,
                source: sources[i].clone(),
                source_key: keys[i].clone(),
                text: texts[i].clone(),
                created_at: created[i],
                updated_at: updated[i],
                embedded_text: embedded[i].clone(),
                search_text: search[i].clone(),
            },
            vectors[i].clone(),
        ));
    }
    Ok(out)
}

/// Arrow schema of the `forgotten` table: the ids of forgotten conversation items, which an import
/// must not store again.
pub(super) fn forgotten_schema() -> SchemaRef {
    std::sync::Arc::new(arrow_schema::Schema::new(vec![
        rows::key_field("id"),
        Field::new("actor_id", DataType::Utf8, false),
        Field::new("forgotten_at", rows::timestamp_type(), false),
    ]))
}

/// After `item` was deleted: records its id as forgotten (a re-import skips it) and removes its line
/// from the search text of the items after it in its session, so its words no longer match there.
pub(super) async fn forget_item(store: &LanceStore, item: &ConversationItem) -> Result<(), StoreError> {
    let now = chrono::Utc::now();
    let tombstone = RecordBatch::try_new(
        forgotten_schema(),
        vec![
            rows::strings([item.id.to_string().as_str()]),
            rows::strings([item.actor_id.as_str()]),
            rows::times([now]),
        ],
    )
    .map_err(backend)?;
    super::commit::merge_keyed(
        StoreTable::new(store, TableId::Forgotten).table(),
        &tombstone,
        super::commit::Merge::InsertAbsent,
    )
    .await?;
    let line = format!("{}\n", crate::domain::context_line(&item.embedded_text));
    let filter = format!(
        "actor_id = {} AND session_id = {} AND turn > {} AND turn <= {}",
        sql_literal(&item.actor_id),
        sql_literal(&item.session_id),
        item.turn,
        item.turn + crate::domain::CONTEXT_ITEMS as i64
    );
    let mut changed = Vec::new();
    for batch in StoreTable::new(store, TableId::Conversation).select(&filter, None).await? {
        for (mut row, vector) in from_batch(&batch)? {
            if row.search_text.contains(&line) {
                row.search_text = row.search_text.replacen(&line, "", 1);
                changed.push((row, vector));
            }
        }
    }
    if !changed.is_empty() {
        StoreTable::new(store, TableId::Conversation).upsert_batch(to_batch(&changed)?).await?;
    }
    Ok(())
}

impl super::search::TableRow for ConversationItem {
    const TABLE: TableId = TableId::Conversation;
    fn actor_id(&self) -> &str {
        &self.actor_id
    }
    fn decode(batch: &RecordBatch) -> Result<Vec<(Self, Vec<f32>)>, StoreError> {
        from_batch(batch)
    }
    fn filter(filter: &SearchFilter) -> super::sql::Filter {
        search_filter(filter, false, true)
    }
}

#[async_trait]
impl ConversationStore for LanceStore {
    async fn insert_items(&self, rows_in: &[(ConversationItem, Vec<f32>)]) -> Result<usize, StoreError> {
        Ok(StoreTable::new(self, TableId::Conversation).insert_new(to_batch(rows_in)?).await?.len())
    }

    async fn existing_item_ids(&self, ids: &[Uuid]) -> Result<HashSet<Uuid>, StoreError> {
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        StoreTable::new(self, TableId::Conversation).ids_present(&ids).await
    }

    async fn forgotten_item_ids(&self, ids: &[Uuid]) -> Result<HashSet<Uuid>, StoreError> {
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        StoreTable::new(self, TableId::Forgotten).ids_present(&ids).await
    }

    async fn session_owner(&self, session_id: &str) -> Result<Option<String>, StoreError> {
        let filter = format!("session_id = {}", sql_literal(session_id));
        let batches = StoreTable::new(self, TableId::Conversation).select(&filter, Some(1)).await?;
        Ok(batches
            .iter()
            .map(from_batch)
            .next()
            .transpose()?
            .and_then(|v| v.into_iter().next())
            .map(|(item, _)| item.actor_id))
    }

    async fn actor_items(
        &self,
        actor_id: &str,
        roles: &[Role],
        since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Result<Vec<ConversationItem>, StoreError> {
        let filter = crate::store::SearchFilter {
            actor_id: actor_id.to_string(),
            roles: roles.to_vec(),
            start: since,
            ..Default::default()
        };
        let batches =
            StoreTable::new(self, TableId::Conversation).select(&filter_sql(&filter, false, true), None).await?;
        let mut items: Vec<ConversationItem> = batches
            .iter()
            .map(from_batch)
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .map(|(i, _)| i)
            .collect();
        items.sort_by(|a, b| (&a.session_id, a.turn, &a.source_key).cmp(&(&b.session_id, b.turn, &b.source_key)));
        Ok(items)
    }

    async fn last_turn(&self, actor_id: &str, session_id: &str) -> Result<Option<i64>, StoreError> {
        use futures::TryStreamExt;
        use lancedb::query::{ExecutableQuery, QueryBase, Select};
        let filter = format!("actor_id = {} AND session_id = {}", sql_literal(actor_id), sql_literal(session_id));
        let query = StoreTable::new(self, TableId::Conversation)
            .table()
            .query()
            .only_if(filter)
            .select(Select::columns(&["turn"]));
        let batches: Vec<RecordBatch> = query.execute().await.map_err(backend)?.try_collect().await.map_err(backend)?;
        let mut last = None;
        for batch in &batches {
            for t in Rows::new(batch, TableId::Conversation).opt_ints("turn")?.into_iter().flatten() {
                last = Some(last.map_or(t, |l: i64| l.max(t)));
            }
        }
        Ok(last)
    }
}
