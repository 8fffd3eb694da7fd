//! Interop with the official MCP Python SDK over stdio (`tests/interop/stdio_interop.py`, SDK pinned in
//! `scripts/requirements.txt`): an independent client drives the real binary through the whole loop.

use std::process::Command;

use serde_json::Value;

use crate::support::{pytest_command, repo, scenario, venv_python};

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
    assert!(seen["match_text_first_line"].as_str().unwrap().starts_with("Match 1 (score=0."), "{seen}");
    assert_eq!(
        seen["resources"],
        serde_json::json!(["memory://core/persona", "memory://core/human", "memory://core/project"])
    );
    assert!(seen["archival_first_line"].as_str().unwrap().starts_with("Result 1 (score="), "{seen}");
}
