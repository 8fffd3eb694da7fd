//! The operator's smoke check (docs/tools.md): `store` writes a temporary fix straight through the store
//! layer (no gates) and finds it again by search; `verify`, run in a later process, checks the row
//! survived the restart and deletes it.

use chrono::Utc;
use uuid::Uuid;

use crate::config::StoreSettings;
use crate::domain::{FixRecord, fix_memory_id};
use crate::embed::{LazyEmbedder, Workload};
use crate::memory::fixes::embedded_text;
use crate::store::lance::LanceStore;
use crate::store::{FixFilter, FixQuery, FixStore, Searchable};

/// Project label of smoke rows.
pub const SMOKE_PROJECT: &str = "astra-smoke";

/// Stores a temporary fix for the configured actor, searches for it, and returns its `memory_id`.
///
/// # Errors
/// When the store or model cannot be opened, or the stored fix is not found by a search.
pub async fn store(settings: &StoreSettings) -> anyhow::Result<Uuid> {
    let store = LanceStore::open_with(&settings.db, settings.open).await?;
    let embedder = LazyEmbedder::onnx(settings.model.clone(), Workload::Interactive);
    let session_id = format!("smoke-{}", Uuid::new_v4());
    let fix = "astra-mcp smoke check: temporary fix row, safe to delete";
    let error_type = "SmokeCheck";
    let query = format!("smoke check symptom {session_id}");
    let text = embedded_text(fix, error_type, std::slice::from_ref(&query), &[]);
    let now = Utc::now();
    let record = FixRecord {
        memory_id: fix_memory_id(&settings.actor_id, &session_id, fix, error_type, "smoke", &[]),
        actor_id: settings.actor_id.clone(),
        project: SMOKE_PROJECT.to_string(),
        session_id,
        created_at: now,
        updated_at: now,
        fix_description: fix.to_string(),
        error_type: error_type.to_string(),
        file_paths: Vec::new(),
        outcome: "smoke".to_string(),
        verified: false,
        receipt: None,
        embedded_text: text.clone(),
    };
    let vector = embedder.embed_documents(vec![text]).await?.remove(0);
    store.upsert_fix(&record, &vector).await?;
    let candidates = Searchable::<FixRecord>::candidates(
        &store,
        &FixQuery {
            filter: FixFilter { actor_id: settings.actor_id.clone(), error_type: Some(error_type.to_string()) },
            vector: embedder.embed_query(&query).await?,
            text: query,
            limit: 50,
        },
    )
    .await?;
    let found = candidates.by_vector.iter().chain(&candidates.by_keyword).any(|c| c.row.memory_id == record.memory_id);
    anyhow::ensure!(found, "stored smoke fix {} but a search did not return it", record.memory_id);
    Ok(record.memory_id)
}

/// Checks that `memory_id` (from [`store`]) is in the store, then deletes it.
///
/// # Errors
/// When the row is missing (the write did not persist) or the store cannot be opened.
pub async fn verify(settings: &StoreSettings, memory_id: Uuid) -> anyhow::Result<()> {
    let store = LanceStore::open_with(&settings.db, settings.open).await?;
    let Some(record) = store.get_fix(&settings.actor_id, memory_id).await? else {
        anyhow::bail!(
            "smoke fix {memory_id} is not in the store at {} for actor {}: the write did not persist, an earlier verify already deleted it, or --db/--actor differ from `smoke store`",
            settings.db,
            settings.actor_id
        );
    };
    anyhow::ensure!(
        record.project == SMOKE_PROJECT,
        "{memory_id} is not a smoke row (project {}); not deleting it",
        record.project
    );
    anyhow::ensure!(
        store.delete_fix(&settings.actor_id, memory_id).await?,
        "smoke fix {memory_id} vanished before delete"
    );
    Ok(())
}
