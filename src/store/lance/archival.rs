//! The `archival` table: passages of archival memory with provenance, tags, and supersession.

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, SchemaRef};
use async_trait::async_trait;
use uuid::Uuid;

use super::handle::{LanceStore, StoreTable, backend};
use super::rows::{self, Rows};
use super::sql::{search_filter, sql_literal};
use super::tables::TableId;
use crate::domain::Passage;
use crate::store::{AppliedPassages, ArchivalStore, SearchFilter, StoreError};

/// Arrow schema of `archival`.
pub(super) fn schema() -> SchemaRef {
    rows::schema_with_provenance(vec![
        Field::new("turn", DataType::Int64, true),
        Field::new("source", DataType::Utf8, false),
        Field::new("tags", rows::string_list_type(), false),
        Field::new("text", DataType::Utf8, false),
        Field::new("created_at", rows::timestamp_type(), false),
        Field::new("updated_at", rows::timestamp_type(), false),
        Field::new("embedded_text", DataType::Utf8, false),
        Field::new("superseded_by", DataType::Utf8, true),
        Field::new("vector", rows::vector_type(), false),
    ])
}

pub(super) fn to_batch(rows_in: &[(Passage, Vec<f32>)]) -> Result<RecordBatch, StoreError> {
    let p = || rows_in.iter().map(|(p, _)| p);
    let ids: Vec<String> = p().map(|r| r.id.to_string()).collect();
    let superseded: Vec<Option<String>> = p().map(|r| r.superseded_by.map(|u| u.to_string())).collect();
    RecordBatch::try_new(
        schema(),
        vec![
            rows::strings(ids.iter().map(String::as_str)),
            rows::strings(p().map(|r| r.actor_id.as_str())),
            rows::strings(p().map(|r| r.project.as_str())),
            rows::strings(p().map(|r| r.session_id.as_str())),
            rows::ints(p().map(|r| r.turn)),
            rows::strings(p().map(|r| r.source.as_str())),
            rows::string_lists(p().map(|r| r.tags.iter().map(String::as_str))),
            rows::strings(p().map(|r| r.text.as_str())),
            rows::times(p().map(|r| r.created_at)),
            rows::times(p().map(|r| r.updated_at)),
            rows::strings(p().map(|r| r.embedded_text.as_str())),
            rows::opt_strings(superseded.iter().map(Option::as_deref)),
            rows::vectors(rows_in.iter().map(|(_, v)| v.as_slice()))?,
        ],
    )
    .map_err(backend)
}

/// Decodes every row of `batch` with its stored vector.
pub(super) fn from_batch(batch: &RecordBatch) -> Result<Vec<(Passage, Vec<f32>)>, StoreError> {
    let r = Rows::new(batch, TableId::Archival);
    let superseded: Vec<Option<Uuid>> =
        r.opt_strs("superseded_by")?.into_iter().map(|s| s.and_then(|s| Uuid::parse_str(&s).ok())).collect();
    let mut out = Vec::with_capacity(r.len());
    let cols = (
        r.uuids("id")?,
        r.strs("actor_id")?,
        r.strs("project")?,
        r.strs("session_id")?,
        r.opt_ints("turn")?,
        r.strs("source")?,
        r.string_lists("tags")?,
        r.strs("text")?,
        r.times("created_at")?,
        r.times("updated_at")?,
        r.strs("embedded_text")?,
        r.vectors("vector")?,
    );
    let (ids, actors, projects, sessions, turns, sources, tags, texts, created, updated, embedded, vectors) = cols;
    for i in 0..r.len() {
        out.push((
            Passage {
                id: ids[i],
                actor_id: actors[i].clone(),
                project: projects[i].clone(),
                session_id: sessions[i].clone(),
                turn: turns[i],
                source: sources[i].clone(),
                tags: tags[i].clone(),
                text: texts[i].clone(),
                created_at: created[i],
                updated_at: updated[i],
                embedded_text: embedded[i].clone(),
                superseded_by: superseded[i],
            },
            vectors[i].clone(),
        ));
    }
    Ok(out)
}

impl super::search::TableRow for Passage {
    const TABLE: TableId = TableId::Archival;
    fn actor_id(&self) -> &str {
        &self.actor_id
    }
    fn decode(batch: &RecordBatch) -> Result<Vec<(Self, Vec<f32>)>, StoreError> {
        from_batch(batch)
    }
    fn filter(filter: &SearchFilter) -> super::sql::Filter {
        search_filter(filter, true, false)
    }
}

#[async_trait]
impl ArchivalStore for LanceStore {
    async fn insert_passages(&self, rows_in: &[(Passage, Vec<f32>)]) -> Result<Vec<Uuid>, StoreError> {
        if rows_in.is_empty() {
            return Ok(Vec::new());
        }
        // under the table's lock: two racing inserts of one text write one row
        StoreTable::new(self, TableId::Archival).insert_new(to_batch(rows_in)?).await
    }

    async fn get_passage(&self, actor_id: &str, id: Uuid) -> Result<Option<Passage>, StoreError> {
        let filter = format!("actor_id = {} AND id = {}", sql_literal(actor_id), sql_literal(&id.to_string()));
        let batches = StoreTable::new(self, TableId::Archival).select(&filter, Some(1)).await?;
        Ok(batches.iter().map(from_batch).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().next().map(|r| r.0))
    }

    async fn recent_passages(
        &self,
        actor_id: &str,
        project: &str,
        tags_any: &[String],
        limit: usize,
    ) -> Result<Vec<Passage>, StoreError> {
        if tags_any.is_empty() || limit == 0 {
            return Ok(Vec::new());
        }
        let any = tags_any.iter().map(|t| format!("array_has(tags, {})", sql_literal(t))).collect::<Vec<_>>();
        let filter = format!(
            "actor_id = {} AND project = {} AND superseded_by IS NULL AND ({})",
            sql_literal(actor_id),
            sql_literal(project),
            any.join(" OR ")
        );
        let batches = StoreTable::new(self, TableId::Archival).select(&filter, None).await?;
        let mut passages: Vec<Passage> =
            batches.iter().map(from_batch).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().map(|r| r.0).collect();
        passages.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
        passages.truncate(limit);
        Ok(passages)
    }

    async fn existing_passage_ids(
        &self,
        _actor_id: &str,
        ids: &[Uuid],
    ) -> Result<std::collections::HashSet<Uuid>, StoreError> {
        let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        StoreTable::new(self, TableId::Archival).ids_present(&ids).await
    }

    async fn add_passage_tags(&self, actor_id: &str, id: Uuid, tags: &[String]) -> Result<Option<Passage>, StoreError> {
        // Read, merge, then write only if the row is still as read (its `updated_at`): a writer on another
        // machine that added tags meanwhile makes the write match nothing, and the merge starts again from
        // its row. The flock spares the writers of one machine that round.
        let _lock = super::commit::TableLock::acquire(&self.location, TableId::Archival.name()).await?;
        // From the latest version, not a view that lags other machines (a bucket's reads may): a passage
        // forgotten on another machine a moment ago is gone here too, and the caller stores it anew.
        StoreTable::new(self, TableId::Archival).table().checkout_latest().await.map_err(backend)?;
        let filter = format!("actor_id = {} AND id = {}", sql_literal(actor_id), sql_literal(&id.to_string()));
        for attempt in 1..=super::commit::WRITE_ATTEMPTS {
            let batches = StoreTable::new(self, TableId::Archival).select(&filter, Some(1)).await?;
            let Some((mut passage, vector)) =
                batches.iter().map(from_batch).next().transpose()?.and_then(|v| v.into_iter().next())
            else {
                return Ok(None);
            };
            let read_at = passage.updated_at;
            let before = passage.tags.len();
            for tag in tags {
                if passage.tags.len() >= crate::domain::MAX_PASSAGE_TAGS {
                    break;
                }
                if !passage.tags.contains(tag) {
                    passage.tags.push(tag.clone());
                }
            }
            if passage.tags.len() == before {
                return Ok(Some(passage));
            }
            passage.tags.sort();
            passage.updated_at = chrono::Utc::now().max(read_at + chrono::Duration::microseconds(1));
            // the row as read: its `updated_at`, compared as microseconds since the epoch (a timestamp
            // literal's `arrow_cast` is not simplified in a merge-insert's condition)
            let unchanged = format!("CAST(target.updated_at AS BIGINT) = {}", read_at.timestamp_micros());
            if StoreTable::new(self, TableId::Archival)
                .update_if(to_batch(&[(passage.clone(), vector)])?, &unchanged)
                .await?
                == 1
            {
                return Ok(Some(passage));
            }
            tracing::debug!(%id, attempt, "passage changed while its tags were merged, merging again");
        }
        Err(StoreError::Backend(format!(
            "passage {id} kept changing while its tags were merged ({} attempts): try again",
            super::commit::WRITE_ATTEMPTS
        )))
    }

    async fn apply_passages(
        &self,
        new: &[(Passage, Vec<f32>)],
        changed: &[(Passage, Option<Vec<f32>>)],
    ) -> Result<AppliedPassages, StoreError> {
        use std::collections::HashMap;
        if new.is_empty() && changed.is_empty() {
            return Ok(AppliedPassages::default());
        }
        // Read, merge and write under the table's lock, so no tag added meanwhile is lost.
        let _lock = super::commit::TableLock::acquire(&self.location, TableId::Archival.name()).await?;
        let ids: Vec<String> =
            new.iter().map(|(p, _)| p.id.to_string()).chain(changed.iter().map(|(p, _)| p.id.to_string())).collect();
        let mut stored: HashMap<Uuid, (Passage, Vec<f32>)> = HashMap::new();
        for chunk in ids.chunks(500) {
            let filter = super::sql::in_list("id", chunk.iter().map(String::as_str));
            for batch in StoreTable::new(self, TableId::Archival).select(&filter, None).await? {
                stored.extend(from_batch(&batch)?.into_iter().map(|(p, v)| (p.id, (p, v))));
            }
        }
        let mut seen = std::collections::HashSet::new();
        if !new.iter().map(|(p, _)| p.id).chain(changed.iter().map(|(p, _)| p.id)).all(|id| seen.insert(id)) {
            return Err(StoreError::Backend("apply_passages: an id appears twice in one commit".into()));
        }
        let mut applied = AppliedPassages::default();
        let mut rows_out: Vec<(Passage, Vec<f32>)> = Vec::with_capacity(ids.len());
        let merge_tags = |mut ours: Passage, theirs: &Passage| {
            for tag in &theirs.tags {
                if !ours.tags.contains(tag) {
                    ours.tags.push(tag.clone());
                }
            }
            ours.tags.sort();
            ours
        };
        for (passage, vector) in new {
            match stored.get(&passage.id) {
                Some((existing, _)) if existing.actor_id == passage.actor_id => {
                    let mut merged = merge_tags(passage.clone(), existing);
                    merged.created_at = existing.created_at;
                    applied.replaced += 1;
                    rows_out.push((merged, vector.clone()));
                }
                Some(_) => return Err(StoreError::Backend(format!("passage {} belongs to another actor", passage.id))),
                None => {
                    applied.inserted += 1;
                    rows_out.push((passage.clone(), vector.clone()));
                }
            }
        }
        for (passage, vector) in changed {
            match stored.get(&passage.id) {
                Some((existing, stored_vector)) if existing.actor_id == passage.actor_id => {
                    applied.replaced += 1;
                    let vector = vector.clone().unwrap_or_else(|| stored_vector.clone());
                    rows_out.push((merge_tags(passage.clone(), existing), vector));
                }
                _ => applied.skipped += 1,
            }
        }
        if !rows_out.is_empty() {
            // one merge-insert: one commit, so the run's changes land together or not at all
            StoreTable::new(self, TableId::Archival).upsert_batch(to_batch(&rows_out)?).await?;
        }
        Ok(applied)
    }

    async fn count_written_at(&self, actor_id: &str, at: chrono::DateTime<chrono::Utc>) -> Result<usize, StoreError> {
        let filter =
            format!("actor_id = {} AND updated_at = {}", sql_literal(actor_id), super::sql::timestamp_literal(at));
        Ok(StoreTable::new(self, TableId::Archival).table().count_rows(Some(filter)).await.map_err(backend)?)
    }
}
