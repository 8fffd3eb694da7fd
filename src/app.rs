//! The wiring room: the one module above `memory/` that names the concrete store ([`LanceStore`]). It
//! opens the store a command's settings name and builds every memory tier, and the tool hosts of a
//! server, from it; commands, hooks and pipelines take what it builds. Process-wide setup of the store
//! engine lives here too.

pub mod process;

use std::sync::Arc;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use crate::config::{ServeSettings, StoreSettings};
use crate::embed::{LazyEmbedder, Workload};
use crate::memory::core::BlockSpec;
use crate::memory::uses::Expiry;
use crate::memory::{
    ArchivalConfig, ArchivalMemory, ConversationMemory, CoreMemory, FixMemory, FixMemoryConfig, Fusion, UseLog,
};
pub use crate::store::lance::{self as lance, LanceStore, OpenOptions};
use crate::tools::{Hosts, Memories};

/// Sets the store engine's process-wide defaults the user did not set: environment variables Lance
/// reads once (its io_uring settings, [`crate::store::lance::io::set_uring_defaults`]) and its index
/// statistics' centroid loading (`LANCE_INCLUDE_VECTOR_CENTROIDS=false`: upkeep's segment check and
/// `memory stats` read the statistics, and Lance warns on every run that this default will change).
///
/// # Safety
/// Sets environment variables: call it before any other thread starts (at the top of `main`).
pub unsafe fn prepare_process() {
    if std::env::var_os("LANCE_INCLUDE_VECTOR_CENTROIDS").is_none() {
        // SAFETY: the caller guarantees no other thread exists yet.
        unsafe { std::env::set_var("LANCE_INCLUDE_VECTOR_CENTROIDS", "false") };
    }
    // SAFETY: as above.
    unsafe { crate::store::lance::io::set_uring_defaults() };
}

/// Waits for the compactions this process's writes started, so none is cut off at exit.
pub async fn wait_for_upkeep() {
    crate::store::lance::wait_for_upkeep().await;
}

/// Opens the store of a command that inspects or changes existing memories: a mistyped `--db` is an
/// error, not a new empty store.
pub async fn open_existing(settings: &StoreSettings) -> anyhow::Result<LanceStore> {
    LanceStore::require_existing(&settings.db).await?;
    open_store(settings).await
}

/// Opens (creating) the store `settings` name.
///
/// # Errors
/// The store's error ([`crate::store::StoreError`]): an unusable directory, another model or format.
pub async fn open_store(settings: &StoreSettings) -> anyhow::Result<LanceStore> {
    Ok(LanceStore::open_with(&settings.db, settings.open).await?)
}

/// Every memory tier over one open store, for `scope`.
pub fn memories(
    store: Arc<LanceStore>,
    embedder: LazyEmbedder,
    fixes: FixMemoryConfig,
    core_blocks: Vec<BlockSpec>,
    near_duplicate_cosine: f32,
    expiry: Expiry,
) -> Memories {
    let scope = fixes.scope.clone();
    let min_score = fixes.min_score;
    Memories {
        fixes: Arc::new(FixMemory::new(store.clone(), embedder.clone(), fixes)),
        archival: Arc::new(ArchivalMemory::new(
            store.clone(),
            embedder.clone(),
            ArchivalConfig {
                scope: scope.clone(),
                near_duplicate_cosine,
                fusion: Fusion { min_score, ..Fusion::archival() },
            },
        )),
        conversation: Arc::new(ConversationMemory::new(
            store.clone(),
            embedder,
            Fusion { min_score, ..Fusion::conversation() },
        )),
        core: Arc::new(CoreMemory::new(store.clone(), scope.clone(), core_blocks)),
        forget: store.clone(),
        uses: UseLog::start(store.clone(), &scope.actor_id, expiry),
        browse: store,
        scope,
    }
}

/// Starts opening the store, then loading the model, in the background, off the request path
/// (`initialize` is answered while they run), and returns the tool hosts (the configured actor's, and
/// one per bearer-token identity, each created at its first request once the store is open) with the
/// store's opening, which the caller awaits or races against serving so that a store that cannot be
/// opened still ends the process with its error.
pub fn serve(settings: &ServeSettings) -> (Hosts, StoreOpening) {
    let store_settings = settings.store.clone();
    let embedder = settings.store.embedder(Workload::Interactive);
    // The model loads once the store is open (a few ms), so a store that cannot be opened ends the
    // process without waiting for a model load it never needs.
    let loading = embedder.clone();
    let opening = tokio::spawn(async move {
        let store = open_store(&store_settings).await.map(Arc::new);
        if store.is_ok() {
            loading.start_loading();
        }
        store
    });
    let opening: StoreOpening = async move {
        match opening.await {
            Ok(opened) => opened.map_err(Arc::new),
            Err(join) => Err(Arc::new(anyhow::anyhow!("opening the memory store failed: {join}"))),
        }
    }
    .boxed()
    .shared();
    let (fixes, blocks, near, expiry) = (
        settings.fixes.clone(),
        settings.store.core_blocks.clone(),
        settings.near_duplicate_cosine,
        settings.store.expiry,
    );
    // the label the workspace's git remote gave, and the folder label an existing store may still use
    let remote_label = settings.fixes.scope.project.clone();
    let folder_label = settings.choice.folder_label.clone();
    let store = opening.clone();
    let hosts = Hosts::new(
        settings.fixes.scope.clone(),
        settings.store.core_blocks.clone(),
        settings.tool_timeout,
        Box::new(move |mut scope| {
            let (store, embedder, blocks) = (store.clone(), embedder.clone(), blocks.clone());
            let (fixes, remote_label, folder_label) = (fixes.clone(), remote_label.clone(), folder_label.clone());
            async move {
                let store = store.await.map_err(|e| anyhow::anyhow!("{e:#}"))?;
                if scope.project == remote_label {
                    scope.project =
                        existing_label(&store, &scope.actor_id, &remote_label, folder_label.as_deref()).await;
                }
                let fixes = FixMemoryConfig { scope, ..fixes };
                let mut memories = memories(store, embedder, fixes, blocks, near, expiry);
                // a server answers many searches: their usage comes from memory, not the table
                memories.uses = memories.uses.cached();
                Ok(memories)
            }
            .boxed()
        }),
    );
    (hosts, opening)
}

/// The project label `actor`'s memories of a workspace use in `store`: `folder` (the workspace folder's
/// name, which earlier versions used) when the store holds `actor`'s memories under it and none under
/// `label` (the label from the git remote), so that an existing store keeps its name; else `label`.
/// Said at info on stderr when the folder label is kept. A store that cannot be read gives `label`.
pub async fn existing_label(store: &LanceStore, actor: &str, label: &str, folder: Option<&str>) -> String {
    let Some(folder) = folder.filter(|f| *f != label) else { return label.to_string() };
    let held = async {
        Ok::<_, crate::store::StoreError>(
            !store.holds_project(actor, label).await? && store.holds_project(actor, folder).await?,
        )
    };
    match held.await {
        Ok(true) => {
            tracing::info!(
                "project label `{folder}` kept for actor `{actor}`: this store holds its memories under the \
                 workspace folder's name and none under `{label}`, the git remote's label (pass --project to choose)"
            );
            folder.to_string()
        }
        Ok(false) => label.to_string(),
        Err(e) => {
            tracing::warn!("cannot tell whether this store uses the project label `{folder}` ({e}): using `{label}`");
            label.to_string()
        }
    }
}

/// The project label of a command run in `cwd` outside a server, over `store`, the label a server
/// started in `cwd` files memories under: [`StoreSettings::project_in`], then [`existing_label`] as the
/// server settles it. The source says so when the store keeps the workspace folder's name.
///
/// # Errors
/// The workspace's `.astra-mcp.toml` cannot be used (the message names it).
pub async fn project_label(
    settings: &StoreSettings,
    store: &LanceStore,
    cwd: Option<&std::path::Path>,
) -> anyhow::Result<crate::memory::project::ProjectName> {
    let mut name = settings.project_in(cwd)?;
    let kept = existing_label(store, &settings.actor_id, &name.label, name.folder_label.as_deref()).await;
    if kept != name.label {
        name.source = format!(
            "the workspace folder's name, which this store holds actor `{}`'s memories under (none under `{}`, \
             the label of {})",
            settings.actor_id, name.label, name.source
        );
        name.label = kept;
    }
    Ok(name)
}

/// The store a server opens at launch ([`serve`]); clones share one opening. Resolves to
/// the open store, or to why it could not be opened (e.g. [`crate::store::StoreError::Open`]).
pub type StoreOpening = Shared<BoxFuture<'static, Result<Arc<LanceStore>, Arc<anyhow::Error>>>>;

/// Resolves only if `opening` fails, with its error: raced against serving, it ends the process when the
/// store cannot be opened and never otherwise.
pub async fn store_failure(opening: StoreOpening) -> anyhow::Error {
    match opening.await {
        Ok(_) => std::future::pending().await,
        Err(e) => anyhow::anyhow!("{e:#}"),
    }
}
