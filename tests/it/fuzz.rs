//! Property tests. Random arguments for every tool (right and wrong field names, every JSON type, odd
//! unicode, huge numbers) must come back as a tool result — `isError` with a message, or a success —
//! never a panic, a protocol error for a known tool, or a hang. Random JSON-RPC frames at the real binary
//! over stdio and over HTTP must each get a response when they carry an id, and never crash or hang the
//! server (over HTTP: never a 5xx). Each parser of outside input has a target of its own (below).
//!
//! Each test prints its seed to stderr (shown by `cargo test` when it fails); `ASTRA_FUZZ_SEED=<seed>`
//! replays those inputs.

use std::time::Duration;

use astra_mcp::memory::GateState;
use astra_mcp::tools::{self, JsonObject, ToolHost};
use proptest::prelude::*;
use proptest::test_runner::RngSeed;
use serde_json::Value;

use crate::support::{config, host};

/// Environment variable that fixes the seed of the fuzz tests' inputs (a `u64`), to replay a failure.
const SEED_VAR: &str = "ASTRA_FUZZ_SEED";

/// A proptest configuration of `cases` cases whose inputs come from `$ASTRA_FUZZ_SEED`, or from a fresh
/// seed; the seed is printed either way, so a failure can be replayed with the same inputs.
/// `$ASTRA_FUZZ_CASES`: the inputs each target takes in a long run (docs/internals/fuzzing.md).
fn fuzz_cases() -> Option<u32> {
    std::env::var("ASTRA_FUZZ_CASES").ok().and_then(|v| v.trim().parse().ok())
}

/// Cases of an MCP-facing target whose cases hold `per_case` inputs (tool calls, frames): `default` in
/// `scripts/test`, enough for `$ASTRA_FUZZ_CASES` inputs in a long run
/// (`ASTRA_FUZZ_CASES=100000 cargo test --release --locked --test it fuzz::random -- --test-threads 1`).
fn mcp_cases(default: u32, per_case: u32) -> u32 {
    fuzz_cases().map_or(default, |inputs| inputs.div_ceil(per_case))
}

fn fuzz_config(test: &str, cases: u32) -> ProptestConfig {
    let seed = match std::env::var(SEED_VAR) {
        Ok(value) => value.trim().parse::<u64>().unwrap_or_else(|_| panic!("{SEED_VAR}={value:?} is not a u64")),
        Err(_) => {
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now())
        }
    };
    eprintln!("{test}: seed {seed} (replay: {SEED_VAR}={seed} cargo test --release --locked --test it {test})");
    ProptestConfig { cases, failure_persistence: None, rng_seed: RngSeed::Fixed(seed), ..ProptestConfig::default() }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        "\\PC{0,40}".prop_map(Value::String),
        Just(Value::String("x".repeat(25_000))),
        Just(Value::String("\u{0}\u{202e}<tool_call>'; DROP TABLE fixes; --".into())),
        Just(Value::String("2026-11-30".into())),
        Just(Value::String("00000000-0000-0000-0000-000000000000".into())),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Valid arguments of each tool, which the strategy then corrupts field by field (so calls reach the
/// memory layer, not only argument parsing).
fn valid_arguments(tool: &str) -> JsonObject {
    let value = match tool {
        "search_codebase_memory" => serde_json::json!({"query": "x", "error_type": null, "top_k": 3}),
        "store_fix_memory" => serde_json::json!({
            "fix_description": "f", "error_type": "E", "file_paths": ["a.py"], "outcome": "o"}),
        "core_memory_append" => serde_json::json!({"section": "human", "text": "hi"}),
        "core_memory_replace" => serde_json::json!({"section": "human", "old_text": "hi", "new_text": "yo"}),
        "archival_memory_insert" => serde_json::json!({"text": "t", "tags": []}),
        "archival_memory_search" | "conversation_search" => {
            serde_json::json!({"query": "t", "top_k": null, "start": null, "end": null})
        }
        "memory_forget" => serde_json::json!({"id": "00000000-0000-0000-0000-000000000000"}),
        _ => serde_json::json!({}),
    };
    let mut args = value.as_object().unwrap().clone();
    match tool {
        "archival_memory_search" => args.insert("tags".into(), Value::Null),
        "conversation_search" => args.insert("roles".into(), Value::Null),
        _ => None,
    };
    args
}

/// A tool name and its valid arguments, half the time with 1–3 fields replaced by random values
/// (sometimes under a name the tool does not have). A random value rarely fits its field, so the
/// untouched half is what drives the memory layer past validation in every run (with 0–3 fields
/// replaced uniformly, seed 1315251508740020070 left 7 of 128 calls valid).
fn call() -> impl Strategy<Value = (String, JsonObject)> {
    let specs = tools::specs();
    let names: Vec<String> = specs.iter().map(|s| s.name.to_string()).collect();
    let field = (any::<prop::sample::Index>(), prop::bool::weighted(0.85), json_value());
    let replaced = prop_oneof![Just(Vec::new()), prop::collection::vec(field, 1..4)];
    (0..names.len(), replaced).prop_map(move |(i, fields)| {
        let spec = &specs[i];
        let props: Vec<String> = spec.input_schema["properties"].as_object().unwrap().keys().cloned().collect();
        let mut args = valid_arguments(spec.name);
        for (pick, known, value) in fields {
            let key = if known && !props.is_empty() { pick.get(&props).clone() } else { "unexpected".to_string() };
            args.insert(key, value);
        }
        (names[i].clone(), args)
    })
}

#[test]
fn random_tool_arguments_get_tool_results_never_panics_or_hangs() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = tempfile::tempdir().unwrap();
    let host: ToolHost = runtime.block_on(host(db.path(), config("fuzz", "p", None, None)));
    let session = GateState::new("fuzz");
    let mut runner = proptest::test_runner::TestRunner::new(fuzz_config(
        "random_tool_arguments_get_tool_results_never_panics_or_hangs",
        mcp_cases(128, 1),
    ));
    let succeeded = std::cell::Cell::new(0);
    let refusals = std::cell::RefCell::new(std::collections::BTreeMap::<String, usize>::new());
    runner
        .run(&call(), |(name, args)| {
            let out = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(30), host.call(&session, &name, args.clone())).await
            });
            let out = out.map_err(|_| TestCaseError::fail(format!("{name} hung on {args:?}")))?;
            let out = out.map_err(|e| TestCaseError::fail(format!("{name}: known tool refused as unknown: {e}")))?;
            prop_assert!(!out.text.contains("internal error"), "{name} {args:?}: {}", out.text);
            prop_assert!(!out.text.trim().is_empty(), "{name}: every result says something");
            if out.is_error {
                let reason: String = out.text.chars().take(90).collect();
                *refusals.borrow_mut().entry(format!("{name}: {reason}")).or_default() += 1;
            } else {
                succeeded.set(succeeded.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    // the corruption leaves many calls valid, so the memory layer itself is driven, not only parsing
    assert!(
        succeeded.get() >= 10,
        "only {} calls got past validation; refused: {:#?}",
        succeeded.get(),
        refusals.borrow()
    );
}

/// One frame of the JSON-RPC fuzz: the bytes of a line, and the id a reply must carry when the frame is
/// request-shaped (an object with an `id`).
#[derive(Debug, Clone)]
struct Frame {
    bytes: Vec<u8>,
    expects_reply: Option<i64>,
}

const METHODS: [&str; 13] = [
    "ping",
    "initialize",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/read",
    "resources/subscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "notifications/initialized",
    "no/such/method",
];

fn frame(index: usize) -> impl Strategy<Value = Frame> {
    let id = 1_000 + index as i64;
    let jsonrpc = prop_oneof![Just(Some(Value::from("2.0"))), Just(Some(Value::from("1.0"))), Just(None)];
    let request = (jsonrpc, prop::sample::select(&METHODS[..]), proptest::option::of(json_value()), any::<bool>())
        .prop_map(move |(version, method, params, with_tool)| {
            let mut object = serde_json::Map::new();
            if let Some(v) = version {
                object.insert("jsonrpc".into(), v);
            }
            object.insert("id".into(), Value::from(id));
            object.insert("method".into(), Value::from(method));
            let params = match (method, with_tool, params) {
                // a real tool name with random arguments, so tool dispatch is reached too
                ("tools/call", true, p) => serde_json::json!({"name": "archival_memory_search", "arguments": p}),
                (_, _, Some(p)) => p,
                (_, _, None) => Value::Null,
            };
            if !params.is_null() {
                object.insert("params".into(), params);
            }
            Frame { bytes: Value::Object(object).to_string().into_bytes(), expects_reply: Some(id) }
        });
    let notification = (prop::sample::select(&METHODS[..]), json_value()).prop_map(|(method, params)| Frame {
        bytes: serde_json::json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string().into_bytes(),
        expects_reply: None,
    });
    let any_json = json_value().prop_map(|v| Frame { bytes: v.to_string().into_bytes(), expects_reply: None });
    let bytes = prop::collection::vec(any::<u8>(), 0..120).prop_map(|mut b| {
        b.iter_mut().filter(|c| **c == b'\n').for_each(|c| *c = b' ');
        Frame { bytes: b, expects_reply: None }
    });
    prop_oneof![4 => request, 1 => notification, 2 => any_json, 2 => bytes]
}

fn frames() -> impl Strategy<Value = Vec<Frame>> {
    (0..40usize).map(frame).collect::<Vec<_>>()
}

/// Writes an `initialize` handshake, `frames`, and a final `ping` to a fresh `serve --stdio`; returns
/// every reply once each expected id and the ping were answered, or an error after 60 s.
fn drive_stdio(frames: &[Frame]) -> Result<Vec<Value>, String> {
    use std::io::{BufRead, Write};
    let db = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"))
        .args(["serve", "--stdio", "--db"])
        .arg(db.path())
        .env("ASTRA_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let init = r#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}"#;
    let mut input = format!("{init}\n{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}}\n").into_bytes();
    for f in frames {
        input.extend_from_slice(&f.bytes);
        input.push(b'\n');
    }
    input.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":\"final\",\"method\":\"ping\"}\n");
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
        stdin // kept open until the replies are in
    });
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut waiting: std::collections::HashSet<Value> =
        frames.iter().filter_map(|f| f.expects_reply).map(Value::from).collect();
    waiting.insert(Value::from("final"));
    waiting.insert(Value::from("init"));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut replies = Vec::new();
    let outcome = loop {
        if waiting.is_empty() {
            break Ok(());
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => match serde_json::from_str::<Value>(&line) {
                Ok(reply) if reply["jsonrpc"] == "2.0" => {
                    waiting.remove(&reply["id"]);
                    replies.push(reply);
                }
                _ => break Err(format!("stdout line is not a JSON-RPC 2.0 message: {line}")),
            },
            Err(_) => break Err(format!("no reply for ids {waiting:?} within 60 s (a hang, or the process died)")),
        }
    };
    drop(writer.join().unwrap()); // EOF
    let status = child.wait().unwrap();
    outcome?;
    if !status.success() {
        return Err(format!("the server exited with {status:?} at EOF"));
    }
    Ok(replies)
}

proptest! {
    #![proptest_config(fuzz_config("random_json_rpc_frames_get_responses_never_a_crash_or_a_hang", mcp_cases(6, 40)))]

    /// Random JSON-RPC frames (request-shaped with odd versions, methods and params; notifications; any
    /// JSON; raw bytes) at the real binary over stdio: every request gets a response with its id, the
    /// process neither crashes nor hangs, and stdout carries only JSON-RPC.
    #[test]
    fn random_json_rpc_frames_get_responses_never_a_crash_or_a_hang(frames in frames()) {
        let replies = drive_stdio(&frames).map_err(TestCaseError::fail)?;
        for reply in &replies {
            prop_assert!(reply.get("result").is_some() != reply.get("error").is_some(), "{}", reply);
        }
    }
}

/// How one frame is posted: with or without the session, and with the headers a client should send or
/// without them.
#[derive(Debug, Clone, Copy)]
struct Post {
    in_session: bool,
    json_content_type: bool,
    accepts_both: bool,
}

fn post() -> impl Strategy<Value = Post> {
    (prop::bool::weighted(0.8), prop::bool::weighted(0.9), prop::bool::weighted(0.9))
        .prop_map(|(in_session, json_content_type, accepts_both)| Post { in_session, json_content_type, accepts_both })
}

/// One answer of the server: HTTP status, the JSON-RPC messages it carried, and the id of the reply it
/// owes (None when the frame, or how it was sent, expects none).
type Answer = (u16, Vec<Value>, Option<i64>);

/// Posts `frames` in a fresh session of the shared HTTP server; returns, per frame, the status and the
/// JSON-RPC messages of the answer, or an error when a request failed at the transport or timed out.
fn drive_http(
    server: &crate::support::HttpServer,
    runtime: &tokio::runtime::Runtime,
    frames: &[(Frame, Post)],
) -> Result<Vec<Answer>, String> {
    runtime.block_on(async {
        let client = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
        let session = crate::http::open_session(&server.url, &[]).await;
        // every session the case opens (a random `initialize` outside the session opens one too)
        let mut opened = vec![session.clone()];
        let mut out = Vec::new();
        for (frame, how) in frames {
            let mut request = client.post(&server.url).header("mcp-protocol-version", "2025-06-18");
            if how.json_content_type {
                request = request.header("content-type", "application/json");
            }
            if how.accepts_both {
                request = request.header("accept", "application/json, text/event-stream");
            }
            if how.in_session {
                request = request.header("mcp-session-id", &session);
            }
            let response = request.body(frame.bytes.clone()).send().await.map_err(|e| format!("{e}"))?;
            let status = response.status().as_u16();
            if let Some(id) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()) {
                opened.push(id.to_string());
            }
            let text = response.text().await.map_err(|e| format!("{e}"))?;
            let messages = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:").map(str::trim).or(Some(l.trim())))
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .collect();
            let expects =
                if how.in_session && how.json_content_type && how.accepts_both { frame.expects_reply } else { None };
            out.push((status, messages, expects));
        }
        // the server still answers in the session after the frames
        let (status, _, alive) = crate::http::post(
            &server.url,
            &[],
            Some(&session),
            serde_json::json!({"jsonrpc": "2.0", "id": "alive", "method": "ping"}),
        )
        .await;
        if status != 200 || !alive.iter().any(|m| m["id"] == "alive" && m.get("result").is_some()) {
            return Err(format!("no answer to a ping after the frames: {status} {alive:?}"));
        }
        // ends the sessions, so that cases (and shrinking) never reach the session cap
        for id in opened {
            let ended = client
                .delete(&server.url)
                .header("mcp-session-id", &id)
                .header("mcp-protocol-version", "2025-06-18")
                .send()
                .await
                .map_err(|e| format!("{e}"))?;
            if !ended.status().is_success() && ended.status().as_u16() != 404 {
                return Err(format!("DELETE of session {id}: {}", ended.status()));
            }
        }
        Ok(out)
    })
}

/// Random JSON-RPC frames POSTed to `/mcp` of one `serve --http` (in a session or not, with the headers a
/// client should send or without): never a 5xx, never a dropped connection; a well-formed request in the
/// session is answered with its id; the session still answers a ping afterwards. The server lives as
/// long as this test (a runner, not `proptest!`, so it is stopped when the cases are done).
#[test]
fn random_json_rpc_frames_over_http_get_answers_never_a_5xx() {
    let db = tempfile::tempdir().unwrap();
    let server = crate::support::HttpServer::start(db.path(), &[]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut runner = proptest::test_runner::TestRunner::new(fuzz_config(
        "random_json_rpc_frames_over_http_get_answers_never_a_5xx",
        mcp_cases(40, 12),
    ));
    let cases = (0..12usize).map(|i| (frame(i), post())).collect::<Vec<_>>();
    let result = runner.run(&cases, |frames| {
        let answers = drive_http(&server, &runtime, &frames).map_err(TestCaseError::fail)?;
        for ((status, messages, expects), (frame, how)) in answers.iter().zip(&frames) {
            let sent = String::from_utf8_lossy(&frame.bytes);
            prop_assert!(*status < 500, "{status} for {sent} ({how:?}): {messages:?}");
            if let (Some(id), true) = (expects, frame_is_request(&frame.bytes)) {
                prop_assert!(
                    messages.iter().any(|m| m["id"] == *id),
                    "no answer with id {id} for {sent} ({status}): {messages:?}"
                );
            }
        }
        Ok(())
    });
    drop(server);
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

/// A JSON-RPC 2.0 request by shape (the only frames a server must answer with their id).
fn frame_is_request(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes)
        .is_ok_and(|v| v["jsonrpc"] == "2.0" && v.get("id").is_some() && v["method"].is_string())
}

// ---- Parsers of outside input, each fed its own shapes: real lines mutated, random JSON, raw text ----
//
// Cases per parser: `ASTRA_FUZZ_CASES` (default 2,000, what `scripts/test` runs); a long run is
// `ASTRA_FUZZ_CASES=100000 cargo test --release --locked --test it fuzz::parser`
// (docs/internals/fuzzing.md).

/// Cases per parser target: `$ASTRA_FUZZ_CASES`, else 2,000.
fn parser_cases() -> u32 {
    fuzz_cases().unwrap_or(2_000)
}

/// Every line of the transcript fixtures (Claude Code, Codex, Responses).
fn fixture_lines() -> Vec<String> {
    let dir = crate::support::repo().join("tests/fixtures/transcripts");
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        lines.extend(text.lines().filter(|l| !l.trim().is_empty()).map(str::to_string));
    }
    lines.sort();
    lines
}

/// `line` (a JSON object) with the value at a random key, at the top or one level down, replaced by `value`.
fn with_field_replaced(line: &str, pick: prop::sample::Index, value: Value) -> String {
    let Ok(Value::Object(mut top)) = serde_json::from_str::<Value>(line) else { return line.to_string() };
    let keys: Vec<String> = top.keys().cloned().collect();
    if keys.is_empty() {
        return line.to_string();
    }
    let key = pick.get(&keys).clone();
    match top.get_mut(&key) {
        Some(Value::Object(inner)) if !inner.is_empty() && pick.index(2) == 0 => {
            let inner_keys: Vec<String> = inner.keys().cloned().collect();
            inner.insert(pick.get(&inner_keys).clone(), value);
        }
        _ => {
            top.insert(key, value);
        }
    }
    Value::Object(top).to_string()
}

/// One line of a file a parser reads: a real line, cut short, with a field replaced, random JSON, or
/// random text (`lines` are the real ones to start from).
fn input_line(lines: Vec<String>) -> impl Strategy<Value = String> {
    let real = prop::sample::select(lines);
    prop_oneof![
        3 => real.clone(),
        2 => (real.clone(), any::<prop::sample::Index>()).prop_map(|(line, at)| {
            let cut = at.index(line.len() + 1);
            let cut = (0..=cut).rev().find(|i| line.is_char_boundary(*i)).unwrap_or(0);
            line[..cut].to_string()
        }),
        4 => (real, any::<prop::sample::Index>(), json_value()).prop_map(|(l, i, v)| with_field_replaced(&l, i, v)),
        1 => json_value().prop_map(|v| v.to_string()),
        1 => "\\PC{0,80}",
    ]
}

fn file_of(lines: Vec<String>, max_lines: usize) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        9 => prop::collection::vec(input_line(lines), 0..max_lines).prop_map(|l| l.join("\n").into_bytes()),
        1 => prop::collection::vec(any::<u8>(), 0..400),
    ]
}

proptest! {
    #![proptest_config(fuzz_config("parser_transcripts_never_panic_and_keep_their_promises", parser_cases()))]

    /// Transcript files (`sessions import`, the hooks' Stop import): detected and parsed in every format
    /// without a panic; every item has text, and keys are unique within a file, as the docs promise.
    #[test]
    fn parser_transcripts_never_panic_and_keep_their_promises(bytes in file_of(fixture_lines(), 16)) {
        use astra_mcp::sessions::formats::{TranscriptFormat, parse_as, parse_transcript};
        let detected = parse_transcript(&bytes).ok().into_iter();
        let forced = TranscriptFormat::ALL.into_iter().map(|format| parse_as(format, &bytes));
        for parsed in detected.chain(forced) {
            let mut keys = std::collections::HashSet::new();
            for (turn, item) in parsed.items.iter().enumerate() {
                prop_assert!(!item.text.trim().is_empty(), "an item without text: {item:?}");
                prop_assert!(keys.insert(item.source_key.clone()), "a repeated key: {item:?}");
                prop_assert_eq!(item.turn as usize, turn);
            }
        }
    }
}

proptest! {
    #![proptest_config(fuzz_config("parser_hook_payloads_never_panic", parser_cases()))]

    /// Hook payloads on stdin (`astra-mcp hook claude-code|codex`): parsed or refused with the message
    /// that names the expected shape; never a panic.
    #[test]
    fn parser_hook_payloads_never_panic(bytes in file_of(vec![
        r#"{"hook_event_name":"PostToolUse","session_id":"s1","cwd":"/tmp/p","tool_name":"Bash","tool_input":{"command":"pytest -q"},"tool_response":{"stdout":"1 failed","stderr":"","interrupted":false}}"#.into(),
        r#"{"hook_event_name":"SessionStart","session_id":"s1","source":"startup","transcript_path":"/tmp/t.jsonl"}"#.into(),
        r#"{"hook_event_name":"PostToolUseFailure","session_id":"s1","tool_name":"Bash","error":"Exit code 1\nFAILED tests/test_a.py::test_b"}"#.into(),
        r#"{"hook_event_name":"UserPromptSubmit","session_id":"s1","prompt":"fix the date parser"}"#.into(),
    ], 2)) {
        match astra_mcp::hooks::HookInput::parse(&bytes) {
            Ok(input) => prop_assert!(input.hook_event_name.len() <= bytes.len()),
            Err(e) => prop_assert!(format!("{e:#}").contains("hook_event_name"), "{e:#}"),
        }
    }
}

proptest! {
    #![proptest_config(fuzz_config("parser_export_headers_never_panic", parser_cases()))]

    /// The first line of an export file (`memory import`): accepted only when it is a header this build
    /// reads, refused with a message otherwise; never a panic.
    #[test]
    fn parser_export_headers_never_panic(bytes in file_of(vec![
        r#"{"astra_mcp_export":1,"format_version":"1","embedding_model":"sentence-transformers/all-MiniLM-L6-v2","embedding_dimension":384,"exported_at":"2026-12-01T00:00:00Z"}"#.into(),
        r#"{"table":"archival_passages","row":{"id":"00000000-0000-0000-0000-000000000000","text":"x"}}"#.into(),
    ], 3)) {
        let text = String::from_utf8_lossy(&bytes);
        if let Err(e) = astra_mcp::app::lance::read_export_header(&text) {
            prop_assert!(!e.to_string().is_empty());
        }
    }
}

proptest! {
    #![proptest_config(fuzz_config("parser_config_files_never_panic", parser_cases()))]

    /// Config files (`--config`, `ASTRA_CONFIG`): loaded, or refused naming the file; never a panic.
    #[test]
    fn parser_config_files_never_panic(bytes in file_of(vec![
        "[[tokens]]".into(),
        r#"token = "alice-token-0123456789abcdef""#.into(),
        r#"actor_id = "alice""#.into(),
        r#"project = "web""#.into(),
        "[hooks]".into(),
        "budget_tokens = 1500".into(),
        "[ui]".into(),
    ], 10)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, &bytes).unwrap();
        if let Err(e) = astra_mcp::config::ConfigFile::load(Some(&path)) {
            prop_assert!(format!("{e:#}").contains("config.toml"), "{e:#}");
        }
    }
}

proptest! {
    #![proptest_config(fuzz_config("parser_redaction_never_panics_and_is_idempotent", parser_cases()))]

    /// Redaction runs on every text stored: never a panic, and what it leaves holds nothing more to
    /// redact (redacting twice changes nothing).
    #[test]
    fn parser_redaction_never_panics_and_is_idempotent(bytes in file_of(vec![
        "DB_PASSWORD=correcthorsebattery".into(),
        "Authorization: Bearer abcdefghijklmnop1234".into(),
        "postgres://app:hunter2secret@db.internal:5432/x".into(),
        "token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB".into(),
        r#"client_auth = "a9f3c2e1b7d4e5f6""#.into(),
        "ci glcbt-64_abcdefghijABCDEFGHIJ".into(),
        "-----BEGIN RSA PRIVATE KEY-----".into(),
        "AssertionError: assert 1 == 2 in tests/test_api.py::test_token_refresh".into(),
    ], 6)) {
        use astra_mcp::memory::redact::{for_storage, redact};
        let text = String::from_utf8_lossy(&bytes);
        let once = for_storage(&text);
        prop_assert_eq!(redact(&once).into_owned(), once.clone(), "redacting again changed {:?}", text);
    }
}
