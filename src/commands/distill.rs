//! `astra-mcp distill`: one run for the actor, distilling its stored conversations into archival memories
//! and printing the changes, or `distill status`, the runs so far.

use std::sync::Arc;

use astra_mcp::app::OpenOptions;
use astra_mcp::app::open_existing;
use astra_mcp::cli::{DistillArgs, DistillCommand};
use astra_mcp::config::StoreSettings;
use astra_mcp::config::client_settings;
use astra_mcp::distill::{DistillConfig, Distiller};
use astra_mcp::embed::Workload;
use astra_mcp::memory::redact::escape_controls;

use super::common::preflight;

pub async fn run(args: DistillArgs, open: OpenOptions) -> anyhow::Result<()> {
    if let Some(DistillCommand::Status { db, actor, json }) = args.command {
        let db = db.unwrap_or_else(|| astra_mcp::config::default_db_path().to_string_lossy().into_owned());
        let store_args = astra_mcp::cli::StoreArgs { db: Some(db), ..args.store.clone() };
        let settings = StoreSettings::resolve(&store_args, open)?;
        let store = Arc::new(open_existing(&settings).await?);
        let runs = Distiller::new(store, settings.embedder(Workload::Batch)).status(actor.as_deref()).await?;
        print_runs(&runs, json);
        return Ok(());
    }
    let settings = StoreSettings::resolve(&args.store, open)?;
    let model = &args.model;
    let config = DistillConfig {
        actor_id: settings.actor_id.clone(),
        since: args.since,
        max_items: args.max_items.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        instructions: args.instructions.clone(),
        client: client_settings(model),
        max_output_tokens: model.max_output_tokens,
        reasoning_effort: model.reasoning_effort.clone(),
        run_budget_usd: model.run_budget_usd,
        actor_budget_usd: model.project_budget_usd,
    };
    // refuse before opening anything when no request may be sent
    preflight(&config.client)?;
    let store = Arc::new(open_existing(&settings).await?);
    let run = Distiller::new(store, settings.embedder(Workload::Batch)).run(&config).await?;
    println!(
        "distill run {} {}: {} items read; {} added, {} updated, {} superseded, {} unchanged, {} rejected; \
{} requests, {} input + {} output tokens, {:.4} USD",
        run.run_id,
        run.state.as_str(),
        run.items_read,
        run.added,
        run.updated,
        run.superseded,
        run.unchanged,
        run.rejected,
        run.requests,
        run.input_tokens,
        run.output_tokens,
        run.cost_usd
    );
    for change in &run.changes {
        let field = |k: &str| change[k].as_str().unwrap_or_default().to_string();
        let line = match field("action").as_str() {
            "add" => format!("  + {} {}", field("memory_id"), field("text")),
            "update" => format!("  ~ {} {} (was: {})", field("memory_id"), field("text"), field("previous_text")),
            "supersede" => {
                format!(
                    "  ! {} {} (supersedes {}: {})",
                    field("memory_id"),
                    field("text"),
                    field("target_id"),
                    field("previous_text")
                )
            }
            _ => format!("  = {} {}", field("memory_id"), field("text")),
        };
        println!("{}", astra_mcp::app::lance::preview(&line, 2_000));
    }
    Ok(())
}

/// `distill status`: a table, or JSON lines.
fn print_runs(runs: &[astra_mcp::distill::RunStatus], json: bool) {
    if json {
        if runs.is_empty() {
            // stdout stays valid (empty) JSON lines; the person reading learns why it is empty
            eprintln!("astra-mcp: no distill runs");
        }
        for status in runs {
            let mut value = serde_json::to_value(&status.run).expect("runs serialize");
            value["interrupted"] = serde_json::json!(status.interrupted);
            println!("{value}");
        }
        return;
    }
    if runs.is_empty() {
        println!("no distill runs");
        return;
    }
    println!(
        "{:<36} {:<16} {:<10} {:<20} {:>5} {:>5} {:>7} {:>10} {:>8}  ERROR",
        "RUN", "ACTOR", "STATE", "STARTED", "READ", "ADDED", "UPDATED", "SUPERSEDED", "USD"
    );
    for status in runs {
        let r = &status.run;
        let state = if status.interrupted { "RUNNING*" } else { r.state.as_str() };
        let error = r.error.clone().unwrap_or_default();
        let line = format!(
            "{:<36} {:<16} {:<10} {:<20} {:>5} {:>5} {:>7} {:>10} {:>8.4}  {}",
            r.run_id,
            r.actor_id,
            state,
            r.started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            r.items_read,
            r.added,
            r.updated,
            r.superseded,
            r.cost_usd,
            error.chars().take(200).collect::<String>()
        );
        println!("{}", escape_controls(&line));
    }
    if runs.iter().any(|s| s.interrupted) {
        println!("* interrupted: no process holds the run's lock; the actor's next run closes it");
    }
}
