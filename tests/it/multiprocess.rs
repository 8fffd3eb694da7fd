//! Several server processes on one store directory (issue 4), driven by the official Python SDK
//! (`tests/interop/multiprocess.py`): 2 processes x (200 fix stores + 200 archival inserts) at once, all
//! found afterwards from a third process; SIGKILL in the middle of writes loses nothing acknowledged;
//! a write through one running server is found through another within 1 s; the same passages, core
//! block appends and transcript imports from two processes at once are each stored once. On a local
//! directory, and in a bucket of a real S3 server with every process its own machine.

use std::process::Command;

use crate::support::{pytest_command, repo, run_client, venv_python};

#[test]
fn two_processes_lose_nothing_survive_sigkill_and_see_each_other_within_1_s() {
    let scratch = tempfile::tempdir().unwrap();
    check_many_writers(&mut script(scratch.path()));
}

/// The same checks with the store in a bucket of a real S3 server on loopback and every process its
/// own machine (own HOME and caches): nothing but the bucket is shared, so no flock can help.
#[test]
fn two_machines_on_one_bucket_lose_nothing_survive_sigkill_and_see_each_other_within_1_s() {
    let s3 = crate::support::S3Server::start();
    let scratch = tempfile::tempdir().unwrap();
    let mut command = script(scratch.path());
    command.env("MP_DB_BASE", s3.uri("multiprocess")).envs(s3.env());
    check_many_writers(&mut command);
}

/// `tests/interop/multiprocess.py` over `scratch`, with the model from this machine's cache.
fn script(scratch: &std::path::Path) -> Command {
    let mut command = Command::new(venv_python());
    command
        .arg(repo().join("tests/interop/multiprocess.py"))
        .arg(env!("CARGO_BIN_EXE_astra-mcp"))
        .arg(scratch)
        .arg(repo().join("demo_projects/scenario_alpha"))
        .arg(pytest_command())
        .arg(repo().join("scripts/reference_fixes/scenario_alpha"))
        .env("ASTRA_CACHE_DIR", crate::support::cache_dir());
    command
}

fn check_many_writers(command: &mut Command) {
    let seen = run_client(command);
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
    let d = &seen["contention"];
    assert_eq!((d["distinct_texts"].as_u64(), d["passages"].as_u64()), (Some(30), Some(30)), "{d}");
    assert_eq!(
        (d["duplicated"].as_u64(), d["untagged"].as_u64(), d["errors"].as_u64()),
        (Some(0), Some(0), Some(0)),
        "{d}"
    );
    assert_eq!((d["block_versions"].as_u64(), d["lost_lines"].as_u64()), (Some(30), Some(0)), "{d}");
    assert!(d["items"].as_u64().unwrap() > 0 && d["items"] == d["distinct_items"], "{d}");
}

/// The same searches on the same store give the same whole answers (order, scores, every field) from
/// two server processes: fused ties are broken by a stable key and no score depends on the process.
#[tokio::test]
async fn two_server_processes_answer_the_same_searches_identically() {
    use astra_mcp::memory::gate::GateState;
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    use serde_json::{Value, json};

    use crate::support::{args, call, config, host};

    let db = tempfile::tempdir().unwrap();
    {
        // look-alike passages: the same words in many rows, so ties and near-ties are everywhere
        let host = host(db.path(), config("ann", "datekit", None, None)).await;
        let s = GateState::new("seed");
        for i in 0..24 {
            let service = ["billing", "search", "ledger"][i % 3];
            let text = format!("The {service} service runs on port {} behind the gateway.", 8000 + i % 8);
            assert!(!call(&host, &s, "archival_memory_insert", json!({"text": text})).await.is_error);
        }
        // the recorded calls written, so that no write of this process holds a table's lock below
        host.flush().await;
    }
    let transcripts = ["claude-code.jsonl", "codex.jsonl", "responses.jsonl"]
        .map(|f| repo().join("tests/fixtures/transcripts").join(f));
    // awaited, not blocking: this runtime's own tasks (upkeep) go on while the import waits for a lock
    let imported = tokio::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"))
        .args(["sessions", "import"])
        .args(&transcripts)
        .env("ASTRA_DB", db.path())
        .env("ASTRA_ACTOR", "ann")
        .env("ASTRA_PROJECT", "datekit")
        .env("ASTRA_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(imported.status.success(), "{}", String::from_utf8_lossy(&imported.stderr));

    let serve = || {
        TokioChildProcess::new(tokio::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp")).configure(|cmd| {
            cmd.args(["serve", "--stdio"])
                .env("ASTRA_DB", db.path())
                .env("ASTRA_ACTOR", "ann")
                .env("ASTRA_PROJECT", "datekit")
                .env("ASTRA_LOG", "warn");
        }))
        .unwrap()
    };
    let one = ().serve(serve()).await.unwrap();
    let other = ().serve(serve()).await.unwrap();
    let searches = [
        ("archival_memory_search", json!({"query": "service port behind the gateway", "top_k": 20})),
        ("archival_memory_search", json!({"query": "billing port 8003", "top_k": 10})),
        ("archival_memory_search", json!({"query": "gateway", "top_k": 20})),
        ("conversation_search", json!({"query": "date parser test", "top_k": 10})),
        ("conversation_search", json!({"query": "fix the failing test", "top_k": 20})),
        ("conversation_search", json!({"query": "the", "top_k": 20})),
        ("search_codebase_memory", json!({"query": "date parser fails", "error_type": null, "top_k": 5})),
    ];
    for (tool, arguments) in searches {
        let mut answers: Vec<(Value, Value)> = Vec::new();
        for client in [&one, &other] {
            let result = client
                .call_tool(CallToolRequestParams::new(tool).with_arguments(args(arguments.clone())))
                .await
                .unwrap();
            assert_ne!(result.is_error, Some(true), "{tool} {arguments}: {result:?}");
            answers.push(without_usage(json!(result.structured_content), json!(result.content)));
        }
        assert_eq!(answers[0], answers[1], "{tool} {arguments}: the two processes answered differently");
        let hits = answers[0].0["results"].as_array().map_or(0, Vec::len);
        assert!(tool == "search_codebase_memory" || hits >= 3, "{tool} {arguments} found {hits}: {}", answers[0].0);
    }
    one.cancel().await.unwrap();
    other.cancel().await.unwrap();
}

/// A search's structured result and text without what its own earlier answers change: each result's
/// `usage` and the words that show it (the other process's search just used the same memories).
fn without_usage(
    mut structured: serde_json::Value,
    content: serde_json::Value,
) -> (serde_json::Value, serde_json::Value) {
    use serde_json::Value;
    for list in ["results", "matches"] {
        for item in structured[list].as_array_mut().into_iter().flatten() {
            item.as_object_mut().unwrap().remove("usage");
        }
    }
    let used = regex::Regex::new(r"(?m)( \(used [^\n]*\)$|^Used: .*\n?)").unwrap();
    let content = match content {
        Value::String(text) => Value::String(used.replace_all(&text, "").into_owned()),
        Value::Array(blocks) => Value::Array(
            blocks
                .into_iter()
                .map(|mut b| {
                    if let Some(text) = b["text"].as_str() {
                        b["text"] = Value::String(used.replace_all(text, "").into_owned());
                    }
                    b
                })
                .collect(),
        ),
        other => other,
    };
    (structured, content)
}
