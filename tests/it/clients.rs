//! Real agent clients against the real binary: Codex CLI and Claude Code (pinned in
//! `tests/clients/package-lock.json`, installed by `scripts/setup`) each start astra-mcp from the
//! configuration docs/clients.md shows and do the main job with a scripted model on loopback
//! (`tests/clients/agent_job.py`, `tests/clients/scripted_model.py`). The scripted model decides nothing: it
//! plays fixed moves, and the checks are on what the client carried between our server and the model.
//! Offline, no key.

use std::process::Command;

use serde_json::Value;

use crate::support::{repo, venv_python};

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

/// Runs one job of `agent_job.py` and returns its JSON summary (the script's own checks already passed).
fn job(name: &str) -> Value {
    let work = tempfile::tempdir().unwrap();
    let client = repo().join("tests/clients/node_modules/.bin").join(if name == "codex" { "codex" } else { "claude" });
    assert!(client.exists(), "{} is missing: run scripts/setup", client.display());
    let output = Command::new(venv_python())
        .arg(repo().join("tests/clients/agent_job.py"))
        .args([name, BIN])
        .arg(work.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{name} job failed\nstdout: {stdout}\nstderr: {stderr}");
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("last line is not JSON ({e}): {stdout}"));
    assert_eq!(summary["ok"], Value::Bool(true), "{summary}");
    summary
}

/// What both clients must have carried back to the model in session 1 and session 2.
fn assert_the_job(summary: &Value) {
    let one = &summary["session_1"];
    assert!(one["refusal_search_first"].as_str().unwrap().contains("memory gate"), "{one}");
    assert!(one["refusal_files_changed"].as_str().unwrap().contains("workspace gate"), "{one}");
    assert!(!one["confirmed_outcome"].as_str().unwrap().is_empty(), "{one}");
    let two = &summary["session_2"];
    assert!(two["match_1"].as_str().unwrap().starts_with("Match 1 (fused_score="), "{two}");
    assert!(two["match_1_text"].as_str().unwrap().contains("Files: webapp/config.py"), "{two}");
    let transcript = &summary["transcript"];
    assert!(transcript["hit"].as_str().unwrap().contains("Fixed and remembered."), "{transcript}");
}

#[test]
fn codex_cli_does_the_job_and_both_clients_find_its_fix_over_http() {
    let summary = job("codex");
    assert_the_job(&summary);
    let sources = summary["transcript"]["sources"].as_array().unwrap();
    assert!(sources.contains(&Value::from("codex")), "{summary}");
    // Codex shows the model our schemas without their length and range limits (the server still checks
    // them), perhaps without the optional properties' `default` (the server applies it); nothing else
    // changes
    let schemas = &summary["schemas_rewritten"];
    assert_eq!(schemas["other_changes"], serde_json::json!([]), "{schemas}");
    let limits = ["maxItems", "maxLength", "maximum", "minLength", "minimum"];
    let dropped = &schemas["dropped_keywords"];
    assert!(
        *dropped == serde_json::json!(limits)
            || *dropped == serde_json::json!(["default", limits[0], limits[1], limits[2], limits[3], limits[4]]),
        "{schemas}"
    );
    // the fix Codex stored, found over streamable HTTP with a bearer token by Claude Code and by Codex
    for key in ["cross_http", "codex_http"] {
        let seen = &summary[key];
        assert!(seen["match_1"].as_str().unwrap().starts_with("Match 1 (fused_score="), "{key}: {seen}");
        assert!(seen["match_1_text"].as_str().unwrap().contains("Files: webapp/config.py"), "{key}: {seen}");
    }
}

#[test]
fn claude_code_does_the_job() {
    let summary = job("claude");
    assert_the_job(&summary);
    // Claude Code marks a refused call as an error result
    assert_eq!(summary["session_1"]["is_error"]["1"], Value::Bool(true), "{summary}");
    assert_eq!(summary["session_1"]["is_error"]["7"], Value::Bool(true), "{summary}");
    assert_ne!(summary["session_1"]["is_error"]["9"], Value::Bool(true), "{summary}");
    // Claude Code shows the model our schemas exactly as we list them
    let schemas = &summary["schemas_rewritten"];
    assert_eq!(schemas["tools_changed"], serde_json::json!([]), "{schemas}");
}

/// The real session files kept from the pinned clients (`tests/fixtures/transcripts/`) import through the
/// binary and their turns come back from `conversation_search`.
#[tokio::test]
async fn real_session_files_of_the_pinned_clients_import_and_are_found() {
    let db = tempfile::tempdir().unwrap();
    let files =
        ["codex-0.169.0.jsonl", "claude-code-2.1.328.jsonl"].map(|f| repo().join("tests/fixtures/transcripts").join(f));
    let output = Command::new(BIN)
        .args(["sessions", "import", "--project", "fixtures"])
        .args(&files)
        .env("ASTRA_DB", db.path())
        .env("ASTRA_ACTOR", "ann")
        .env("ASTRA_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains(": codex session "), "{stdout}");
    assert!(stdout.contains(": claude-code session "), "{stdout}");
    assert!(!stdout.contains(" 0 added"), "both files add items: {stdout}");

    use astra_mcp::memory::{ConversationMemory, ConversationSearch, Fusion};
    let store = astra_mcp::store::lance::LanceStore::open(db.path().to_str().unwrap()).await.unwrap();
    let memory =
        ConversationMemory::new(std::sync::Arc::new(store), crate::support::embedder(), Fusion::conversation());
    let query =
        ConversationSearch { query: "Found a remembered fix for this failure".into(), top_k: 10, ..Default::default() };
    let hits = memory.search("ann", &query).await.unwrap();
    let answers: Vec<&str> = hits
        .iter()
        .filter(|h| h.row.role.as_str() == "assistant" && h.row.text.contains("Found a remembered fix"))
        .map(|h| h.row.source.as_str())
        .collect();
    assert!(answers.contains(&"codex") && answers.contains(&"claude-code"), "{answers:?}");
}
