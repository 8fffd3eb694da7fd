//! The `distill_runs` table: one row per distillation run (its state, counts, cost, the items it read
//! and what it changed), rewritten as the run advances. The run itself is kept as JSON in `record`;
//! `actor_id`, `state` and `started_at` are columns so runs can be filtered and ordered.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;

use super::handle::{LanceStore, StoreTable, backend};
use super::rows::{self, Rows};
use super::sql::sql_literal;
use super::tables::TableId;
use crate::domain::DistillRun;
use crate::store::{DistillRunStore, RunLock, StoreError};

/// Arrow schema of `distill_runs`.
pub(super) fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        rows::key_field("id"),
        Field::new("actor_id", DataType::Utf8, false),
        Field::new("state", DataType::Utf8, false),
        Field::new("started_at", rows::timestamp_type(), false),
        Field::new("record", DataType::Utf8, false),
    ]))
}

fn to_batch(run: &DistillRun) -> Result<RecordBatch, StoreError> {
    let record = serde_json::to_string(run).map_err(backend)?;
    RecordBatch::try_new(
        schema(),
        vec![
            rows::strings([run.run_id.as_str()]),
            rows::strings([run.actor_id.as_str()]),
            rows::strings([run.state.as_str()]),
            rows::times([run.started_at]),
            rows::strings([record.as_str()]),
        ],
    )
    .map_err(backend)
}

fn from_batch(batch: &RecordBatch) -> Result<Vec<DistillRun>, StoreError> {
    let r = Rows::new(batch, TableId::DistillRuns);
    r.strs("record")?
        .iter()
        .map(|json| {
            serde_json::from_str(json).map_err(|e| StoreError::Corrupt {
                table: TableId::DistillRuns.name(),
                column: "record",
                message: e.to_string(),
            })
        })
        .collect()
}

#[async_trait]
impl DistillRunStore for LanceStore {
    async fn put_run(&self, run: &DistillRun) -> Result<(), StoreError> {
        StoreTable::new(self, TableId::DistillRuns).upsert_batch(to_batch(run)?).await
    }

    async fn runs(&self, actor_id: Option<&str>) -> Result<Vec<DistillRun>, StoreError> {
        let filter = actor_id.map_or_else(|| "TRUE".to_string(), |a| format!("actor_id = {}", sql_literal(a)));
        let batches = StoreTable::new(self, TableId::DistillRuns).select(&filter, None).await?;
        let mut runs: Vec<DistillRun> =
            batches.iter().map(from_batch).collect::<Result<Vec<_>, _>>()?.into_iter().flatten().collect();
        runs.sort_by(|a, b| a.started_at.cmp(&b.started_at).then_with(|| a.run_id.cmp(&b.run_id)));
        Ok(runs)
    }

    /// On a local directory `<db>/distill-<sha256(actor)[..16]>.lock` ([`super::commit::TableLock`]); on
    /// object storage a lease object of that name ([`super::bucket::try_lease`]).
    async fn try_lock_runs(&self, actor_id: &str) -> Result<Option<RunLock>, StoreError> {
        use sha2::{Digest, Sha256};
        let digest = hex::encode(Sha256::digest(actor_id.as_bytes()));
        let name = format!("distill-{}", &digest[..16]);
        if let crate::store::Location::Bucket(uri) = &self.location {
            return super::bucket::try_lease(uri, &name, super::bucket::RUN_LEASE, "distill run").await;
        }
        let lock = super::commit::TableLock::try_acquire(&self.location, &name)?;
        Ok(lock.map(RunLock::new))
    }
}
