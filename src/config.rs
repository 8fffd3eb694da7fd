//! Resolved settings. Precedence is flag > environment variable > default: clap applies the first two
//! (`cli.rs`), this module fills in defaults that depend on the machine (data dir, cache dir, workspace
//! name) and opens what the settings name.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::cli::{ServeArgs, StoreArgs};
use crate::domain::Scope;
use crate::embed::{LazyEmbedder, ModelPaths};
use crate::memory::core::{BlockSpec, parse_block_specs};
use crate::memory::workspace::Workspace;
use crate::memory::{
    ArchivalConfig, ArchivalMemory, ConversationMemory, CoreMemory, FixMemory, FixMemoryConfig, Fusion,
};
use crate::store::lance::LanceStore;
use crate::tools::{Memories, ToolHost};

/// Project label used when there is neither `--project` nor a workspace.
pub const DEFAULT_PROJECT: &str = "default";

/// The default store location: `<data dir>/astra-mcp/db` (`~/.local/share/astra-mcp/db` on Linux).
pub fn default_db_path() -> PathBuf {
    dirs::data_dir().unwrap_or_else(|| PathBuf::from(".")).join("astra-mcp").join("db")
}

/// Store path, model paths and identity from [`StoreArgs`].
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub db: String,
    pub actor_id: String,
    pub project: Option<String>,
    pub model: ModelPaths,
    /// Core memory blocks and their character limits.
    pub core_blocks: Vec<BlockSpec>,
}

impl StoreSettings {
    pub fn resolve(args: &StoreArgs) -> anyhow::Result<Self> {
        let actor_id = args.actor.trim().to_string();
        anyhow::ensure!(!actor_id.is_empty(), "--actor (ASTRA_ACTOR) is empty: give an actor id");
        let cache = ModelPaths::in_cache(&ModelPaths::default_cache_dir());
        Ok(Self {
            db: args.db.clone().unwrap_or_else(|| default_db_path().to_string_lossy().into_owned()),
            actor_id,
            project: args.project.as_ref().map(|p| p.trim().to_string()).filter(|p| !p.is_empty()),
            model: ModelPaths {
                model_dir: args.model_dir.clone().unwrap_or(cache.model_dir),
                ort_dylib: args.ort_dylib.clone().unwrap_or(cache.ort_dylib),
            },
            core_blocks: parse_block_specs(args.core_blocks.as_deref())
                .map_err(|e| anyhow::anyhow!("--core-blocks (ASTRA_CORE_BLOCKS): {e}"))?,
        })
    }

    /// The project label: `--project`, else `fallback` (the workspace folder), else `default`.
    pub fn project_or(&self, fallback: Option<String>) -> String {
        self.project.clone().or(fallback).unwrap_or_else(|| DEFAULT_PROJECT.to_string())
    }

    /// Opens (creating) the store.
    pub async fn open_store(&self) -> anyhow::Result<LanceStore> {
        Ok(LanceStore::open(&self.db).await?)
    }

    /// The embedder over the configured model files (loaded on first use).
    pub fn embedder(&self) -> LazyEmbedder {
        LazyEmbedder::onnx(self.model.clone())
    }
}

/// Every memory tier over one open store, for `scope`.
pub fn memories(
    store: LanceStore,
    embedder: LazyEmbedder,
    fixes: FixMemoryConfig,
    core_blocks: Vec<BlockSpec>,
    near_duplicate_cosine: f32,
) -> Memories {
    let scope = fixes.scope.clone();
    let store = Arc::new(store);
    let fusion = Fusion { min_score: fixes.min_score, ..Fusion::default() };
    Memories {
        fixes: Arc::new(FixMemory::new(store.clone(), embedder.clone(), fixes)),
        archival: Arc::new(ArchivalMemory::new(
            store.clone(),
            embedder.clone(),
            ArchivalConfig { scope: scope.clone(), near_duplicate_cosine, fusion },
        )),
        conversation: Arc::new(ConversationMemory::new(store.clone(), embedder, fusion)),
        core: Arc::new(CoreMemory::new(store.clone(), scope.clone(), core_blocks)),
        forget: store,
        scope,
    }
}

/// Everything `serve` needs, resolved.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub store: StoreSettings,
    pub fixes: FixMemoryConfig,
    pub near_duplicate_cosine: f32,
}

impl ServeSettings {
    pub fn resolve(args: &ServeArgs) -> anyhow::Result<Self> {
        let store = StoreSettings::resolve(&args.store)?;
        let workspace = args
            .workspace
            .as_deref()
            .map(Workspace::open)
            .transpose()
            .context("--workspace (ASTRA_WORKSPACE) must name an existing directory")?;
        let project = store.project_or(workspace.as_ref().map(Workspace::folder_name));
        anyhow::ensure!(
            (0.0..=1.0).contains(&args.near_duplicate_cosine),
            "--near-duplicate-cosine (ASTRA_NEAR_DUPLICATE_COSINE) is a cosine similarity between 0 and 1, got {}",
            args.near_duplicate_cosine
        );
        anyhow::ensure!(
            (-1.0..=1.0).contains(&args.min_score),
            "--min-score (ASTRA_MIN_SCORE) is a cosine similarity between -1 and 1, got {}",
            args.min_score
        );
        let test_command = args.test_command.as_ref().map(|c| c.trim().to_string()).filter(|c| !c.is_empty());
        Ok(Self {
            fixes: FixMemoryConfig {
                scope: Scope { actor_id: store.actor_id.clone(), project },
                workspace,
                test_command,
                test_timeout: Duration::from_secs(args.test_timeout),
                trust_client_outcomes: args.trust_client_outcomes,
                min_score: args.min_score,
            },
            near_duplicate_cosine: args.near_duplicate_cosine,
            store,
        })
    }

    /// Opens the store and starts loading the model in the background (so the first requests are not
    /// delayed), returning the tool host every session shares.
    pub async fn open(&self) -> anyhow::Result<ToolHost> {
        let store = self.store.open_store().await?;
        let embedder = self.store.embedder();
        embedder.start_loading();
        Ok(ToolHost::new(memories(
            store,
            embedder,
            self.fixes.clone(),
            self.store.core_blocks.clone(),
            self.near_duplicate_cosine,
        )))
    }
}
