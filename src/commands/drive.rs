//! `astra-mcp drive`: one Responses API run on this server's tools; prints the final text and the
//! run's counts.

use anyhow::Context;

use astra_mcp::app;
use astra_mcp::app::OpenOptions;
use astra_mcp::cli::{DriveArgs, ServeArgs};
use astra_mcp::config::ServeSettings;

use super::common::preflight;

pub async fn run(args: DriveArgs, open: OpenOptions) -> anyhow::Result<()> {
    let prompt = match (&args.prompt, &args.prompt_file) {
        (Some(text), _) => text.clone(),
        (None, Some(file)) => {
            std::fs::read_to_string(file).with_context(|| format!("reading --prompt-file {}", file.display()))?
        }
        (None, None) => "The tests of this workspace fail. Fix the code (not the tests) so they pass.".to_string(),
    };
    anyhow::ensure!(!args.run_id.trim().is_empty(), "--run-id is empty: give the run an id");
    let serve = ServeArgs {
        stdio: true,
        http: None,
        allow_remote: false,
        config: None,
        shutdown_grace: 30,
        limits: astra_mcp::cli::LimitArgs::default(),
        store: args.store.clone(),
        workspace: Some(args.workspace.clone()),
        test_command: args.test_command.clone(),
        test_timeout: args.test_timeout,
        tool_timeout: astra_mcp::cli::DEFAULT_TOOL_TIMEOUT_SECS,
        trust_client_outcomes: false,
        min_score: astra_mcp::memory::DEFAULT_MIN_SCORE,
        near_duplicate_cosine: astra_mcp::memory::DEFAULT_NEAR_DUPLICATE_COSINE,
    };
    let settings = ServeSettings::resolve(&serve, open)?;
    let workspace = settings.fixes.workspace.clone().context("--workspace is required")?;
    let config = astra_mcp::drive::DriveConfig::from_args(&args.model, &args.tool_loop, args.run_id.trim(), prompt);
    // refuse before opening anything when no request may be sent
    preflight(&config.client)?;
    let (hosts, opening) = app::serve(&settings);
    opening.await.map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let host = hosts.host(hosts.default_scope()).await?;
    let result = astra_mcp::drive::run(&host, &workspace, &config).await;
    hosts.flush().await;
    let report = result?;
    println!("{}", report.final_text);
    eprintln!(
        "astra-mcp drive: {} requests in {} chain(s), {} tool calls, {} input + {} output tokens, {:.4} USD; evidence in {}",
        report.requests,
        report.chains,
        report.tool_calls,
        report.input_tokens,
        report.output_tokens,
        report.cost_usd,
        config.runs_dir.join(&config.run_id).display()
    );
    Ok(())
}
