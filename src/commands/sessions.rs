//! `astra-mcp sessions import`: reads agent transcripts into conversation memory and prints what each
//! file added.

use std::sync::Arc;

use anyhow::Context;

use astra_mcp::app;
use astra_mcp::app::LanceStore;
use astra_mcp::app::OpenOptions;
use astra_mcp::cli::SessionsCommand;
use astra_mcp::config::StoreSettings;
use astra_mcp::embed::{LazyEmbedder, Workload};
use astra_mcp::memory::{ConversationMemory, Fusion};
use astra_mcp::sessions::formats::TranscriptFormat;
use astra_mcp::sessions::{self, Owner};

use super::common::cli_project;

pub async fn run(command: SessionsCommand, open: OpenOptions) -> anyhow::Result<()> {
    let SessionsCommand::Import { store, files, format, session_id } = command;
    let settings = StoreSettings::resolve(&store, open)?;
    let session_id = session_id.map(|s| s.trim().to_string());
    anyhow::ensure!(
        session_id.as_ref().is_none_or(|s| !s.is_empty()),
        "--session-id is empty: give an id or leave it out"
    );
    let format = format
        .map(|f| {
            TranscriptFormat::from_name(&f)
                .with_context(|| format!("--format `{f}`: use claude-code, codex or responses"))
        })
        .transpose()?;
    let db = app::open_store(&settings).await?;
    let owner = Owner { actor_id: settings.actor_id.clone(), project: cli_project(&settings, &db).await?.label };
    let memory = conversation_memory(db, settings.embedder(Workload::Batch));
    let mut failed = 0;
    for file in &files {
        match sessions::import_file(&memory, &owner, file, format, session_id.as_deref()).await {
            Ok(result) => print_imports(&result),
            Err(e) => {
                failed += 1;
                eprintln!("astra-mcp: {e:#}");
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {} files could not be imported", files.len());
    Ok(())
}

fn conversation_memory(store: LanceStore, embedder: LazyEmbedder) -> ConversationMemory {
    ConversationMemory::new(Arc::new(store), embedder, Fusion::conversation())
}

fn print_imports(result: &sessions::FileImport) {
    for s in &result.sessions {
        let forgotten = match s.counts.forgotten {
            0 => String::new(),
            n => format!(", {n} forgotten (not imported again)"),
        };
        println!(
            "{}: {} session {}: {} items read, {} added, {} already stored{forgotten}",
            s.path.display(),
            s.format,
            s.session_id,
            s.counts.read,
            s.counts.added,
            s.counts.already_stored
        );
    }
    if result.sessions.is_empty() {
        println!("(no conversation items found)");
    }
    if result.skipped_lines > 0 {
        eprintln!("astra-mcp: {} lines were not JSON objects and were skipped", result.skipped_lines);
    }
}
