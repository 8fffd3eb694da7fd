//! The `core_blocks` table: every version of every core memory block, one row per version. The current
//! value of a block is its highest version.
//!
//! A change is read-modify-write, and Lance's commit protocol does not detect two concurrent inserts of
//! the same key, so changes are serialised by the table's lock (`TableLock`, see the module docs of
//! `store::lance`), held while the latest version is read and the next one written. That covers every
//! process on this machine, and every handle in one process. A store on an object-store URI has no lock
//! file: there, concurrent changes of one block from two processes can lose one of them.

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, SchemaRef};
use async_trait::async_trait;

use super::rows::{self, Rows};
use super::sql::sql_literal;
use super::{LanceStore, backend};
use crate::domain::CoreBlockVersion;
use crate::store::{BlockEdit, CoreBlockStore, StoreError};

/// Name of the core memory table.
pub const CORE_BLOCKS_TABLE: &str = "core_blocks";

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
    let key = format!("{}\u{0}{}\u{0}{}", v.actor_id, v.project, v.section);
    let digest = <sha2::Sha256 as sha2::Digest>::digest(key.as_bytes());
    format!("{}#{:010}", hex::encode(&digest[..16]), v.version)
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
    let r = Rows::new(batch, CORE_BLOCKS_TABLE);
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
        Ok(self.history_from(self.table(CORE_BLOCKS_TABLE), actor_id, project, section).await?.pop())
    }

    async fn update_block(
        &self,
        template: &CoreBlockVersion,
        edit: &BlockEdit<'_>,
    ) -> Result<Result<CoreBlockVersion, String>, StoreError> {
        let _lock = super::write::TableLock::acquire(self.path(), CORE_BLOCKS_TABLE).await?;
        let latest = self
            .history_from(self.table(CORE_BLOCKS_TABLE), &template.actor_id, &template.project, &template.section)
            .await?;
        let current = latest.last();
        let value = match edit(current) {
            Ok(value) => value,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let next = CoreBlockVersion {
            version: current.map_or(0, |c| c.version) + 1,
            value,
            created_at: chrono::Utc::now(),
            ..template.clone()
        };
        let batch = to_batch(std::slice::from_ref(&next))?;
        let table = self.table(CORE_BLOCKS_TABLE);
        let result = super::write::retry(|| {
            let mut merge = table.merge_insert(&["id"]);
            merge.when_not_matched_insert_all();
            let reader = arrow_array::RecordBatchIterator::new(vec![Ok(batch.clone())], batch.schema());
            async move { merge.execute(Box::new(reader)).await }
        })
        .await
        .map_err(backend)?;
        if result.num_inserted_rows != 1 {
            return Err(StoreError::Backend(format!(
                "core block `{}` version {} exists already: another writer without the lock (an object store?)",
                next.section, next.version
            )));
        }
        Ok(Ok(next))
    }

    async fn block_history(
        &self,
        actor_id: &str,
        project: &str,
        section: &str,
    ) -> Result<Vec<CoreBlockVersion>, StoreError> {
        self.history_from(self.table(CORE_BLOCKS_TABLE), actor_id, project, section).await
    }
}

impl LanceStore {
    async fn history_from(
        &self,
        table: &lancedb::Table,
        actor_id: &str,
        project: &str,
        section: &str,
    ) -> Result<Vec<CoreBlockVersion>, StoreError> {
        use lancedb::query::QueryBase;
        let query = table.query().only_if(block_filter(actor_id, project, section));
        let batches = super::collect(&query).await.map_err(backend)?;
        let mut versions = Vec::new();
        for batch in &batches {
            versions.extend(from_batch(batch)?);
        }
        versions.sort_by_key(|v| v.version);
        Ok(versions)
    }
}
