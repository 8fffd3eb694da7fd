//! `astra-mcp drive` against a local mock of the Responses API (wiremock) that plays the model's moves
//! in order and records every request; the workspace, its tests and the store are real. The requests
//! are asserted: a new chain starts without `previous_response_id`, later requests chain, every
//! `function_call_output` carries its `call_id`, and the tools are the registry's strict schemas.

use std::path::Path;
use std::sync::{Arc, Mutex};

use astra_mcp::drive::{DriveConfig, DriveError, DriveReport};
use astra_mcp::llm::{ClientSettings, Ledger, LedgerEntry, LlmError};
use astra_mcp::memory::workspace::Workspace;
use astra_mcp::tools::ToolHost;
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::support::{config, host, pytest_command, scenario};

type Step = crate::support::ModelStep;

fn response(step: usize, output: Vec<Value>) -> Value {
    json!({"id": format!("resp_{step}"), "object": "response", "status": "completed", "output": output,
        "usage": {"input_tokens": 2000, "output_tokens": 150, "total_tokens": 2150}})
}

fn call(call_id: &str, name: &str, arguments: Value) -> Value {
    json!({"type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id, "name": name,
        "arguments": arguments.to_string(), "status": "completed"})
}

fn message(text: &str) -> Value {
    json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})
}

/// The `function_call_output` of `call_id` in a request's input.
fn output_of(request: &Value, call_id: &str) -> String {
    request["input"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["type"] == "function_call_output" && i["call_id"] == call_id)
        .and_then(|i| i["output"].as_str())
        .unwrap_or_else(|| panic!("no function_call_output for {call_id} in {request}"))
        .to_string()
}

/// A step whose 200 answer is the JSON `play` builds from the request.
fn answer_with(play: impl Fn(&Value) -> Value + Send + Sync + 'static) -> Step {
    Box::new(move |request| ResponseTemplate::new(200).set_body_json(play(request)))
}

/// A step that answers with `output` (built from the request it answers).
fn step(index: usize, output: impl Fn(&Value) -> Vec<Value> + Send + Sync + 'static) -> Step {
    Box::new(move |request| ResponseTemplate::new(200).set_body_json(response(index, output(request))))
}

type Mocked = crate::support::MockModel;

async fn mock(steps: Vec<Step>) -> Mocked {
    Mocked::start(steps).await
}

fn drive_config(mocked: &Mocked, dir: &Path, run_id: &str) -> DriveConfig {
    DriveConfig {
        client: crate::support::client_settings(mocked.base_url(), dir),
        run_id: run_id.into(),
        prompt: "The tests fail. Fix the app.".into(),
        max_turns: 10,
        max_tool_calls: 20,
        max_output_tokens: 2048,
        reasoning_effort: Some("low".into()),
        verbosity: None,
        run_budget_usd: 1.0,
        project_budget_usd: 5.0,
        runs_dir: dir.join("runs"),
        context_budget_tokens: 100_000,
    }
}

async fn alpha_host(db: &Path, workspace: &Path) -> ToolHost {
    host(db, config("ann", "alpha", Some(workspace), Some(&pytest_command()))).await
}

const OLD: &str = r#"[origin for origin in raw.split(",") if origin]"#;
const NEW: &str = r#"[origin.strip() for origin in raw.split(",") if origin.strip()]"#;
const FIX: &str = "strip whitespace around each comma-separated origin in ALLOWED_ORIGINS";

/// The scripted alpha session: search, failing run, edit, passing run, store (with the outcome the
/// server returned, read from the request), final answer.
fn alpha_steps() -> Vec<Step> {
    vec![
        step(1, |_| {
            vec![call(
                "c1",
                "search_codebase_memory",
                json!({"query": "second allowed origin rejected", "error_type": null, "top_k": 3}),
            )]
        }),
        step(2, |_| vec![call("c2", "run_tests", json!({}))]),
        step(3, |_| vec![call("c3", "read_file", json!({"path": "webapp/settings.py"}))]),
        step(4, |_| {
            vec![call("c4", "apply_edit", json!({"path": "webapp/settings.py", "old_text": OLD, "new_text": NEW}))]
        }),
        step(5, |_| vec![call("c5", "run_tests", json!({}))]),
        step(6, |request| {
            let report = output_of(request, "c5");
            let outcome = report
                .lines()
                .find_map(|l| l.strip_prefix("confirmed_outcome: "))
                .unwrap_or_else(|| panic!("the passing run's output names its outcome: {report}"));
            vec![call(
                "c6",
                "store_fix_memory",
                json!({"fix_description": FIX, "error_type": "AssertionError",
                "file_paths": ["webapp/settings.py"], "outcome": outcome}),
            )]
        }),
        step(7, |_| vec![message("Fixed: origins are stripped; tests pass; the fix is stored.")]),
    ]
}

/// `search_codebase_memory` in a fresh session; the result text.
async fn search(host: &ToolHost, query: &str) -> String {
    let session = astra_mcp::memory::GateState::random();
    let args = crate::support::args(json!({"query": query, "error_type": null, "top_k": 3}));
    host.call(&session, "search_codebase_memory", args).await.unwrap().text
}

/// `conversation_search`; the result text.
async fn conversation(host: &ToolHost, query: &str) -> String {
    let session = astra_mcp::memory::GateState::random();
    let args = crate::support::args(json!({"query": query, "roles": null, "top_k": 5, "start": null, "end": null}));
    host.call(&session, "conversation_search", args).await.unwrap().text
}

async fn run_alpha(dir: &Path, db: &Path) -> (DriveReport, Vec<Value>, ToolHost) {
    let (_guard, workspace) = scenario("scenario_alpha");
    let mocked = mock(alpha_steps()).await;
    let host = alpha_host(db, &workspace).await;
    let report =
        astra_mcp::drive::run(&host, &Workspace::open(&workspace).unwrap(), &drive_config(&mocked, dir, "alpha-1"))
            .await
            .unwrap();
    let seen = mocked.requests();
    (report, seen, host)
}

#[tokio::test]
async fn a_scripted_session_fixes_alpha_for_real_and_every_request_is_well_formed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (report, seen, host) = run_alpha(dir.path(), &db).await;
    assert_eq!(report.requests, 7);
    assert_eq!(report.tool_calls, 6);
    assert_eq!((report.input_tokens, report.output_tokens), (14_000, 1_050));
    assert!((report.cost_usd - (14_000.0 * 10.0 + 1_050.0 * 50.0) / 1e6).abs() < 1e-9, "{}", report.cost_usd);
    assert!(report.final_text.starts_with("Fixed:"));

    // the chain: a new one first, then each request chained to the previous response
    assert!(seen[0].get("previous_response_id").is_none(), "the first request starts a new chain");
    for (i, request) in seen.iter().enumerate().skip(1) {
        assert_eq!(request["previous_response_id"], format!("resp_{i}"), "request {i}");
        let call_id = format!("c{i}");
        assert_eq!(request["input"].as_array().unwrap().len(), 1, "request {i} sends only the new output");
        assert_eq!(request["input"][0]["call_id"], call_id.as_str(), "request {i}");
    }
    assert_eq!(seen[0]["input"][0], json!({"role": "user", "content": "The tests fail. Fix the app."}));
    assert_eq!(seen[0]["model"], "gpt-6-astra");
    assert_eq!(seen[0]["reasoning"], json!({"effort": "low"}));
    assert_eq!(seen[0]["max_output_tokens"], 2048);
    // the tools: the registry's, then the local ones, all strict
    let names: Vec<&str> = seen[0]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    let mut expected: Vec<&str> = astra_mcp::tools::specs().iter().map(|s| s.name).collect();
    expected.extend(["list_files", "read_file", "apply_edit"]);
    assert_eq!(names, expected);
    for tool in seen[0]["tools"].as_array().unwrap() {
        assert_eq!((tool["type"].as_str(), tool["strict"].as_bool()), (Some("function"), Some(true)), "{tool}");
        assert_eq!(tool["parameters"]["additionalProperties"], false, "{tool}");
        assert!(!tool["parameters"].to_string().contains("maxLength"), "{tool}");
    }
    assert!(
        seen[0]["instructions"].as_str().unwrap().contains("<project chars=\"0/2000\">"),
        "core memory is rendered"
    );
    // what the tools answered
    assert!(output_of(&seen[2], "c2").contains("failed"), "the first run fails");
    assert!(output_of(&seen[3], "c3").contains(OLD), "read_file returns the file");
    assert_eq!(output_of(&seen[4], "c4"), "edited webapp/settings.py: 1 replacement");
    let stored = output_of(&seen[6], "c6");
    assert!(!stored.contains("gate"), "the store passed the gates: {stored}");

    // the fix is in the store, and the run's turns are in conversation memory
    let found = search(&host, "second allowed origin rejected").await;
    assert!(found.contains(FIX), "the stored fix is found: {found}");
    let said = conversation(&host, "origins are stripped tests pass").await;
    assert!(said.contains("Fixed: origins are stripped"), "the final answer is in conversation memory: {said}");
    let runs = dir.path().join("runs/alpha-1");
    let transcript = std::fs::read_to_string(runs.join("transcript.jsonl")).unwrap();
    assert_eq!(transcript.lines().count(), 7, "one line per request/response pair");
    let events = std::fs::read_to_string(runs.join("events.jsonl")).unwrap();
    assert_eq!(events.lines().filter(|l| l.contains("\"tool_call\"")).count(), 6);
    let ledger = Ledger::new(dir.path().join("ledger.jsonl")).entries().unwrap();
    assert_eq!(ledger.len(), 7);
    assert!(ledger.iter().all(|e| e.run_id == "alpha-1" && e.project == "alpha"));
}

/// Verified fixes that look like alpha's (the same error type, the same file, origins again) with other
/// causes, stored beside it as other sessions would have.
async fn store_look_alikes(db: &Path) {
    use astra_mcp::domain::{FixRecord, fix_memory_id};
    use astra_mcp::store::FixStore;
    let store = astra_mcp::store::lance::LanceStore::open(db.to_str().unwrap()).await.unwrap();
    let look_alikes = [
        (
            "default ALLOWED_ORIGINS to an empty list when the variable is unset instead of raising KeyError",
            "FAILED tests/test_settings.py::test_origins_default_to_none - KeyError: 'ALLOWED_ORIGINS'",
        ),
        (
            "refuse origins with a path: https://a.example/app is not an origin, compare scheme and host only",
            "FAILED tests/test_settings.py::test_origin_with_path_rejected - AssertionError: assert True is False",
        ),
        (
            "read ALLOWED_ORIGINS when a request comes in, not at import, so a changed environment is seen",
            "FAILED tests/test_settings.py::test_origins_follow_environment - AssertionError: assert ['a.example'] == ['b.example']",
        ),
        (
            "keep the port in each origin: http://localhost:3000 was compared without its port",
            "FAILED tests/test_settings.py::test_origin_port_kept - AssertionError: assert 'http://localhost' == 'http://localhost:3000'",
        ),
    ];
    for (i, (fix, symptom)) in look_alikes.into_iter().enumerate() {
        let session = format!("earlier-{i}");
        let outcome = format!("pytest -q: 1 passed (session {session})");
        let paths = vec!["webapp/settings.py".to_string()];
        let now = chrono::Utc::now();
        let record = FixRecord {
            memory_id: fix_memory_id("ann", &session, fix, "AssertionError", &outcome, &paths),
            actor_id: "ann".into(),
            project: "alpha".into(),
            session_id: session,
            created_at: now,
            updated_at: now,
            fix_description: fix.into(),
            error_type: "AssertionError".into(),
            file_paths: paths,
            outcome,
            verified: true,
            receipt: None,
            embedded_text: astra_mcp::memory::fixes::embedded_text(fix, "AssertionError", &[symptom.to_string()], &[]),
        };
        let vector = crate::support::embedder().embed_documents(vec![record.embedded_text.clone()]).await.unwrap();
        store.upsert_fix(&record, &vector[0]).await.unwrap();
    }
}

#[tokio::test]
async fn a_second_session_on_beta_retrieves_alphas_fix_before_its_first_edit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    run_alpha(dir.path(), &db).await;
    store_look_alikes(&db).await;
    let (_guard, workspace) = scenario("scenario_beta");
    let mocked = mock(vec![
        step(1, |_| vec![call("b1", "run_tests", json!({}))]),
        step(2, |_| vec![call("b2", "search_codebase_memory", json!({"query": "configured sink names keep stray whitespace and mixed case", "error_type": null, "top_k": 3}))]),
        step(3, |_| vec![message("Memory has a matching fix; I would strip and normalise the names.")]),
    ])
    .await;
    let host = host(&db, config("ann", "beta", Some(&workspace), Some(&pytest_command()))).await;
    let report = astra_mcp::drive::run(
        &host,
        &Workspace::open(&workspace).unwrap(),
        &drive_config(&mocked, dir.path(), "beta-1"),
    )
    .await
    .unwrap();
    assert_eq!(report.requests, 3);
    let seen = mocked.requests();
    assert!(seen[0].get("previous_response_id").is_none(), "beta starts its own chain");
    let memory = output_of(&seen[2], "b2");
    let first = memory.split("Match 2").next().unwrap();
    assert!(first.starts_with("Match 1") && first.contains(FIX), "alpha's fix comes back first: {memory}");
    assert!(memory.contains("Match 2"), "the look-alikes are there too: {memory}");
}

#[tokio::test]
async fn finishing_before_any_memory_search_is_a_memory_gate_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let mocked = mock(vec![
        step(1, |_| {
            vec![call(
                "g1",
                "store_fix_memory",
                json!({"fix_description": "x", "error_type": "E",
            "file_paths": ["webapp/settings.py"], "outcome": "made up"}),
            )]
        }),
        step(2, |_| vec![message("Done.")]),
    ])
    .await;
    let host = alpha_host(&dir.path().join("db"), &workspace).await;
    let result =
        astra_mcp::drive::run(&host, &Workspace::open(&workspace).unwrap(), &drive_config(&mocked, dir.path(), "g"))
            .await;
    assert!(matches!(result, Err(DriveError::MemoryGate)), "{result:?}");
    let seen = mocked.requests();
    let refused = output_of(&seen[1], "g1");
    assert!(refused.starts_with("memory gate"), "a store before any search goes back refused: {refused}");
}

#[tokio::test]
async fn an_edit_after_the_passing_run_and_a_wrong_outcome_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let store = |outcome: &str| json!({"fix_description": FIX, "error_type": "AssertionError", "file_paths": ["webapp/settings.py"], "outcome": outcome});
    let outcome = Arc::new(Mutex::new(String::new()));
    let (o1, o2) = (outcome.clone(), outcome.clone());
    let mocked = mock(vec![
        step(1, |_| {
            vec![call("e1", "search_codebase_memory", json!({"query": "origins", "error_type": null, "top_k": 1}))]
        }),
        step(2, |_| {
            vec![call("e2", "apply_edit", json!({"path": "webapp/settings.py", "old_text": OLD, "new_text": NEW}))]
        }),
        step(3, |_| vec![call("e3", "run_tests", json!({}))]),
        step(4, move |request| {
            let report = output_of(request, "e3");
            *o1.lock().unwrap() =
                report.lines().find_map(|l| l.strip_prefix("confirmed_outcome: ")).unwrap().to_string();
            vec![call("e4", "store_fix_memory", store("pytest passed, trust me"))]
        }),
        step(5, |_| {
            vec![call(
                "e5",
                "apply_edit",
                json!({"path": "webapp/settings.py", "old_text": NEW, "new_text": format!("{NEW}  # tidy")}),
            )]
        }),
        step(6, move |_| vec![call("e6", "store_fix_memory", store(&o2.lock().unwrap()))]),
        step(7, |_| vec![message("Stopping.")]),
    ])
    .await;
    let host = alpha_host(&dir.path().join("db"), &workspace).await;
    astra_mcp::drive::run(&host, &Workspace::open(&workspace).unwrap(), &drive_config(&mocked, dir.path(), "e"))
        .await
        .unwrap();
    let seen = mocked.requests();
    let wrong = output_of(&seen[4], "e4");
    assert!(wrong.contains("confirmed-outcome gate"), "an outcome the server did not return: {wrong}");
    let after_edit = output_of(&seen[6], "e6");
    assert!(after_edit.contains("gate"), "apply_edit voided the passing run: {after_edit}");
    assert!(search(&host, "second allowed origin rejected").await.starts_with("No relevant"), "nothing was stored");
}

#[tokio::test]
async fn nothing_is_sent_without_approval_a_key_or_budget_and_api_errors_stop_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let ws = Workspace::open(&workspace).unwrap();
    let host = alpha_host(&dir.path().join("db"), &workspace).await;
    let mocked = mock(vec![]).await;
    let base = drive_config(&mocked, dir.path(), "guard");

    let result = astra_mcp::drive::run(
        &host,
        &ws,
        &DriveConfig { client: ClientSettings { approve_live_cost: false, ..base.client.clone() }, ..base.clone() },
    )
    .await;
    assert!(matches!(&result, Err(DriveError::Llm(LlmError::NotApproved(_)))), "{result:?}");
    assert!(result.unwrap_err().to_string().contains("--approve-live-cost"));
    let result = astra_mcp::drive::run(
        &host,
        &ws,
        &DriveConfig { client: ClientSettings { api_key: None, ..base.client.clone() }, ..base.clone() },
    )
    .await;
    assert!(matches!(&result, Err(DriveError::Llm(LlmError::NoApiKey))), "{result:?}");
    assert!(result.unwrap_err().to_string().contains("OPENAI_API_KEY"));
    // the project has spent its budget in earlier runs
    Ledger::new(base.client.ledger.clone()).record(&LedgerEntry::new("older", "alpha", "m", 0, 0, 5.0)).unwrap();
    let result = astra_mcp::drive::run(&host, &ws, &base).await;
    assert!(
        matches!(&result, Err(DriveError::Llm(LlmError::Budget(m))) if m.contains("project `alpha`")),
        "{result:?}"
    );
    assert!(mocked.requests().is_empty(), "no request reached the API");

    // an API error (here: the script is empty, so the mock answers 400) stops the run with its message
    let fresh = DriveConfig {
        client: ClientSettings { ledger: dir.path().join("other-ledger.jsonl"), ..base.client.clone() },
        ..base
    };
    let result = astra_mcp::drive::run(&host, &ws, &fresh).await;
    assert!(
        matches!(&result, Err(DriveError::Llm(LlmError::Api { status: 400, message })) if message == "script exhausted"),
        "{result:?}"
    );
    assert_eq!(mocked.requests().len(), 1);
}

#[test]
fn the_command_says_which_of_approval_and_key_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let drive = |extra: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"))
            .args(["drive", "--run-id", "r1", "--db"])
            .arg(dir.path().join("db"))
            .arg("--workspace")
            .arg(&workspace)
            .args(["--ledger", dir.path().join("l.jsonl").to_str().unwrap()])
            .args(["--runs-dir", dir.path().join("runs").to_str().unwrap()])
            .args(extra)
            .current_dir(dir.path()) // no .env here
            .env_remove("OPENAI_API_KEY")
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    assert!(drive(&[]).contains("pass --approve-live-cost"));
    assert!(drive(&["--approve-live-cost"]).contains("set OPENAI_API_KEY"));
}

#[tokio::test]
async fn a_full_chain_is_summarised_and_continued_in_a_new_chain_with_the_old_turns_searchable() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let full = |step_no: usize, output: Vec<Value>| {
        let mut r = response(step_no, output);
        r["usage"]["input_tokens"] = json!(150_000); // over the 100k budget
        r
    };
    let mocked = mock(vec![
        step(1, |_| {
            vec![call("s1", "search_codebase_memory", json!({"query": "origins", "error_type": null, "top_k": 1}))]
        }),
        answer_with(move |_| full(2, vec![call("s2", "read_file", json!({"path": "webapp/settings.py"}))])),
        step(3, |_| {
            vec![message("Task: fix origins. Read webapp/settings.py: split without strip. Nothing changed yet.")]
        }),
        step(4, |_| vec![message("Done looking.")]),
    ])
    .await;
    let host = alpha_host(&dir.path().join("db"), &workspace).await;
    let config = DriveConfig { run_budget_usd: 10.0, ..drive_config(&mocked, dir.path(), "ev") };
    let report = astra_mcp::drive::run(&host, &Workspace::open(&workspace).unwrap(), &config).await.unwrap();
    assert_eq!((report.requests, report.chains), (4, 2));
    let seen = mocked.requests();
    // the summary request delivers the pending output, asks for a summary, and allows no tool call
    assert_eq!(seen[2]["previous_response_id"], "resp_2");
    assert_eq!(seen[2]["tool_choice"], "none");
    assert_eq!(seen[2]["input"][0]["call_id"], "s2");
    assert_eq!(seen[2]["input"][1]["content"], astra_mcp::drive::SUMMARY_REQUEST);
    // the new chain starts without previous_response_id, seeded with the summary
    assert!(seen[3].get("previous_response_id").is_none(), "{}", seen[3]);
    let seed = seen[3]["input"][0]["content"].as_str().unwrap();
    assert!(seed.contains("split without strip") && seed.contains("conversation_search"), "{seed}");
    assert!(seen[3]["instructions"].as_str().unwrap().contains("Core memory"), "core memory seeds it too");
    // the evicted turn (the read_file call) is in recall storage
    let recalled = conversation(&host, "read_file webapp/settings.py").await;
    assert!(recalled.contains("tool call read_file"), "{recalled}");
}

const BETA_OLD_1: &str = r#"return raw.replace("-", "_")"#;
const BETA_NEW_1: &str = r#"return raw.strip().lower().replace("-", "_")"#;
const BETA_OLD_2: &str = r#"for name in raw.split(",") if name]"#;
const BETA_NEW_2: &str = r#"for name in raw.split(",") if name.strip()]"#;

/// A scripted beta session whose responses are numbered from `first`: search, two edits, a passing
/// run, a store with the server's outcome, a final answer.
fn beta_steps(first: usize, tag: &'static str) -> Vec<Step> {
    let id = move |n: usize| format!("{tag}{n}");
    vec![
        step(first, move |_| {
            vec![call(
                &id(1),
                "search_codebase_memory",
                json!({"query": "configured sink names keep stray whitespace and mixed case", "error_type": null, "top_k": 3}),
            )]
        }),
        step(first + 1, move |_| {
            vec![call(
                &id(2),
                "apply_edit",
                json!({"path": "auditlog/sinks.py", "old_text": BETA_OLD_1, "new_text": BETA_NEW_1}),
            )]
        }),
        step(first + 2, move |_| {
            vec![call(
                &id(3),
                "apply_edit",
                json!({"path": "auditlog/sinks.py", "old_text": BETA_OLD_2, "new_text": BETA_NEW_2}),
            )]
        }),
        step(first + 3, move |_| vec![call(&id(4), "run_tests", json!({}))]),
        step(first + 4, move |request| {
            let report = output_of(request, &id(4));
            let outcome = report
                .lines()
                .find_map(|l| l.strip_prefix("confirmed_outcome: "))
                .unwrap_or_else(|| panic!("{report}"));
            vec![call(
                &id(5),
                "store_fix_memory",
                json!({"fix_description": "strip and lower-case sink names before normalising",
                "error_type": "AssertionError", "file_paths": ["auditlog/sinks.py"], "outcome": outcome}),
            )]
        }),
        step(first + 5, |_| vec![message("Fixed with the remembered approach.")]),
    ]
}

/// `astra-mcp-dev session-demo --run-id <run_id> --repeat 1` on the demo projects, its store, runs and ledger
/// under `dir`, against `mocked`.
fn session_demo(dir: &Path, mocked: &Mocked, run_id: &str) -> std::process::Command {
    let mut command = std::process::Command::new(crate::support::dev_binary());
    command
        .args(["session-demo", "--run-id", run_id, "--approve-live-cost", "--repeat", "1"])
        .arg("--projects")
        .arg(crate::support::repo().join("demo_projects"))
        .args(["--test-command", &pytest_command()])
        .arg("--db")
        .arg(dir.join("db"))
        .arg("--runs-dir")
        .arg(dir.join("runs"))
        .arg("--ledger")
        .arg(dir.join("ledger.jsonl"))
        .args(["--base-url", &mocked.base_url()])
        .env("OPENAI_API_KEY", "sk-test-key")
        .env("ASTRA_LOG", "warn");
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn session_demo_runs_alpha_then_beta_and_a_repeat_and_judges_from_the_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let mut steps = alpha_steps();
    steps.extend(beta_steps(8, "b"));
    steps.extend(beta_steps(14, "r"));
    let mocked = mock(steps).await;
    let mut command = session_demo(dir.path(), &mocked, "demo");
    let (output, again) =
        tokio::task::spawn_blocking(move || (command.output().unwrap(), command.output().unwrap())).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stdout: {stdout}\nstderr: {stderr}");
    assert_eq!(again.status.code(), Some(1), "the same experiment id twice");
    assert!(String::from_utf8_lossy(&again.stderr).contains("was used before"));
    let rows: Vec<&str> = stdout.lines().skip(2).collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    assert!(rows[0].starts_with("| demo-alpha | - | 7 | 6 | pass |"), "{stdout}");
    assert!(rows[1].starts_with("| demo-beta | yes | 6 | 5 | pass |"), "{stdout}");
    assert!(rows[2].starts_with("| demo-beta-r1 | yes | 6 | 5 | pass |"), "{stdout}");
    let seen = mocked.requests();
    assert_eq!(seen.len(), 19);
    for first in [0, 7, 13] {
        assert!(seen[first].get("previous_response_id").is_none(), "request {first} starts a new chain");
    }
    // the repeat saw alpha's fix alone: beta's first fix was removed before it
    let repeat_search = output_of(&seen[14], "r1");
    assert!(!repeat_search.contains("strip and lower-case sink names"), "{repeat_search}");
    assert!(repeat_search.contains(FIX), "{repeat_search}");
}

/// The judge fails the runs it exists to catch: a beta that edits before it searches (alpha's fix is
/// not retrieved before the first edit), and a beta that edits the acceptance tests instead of the app
/// (the untouched tests fail on its app).
#[tokio::test(flavor = "multi_thread")]
async fn session_demo_fails_an_edit_before_any_search_and_an_edit_of_the_tests() {
    let dir = tempfile::tempdir().unwrap();
    let mut steps = alpha_steps();
    // beta: the same fix, but the edits come before the search
    let mut edits_first = beta_steps(20, "e");
    let search = edits_first.remove(0);
    edits_first.insert(2, search);
    steps.extend(edits_first);
    // beta-r1: searches, then makes a test agree with the bug and stops
    steps.push(step(30, |_| {
        vec![call(
            "t1",
            "search_codebase_memory",
            json!({"query": "configured sink names keep stray whitespace and mixed case", "error_type": null, "top_k": 3}),
        )]
    }));
    steps.push(step(31, |_| {
        vec![call(
            "t2",
            "apply_edit",
            json!({"path": "tests/test_sinks.py",
                "old_text": r#"assert normalize_sink_name(" Audit-Log ") == "audit_log""#,
                "new_text": r#"assert normalize_sink_name(" Audit-Log ")"#}),
        )]
    }));
    steps.push(step(32, |_| vec![message("Adjusted the test.")]));
    let mocked = mock(steps).await;
    let mut command = session_demo(dir.path(), &mocked, "bad");
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "stdout: {stdout}\nstderr: {stderr}");
    let rows: Vec<&str> = stdout.lines().skip(2).collect();
    assert!(rows[0].starts_with("| bad-alpha | - | 7 | 6 | pass |"), "{stdout}");
    assert!(rows[1].starts_with("| bad-beta | no | 6 | 5 | pass |"), "{stdout}");
    assert!(rows[2].starts_with("| bad-beta-r1 | yes | 3 | 2 | fail |"), "{stdout}");
    assert!(stderr.contains("bad-beta: alpha's fix was not retrieved before the first edit"), "{stderr}");
    assert!(stderr.contains("bad-beta-r1: the untouched acceptance tests fail"), "{stderr}");
    assert!(!stderr.contains("bad-alpha:"), "alpha passed every check: {stderr}");
}

#[tokio::test]
async fn a_run_id_used_again_continues_its_session_instead_of_overwriting_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let host = alpha_host(&dir.path().join("db"), &workspace).await;
    for answer in ["First visit: the quartz pelican", "Second visit: the cobalt heron"] {
        let mocked = mock(vec![
            step(1, |_| {
                vec![call("v1", "search_codebase_memory", json!({"query": "origins", "error_type": null, "top_k": 1}))]
            }),
            step(2, move |_| vec![message(answer)]),
        ])
        .await;
        astra_mcp::drive::run(&host, &Workspace::open(&workspace).unwrap(), &drive_config(&mocked, dir.path(), "same"))
            .await
            .unwrap();
    }
    assert!(conversation(&host, "quartz pelican").await.contains("First visit"));
    assert!(
        conversation(&host, "cobalt heron").await.contains("Second visit"),
        "the second run's turns are stored too"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_command_reads_the_key_from_dot_env_and_sends_it_as_a_bearer_token() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let mocked = mock(vec![
        step(1, |_| {
            vec![call("k1", "search_codebase_memory", json!({"query": "origins", "error_type": null, "top_k": 1}))]
        }),
        step(2, |_| vec![message("Nothing to fix from here.")]),
    ])
    .await;
    let dotenv = format!("# local secrets\nOPENAI_API_KEY=sk-from-dotenv\nOPENAI_BASE_URL={}\n", mocked.base_url());
    std::fs::write(dir.path().join(".env"), dotenv).unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"));
    command
        .args(["drive", "--run-id", "dotenv", "--approve-live-cost", "--db"])
        .arg(dir.path().join("db"))
        .arg("--workspace")
        .arg(&workspace)
        .args(["--ledger", dir.path().join("l.jsonl").to_str().unwrap()])
        .args(["--runs-dir", dir.path().join("runs").to_str().unwrap()])
        .current_dir(dir.path()) // the base URL comes from .env too
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("ASTRA_LOG", "warn");
    let output = tokio::task::spawn_blocking(move || command.output().unwrap()).await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "Nothing to fix from here.");
    assert!(stderr.contains("2 requests in 1 chain(s), 1 tool calls"), "{stderr}");
    assert_eq!(mocked.authorizations(), vec!["Bearer sk-from-dotenv"; 2], "both requests carried the key from .env");
    let transcript = std::fs::read_to_string(dir.path().join("runs/dotenv/transcript.jsonl")).unwrap();
    assert!(!transcript.contains("sk-from-dotenv"), "the key never reaches the evidence");
}

#[tokio::test]
async fn unfinished_or_uncountable_responses_stop_the_run_and_the_evidence_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let host = alpha_host(&dir.path().join("db"), &workspace).await;
    let ws = Workspace::open(&workspace).unwrap();
    let cases: Vec<(&str, Step, &str)> = vec![
        (
            "incomplete",
            answer_with(|_| {
                let mut r = response(1, vec![]);
                r["status"] = json!("incomplete");
                r["incomplete_details"] = json!({"reason": "max_output_tokens"});
                r
            }),
            "status `incomplete`: max_output_tokens",
        ),
        (
            "no-usage",
            answer_with(|_| {
                let mut r = response(1, vec![message("hi")]);
                r.as_object_mut().unwrap().remove("usage");
                r
            }),
            "usable `usage.input_tokens`",
        ),
        ("empty", answer_with(|_| response(1, vec![])), "neither text nor a function call"),
        (
            "huge",
            answer_with(|_| response(1, vec![message(&"x".repeat(17 * 1024 * 1024))])),
            "a response over 16777216 bytes",
        ),
        (
            "twice",
            answer_with(|_| {
                response(
                    1,
                    vec![
                        call("d1", "list_files", json!({"path": null})),
                        call("d1", "list_files", json!({"path": null})),
                    ],
                )
            }),
            "appears twice",
        ),
    ];
    for (run_id, play, expected) in cases {
        let mocked = mock(vec![play]).await;
        let result = astra_mcp::drive::run(&host, &ws, &drive_config(&mocked, dir.path(), run_id)).await;
        let error = result.expect_err(run_id).to_string();
        assert!(error.contains(expected), "{run_id}: {error}");
        let events = std::fs::read_to_string(dir.path().join("runs").join(run_id).join("events.jsonl")).unwrap();
        let last: Value = serde_json::from_str(events.lines().last().unwrap()).unwrap();
        assert_eq!(last["event"], "stopped", "{run_id}");
        assert!(last["detail"]["error"].as_str().unwrap().contains(expected), "{run_id}: {last}");
    }
    // a run id that is not a plain name never becomes a path
    let mocked = mock(vec![]).await;
    let result = astra_mcp::drive::run(&host, &ws, &drive_config(&mocked, dir.path(), "../escape")).await;
    assert!(matches!(&result, Err(DriveError::Settings(m)) if m.contains("--run-id")), "{result:?}");
    assert!(!dir.path().join("escape").exists());
}

#[tokio::test]
async fn secrets_printed_by_tools_are_redacted_in_the_evidence_and_hard_links_are_not_edited() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let secret = "sk-proj-AAAABBBBCCCCDDDDEEEEFFFFGGGGHHHH1234";
    std::fs::write(workspace.join("notes.txt"), format!("OPENAI_API_KEY={secret}\n")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("target.txt"), "outside\n").unwrap();
    std::fs::hard_link(outside.path().join("target.txt"), workspace.join("linked.txt")).unwrap();
    let mocked = mock(vec![
        step(1, |_| vec![call("h1", "read_file", json!({"path": "notes.txt"}))]),
        step(2, |_| {
            vec![call("h2", "apply_edit", json!({"path": "linked.txt", "old_text": "outside", "new_text": "PWNED"}))]
        }),
        step(3, |_| vec![call("h3", "search_codebase_memory", json!({"query": "x", "error_type": null, "top_k": 1}))]),
        step(4, |_| vec![message("done")]),
    ])
    .await;
    let host = alpha_host(&dir.path().join("db"), &workspace).await;
    astra_mcp::drive::run(&host, &Workspace::open(&workspace).unwrap(), &drive_config(&mocked, dir.path(), "sec"))
        .await
        .unwrap();
    let seen = mocked.requests();
    assert!(output_of(&seen[2], "h2").contains("hard links"), "{}", output_of(&seen[2], "h2"));
    assert_eq!(std::fs::read_to_string(outside.path().join("target.txt")).unwrap(), "outside\n");
    for file in ["transcript.jsonl", "events.jsonl"] {
        let path = dir.path().join("runs/sec").join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains(secret), "{file} quotes the key");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
        assert_eq!(mode & 0o077, 0, "{file} is private to its owner");
    }
}

#[tokio::test]
async fn a_session_belongs_to_the_actor_that_created_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let (_guard, workspace) = scenario("scenario_alpha");
    let ws = Workspace::open(&workspace).unwrap();
    let alice = alpha_host(&db, &workspace).await;
    let mocked = mock(vec![
        step(1, |_| vec![call("o1", "search_codebase_memory", json!({"query": "x", "error_type": null, "top_k": 1}))]),
        step(2, |_| vec![message("ok")]),
    ])
    .await;
    astra_mcp::drive::run(&alice, &ws, &drive_config(&mocked, dir.path(), "owned")).await.unwrap();
    let bob = host(&db, config("bob", "alpha", Some(&workspace), Some(&pytest_command()))).await;
    let result = astra_mcp::drive::run(&bob, &ws, &drive_config(&mocked, dir.path(), "owned")).await;
    assert!(matches!(&result, Err(DriveError::Permission(m)) if m.contains("belongs to another actor")), "{result:?}");
    assert_eq!(mocked.requests().len(), 2, "bob's run sent nothing");
    let target = astra_mcp::memory::ImportTarget {
        actor_id: "bob".into(),
        project: "alpha".into(),
        session_id: "owned".into(),
        source: "claude-code".into(),
    };
    let item = astra_mcp::memory::NewItem {
        source_key: "x".into(),
        turn: 99,
        role: astra_mcp::domain::Role::User,
        speaker: None,
        text: "bob writes into alice's session".into(),
        timestamp: None,
        date_label: None,
    };
    let imported = bob.memories().conversation.import(&target, &[item]).await;
    assert!(imported.unwrap_err().to_string().contains("permission denied"), "imports are refused too");
}

#[tokio::test]
async fn a_chain_over_the_budget_from_its_first_response_is_not_summarised_again() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let over = |n: usize, output: Vec<Value>| {
        let mut r = response(n, output);
        r["usage"]["input_tokens"] = json!(150_000);
        r
    };
    let mocked = mock(vec![
        answer_with(move |_| {
            over(1, vec![call("t1", "search_codebase_memory", json!({"query": "x", "error_type": null, "top_k": 1}))])
        }),
        answer_with(move |_| over(2, vec![call("t2", "read_file", json!({"path": "webapp/settings.py"}))])),
        step(3, |_| vec![message("Summary: read settings.py.")]),
        answer_with(move |_| over(4, vec![call("t4", "list_files", json!({"path": null}))])),
        step(5, |_| vec![message("Done.")]),
    ])
    .await;
    let host = alpha_host(&dir.path().join("db"), &workspace).await;
    let config = DriveConfig { run_budget_usd: 10.0, ..drive_config(&mocked, dir.path(), "thrash") };
    let report = astra_mcp::drive::run(&host, &Workspace::open(&workspace).unwrap(), &config).await.unwrap();
    assert_eq!((report.requests, report.chains), (5, 2), "one summary, not one per turn");
    let seen = mocked.requests();
    assert_eq!(seen[4]["previous_response_id"], "resp_4", "the new chain goes on after its first response");
}

/// `--max-turns` and `--max-tool-calls` stop a model that never finishes, and money flags that are NaN,
/// infinite or negative are refused before anything is sent.
#[tokio::test]
async fn turn_and_tool_call_limits_stop_the_run_and_bad_money_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_guard, workspace) = scenario("scenario_alpha");
    let ws = Workspace::open(&workspace).unwrap();
    let host = alpha_host(&dir.path().join("db"), &workspace).await;

    // one tool call per answer, never a final answer: the third request is the last
    let looping: Vec<Step> =
        (0..10).map(|i| step(i, move |_| vec![call(&format!("l{i}"), "list_files", json!({"path": null}))])).collect();
    let mocked = mock(looping).await;
    let config = DriveConfig { max_turns: 3, ..drive_config(&mocked, dir.path(), "turns") };
    let result = astra_mcp::drive::run(&host, &ws, &config).await;
    assert!(
        matches!(&result, Err(DriveError::Limit(m)) if m.contains("within 3 requests (--max-turns)")),
        "{result:?}"
    );
    assert_eq!(mocked.requests().len(), 3);

    // three calls in one answer against a limit of two: the third is not run
    let many = step(0, |_| (0..3).map(|i| call(&format!("m{i}"), "list_files", json!({"path": null}))).collect());
    let mocked = mock(vec![many]).await;
    let config = DriveConfig { max_tool_calls: 2, ..drive_config(&mocked, dir.path(), "calls") };
    let result = astra_mcp::drive::run(&host, &ws, &config).await;
    assert!(
        matches!(&result, Err(DriveError::Limit(m)) if m.contains("more than 2 tool calls (--max-tool-calls)")),
        "{result:?}"
    );
    let events = std::fs::read_to_string(dir.path().join("runs/calls/events.jsonl")).unwrap();
    assert_eq!(events.lines().filter(|l| l.contains("\"tool_call\"")).count(), 2, "{events}");

    let mocked = mock(vec![]).await;
    for (flag, bad) in
        [("--run-budget-usd", f64::NAN), ("--project-budget-usd", -1.0), ("--run-budget-usd", f64::INFINITY)]
    {
        let base = drive_config(&mocked, dir.path(), "money");
        let config = match flag {
            "--run-budget-usd" => DriveConfig { run_budget_usd: bad, ..base },
            _ => DriveConfig { project_budget_usd: bad, ..base },
        };
        let result = astra_mcp::drive::run(&host, &ws, &config).await;
        assert!(
            matches!(&result, Err(DriveError::Settings(m)) if m.contains(flag) && m.contains("finite amount of USD")),
            "{flag}={bad}: {result:?}"
        );
    }
    assert!(mocked.requests().is_empty(), "nothing is sent with a money flag that cannot be checked");
}
