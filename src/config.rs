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
use crate::memory::workspace::Workspace;
use crate::memory::{FixMemory, FixMemoryConfig};
use crate::store::lance::LanceStore;
use crate::tools::ToolHost;

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
        })
    }
}

/// Everything `serve` needs, resolved.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub store: StoreSettings,
    pub fixes: FixMemoryConfig,
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
        let project = store
            .project
            .clone()
            .or_else(|| workspace.as_ref().map(Workspace::folder_name))
            .unwrap_or_else(|| DEFAULT_PROJECT.to_string());
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
            store,
        })
    }

    /// Opens the store and starts loading the model in the background (so the first requests are not
    /// delayed), returning the tool host every session shares.
    pub async fn open(&self) -> anyhow::Result<ToolHost> {
        let store = LanceStore::open(&self.store.db).await?;
        let embedder = LazyEmbedder::onnx(self.store.model.clone());
        embedder.start_loading();
        Ok(ToolHost::new(Arc::new(FixMemory::new(Arc::new(store), embedder, self.fixes.clone()))))
    }
}
