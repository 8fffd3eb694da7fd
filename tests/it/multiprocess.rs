//! Several server processes on one store directory (issue 4), driven by the official Python SDK
//! (`tests/interop/multiprocess.py`): 2 processes x (200 fix stores + 200 archival inserts) at once, all
//! found afterwards from a third process; SIGKILL in the middle of writes loses nothing acknowledged;
//! a write through one running server is found through another within 1 s.

use std::process::Command;

use crate::support::{pytest_command, repo, run_client, venv_python};

#[test]
fn two_processes_lose_nothing_survive_sigkill_and_see_each_other_within_1_s() {
    let scratch = tempfile::tempdir().unwrap();
    let seen = run_client(
        Command::new(venv_python())
            .arg(repo().join("tests/interop/multiprocess.py"))
            .arg(env!("CARGO_BIN_EXE_astra-mcp"))
            .arg(scratch.path())
            .arg(repo().join("demo_projects/scenario_alpha"))
            .arg(pytest_command())
            .arg(repo().join("scripts/reference_fixes/scenario_alpha")),
    );
    let a = &seen["concurrent"];
    assert_eq!(a["acknowledged"]["fixes"], 400, "{a}");
    assert_eq!(a["acknowledged"]["passages"], 400, "{a}");
    assert_eq!(a["found"], a["acknowledged"], "{a}");
    assert_eq!(a["errors"], 0, "{a}");
    assert_eq!(a["search_sample"]["found"], a["search_sample"]["sampled"], "{a}");
    for round in seen["kill"].as_array().unwrap() {
        assert!(round["acknowledged"].as_u64().unwrap() >= 100, "{round}");
        assert_eq!(round["lost"], 0, "{round}");
    }
    assert_eq!(seen["kill"].as_array().unwrap().len(), 2);
    let v = &seen["visibility"];
    assert_eq!(v["trials"], 10, "{v}");
    assert!(v["max_ms"].as_f64().unwrap() < 1000.0, "{v}");
}
