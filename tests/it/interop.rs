//! Interop with the official MCP Python SDK over stdio (`tests/interop/stdio_interop.py`, SDK pinned in
//! `scripts/requirements.txt`): an independent client drives the real binary through the whole loop.

use std::process::Command;

use serde_json::Value;

use crate::support::{HttpServer, pytest_command, repo, run_client, scenario, venv_python};

#[test]
fn python_sdk_drives_the_verified_loop_over_stdio() {
    let db = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let output = Command::new(venv_python())
        .arg(repo().join("tests/interop/stdio_interop.py"))
        .arg(env!("CARGO_BIN_EXE_astra-mcp"))
        .arg(db.path())
        .arg(&workspace)
        .arg(repo().join("scripts/reference_fixes/scenario_alpha"))
        .arg(pytest_command())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "python SDK interop failed\nstdout: {stdout}\nstderr: {stderr}");
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(seen["ok"], Value::Bool(true));
    assert_eq!(seen["server"], "astra-mcp");
    let names: Vec<&str> = astra_mcp::tools::specs().iter().map(|s| s.name).collect();
    assert_eq!(seen["tools"], serde_json::json!(names), "the Python SDK lists every tool, in order");
    assert_eq!(seen["failing_tests"], 4);
    assert!(seen["match_text_first_line"].as_str().unwrap().starts_with("Match 1 (fused_score="), "{seen}");
    assert_eq!(
        seen["resources"],
        serde_json::json!(["memory://core/persona", "memory://core/human", "memory://core/project"])
    );
    assert!(seen["archival_first_line"].as_str().unwrap().starts_with("Result 1 (fused_score="), "{seen}");
}

/// `tests/interop/<name>`.
fn interop(name: &str) -> std::path::PathBuf {
    repo().join("tests/interop").join(name)
}

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

/// A server over HTTP on a fresh store, and a directory for a stdio server's store.
fn http_server() -> ((tempfile::TempDir, tempfile::TempDir), HttpServer) {
    let (db, stdio_db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let server = HttpServer::start(db.path(), &[]);
    ((db, stdio_db), server)
}

/// The arguments of a client script for each transport: `stdio BINARY DB`, `http URL`, `sse URL`.
fn transports(server: &HttpServer, stdio_db: &std::path::Path) -> [Vec<String>; 3] {
    [
        vec!["stdio".to_string(), BIN.to_string(), stdio_db.display().to_string()],
        vec!["http".to_string(), server.url.clone()],
        vec!["sse".to_string(), server.sse_url()],
    ]
}

#[test]
fn python_sdk_over_streamable_http_and_legacy_sse() {
    let db = tempfile::tempdir().unwrap();
    let server = HttpServer::start(db.path(), &[]);
    for (transport, url) in [("http", server.url.clone()), ("sse", server.sse_url())] {
        let seen = run_client(Command::new(venv_python()).arg(interop("http_interop.py")).args([transport, &url]));
        assert_eq!(seen["server"], "astra-mcp");
        assert!(seen["archival_first_line"].as_str().unwrap().starts_with("Result 1 (fused_score="), "{seen}");
        assert_eq!(seen["sdk_warnings"], serde_json::json!([]), "{transport}: the SDK had nothing to complain about");
    }
}

#[test]
fn typescript_sdk_over_stdio_streamable_http_and_legacy_sse() {
    let ((_db, stdio_db), server) = http_server();
    for run in transports(&server, stdio_db.path()) {
        let seen = run_client(Command::new("node").arg(interop("ts_client.mjs")).args(&run));
        assert_eq!(seen["server"], "astra-mcp", "{run:?}");
        assert!(seen["archival_first_line"].as_str().unwrap().starts_with("Result 1 (fused_score="), "{run:?}: {seen}");
        assert_eq!(seen["resources"].as_array().unwrap().len(), 3, "{run:?}: {seen}");
    }
}

#[test]
fn inspector_cli_strict_over_stdio_streamable_http_and_legacy_sse() {
    let ((_db, stdio_db), server) = http_server();
    for run in transports(&server, stdio_db.path()) {
        let seen = run_client(Command::new(interop("inspector.sh")).args(&run));
        assert!(seen["strict"].as_str().unwrap().starts_with("0 errors"), "{run:?}: {seen}");
        let names: Vec<&str> = astra_mcp::tools::specs().iter().map(|s| s.name).collect();
        assert_eq!(seen["tools"], serde_json::json!(names), "{run:?}");
    }
}

#[test]
fn conformance_suite_generic_server_scenarios_pass_on_streamable_http() {
    let db = tempfile::tempdir().unwrap();
    let server = HttpServer::start(db.path(), &[]);
    let output = Command::new(interop("conformance.sh")).arg(&server.url).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("7 scenarios match the baseline"), "{stdout}");
}
