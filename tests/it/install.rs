//! The wheel (`scripts/wheel`, built by `scripts/test` from the tests' own release build) installed as the
//! README says, `uv tool install`, into a fresh home with nothing of this machine's cache, then driven
//! through the official MCP Python SDK: the verified loop works with the model and ONNX Runtime the wheel
//! itself installed.

use std::process::Command;

use serde_json::Value;

use crate::support::{in_fresh_home, install_wheel, pytest_command, repo, scenario, venv_python};

#[test]
fn the_wheel_installed_with_uv_serves_with_its_own_model() {
    let home = tempfile::tempdir().unwrap();
    let bin = install_wheel(home.path());
    let astra = bin.join("astra-mcp");
    // uv links the executable from the tool's own prefix, whose share/ holds the model and runtime
    let real = astra.canonicalize().unwrap();
    let prefix = real.parent().unwrap().parent().unwrap();
    assert!(prefix.starts_with(home.path().join(".local/share/uv/tools")), "{}", real.display());
    let share = prefix.join("share/astra-mcp");
    for file in
        ["models/all-MiniLM-L6-v2-int8/model.onnx", "onnxruntime/libonnxruntime.so.1.31.1", "licenses/NOTICE.md"]
    {
        assert!(share.join(file).is_file(), "the wheel did not install {file} into {}", share.display());
    }

    let (_guard, workspace) = scenario("scenario_alpha");
    let db = home.path().join("memory-db");
    let mut python = Command::new(venv_python());
    let output = in_fresh_home(&mut python, home.path())
        .arg(repo().join("tests/interop/stdio_interop.py"))
        .arg(&astra)
        .arg(&db)
        .arg(&workspace)
        .arg(repo().join("scripts/reference_fixes/scenario_alpha"))
        .arg(pytest_command())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the installed server failed the loop\nstdout: {stdout}\nstderr: {stderr}");
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(seen["ok"], Value::Bool(true), "{seen}");
    // a fix stored after a passing run, then found by meaning: the model ran
    assert!(seen["match_text_first_line"].as_str().unwrap().starts_with("Match 1 (fused_score="), "{seen}");
    // nothing was provisioned into the user's cache: the files came from the wheel
    assert!(!home.path().join(".cache/astra-mcp").exists(), "the installed binary wrote or needed ~/.cache/astra-mcp");
}
