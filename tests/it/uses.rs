//! Use and usefulness of memories (docs/tools.md, "Was a memory used?"), through the tool host on a real
//! store and the real model: a search counts what it returns, a passing `run_tests` credits what its
//! session was given, once, and results show both.

use astra_mcp::memory::GateState;
use astra_mcp::tools::{ArchivalSearchOutput, SearchOutput, StoreFixOutput, ToolHost, ToolOutput};
use serde_json::json;

use crate::support::{SHELL_TESTS, args, config, host, shell_workspace};

async fn call(host: &ToolHost, session: &GateState, tool: &str, arguments: serde_json::Value) -> ToolOutput {
    let out = host.call(session, tool, args(arguments)).await.expect("known tool");
    assert!(!out.is_error, "{tool}: {}", out.text);
    out
}

/// Searches, then waits until the uses it recorded are written.
async fn search(host: &ToolHost, session: &GateState, query: &str) -> (SearchOutput, String) {
    let out = call(host, session, "search_codebase_memory", json!({"query": query})).await;
    host.flush().await;
    (serde_json::from_value(out.structured.unwrap()).unwrap(), out.text)
}

/// A session of its own fixes the shell workspace `ws` and stores the fix, as an agent would: search,
/// failing `run_tests`, the edit, passing `run_tests`, `store_fix_memory`.
async fn store_a_fix(host: &ToolHost, ws: &std::path::Path) -> StoreFixOutput {
    let fixer = GateState::random();
    search(host, &fixer, "test_app_is_fixed fails: app.txt says broken").await;
    call(host, &fixer, "run_tests", json!({})).await;
    std::fs::write(ws.join("app.txt"), "fixed\n").unwrap();
    let passed = call(host, &fixer, "run_tests", json!({})).await;
    let outcome = passed.structured.unwrap()["confirmed_outcome"].as_str().unwrap().to_string();
    let stored = call(
        host,
        &fixer,
        "store_fix_memory",
        json!({"fix_description": "app.txt said broken; make it say fixed", "error_type": "AssertionError",
               "file_paths": ["app.txt"], "outcome": outcome}),
    )
    .await;
    serde_json::from_value(stored.structured.unwrap()).unwrap()
}

#[tokio::test]
async fn a_returned_fix_counts_its_uses_and_the_sessions_that_then_passed() {
    let (db, ws) = (tempfile::tempdir().unwrap(), shell_workspace());
    let host = host(db.path(), config("ann", "shellproj", Some(ws.path()), Some(SHELL_TESTS))).await;
    let stored = store_a_fix(&host, ws.path()).await;

    // the first time it is returned it was never used; the searches before it was stored found nothing
    let reader = GateState::random();
    let (first, text) = search(&host, &reader, "app.txt says broken").await;
    assert_eq!(first.matches[0].memory_id, stored.memory_id);
    assert_eq!((first.matches[0].usage.uses, first.matches[0].usage.last_used_at), (0, None));
    assert!(!text.contains("\nUsed: "), "{text}");
    let (second, text) = search(&host, &reader, "app.txt says broken").await;
    let usage = &second.matches[0].usage;
    assert_eq!((usage.uses, usage.helped), (1, 0));
    let last = usage.last_used_at.expect("dated");
    assert!((chrono::Utc::now() - last).num_seconds() < 60, "{last}");
    assert!(text.contains("\nUsed: used once before, last "), "{text}");

    // the reader's tests pass: the fix it was given is credited, once however often they pass again
    call(&host, &reader, "run_tests", json!({})).await;
    call(&host, &reader, "run_tests", json!({})).await;
    let (third, text) = search(&host, &GateState::random(), "app.txt says broken").await;
    let usage = &third.matches[0].usage;
    assert_eq!((usage.uses, usage.helped), (2, 1), "{text}");
    assert!(
        text.contains("\nUsed: used 2 times before, last ") && text.contains("; tests passed after it in 1 session")
    );
    // a session whose tests fail credits nothing
    std::fs::write(ws.path().join("app.txt"), "broken\n").unwrap();
    let failing = GateState::random();
    search(&host, &failing, "app.txt says broken").await;
    call(&host, &failing, "run_tests", json!({})).await;
    let (fourth, _) = search(&host, &GateState::random(), "app.txt says broken").await;
    assert_eq!((fourth.matches[0].usage.uses, fourth.matches[0].usage.helped), (4, 1));
}

#[tokio::test]
async fn a_returned_passage_counts_its_uses() {
    let db = tempfile::tempdir().unwrap();
    let host = host(db.path(), config("ann", "proj", None, None)).await;
    let session = GateState::random();
    let text = "The staging database is rebuilt every Monday at 06:00 UTC";
    call(&host, &session, "archival_memory_insert", json!({"text": text, "tags": ["ops"]})).await;
    let find = |session| {
        let host = &host;
        async move {
            let out = call(host, session, "archival_memory_search", json!({"query": "when is staging rebuilt"})).await;
            host.flush().await;
            let found: ArchivalSearchOutput = serde_json::from_value(out.structured.unwrap()).unwrap();
            (found, out.text)
        }
    };
    let (first, _) = find(&session).await;
    assert_eq!(first.results[0].text, text);
    assert_eq!(first.results[0].usage.uses, 0);
    let (second, shown) = find(&GateState::random()).await;
    assert_eq!(second.results[0].usage.uses, 1);
    assert!(second.results[0].usage.last_used_at.is_some());
    assert!(shown.lines().next().unwrap().contains(" (used once before, last "), "{shown}");
}

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

/// `astra-mcp memory <args>` of actor `ann` on store `db`: (exit code, stdout, stderr).
fn memory_cli(db: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(BIN)
        .arg("memory")
        .args(args)
        .arg("--db")
        .arg(db)
        .args(["--actor", "ann"])
        .env_remove("ASTRA_EXPIRE_AFTER_DAYS")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap(), text(&out.stdout), text(&out.stderr))
}

/// A passage of `ann` in project `proj` written `days_ago`, straight into the store.
async fn old_passage(db: &std::path::Path, text: &str, days_ago: i64) -> uuid::Uuid {
    old_passage_of(db, "ann", "proj", text, days_ago).await
}

/// A passage of `actor` in `project` written `days_ago`, straight into the store (as a server of that
/// time would have left it; nothing used it since).
pub(crate) async fn old_passage_of(
    db: &std::path::Path,
    actor: &str,
    project: &str,
    text: &str,
    days_ago: i64,
) -> uuid::Uuid {
    use astra_mcp::store::ArchivalStore;
    let store = astra_mcp::store::lance::LanceStore::open(db.to_str().unwrap()).await.unwrap();
    let at = chrono::Utc::now() - chrono::Duration::days(days_ago);
    let passage = astra_mcp::domain::Passage {
        id: astra_mcp::domain::passage_id(actor, project, text),
        actor_id: actor.into(),
        project: project.into(),
        session_id: String::new(),
        turn: None,
        source: "archival_memory_insert".into(),
        tags: Vec::new(),
        text: text.into(),
        created_at: at,
        updated_at: at,
        embedded_text: text.into(),
        superseded_by: None,
    };
    let vector = crate::support::embedder().embed_documents(vec![text.to_string()]).await.unwrap().remove(0);
    store.insert_passages(&[(passage.clone(), vector)]).await.unwrap();
    passage.id
}

async fn archival_ids(host: &ToolHost, query: &str) -> Vec<String> {
    let out = call(host, &GateState::random(), "archival_memory_search", json!({"query": query})).await;
    host.flush().await;
    let found: ArchivalSearchOutput = serde_json::from_value(out.structured.unwrap()).unwrap();
    found.results.into_iter().map(|c| c.id).collect()
}

/// Saving an expired passage's text again is a write of it: the answer says it is already stored, and
/// searches offer the passage again.
#[tokio::test]
async fn saving_an_expired_passage_again_brings_it_back() {
    let db = tempfile::tempdir().unwrap();
    let text = "The staging database is rebuilt every Monday at 06:00 UTC";
    let stale = old_passage(db.path(), text, 120).await;
    let host = host(db.path(), config("ann", "proj", None, None)).await;
    let query = "when is the staging database rebuilt";
    assert!(!archival_ids(&host, query).await.contains(&stale.to_string()), "expired");
    let out = call(&host, &GateState::random(), "archival_memory_insert", json!({"text": text})).await;
    assert!(out.text.starts_with(&format!("Already stored: passage {stale} ")), "{}", out.text);
    assert_eq!(archival_ids(&host, query).await.first(), Some(&stale.to_string()), "written again: offered");
}

/// A passage nothing used for longer than `--expire-after-days` (90) is left out of searches, listed by
/// `memory expired`, and back in searches once `memory restore` keeps it; one used lately stays.
#[tokio::test]
async fn an_unused_old_passage_expires_and_a_restore_brings_it_back() {
    let db = tempfile::tempdir().unwrap();
    let stale = old_passage(db.path(), "The staging database is rebuilt every Monday at 06:00 UTC", 120).await;
    let recent = old_passage(db.path(), "The staging cache is flushed every Friday evening", 30).await;
    let host = host(db.path(), config("ann", "proj", None, None)).await;
    let found = archival_ids(&host, "when is the staging database rebuilt").await;
    assert!(!found.contains(&stale.to_string()), "expired: {found:?}");
    assert!(found.contains(&recent.to_string()), "written 30 days ago: {found:?}");

    let (code, listed, stderr) = memory_cli(db.path(), &["expired"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(listed.lines().count(), 1, "{listed}");
    assert!(listed.starts_with(&format!("archival      {stale}  ")) && listed.contains("never used"), "{listed}");
    assert!(stderr.contains("memory restore"), "{stderr}");
    let (code, _, stderr) = memory_cli(db.path(), &["expired", "--expire-after-days", "0"]);
    assert_eq!(code, 0);
    assert!(stderr.contains("nothing expires"), "{stderr}");

    let (code, out, stderr) = memory_cli(db.path(), &["restore", &stale.to_string()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(out.starts_with(&format!("restored {stale}: searches return it again")), "{out}");
    assert!(archival_ids(&host, "when is the staging database rebuilt").await.contains(&stale.to_string()));
    let (_, listed, _) = memory_cli(db.path(), &["expired"]);
    assert_eq!(listed, "", "restored: nothing expired");
    // one that had not expired is kept, and said so
    let (code, out, stderr) = memory_cli(db.path(), &["restore", &recent.to_string()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(out.starts_with(&format!("kept {recent}: it had not expired; it now expires after 90 days")), "{out}");
    // an id no memory has, or another actor's passage, restores nothing
    let unknown = uuid::Uuid::new_v4();
    let (code, _, stderr) = memory_cli(db.path(), &["restore", &unknown.to_string()]);
    assert_eq!(code, 1);
    assert!(stderr.contains(&format!("no memory with id {unknown}")) && stderr.contains("nothing was restored"));
    let bobs = old_passage_of(db.path(), "bob", "proj", "Bob's staging notes", 120).await;
    let (code, _, stderr) = memory_cli(db.path(), &["restore", &bobs.to_string()]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no fix or archival passage of actor `ann`") && stderr.contains("actor `bob`"), "{stderr}");
    // nor do a conversation item, which never expires, and an id no memory has: each says so
    let transcript = crate::support::repo().join("tests/fixtures/transcripts/claude-code.jsonl");
    let imported = std::process::Command::new(BIN)
        .args(["sessions", "import"])
        .arg(&transcript)
        .arg("--db")
        .arg(db.path())
        .args(["--actor", "ann"])
        .output()
        .unwrap();
    assert!(imported.status.success(), "{}", String::from_utf8_lossy(&imported.stderr));
    let (_, listed, _) = memory_cli(db.path(), &["list", "--json"]);
    let rows: Vec<serde_json::Value> = listed.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let item = rows.iter().find(|r| r["table"] == "session_items").unwrap_or_else(|| panic!("{listed}"));
    let block = format!("{}#1", "ab".repeat(16));
    let (code, _, stderr) = memory_cli(db.path(), &["restore", item["id"].as_str().unwrap(), &block]);
    assert_eq!(code, 1);
    assert!(stderr.contains("is in conversation memory: only fixes and archival passages expire"), "{stderr}");
    assert!(stderr.contains(&format!("no memory with id {block}")), "{stderr}");
    // an actor with no passages is told which actors the store holds
    let out = std::process::Command::new(BIN)
        .args(["memory", "expired", "--actor", "nobody", "--db"])
        .arg(db.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("actor `nobody` has no archival passages") && stderr.contains("ann"), "{stderr}");
}

/// A fix expires only when its lines are gone from the code and it went unused, checked in a git work
/// tree: with its file gone, or its line reverted, an old unused fix is left out; in place it is found
/// however old it is; gone again right after that use, it is found.
#[tokio::test]
async fn an_old_fix_expires_only_once_its_lines_are_gone_from_the_code() {
    use astra_mcp::store::FixStore;
    let (db, ws) = (tempfile::tempdir().unwrap(), crate::gates::committed_shell_workspace());
    let host = host(db.path(), config("ann", "shellproj", Some(ws.path()), Some(SHELL_TESTS))).await;
    let id: uuid::Uuid = store_a_fix(&host, ws.path()).await.memory_id.parse().unwrap();
    // the fix as stored 200 days ago
    let store = astra_mcp::store::lance::LanceStore::open(db.path().to_str().unwrap()).await.unwrap();
    let mut fix = store.get_fix("ann", id).await.unwrap().unwrap();
    let long_ago = chrono::Utc::now() - chrono::Duration::days(200);
    (fix.created_at, fix.updated_at) = (long_ago, long_ago);
    fix.receipt.as_mut().unwrap().finished_at = long_ago;
    let vector = crate::support::embedder().embed_documents(vec![fix.embedded_text.clone()]).await.unwrap().remove(0);
    store.upsert_fix(&fix, &vector).await.unwrap();
    let app = ws.path().join("app.txt");

    // its file gone and nothing used it for 200 days: expired
    std::fs::rename(&app, ws.path().join("moved.txt")).unwrap();
    let (found, _) = search(&host, &GateState::random(), "app.txt says broken").await;
    assert!(found.matches.is_empty(), "{:?}", found.matches);
    // back, but with the line it replaced (reverted): expired as well
    std::fs::remove_file(ws.path().join("moved.txt")).unwrap();
    std::fs::write(&app, "broken\n").unwrap();
    let (found, _) = search(&host, &GateState::random(), "app.txt says broken").await;
    assert!(found.matches.is_empty(), "reverted and unused: {:?}", found.matches);
    // in place, however old: found (and so used now)
    std::fs::write(&app, "fixed\n").unwrap();
    let (found, _) = search(&host, &GateState::random(), "app.txt says broken").await;
    assert_eq!(found.matches.len(), 1, "in place: an old fix still holds");
    assert_eq!(
        found.matches[0].code.state,
        astra_mcp::memory::revalidate::CodeState::InPlace,
        "{:?}",
        found.matches[0].code
    );
    // gone again, but used a moment ago: not expired
    std::fs::remove_file(&app).unwrap();
    let (found, _) = search(&host, &GateState::random(), "app.txt says broken").await;
    assert_eq!(found.matches.len(), 1, "used lately");
    assert!(found.matches[0].code.why.contains("gone"), "{:?}", found.matches[0].code);
}
