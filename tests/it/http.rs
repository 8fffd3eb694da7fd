//! The real binary over HTTP (`serve --http`): DNS-rebinding checks, bearer tokens and actor isolation
//! (with the official Python SDK as the client), sessions bound to their token, the loopback default,
//! and graceful shutdown with a call in flight. Requests that must be refused are sent raw (reqwest), so
//! the test controls every header.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{HttpServer as Server, SHELL_TESTS, repo, venv_python};

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");
pub(crate) const ALICE: &str = "alice-token-0123456789abcdef";
pub(crate) const BOB: &str = "bob-token-0123456789abcdef";

pub(crate) fn config_with_tokens(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            "[[tokens]]\ntoken = \"{ALICE}\"\nactor_id = \"alice\"\nproject = \"web\"\n\n\
             [[tokens]]\ntoken = \"{BOB}\"\nactor_id = \"bob\"\n"
        ),
    )
    .unwrap();
    path
}

/// A POST of one JSON-RPC message to `/mcp`; returns the status, the session id header and the
/// JSON-RPC messages of the body (plain JSON or SSE `data:` lines).
pub(crate) async fn post(
    url: &str,
    headers: &[(&str, &str)],
    session: Option<&str>,
    body: Value,
) -> (u16, Option<String>, Vec<Value>) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    let response = request.body(body.to_string()).send().await.unwrap();
    let status = response.status().as_u16();
    let session = response.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_string());
    let text = response.text().await.unwrap();
    let messages = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:").map(str::trim).or(Some(l.trim())))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    (status, session, messages)
}

pub(crate) fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}})
}

/// Opens a session (initialize + initialized) with `headers`; returns its id.
pub(crate) async fn open_session(url: &str, headers: &[(&str, &str)]) -> String {
    let (status, session, messages) = post(url, headers, None, initialize()).await;
    assert_eq!(status, 200, "{messages:?}");
    assert_eq!(messages[0]["result"]["serverInfo"]["name"], "astra-mcp");
    let session = session.expect("a session id");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = post(url, headers, Some(&session), note).await;
    assert_eq!(status, 202);
    session
}

pub(crate) fn call(id: i64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

fn search_archival(query: &str) -> Value {
    json!({"query": query, "tags": null, "top_k": 5, "start": null, "end": null})
}

#[tokio::test]
async fn foreign_host_or_origin_gets_403_and_nothing_runs() {
    let db = tempfile::tempdir().unwrap();
    let server = Server::start(&db.path().join("db"), &[]);
    let session = open_session(&server.url, &[]).await;
    let insert = call(1, "archival_memory_insert", json!({"text": "rebinding attack payload", "tags": []}));
    for headers in [
        [("origin", "http://evil.example")],
        [("origin", "null")],
        [("host", "evil.example")], // DNS rebinding: the browser sends the attacker's name
    ] {
        let (status, _, body) = post(&server.url, &headers, Some(&session), insert.clone()).await;
        assert_eq!(status, 403, "{headers:?}: {body:?}");
        assert!(body[0]["error"]["message"].as_str().unwrap().contains("DNS rebinding"), "{body:?}");
    }
    let client = reqwest::Client::new();
    let sse = client.get(format!("{}/sse", server.base())).header("origin", "http://evil.example").send().await;
    assert_eq!(sse.unwrap().status().as_u16(), 403, "the legacy SSE stream checks Origin too");
    let message = client
        .post(format!("{}/message?sessionId=x", server.base()))
        .header("host", "evil.example")
        .body(insert.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(message.status().as_u16(), 403, "and so does its POST endpoint");
    // a loopback origin (a local web app) is fine, and the refused insert never happened
    let (status, _, body) = post(
        &server.url,
        &[("origin", "http://localhost:5173")],
        Some(&session),
        call(2, "archival_memory_search", search_archival("rebinding attack payload")),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body[0]["result"]["structuredContent"]["results"], json!([]), "{body:?}");
}

#[tokio::test]
async fn with_tokens_a_request_needs_one_and_a_session_keeps_its_owner() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_tokens(dir.path());
    let server = Server::start(&dir.path().join("db"), &["--config", config.to_str().unwrap()]);
    for auth in [None, Some("Bearer not-a-configured-token-000"), Some(&*format!("Basic {ALICE}"))] {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", *a)).collect();
        let (status, _, body) = post(&server.url, &headers, None, initialize()).await;
        assert_eq!(status, 401, "{auth:?}: {body:?}");
    }
    // two tokens in one request are ambiguous: refused, whichever comes first
    let both = [("authorization", &*format!("Bearer {ALICE}")), ("authorization", &*format!("Bearer {BOB}"))];
    let (status, _, body) = post(&server.url, &both, None, initialize()).await;
    assert_eq!(status, 401, "{body:?}");
    assert!(body[0]["error"]["message"].as_str().unwrap().contains("more than one Authorization header"), "{body:?}");
    let raw = reqwest::Client::new().get(format!("{}/sse", server.base())).send().await.unwrap();
    assert_eq!(raw.status().as_u16(), 401);
    assert_eq!(raw.headers()["www-authenticate"], "Bearer realm=\"astra-mcp\"");

    let alice = format!("Bearer {ALICE}");
    let bob = format!("Bearer {BOB}");
    let session = open_session(&server.url, &[("authorization", &alice)]).await;
    let insert = call(1, "archival_memory_insert", json!({"text": "alice's own note", "tags": []}));
    let (status, _, body) = post(&server.url, &[("authorization", &bob)], Some(&session), insert).await;
    assert_eq!(status, 403, "{body:?}");
    let message = body[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("opened with another bearer token"), "bob cannot use alice's session: {body:?}");
    // nor listen on it, nor end it
    let client = reqwest::Client::new();
    let listen = client
        .get(&server.url)
        .header("authorization", &bob)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .unwrap();
    assert_eq!(listen.status().as_u16(), 403, "bob's GET stream on alice's session");
    let end = client.delete(&server.url).header("authorization", &bob).header("mcp-session-id", &session).send().await;
    assert_eq!(end.unwrap().status().as_u16(), 403, "bob's DELETE of alice's session");
    // the scheme is case-insensitive (RFC 7235), and alice's session is still alive
    let shouting = format!("BEARER {ALICE}");
    let (status, _, body) = post(
        &server.url,
        &[("authorization", &shouting)],
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}),
    )
    .await;
    assert_eq!((status, &body[0]["result"]), (200, &json!({})), "{body:?}");
    // authentication comes before the body is read: garbage without a token is a 401, not a parse error
    let garbage =
        client.post(&server.url).header("content-type", "application/json").body("{oops").send().await.unwrap();
    assert_eq!(garbage.status().as_u16(), 401);
    let (_, _, body) = post(
        &server.url,
        &[("authorization", &alice)],
        Some(&session),
        call(2, "archival_memory_search", search_archival("alice's own note")),
    )
    .await;
    assert_eq!(body[0]["result"]["structuredContent"]["results"], json!([]), "bob's attempt stored nothing");
}

#[test]
fn python_sdk_sees_each_token_only_its_own_memory_for_every_tool() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("app.txt"), "broken\n").unwrap();
    let config = config_with_tokens(dir.path());
    let server = Server::start(
        &dir.path().join("db"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--workspace",
            workspace.to_str().unwrap(),
            "--test-command",
            SHELL_TESTS,
        ],
    );
    let output = Command::new(venv_python())
        .arg(repo().join("tests/interop/actors_http.py"))
        .args([&server.url, ALICE, BOB])
        .arg(&workspace)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&output.stderr));
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(seen["ok"], true);
    assert!(seen["other_session_store"].as_str().unwrap().starts_with("confirmed-outcome gate"), "{seen}");
    assert!(seen["bob_forget_error"].as_str().unwrap().contains("no memory with id"), "{seen}");
}

#[test]
fn a_non_loopback_address_needs_allow_remote() {
    let db = tempfile::tempdir().unwrap();
    let output = Command::new(BIN)
        .args(["serve", "--http", "0.0.0.0:0", "--db"])
        .arg(db.path())
        .env("ASTRA_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not a loopback address") && stderr.contains("--allow-remote"), "{stderr}");
}

#[test]
fn a_bad_config_file_is_named_with_what_to_fix() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let cases = [
        ("[[tokens]]\ntoken = \"short\"\nactor_id = \"a\"\n", "shorter than 16 characters"),
        ("[[tokens]]\ntoken = \"0123456789abcdef\\n0123\"\nactor_id = \"a\"\n", "whitespace or control"),
        ("allowed_hosts = [\"*\"]\n", "wildcards are not supported"),
        ("allowed_origins = [\"app.example.com\"]\n", "is not `http(s)://host[:port]`"),
        ("tokens = []\nmystery = 1\n", "unknown field `mystery`"),
    ];
    for (text, expected) in cases {
        std::fs::write(&config, text).unwrap();
        let output = Command::new(BIN)
            .args(["serve", "--http", "localhost:0", "--config"])
            .arg(&config)
            .arg("--db")
            .arg(dir.path().join("db"))
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(1), "{text}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected) && stderr.contains("config.toml"), "{text}: {stderr}");
    }
    let output = Command::new(BIN).args(["serve", "--http", "my-laptop:8765"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("use e.g. 127.0.0.1:8765"));
}

#[tokio::test]
async fn sigterm_lets_the_call_in_flight_finish_and_refuses_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("app.txt"), "fixed\n").unwrap();
    let started = dir.path().join("started");
    let slow_tests = format!("touch {}; sleep 2; {SHELL_TESTS}", started.display());
    let mut server = Server::start(
        &dir.path().join("db"),
        &["--workspace", workspace.to_str().unwrap(), "--test-command", &slow_tests],
    );
    let session = open_session(&server.url, &[]).await;
    let in_flight = tokio::spawn({
        let (url, session) = (server.url.clone(), session.clone());
        async move { post(&url, &[], Some(&session), call(1, "run_tests", json!({}))).await }
    });
    while !started.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(server.pid(), libc::SIGTERM) }, 0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, _, refused) = post(&server.url, &[], Some(&session), call(2, "run_tests", json!({}))).await;
    assert!(
        refused[0]["error"]["message"].as_str().unwrap_or_default().contains("shutting down"),
        "a call made while draining is refused: {refused:?}"
    );
    let (status, _, body) = in_flight.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body[0]["result"]["structuredContent"]["passed"], true, "the call in flight finished: {body:?}");
    let exit = tokio::task::spawn_blocking(move || server.child.wait().unwrap()).await.unwrap();
    assert!(exit.success(), "graceful exit, got {exit:?}");
}

/// A stateless (2026-07-28, no `initialize`) `tools/call` with the headers and `_meta` that protocol needs.
async fn stateless_call(url: &str, token: Option<&str>, name: &str, arguments: Value) -> Value {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let meta = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}, "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": name, "arguments": arguments, "_meta": meta}});
    let text = request.body(body.to_string()).send().await.unwrap().text().await.unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix("data:")).map_or(text.as_str(), str::trim);
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[tokio::test]
async fn stateless_requests_share_gate_state_per_actor_and_never_with_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_tokens(dir.path());
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("app.txt"), "broken\n").unwrap();
    let server = Server::start(
        &dir.path().join("db"),
        &[
            "--config",
            config.to_str().unwrap(),
            "--workspace",
            workspace.to_str().unwrap(),
            "--test-command",
            SHELL_TESTS,
        ],
    );
    let store = json!({"fix_description": "x", "error_type": "E", "file_paths": ["app.txt"], "outcome": "o"});
    let gate = |reply: &Value| reply["result"]["content"][0]["text"].as_str().unwrap_or_default().to_string();
    let search = json!({"query": "boom", "error_type": null, "top_k": 1});
    let found = stateless_call(&server.url, Some(ALICE), "search_codebase_memory", search).await;
    assert_eq!(gate(&found), "No relevant confirmed fixes found.", "{found}");
    // alice's later stateless request remembers that search: the memory gate is open, the next one not
    let stored = stateless_call(&server.url, Some(ALICE), "store_fix_memory", store.clone()).await;
    assert!(gate(&stored).starts_with("confirmed-outcome gate"), "{stored}");
    // bob's stateless requests have their own gate state
    let stored = stateless_call(&server.url, Some(BOB), "store_fix_memory", store.clone()).await;
    assert!(gate(&stored).starts_with("memory gate"), "{stored}");
    // and a session of alice's does not inherit the sessionless state
    let alice = format!("Bearer {ALICE}");
    let session = open_session(&server.url, &[("authorization", &alice)]).await;
    let (_, _, body) =
        post(&server.url, &[("authorization", &alice)], Some(&session), call(1, "store_fix_memory", store)).await;
    assert!(gate(&body[0]).starts_with("memory gate"), "{body:?}");
}

#[tokio::test]
async fn a_body_that_is_not_json_gets_a_json_rpc_parse_error() {
    let db = tempfile::tempdir().unwrap();
    let server = Server::start(db.path(), &[]);
    let client = reqwest::Client::new();
    for url in [server.url.clone(), format!("{}/message?sessionId=nope", server.base())] {
        let response = client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400, "{url}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], -32700, "{url}: {body}");
    }
    // JSON that is not one MCP message: a batch, or a request without "jsonrpc": "2.0"
    for (body, id) in [
        (json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]), json!(null)),
        (json!({"id": 4, "method": "ping"}), json!(4)),
    ] {
        let (status, _, reply) = post(&server.url, &[], None, body).await;
        assert_eq!(status, 400);
        assert_eq!((&reply[0]["error"]["code"], &reply[0]["id"]), (&json!(-32600), &id), "{reply:?}");
    }
}

#[tokio::test]
async fn browsers_at_allowed_origins_get_cors_answers_and_others_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "allowed_origins = [\"https://app.example.com\"]\n").unwrap();
    let server = Server::start(&dir.path().join("db"), &["--config", config.to_str().unwrap()]);
    let client = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        client
            .request(reqwest::Method::OPTIONS, &server.url)
            .header("origin", origin)
            .header("access-control-request-method", "POST")
            .header("access-control-request-headers", "content-type, mcp-session-id")
            .send()
    };
    let ok = preflight("https://app.example.com").await.unwrap();
    assert_eq!(ok.status().as_u16(), 204);
    assert_eq!(ok.headers()["access-control-allow-origin"], "https://app.example.com");
    assert!(ok.headers()["access-control-allow-headers"].to_str().unwrap().contains("mcp-session-id"));
    assert_eq!(preflight("https://evil.example").await.unwrap().status().as_u16(), 403);
    let (status, _, _) = post(&server.url, &[("origin", "https://app.example.com")], None, initialize()).await;
    assert_eq!(status, 200);
    let response = client
        .post(&server.url)
        .header("origin", "https://app.example.com")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["access-control-allow-origin"], "https://app.example.com");
    assert!(response.headers()["access-control-expose-headers"].to_str().unwrap().contains("mcp-session-id"));
}

/// In one session, a request reusing the id of one still running gets a JSON-RPC `-32600` at once, and
/// the first one still gets its answer (it used to be lost: rmcp keys a session's calls by id).
#[tokio::test]
async fn a_request_reusing_an_id_in_flight_in_its_session_gets_an_error_and_both_are_answered() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let started = dir.path().join("started");
    let slow = format!("touch {}; sleep 1; echo '1 passed in 1.00s'", started.display());
    let server =
        Server::start(&dir.path().join("db"), &["--workspace", workspace.to_str().unwrap(), "--test-command", &slow]);
    let session = open_session(&server.url, &[]).await;
    let first = tokio::spawn({
        let (url, session) = (server.url.clone(), session.clone());
        async move { post(&url, &[], Some(&session), call(7, "run_tests", json!({}))).await }
    });
    while !started.exists() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, _, duplicate) =
        post(&server.url, &[], Some(&session), json!({"jsonrpc": "2.0", "id": 7, "method": "ping"})).await;
    assert_eq!(status, 400, "{duplicate:?}");
    assert_eq!((duplicate[0]["id"].clone(), duplicate[0]["error"]["code"].clone()), (json!(7), json!(-32600)));
    assert!(duplicate[0]["error"]["message"].as_str().unwrap().contains("id 7 is already used"), "{duplicate:?}");
    let answered = tokio::time::timeout(Duration::from_secs(30), first).await;
    let (status, _, body) = answered.expect("the first request is answered").unwrap();
    assert_eq!(status, 200);
    let result = body.iter().find(|m| m["id"] == json!(7)).unwrap_or_else(|| panic!("{body:?}"));
    assert_eq!(result["result"]["structuredContent"]["passed"], true, "{result}");
    // once answered, the id may be used again
    let (status, _, again) =
        post(&server.url, &[], Some(&session), json!({"jsonrpc": "2.0", "id": 7, "method": "ping"})).await;
    assert_eq!((status, again[0]["result"].clone()), (200, json!({})), "{again:?}");
}

/// A body over 4 MiB is refused with 413 before anything reads it as JSON, and the server goes on.
#[tokio::test]
async fn a_body_over_4_mib_gets_413_and_the_server_goes_on() {
    let db = tempfile::tempdir().unwrap();
    let server = Server::start(db.path(), &[]);
    let text = "x".repeat(astra_mcp::transport::http::MAX_BODY_BYTES);
    let (status, _, _) = post(&server.url, &[], None, call(1, "archival_memory_insert", json!({"text": text}))).await;
    assert_eq!(status, 413);
    // the server goes on: the next request is answered
    let (status, _, reply) = post(&server.url, &[], None, initialize()).await;
    assert_eq!(status, 200, "{reply:?}");
}

/// A session without a request for `--http-session-idle` seconds has ended: its id then gets 404, and
/// the client opens a new session (MCP 2025-06-18, "Session Management").
#[tokio::test]
async fn an_idle_session_expires_to_404_and_a_new_one_opens() {
    let db = tempfile::tempdir().unwrap();
    let server = Server::start(db.path(), &["--http-session-idle", "1"]);
    let session = open_session(&server.url, &[]).await;
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    let (status, _, _) = post(&server.url, &[], Some(&session), ping.clone()).await;
    assert_eq!(status, 200, "a live session answers");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, _, _) = post(&server.url, &[], Some(&session), ping.clone()).await;
    assert_eq!(status, 404, "an expired session is gone");
    let fresh = open_session(&server.url, &[]).await;
    assert_ne!(fresh, session);
    let (status, _, _) = post(&server.url, &[], Some(&fresh), ping).await;
    assert_eq!(status, 200);
}

/// HTTP/2 over cleartext with prior knowledge (h2c, RFC 9113 §3.3), as `curl --http2-prior-knowledge`
/// speaks it: the host is checked from `:authority` (HTTP/2 has no `Host` header), so a loopback
/// authority opens a session and a foreign one is refused for DNS rebinding, as over HTTP/1.1.
#[tokio::test]
async fn http2_requests_are_checked_by_their_authority() {
    use http_body_util::{BodyExt, Full};

    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let address = server.base().trim_start_matches("http://").to_string();
    let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    for (authority, status) in [(address.as_str(), 200), ("evil.example", 403)] {
        let request = hyper::Request::post(format!("http://{authority}/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Full::new(bytes::Bytes::from(initialize().to_string())))
            .unwrap();
        assert!(request.headers().get("host").is_none());
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.version(), hyper::Version::HTTP_2);
        let got = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert_eq!(got, status, "{authority}: {body}");
        if status == 200 {
            assert!(body.contains("\"serverInfo\""), "{body}");
        } else {
            assert!(body.contains("DNS rebinding"), "{body}");
        }
    }
}
