//! `astra-mcp core`: shows the core memory blocks, lists a block's history, restores an earlier version.

use std::sync::Arc;

use astra_mcp::app::LanceStore;
use astra_mcp::app::OpenOptions;
use astra_mcp::cli::CoreCommand;
use astra_mcp::config::StoreSettings;
use astra_mcp::domain::Scope;
use astra_mcp::memory::CoreMemory;

use super::common::{actors_note, cli_project, open_existing};

pub async fn run(command: CoreCommand, open: OpenOptions) -> anyhow::Result<()> {
    match command {
        CoreCommand::Show { store, section } => {
            let settings = StoreSettings::resolve(&store, open)?;
            let core = core_memory(&settings, open_existing(&settings).await?);
            let blocks = match section {
                Some(s) => vec![core.read(&s).await?],
                None => core.read_all().await?,
            };
            println!("{}", astra_mcp::tools::render_core_memory(&blocks));
        }
        CoreCommand::History { store, section } => {
            let settings = StoreSettings::resolve(&store, open)?;
            let db = open_existing(&settings).await?;
            let core = core_memory(&settings, db.clone());
            let history = core.history(&section).await?;
            if history.is_empty() {
                println!("{}{}", never_written(&section, &settings), actors_note(&db, &settings.actor_id).await);
            }
            for v in history {
                println!(
                    "version {} at {} by {}{}:",
                    v.version,
                    v.created_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    v.operation,
                    if v.session_id.is_empty() { String::new() } else { format!(" (session {})", v.session_id) }
                );
                for line in v.value.lines() {
                    println!("    {line}");
                }
            }
        }
        CoreCommand::Restore { store, section, version } => {
            let settings = StoreSettings::resolve(&store, open)?;
            let core = core_memory(&settings, open_existing(&settings).await?);
            let block = core.restore(&section, version, None).await?;
            println!("block `{section}` restored from version {version}; it is now version {}", block.version);
        }
    }
    Ok(())
}

/// What `core history` says of a block without versions: whose block it looked for, and in which
/// project for a project block (the current folder's name unless `--project` says otherwise), so a
/// block written from another folder does not read as lost.
fn never_written(section: &str, settings: &StoreSettings) -> String {
    let actor = &settings.actor_id;
    if astra_mcp::memory::core::ACTOR_BLOCKS.contains(&section) {
        format!("block `{section}` of actor `{actor}` has never been written")
    } else {
        let project = cli_project(settings);
        let from = match settings.project {
            Some(_) => "--project",
            None => "the current folder's name; pass --project NAME for another",
        };
        format!("block `{section}` of actor `{actor}` in project `{project}` ({from}) has never been written")
    }
}

fn core_memory(settings: &StoreSettings, store: LanceStore) -> CoreMemory {
    let scope = Scope { actor_id: settings.actor_id.clone(), project: cli_project(settings) };
    CoreMemory::new(Arc::new(store), scope, settings.core_blocks.clone())
}
