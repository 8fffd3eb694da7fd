//! `astra-mcp-dev session-demo`: alpha, then beta in a new session (and `--repeat` more betas); prints the
//! table, and fails when a check does.

use std::sync::Arc;

use crate::cli::SessionDemoArgs;
use astra_mcp::app;
use astra_mcp::app::OpenOptions;
use astra_mcp::config::StoreSettings;
use astra_mcp::drive::demo::{self, DemoSettings};
use astra_mcp::embed::Workload;

use astra_mcp::drive::DriveConfig;

pub async fn run(args: SessionDemoArgs, open: OpenOptions) -> anyhow::Result<()> {
    anyhow::ensure!(!args.run_id.trim().is_empty(), "--run-id is empty: give the experiment an id");
    let run_id = args.run_id.trim().to_string();
    let drive = DriveConfig::from_args(&args.model, &args.tool_loop, &run_id, String::new());
    astra_mcp::llm::preflight(&drive.client.base_url, drive.client.approve_live_cost, drive.client.api_key.as_deref())?;
    // The checks read the evidence of this experiment's runs: an id used before would mix in old ones.
    let used = [run_id.clone(), format!("{run_id}-alpha"), format!("{run_id}-beta")]
        .into_iter()
        .any(|name| drive.runs_dir.join(name).exists());
    anyhow::ensure!(
        !used,
        "--run-id `{run_id}` was used before (evidence under {}): give this experiment a new id",
        drive.runs_dir.display()
    );
    let mut store_args = args.store.clone();
    if store_args.db.is_none() {
        // the experiment keeps its own store unless told otherwise
        store_args.db = Some(drive.runs_dir.join(&run_id).join("db").to_string_lossy().into_owned());
    }
    let settings = StoreSettings::resolve(&store_args, open)?;
    let store = Arc::new(app::open_store(&settings).await?);
    let embedder = settings.embedder(Workload::Interactive);
    embedder.start_loading();
    let demo = DemoSettings {
        projects: args.projects.clone(),
        test_command: args.test_command.clone(),
        test_timeout: std::time::Duration::from_secs(args.test_timeout),
        run_id,
        repeat: args.repeat,
        actor_id: settings.actor_id.clone(),
        drive,
    };
    let report = demo::run(store, embedder, settings.core_blocks.clone(), &demo).await?;
    print!("{}", report.table());
    let mut failed = Vec::new();
    if report.alpha_fix.is_none() {
        failed.push("alpha stored no fix".to_string());
    }
    for row in &report.rows {
        if !row.new_chain {
            failed.push(format!("{}: its first request carried previous_response_id", row.session));
        }
        if row.memory_retrieved == Some(false) {
            failed.push(format!("{}: alpha's fix was not retrieved before the first edit", row.session));
        }
        if !row.untouched_tests_passed {
            failed.push(format!("{}: the untouched acceptance tests fail", row.session));
        }
    }
    anyhow::ensure!(failed.is_empty(), "session-demo checks failed: {}", failed.join("; "));
    eprintln!("astra-mcp-dev session-demo: every check passed (store {})", settings.db);
    Ok(())
}
