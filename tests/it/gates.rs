//! The fix-memory gates of docs/tools.md, "The gates" and the argument checks, through the tool host (the layer the
//! MCP server and the runner share), on a real store and the real model. Every refusal is an `is_error`
//! result that says what to do next, and nothing is stored by it.

use astra_mcp::memory::GateState;
use astra_mcp::memory::revalidate::CodeState;
use astra_mcp::tools::{SearchOutput, StoreFixOutput, ToolHost, ToolOutput};
use serde_json::json;

use crate::support::{SHELL_TESTS, args, config, host, shell_workspace};

async fn shell_host(db: &std::path::Path, ws: &std::path::Path) -> ToolHost {
    host(db, config("ann", "shellproj", Some(ws), Some(SHELL_TESTS))).await
}

async fn call(host: &ToolHost, session: &GateState, tool: &str, arguments: serde_json::Value) -> ToolOutput {
    host.call(session, tool, args(arguments)).await.expect("known tool")
}

async fn search(host: &ToolHost, session: &GateState, query: &str) -> SearchOutput {
    let out =
        call(host, session, "search_codebase_memory", json!({"query": query, "error_type": null, "top_k": 5})).await;
    assert!(!out.is_error, "{}", out.text);
    serde_json::from_value(out.structured.unwrap()).unwrap()
}

fn store_args(outcome: &str) -> serde_json::Value {
    json!({
        "fix_description": "app.txt said broken; make it say fixed",
        "error_type": "AssertionError",
        "file_paths": ["app.txt"],
        "outcome": outcome,
    })
}

/// Refused, with a message containing `hint`, and the store still empty for this actor.
async fn assert_refused(host: &ToolHost, out: &ToolOutput, hint: &str) {
    assert!(out.is_error, "expected a refusal, got: {}", out.text);
    assert!(out.structured.is_none());
    assert!(out.text.contains(hint), "message should say `{hint}`: {}", out.text);
    let probe = GateState::random();
    assert!(search(host, &probe, "app.txt says broken").await.matches.is_empty(), "a refused store wrote a row");
}

/// Search, fail, fix, pass: returns the confirmed outcome.
async fn reach_a_pass(host: &ToolHost, session: &GateState, ws: &std::path::Path) -> String {
    search(host, session, "test_app_is_fixed fails: app.txt says broken").await;
    let failed = call(host, session, "run_tests", json!({})).await;
    assert!(!failed.is_error, "a failing run is a normal result: {}", failed.text);
    assert_eq!(failed.structured.as_ref().unwrap()["passed"], json!(false));
    std::fs::write(ws.join("app.txt"), "fixed\n").unwrap();
    let passed = call(host, session, "run_tests", json!({})).await;
    passed.structured.unwrap()["confirmed_outcome"].as_str().expect("a pass confirms").to_string()
}

#[tokio::test]
async fn store_without_a_prior_search_is_refused() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    std::fs::write(ws.path().join("app.txt"), "fixed\n").unwrap();
    let passed = call(&host, &session, "run_tests", json!({})).await;
    let outcome = passed.structured.unwrap()["confirmed_outcome"].as_str().unwrap().to_string();
    let out = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    assert_refused(&host, &out, "call search_codebase_memory").await;
}

#[tokio::test]
async fn store_without_a_passing_run_is_refused() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    search(&host, &session, "app broken").await;
    let out = call(&host, &session, "store_fix_memory", store_args("pytest passed with exit code 0 (1 passed)")).await;
    assert_refused(&host, &out, "no passing run_tests").await;
    // a failing run does not confirm anything either
    call(&host, &session, "run_tests", json!({})).await;
    let out = call(&host, &session, "store_fix_memory", store_args("pytest passed with exit code 0 (1 passed)")).await;
    assert_refused(&host, &out, "no passing run_tests").await;
}

#[tokio::test]
async fn store_with_an_outcome_the_server_did_not_issue_is_refused() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&host, &session, ws.path()).await;
    let forged = outcome.replace("[receipt ", "[receipt 0");
    let out = call(&host, &session, "store_fix_memory", store_args(&forged)).await;
    assert_refused(&host, &out, &outcome).await; // the message quotes the one that would be accepted
}

#[tokio::test]
async fn store_after_files_changed_since_the_pass_is_refused() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&host, &session, ws.path()).await;
    std::fs::write(ws.path().join("notes.txt"), "edited after the tests passed\n").unwrap();
    let out = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    assert_refused(&host, &out, "files changed since the tests passed: run `run_tests` again").await;
    // the refusal names what changed (an edit, a new file), and what to do about a test's own output
    std::fs::write(ws.path().join("run.log"), "written by a test\n").unwrap();
    let out = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    let said = "Changed: `notes.txt`, `run.log`. If a test writes a file itself (a log, a cache), add it to .gitignore";
    assert_refused(&host, &out, said).await;
    // at most five are named, the rest counted
    for i in 0..7 {
        std::fs::write(ws.path().join(format!("out{i}.txt")), "x").unwrap();
    }
    let out = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    let said = "Changed: `notes.txt`, `out0.txt`, `out1.txt`, `out2.txt`, `out3.txt` and 4 more.";
    assert_refused(&host, &out, said).await;
}

#[tokio::test]
async fn a_failing_run_after_a_pass_revokes_the_confirmed_outcome() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&host, &session, ws.path()).await;
    std::fs::write(ws.path().join("app.txt"), "broken again\n").unwrap();
    call(&host, &session, "run_tests", json!({})).await;
    std::fs::write(ws.path().join("app.txt"), "fixed\n").unwrap();
    let out = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    assert_refused(&host, &out, "no passing run_tests").await;
}

#[tokio::test]
async fn paths_that_escape_the_workspace_are_refused_and_outside_files_untouched() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), ws.path().join("link.txt")).unwrap();
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&host, &session, ws.path()).await;
    let secret = outside.path().join("secret.txt");
    for (path, hint) in [
        ("../outside.txt", "contains `..`"),
        (secret.to_str().unwrap(), "is absolute"),
        ("link.txt", "resolves outside the workspace"),
        ("missing.py", "does not exist"),
    ] {
        let mut a = store_args(&outcome);
        a["file_paths"] = json!([path]);
        let out = call(&host, &session, "store_fix_memory", a).await;
        assert_refused(&host, &out, hint).await;
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "secret");
}

#[tokio::test]
async fn bad_arguments_are_tool_errors_that_say_what_to_fix() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let cases = [
        ("search_codebase_memory", json!({"query": "  ", "error_type": null, "top_k": 3}), "`query` is empty"),
        ("search_codebase_memory", json!({"query": "x", "error_type": null, "top_k": 0}), "between 1 and 10"),
        ("search_codebase_memory", json!({"query": "x", "error_type": null, "top_k": 11}), "between 1 and 10"),
        ("search_codebase_memory", json!({"query": ""}), "`query` is empty"),
        ("search_codebase_memory", json!({"query": "x", "top_k": "three"}), "`\"three\"` is not a whole number"),
        (
            "search_codebase_memory",
            json!({"query": "x", "error_type": null, "top_k": 3, "actor_id": "mallory"}),
            "unknown field `actor_id`",
        ),
        ("search_codebase_memory", json!({"query": "x".repeat(2001), "error_type": null, "top_k": 3}), "limit is 2000"),
        ("run_tests", json!({"verbose": true}), "unknown field `verbose`"),
        (
            "store_fix_memory",
            json!({"fix_description": "", "error_type": "E", "file_paths": ["app.txt"], "outcome": "o"}),
            "`fix_description` is empty",
        ),
        (
            "store_fix_memory",
            json!({"fix_description": "f", "error_type": "E", "file_paths": [], "outcome": "o"}),
            "`file_paths` has 0 entries",
        ),
        (
            "store_fix_memory",
            json!({"fix_description": "f", "error_type": "E", "file_paths": ["app.txt"], "outcome": ""}),
            "`outcome` is empty",
        ),
    ];
    for (tool, arguments, hint) in cases {
        let out = call(&host, &session, tool, arguments.clone()).await;
        assert!(out.is_error, "{tool} {arguments} should be refused");
        assert!(out.text.contains(hint), "{tool} {arguments}: message should contain `{hint}`: {}", out.text);
    }
    assert!(!session.has_searched(), "a refused search must not open the memory gate");
    let unknown = host.call(&session, "delete_everything", args(json!({}))).await;
    assert!(unknown.is_err(), "an unknown tool is a protocol error, not a tool result");
}

#[tokio::test]
async fn the_full_loop_stores_once_and_a_retry_upserts() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&host, &session, ws.path()).await;
    assert!(outcome.starts_with("tests passed with exit code 0 (1 passed) [receipt "), "{outcome}");
    let first = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    assert!(!first.is_error, "{}", first.text);
    let first: StoreFixOutput = serde_json::from_value(first.structured.unwrap()).unwrap();
    assert!(first.created && first.verified);
    let receipt = first.receipt.as_ref().unwrap();
    assert_eq!(receipt.exit_code, 0);
    assert_eq!(receipt.summary, "1 passed in 0.01s");
    assert_eq!(receipt.file_hashes.keys().collect::<Vec<_>>(), vec!["app.txt"]);
    let retry = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    let retry: StoreFixOutput = serde_json::from_value(retry.structured.unwrap()).unwrap();
    assert_eq!(retry.memory_id, first.memory_id);
    assert!(!retry.created, "an identical retry updates the same row");
    let found = search(&host, &GateState::random(), "app.txt says broken test_app_is_fixed").await;
    assert_eq!(found.matches.len(), 1);
    let m = &found.matches[0];
    assert_eq!(m.memory_id, first.memory_id);
    assert_eq!(m.stale, Some(false), "same project, files unchanged");
    // the row embeds the symptoms the server saw: the failing test and its assertion line
    assert!(m.keyword_hit, "the failing test's name is indexed");
    std::fs::write(ws.path().join("app.txt"), "fixed differently\n").unwrap();
    let again = search(&host, &GateState::random(), "app.txt says broken").await;
    assert_eq!(again.matches[0].stale, Some(true), "the recorded file changed since the fix");
}

/// A session whose tests never failed stores no second row for a fix an earlier session stored: it is
/// told which fix holds it. A session that saw the failure stores its own (another occurrence).
#[tokio::test]
async fn a_fix_stored_again_without_a_failing_run_is_the_stored_fix() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let fixer = GateState::random();
    let outcome = reach_a_pass(&host, &fixer, ws.path()).await;
    let first = call(&host, &fixer, "store_fix_memory", store_args(&outcome)).await;
    let first: StoreFixOutput = serde_json::from_value(first.structured.unwrap()).unwrap();
    let later = GateState::random();
    search(&host, &later, "app.txt says broken").await;
    let passed = call(&host, &later, "run_tests", json!({})).await;
    let outcome = passed.structured.unwrap()["confirmed_outcome"].as_str().unwrap().to_string();
    let again = call(&host, &later, "store_fix_memory", store_args(&outcome)).await;
    assert!(!again.is_error, "{}", again.text);
    assert!(
        again.text.starts_with(&format!("Fix memory {} already holds this fix", first.memory_id)),
        "{}",
        again.text
    );
    let again: StoreFixOutput = serde_json::from_value(again.structured.unwrap()).unwrap();
    assert_eq!((again.memory_id.as_str(), again.created), (first.memory_id.as_str(), false));
    assert_eq!(again.session_id, first.session_id, "the stored fix, as its session stored it");
    let found = search(&host, &GateState::random(), "app.txt says broken test_app_is_fixed").await;
    assert_eq!(found.matches.len(), 1, "one fix, not two");
    // the same fix after a failing run of this session is a fix of its own
    std::fs::write(ws.path().join("app.txt"), "broken\n").unwrap();
    let refixer = GateState::random();
    let outcome = reach_a_pass(&host, &refixer, ws.path()).await;
    let own = call(&host, &refixer, "store_fix_memory", store_args(&outcome)).await;
    let own: StoreFixOutput = serde_json::from_value(own.structured.unwrap()).unwrap();
    assert!(own.created && own.memory_id != first.memory_id, "{own:?}");
}

/// `git args` in `dir` as user Ann, asserting it succeeded; its stdout, trimmed.
pub(crate) fn git_in(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=Ann", "-c", "user.email=ann@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git is installed");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// [`shell_workspace`] as a git work tree, its broken app committed.
pub(crate) fn committed_shell_workspace() -> tempfile::TempDir {
    let ws = shell_workspace();
    for args in [&["init", "-q"][..], &["add", "-A"], &["commit", "-q", "-m", "broken app"]] {
        git_in(ws.path(), args);
    }
    ws
}

/// A receipt names the commit the workspace was on (`git rev-parse HEAD`), read from a real git work
/// tree, and a later search returns it with the fix.
#[tokio::test]
async fn a_receipt_names_the_git_head_of_the_workspace() {
    let (db, ws) = (tempfile::tempdir().unwrap(), committed_shell_workspace());
    let git = |args: &[&str]| git_in(ws.path(), args);
    let head = git(&["rev-parse", "HEAD"]);
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&host, &session, ws.path()).await;
    let stored = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    let stored: StoreFixOutput = serde_json::from_value(stored.structured.expect("stored")).unwrap();
    assert_eq!(stored.receipt.unwrap().git_head.as_deref(), Some(head.as_str()));
    let found = search(&host, &GateState::random(), "app.txt says broken").await;
    assert_eq!(found.matches[0].receipt.as_ref().and_then(|r| r.git_head.as_deref()), Some(head.as_str()));
}

/// The code check of the best match for `app.txt says broken`: state, why, `stale`, and the text result.
async fn code_of(host: &ToolHost) -> (CodeState, String, Option<bool>, String) {
    let out = call(
        host,
        &GateState::random(),
        "search_codebase_memory",
        json!({"query": "app.txt says broken", "error_type": null, "top_k": 1}),
    )
    .await;
    let structured = out.structured.expect("a result");
    assert!(structured["matches"][0]["receipt"].get("changes").is_none(), "the recorded lines stay in the store");
    let found: SearchOutput = serde_json::from_value(structured).unwrap();
    let m = found.matches.into_iter().next().expect("the fix is found");
    (m.code.state, m.code.why, m.stale, out.text)
}

/// A fix stored in a git work tree records the lines it changed, and each later search checks them
/// against the code: in place (also once committed), changed around, reverted (said first), unknown
/// when the file is gone; the recorded lines never reach a client.
#[tokio::test]
async fn a_fix_is_checked_against_the_code_in_place_changed_around_reverted_gone() {
    let (db, ws) = (tempfile::tempdir().unwrap(), committed_shell_workspace());
    let git = |args: &[&str]| git_in(ws.path(), args);
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&host, &session, ws.path()).await;
    let stored = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    assert!(stored.text.contains("Later searches check its 2 changed lines against the code"), "{}", stored.text);
    assert!(stored.structured.as_ref().unwrap()["receipt"].get("changes").is_none(), "the lines stay in the store");

    let (state, why, stale, text) = code_of(&host).await;
    assert_eq!((state, stale), (CodeState::InPlace, Some(false)), "{why}");
    assert!(!text.contains("Reverted:") && !text.contains("Code:"), "in place needs no line: {text}");

    // committed as it is, and another file changed: still in place
    std::fs::write(ws.path().join("notes.md"), "unrelated notes\n").unwrap();
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "fix app, add notes"]);
    assert_eq!(code_of(&host).await.0, CodeState::InPlace);

    std::fs::write(ws.path().join("app.txt"), "header line\nfixed\n").unwrap();
    let (state, why, stale, text) = code_of(&host).await;
    assert_eq!(
        (state, why.as_str(), stale),
        (CodeState::ChangedAround, "app.txt changed elsewhere; its lines are there", Some(true))
    );
    assert!(text.contains("\nCode: changed around (app.txt changed elsewhere; its lines are there)"), "{text}");

    std::fs::write(ws.path().join("app.txt"), "broken\n").unwrap();
    let (state, why, stale, text) = code_of(&host).await;
    assert_eq!(
        (state, why.as_str(), stale),
        (CodeState::Reverted, "1 of 1 lines it added to app.txt are gone", Some(true))
    );
    let second_line = text.lines().nth(1).unwrap_or_default();
    assert!(second_line.starts_with("Reverted: 1 of 1 lines it added to app.txt are gone since"), "said first: {text}");

    std::fs::remove_file(ws.path().join("app.txt")).unwrap();
    let (state, why, stale, _) = code_of(&host).await;
    assert_eq!((state, why.as_str(), stale), (CodeState::Unknown, "app.txt is gone (renamed or deleted?)", None));
}

/// The `renewed_fixes` of a `run_tests` call, which must have passed.
async fn renewed_by_a_pass(host: &ToolHost) -> (u64, String) {
    let out = call(host, &GateState::random(), "run_tests", json!({})).await;
    let structured = out.structured.expect("a result");
    assert_eq!(structured["passed"], json!(true), "{}", out.text);
    (structured["renewed_fixes"].as_u64().expect("a count"), out.text)
}

/// A passing run_tests renews the project's fixes that are still in the code at a tree no run of them
/// had tested: searches then show when, and by which run; a run of the same tree, or one after the fix
/// was reverted, renews nothing.
#[tokio::test]
async fn a_passing_run_renews_the_fixes_still_in_the_code() {
    let (db, ws) = (tempfile::tempdir().unwrap(), committed_shell_workspace());
    let git = |args: &[&str]| git_in(ws.path(), args);
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&host, &session, ws.path()).await;
    assert!(!call(&host, &session, "store_fix_memory", store_args(&outcome)).await.is_error);
    assert_eq!(renewed_by_a_pass(&host).await.0, 0, "the tree the fix was confirmed at tells nothing new");
    let fresh = search(&host, &GateState::random(), "app.txt says broken").await.matches.remove(0);
    assert!(fresh.receipt.as_ref().unwrap().last_verified.is_none());

    std::fs::write(ws.path().join("notes.txt"), "notes\nmore notes\n").unwrap();
    let (renewed, text) = renewed_by_a_pass(&host).await;
    assert_eq!(renewed, 1, "{text}");
    assert!(
        text.contains("\nRenewed: 1 stored fix of this project still in the code, now verified by this run."),
        "{text}"
    );
    let out = call(
        &host,
        &GateState::random(),
        "search_codebase_memory",
        json!({"query": "app.txt says broken", "error_type": null, "top_k": 1}),
    )
    .await;
    let m: SearchOutput = serde_json::from_value(out.structured.unwrap()).unwrap();
    let m = &m.matches[0];
    let receipt = m.receipt.as_ref().unwrap();
    let again = receipt.last_verified.as_ref().expect("renewed");
    assert_eq!(again.summary, "1 passed in 0.01s");
    assert_eq!(again.git_head.as_deref(), Some(git(&["rev-parse", "HEAD"]).as_str()));
    assert_ne!(again.workspace_digest, receipt.workspace_digest, "renewed at another tree");
    assert!(again.finished_at > receipt.finished_at);
    assert_eq!(m.last_verified_at, Some(again.finished_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)));
    assert_eq!(m.confirmed_at, receipt.finished_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), "kept");
    assert_eq!(m.fix_description, "app.txt said broken; make it say fixed", "the rest of the row is kept");
    assert!(
        out.text.contains(&format!(
            "\nConfirmed: {} (just now); verified again {} (just now), its tests passed with it in place\n",
            m.confirmed_at,
            m.last_verified_at.as_deref().unwrap()
        )),
        "{}",
        out.text
    );
    assert_eq!(renewed_by_a_pass(&host).await.0, 0, "the same tree again");
    // another test command (a subset of the tests, say) proves less than the fix's own pass did
    std::fs::write(ws.path().join("notes.txt"), "notes\nmore notes\nand more\n").unwrap();
    let subset = format!("{SHELL_TESTS} # app only");
    let other = crate::support::host(db.path(), config("ann", "shellproj", Some(ws.path()), Some(&subset))).await;
    assert_eq!(renewed_by_a_pass(&other).await.0, 0, "a run of another command renews nothing");

    // the tests still pass (grep finds `fixed` in `unfixed`), but the fix's line is gone
    std::fs::write(ws.path().join("app.txt"), "unfixed\n").unwrap();
    assert_eq!(renewed_by_a_pass(&host).await.0, 0, "a reverted fix is not renewed");
    let (state, ..) = code_of(&host).await;
    assert_eq!(state, CodeState::Reverted);
    let after = search(&host, &GateState::random(), "app.txt says broken").await.matches.remove(0);
    assert_eq!(after.last_verified_at, m.last_verified_at, "still the run that last found it in place");
}

/// An attempt that did not work is kept with the fix only when it cites a run_tests of the same session
/// that failed; searches show it under the fix.
#[tokio::test]
async fn failed_attempts_cite_failing_runs_of_the_session_and_show_under_the_fix() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    search(&host, &session, "test_app_is_fixed fails: app.txt says broken").await;
    let failed_run_id = |out: &ToolOutput| -> String {
        let id = out.structured.as_ref().unwrap()["failed_run_id"].as_str().expect("a failing run has an id");
        assert!(out.text.contains(&format!("failed_run_id: {id} (")), "{}", out.text);
        id.to_string()
    };
    let first = failed_run_id(&call(&host, &session, "run_tests", json!({})).await);
    std::fs::write(ws.path().join("app.txt"), "still broken, retried\n").unwrap();
    let second = failed_run_id(&call(&host, &session, "run_tests", json!({})).await);
    assert!(first.starts_with("run-") && first != second, "{first} {second}");
    std::fs::write(ws.path().join("app.txt"), "fixed\n").unwrap();
    let passed = call(&host, &session, "run_tests", json!({})).await;
    assert_eq!(passed.structured.as_ref().unwrap()["failed_run_id"], json!(null), "a pass has no failed_run_id");
    let outcome = passed.structured.unwrap()["confirmed_outcome"].as_str().unwrap().to_string();

    // an id that is not a failing run of this session: refused, naming the ones it has, nothing stored
    let mut args = store_args(&outcome);
    args["failed_attempts"] = json!([{"what": "made it say maybe", "failed_run_id": "run-00000000"}]);
    let out = call(&host, &session, "store_fix_memory", args).await;
    assert!(out.is_error && out.text.contains(&format!("this session's are {first}, {second}")), "{}", out.text);
    assert_refused(&host, &out, "is not the failed_run_id of a run_tests that failed in this session").await;
    // another session's failing run does not count either
    let other = GateState::random();
    search(&host, &other, "anything").await;
    let mut args = store_args(&outcome);
    args["failed_attempts"] = json!([{"what": "x", "failed_run_id": second}]);
    assert!(call(&host, &other, "store_fix_memory", args).await.is_error);

    let mut args = store_args(&outcome);
    args["failed_attempts"] = json!([{"what": "appended 'retried' to the broken text", "failed_run_id": second}]);
    let stored = call(&host, &session, "store_fix_memory", args).await;
    assert!(!stored.is_error, "{}", stored.text);
    let out = call(
        &host,
        &GateState::random(),
        "search_codebase_memory",
        json!({"query": "app.txt says broken", "error_type": null, "top_k": 1}),
    )
    .await;
    assert!(out.text.contains("\nTried before and failed: appended 'retried' to the broken text (`"), "{}", out.text);
    let found: SearchOutput = serde_json::from_value(out.structured.unwrap()).unwrap();
    let attempts = &found.matches[0].receipt.as_ref().unwrap().failed_attempts;
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        (attempts[0].what.as_str(), attempts[0].summary.as_str()),
        ("appended 'retried' to the broken text", "1 failed in 0.01s")
    );
    // an identical retry without them (`null` is none) keeps them
    let mut args = store_args(&outcome);
    args["failed_attempts"] = json!(null);
    let retry = call(&host, &session, "store_fix_memory", args).await;
    assert!(retry.text.starts_with("Updated existing fix memory"), "{}", retry.text);
    let found = search(&host, &GateState::random(), "app.txt says broken").await;
    assert_eq!(found.matches[0].receipt.as_ref().unwrap().failed_attempts.len(), 1, "the retry kept the attempt");
}

/// A failing run on the very files the tests then passed on shows a flaky test, not a failed attempt.
#[tokio::test]
async fn a_failing_run_on_the_files_of_the_pass_is_no_failed_attempt() {
    let (db, ws, marks) = (tempfile::tempdir().unwrap(), shell_workspace(), tempfile::tempdir().unwrap());
    let marker = marks.path().join("ran-once");
    let flaky = format!(
        "if [ -f '{0}' ]; then echo '1 passed in 0.01s'; else touch '{0}'; echo '1 failed in 0.01s'; exit 1; fi",
        marker.display()
    );
    let host = host(db.path(), config("ann", "flaky", Some(ws.path()), Some(&flaky))).await;
    let session = GateState::random();
    search(&host, &session, "flaky").await;
    let failed = call(&host, &session, "run_tests", json!({})).await;
    let id = failed.structured.unwrap()["failed_run_id"].as_str().unwrap().to_string();
    let passed = call(&host, &session, "run_tests", json!({})).await;
    let outcome = passed.structured.unwrap()["confirmed_outcome"].as_str().unwrap().to_string();
    let mut args = store_args(&outcome);
    args["failed_attempts"] = json!([{"what": "nothing at all", "failed_run_id": id}]);
    let out = call(&host, &session, "store_fix_memory", args).await;
    assert!(out.is_error && out.text.contains("tested the same files as the passing run"), "{}", out.text);
}

#[tokio::test]
async fn trust_mode_accepts_client_outcomes_but_marks_them_unverified() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let mut cfg = config("ann", "shellproj", Some(ws.path()), Some(SHELL_TESTS));
    cfg.trust_client_outcomes = true;
    let host = host(db.path(), cfg).await;
    let session = GateState::random();
    let out = call(&host, &session, "store_fix_memory", store_args("CI passed")).await;
    assert!(out.is_error && out.text.contains("search_codebase_memory"), "the memory gate stays: {}", out.text);
    search(&host, &session, "app broken").await;
    let mut bad = store_args("CI passed");
    bad["file_paths"] = json!(["../x"]);
    assert!(call(&host, &session, "store_fix_memory", bad).await.is_error, "path checks stay");
    let out = call(&host, &session, "store_fix_memory", store_args("CI passed")).await;
    assert!(!out.is_error, "{}", out.text);
    assert_eq!(out.structured.as_ref().unwrap()["verified"], json!(false));
    let found = call(
        &host,
        &GateState::random(),
        "search_codebase_memory",
        json!({"query": "app.txt said broken", "error_type": null, "top_k": 1}),
    )
    .await;
    assert!(found.text.contains("Verified: no"), "search results say so: {}", found.text);
    let found: SearchOutput = serde_json::from_value(found.structured.unwrap()).unwrap();
    assert_eq!(found.matches[0].last_verified_at, None, "never verified here, so never last verified");
}

#[tokio::test]
async fn without_a_workspace_only_searches_work() {
    let db = tempfile::tempdir().unwrap();
    let host = host(db.path(), config("ann", "p", None, None)).await;
    let session = GateState::random();
    let found =
        call(&host, &session, "search_codebase_memory", json!({"query": "anything", "error_type": null, "top_k": 3}))
            .await;
    assert_eq!((found.is_error, found.text.as_str()), (false, "No relevant confirmed fixes found."));
    for tool in ["run_tests", "store_fix_memory"] {
        let a = if tool == "run_tests" { json!({}) } else { store_args("x") };
        let out = call(&host, &session, tool, a).await;
        assert!(out.is_error && out.text.contains("--workspace"), "{tool}: {}", out.text);
    }
}

#[tokio::test]
async fn secrets_in_the_command_output_and_arguments_never_reach_the_store() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let command = "export API_TOKEN=ghp_0123456789abcdefghijklmnopqrstuvwxyzAB; echo 'connected with password=hunter2hunter2hunter'";
    let host = host(db.path(), config("ann", "shellproj", Some(ws.path()), Some(command))).await;
    let session = GateState::random();
    search(&host, &session, "login fails, key sk-proj-abcdefghijklmnopqrstuvwxyz012345 rejected").await;
    let passed = call(&host, &session, "run_tests", json!({})).await;
    let outcome = passed.structured.unwrap()["confirmed_outcome"].as_str().unwrap().to_string();
    assert!(!outcome.contains("hunter2"), "{outcome}");
    let mut a = store_args(&outcome);
    a["fix_description"] = json!("rotate the key; DB_PASSWORD=correcthorsebattery was hard-coded \u{202E}txt.exe");
    let stored = call(&host, &session, "store_fix_memory", a).await;
    assert!(!stored.is_error, "{}", stored.text);
    let found = call(
        &host,
        &GateState::random(),
        "search_codebase_memory",
        json!({"query": "login key rejected", "error_type": null, "top_k": 5}),
    )
    .await;
    let everything = format!("{} {}", found.text, found.structured.unwrap());
    for secret in ["hunter2", "ghp_0123", "sk-proj-abc", "correcthorsebattery"] {
        assert!(!everything.contains(secret), "`{secret}` reached the store: {everything}");
    }
    assert!(everything.contains("[REDACTED:"), "redaction markers show where secrets were");
    assert!(!everything.contains('\u{202E}'), "a bidirectional override reached the store: {everything}");
    assert!(everything.contains(r"\u{202e}txt.exe"), "{everything}");
}

#[tokio::test]
async fn an_edit_during_the_test_run_voids_the_pass() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    std::fs::write(ws.path().join("app.txt"), "fixed\n").unwrap();
    // the "tests" pass, but something rewrites a file while they run
    let command = "echo '1 passed in 0.01s'; echo 'changed during the run' > notes.txt";
    let host = host(db.path(), config("ann", "shellproj", Some(ws.path()), Some(command))).await;
    let session = GateState::random();
    search(&host, &session, "anything").await;
    let out = call(&host, &session, "run_tests", json!({})).await;
    let structured = out.structured.unwrap();
    assert_eq!(structured["confirmed_outcome"], json!(null), "{}", out.text);
    assert_eq!(structured["files_changed_during_run"], json!(true));
    assert_eq!(structured["changed_files"], json!(["notes.txt"]));
    assert!(out.text.contains("Files changed while the tests ran"), "{}", out.text);
    // names the file the run wrote, and how to keep a test's own output from voiding the pass
    let said = "Changed: `notes.txt`. If a test writes a file itself (a log, a cache), add it to .gitignore";
    assert!(out.text.contains(said), "{}", out.text);
}

#[tokio::test]
async fn files_the_digest_does_not_cover_cannot_be_recorded() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    std::fs::write(ws.path().join(".gitignore"), "build.log\n").unwrap();
    std::fs::write(ws.path().join("build.log"), "log").unwrap();
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&host, &session, ws.path()).await;
    let mut a = store_args(&outcome);
    a["file_paths"] = json!(["app.txt", "build.log"]);
    let out = call(&host, &session, "store_fix_memory", a).await;
    assert_refused(&host, &out, "`build.log` is not covered by the workspace digest").await;
}

/// Optional arguments have the defaults their schema states: an omitted `top_k` is 5 (as a null one),
/// and a number sent as a string (`"3"`) counts as that number.
#[tokio::test]
async fn omitted_optional_arguments_take_their_defaults() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    for arguments in
        [json!({"query": "mean"}), json!({"query": "mean", "top_k": null}), json!({"query": "mean", "top_k": "3"})]
    {
        let out = call(&host, &session, "search_codebase_memory", arguments.clone()).await;
        assert!(!out.is_error, "{arguments}: {}", out.text);
    }
    for tool in ["archival_memory_search", "conversation_search"] {
        let out = call(&host, &session, tool, json!({"query": "mean", "top_k": "2"})).await;
        assert!(!out.is_error, "{tool}: {}", out.text);
    }
    let spec = astra_mcp::tools::specs().into_iter().find(|s| s.name == "search_codebase_memory").unwrap();
    assert_eq!(spec.input_schema["properties"]["top_k"]["default"], json!(5), "the schema states the default");
    assert_eq!(spec.input_schema["properties"]["error_type"]["default"], json!(null));
}

/// A search that failed did not open the memory gate, and the store's refusal says so with the
/// failure's own answer: the agent that called the search is not told "call it first" and left guessing.
#[tokio::test]
async fn a_failed_search_is_named_in_the_memory_gate_refusal() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let failed = call(&host, &session, "search_codebase_memory", json!({"query": "mean", "top_k": 50})).await;
    assert!(failed.is_error, "{}", failed.text);
    std::fs::write(ws.path().join("app.txt"), "fixed\n").unwrap();
    let passed = call(&host, &session, "run_tests", json!({})).await;
    let outcome = passed.structured.unwrap()["confirmed_outcome"].as_str().unwrap().to_string();
    let out = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    assert_refused(&host, &out, "Your earlier search_codebase_memory call failed, so it did not count").await;
    assert!(out.text.contains("`top_k` is 50, it must be between 1 and 10"), "{}", out.text);
    // once a search completes, the store goes through
    search(&host, &session, "app.txt says broken").await;
    let stored = call(&host, &session, "store_fix_memory", store_args(&outcome)).await;
    assert!(!stored.is_error, "{}", stored.text);
}

/// A test command that cannot run (not found, not executable, a Python without the runner, pytest's
/// usage error) is an error naming --test-command, never "Tests failed", and changes no gate: a
/// confirmed outcome of an earlier pass in the session still stores.
#[tokio::test]
async fn a_test_command_that_cannot_run_is_an_error_naming_the_flag() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    std::fs::write(ws.path().join("not-executable.sh"), "echo '1 passed in 0.01s'\n").unwrap();
    std::fs::write(
        ws.path().join("pytest"),
        "#!/bin/sh\necho 'ERROR: usage: pytest [options] [file_or_dir]' >&2\nexit 4\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(ws.path().join("pytest"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cases = [
        ("pytset -q", "exit code 127"),
        ("./not-executable.sh", "exit code 126"),
        ("echo '/usr/bin/python3: No module named pytest' >&2; exit 1", "has no module `pytest`"),
        ("./pytest -q --no-such-option", "pytest refused its command line (exit code 4"),
    ];
    // one session throughout: a pass, then runs that could not run; the pass still stores after them
    let good = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    let outcome = reach_a_pass(&good, &session, ws.path()).await;
    for (command, why) in cases {
        let host = host(db.path(), config("ann", "shellproj", Some(ws.path()), Some(command))).await;
        let out = call(&host, &session, "run_tests", json!({})).await;
        assert!(out.is_error, "{command}: {}", out.text);
        assert!(out.text.contains(why) && out.text.contains("--test-command"), "{command}: {}", out.text);
        assert!(!out.text.contains("Tests failed"), "{command}: {}", out.text);
    }
    let stored = call(&good, &session, "store_fix_memory", store_args(&outcome)).await;
    assert!(!stored.is_error, "{}", stored.text);
}

/// A command that cannot run names where it came from and what the user changes there: `test_command` of
/// `.astra-mcp.toml`, or (detected) the runner's installation, never `--test-command` it was not given by.
#[tokio::test]
async fn a_command_that_cannot_run_names_where_it_came_from() {
    use astra_mcp::memory::project::{self, ProjectFile};
    let db = tempfile::tempdir().unwrap();
    // from the project file
    let ws = shell_workspace();
    std::fs::write(ws.path().join(".astra-mcp.toml"), "test_command = \"pytset -q\"\n").unwrap();
    let file = ProjectFile::load(ws.path()).unwrap();
    let mut from_file = config("ann", "shellproj", Some(ws.path()), None);
    from_file.test_command = project::test_command(ws.path(), file.as_ref());
    let out = call(&host(db.path(), from_file).await, &GateState::random(), "run_tests", json!({})).await;
    assert!(out.is_error && out.text.contains("exit code 127"), "{}", out.text);
    let said = "Where the command came from: from .astra-mcp.toml at the workspace root. Tell the user to fix \
                `test_command` in .astra-mcp.toml at the workspace root and restart the server.";
    assert!(out.text.contains(said), "{}", out.text);
    assert!(!out.text.contains("ASTRA_TEST_COMMAND"), "not the flag: {}", out.text);

    // detected: a test file at the root and a .venv whose python cannot be executed
    let py = tempfile::tempdir().unwrap();
    std::fs::write(py.path().join("test_stats.py"), "def test_mean():\n    assert True\n").unwrap();
    std::fs::create_dir_all(py.path().join(".venv/bin")).unwrap();
    std::fs::write(py.path().join(".venv/bin/pytest"), "").unwrap();
    std::fs::write(py.path().join(".venv/bin/python"), "not a program").unwrap();
    let detected = project::detect_test_command(py.path()).expect("pytest detected from test_stats.py");
    assert_eq!(detected.command, ".venv/bin/python -m pytest -q");
    let mut from_detection = config("ann", "pyproj", Some(py.path()), None);
    from_detection.test_command = Some(detected);
    let out = call(&host(db.path(), from_detection).await, &GateState::random(), "run_tests", json!({})).await;
    assert!(out.is_error && out.text.contains("exit code 126"), "{}", out.text);
    let said = "Where the command came from: detected: test_*.py files at the workspace root; pytest is installed \
                in .venv. Tell the user to install what it needs";
    assert!(out.text.contains(said), "{}", out.text);
    assert!(!out.text.contains("ASTRA_TEST_COMMAND)"), "not the flag: {}", out.text);
}

/// A failing run is recorded as failed, not as a call that went "ok"; a passing one as passed.
#[tokio::test]
async fn a_recorded_run_tests_call_says_whether_the_tests_passed() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = shell_host(db.path(), ws.path()).await;
    let session = GateState::random();
    reach_a_pass(&host, &session, ws.path()).await;
    host.flush().await;
    let store = astra_mcp::app::LanceStore::open(db.path().to_str().unwrap()).await.unwrap();
    let rows = store.list_rows(Some("session_items"), Some("ann"), 50).await.unwrap();
    let mut records: Vec<&str> = rows.iter().map(|r| r.preview.as_str()).collect();
    records.sort();
    assert!(records[0].starts_with("tool call run_tests (failed): Tests failed (exit code 1)"), "{records:?}");
    assert!(records[1].starts_with("tool call run_tests (passed): Tests passed (exit code 0)"), "{records:?}");
}
