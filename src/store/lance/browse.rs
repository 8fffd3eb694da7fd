//! What the memory browser reads ([`BrowseStore`]): one actor's rows a page at a time and the counts of
//! its overview. A page first reads the listing's ids and sort keys (two narrow columns), sorts them,
//! and then reads only the page's rows in full, so a page of 25 costs the same at 100 rows or 100k.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use lancedb::query::{QueryBase, Select};
use uuid::Uuid;

use super::admin::{self, listed_rows, main_text_column};
use super::handle::{LanceStore, StoreTable, backend, collect};
use super::rows::Rows;
use super::search::TableRow;
use super::sql::{in_list, sql_literal};
use super::tables::TableId;
use super::transfer;
use crate::domain::{ConversationItem, FixRecord, Passage};
use crate::store::{BrowseStore, Census, ListedRow, Page, SessionSummary, StoreError, TableStats};

/// The order of a listing.
#[derive(Clone, Copy)]
enum Order {
    /// `created_at` descending, then id.
    NewestFirst,
    /// `turn` ascending, then `created_at`, then id (a conversation as it happened).
    Turns,
}

fn actor_sql(actor_id: &str) -> String {
    format!("actor_id = {}", sql_literal(actor_id))
}

impl StoreTable<'_> {
    /// `(project, created_at)` of every row of this table the filter keeps.
    async fn projects_and_times(self, filter: &str) -> Result<Vec<(String, DateTime<Utc>, Uuid)>, StoreError> {
        // core block versions have no id column
        let columns: &[&str] =
            if self.id == TableId::CoreBlocks { &["project", "created_at"] } else { &["project", "created_at", "id"] };
        let query = self.table().query().only_if(filter).select(Select::columns(columns));
        let mut out = Vec::new();
        for batch in collect(&query).await.map_err(backend)? {
            let r = Rows::new(&batch, self.id);
            let (projects, created) = (r.strs("project")?, r.times("created_at")?);
            let ids = if self.id == TableId::CoreBlocks { vec![Uuid::nil(); r.len()] } else { r.uuids("id")? };
            for i in 0..r.len() {
                out.push((projects[i].clone(), created[i], ids[i]));
            }
        }
        Ok(out)
    }

    /// The rows of this table with these ids, one line each.
    async fn listed(self, actor_id: &str, ids: &[Uuid]) -> Result<Vec<ListedRow>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let text = main_text_column(self.id);
        let id_strings: Vec<String> = ids.iter().map(Uuid::to_string).collect();
        let filter = format!("{} AND {}", actor_sql(actor_id), in_list("id", id_strings.iter().map(String::as_str)));
        let query = self.table().query().only_if(filter).select(Select::columns(&[
            "id",
            "actor_id",
            "project",
            "session_id",
            "created_at",
            text,
        ]));
        let mut out = Vec::new();
        for batch in collect(&query).await.map_err(backend)? {
            out.extend(listed_rows(&batch, self.id, text)?.into_iter().map(|(_, row)| row));
        }
        Ok(out)
    }
}

/// The `filter`ed rows of `T`'s table in `order`, `limit` of them from `offset`.
async fn page_of<T: TableRow>(
    store: &LanceStore,
    filter: &str,
    order: Order,
    offset: usize,
    limit: usize,
) -> Result<Page<T>, StoreError> {
    let columns: &[&str] = match order {
        Order::NewestFirst => &["id", "created_at"],
        Order::Turns => &["id", "created_at", "turn"],
    };
    let query = StoreTable::new(store, T::TABLE).table().query().only_if(filter).select(Select::columns(columns));
    let mut keys: Vec<(i64, DateTime<Utc>, Uuid)> = Vec::new();
    for batch in collect(&query).await.map_err(backend)? {
        let r = Rows::new(&batch, T::TABLE);
        let (ids, created) = (r.uuids("id")?, r.times("created_at")?);
        let turns = match order {
            Order::Turns => r.opt_ints("turn")?,
            Order::NewestFirst => vec![None; r.len()],
        };
        for i in 0..r.len() {
            keys.push((turns[i].unwrap_or(0), created[i], ids[i]));
        }
    }
    match order {
        Order::NewestFirst => keys.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.2.cmp(&b.2))),
        Order::Turns => keys.sort(),
    }
    let total = keys.len();
    let wanted: Vec<Uuid> = keys.into_iter().skip(offset).take(limit).map(|k| k.2).collect();
    let rows = rows_by_id::<T>(store, filter, &wanted).await?;
    Ok(Page { rows, total })
}

/// The rows of `T`'s table with these ids (and matching `filter`), in the order of `ids`.
async fn rows_by_id<T: TableRow>(store: &LanceStore, filter: &str, ids: &[Uuid]) -> Result<Vec<T>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let id_strings: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    let filter = format!("{filter} AND {}", in_list("id", id_strings.iter().map(String::as_str)));
    let mut found: HashMap<Uuid, T> = HashMap::new();
    for batch in StoreTable::new(store, T::TABLE).select(&filter, None).await? {
        for (row, _) in T::decode(&batch)? {
            found.insert(row.id(), row);
        }
    }
    Ok(ids.iter().filter_map(|id| found.remove(id)).collect())
}

async fn one<T: TableRow>(store: &LanceStore, actor_id: &str, id: Uuid) -> Result<Option<T>, StoreError> {
    Ok(rows_by_id::<T>(store, &actor_sql(actor_id), &[id]).await?.pop())
}

#[async_trait]
impl BrowseStore for LanceStore {
    async fn fix_page(&self, actor_id: &str, offset: usize, limit: usize) -> Result<Page<FixRecord>, StoreError> {
        page_of(self, &actor_sql(actor_id), Order::NewestFirst, offset, limit).await
    }

    async fn fix(&self, actor_id: &str, id: Uuid) -> Result<Option<FixRecord>, StoreError> {
        one(self, actor_id, id).await
    }

    async fn passage_page(
        &self,
        actor_id: &str,
        tag: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> Result<Page<Passage>, StoreError> {
        let mut filter = actor_sql(actor_id);
        if let Some(tag) = tag {
            filter.push_str(&format!(" AND array_has(tags, {})", sql_literal(tag)));
        }
        page_of(self, &filter, Order::NewestFirst, offset, limit).await
    }

    async fn passage(&self, actor_id: &str, id: Uuid) -> Result<Option<Passage>, StoreError> {
        one(self, actor_id, id).await
    }

    async fn superseded_by(&self, actor_id: &str, id: Uuid) -> Result<Vec<Passage>, StoreError> {
        let filter = format!("{} AND superseded_by = {}", actor_sql(actor_id), sql_literal(&id.to_string()));
        Ok(page_of(self, &filter, Order::NewestFirst, 0, 100).await?.rows)
    }

    async fn session_page(
        &self,
        actor_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Page<SessionSummary>, StoreError> {
        let query = StoreTable::new(self, TableId::Conversation)
            .table()
            .query()
            .only_if(actor_sql(actor_id))
            .select(Select::columns(&["session_id", "project", "created_at"]));
        let mut sessions: HashMap<String, SessionSummary> = HashMap::new();
        for batch in collect(&query).await.map_err(backend)? {
            let r = Rows::new(&batch, TableId::Conversation);
            let (ids, projects, created) = (r.strs("session_id")?, r.strs("project")?, r.times("created_at")?);
            for i in 0..r.len() {
                let s = sessions.entry(ids[i].clone()).or_insert_with(|| SessionSummary {
                    session_id: ids[i].clone(),
                    project: projects[i].clone(),
                    items: 0,
                    first_at: created[i],
                    last_at: created[i],
                });
                s.items += 1;
                s.first_at = s.first_at.min(created[i]);
                s.last_at = s.last_at.max(created[i]);
            }
        }
        let mut all: Vec<SessionSummary> = sessions.into_values().collect();
        all.sort_by(|a, b| b.last_at.cmp(&a.last_at).then_with(|| a.session_id.cmp(&b.session_id)));
        let total = all.len();
        Ok(Page { rows: all.into_iter().skip(offset).take(limit).collect(), total })
    }

    async fn item(&self, actor_id: &str, id: Uuid) -> Result<Option<ConversationItem>, StoreError> {
        one(self, actor_id, id).await
    }

    async fn session_items_page(
        &self,
        actor_id: &str,
        session_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Page<ConversationItem>, StoreError> {
        let filter = format!("{} AND session_id = {}", actor_sql(actor_id), sql_literal(session_id));
        page_of(self, &filter, Order::Turns, offset, limit).await
    }

    async fn actor_counts(&self) -> Result<Vec<(String, usize)>, StoreError> {
        admin::actor_counts(self).await
    }

    async fn census(&self, actor_id: &str, latest: usize) -> Result<Census, StoreError> {
        let mut per_project: BTreeMap<(&'static str, String), usize> = BTreeMap::new();
        let mut per_day: BTreeMap<chrono::NaiveDate, usize> = BTreeMap::new();
        let mut newest: Vec<(DateTime<Utc>, TableId, Uuid)> = Vec::new();
        for table in TableId::MEMORY {
            let rows = StoreTable::new(self, table).projects_and_times(&actor_sql(actor_id)).await?;
            for (project, created, id) in rows {
                *per_project.entry((table.name(), project)).or_default() += 1;
                *per_day.entry(created.date_naive()).or_default() += 1;
                if table != TableId::CoreBlocks {
                    newest.push((created, table, id));
                }
            }
        }
        newest.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.2.cmp(&b.2)));
        newest.truncate(latest);
        let mut listed = Vec::new();
        for table in [TableId::Fixes, TableId::Archival, TableId::Conversation] {
            let ids: Vec<Uuid> = newest.iter().filter(|n| n.1 == table).map(|n| n.2).collect();
            listed.extend(StoreTable::new(self, table).listed(actor_id, &ids).await?);
        }
        listed.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| a.id.cmp(&b.id)));
        Ok(Census {
            per_project: per_project.into_iter().map(|((t, p), n)| (t, p, n)).collect(),
            per_day: per_day.into_iter().collect(),
            latest: listed,
        })
    }

    async fn table_stats(&self) -> Result<Vec<TableStats>, StoreError> {
        admin::stats(self).await
    }

    async fn export_actor(&self, actor_id: &str) -> Result<Vec<u8>, StoreError> {
        let mut out = Vec::new();
        transfer::export(self, &mut out, Some(actor_id)).await?;
        Ok(out)
    }
}
