//! `astra-mcp hook claude-code` through the real binary, fed the JSON Claude Code writes to a hook's
//! stdin: a real LanceDB store in a temp dir, the real model, a fix stored through the tools with a
//! real pytest run, and real pytest output in the tool payloads. What each event prints on stdout is
//! what Claude Code adds to the model's context.

use std::path::{Path, PathBuf};
use std::process::Output;

use assert_cmd::Command;
use astra_mcp::memory::GateState;
use serde_json::{Value, json};

use crate::support::{apply_reference_fix, args, config, host, pytest_command, scenario};

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

/// The alpha fix's description, as stored through `store_fix_memory`.
/// What the stored fix of scenario_alpha says was tried before it and failed.
const ALPHA_FAILED_ATTEMPT: &str = "lower-cased the request's Origin header";

pub(crate) const ALPHA_FIX: &str = "Comma-separated ALLOWED_ORIGINS kept the space after each comma; strip() every \
entry and drop blanks in webapp/settings.py";

/// The hook command of actor `ann` on store `db`.
fn hook(db: &Path) -> Command {
    hook_as(db, "ann")
}

/// The hook command of `actor` on store `db`, with none of the developer's hook settings leaking in.
fn hook_as(db: &Path, actor: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(["hook", "claude-code", "--db"]).arg(db).args(["--actor", actor]);
    for var in [
        "ASTRA_HOOKS",
        "ASTRA_PROJECT",
        "ASTRA_TEST_COMMAND",
        "ASTRA_HOOK_BUDGET_TOKENS",
        "ASTRA_HOOK_PROMPT_SEARCH",
        "ASTRA_HOOK_TIMEOUT_MS",
        "ASTRA_CONFIG",
        "ASTRA_LOG",
        "ASTRA_MIN_SCORE",
        "ASTRA_EXPIRE_AFTER_DAYS",
    ] {
        cmd.env_remove(var);
    }
    // no config file of the developer's
    cmd.env("XDG_CONFIG_HOME", std::env::temp_dir().join("astra-mcp-hooks-test-no-config"));
    cmd
}

fn run(cmd: &mut Command, input: &Value) -> Output {
    cmd.write_stdin(input.to_string()).output().unwrap()
}

/// The context a successful hook printed, or `None` when it printed nothing.
fn context(out: &Output, event: &str) -> Option<String> {
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    if out.stdout.is_empty() {
        return None;
    }
    let json: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_eq!(json["hookSpecificOutput"]["hookEventName"], json!(event), "{json}");
    Some(json["hookSpecificOutput"]["additionalContext"].as_str().unwrap().to_string())
}

/// A failed hook: exit 1 (never 2, which blocks), nothing on stdout, one line on stderr.
fn assert_fails_quietly(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(1), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line on stderr: {stderr:?}");
    assert!(stderr.starts_with("astra-mcp: "), "{stderr}");
    stderr
}

/// Runs the tests of `workspace` as Claude Code's Bash tool would; returns (exit code, stdout + stderr).
fn pytest(workspace: &Path) -> (i32, String) {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(pytest_command())
        .current_dir(workspace)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap(), text)
}

/// PostToolUseFailure as Claude Code 2.1 sends it for a Bash call that exited non-zero: the error is
/// `Exit code N`, then stderr, then stdout.
fn failure_payload(cwd: &Path, command: &str, code: i32, output: &str) -> Value {
    json!({
        "session_id": "0b6c2f6e-hook-test", "transcript_path": cwd.join("t.jsonl"), "cwd": cwd,
        "permission_mode": "default", "hook_event_name": "PostToolUseFailure", "tool_name": "Bash",
        "tool_input": {"command": command, "description": "Run the tests"},
        "tool_use_id": "toolu_01", "error": format!("Exit code {code}\n{output}"), "is_interrupt": false
    })
}

fn post_tool_use_payload(cwd: &Path, command: &str, stdout: &str) -> Value {
    json!({
        "session_id": "0b6c2f6e-hook-test", "transcript_path": cwd.join("t.jsonl"), "cwd": cwd,
        "hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {"command": command},
        "tool_response": {"stdout": stdout, "stderr": "", "interrupted": false, "isImage": false},
        "tool_use_id": "toolu_02"
    })
}

fn session_start_payload(cwd: &Path) -> Value {
    json!({
        "session_id": "0b6c2f6e-hook-test", "transcript_path": cwd.join("t.jsonl"), "cwd": cwd,
        "hook_event_name": "SessionStart", "source": "startup"
    })
}

/// A copy of scenario_alpha whose fix is stored (verified) through the tools, as an agent would:
/// search, failing `run_tests`, the edit, passing `run_tests`, `store_fix_memory`. Returns the guard, the
/// workspace, and the failing pytest output captured before the edit.
async fn alpha_with_stored_fix(db: &Path) -> (tempfile::TempDir, PathBuf, String) {
    alpha_with_stored_fix_of(db, "ann").await
}

/// [`alpha_with_stored_fix`] as `actor`.
async fn alpha_with_stored_fix_of(db: &Path, actor: &str) -> (tempfile::TempDir, PathBuf, String) {
    let (guard, alpha) = scenario("scenario_alpha");
    let failing_output = store_alpha_fix(db, actor, &alpha).await;
    (guard, alpha, failing_output)
}

/// Stores alpha's fix, made in the copy `alpha`, as `actor` (as [`alpha_with_stored_fix`]); returns the
/// failing pytest output captured before the edit.
async fn store_alpha_fix(db: &Path, actor: &str, alpha: &Path) -> String {
    let alpha = alpha.to_path_buf();
    let (code, failing_output) = pytest(&alpha);
    assert_eq!(code, 1, "{failing_output}");
    let cmd = pytest_command();
    let host = host(db, config(actor, "scenario_alpha", Some(&alpha), Some(&cmd))).await;
    let s = GateState::new("alpha-session");
    let call = |name: &'static str, a: Value| {
        let (host, s) = (&host, &s);
        async move {
            let out = host.call(s, name, args(a)).await.unwrap();
            assert!(!out.is_error, "{name}: {}", out.text);
            out
        }
    };
    call("search_codebase_memory", json!({"query": "CORS origin rejected", "error_type": null, "top_k": 3})).await;
    let failed = call("run_tests", json!({})).await;
    let failed_run_id = failed.structured.unwrap()["failed_run_id"].clone();
    let changed = apply_reference_fix("scenario_alpha", &alpha);
    let passing = call("run_tests", json!({})).await;
    let outcome = passing.structured.unwrap()["confirmed_outcome"].as_str().unwrap().to_string();
    call(
        "store_fix_memory",
        json!({
            "fix_description": ALPHA_FIX, "error_type": "AssertionError", "file_paths": changed, "outcome": outcome,
            "failed_attempts": [{"what": ALPHA_FAILED_ATTEMPT, "failed_run_id": failed_run_id}],
        }),
    )
    .await;
    host.flush().await;
    failing_output
}

#[tokio::test]
async fn a_failing_pytest_run_brings_up_the_verified_fix_and_a_passing_run_nothing() {
    let db = tempfile::tempdir().unwrap();
    let (_guard, alpha, failing_output) = alpha_with_stored_fix(db.path()).await;
    let command = "python -m pytest -q";

    // PostToolUseFailure with the real failing output: the fix's Match block, its receipt, its staleness
    let out = run(&mut hook(db.path()), &failure_payload(&alpha, command, 1, &failing_output));
    let text = context(&out, "PostToolUseFailure").expect("the stored fix is injected");
    assert!(text.contains("Match 1 (fused_score="), "{text}");
    assert!(text.contains(&format!("Fix: {ALPHA_FIX}")), "{text}");
    assert!(text.contains("\nProject: scenario_alpha\nFiles: webapp/settings.py"), "its own project: {text}");
    assert!(text.contains("Outcome: pytest passed with exit code 0 (4 passed) [receipt "), "{text}");
    assert!(text.contains("Receipt: `") && text.contains("` exited 0 (4 passed in "), "{text}");
    // same project and checkout, files as stored: the fix is in the code
    assert!(text.contains("; code: in place"), "{text}");
    // the same failure is back: what was tried and failed before is said with the fix
    assert!(text.contains(&format!("\nTried before and failed: {ALPHA_FAILED_ATTEMPT} (`")), "{text}");
    assert!(!text.contains("[astra-mcp:"), "one fix fits the default budget uncut: {text}");
    assert!(!text.contains("\nUsed: "), "never given to an agent before: {text}");

    // the same failure reported as PostToolUse (a runner that exits 0 on failures)
    let out = run(&mut hook(db.path()), &post_tool_use_payload(&alpha, command, &failing_output));
    let text = context(&out, "PostToolUse").expect("PostToolUse with failures injects too");
    assert!(text.contains(&format!("Fix: {ALPHA_FIX}")), "{text}");
    assert!(text.contains("\nUsed: used once before, last "), "the injection above counts: {text}");

    // a passing run of the now fixed workspace: nothing at all
    let (code, passing_output) = pytest(&alpha);
    assert_eq!(code, 0, "{passing_output}");
    let out = run(&mut hook(db.path()), &post_tool_use_payload(&alpha, command, &passing_output));
    assert_eq!(context(&out, "PostToolUse"), None);
    // ... but it credits the fix the session was given: its tests passed after it
    let out = run(&mut hook(db.path()), &failure_payload(&alpha, command, 1, &failing_output));
    let text = context(&out, "PostToolUseFailure").unwrap();
    assert!(
        text.contains("\nUsed: used 2 times before, last ") && text.contains("; tests passed after it in 1 session")
    );
    // the failing output of a command that is not a test run: nothing
    let out = run(&mut hook(db.path()), &failure_payload(&alpha, "cat notes.txt", 1, &failing_output));
    assert_eq!(context(&out, "PostToolUseFailure"), None);
    // another tool than Bash: nothing
    let mut other = failure_payload(&alpha, command, 1, &failing_output);
    other["tool_name"] = json!("Edit");
    assert_eq!(context(&run(&mut hook(db.path()), &other), "PostToolUseFailure"), None);

    // a file edited since the fix was stored, its lines kept: changed around
    let settings = alpha.join("webapp/settings.py");
    let mut body = std::fs::read_to_string(&settings).unwrap();
    body.push_str("\n# edited\n");
    std::fs::write(&settings, body).unwrap();
    let out = run(&mut hook(db.path()), &failure_payload(&alpha, command, 1, &failing_output));
    let text = context(&out, "PostToolUseFailure").unwrap();
    assert!(text.contains("\nCode: changed around (") && text.contains("; code: changed around"), "{text}");
}

/// Expiry through the hook in a git work tree: alpha's fix, reverted since and unused for 200 days,
/// is left out when the same failure comes back, and shown (reverted, said first) when nothing expires.
#[tokio::test]
async fn a_reverted_fix_nothing_used_for_long_is_left_out_of_a_failing_run() {
    use astra_mcp::store::FixStore;
    let db = tempfile::tempdir().unwrap();
    let (_guard, alpha) = scenario("scenario_alpha");
    for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-q", "-m", "alpha as it was"]] {
        crate::gates::git_in(&alpha, args);
    }
    let settings = alpha.join("webapp/settings.py");
    let before_the_fix = std::fs::read_to_string(&settings).unwrap();
    let failing_output = store_alpha_fix(db.path(), "ann", &alpha).await;
    // the fix as stored 200 days ago, and reverted since
    {
        let store = astra_mcp::store::lance::LanceStore::open(db.path().to_str().unwrap()).await.unwrap();
        let mut fix = store.recent_fixes("ann", "scenario_alpha", 1).await.unwrap().remove(0);
        let long_ago = chrono::Utc::now() - chrono::Duration::days(200);
        (fix.created_at, fix.updated_at) = (long_ago, long_ago);
        fix.receipt.as_mut().unwrap().finished_at = long_ago;
        let text = vec![fix.embedded_text.clone()];
        let vector = crate::support::embedder().embed_documents(text).await.unwrap().remove(0);
        store.upsert_fix(&fix, &vector).await.unwrap();
    }
    std::fs::write(&settings, before_the_fix).unwrap();
    let failure = failure_payload(&alpha, "python -m pytest -q", 1, &failing_output);

    let out = run(&mut hook(db.path()), &failure);
    let said = context(&out, "PostToolUseFailure").unwrap_or_default();
    assert!(!said.contains(ALPHA_FIX), "reverted and unused for 200 days: expired: {said}");
    let out = run(hook(db.path()).env("ASTRA_EXPIRE_AFTER_DAYS", "0"), &failure);
    let said = context(&out, "PostToolUseFailure").expect("nothing expires: the fix is back");
    assert!(said.contains(&format!("Fix: {ALPHA_FIX}")) && said.contains("\nReverted: "), "{said}");
}

#[tokio::test]
async fn opt_out_file_and_kill_switch_print_nothing() {
    let db = tempfile::tempdir().unwrap();
    let (_guard, alpha, failing_output) = alpha_with_stored_fix(db.path()).await;
    let payload = failure_payload(&alpha, "pytest", 1, &failing_output);
    assert!(context(&run(&mut hook(db.path()), &payload), "PostToolUseFailure").is_some(), "on by default");
    let out = run(hook(db.path()).env("ASTRA_HOOKS", "off"), &payload);
    assert_eq!(context(&out, "PostToolUseFailure"), None);
    assert_eq!(
        context(&run(hook(db.path()).env("ASTRA_HOOKS", "off"), &session_start_payload(&alpha)), "SessionStart"),
        None
    );
    // the opt-out file in the project (here: in a directory above the session's cwd)
    std::fs::create_dir_all(alpha.join(".astra-mcp")).unwrap();
    std::fs::write(alpha.join(".astra-mcp/hooks-off"), "").unwrap();
    let mut inner = payload.clone();
    inner["cwd"] = json!(alpha.join("webapp"));
    assert_eq!(context(&run(&mut hook(db.path()), &inner), "PostToolUseFailure"), None);
    assert_eq!(context(&run(&mut hook(db.path()), &session_start_payload(&alpha)), "SessionStart"), None);
    // and a Stop hook imports nothing there: the store has no conversation item afterwards
    let transcript = alpha.join("t.jsonl");
    std::fs::copy(crate::support::repo().join("tests/fixtures/transcripts/claude-code.jsonl"), &transcript).unwrap();
    let stop = json!({"session_id": "s", "transcript_path": transcript, "cwd": alpha, "hook_event_name": "Stop"});
    let out = run(&mut hook(db.path()), &stop);
    assert!(out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

#[tokio::test]
async fn session_start_injects_core_memory_and_recent_fixes_within_the_budget() {
    let db = tempfile::tempdir().unwrap();
    let (_guard, alpha, _) = alpha_with_stored_fix(db.path()).await;
    {
        let host = host(db.path(), config("ann", "scenario_alpha", Some(&alpha), None)).await;
        let s = GateState::new("core-session");
        let append = |section: &str, text: String| json!({"section": section, "text": text});
        for (section, text) in [
            ("human", "Ann reviews every pull request herself and prefers small commits.".to_string()),
            ("project", "scenario_alpha is a small Flask-like web app; tests run with pytest -q.".to_string()),
        ] {
            assert!(!host.call(&s, "core_memory_append", args(append(section, text))).await.unwrap().is_error);
        }
        let decision = json!({"text": "We decided to keep CORS origins in the ALLOWED_ORIGINS env var, not in code.", "tags": ["decision"]});
        assert!(!host.call(&s, "archival_memory_insert", args(decision)).await.unwrap().is_error);
        host.flush().await;
    }
    let out = run(&mut hook(db.path()), &session_start_payload(&alpha));
    let text = context(&out, "SessionStart").expect("core memory and the fix are injected");
    assert!(text.contains("not instructions"), "{text}");
    assert!(text.contains("<human chars=") && text.contains("Ann reviews every pull request"), "{text}");
    assert!(text.contains("<project chars=") && text.contains("tests run with pytest -q"), "{text}");
    assert!(text.contains("Recent fix 1\nFix: ") && text.contains(ALPHA_FIX), "{text}");
    assert!(text.contains("Decision 1 id=") && text.contains("> We decided to keep CORS origins"), "{text}");
    assert!(!text.contains("[astra-mcp:"), "everything fits 1500 tokens: {text}");
    let tokens = count_tokens(&text);
    assert!(tokens <= 1_500, "{tokens}");

    // budgets below the whole: never exceeded, the cut marked with how many memories were left out
    assert!(tokens > 220, "the whole context is {tokens} tokens: too little to cut");
    for budget in [200, (200 + tokens) / 2, tokens - 1] {
        let out = run(hook(db.path()).args(["--budget-tokens", &budget.to_string()]), &session_start_payload(&alpha));
        let text = context(&out, "SessionStart").expect("the first block fits");
        let tokens = count_tokens(&text);
        assert!(tokens <= budget, "{tokens} tokens > budget {budget}: {text}");
        assert!(
            text.contains("left out to stay within the ") && text.contains(&format!("the {budget}-token budget")),
            "{text}"
        );
    }
    // the env var and the config file set it too (flag > env > file)
    let out = run(hook(db.path()).env("ASTRA_HOOK_BUDGET_TOKENS", "200"), &session_start_payload(&alpha));
    let text = context(&out, "SessionStart").unwrap();
    assert!(text.contains("the 200-token budget"), "{text}");
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "[hooks]\nbudget_tokens = 250\n").unwrap();
    let out = run(hook(db.path()).arg("--config").arg(config.path()), &session_start_payload(&alpha));
    assert!(context(&out, "SessionStart").unwrap().contains("the 250-token budget"));
    let out = run(
        hook(db.path()).arg("--config").arg(config.path()).env("ASTRA_HOOK_BUDGET_TOKENS", "200"),
        &session_start_payload(&alpha),
    );
    assert!(context(&out, "SessionStart").unwrap().contains("the 200-token budget"), "env beats the file");

    // UserPromptSubmit: off by default; on, the prompt finds the decision and the fix
    let prompt = json!({
        "session_id": "0b6c2f6e-hook-test", "transcript_path": alpha.join("t.jsonl"), "cwd": alpha,
        "hook_event_name": "UserPromptSubmit", "prompt": "Where do we configure the allowed CORS origins?"
    });
    assert_eq!(context(&run(&mut hook(db.path()), &prompt), "UserPromptSubmit"), None);
    // a passage on the same question that nothing used for 200 days has expired: left out (and shown
    // when nothing expires)
    let old = "Before the move to environment variables, CORS origins were configured in settings.py.";
    crate::uses::old_passage_of(db.path(), "ann", "scenario_alpha", old, 200).await;
    let out = run(hook(db.path()).arg("--prompt-search"), &prompt);
    let text = context(&out, "UserPromptSubmit").expect("prompt search finds the decision");
    assert!(text.contains("Archival memory:") && text.contains("> We decided to keep CORS origins"), "{text}");
    assert!(!text.contains("configured in settings.py"), "expired: {text}");
    let out = run(hook(db.path()).arg("--prompt-search").env("ASTRA_EXPIRE_AFTER_DAYS", "0"), &prompt);
    let text = context(&out, "UserPromptSubmit").unwrap();
    assert!(text.contains("> Before the move to environment variables, CORS origins"), "nothing expires: {text}");
    let out = run(hook(db.path()).env("ASTRA_HOOK_PROMPT_SEARCH", "true"), &prompt);
    assert!(context(&out, "UserPromptSubmit").is_some());

    // an actor without memories (a missing ASTRA_ACTOR) is told whose memories the store holds, in
    // the context and on stderr, instead of nothing at all
    let out = run(&mut hook_as(db.path(), "bob"), &session_start_payload(&alpha));
    let note = context(&out, "SessionStart").expect("a note on the other actors");
    assert!(
        note.starts_with(
            "astra-mcp: no memories of actor `bob` yet; the store holds memories of other actors: `ann` ("
        ),
        "{note}"
    );
    assert!(!note.contains("Ann reviews"), "no memory of another actor is shown: {note}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("SessionStart: no memories of actor `bob` yet"), "{said}");
}

/// Tokens of `text` by the model's tokenizer, as the hook counts them.
fn count_tokens(text: &str) -> usize {
    let paths = astra_mcp::embed::ModelPaths::in_cache(&crate::support::cache_dir());
    astra_mcp::embed::TokenCounter::load(&paths).unwrap().count(text).unwrap()
}

#[tokio::test]
async fn a_secret_in_the_tool_output_reaches_neither_stdout_nor_the_store() {
    let db = tempfile::tempdir().unwrap();
    let (_guard, alpha, failing_output) = alpha_with_stored_fix(db.path()).await;
    let secret = "sk-proj-Zq8TRUEsecretVALUE0123456789abcdefXYZ";
    let output = format!(
        "{failing_output}\nFAILED tests/test_cors.py::test_origin_with_key - AssertionError: OPENAI_API_KEY={secret} \
was rejected by admin.example.com\n"
    );
    let out = run(&mut hook(db.path()), &failure_payload(&alpha, "pytest -q", 1, &output));
    let text = context(&out, "PostToolUseFailure").expect("the fix still matches");
    assert!(!text.contains(secret), "{text}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(secret));
    let export = Command::new(BIN)
        .args(["memory", "export", "--all-actors", "--db"])
        .arg(db.path())
        .env("ASTRA_LOG", "warn")
        .output()
        .unwrap();
    assert!(export.status.success());
    let dump = String::from_utf8(export.stdout).unwrap();
    assert!(dump.contains(ALPHA_FIX), "the export holds the store's rows");
    assert!(!dump.contains(secret), "the hook stored nothing of the secret");
}

#[test]
fn bad_input_unknown_events_and_a_missing_store_fail_without_blocking() {
    let db = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    // not JSON
    let out = hook(db.path()).write_stdin("not json").output().unwrap();
    assert!(assert_fails_quietly(&out).contains("hook_event_name"));
    // JSON without the fields every event has
    let out = run(&mut hook(db.path()), &json!({"tool_name": "Bash"}));
    assert_fails_quietly(&out);
    // an event this hook does not handle
    let out =
        run(&mut hook(db.path()), &json!({"session_id": "s", "hook_event_name": "PreToolUse", "cwd": cwd.path()}));
    assert!(assert_fails_quietly(&out).contains("`PreToolUse` is not handled"));
    // no store there: an error, and no store created
    let missing = db.path().join("nowhere");
    let out = run(&mut hook(&missing), &session_start_payload(cwd.path()));
    assert!(assert_fails_quietly(&out).contains("no memory store at"));
    assert!(!missing.exists(), "a hook never creates a store");
    let out = run(
        &mut hook(&missing),
        &failure_payload(cwd.path(), "pytest", 1, "FAILED t.py::test_x - AssertionError\n1 failed in 0.1s"),
    );
    assert_fails_quietly(&out);
}

/// A hook slower than its `--timeout-ms` gives up: exit 1 with the reason, nothing on stdout, at once.
/// (A 1 ms limit: opening the store and loading the model take far longer, so the limit is what ends it.)
#[tokio::test]
async fn a_hook_slower_than_its_timeout_gives_up_without_blocking() {
    let db = tempfile::tempdir().unwrap();
    {
        let host = host(db.path(), config("ann", "scenario_alpha", None, None)).await;
        host.flush().await;
    }
    let cwd = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let out = run(hook(db.path()).args(["--timeout-ms", "1"]), &session_start_payload(cwd.path()));
    let stderr = assert_fails_quietly(&out);
    assert!(stderr.contains("gave up after 1 ms"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
}

/// The fenced block after `<!-- test: NAME -->` in docs/hooks.md: the tests run what the docs show.
fn documented_block(name: &str) -> String {
    let text = std::fs::read_to_string(crate::support::repo().join("docs/hooks.md")).unwrap();
    let marker = format!("<!-- test: {name} -->");
    let after = &text[text.find(&marker).unwrap_or_else(|| panic!("docs/hooks.md has no {marker}")) + marker.len()..];
    let start = after.find("```").unwrap();
    let body = &after[start..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_string()
}

/// A store holding alpha's verified fix (as [`alpha_with_stored_fix`]) and a `human` core block of
/// `ann`; returns the guard of alpha's copy.
async fn store_with_fix_and_core_memory(db: &Path) -> tempfile::TempDir {
    store_with_fix_and_core_memory_of(db, "ann").await
}

/// [`store_with_fix_and_core_memory`] as `actor`: the fix is filed under project `scenario_alpha`, the
/// `human` block says "Ann wants every fix verified by the acceptance tests."
pub(crate) async fn store_with_fix_and_core_memory_of(db: &Path, actor: &str) -> tempfile::TempDir {
    let (stored, _alpha, _) = alpha_with_stored_fix_of(db, actor).await;
    let host = host(db, config(actor, "scenario_alpha", None, None)).await;
    let s = GateState::new("core-session");
    let human = json!({"section": "human", "text": "Ann wants every fix verified by the acceptance tests."});
    assert!(!host.call(&s, "core_memory_append", args(human)).await.unwrap().is_error);
    host.flush().await;
    stored
}

/// The client (`name`, its process output `out`) ran its turn, and the two requests it sent `model` held
/// what the hooks added: the SessionStart context (core memory, the recent fix) in the first, the fix
/// the failing run brought up in the second. Returns the second request.
fn assert_memory_delivered(name: &str, out: &Output, model: &ScriptedModel) -> String {
    assert!(
        out.status.success(),
        "{name} exited {:?}: {}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = model.main_requests();
    assert_eq!(requests.len(), 2, "one request per move");
    let first = requests[0].to_string();
    assert!(first.contains("astra-mcp memory for this session"), "SessionStart context in the first request");
    assert!(first.contains("Ann wants every fix verified"), "core memory in the first request");
    assert!(first.contains("Recent fix 1") && first.contains(ALPHA_FIX), "the recent fix in the first request");
    assert!(!first.contains("Match 1 (fused_score="), "no test has run yet");
    let second = requests[1].to_string();
    assert!(second.contains("verified fixes from memory that match the failing tests"), "{second}");
    assert!(second.contains("Match 1 (fused_score=") && second.contains(ALPHA_FIX), "the fix after the failing run");
    second
}

/// Claude Code's native binary as `scripts/setup` installs it (tests/clients, npm ci).
pub(crate) fn claude_binary() -> PathBuf {
    let bin = crate::support::repo().join("tests/clients/node_modules/@anthropic-ai/claude-code/bin/claude.exe");
    assert!(bin.exists(), "{} is missing: run scripts/setup (it installs the pinned Claude Code)", bin.display());
    bin
}

/// The scripted Messages API (tests/clients/scripted_model.py) as a process; stops when dropped.
pub(crate) struct ScriptedModel {
    child: std::process::Child,
    pub(crate) url: String,
    record: PathBuf,
}

impl ScriptedModel {
    /// `api`: `anthropic` (the Messages API, Claude Code) or `openai` (the Responses API, Codex).
    pub(crate) fn start(dir: &Path, api: &str, moves: &Value) -> Self {
        use std::io::BufRead;
        let script = dir.join("script.json");
        std::fs::write(&script, moves.to_string()).unwrap();
        let record = dir.join("requests.json");
        let mut child = std::process::Command::new(crate::support::venv_python())
            .arg(crate::support::repo().join("tests/clients/scripted_model.py"))
            .args([api, "--script"])
            .arg(&script)
            .arg("--record")
            .arg(&record)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with("http://127.0.0.1:"), "{line:?}");
        Self { child, url: line.trim().to_string(), record }
    }

    /// The requests the client sent for its main turn, in order (the model's recorded bodies).
    pub(crate) fn main_requests(&self) -> Vec<Value> {
        self.main_records().into_iter().map(|r| r["body"].clone()).collect()
    }

    /// The records of the main requests, in order: `body`, and for a request answered with a tool call
    /// the `call_id` it gave that call (scripted_model.py's record format).
    pub(crate) fn main_records(&self) -> Vec<Value> {
        let records: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&self.record).unwrap()).unwrap();
        for r in &records {
            assert!(r.get("error").is_none_or(Value::is_null), "scripted model: {r}");
        }
        records.into_iter().filter(|r| r["kind"] == "main").collect()
    }
}

impl Drop for ScriptedModel {
    fn drop(&mut self) {
        drop(self.child.stdin.take()); // it serves until stdin closes
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Through the real Claude Code (the pinned 2.1.328) with a scripted model that decides nothing: it runs
/// the tests once through Claude Code's Bash tool, then answers. Claude Code is configured with the hook
/// block of docs/hooks.md verbatim (`astra-mcp` on PATH, the store and actor in the environment, as a user
/// would set them). The SessionStart context must be in the first request Claude Code sends the model, and
/// the fix the failing run brings up in the request that follows the run.
#[tokio::test]
async fn claude_code_delivers_the_session_start_context_and_the_fix_after_a_failing_run() {
    let db = tempfile::tempdir().unwrap();
    let _stored = store_with_fix_and_core_memory(db.path()).await;
    // a fresh, failing copy of the same project, configured as docs/hooks.md says
    let (_fresh, workspace) = scenario("scenario_alpha");
    std::fs::create_dir_all(workspace.join(".claude")).unwrap();
    let settings = documented_block("claude-code-hooks");
    serde_json::from_str::<Value>(&settings).expect("the documented settings are JSON");
    std::fs::write(workspace.join(".claude/settings.json"), &settings).unwrap();
    let work = tempfile::tempdir().unwrap();
    let bin_dir = work.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(BIN, bin_dir.join("astra-mcp")).unwrap();

    let command = pytest_command();
    let model = ScriptedModel::start(
        work.path(),
        "anthropic",
        &json!([
            {"tool": "Bash", "args": {"command": command, "description": "Run the tests"}},
            {"text": "The tests fail; memory has a verified fix for it."}
        ]),
    );
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut claude = std::process::Command::new(claude_binary());
    claude
        .args(["-p", "Run the tests.", "--output-format", "json", "--allowedTools", "Bash"])
        .current_dir(&workspace)
        .stdin(std::process::Stdio::null());
    for (key, _) in std::env::vars() {
        if key.starts_with("ANTHROPIC_") || key.starts_with("CLAUDE") || key.starts_with("ASTRA_") {
            claude.env_remove(key);
        }
    }
    let out = claude
        .env("PATH", path)
        .env("CLAUDE_CONFIG_DIR", work.path().join("claude-config"))
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-api03-scriptedFAKEkey0123456789abcdefABCDEF")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("ASTRA_DB", db.path())
        .env("ASTRA_ACTOR", "ann")
        .env("XDG_CONFIG_HOME", work.path().join("xdg-config"))
        .output()
        .unwrap();
    let second = assert_memory_delivered("claude -p", &out, &model);
    assert!(second.contains("Receipt: `") && second.contains("code: unknown"), "another checkout: unknown");
}

/// Through the real Codex CLI (the pinned 0.169.0) with a scripted Responses API that decides nothing: it
/// runs the tests once through Codex's shell tool, then answers. `$CODEX_HOME/hooks.json` is the block of
/// docs/hooks.md verbatim. Codex runs a hook only once the user trusted it (`/hooks` in its TUI); a
/// test has no TUI, so it passes `--dangerously-bypass-hook-trust`, which Codex offers for automation.
/// The SessionStart context must be in the first request, the fix in the request after the failing
/// run, and the Stop hook must have imported the Codex session file into conversation memory.
#[tokio::test]
async fn codex_delivers_the_session_start_context_and_the_fix_after_a_failing_run() {
    let db = tempfile::tempdir().unwrap();
    let _stored = store_with_fix_and_core_memory(db.path()).await;
    let (_fresh, workspace) = scenario("scenario_alpha");
    let work = tempfile::tempdir().unwrap();
    let bin_dir = work.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    std::os::unix::fs::symlink(BIN, bin_dir.join("astra-mcp")).unwrap();
    let home = work.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let hooks = documented_block("codex-hooks");
    serde_json::from_str::<Value>(&hooks).expect("the documented hooks.json is JSON");
    std::fs::write(home.join("hooks.json"), &hooks).unwrap();

    let command = pytest_command();
    let model = ScriptedModel::start(
        work.path(),
        "openai",
        &json!([
            {"tool": "exec_command", "args": {"cmd": command, "yield_time_ms": 30000}},
            {"text": "The tests fail; memory has a verified fix for it."}
        ]),
    );
    let config = format!(
        "model = \"gpt-5.5\"\nmodel_provider = \"scripted\"\napproval_policy = \"never\"\n\
         sandbox_mode = \"danger-full-access\"\n\n[model_providers.scripted]\nname = \"scripted\"\n\
         base_url = \"{}/v1\"\nwire_api = \"responses\"\nenv_key = \"OPENAI_API_KEY\"\n",
        model.url
    );
    std::fs::write(home.join("config.toml"), config).unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut codex = std::process::Command::new(crate::support::repo().join("tests/clients/node_modules/.bin/codex"));
    codex
        .args(["exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust", "Run the tests."])
        .current_dir(&workspace)
        .stdin(std::process::Stdio::null());
    for (key, _) in std::env::vars() {
        if key.starts_with("OPENAI_") || key.starts_with("CODEX") || key.starts_with("ASTRA_") {
            codex.env_remove(key);
        }
    }
    let out = codex
        .env("PATH", path)
        .env("CODEX_HOME", &home)
        .env("OPENAI_API_KEY", "sk-proj-scriptedFAKEkey0123456789abcdefABCDEF")
        .env("ASTRA_DB", db.path())
        .env("ASTRA_ACTOR", "ann")
        .env("XDG_CONFIG_HOME", work.path().join("xdg-config"))
        .output()
        .unwrap();
    assert_memory_delivered("codex exec", &out, &model);

    // the Stop hook imported the session Codex wrote: its turns are conversation items of ann
    let items = conversation_items(db.path(), "ann");
    assert!(items.contains("Run the tests."), "the user's prompt was imported: {items}");
    assert!(items.contains("memory has a verified fix"), "the model's answer was imported: {items}");
}

/// A bad flag or environment value of a hook is a hook failure, exit 1, never clap's usage exit 2
/// (which would block the client's action on every event).
#[test]
fn a_bad_flag_or_environment_value_fails_the_hook_with_exit_1() {
    let db = tempfile::tempdir().unwrap();
    let payload = json!({"hook_event_name": "SessionStart", "session_id": "s", "cwd": db.path(), "source": "startup"});
    let out = run(hook(db.path()).args(["--budget-tokens", "0"]), &payload);
    assert!(assert_fails_quietly(&out).contains("--budget-tokens"), "{out:?}");
    let out = run(hook(db.path()).env("ASTRA_MIN_SCORE", "abc"), &payload);
    assert!(assert_fails_quietly(&out).contains("abc"), "{out:?}");
    let out = run(hook(db.path()).arg("--bogus"), &payload);
    assert!(assert_fails_quietly(&out).contains("--bogus"), "{out:?}");
    // outside a hook, a usage error stays exit 2
    let usage = Command::new(BIN).args(["memory", "list", "--bogus"]).output().unwrap();
    assert_eq!(usage.status.code(), Some(2), "{usage:?}");
}

/// A `Stop` hook without `--project` files the transcript's items under the last folder of the
/// session's `cwd` (docs/hooks.md), and a second `Stop` of the same transcript adds nothing.
#[tokio::test]
async fn a_stop_hook_files_the_transcript_under_the_cwd_folder() {
    let (db, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cwd = work.path().join("billing-api");
    std::fs::create_dir_all(&cwd).unwrap();
    // the store exists: a hook never creates one
    astra_mcp::store::lance::LanceStore::open(db.path().to_str().unwrap()).await.unwrap();
    let transcript = cwd.join("t.jsonl");
    std::fs::copy(crate::support::repo().join("tests/fixtures/transcripts/claude-code.jsonl"), &transcript).unwrap();
    let stop = json!({"session_id": "s", "transcript_path": transcript, "cwd": cwd, "hook_event_name": "Stop"});
    for round in 0..2 {
        let out = run(&mut hook(db.path()), &stop);
        assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let items: Vec<Value> =
        conversation_items(db.path(), "ann").lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    let imported =
        astra_mcp::sessions::formats::parse_transcript(&std::fs::read(&transcript).unwrap()).unwrap().items.len();
    assert!(imported > 0);
    assert_eq!(items.len(), imported, "each item once: {items:#?}");
    assert!(items.iter().all(|item| item["project"] == "billing-api"), "{items:#?}");
}

/// `memory list --table session_items --json` of `actor` on `db`: one JSON object per line.
pub(crate) fn conversation_items(db: &Path, actor: &str) -> String {
    let listed = Command::new(BIN)
        .args(["memory", "list", "--table", "session_items", "--json", "--actor", actor, "--db"])
        .arg(db)
        .env("ASTRA_LOG", "warn")
        .output()
        .unwrap();
    assert!(listed.status.success(), "{}", String::from_utf8_lossy(&listed.stderr));
    String::from_utf8(listed.stdout).unwrap()
}
