//! MCP end to end in-process: rmcp's client and our server over a `tokio::io::duplex` pipe, on a real
//! store, the real model and real pytest runs of the demo projects.

use astra_mcp::domain::{FixRecord, fix_memory_id};
use astra_mcp::memory::workspace::Workspace;
use astra_mcp::store::FixStore;
use astra_mcp::store::lance::LanceStore;
use astra_mcp::tools::{SearchOutput, StoreFixOutput, ToolHost};
use astra_mcp::transport::McpServer;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::support::{apply_reference_fix, args, config, embedder, host, pytest_command, scenario};

async fn connect(server: McpServer) -> RunningService<RoleClient, ()> {
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let running = server.serve(server_io).await.expect("server handshake");
        let _ = running.waiting().await;
    });
    ().serve(client_io).await.expect("client handshake")
}

async fn call<H: rmcp::ClientHandler>(
    client: &RunningService<RoleClient, H>,
    tool: &str,
    arguments: Value,
) -> CallToolResult {
    client
        .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args(arguments)))
        .await
        .unwrap_or_else(|e| panic!("{tool}: protocol error {e}"))
}

fn text(result: &CallToolResult) -> String {
    result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

#[tokio::test]
async fn tools_list_is_strict_annotated_and_instructions_state_the_order() {
    let db = tempfile::tempdir().unwrap();
    let client = connect(McpServer::new(host(db.path(), config("ann", "p", None, None)).await)).await;
    let info = client.peer_info().expect("initialized");
    let instructions = info.instructions.clone().unwrap_or_default();
    let (s, r, st) = (
        instructions.find("search_codebase_memory").unwrap(),
        instructions.find("run_tests").unwrap(),
        instructions.find("store_fix_memory").unwrap(),
    );
    assert!(s < r && r < st, "instructions name search, then run_tests, then store: {instructions}");
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(
        names,
        [
            "search_codebase_memory",
            "run_tests",
            "store_fix_memory",
            "core_memory_append",
            "core_memory_replace",
            "archival_memory_insert",
            "archival_memory_search",
            "conversation_search",
            "memory_forget",
        ]
    );
    for tool in &tools {
        let schema = Value::Object(tool.input_schema.as_ref().clone());
        assert_eq!(schema["additionalProperties"], json!(false), "{}", tool.name);
        let mut props: Vec<_> = schema["properties"].as_object().unwrap().keys().cloned().collect();
        let mut required: Vec<String> =
            schema["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        props.sort();
        required.sort();
        assert_eq!(props, required, "{}: every property is required (optional ones are nullable)", tool.name);
        assert!(!schema.to_string().contains("\"format\":\"int"), "{}: no uint8-style formats", tool.name);
        assert!(tool.output_schema.is_some(), "{} has an output schema", tool.name);
        let a = tool.annotations.as_ref().expect("annotations");
        let destructive = tool.name == "memory_forget";
        assert_eq!(a.destructive_hint, Some(destructive), "{}: destructiveHint set explicitly", tool.name);
        let read_only = tool.name.contains("search");
        assert_eq!(a.read_only_hint, Some(read_only), "{}", tool.name);
    }
    let search = Value::Object(tools[0].input_schema.as_ref().clone());
    assert_eq!(search["properties"]["top_k"]["minimum"], json!(1));
    assert_eq!(search["properties"]["top_k"]["maximum"], json!(10));
    assert_eq!(search["properties"]["query"]["maxLength"], json!(2000));
    assert_eq!(search["properties"]["error_type"]["type"], json!(["string", "null"]));
    // a schema violation is a tool result the model can read, not a JSON-RPC error
    let bad = call(&client, "search_codebase_memory", json!({"query": "x", "top_k": 99, "error_type": null})).await;
    assert_eq!(bad.is_error, Some(true));
    assert!(text(&bad).contains("between 1 and 10"), "{}", text(&bad));
    let unknown = client.call_tool(CallToolRequestParams::new("no_such_tool").with_arguments(args(json!({})))).await;
    assert!(unknown.is_err(), "unknown tools are protocol errors");
    client.cancel().await.unwrap();
}

/// Unrelated fixes of the same actor, so that "Match 1" means something.
async fn seed_distractors(db: &std::path::Path) {
    let store = LanceStore::open(db.to_str().unwrap()).await.unwrap();
    let fixes = [
        ("Database connection pool exhausted under load: release connections in a finally block", "TimeoutError"),
        ("Pagination skipped the last item: the end index was exclusive twice (off-by-one)", "AssertionError"),
        ("Comparing timezone-naive and aware datetimes: make every timestamp UTC-aware at parse time", "TypeError"),
        (
            "CSV import crashed on Latin-1 files: open with the declared encoding and errors='replace'",
            "UnicodeDecodeError",
        ),
        (
            "Cache key ignored the user's locale, so translations leaked between users: add locale to the key",
            "AssertionError",
        ),
    ];
    for (i, (fix, error_type)) in fixes.iter().enumerate() {
        let text = format!("Error type: {error_type}\nFix: {fix}");
        let now = chrono::Utc::now();
        let record = FixRecord {
            memory_id: fix_memory_id("ann", &format!("seed-{i}"), fix, error_type, "ok", &[]),
            actor_id: "ann".into(),
            project: format!("other-{i}"),
            session_id: format!("seed-{i}"),
            created_at: now,
            updated_at: now,
            fix_description: fix.to_string(),
            error_type: error_type.to_string(),
            file_paths: vec!["src/x.py".into()],
            outcome: "pytest passed with exit code 0 (3 passed) [receipt 00000000]".into(),
            verified: true,
            receipt: None,
            embedded_text: text.clone(),
        };
        let v = embedder().embed_documents(vec![text]).await.unwrap().remove(0);
        store.upsert_fix(&record, &v).await.unwrap();
    }
}

#[tokio::test]
async fn a_fix_verified_in_alpha_is_match_1_for_beta_symptoms_in_a_new_session() {
    let db = tempfile::tempdir().unwrap();
    seed_distractors(db.path()).await;
    let (_a, alpha) = scenario("scenario_alpha");
    let (_b, beta) = scenario("scenario_beta");
    let cmd = pytest_command();

    // Session A on alpha
    let host_a: ToolHost = host(db.path(), config("ann", "scenario_alpha", Some(&alpha), Some(&cmd))).await;
    let a = connect(McpServer::new(host_a.clone())).await;
    let first = call(
        &a,
        "search_codebase_memory",
        json!({"query": "second allowed origin rejected by CORS check", "error_type": null, "top_k": 3}),
    )
    .await;
    assert_eq!(first.is_error, Some(false));
    let failing = call(&a, "run_tests", json!({})).await;
    let failing_out = failing.structured_content.clone().unwrap();
    assert_eq!(failing.is_error, Some(false), "a failing run is a normal result");
    assert_eq!(failing_out["passed"], json!(false));
    assert_eq!(failing_out["exit_code"], json!(1));
    assert!(failing_out["summary"].as_str().unwrap().starts_with("4 failed in "), "{failing_out}");
    assert_eq!(failing_out["failing_tests"].as_array().unwrap().len(), 4);
    assert!(failing_out["confirmed_outcome"].is_null());
    let changed = apply_reference_fix("scenario_alpha", &alpha);
    assert_eq!(changed, ["webapp/settings.py"]);
    let passing = call(&a, "run_tests", json!({})).await.structured_content.unwrap();
    let outcome = passing["confirmed_outcome"].as_str().unwrap().to_string();
    assert!(outcome.starts_with("pytest passed with exit code 0 (4 passed) [receipt "), "{outcome}");
    // a second session on the same server host has its own gates: it has not searched
    let other = connect(McpServer::new(host_a.clone())).await;
    let refused = call(
        &other,
        "store_fix_memory",
        json!({"fix_description": "x", "error_type": "E", "file_paths": changed, "outcome": outcome}),
    )
    .await;
    assert_eq!(refused.is_error, Some(true), "another session's search must not open this session's gate");
    let stored = call(&a, "store_fix_memory", json!({
        "fix_description": "Comma-separated env settings kept the space after each comma; strip() every entry and drop blanks",
        "error_type": "AssertionError",
        "file_paths": changed,
        "outcome": outcome,
    }))
    .await;
    assert_eq!(stored.is_error, Some(false), "{}", text(&stored));
    let stored: StoreFixOutput = serde_json::from_value(stored.structured_content.unwrap()).unwrap();
    let workspace = Workspace::open(&alpha).unwrap();
    assert_eq!(
        stored.receipt.as_ref().unwrap().file_hashes,
        workspace.file_hashes(&["webapp/settings.py".to_string()])
    );
    a.cancel().await.unwrap();

    // Session B on beta, another project of the same actor, before any edit
    let host_b = host(db.path(), config("ann", "scenario_beta", Some(&beta), Some(&cmd))).await;
    let b = connect(McpServer::new(host_b)).await;
    let run = call(&b, "run_tests", json!({})).await.structured_content.unwrap();
    let symptoms: Vec<String> = run["failing_tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["message"].as_str().unwrap_or(t["name"].as_str().unwrap()).to_string())
        .collect();
    let found =
        call(&b, "search_codebase_memory", json!({"query": symptoms.join("; "), "error_type": null, "top_k": 3})).await;
    let body = text(&found);
    let out: SearchOutput = serde_json::from_value(found.structured_content.unwrap()).unwrap();
    assert_eq!(
        out.matches[0].memory_id, stored.memory_id,
        "alpha's fix must be Match 1 among the distractors:\n{body}"
    );
    assert_eq!(out.matches[0].project, "scenario_alpha");
    assert_eq!(out.matches[0].stale, None, "hits from another project have stale = null");
    assert!(out.matches[0].verified);
    // the text layout of docs/tools.md
    let first_block: Vec<&str> = body.split("\n\n").next().unwrap().lines().collect();
    assert_eq!(first_block.len(), 8, "{body}");
    // the fused score orders the matches; the cosine is `score` (docs/tools.md)
    assert_eq!(
        first_block[0],
        format!("Match 1 (fused_score={:.4}, cosine={:.4})", out.matches[0].fused_score, out.matches[0].score)
    );
    assert_eq!(first_block[1], format!("Fix: {}", out.matches[0].fix_description));
    assert_eq!(first_block[2], "Error type: AssertionError");
    // alpha's fix, read in beta: its project, and that its files are not in beta's workspace
    assert_eq!(first_block[3], "Project: scenario_alpha (another project: its files are not in this workspace)");
    assert_eq!(first_block[4], "Files: webapp/settings.py");
    assert_eq!(first_block[5], format!("Outcome: {outcome}"));
    // when the tests passed, and how long ago (the fix was stored seconds ago)
    assert_eq!(first_block[6], format!("Confirmed: {} (just now)", out.matches[0].confirmed_at), "{body}");
    assert_eq!(out.matches[0].last_verified_at.as_deref(), Some(out.matches[0].confirmed_at.as_str()), "never renewed");
    assert_eq!(first_block[7], format!("Session: {}", stored.session_id));
    b.cancel().await.unwrap();
}

/// A client that forwards `notifications/resources/updated` to a channel.
#[derive(Clone)]
struct UpdateWatcher(tokio::sync::mpsc::UnboundedSender<String>);

impl rmcp::ClientHandler for UpdateWatcher {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }
}

#[tokio::test]
async fn core_blocks_are_resources_with_update_notifications_and_a_prompt() {
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams, ResourceContents, SubscribeRequestParams};
    let db = tempfile::tempdir().unwrap();
    let server = McpServer::new(host(db.path(), config("ann", "alpha", None, None)).await);
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let running = server.serve(server_io).await.expect("server handshake");
        let _ = running.waiting().await;
    });
    let (tx, mut updates) = tokio::sync::mpsc::unbounded_channel();
    let client = UpdateWatcher(tx).serve(client_io).await.expect("client handshake");
    let caps = client.peer_info().unwrap().capabilities.clone();
    assert_eq!(caps.resources.as_ref().and_then(|r| r.subscribe), Some(true));
    assert!(caps.prompts.is_some());

    let resources = client.list_all_resources().await.unwrap();
    let uris: Vec<_> = resources.iter().map(|r| r.uri.clone()).collect();
    assert_eq!(uris, ["memory://core/persona", "memory://core/human", "memory://core/project"]);

    #[allow(deprecated)] // the 2025-11-25 mechanism, which this handshake negotiates
    client.subscribe(SubscribeRequestParams::new("memory://core/human")).await.unwrap();
    let appended =
        call(&client, "core_memory_append", json!({"section": "human", "text": "Ann likes short answers."})).await;
    assert_ne!(appended.is_error, Some(true), "{}", text(&appended));
    let uri = tokio::time::timeout(std::time::Duration::from_secs(5), updates.recv()).await.expect("notified").unwrap();
    assert_eq!(uri, "memory://core/human");
    // a block nobody subscribed to changes silently
    call(&client, "core_memory_append", json!({"section": "project", "text": "Python 3.12."})).await;
    assert!(tokio::time::timeout(std::time::Duration::from_millis(300), updates.recv()).await.is_err());

    let read = client.read_resource(ReadResourceRequestParams::new("memory://core/human")).await.unwrap();
    match &read.contents[0] {
        ResourceContents::TextResourceContents { text, .. } => assert_eq!(text, "Ann likes short answers."),
        other => panic!("text contents expected, got {other:?}"),
    }
    let missing = client.read_resource(ReadResourceRequestParams::new("memory://core/diary")).await;
    assert!(missing.is_err(), "unknown resource is a protocol error");

    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(prompts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["core_memory"]);
    let prompt = client.get_prompt(GetPromptRequestParams::new("core_memory")).await.unwrap();
    let body = match &prompt.messages[0].content {
        rmcp::model::ContentBlock::Text(t) => t.text.clone(),
        other => panic!("text prompt expected, got {other:?}"),
    };
    assert!(body.contains("<human chars=\"24/2000\">\nAnn likes short answers.\n</human>"), "{body}");
    assert!(body.contains("<project chars=\"12/2000\">\nPython 3.12.\n</project>"), "{body}");
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn a_subscriptions_listen_stream_carries_core_block_updates() {
    use rmcp::model::{ProtocolVersion, ServerNotification, SubscriptionFilter};
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    let db = tempfile::tempdir().unwrap();
    let server = McpServer::new(host(db.path(), config("ann", "alpha", None, None)).await);
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let running = server.serve(server_io).await.expect("server start");
        let _ = running.waiting().await;
    });
    // protocol 2026-07-28: no initialize handshake (server/discover), subscriptions over subscriptions/listen
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let client = ().serve_with_lifecycle(client_io, lifecycle).await.expect("discover");
    let filter =
        SubscriptionFilter::builder().resource_subscriptions(["memory://core/project", "memory://nope"]).build();
    let mut stream = client.peer().listen(filter).await.expect("subscriptions/listen acknowledged");
    assert_eq!(
        stream.acknowledged().resource_subscriptions.as_deref(),
        Some(&["memory://core/project".to_string()][..]),
        "only our URIs are accepted"
    );
    call(&client, "core_memory_append", json!({"section": "human", "text": "not subscribed"})).await;
    call(&client, "core_memory_append", json!({"section": "project", "text": "Uses Poetry."})).await;
    let next = tokio::time::timeout(std::time::Duration::from_secs(5), stream.next()).await.expect("an update");
    match next.unwrap() {
        Some(ServerNotification::ResourceUpdatedNotification(n)) => assert_eq!(n.params.uri, "memory://core/project"),
        other => panic!("expected a resource update, got {other:?}"),
    }
    client.cancel().await.unwrap();
}
