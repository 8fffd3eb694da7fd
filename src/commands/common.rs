//! Helpers shared by several subcommands: the project label of a command run outside a server, the
//! note on other actors, and the model API preflight.

use astra_mcp::app;
use astra_mcp::app::LanceStore;
use astra_mcp::config::StoreSettings;

/// The project label of a command run outside a server, and where it came from: the label a server
/// started in the current directory uses ([`app::project_label`]: `--project`, else the workspace's
/// `.astra-mcp.toml`, git remote or folder name, else `default`).
pub(super) async fn cli_project(
    settings: &StoreSettings,
    db: &LanceStore,
) -> anyhow::Result<astra_mcp::memory::project::ProjectName> {
    app::project_label(settings, db, std::env::current_dir().ok().as_deref()).await
}

/// `; <which other actors the store holds>` for a command that found nothing of `actor` in `db`
/// ([`astra_mcp::store::other_actors_note`]); empty when `actor` is the only one with memories, or
/// when the count cannot be read (the command's own answer stands).
pub(super) async fn actors_note(db: &LanceStore, actor: &str) -> String {
    match db.actor_counts().await {
        Ok(counts) => astra_mcp::store::other_actors_note(actor, &counts).map(|n| format!("; {n}")).unwrap_or_default(),
        Err(e) => {
            tracing::debug!("counting the store's actors: {e}");
            String::new()
        }
    }
}

/// The approval and the key, checked before anything is opened.
pub(super) fn preflight(client: &astra_mcp::llm::ClientSettings) -> anyhow::Result<()> {
    Ok(astra_mcp::llm::preflight(&client.base_url, client.approve_live_cost, client.api_key.as_deref())?)
}
