//! `astra-mcp core`: shows the core memory blocks, lists a block's history, restores an earlier version.

use std::sync::Arc;

use astra_mcp::app::LanceStore;
use astra_mcp::app::OpenOptions;
use astra_mcp::app::open_existing;
use astra_mcp::cli::CoreCommand;
use astra_mcp::config::StoreSettings;
use astra_mcp::domain::Scope;
use astra_mcp::memory::CoreMemory;
use astra_mcp::memory::project::ProjectName;

use super::common::{actors_note, cli_project};

pub async fn run(command: CoreCommand, open: OpenOptions) -> anyhow::Result<()> {
    match command {
        CoreCommand::Show { store, section } => {
            let settings = StoreSettings::resolve(&store, open)?;
            let db = open_existing(&settings).await?;
            let project = cli_project(&settings, &db).await?;
            let core = core_memory(&settings, db.clone(), &project);
            let blocks = match section {
                Some(s) => vec![core.read(&s).await?],
                None => core.read_all().await?,
            };
            println!("{}", astra_mcp::tools::render_core_memory(&blocks));
            // an empty project block may be one written under another label: say which one was read
            let empty: Vec<&str> = blocks
                .iter()
                .filter(|b| b.version == 0 && !b.spec.is_actor_scoped())
                .map(|b| b.spec.name.as_str())
                .collect();
            if !empty.is_empty() {
                let (noun, have) = if empty.len() == 1 { ("block", "has") } else { ("blocks", "have") };
                eprintln!(
                    "astra-mcp: {noun} {} of actor `{}` in project `{}` ({}) {have} never been written{}",
                    empty.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", "),
                    settings.actor_id,
                    project.label,
                    project_source(&settings, &project),
                    actors_note(&db, &settings.actor_id).await
                );
            }
        }
        CoreCommand::History { store, section } => {
            let settings = StoreSettings::resolve(&store, open)?;
            let db = open_existing(&settings).await?;
            let project = cli_project(&settings, &db).await?;
            let core = core_memory(&settings, db.clone(), &project);
            let history = core.history(&section).await?;
            if history.is_empty() {
                println!(
                    "{}{}",
                    never_written(&section, &settings, &project),
                    actors_note(&db, &settings.actor_id).await
                );
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
            let db = open_existing(&settings).await?;
            let project = cli_project(&settings, &db).await?;
            let core = core_memory(&settings, db, &project);
            let block = core.restore(&section, version, None).await?;
            println!("block `{section}` restored from version {version}; it is now version {}", block.version);
        }
    }
    Ok(())
}

/// What `core history` says of a block without versions: whose block it looked for, and in which
/// project for a project block (and where that label came from), so a block written from another
/// folder does not read as lost.
fn never_written(section: &str, settings: &StoreSettings, project: &ProjectName) -> String {
    let actor = &settings.actor_id;
    if astra_mcp::memory::core::ACTOR_BLOCKS.contains(&section) {
        format!("block `{section}` of actor `{actor}` has never been written")
    } else {
        format!(
            "block `{section}` of actor `{actor}` in project `{}` ({}) has never been written",
            project.label,
            project_source(settings, project)
        )
    }
}

/// Where the project label came from, with how to choose another when it was not given.
fn project_source(settings: &StoreSettings, project: &ProjectName) -> String {
    match settings.project {
        Some(_) => project.source.clone(),
        None => format!("{}; pass --project NAME for another", project.source),
    }
}

fn core_memory(settings: &StoreSettings, store: LanceStore, project: &ProjectName) -> CoreMemory {
    let scope = Scope { actor_id: settings.actor_id.clone(), project: project.label.clone() };
    CoreMemory::new(Arc::new(store), scope, settings.core_blocks.clone())
}
