//! `astra-mcp distill` against a local mock of the Responses API (wiremock) that returns scripted
//! extractions and consolidation decisions and records every request; the store (LanceDB in a temp dir)
//! and the model are real. The requests are asserted: extraction sees only the user and assistant
//! messages of new items, consolidation sees the candidate memories retrieved from the store.

use std::path::Path;
use std::sync::Arc;

use astra_mcp::distill::{DistillConfig, DistillError, Distiller};
use astra_mcp::domain::{DistillRun, Passage, Role, RunState, Scope};
use astra_mcp::llm::{Ledger, LlmError};
use astra_mcp::memory::{
    ArchivalConfig, ArchivalMemory, ConversationMemory, Fusion, ImportTarget, NewItem, PassageSearch,
};
use astra_mcp::store::lance::LanceStore;
use astra_mcp::store::{ArchivalStore, DistillRunStore};
use serde_json::{Value, json};
use wiremock::ResponseTemplate;

use crate::support::embedder;

type Step = crate::support::ModelStep;

/// A completed response whose `output_text` is `answer` (JSON), 2000 input and 150 output tokens.
fn answer(answer: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [{"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": answer.to_string()}]}],
        "usage": {"input_tokens": 2000, "output_tokens": 150, "total_tokens": 2150}}))
}

/// What one request at 10/50 USD per million tokens costs.
const REQUEST_USD: f64 = 0.0275;

fn step(play: impl Fn(&Value) -> ResponseTemplate + Send + Sync + 'static) -> Step {
    Box::new(play)
}

fn memories(list: Value) -> Step {
    step(move |_| answer(json!({"memories": list})))
}

type Mocked = crate::support::MockModel;

async fn mock(steps: Vec<Step>) -> Mocked {
    Mocked::start(steps).await
}

fn config(mocked: &Mocked, dir: &Path, actor: &str) -> DistillConfig {
    DistillConfig {
        actor_id: actor.into(),
        since: None,
        max_items: None,
        instructions: None,
        client: crate::support::client_settings(mocked.base_url(), dir),
        max_output_tokens: 4096,
        reasoning_effort: None,
        run_budget_usd: 1.0,
        actor_budget_usd: 5.0,
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    store: Arc<LanceStore>,
    distiller: Distiller,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(LanceStore::open(dir.path().join("db").to_str().unwrap()).await.unwrap());
    let distiller = Distiller::new(store.clone(), embedder());
    Fixture { dir, store, distiller }
}

/// Stores a conversation of `actor` (turns numbered from 0).
async fn converse(store: &Arc<LanceStore>, actor: &str, session: &str, items: &[(Role, &str)]) {
    let memory = ConversationMemory::new(store.clone(), embedder(), Fusion::conversation());
    let target = ImportTarget {
        actor_id: actor.into(),
        project: "shop".into(),
        session_id: session.into(),
        source: "claude-code".into(),
    };
    let items: Vec<NewItem> = items
        .iter()
        .enumerate()
        .map(|(turn, (role, text))| NewItem {
            source_key: format!("{session}:{turn}"),
            turn: turn as i64,
            role: *role,
            speaker: None,
            text: (*text).to_string(),
            timestamp: None,
            date_label: None,
        })
        .collect();
    memory.import(&target, &items).await.unwrap();
}

/// Hybrid archival search of `actor` (current memories only unless `include_superseded`).
async fn search(store: &Arc<LanceStore>, actor: &str, query: &str, include_superseded: bool) -> Vec<Passage> {
    let archival = ArchivalMemory::new(
        store.clone(),
        embedder(),
        ArchivalConfig {
            scope: Scope { actor_id: actor.into(), project: "shop".into() },
            near_duplicate_cosine: 0.95,
            fusion: Fusion::archival(),
        },
    );
    let request = PassageSearch { query: query.into(), top_k: 10, include_superseded, ..Default::default() };
    archival.search(&request).await.unwrap().into_iter().map(|h| h.row).collect()
}

/// The JSON document a request sends as its user input.
fn input_document(request: &Value) -> Value {
    let text = request["input"][0]["content"].as_str().unwrap_or_else(|| panic!("no input text in {request}"));
    serde_json::from_str(text).unwrap()
}

fn schema_name(request: &Value) -> &str {
    request["text"]["format"]["name"].as_str().unwrap_or_default()
}

const TABS: &str = "I always indent Python with tabs, never spaces. Please remember that.";
const NOTED: &str = "Noted: tabs for Python indentation from now on.";
const TOOL_OUTPUT: &str = "tool call run_tests({}): 3 passed in 0.02s TOOLTRACE-7731";
const DEPLOY: &str = "Our shop deploys to Fly.io, region ams.";
const BOB_SECRET: &str = "Bob's project codename is HELIOTROPE.";

const TABS_MEMORY: &str = "The user indents Python code with tabs, never spaces.";
const DEPLOY_MEMORY: &str = "The user's shop deploys to Fly.io in region ams.";

/// Ann's first session: a preference, an acknowledgement, a tool result, a fact.
async fn ann_first_session(store: &Arc<LanceStore>) {
    converse(
        store,
        "ann",
        "s1",
        &[(Role::User, TABS), (Role::Assistant, NOTED), (Role::Tool, TOOL_OUTPUT), (Role::User, DEPLOY)],
    )
    .await;
}

fn ann_first_extraction() -> Step {
    memories(json!([
        {"kind": "preference", "text": TABS_MEMORY, "item": 1},
        {"kind": "fact", "text": DEPLOY_MEMORY, "item": 3}
    ]))
}

/// Ann after a first distilled session (tabs, deploy), with a second session `s2` of `items` stored.
async fn ann_with_second_session(items: &[(Role, &str)]) -> Fixture {
    let f = fixture().await;
    ann_first_session(&f.store).await;
    let first = mock(vec![ann_first_extraction()]).await;
    f.distiller.run(&config(&first, f.dir.path(), "ann")).await.unwrap();
    converse(&f.store, "ann", "s2", items).await;
    f
}

fn runs_of(runs: Vec<DistillRun>, state: RunState) -> usize {
    runs.iter().filter(|r| r.state == state).count()
}

#[tokio::test]
async fn a_run_distils_user_and_assistant_messages_with_provenance_and_a_rerun_adds_nothing() {
    let f = fixture().await;
    ann_first_session(&f.store).await;
    converse(&f.store, "bob", "b1", &[(Role::User, BOB_SECRET)]).await;
    let mocked = mock(vec![ann_first_extraction()]).await;
    let run = f.distiller.run(&config(&mocked, f.dir.path(), "ann")).await.unwrap();

    // one extraction request: the user and assistant messages of ann's new items, nothing else
    let requests = mocked.requests();
    assert_eq!(requests.len(), 1, "no candidates were stored, so no consolidation request: {requests:#?}");
    let request = &requests[0];
    assert_eq!(schema_name(request), "durable_memories");
    assert_eq!(request["text"]["format"]["type"], "json_schema");
    assert_eq!(request["text"]["format"]["strict"], true);
    assert_eq!(request["store"], false);
    assert_eq!(request["model"], "gpt-6-astra");
    assert!(request.get("previous_response_id").is_none());
    let items = input_document(request)["items"].as_array().unwrap().clone();
    let texts: Vec<&str> = items.iter().map(|i| i["text"].as_str().unwrap()).collect();
    assert_eq!(texts, vec![TABS, NOTED, DEPLOY], "tool items and other actors' items are never sent");
    assert_eq!(items[2]["session_id"], "s1");
    assert_eq!(items[2]["turn"], 3);
    assert_eq!(items[2]["role"], "user");
    assert!(!request.to_string().contains("TOOLTRACE-7731") && !request.to_string().contains("HELIOTROPE"));

    // the memories are stored with the session and turn each came from
    assert_eq!(run.state, RunState::Succeeded);
    assert_eq!((run.items_read, run.added, run.updated, run.superseded), (3, 2, 0, 0));
    assert_eq!(run.requests, 1);
    assert!((run.cost_usd - REQUEST_USD).abs() < 1e-9, "{}", run.cost_usd);
    let found = search(&f.store, "ann", "which hosting region do we deploy to", false).await;
    let deploy = found.iter().find(|p| p.text == DEPLOY_MEMORY).expect("the fact is found");
    assert_eq!((deploy.session_id.as_str(), deploy.turn), ("s1", Some(3)));
    assert_eq!(deploy.source, format!("distill:{}", run.run_id));
    assert_eq!(deploy.tags, vec!["distilled".to_string(), "fact".to_string()]);
    let tabs = search(&f.store, "ann", "tabs or spaces for indentation", false).await;
    assert_eq!(tabs.first().map(|p| (p.text.as_str(), p.turn)), Some((TABS_MEMORY, Some(0))));
    // the ledger counts it under the actor's distill budget
    let entries = Ledger::new(f.dir.path().join("ledger.jsonl")).entries().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!((entries[0].run_id.as_str(), entries[0].project.as_str()), (run.run_id.as_str(), "distill:ann"));

    // a second run over the same sessions reads nothing, sends nothing, adds nothing
    let again = f.distiller.run(&config(&mocked, f.dir.path(), "ann")).await.unwrap();
    assert_eq!((again.items_read, again.added, again.requests), (0, 0, 0));
    assert_eq!(mocked.requests().len(), 1);
    assert_eq!(search(&f.store, "ann", "tabs indentation Fly.io", false).await.len(), 2);

    // bob's run reads bob's items only and writes into bob's memory only
    let bob_mock =
        mock(vec![memories(json!([{"kind": "fact", "text": "Bob's project is code-named HELIOTROPE.", "item": 1}]))])
            .await;
    let bob = f.distiller.run(&config(&bob_mock, f.dir.path(), "bob")).await.unwrap();
    assert_eq!((bob.items_read, bob.added), (1, 1));
    let bob_request = bob_mock.requests()[0].to_string();
    assert!(bob_request.contains("HELIOTROPE") && !bob_request.contains("Fly.io") && !bob_request.contains("tabs"));
    assert!(
        search(&f.store, "ann", "project codename HELIOTROPE", false)
            .await
            .iter()
            .all(|p| !p.text.contains("HELIOTROPE"))
    );
    assert_eq!(search(&f.store, "bob", "project codename", false).await[0].actor_id, "bob");
    let statuses = f.distiller.status(None).await.unwrap();
    assert_eq!(statuses.len(), 3);
    assert_eq!(f.distiller.status(Some("bob")).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_restatement_updates_its_memory_and_a_contradiction_supersedes_it() {
    let f = ann_with_second_session(&[
        (Role::User, "Reminder: tabs for indentation in all Python code, shown 4 wide."),
        (Role::User, "We moved the shop's deploys from Fly.io to Render last week."),
    ])
    .await;
    let before = search(&f.store, "ann", "tabs Fly.io", false).await;
    let tabs_id = before.iter().find(|p| p.text == TABS_MEMORY).unwrap().id;
    let deploy_id = before.iter().find(|p| p.text == DEPLOY_MEMORY).unwrap().id;
    const MERGED: &str = "The user indents Python code with tabs (displayed 4 wide), never spaces.";
    const RENDER: &str = "The user's shop deploys to Render (it moved away from Fly.io).";
    let second = mock(vec![
        memories(json!([
            {"kind": "preference", "text": "The user indents Python with tabs, displayed 4 wide.", "item": 1},
            {"kind": "fact", "text": "The user's shop now deploys to Render, not Fly.io.", "item": 2}
        ])),
        // the consolidation: update the tabs memory, supersede the deploy memory, by the candidates' ids
        step(move |request| {
            let doc = input_document(request);
            let candidate_of = |index: usize, needle: &str| -> String {
                let memory = &doc["new_memories"][index];
                memory["candidates"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["text"].as_str().unwrap().contains(needle))
                    .unwrap_or_else(|| panic!("no candidate with `{needle}` for {memory}"))["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            };
            answer(json!({"decisions": [
                {"index": 1, "action": "update", "target_id": candidate_of(0, "tabs"), "text": MERGED},
                {"index": 2, "action": "supersede", "target_id": candidate_of(1, "Fly.io"), "text": RENDER}
            ]}))
        }),
    ])
    .await;
    let run = f.distiller.run(&config(&second, f.dir.path(), "ann")).await.unwrap();

    // the consolidation request carried the stored memories as candidates, with their ids
    let requests = second.requests();
    assert_eq!(requests.len(), 2);
    let extraction = input_document(&requests[0]);
    let sent: Vec<&str> = extraction["items"].as_array().unwrap().iter().map(|i| i["text"].as_str().unwrap()).collect();
    assert_eq!(sent.len(), 2, "only the new session's items: {sent:?}");
    assert!(!requests[0].to_string().contains(TABS), "items distilled before are not sent again");
    assert_eq!(schema_name(&requests[1]), "memory_decisions");
    let doc = input_document(&requests[1]);
    let candidates_of = |i: usize| -> Vec<String> {
        doc["new_memories"][i]["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(candidates_of(0).contains(&tabs_id.to_string()), "{doc}");
    assert!(candidates_of(1).contains(&deploy_id.to_string()), "{doc}");

    assert_eq!((run.added, run.updated, run.superseded), (1, 1, 1), "{:#?}", run.changes);
    // the restatement rewrote the same memory (same id) with the session that restated it
    let tabs = f.store.get_passage("ann", tabs_id).await.unwrap().unwrap();
    assert_eq!(tabs.text, MERGED);
    assert_eq!((tabs.session_id.as_str(), tabs.turn, tabs.superseded_by), ("s2", Some(0), None));
    let update = run.changes.iter().find(|c| c["action"] == "update").unwrap();
    assert_eq!(update["previous_text"], TABS_MEMORY, "the audit keeps the old text");
    // the contradiction: the old memory is kept, marked, and hidden from default searches
    let current = search(&f.store, "ann", "where does the shop deploy", false).await;
    let render = current.iter().find(|p| p.text == RENDER).expect("the new fact is current");
    assert!(current.iter().all(|p| p.id != deploy_id), "superseded memories are hidden by default");
    let old = f.store.get_passage("ann", deploy_id).await.unwrap().expect("never deleted");
    assert_eq!(old.superseded_by, Some(render.id));
    assert_eq!(old.text, DEPLOY_MEMORY);
    let all = search(&f.store, "ann", "where does the shop deploy", true).await;
    assert!(all.iter().any(|p| p.id == deploy_id && p.superseded_by == Some(render.id)));
    // a restatement found by the search embeds the merged text
    let by_new_words = search(&f.store, "ann", "displayed 4 wide", false).await;
    assert_eq!(by_new_words.first().map(|p| p.id), Some(tabs_id));

    // through the tool: hidden by default, shown and marked with `include_superseded`
    let host = crate::support::host(&f.dir.path().join("db"), crate::support::config("ann", "shop", None, None)).await;
    let session = astra_mcp::memory::GateState::new("reader");
    let query = |include: Value| {
        crate::support::args(json!({"query": "where does the shop deploy", "tags": null, "top_k": 10, "start": null,
            "end": null, "include_superseded": include}))
    };
    let default = host.call(&session, "archival_memory_search", query(Value::Null)).await.unwrap();
    assert!(!default.is_error && !default.text.contains(DEPLOY_MEMORY), "{}", default.text);
    let shown = host.call(&session, "archival_memory_search", query(json!(true))).await.unwrap();
    let results = shown.structured.as_ref().unwrap()["results"].as_array().unwrap().clone();
    let old_result = results.iter().find(|r| r["id"] == deploy_id.to_string()).expect("shown on request");
    assert_eq!(old_result["superseded_by"], render.id.to_string());
    assert!(shown.text.contains(&format!("SUPERSEDED by {}", render.id)), "{}", shown.text);
    assert!(results.iter().any(|r| r["id"] == render.id.to_string() && r["superseded_by"].is_null()));

    // forgetting a distilled memory leaves no copy of its text in the runs' change lists
    let forgot =
        host.call(&session, "memory_forget", crate::support::args(json!({"id": tabs_id.to_string()}))).await.unwrap();
    assert!(!forgot.is_error, "{}", forgot.text);
    let audit = serde_json::to_string(&f.store.runs(Some("ann")).await.unwrap()).unwrap();
    assert!(!audit.contains("displayed 4 wide") && !audit.contains(TABS_MEMORY), "{audit}");
    assert!(audit.contains(&tabs_id.to_string()) && audit.contains(RENDER), "ids and other memories stay: {audit}");
    // forgetting the memory that superseded another makes the old one current again
    let forgot =
        host.call(&session, "memory_forget", crate::support::args(json!({"id": render.id.to_string()}))).await.unwrap();
    assert!(!forgot.is_error, "{}", forgot.text);
    assert_eq!(f.store.get_passage("ann", deploy_id).await.unwrap().unwrap().superseded_by, None);
}

/// The command line: a run against the mock prints its counts and changes; `distill status` lists it;
/// without approval nothing is opened or sent.
#[tokio::test]
async fn the_distill_command_runs_and_lists_runs() {
    let f = fixture().await;
    ann_first_session(&f.store).await;
    let mocked = mock(vec![ann_first_extraction()]).await;
    let db = f.dir.path().join("db");
    let bin = env!("CARGO_BIN_EXE_astra-mcp");
    let run = |args: Vec<String>| {
        let mut command = std::process::Command::new(bin);
        command
            .args(&args)
            .env("OPENAI_API_KEY", "sk-test-key")
            .env_remove("OPENAI_BASE_URL")
            .current_dir(f.dir.path());
        tokio::task::spawn_blocking(move || command.output().unwrap())
    };
    let db_arg = db.to_str().unwrap().to_string();
    let base = mocked.base_url();
    let ledger = f.dir.path().join("ledger.jsonl").to_str().unwrap().to_string();
    let refused =
        run(vec!["distill".into(), "--db".into(), db_arg.clone(), "--actor".into(), "ann".into()]).await.unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("pass --approve-live-cost"), "{refused:?}");
    assert!(mocked.requests().is_empty());

    let out = run(vec![
        "distill".into(),
        "--db".into(),
        db_arg.clone(),
        "--actor".into(),
        "ann".into(),
        "--approve-live-cost".into(),
        "--base-url".into(),
        base,
        "--ledger".into(),
        ledger,
    ])
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("SUCCEEDED: 3 items read; 2 added, 0 updated, 0 superseded"), "{stdout}");
    assert!(stdout.contains(&format!(" {DEPLOY_MEMORY}")) && stdout.contains("0.0275 USD"), "{stdout}");
    assert_eq!(mocked.requests().len(), 1);

    let status =
        run(vec!["distill".into(), "status".into(), "--db".into(), db_arg.clone(), "--actor".into(), "ann".into()])
            .await
            .unwrap();
    let table = String::from_utf8_lossy(&status.stdout);
    let row = table.lines().find(|l| l.starts_with("distill-")).unwrap_or_else(|| panic!("{table}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[1..9], &["ann", "SUCCEEDED", cells[3], "3", "2", "0", "0", "0.0275"], "{table}");
    let json = run(vec!["distill".into(), "status".into(), "--db".into(), db_arg, "--json".into()]).await.unwrap();
    let line: Value = serde_json::from_str(String::from_utf8_lossy(&json.stdout).lines().next().unwrap()).unwrap();
    assert_eq!((line["state"].as_str(), line["added"].as_u64()), (Some("SUCCEEDED"), Some(2)));
}

/// A store moved with `memory export` and `memory import` keeps its distill runs: the next run in the
/// new place reads none of the items they read, and sends nothing.
#[tokio::test]
async fn a_store_moved_by_export_and_import_keeps_what_its_runs_read() {
    let f = fixture().await;
    ann_first_session(&f.store).await;
    let mocked = mock(vec![ann_first_extraction()]).await;
    let first = f.distiller.run(&config(&mocked, f.dir.path(), "ann")).await.unwrap();
    assert_eq!((first.state, first.items_read), (RunState::Succeeded, 3));
    let export = f.dir.path().join("export.jsonl");
    let moved = f.dir.path().join("moved");
    let astra = |db: &Path, args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"))
            .args(args)
            .env("ASTRA_DB", db)
            .env("ASTRA_ACTOR", "ann")
            .env("ASTRA_LOG", "warn")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    astra(&f.dir.path().join("db"), &["memory".as_ref(), "export".as_ref(), "--out".as_ref(), export.as_os_str()]);
    astra(&moved, &["memory".as_ref(), "import".as_ref(), export.as_os_str()]);

    let store = Arc::new(LanceStore::open(moved.to_str().unwrap()).await.unwrap());
    let runs = store.runs(Some("ann")).await.unwrap();
    let runs: Vec<_> = runs.iter().map(|r| (r.run_id.as_str(), r.state, r.items_read, r.added)).collect();
    assert_eq!(runs, [(first.run_id.as_str(), RunState::Succeeded, 3, 2)]);
    let nothing = mock(Vec::new()).await;
    let again = Distiller::new(store, embedder()).run(&config(&nothing, f.dir.path(), "ann")).await.unwrap();
    assert_eq!((again.items_read, again.added, again.requests), (0, 0, 0));
    assert!(nothing.requests().is_empty(), "{:#?}", nothing.requests());
}

#[tokio::test]
async fn a_run_that_fails_midway_changes_nothing_and_the_next_run_retries_the_same_items() {
    let f = ann_with_second_session(&[
        (Role::User, "Deploys moved from Fly.io to Render."),
        (Role::User, "I use ruff for linting."),
    ])
    .await;
    let before = search(&f.store, "ann", "deploy Fly.io Render ruff tabs", true).await;

    // extraction answers; the consolidation request is refused (a 400: not retried)
    let failing = mock(vec![
        memories(json!([
            {"kind": "fact", "text": "The user's shop deploys to Render.", "item": 1},
            {"kind": "preference", "text": "The user lints Python with ruff.", "item": 2}
        ])),
        step(|_| {
            ResponseTemplate::new(400).set_body_json(
                json!({"error": {"message": "request refused for key sk-proj-AbCdEf1234567890AbCdEf1234567890XYZ"}}),
            )
        }),
    ])
    .await;
    let error = f.distiller.run(&config(&failing, f.dir.path(), "ann")).await.unwrap_err();
    let DistillError::Failed { run_id, cause, .. } = &error else { panic!("{error}") };
    assert!(matches!(**cause, DistillError::Request(LlmError::Api { status: 400, .. })), "{cause}");
    assert!(!error.to_string().contains("sk-proj-"), "secrets in the error are redacted: {error}");
    assert!(error.to_string().contains("no memory was changed"), "{error}");
    assert_eq!(failing.requests().len(), 2);

    // nothing changed: the ruff memory (no candidates, planned as an add) was not written either
    let after = search(&f.store, "ann", "deploy Fly.io Render ruff tabs", true).await;
    assert_eq!(after, before);
    let runs = f.store.runs(Some("ann")).await.unwrap();
    let failed = runs.iter().find(|r| &r.run_id == run_id).unwrap();
    assert_eq!(failed.state, RunState::Failed);
    assert!(failed.error.as_deref().unwrap().contains("request refused"), "{failed:?}");
    assert!(!failed.error.as_deref().unwrap().contains("sk-proj-"), "{failed:?}");
    assert!((failed.cost_usd - REQUEST_USD).abs() < 1e-9, "the answered request's cost is recorded");
    assert_eq!(failed.items_read, 2);

    // the next run reads the same two items again and succeeds
    let retry = mock(vec![
        memories(json!([
            {"kind": "fact", "text": "The user's shop deploys to Render.", "item": 1},
            {"kind": "preference", "text": "The user lints Python with ruff.", "item": 2}
        ])),
        step(|request| {
            let doc = input_document(request);
            let decisions: Vec<Value> = doc["new_memories"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| json!({"index": m["index"], "action": "add", "target_id": null, "text": m["text"]}))
                .collect();
            answer(json!({"decisions": decisions}))
        }),
    ])
    .await;
    let run = f.distiller.run(&config(&retry, f.dir.path(), "ann")).await.unwrap();
    let retried: Vec<String> = input_document(&retry.requests()[0])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["text"].as_str().unwrap().to_string())
        .collect();
    let failed_items: Vec<String> = input_document(&failing.requests()[0])["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(retried, failed_items);
    assert_eq!(run.items_read, 2);
    assert_eq!(run.added, 2, "{:#?}", run.changes);
    let runs = f.store.runs(Some("ann")).await.unwrap();
    assert_eq!((runs_of(runs.clone(), RunState::Succeeded), runs_of(runs, RunState::Failed)), (2, 1));
}

#[tokio::test]
async fn a_second_run_of_an_actor_is_refused_while_one_runs_and_an_interrupted_run_is_closed() {
    let f = fixture().await;
    ann_first_session(&f.store).await;
    converse(&f.store, "bob", "b1", &[(Role::User, BOB_SECRET)]).await;
    let slow = mock(vec![step(|_| {
        answer(json!({"memories": [{"kind": "preference", "text": TABS_MEMORY, "item": 1}]}))
            .set_delay(std::time::Duration::from_secs(3))
    })])
    .await;
    let distiller = f.distiller.clone();
    let slow_config = config(&slow, f.dir.path(), "ann");
    let first = tokio::spawn(async move { distiller.run(&slow_config).await });
    while slow.requests().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let other = mock(vec![ann_first_extraction()]).await;
    let refused = f.distiller.run(&config(&other, f.dir.path(), "ann")).await.unwrap_err();
    let DistillError::Busy { actor, running } = &refused else { panic!("{refused}") };
    assert_eq!(actor, "ann");
    let first_id = f.store.runs(Some("ann")).await.unwrap()[0].run_id.clone();
    assert!(running.contains(&first_id), "the refusal names the running run: {refused}");
    assert!(other.requests().is_empty(), "the refused run sent nothing");
    // another actor is not blocked
    let bob_mock = mock(vec![memories(json!([]))]).await;
    assert_eq!(f.distiller.run(&config(&bob_mock, f.dir.path(), "bob")).await.unwrap().state, RunState::Succeeded);
    let finished = first.await.unwrap().unwrap();
    assert_eq!((finished.run_id.as_str(), finished.added), (first_id.as_str(), 1));

    // runs left RUNNING by a process that died are listed as interrupted and closed by the next run:
    // one that died before its commit FAILED (its items are read again), one whose commit landed
    // SUCCEEDED (recognised by its rows' commit time)
    converse(&f.store, "ann", "s3", &[(Role::User, "I prefer small pull requests.")]).await;
    let finished_run = f.store.runs(Some("ann")).await.unwrap().into_iter().find(|r| r.run_id == first_id).unwrap();
    assert!(finished_run.commit_at.is_some());
    let mut landed = finished_run.clone();
    landed.state = RunState::Running;
    landed.finished_at = None;
    f.store.put_run(&landed).await.unwrap();
    let mut crashed = finished_run.clone();
    crashed.run_id = "distill-crashed".into();
    crashed.state = RunState::Running;
    crashed.finished_at = None;
    crashed.commit_at = None;
    crashed.item_ids = Vec::new();
    f.store.put_run(&crashed).await.unwrap();
    let status = f.distiller.status(Some("ann")).await.unwrap();
    assert_eq!(status.iter().filter(|s| s.interrupted).count(), 2);
    let next = mock(vec![memories(json!([]))]).await;
    let run = f.distiller.run(&config(&next, f.dir.path(), "ann")).await.unwrap();
    assert_eq!(run.items_read, 1, "only the new item: the landed run's items count as distilled");
    let runs = f.store.runs(Some("ann")).await.unwrap();
    let closed = runs.iter().find(|r| r.run_id == "distill-crashed").unwrap();
    assert_eq!(closed.state, RunState::Failed);
    assert!(closed.error.as_deref().unwrap().contains("interrupted"));
    let recovered = runs.iter().find(|r| r.run_id == first_id).unwrap();
    assert_eq!((recovered.state, recovered.added), (RunState::Succeeded, 1), "{recovered:?}");
}

/// Two new memories touching the same stored memory are decided in two rounds: the second decision
/// sees what the first made of it, and nothing is written twice.
#[tokio::test]
async fn memories_touching_one_stored_memory_are_consolidated_in_turn() {
    let f = ann_with_second_session(&[
        (Role::User, "Tabs in Python, shown 4 wide."),
        (Role::User, "And tabs in Makefiles too, of course."),
    ])
    .await;
    const MERGED_ONE: &str = "The user indents Python code with tabs (shown 4 wide), never spaces.";
    const MERGED_TWO: &str = "The user indents Python code and Makefiles with tabs (shown 4 wide), never spaces.";
    let update_tabs = |text: &'static str| {
        step(move |request| {
            let doc = input_document(request);
            assert_eq!(doc["new_memories"].as_array().unwrap().len(), 1, "one memory per round: {doc}");
            let target = doc["new_memories"][0]["candidates"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["text"].as_str().unwrap().contains("tabs"))
                .unwrap_or_else(|| panic!("{doc}"))["id"]
                .clone();
            answer(json!({"decisions": [{"index": 1, "action": "update", "target_id": target, "text": text}]}))
        })
    };
    let second = mock(vec![
        memories(json!([
            {"kind": "preference", "text": "The user indents Python with tabs shown 4 wide.", "item": 1},
            {"kind": "preference", "text": "The user indents Makefiles with tabs.", "item": 2}
        ])),
        update_tabs(MERGED_ONE),
        update_tabs(MERGED_TWO),
    ])
    .await;
    let run = f.distiller.run(&config(&second, f.dir.path(), "ann")).await.unwrap();
    let requests = second.requests();
    assert_eq!(requests.len(), 3, "extraction, then one consolidation per round");
    let second_round = input_document(&requests[2]).to_string();
    assert!(second_round.contains(MERGED_ONE), "the second round sees the first's merge: {second_round}");
    assert_eq!(run.updated, 1, "{:#?}", run.changes);
    let rows = search(&f.store, "ann", "tabs indentation Makefiles Python", true).await;
    let tabs: Vec<&Passage> = rows.iter().filter(|p| p.text.contains("tabs")).collect();
    assert_eq!(tabs.len(), 1, "one memory, written once: {rows:#?}");
    assert_eq!(tabs[0].text, MERGED_TWO);
}

#[tokio::test]
async fn nothing_is_sent_or_recorded_without_approval_a_key_or_budget() {
    let f = fixture().await;
    ann_first_session(&f.store).await;
    let mocked = mock(vec![ann_first_extraction()]).await;
    let mut unapproved = config(&mocked, f.dir.path(), "ann");
    unapproved.client.approve_live_cost = false;
    let e = f.distiller.run(&unapproved).await.unwrap_err();
    assert!(matches!(e, DistillError::Request(LlmError::NotApproved(_))), "{e}");
    let mut keyless = config(&mocked, f.dir.path(), "ann");
    keyless.client.api_key = None;
    assert!(matches!(f.distiller.run(&keyless).await.unwrap_err(), DistillError::Request(LlmError::NoApiKey)));
    assert!(f.store.runs(None).await.unwrap().is_empty());

    let mut broke = config(&mocked, f.dir.path(), "ann");
    broke.run_budget_usd = 0.0;
    let e = f.distiller.run(&broke).await.unwrap_err();
    assert!(e.to_string().contains("budget reached"), "{e}");
    assert!(mocked.requests().is_empty(), "the budget is checked before the request");
    assert_eq!(f.store.runs(Some("ann")).await.unwrap()[0].state, RunState::Failed);
}

/// Forgetting a conversation item forgets what distill derived from it: the memory extracted from it is
/// gone from every table (the export holds them all), and its text from every run's change list (as
/// `distill status --json` prints them); the memory extracted from another item stays.
#[tokio::test]
async fn forgetting_an_item_forgets_the_memories_distilled_from_it() {
    use astra_mcp::store::ForgetStore;
    let f = fixture().await;
    ann_first_session(&f.store).await;
    let mocked = mock(vec![ann_first_extraction()]).await;
    f.distiller.run(&config(&mocked, f.dir.path(), "ann")).await.unwrap();
    assert_eq!(search(&f.store, "ann", "tabs indentation Fly.io", false).await.len(), 2);

    let deploy_item = astra_mcp::domain::conversation_item_id("ann", "s1", "claude-code", "s1:3");
    assert_eq!(f.store.forget("ann", deploy_item).await.unwrap(), Some("conversation"));

    let mut export = Vec::new();
    f.store.export(&mut export, None).await.unwrap();
    let export = String::from_utf8(export).unwrap();
    assert!(!export.contains("Fly.io"), "every table: the item and the memory distilled from it are gone");
    assert!(export.contains(TABS_MEMORY), "the memory of another item stays");
    let runs = serde_json::to_string(&f.store.runs(None).await.unwrap()).unwrap();
    assert!(!runs.contains("Fly.io") && runs.contains(TABS_MEMORY), "{runs}");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"))
        .args(["distill", "status", "--json", "--db"])
        .arg(f.dir.path().join("db"))
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    let printed = String::from_utf8_lossy(&status.stdout);
    assert!(printed.contains("SUCCEEDED") && !printed.contains("Fly.io"), "{printed}");
    let found = search(&f.store, "ann", "which hosting region do we deploy to", true).await;
    assert!(found.iter().all(|p| !p.text.contains("Fly.io")), "{found:?}");
}

/// `since` leaves out items stored before it, `max_items` reads the oldest of the rest first (the others
/// wait for the next run), a memory that is blank, too long or cites no item read is rejected and
/// counted but never stored, and a `skip` decision leaves the stored memory as it was.
#[tokio::test]
async fn since_and_max_items_choose_the_items_bad_memories_are_rejected_and_skip_changes_nothing() {
    let f = fixture().await;
    let pause = || tokio::time::sleep(std::time::Duration::from_millis(50));
    converse(&f.store, "ann", "old", &[(Role::User, "Back in 2023 we ran on Heroku, on a box called hermes.")]).await;
    pause().await;
    let since = chrono::Utc::now();
    pause().await;
    converse(&f.store, "ann", "new-a", &[(Role::User, DEPLOY), (Role::User, TABS)]).await;
    pause().await;
    converse(&f.store, "ann", "new-b", &[(Role::User, "Deploys of the shop go to Fly.io, region ams, as before.")])
        .await;

    let too_long = "y".repeat(astra_mcp::distill::MAX_MEMORY_CHARS + 1);
    let first = mock(vec![memories(json!([
        {"kind": "fact", "text": "The shop deploys to Fly.io in region ams.", "item": 1},
        {"kind": "fact", "text": "   ", "item": 2},
        {"kind": "preference", "text": too_long, "item": 2},
        {"kind": "fact", "text": "This cites an item that was never read.", "item": 9},
    ]))])
    .await;
    let mut settings = config(&first, f.dir.path(), "ann");
    settings.since = Some(since);
    settings.max_items = Some(2);
    let run = f.distiller.run(&settings).await.unwrap();
    assert_eq!((run.items_read, run.added, run.rejected), (2, 1, 3), "{run:?}");
    let sent = first.requests()[0].to_string();
    assert!(sent.contains("Fly.io, region ams.") && sent.contains("tabs"), "new-a's two items: {sent}");
    assert!(!sent.contains("Heroku"), "before --since: {sent}");
    assert!(!sent.contains("as before"), "past --max-items, left for the next run: {sent}");
    let stored = search(&f.store, "ann", "deploy Fly.io ams", false).await;
    assert_eq!(stored.len(), 1, "only the valid memory is stored: {stored:?}");
    assert!(!stored.iter().any(|p| p.text.contains("never read") || p.text.contains("yyyy")), "{stored:?}");

    // the next run reads new-b (still nothing before --since); its memory restates the stored one: skip
    let restated = "The shop's deploys go to Fly.io, region ams.";
    let second = mock(vec![
        memories(json!([{"kind": "fact", "text": restated, "item": 1}])),
        step(|request| {
            let doc = input_document(request);
            let target = doc["new_memories"][0]["candidates"][0]["id"].as_str().unwrap().to_string();
            answer(json!({"decisions": [{"index": 1, "action": "skip", "target_id": target, "text": ""}]}))
        }),
    ])
    .await;
    let mut settings = config(&second, f.dir.path(), "ann");
    settings.since = Some(since);
    let run = f.distiller.run(&settings).await.unwrap();
    assert_eq!((run.items_read, run.added, run.unchanged), (1, 0, 1), "{run:?}");
    assert!(!second.requests()[0].to_string().contains("Heroku"));
    let after = search(&f.store, "ann", "deploy Fly.io ams", false).await;
    assert_eq!(after, stored, "a skip changes nothing stored");
}

/// A run commits chunk by chunk: when the second chunk's request fails, the first chunk's memory stays
/// stored and its items distilled, and the next run sends (and pays for) only the second chunk's items.
#[tokio::test]
async fn a_failure_in_a_later_chunk_keeps_the_earlier_chunks_and_the_rerun_pays_only_for_the_rest() {
    let f = fixture().await;
    // 7 items of ~4,200 characters: 5 fit in one extraction request (24,000 characters), 2 in the next
    let items: Vec<String> = (0..7)
        .map(|n| {
            let topic = if n < 5 { "early" } else { "late" };
            format!("{topic} note {n}: {}", "the deploy pipeline details ".repeat(150))
        })
        .collect();
    let turns: Vec<(Role, &str)> = items.iter().map(|t| (Role::User, t.as_str())).collect();
    converse(&f.store, "ann", "long", &turns).await;
    const KEPT: &str = "The early pipeline notes say deploys run nightly.";
    let failing = mock(vec![
        memories(json!([{"kind": "fact", "text": KEPT, "item": 1}])),
        step(|_| ResponseTemplate::new(400).set_body_json(json!({"error": {"message": "request refused"}}))),
    ])
    .await;
    let error = f.distiller.run(&config(&failing, f.dir.path(), "ann")).await.unwrap_err();
    assert!(error.to_string().contains("the changes from 5 of its 7 items are kept"), "{error}");
    let requests = failing.requests();
    assert_eq!(requests.len(), 2);
    let (first, second) = (requests[0].to_string(), requests[1].to_string());
    assert!(first.contains("early note 4") && !first.contains("late note"), "chunk 1 is items 0-4");
    assert!(second.contains("late note 5") && second.contains("late note 6") && !second.contains("early note"));
    let stored = search(&f.store, "ann", "pipeline deploys nightly", false).await;
    assert!(stored.iter().any(|p| p.text == KEPT), "the first chunk's commit stands: {stored:?}");
    let failed = f.store.runs(Some("ann")).await.unwrap().into_iter().next().unwrap();
    assert_eq!((failed.state, failed.added, failed.distilled_item_ids.len()), (RunState::Failed, 1, 5));

    let rerun = mock(vec![memories(json!([]))]).await;
    let run = f.distiller.run(&config(&rerun, f.dir.path(), "ann")).await.unwrap();
    assert_eq!(run.items_read, 2, "only the failed chunk's items are read again");
    let sent = rerun.requests();
    assert_eq!(sent.len(), 1);
    assert!(sent[0].to_string().contains("late note 5") && !sent[0].to_string().contains("early note"));
    // the ledger: the failed run paid for its one answered request, the rerun for one; the 400 is free
    let ledger = Ledger::new(f.dir.path().join("ledger.jsonl")).entries().unwrap();
    assert_eq!(ledger.len(), 2, "{ledger:?}");
}
