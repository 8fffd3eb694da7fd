//! The real `astra-mcp` binary: MCP over its stdio pipes (rmcp's child-process client), answers before
//! the model is loaded, a clear error when the model is missing, persistence across processes (the
//! smoke check), and the schema drift check as a command.

use assert_cmd::Command;
use predicates::prelude::PredicateBooleanExt;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::json;

use crate::support::args;

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

#[tokio::test]
async fn serves_tools_before_the_model_loads_and_names_the_fix_when_it_is_missing() {
    let db = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap(); // no model here
    let transport = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|cmd| {
        cmd.args(["serve", "--stdio", "--db"])
            .arg(db.path())
            .arg("--model-dir")
            .arg(empty.path())
            .env("ASTRA_LOG", "warn");
    }))
    .unwrap();
    let client = ().serve(transport).await.expect("initialize answers without the model");
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 3);
    let result = client
        .call_tool(
            CallToolRequestParams::new("search_codebase_memory")
                .with_arguments(args(json!({"query": "x", "error_type": null, "top_k": 1}))),
        )
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    let text = result.content[0].as_text().unwrap().text.clone();
    assert!(text.contains("model.onnx") && text.contains("scripts/setup"), "{text}");
    client.cancel().await.unwrap();
}

#[test]
fn smoke_store_then_verify_in_separate_processes() {
    let db = tempfile::tempdir().unwrap();
    let stored = Command::new(BIN).args(["smoke", "store", "--db"]).arg(db.path()).env("ASTRA_LOG", "warn").assert().success();
    let id = String::from_utf8(stored.get_output().stdout.clone()).unwrap().trim().to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "smoke store prints the memory_id: {id:?}");
    Command::new(BIN)
        .args(["smoke", "verify", "--db"])
        .arg(db.path())
        .args(["--memory-id", &id])
        .assert()
        .success()
        .stdout(predicates::str::contains(format!("ok: {id} persisted")));
    // verify deleted it: a second verify fails and says why
    Command::new(BIN)
        .args(["smoke", "verify", "--db"])
        .arg(db.path())
        .args(["--memory-id", &id])
        .assert()
        .failure()
        .stderr(predicates::str::contains("astra-mcp: smoke fix").and(predicates::str::contains("did not persist")));
}

#[test]
fn schema_files_are_current_and_the_check_command_agrees() {
    Command::new(BIN).args(["schemas", "--check", "--out"]).arg(crate::support::repo().join("schemas")).assert().success();
    let empty = tempfile::tempdir().unwrap();
    Command::new(BIN)
        .args(["schemas", "--check", "--out"])
        .arg(empty.path())
        .assert()
        .failure()
        .stderr(predicates::str::contains("run `astra-mcp schemas`"));
}

#[test]
fn bad_configuration_is_one_clear_line_and_exit_1() {
    let missing = tempfile::tempdir().unwrap().path().join("nope");
    Command::new(BIN)
        .args(["serve", "--workspace"])
        .arg(&missing)
        .assert()
        .code(1)
        .stderr(predicates::str::starts_with("astra-mcp: --workspace (ASTRA_WORKSPACE) must name an existing directory"));
}
