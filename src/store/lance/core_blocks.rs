//! The `core_blocks` table: every version of every core memory block, one row per version. The current
//! value of a block is its highest version.
//!
//! A change is read-modify-write: the latest version is read, the edit applied, the next version
//! inserted. A version's id ([`version_id`]) is the table's key, so two writers of the same next
//! version conflict at commit and the second finds the version taken: it reads again and applies its
//! edit to the newer value. That holds between machines sharing only an object store. On a local
//! directory the table's lock (`TableLock`, see the module docs of `store::lance`) also serialises the
//! writers of one machine, so they rarely meet.

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, SchemaRef};
use async_trait::async_trait;

use super::handle::{LanceStore, StoreTable, backend};
use super::rows::{self, Rows};
use super::sql::sql_literal;
use super::tables::TableId;
use crate::domain::CoreBlockVersion;
use crate::store::{BlockEdit, CoreBlockStore, Purge, StoreError};

/// Arrow schema of `core_blocks`.
pub(super) fn schema() -> SchemaRef {
    rows::schema_with_provenance(vec![
        Field::new("section", DataType::Utf8, false),
        Field::new("version", DataType::Int64, false),
        Field::new("value", DataType::Utf8, false),
        Field::new("operation", DataType::Utf8, false),
        Field::new("created_at", rows::timestamp_type(), false),
    ])
}

/// The row id of one version: unique per (actor, project, section, version).
pub(super) fn version_id(v: &CoreBlockVersion) -> String {
    version_key_id(&v.actor_id, &v.project, &v.section, v.version)
}

/// [`version_id`] of version `version` of block `section` of `actor` in `project`.
pub(super) fn version_key_id(actor: &str, project: &str, section: &str, version: i64) -> String {
    let key = format!("{actor}\u{0}{project}\u{0}{section}");
    let digest = <sha2::Sha256 as sha2::Digest>::digest(key.as_bytes());
    format!("{}#{:010}", hex::encode(&digest[..16]), version)
}

pub(super) fn to_batch(versions: &[CoreBlockVersion]) -> Result<RecordBatch, StoreError> {
    let ids: Vec<String> = versions.iter().map(version_id).collect();
    let v = || versions.iter();
    RecordBatch::try_new(
        schema(),
        vec![
            rows::strings(ids.iter().map(String::as_str)),
            rows::strings(v().map(|r| r.actor_id.as_str())),
            rows::strings(v().map(|r| r.project.as_str())),
            rows::strings(v().map(|r| r.session_id.as_str())),
            rows::strings(v().map(|r| r.section.as_str())),
            rows::ints(v().map(|r| Some(r.version))),
            rows::strings(v().map(|r| r.value.as_str())),
            rows::strings(v().map(|r| r.operation.as_str())),
            rows::times(v().map(|r| r.created_at)),
        ],
    )
    .map_err(backend)
}

pub(super) fn from_batch(batch: &RecordBatch) -> Result<Vec<CoreBlockVersion>, StoreError> {
    let r = Rows::new(batch, TableId::CoreBlocks);
    let (actors, projects, sessions, sections) =
        (r.strs("actor_id")?, r.strs("project")?, r.strs("session_id")?, r.strs("section")?);
    let (versions, values, ops, created) =
        (r.opt_ints("version")?, r.strs("value")?, r.strs("operation")?, r.times("created_at")?);
    Ok((0..r.len())
        .map(|i| CoreBlockVersion {
            actor_id: actors[i].clone(),
            project: projects[i].clone(),
            section: sections[i].clone(),
            version: versions[i].unwrap_or_default(),
            value: values[i].clone(),
            operation: ops[i].clone(),
            session_id: sessions[i].clone(),
            created_at: created[i],
        })
        .collect())
}

fn block_filter(actor_id: &str, project: &str, section: &str) -> String {
    format!(
        "actor_id = {} AND project = {} AND section = {}",
        sql_literal(actor_id),
        sql_literal(project),
        sql_literal(section)
    )
}

#[async_trait]
impl CoreBlockStore for LanceStore {
    async fn current_block(
        &self,
        actor_id: &str,
        project: &str,
        section: &str,
    ) -> Result<Option<CoreBlockVersion>, StoreError> {
        Ok(history_from(StoreTable::new(self, TableId::CoreBlocks).table(), actor_id, project, section).await?.pop())
    }

    async fn update_block(
        &self,
        template: &CoreBlockVersion,
        edit: &BlockEdit<'_>,
    ) -> Result<Result<CoreBlockVersion, String>, StoreError> {
        // The flock serialises the writers of one machine; across machines, two writers of the same next
        // version conflict at commit (the version's id is the table's key), and the one that finds the
        // version taken reads the block again and applies its edit to the newer value.
        let _lock = super::commit::TableLock::acquire(&self.location, TableId::CoreBlocks.name()).await?;
        let table = StoreTable::new(self, TableId::CoreBlocks).table();
        for attempt in 1..=super::commit::WRITE_ATTEMPTS {
            let latest = history_from(table, &template.actor_id, &template.project, &template.section).await?;
            let current = latest.last();
            let value = match edit(current) {
                Ok(value) => value,
                Err(refusal) => return Ok(Err(refusal)),
            };
            if let Some(current) = current.filter(|c| c.value == value) {
                // nothing changes: no new version
                return Ok(Ok(current.clone()));
            }
            let next = CoreBlockVersion {
                version: current.map_or(0, |c| c.version) + 1,
                value,
                created_at: chrono::Utc::now(),
                ..template.clone()
            };
            let batch = to_batch(std::slice::from_ref(&next))?;
            if super::commit::merge_keyed(table, &batch, super::commit::Merge::InsertAbsent).await?.num_inserted_rows
                == 1
            {
                return Ok(Ok(next));
            }
            tracing::debug!(section = %next.section, version = next.version, attempt, "block version taken, editing again");
            tokio::time::sleep(std::time::Duration::from_millis(10 * attempt as u64)).await;
        }
        Err(StoreError::Backend(format!(
            "core block `{}` kept changing under this edit ({} attempts): try again",
            template.section,
            super::commit::WRITE_ATTEMPTS
        )))
    }

    async fn purge_block_version(
        &self,
        actor_id: &str,
        project: &str,
        section: &str,
        version: i64,
    ) -> Result<Purge, StoreError> {
        let table = StoreTable::new(self, TableId::CoreBlocks).table();
        // From the latest version, not a view that lags other machines: a version written there is found.
        // A version that is not the latest now stays so (numbers only grow, and the latest is never
        // purged), so checking before the delete is enough, across machines too.
        table.checkout_latest().await.map_err(backend)?;
        let history = history_from(table, actor_id, project, section).await?;
        if !history.iter().any(|v| v.version == version) {
            return Ok(Purge::Absent);
        }
        if history.last().is_some_and(|latest| latest.version == version) {
            return Ok(Purge::Current);
        }
        let id = version_key_id(actor_id, project, section, version);
        let filter = format!("actor_id = {} AND id = {}", sql_literal(actor_id), sql_literal(&id));
        Ok(if super::commit::delete_where(table, &filter).await? > 0 { Purge::Purged } else { Purge::Absent })
    }

    async fn block_history(
        &self,
        actor_id: &str,
        project: &str,
        section: &str,
    ) -> Result<Vec<CoreBlockVersion>, StoreError> {
        history_from(StoreTable::new(self, TableId::CoreBlocks).table(), actor_id, project, section).await
    }
}

async fn history_from(
    table: &lancedb::Table,
    actor_id: &str,
    project: &str,
    section: &str,
) -> Result<Vec<CoreBlockVersion>, StoreError> {
    use lancedb::query::QueryBase;
    let query = table.query().only_if(block_filter(actor_id, project, section));
    let batches = super::handle::collect(&query).await.map_err(backend)?;
    let mut versions = Vec::new();
    for batch in &batches {
        versions.extend(from_batch(batch)?);
    }
    versions.sort_by_key(|v| v.version);
    Ok(versions)
}
