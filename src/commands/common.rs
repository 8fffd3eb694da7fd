//! Helpers shared by several subcommands: the project label and the store of a command run outside a
//! server (opened with the identity of `StoreArgs`), the progress bar, and the Responses API settings.

use std::io::IsTerminal;

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

/// Opens the store of a command that inspects or changes existing memories: a mistyped `--db` is an
/// error, not a new empty store.
pub(super) async fn open_existing(settings: &StoreSettings) -> anyhow::Result<LanceStore> {
    LanceStore::require_existing(&settings.db).await?;
    app::open_store(settings).await
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

/// A progress bar on stderr when it is a terminal; hidden otherwise (logs and CI stay clean).
pub(super) fn progress_bar(total: u64, unit: &str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})");
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}

/// `name` from the environment, else from `.env` in the working directory.
fn env_or_dotenv(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty()).or_else(|| {
        dotenvy::from_path_iter(".env").ok()?.filter_map(Result::ok).find_map(|(k, v)| (k == name).then_some(v))
    })
}

/// The key comes from the environment, else from `.env` in the working directory (never a flag).
fn openai_api_key() -> Option<String> {
    env_or_dotenv(astra_mcp::env_vars::OPENAI_API_KEY)
}

/// `<data dir>/astra-mcp`: the default home of the ledger and the runs' evidence.
pub(super) fn data_dir() -> std::path::PathBuf {
    dirs::data_dir().unwrap_or_else(|| ".".into()).join("astra-mcp")
}

/// The Responses API base URL: flag > environment > `.env` > the OpenAI endpoint (a base URL in `.env`
/// must not be ignored while its key is used).
fn base_url(args: &astra_mcp::cli::ModelArgs) -> String {
    args.base_url
        .clone()
        .or_else(|| env_or_dotenv(astra_mcp::env_vars::OPENAI_BASE_URL))
        .unwrap_or_else(|| "https://api.openai.com/v1".to_string())
}

/// The model API settings of `args`: base URL, key (environment or `.env`), approval, model, prices,
/// ledger and request timeout.
pub(super) fn client_settings(args: &astra_mcp::cli::ModelArgs) -> astra_mcp::llm::ClientSettings {
    astra_mcp::llm::ClientSettings {
        base_url: base_url(args),
        api_key: openai_api_key(),
        approve_live_cost: args.approve_live_cost,
        model: args.model.clone(),
        pricing: astra_mcp::llm::Pricing {
            input_per_million_usd: args.input_usd_per_million,
            output_per_million_usd: args.output_usd_per_million,
        },
        ledger: args.ledger.clone().unwrap_or_else(|| data_dir().join("ledger.jsonl")),
        timeout_secs: args.request_timeout,
    }
}

/// The approval and the key, checked before anything is opened.
pub(super) fn preflight(client: &astra_mcp::llm::ClientSettings) -> anyhow::Result<()> {
    Ok(astra_mcp::llm::preflight(&client.base_url, client.approve_live_cost, client.api_key.as_deref())?)
}
