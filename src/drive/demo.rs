//! `astra-mcp-dev session-demo`: the cross-session experiment. `drive` runs on a fresh copy of
//! scenario_alpha, then, in a new chain and a new session on the same store, on a fresh copy of
//! scenario_beta. The run is judged from its evidence files, not from what the model says:
//!
//! - no run's first request carried `previous_response_id`;
//! - beta's memory search returned alpha's stored fix before beta's first `apply_edit`;
//! - the original acceptance tests, untouched, pass on a fresh copy that gets only the agent's changes to
//!   non-test files (an agent that edits the tests gains nothing).
//!
//! With `repeat`, beta runs that many more times against alpha's memory alone: what beta runs store is
//! removed before the next one.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use super::{DriveConfig, DriveError, DriveReport};
use crate::domain::Scope;
use crate::embed::LazyEmbedder;
use crate::memory::project::TestCommand;
use crate::memory::workspace::Workspace;
use crate::memory::{BlockSpec, FixMemoryConfig};
use crate::store::ForgetStore;
use crate::store::lance::LanceStore;
use crate::tools::ToolHost;

/// The task each session gets.
pub const DEMO_PROMPT: &str = "The acceptance tests of this project fail. Find out why and fix the application \
code (not the tests) so that they pass, following the memory workflow in your instructions.";

/// How the experiment runs.
#[derive(Debug, Clone)]
pub struct DemoSettings {
    /// Folder holding `scenario_alpha` and `scenario_beta`.
    pub projects: PathBuf,
    pub test_command: String,
    pub test_timeout: Duration,
    /// The experiment's id; sessions are `<id>-alpha`, `<id>-beta`, `<id>-beta-r1`, ….
    pub run_id: String,
    pub repeat: usize,
    pub actor_id: String,
    /// The drive settings every session shares (its `run_id` and `prompt` are set per session).
    pub drive: DriveConfig,
}

/// One row of the result table.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoRow {
    pub session: String,
    /// Beta sessions: did the memory search return alpha's fix before the first edit? `None` for alpha.
    pub memory_retrieved: Option<bool>,
    pub requests: usize,
    pub tool_calls: usize,
    /// The untouched acceptance tests on a fresh copy with the agent's app changes.
    pub untouched_tests_passed: bool,
    pub cost_usd: f64,
    /// Why the run stopped early, when it did (a gate or a limit).
    pub stopped: Option<String>,
    /// Its first request carried no `previous_response_id`.
    pub new_chain: bool,
}

/// What the experiment found.
#[derive(Debug, Clone, PartialEq)]
pub struct DemoReport {
    pub rows: Vec<DemoRow>,
    /// The memory id of the fix alpha stored, if it stored one.
    pub alpha_fix: Option<String>,
}

impl DemoReport {
    /// The table the command prints.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| session | memory retrieved | requests | tool calls | untouched tests | cost (USD) |\n| --- | --- | --- | --- | --- | --- |\n",
        );
        for r in &self.rows {
            let retrieved = r.memory_retrieved.map_or("-", |y| if y { "yes" } else { "no" });
            let tests = if r.untouched_tests_passed { "pass" } else { "fail" };
            let stopped = r.stopped.as_deref().map(|s| format!(" (stopped: {s})")).unwrap_or_default();
            out.push_str(&format!(
                "| {}{stopped} | {retrieved} | {} | {} | {tests} | {:.4} |\n",
                r.session, r.requests, r.tool_calls, r.cost_usd
            ));
        }
        out
    }
}

/// Runs the experiment over `store` (shared by every session).
///
/// # Errors
/// Transport, authentication and budget failures of a run, and a missing project or unwritable copy.
pub async fn run(
    store: Arc<LanceStore>,
    embedder: LazyEmbedder,
    blocks: Vec<BlockSpec>,
    settings: &DemoSettings,
) -> anyhow::Result<DemoReport> {
    let scratch = tempfile::tempdir().context("creating a scratch directory for the project copies")?;
    let session = |name: &str, suffix: &str| Session {
        scenario: name.to_string(),
        run_id: format!("{}-{suffix}", settings.run_id),
    };
    let mut report = DemoReport { rows: Vec::new(), alpha_fix: None };
    let alpha = session("scenario_alpha", "alpha");
    let (row, events) = one_session(&store, &embedder, &blocks, settings, &alpha, scratch.path(), None).await?;
    report.alpha_fix = stored_ids(&events).into_iter().find(|(tool, _)| tool == "store_fix_memory").map(|(_, id)| id);
    report.rows.push(row);
    let mut beta_runs = vec![session("scenario_beta", "beta")];
    beta_runs.extend((1..=settings.repeat).map(|r| session("scenario_beta", &format!("beta-r{r}"))));
    for (i, beta) in beta_runs.iter().enumerate() {
        let (row, events) =
            one_session(&store, &embedder, &blocks, settings, beta, scratch.path(), report.alpha_fix.as_deref())
                .await?;
        report.rows.push(row);
        if settings.repeat > 0 && i < beta_runs.len() - 1 {
            // the next beta run must see alpha's memory alone
            for (_, id) in stored_ids(&events) {
                if let Ok(id) = uuid::Uuid::parse_str(&id) {
                    store.forget(&settings.actor_id, id).await.context("removing what a beta run stored")?;
                }
            }
        }
    }
    Ok(report)
}

struct Session {
    scenario: String,
    run_id: String,
}

/// Runs one session on a fresh copy; returns its row and its events.
async fn one_session(
    store: &Arc<LanceStore>,
    embedder: &LazyEmbedder,
    blocks: &[BlockSpec],
    settings: &DemoSettings,
    session: &Session,
    scratch: &Path,
    alpha_fix: Option<&str>,
) -> anyhow::Result<(DemoRow, Vec<Value>)> {
    let original = settings.projects.join(&session.scenario);
    anyhow::ensure!(original.is_dir(), "{} is not a directory: pass --projects DIR", original.display());
    let copy = scratch.join(&session.run_id);
    copy_tree(&original, &copy)?;
    let fixes = FixMemoryConfig {
        scope: Scope { actor_id: settings.actor_id.clone(), project: session.scenario.clone() },
        workspace: Some(Workspace::open(&copy)?),
        test_command: Some(TestCommand::given(settings.test_command.clone())),
        test_timeout: settings.test_timeout,
        trust_client_outcomes: false,
        min_score: crate::memory::DEFAULT_MIN_SCORE,
    };
    let host = ToolHost::new(crate::app::memories(
        store.clone(),
        embedder.clone(),
        fixes,
        blocks.to_vec(),
        crate::memory::DEFAULT_NEAR_DUPLICATE_COSINE,
        crate::memory::uses::Expiry::days(crate::memory::uses::DEFAULT_EXPIRE_AFTER_DAYS),
    ));
    let config =
        DriveConfig { run_id: session.run_id.clone(), prompt: DEMO_PROMPT.to_string(), ..settings.drive.clone() };
    let result = super::run(&host, &Workspace::open(&copy)?, &config).await;
    host.flush().await;
    let (report, stopped) = match result {
        Ok(report) => (report, None),
        Err(e @ (DriveError::MemoryGate | DriveError::Limit(_))) => (DriveReport::default(), Some(e.to_string())),
        Err(e) => return Err(e).with_context(|| format!("session {}", session.run_id)),
    };
    let evidence = config.runs_dir.join(&config.run_id);
    let events = read_jsonl(&evidence.join("events.jsonl"));
    let transcript = read_jsonl(&evidence.join("transcript.jsonl"));
    let new_chain = transcript.first().is_some_and(|t| t["request"].get("previous_response_id").is_none());
    let untouched_tests_passed =
        untouched_tests_pass(&original, &copy, &scratch.join(format!("{}-check", session.run_id)), settings).await?;
    let memory_retrieved = alpha_fix.map(|id| retrieved_before_first_edit(&events, id));
    // a run that stopped early has no report: count from its evidence
    let (requests, tool_calls) =
        if stopped.is_some() { count(&events, &transcript) } else { (report.requests, report.tool_calls) };
    Ok((
        DemoRow {
            session: session.run_id.clone(),
            memory_retrieved,
            requests,
            tool_calls,
            untouched_tests_passed,
            cost_usd: report.cost_usd,
            stopped,
            new_chain,
        },
        events,
    ))
}

/// Requests and tool calls from the evidence (for runs that stopped early).
fn count(events: &[Value], transcript: &[Value]) -> (usize, usize) {
    (transcript.len(), events.iter().filter(|e| e["event"] == "tool_call").count())
}

fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// `(tool, id)` of every memory a run stored: fixes and (new) archival passages.
fn stored_ids(events: &[Value]) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| e["event"] == "tool_call" && e["detail"]["is_error"] == false)
        .filter_map(|e| {
            let d = &e["detail"];
            let s = &d["structured"];
            match d["name"].as_str()? {
                "store_fix_memory" => Some(("store_fix_memory".to_string(), s["memory_id"].as_str()?.to_string())),
                "archival_memory_insert" if s["deduplicated"] == false => {
                    Some(("archival_memory_insert".to_string(), s["id"].as_str()?.to_string()))
                }
                _ => None,
            }
        })
        .collect()
}

/// Did a `search_codebase_memory` result list `fix_id` before the first `apply_edit`?
fn retrieved_before_first_edit(events: &[Value], fix_id: &str) -> bool {
    for e in events.iter().filter(|e| e["event"] == "tool_call") {
        let d = &e["detail"];
        match d["name"].as_str() {
            Some("apply_edit") => return false,
            Some("search_codebase_memory") => {
                let matches = d["structured"]["matches"].as_array().cloned().unwrap_or_default();
                if matches.iter().any(|m| m["memory_id"] == fix_id) {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// A test file: under a `tests` folder, `test_*.py`, `*_test.py`, or `conftest.py`.
fn is_test_file(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    rel.split('/').any(|p| p == "tests" || p == "test")
        || name.starts_with("test_")
        || name.ends_with("_test.py")
        || name == "conftest.py"
}

/// Copies the agent's changed non-test files onto a fresh copy of the original and runs the original
/// tests there.
async fn untouched_tests_pass(
    original: &Path,
    worked: &Path,
    check: &Path,
    settings: &DemoSettings,
) -> anyhow::Result<bool> {
    copy_tree(original, check)?;
    let before = files(original)?;
    for rel in files(worked)? {
        if is_test_file(&rel) {
            continue;
        }
        let new = std::fs::read(worked.join(&rel))?;
        if !before.contains(&rel) || std::fs::read(original.join(&rel))? != new {
            let dest = check.join(&rel);
            if let Some(dir) = dest.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::write(dest, new)?;
        }
    }
    let mut command = crate::memory::testrun::shell(&settings.test_command);
    command.current_dir(check).kill_on_drop(true);
    command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    match tokio::time::timeout(settings.test_timeout, command.status()).await {
        Ok(status) => Ok(status.context("running the untouched acceptance tests")?.success()),
        Err(_) => Ok(false),
    }
}

/// Relative paths of the regular files under `root` (caches left out).
fn files(root: &Path) -> anyhow::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for entry in ignore::WalkBuilder::new(root).hidden(false).git_ignore(false).build() {
        let entry = entry?;
        if entry.file_type().is_some_and(|t| t.is_file()) {
            let rel = entry.path().strip_prefix(root)?.to_string_lossy().replace('\\', "/");
            if !rel.contains("__pycache__") && !rel.contains(".pytest_cache") {
                out.insert(rel);
            }
        }
    }
    Ok(out)
}

fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    for rel in files(from)? {
        let dest = to.join(&rel);
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::copy(from.join(&rel), &dest).with_context(|| format!("copying {rel}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_files_are_recognised() {
        for rel in ["tests/test_cors.py", "conftest.py", "pkg/test_x.py", "pkg/x_test.py", "test/helpers.py"] {
            assert!(is_test_file(rel), "{rel}");
        }
        for rel in ["webapp/settings.py", "auditlog/sinks.py", "contest.py"] {
            assert!(!is_test_file(rel), "{rel}");
        }
    }
}
