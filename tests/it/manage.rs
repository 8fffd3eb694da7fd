//! The operator commands through the real binary: transcript import (three formats, idempotent), the
//! Claude Code hook, `memory list|show|rm|export|import|stats|optimize|reindex`, and `core history|restore`.

use std::path::Path;

use assert_cmd::Command;

use crate::support::repo;

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

/// The binary with a store, an actor and a project; logs quiet.
fn astra(db: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env("ASTRA_DB", db).env("ASTRA_ACTOR", "ann").env("ASTRA_PROJECT", "datekit").env("ASTRA_LOG", "warn");
    cmd
}

fn stdout(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{:?} failed: {}", cmd, String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn fixture(name: &str) -> std::path::PathBuf {
    repo().join("tests/fixtures/transcripts").join(name)
}

/// `conversation_search` through the library, as the server runs it.
async fn search(db: &Path, query: &str) -> Vec<(String, String, String)> {
    use astra_mcp::memory::{ConversationMemory, ConversationSearch, Fusion};
    let store = astra_mcp::store::lance::LanceStore::open(db.to_str().unwrap()).await.unwrap();
    let memory =
        ConversationMemory::new(std::sync::Arc::new(store), crate::support::embedder(), Fusion::conversation());
    let hits = memory
        .search("ann", &ConversationSearch { query: query.into(), top_k: 5, ..Default::default() })
        .await
        .unwrap();
    hits.into_iter().map(|h| (h.row.source, h.row.role.as_str().to_string(), h.row.text)).collect()
}

/// `memory import` of `lines` (written to `file`) into the store at `db`, which must refuse it (exit
/// code 1); its stderr.
fn refused_import(db: &Path, file: &Path, lines: &[String]) -> String {
    std::fs::write(file, lines.join("\n")).unwrap();
    let out = astra(db).args(["memory", "import"]).arg(file).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8(out.stderr).unwrap()
}

/// Makes `calls` (tool name, arguments) as actor `ann` on project `datekit` in the store at `db`, each
/// answered without `isError`, and waits until the calls are recorded.
async fn as_ann(db: &Path, calls: &[(&str, serde_json::Value)]) {
    let host = crate::support::host(db, crate::support::config("ann", "datekit", None, None)).await;
    let session = astra_mcp::memory::GateState::new("s");
    for (tool, arguments) in calls {
        let result = host.call(&session, tool, crate::support::args(arguments.clone())).await.unwrap();
        assert!(!result.is_error, "{tool}: {}", result.text);
    }
    host.flush().await;
}

#[tokio::test]
async fn sessions_import_reads_three_formats_once_and_makes_them_searchable() {
    let db = tempfile::tempdir().unwrap();
    let files = ["claude-code.jsonl", "codex.jsonl", "responses.jsonl"].map(fixture);
    let first = stdout(astra(db.path()).args(["sessions", "import"]).args(&files));
    assert!(first.contains("claude-code session 5c0f3e2a-8b7d-4e1f-9a6c-2d4b8e7f1a93:"), "{first}");
    assert!(first.contains(": codex session "), "{first}");
    assert!(first.contains("responses session responses:"), "{first}");
    assert!(!first.contains(" 0 added"), "every file adds items: {first}");
    let again = stdout(astra(db.path()).args(["sessions", "import"]).args(&files));
    for line in again.lines() {
        assert!(line.contains(" 0 added"), "re-import adds nothing: {line}");
    }
    let hits = search(db.path(), "parses_iso_dates test failing").await;
    assert_eq!(hits[0].0, "claude-code", "{hits:?}");
    let unknown = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(unknown.path(), "hello\nworld\n").unwrap();
    let out = astra(db.path()).args(["sessions", "import"]).arg(unknown.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("claude-code"), "lists the supported formats");
}

#[tokio::test]
async fn claude_code_hook_imports_only_what_is_new_and_redacts_secrets() {
    let db = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let transcript = dir.path().join("session.jsonl");
    std::fs::copy(fixture("claude-code.jsonl"), &transcript).unwrap();
    let hook_input = serde_json::json!({
        "session_id": "5c0f3e2a-8b7d-4e1f-9a6c-2d4b8e7f1a93",
        "transcript_path": transcript,
        "cwd": "/home/dev/datekit",
        "hook_event_name": "Stop",
        "stop_hook_active": false
    })
    .to_string();
    let run = |input: &str| {
        let out = astra(db.path())
            .env_remove("ASTRA_PROJECT")
            .args(["hook", "claude-code"])
            .write_stdin(input)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.stdout.is_empty(), "a Stop hook's stdout is read by Claude Code; we print nothing there");
        String::from_utf8(out.stderr).unwrap()
    };
    let first = run(&hook_input);
    assert!(!first.contains(": 0 new"), "{first}");
    // the session goes on: one more user line with a secret
    let line = serde_json::json!({
        "type": "user", "uuid": "9f00aa00-0000-4000-8000-000000000001", "parentUuid": null,
        "sessionId": "5c0f3e2a-8b7d-4e1f-9a6c-2d4b8e7f1a93", "timestamp": "2025-11-03T10:00:00.000Z",
        "isSidechain": false,
        "message": {"role": "user", "content": "deploy with OPENAI_API_KEY=sk-proj-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA to the zebra cluster"}
    });
    let mut body = std::fs::read_to_string(&transcript).unwrap();
    body.push_str(&format!("{line}\n"));
    std::fs::write(&transcript, body).unwrap();
    let second = run(&hook_input);
    assert!(second.contains(": 1 new conversation items"), "{second}");
    assert!(run(&hook_input).contains(": 0 new"), "nothing new the third time");
    let hits = search(db.path(), "zebra cluster deploy").await;
    assert!(hits[0].2.contains("zebra cluster") && !hits[0].2.contains("sk-proj-AAAA"), "{hits:?}");
    assert!(hits[0].2.contains("[REDACTED"), "{hits:?}");
    let bad = astra(db.path()).args(["hook", "claude-code"]).write_stdin("not json").output().unwrap();
    assert_eq!(bad.status.code(), Some(1), "never 2: exit 2 would block Claude Code from stopping");
}

#[tokio::test]
async fn export_import_round_trips_every_table_and_rm_deletes() {
    let db = tempfile::tempdir().unwrap();
    stdout(astra(db.path()).args(["sessions", "import"]).arg(fixture("responses.jsonl")));
    stdout(astra(db.path()).args(["smoke", "store"]));
    // a core block and an archival passage through the library (as the tools write them)
    {
        use astra_mcp::memory::GateState;
        let host = crate::support::host(db.path(), crate::support::config("ann", "datekit", None, None)).await;
        let s = GateState::new("s");
        let a = serde_json::json!({"section": "human", "text": "Ann prefers rebase over merge."});
        assert!(!host.call(&s, "core_memory_append", crate::support::args(a)).await.unwrap().is_error);
        let p = serde_json::json!({"text": "Staging runs on Kubernetes 1.31.", "tags": ["infra"]});
        assert!(!host.call(&s, "archival_memory_insert", crate::support::args(p)).await.unwrap().is_error);
        host.flush().await;
    }
    let export = db.path().join("../export.jsonl");
    stdout(astra(db.path()).args(["memory", "export", "--out"]).arg(&export));
    let text = std::fs::read_to_string(&export).unwrap();
    let tables: std::collections::BTreeSet<String> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["table"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tables.into_iter().collect::<Vec<_>>(), ["archival", "core_blocks", "fixes", "session_items"]);

    let copy = tempfile::tempdir().unwrap();
    let imported = stdout(astra(copy.path()).args(["memory", "import"]).arg(&export));
    assert!(!imported.contains("re-embedded"), "{imported}");
    let export2 = copy.path().join("../export2.jsonl");
    stdout(astra(copy.path()).args(["memory", "export", "--out"]).arg(&export2));
    let rows = |t: &str| {
        let mut rows: Vec<String> = t.lines().skip(1).map(str::to_string).collect();
        rows.sort();
        rows
    };
    let text2 = std::fs::read_to_string(&export2).unwrap();
    assert_eq!(rows(&text), rows(&text2), "ids, times, texts and vectors round-trip exactly");
    // importing again changes nothing
    stdout(astra(copy.path()).args(["memory", "import"]).arg(&export));
    let export3 = copy.path().join("../export3.jsonl");
    stdout(astra(copy.path()).args(["memory", "export", "--out"]).arg(&export3));
    assert_eq!(rows(&text), rows(&std::fs::read_to_string(&export3).unwrap()));

    // an export made with another model is re-embedded on import
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let mut header: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    header["embedding_model"] = "some-other-model".into();
    lines[0] = header.to_string();
    let other = db.path().join("../other.jsonl");
    std::fs::write(&other, lines.join("\n")).unwrap();
    let fresh = tempfile::tempdir().unwrap();
    assert!(stdout(astra(fresh.path()).args(["memory", "import"]).arg(&other)).contains("re-embedded"));
    // an export of an earlier version (1: no distill runs) imports as it is
    let mut v1 = lines.clone();
    let mut header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    header["astra_mcp_export"] = 1.into();
    v1[0] = header.to_string();
    let v1_file = db.path().join("../v1.jsonl");
    std::fs::write(&v1_file, v1.join("\n")).unwrap();
    let from_v1 = tempfile::tempdir().unwrap();
    let imported = astra(from_v1.path()).args(["memory", "import"]).arg(&v1_file).output().unwrap();
    let said = String::from_utf8_lossy(&imported.stderr);
    assert!(imported.status.success(), "{said}");
    assert!(said.contains("older than usage records: 2 fixes and passages count as used now"), "{said}");
    let export_v1 = db.path().join("../export-v1.jsonl");
    stdout(astra(from_v1.path()).args(["memory", "export", "--out"]).arg(&export_v1));
    // its fixes and passages count as kept at the import (an old export carries no uses): one `kept` use each
    let (uses, others): (Vec<String>, Vec<String>) = rows(&std::fs::read_to_string(&export_v1).unwrap())
        .into_iter()
        .partition(|l| l.starts_with("{\"table\":\"uses\""));
    assert_eq!(rows(&text), others);
    let kept: Vec<serde_json::Value> = uses.iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(kept.len(), 2, "the fix and the passage: {uses:?}");
    assert!(kept.iter().all(|u| u["row"]["event"] == "kept" && u["row"]["actor_id"] == "ann"), "{uses:?}");
    let header_only = db.path().join("../header.jsonl");
    // the header of the other model's export: with no rows there is nothing to re-embed
    std::fs::write(&header_only, format!("{}\n", lines[0])).unwrap();
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(stdout(astra(empty.path()).args(["memory", "import"]).arg(&header_only)), "imported no rows\n");
    // an export of a newer format than this build reads is refused before any store is made; so is an
    // empty file
    let files = tempfile::tempdir().unwrap();
    for (field, value) in [("astra_mcp_export", serde_json::json!(4)), ("format_version", serde_json::json!("2"))] {
        let mut newer: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        newer[field] = value.clone();
        let newer_file = files.path().join("newer.jsonl");
        let nowhere = files.path().join("no-store");
        // a blank line first: the header is the first non-blank line, and the message names its number
        let err = refused_import(&nowhere, &newer_file, &["".to_string(), newer.to_string(), lines[1].clone()]);
        assert!(
            err.contains(&format!("{}: line 2: this export is version", newer_file.display()))
                && err.contains(
                    "which this astra-mcp (export version 3, store format 1) cannot read; nothing was imported"
                ),
            "{err}"
        );
        assert!(!nowhere.exists(), "no store was made for a refused file");
    }
    // version 0 does not exist; a hand-edited archival row over an insert's limits is refused, naming its
    // line, before any store is made
    let mut zero: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
    zero["astra_mcp_export"] = 0.into();
    let zero_file = files.path().join("zero.jsonl");
    let nowhere = files.path().join("no-store");
    let err = refused_import(&nowhere, &zero_file, &[zero.to_string(), lines[1].clone()]);
    assert!(err.contains("line 1: export version 0 does not exist"), "{err}");
    let table = |l: &String| serde_json::from_str::<serde_json::Value>(l).unwrap()["table"].clone();
    let at = lines.iter().skip(1).position(|l| table(l) == "archival").unwrap() + 1;
    let mut row: serde_json::Value = serde_json::from_str(&lines[at]).unwrap();
    row["row"]["tags"] = (0..11).map(|i| format!("t{i}")).collect::<Vec<_>>().into();
    let mut edited = lines.clone();
    edited[at] = row.to_string();
    let edited_file = files.path().join("edited.jsonl");
    let err = refused_import(&nowhere, &edited_file, &edited);
    let expected = format!(
        "{} line {}: `tags` has 11 entries, at most 10 are allowed; nothing was imported",
        edited_file.display(),
        at + 1
    );
    assert!(err.contains(&expected), "{err}");
    assert!(!nowhere.exists(), "no store was made for a refused file");
    // a row that only the store finds unfit (a time that is no time): the new store it was opened for
    // is removed again
    let mut row: serde_json::Value = serde_json::from_str(&lines[at]).unwrap();
    row["row"]["created_at"] = "yesterday".into();
    let mut edited = lines.clone();
    edited[at] = row.to_string();
    let err = refused_import(&nowhere, &edited_file, &edited);
    assert!(err.contains(&format!("line {}", at + 1)), "{err}");
    assert!(!nowhere.exists(), "the store opened for a failed import is removed");
    let deep = files.path().join("p/q/db");
    refused_import(&deep, &edited_file, &edited);
    assert!(!files.path().join("p").exists(), "so are the directories made for it");
    let user_dir = files.path().join("user-dir");
    std::fs::create_dir(&user_dir).unwrap();
    std::fs::write(user_dir.join("notes.txt"), "keep\n").unwrap();
    refused_import(&user_dir, &edited_file, &edited);
    let left: Vec<_> = std::fs::read_dir(&user_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["notes.txt"], "a directory that held no store holds what it held");
    // a passage whose text was edited by hand is embedded again from its new text
    let new_text = "Production runs on Nomad 1.9, not on Kubernetes.";
    let mut row: serde_json::Value = serde_json::from_str(&lines[at]).unwrap();
    let old_vector = row["row"]["vector"].clone();
    row["row"]["text"] = new_text.into();
    let mut edited = lines.clone();
    edited[at] = row.to_string();
    std::fs::write(&edited_file, edited.join("\n")).unwrap();
    let rewritten = tempfile::tempdir().unwrap();
    stdout(astra(rewritten.path()).args(["memory", "import"]).arg(&edited_file));
    let exported = stdout(astra(rewritten.path()).args(["memory", "export"]));
    let stored = exported
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|l| l["row"]["id"] == row["row"]["id"])
        .unwrap();
    assert_eq!(stored["row"]["embedded_text"], new_text);
    assert_ne!(stored["row"]["vector"], old_vector);
    let vector: Vec<f32> = serde_json::from_value(stored["row"]["vector"].clone()).unwrap();
    let expected = crate::support::embedder().embed_documents(vec![new_text.to_string()]).await.unwrap();
    let cosine: f32 = vector.iter().zip(&expected[0]).map(|(a, b)| a * b).sum();
    assert!(cosine > 0.999, "the stored vector is the new text's: cosine {cosine}");
    // a block's history is not rewritten: another value for a stored version, or a version under
    // another version's id, is refused and nothing is written
    let block = lines.iter().skip(1).position(|l| table(l) == "core_blocks").unwrap() + 1;
    for (field, value, refusal) in [
        (
            "value",
            serde_json::json!("Ann prefers merge commits."),
            "this store already holds version 1 of core block `human`",
        ),
        ("version", serde_json::json!(7), "is not version 7 of block `human`"),
    ] {
        let mut row: serde_json::Value = serde_json::from_str(&lines[block]).unwrap();
        row["row"][field] = value;
        let mut edited = lines.clone();
        edited[block] = row.to_string();
        std::fs::write(&edited_file, edited.join("\n")).unwrap();
        let out = astra(copy.path()).args(["memory", "import"]).arg(&edited_file).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{field}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&format!("line {}: ", block + 1)) && stderr.contains(refusal), "{field}: {stderr}");
    }
    let shown = stdout(astra(copy.path()).args(["core", "show", "human"]));
    assert!(shown.contains("Ann prefers rebase over merge.") && !shown.contains("merge commits"), "{shown}");
    let empty_file = files.path().join("empty.jsonl");
    std::fs::write(&empty_file, "\n\n").unwrap();
    let out = astra(&files.path().join("no-store")).args(["memory", "import"]).arg(&empty_file).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        format!(
            "astra-mcp: {}: the export is empty: give a file written by `astra-mcp memory export`",
            empty_file.display()
        )
    );
    let hits = search(fresh.path(), "what tools does the responses fixture mention").await;
    assert!(!hits.is_empty(), "re-embedded items are searchable");

    // list, show, rm
    let listed = stdout(astra(db.path()).args(["memory", "list", "--table", "archival"]));
    let id = listed.split_whitespace().nth(1).unwrap().to_string();
    let shown = stdout(astra(db.path()).args(["memory", "show", &id]));
    assert!(shown.contains("Kubernetes 1.31") && shown.contains("\"[f32; 384]\""), "{shown}");
    // a listing cut at --limit says so, per tier; one that is not cut says nothing
    let cut = astra(db.path()).args(["memory", "list", "--limit", "1"]).output().unwrap();
    assert!(cut.status.success());
    let (listed, said) = (String::from_utf8_lossy(&cut.stdout), String::from_utf8_lossy(&cut.stderr));
    assert_eq!(listed.lines().filter(|l| l.starts_with("conversation")).count(), 1, "{listed}");
    assert_eq!(
        said.trim(),
        "astra-mcp: conversation holds more: the newest 1 shown; raise --limit to see more",
        "one passage, one fix, one core block version, several conversation items"
    );
    let whole = astra(db.path()).args(["memory", "list", "--table", "archival", "--limit", "1"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&whole.stderr), "", "the only passage is shown");
    let typo = astra(db.path()).args(["memory", "list", "--table", "archval"]).output().unwrap();
    assert_eq!(typo.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&typo.stderr).trim(),
        "astra-mcp: no memory tier `archval`: choose fixes, archival, conversation or core"
    );
    let rm = astra(db.path()).args(["memory", "rm", &id]).output().unwrap();
    assert!(rm.status.success());
    assert_eq!(String::from_utf8_lossy(&rm.stdout).trim(), format!("deleted {id} from archival memory"));
    assert!(
        String::from_utf8_lossy(&rm.stderr)
            .contains("its text stays in the store's older versions until `astra-mcp memory optimize`"),
        "{}",
        String::from_utf8_lossy(&rm.stderr)
    );
    let gone = astra(db.path()).args(["memory", "show", &id]).output().unwrap();
    assert_eq!(gone.status.code(), Some(1));
    let other_actor = astra(db.path())
        .env("ASTRA_ACTOR", "bob")
        .args(["memory", "rm"])
        .arg(
            text.lines()
                .nth(1)
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["row"]["id"].as_str().unwrap().to_string()
                })
                .unwrap(),
        )
        .output()
        .unwrap();
    assert_eq!(other_actor.status.code(), Some(1), "one actor cannot delete another's memory");
}

/// Every kind of row of a hand-edited export meets the limits of its way in (a fix those of
/// `store_fix_memory`, a conversation item the stored length of one) or nothing is imported; an
/// imported core block over this configuration's limit, and an `--actor` that does not re-own the
/// file's rows, are told on stderr.
#[tokio::test]
async fn import_checks_every_kind_of_row_and_notes_what_it_does_not_change() {
    let db = tempfile::tempdir().unwrap();
    stdout(astra(db.path()).args(["sessions", "import"]).arg(fixture("responses.jsonl")));
    stdout(astra(db.path()).args(["smoke", "store"]));
    let a = serde_json::json!({"section": "human", "text": "Ann prefers rebase over merge, and short commits."});
    as_ann(db.path(), &[("core_memory_append", a)]).await;
    let text = stdout(astra(db.path()).args(["memory", "export"]));
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    let at = |table: &str| {
        lines.iter().position(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["table"] == table).unwrap()
    };
    let files = tempfile::tempdir().unwrap();
    let nowhere = files.path().join("no-store");
    for (table, field, value, refusal) in [
        (
            "fixes",
            "fix_description",
            serde_json::json!("f".repeat(4_001)),
            "`fix_description` has 4001 characters, the limit is 4000",
        ),
        (
            "fixes",
            "file_paths",
            serde_json::json!(vec!["src/a.rs"; 51]),
            "`file_paths` has 51 entries, a fix lists at most 50",
        ),
        (
            "session_items",
            "text",
            serde_json::json!("s".repeat(20_002)),
            "`text` has 20002 characters, a conversation item keeps at most 20000 (and the `…` that marks a cut)",
        ),
    ] {
        let line = at(table);
        let mut row: serde_json::Value = serde_json::from_str(&lines[line]).unwrap();
        row["row"][field] = value;
        let mut edited = lines.clone();
        edited[line] = row.to_string();
        let file = files.path().join("edited.jsonl");
        let stderr = refused_import(&nowhere, &file, &edited);
        let expected = format!("{} line {}: {refusal}", file.display(), line + 1);
        assert!(stderr.contains(&expected) && stderr.contains("nothing was imported"), "{table}.{field}: {stderr}");
        assert!(!nowhere.exists(), "no store was made for a refused file");
    }
    // two rows on one line: the file's fault, named by its line and column
    let line = at("fixes");
    let mut edited = lines.clone();
    edited[line] = format!("{}{}", lines[line], lines[line]);
    let file = files.path().join("joined.jsonl");
    let err = refused_import(&nowhere, &file, &edited);
    let expected = format!(
        "astra-mcp: {}: line {}: not an export row (trailing characters at column {}); give one",
        file.display(),
        line + 1,
        lines[line].chars().count() + 1
    );
    assert!(err.starts_with(&expected), "{err}");
    assert!(!nowhere.exists(), "no store was made for a refused file");

    let file = files.path().join("export.jsonl");
    std::fs::write(&file, &text).unwrap();
    let small = tempfile::tempdir().unwrap();
    let out = astra(small.path()).args(["memory", "import", "--core-blocks", "human=20"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("note: core block `human` of actor `ann` has 49 characters, over its limit of 20 here")
            && stderr.contains("(--core-blocks human=49)"),
        "{stderr}"
    );
    assert!(!stderr.contains("rows keep the actors"), "the file's actor is the command's: {stderr}");
    // the note reads the block as the store holds it after the import: shrunk since the export, it is
    // within the limit, and nothing is said
    {
        use astra_mcp::memory::GateState;
        let host = crate::support::host(small.path(), crate::support::config("ann", "datekit", None, None)).await;
        let r = serde_json::json!({"section": "human", "old_text": ", and short commits", "new_text": ""});
        assert!(
            !host.call(&GateState::new("s"), "core_memory_replace", crate::support::args(r)).await.unwrap().is_error
        );
        let a = serde_json::json!({"section": "human", "text": "Ann uses vim."});
        assert!(
            !host.call(&GateState::new("s"), "core_memory_append", crate::support::args(a)).await.unwrap().is_error
        );
        host.flush().await;
    }
    let out = astra(small.path()).args(["memory", "import", "--core-blocks", "human=45"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("core block"), "the stored block has 44 characters, the file's 49: {stderr}");
    let other = tempfile::tempdir().unwrap();
    let out = astra(other.path()).env("ASTRA_ACTOR", "eve").args(["memory", "import"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "note: rows keep the actors written in the file (ann), not --actor (ASTRA_ACTOR) `eve`: pass --actor ann"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("core block"), "within the default limits: {stderr}");
    let eves = astra(other.path()).env("ASTRA_ACTOR", "eve").args(["memory", "list"]).output().unwrap();
    assert!(String::from_utf8_lossy(&eves.stderr).contains("no memories of actor `eve`"), "{eves:?}");
    assert!(!stdout(astra(other.path()).args(["memory", "list"])).is_empty(), "the rows are ann's");
}

/// An export that fails half-way (a data file of the conversation table is gone, after the archival
/// rows were written) exits 1 and leaves the older export at `--out` as it was, and no temporary file.
#[tokio::test]
async fn a_failed_export_leaves_the_older_export_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let p = serde_json::json!({"text": "The deploy key rotates every 30 days.", "tags": []});
    as_ann(&db, &[("archival_memory_insert", p)]).await;
    stdout(astra(&db).env("ASTRA_ACTOR", "ann").args(["sessions", "import"]).arg(fixture("responses.jsonl")));
    let out = dir.path().join("backup.jsonl");
    stdout(astra(&db).args(["memory", "export", "--out"]).arg(&out));
    let whole = std::fs::read_to_string(&out).unwrap();
    assert!(whole.contains("\"archival\"") && whole.contains("\"session_items\""), "{whole}");

    for file in std::fs::read_dir(db.join("session_items.lance/data")).unwrap() {
        std::fs::remove_file(file.unwrap().path()).unwrap();
    }
    let failed = astra(&db).args(["memory", "export", "--out"]).arg(&out).output().unwrap();
    assert_eq!(failed.status.code(), Some(1), "{}", String::from_utf8_lossy(&failed.stderr));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), whole, "the older export is left as it was");
    let mut left: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["backup.jsonl", "db"], "no partial file beside it");
}

#[tokio::test]
async fn import_never_moves_a_memory_to_another_actor() {
    let db = tempfile::tempdir().unwrap();
    let p = serde_json::json!({"text": "Ann's deploy key rotates every 30 days.", "tags": []});
    as_ann(db.path(), &[("archival_memory_insert", p)]).await;
    let export = db.path().join("../ann.jsonl");
    stdout(astra(db.path()).args(["memory", "export", "--out"]).arg(&export));
    let text = std::fs::read_to_string(&export).unwrap();
    let mut lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let at = lines.iter().position(|l| l["table"] == "archival").unwrap();
    let id = lines[at]["row"]["id"].as_str().unwrap().to_string();
    // the same row handed to bob, and a new row of bob's after it
    lines[at]["row"]["actor_id"] = "bob".into();
    let mut new_row = lines[at].clone();
    let new_id = uuid::Uuid::new_v4().to_string();
    new_row["row"]["id"] = new_id.clone().into();
    new_row["row"]["text"] = "Bob's own note.".into();
    lines.push(new_row);
    let edited = db.path().join("../edited.jsonl");
    std::fs::write(&edited, lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n")).unwrap();

    let out = astra(db.path()).args(["memory", "import"]).arg(&edited).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("line {}: archival row {id} belongs to actor `ann`", at + 1)) && err.contains("`bob`"),
        "{err}"
    );
    let shown = stdout(astra(db.path()).args(["memory", "show", &id]));
    assert!(shown.contains("\"actor_id\": \"ann\"") && shown.contains("deploy key"), "still ann's: {shown}");
    let bobs = astra(db.path()).env("ASTRA_ACTOR", "bob").args(["memory", "show", &new_id]).output().unwrap();
    assert_eq!(bobs.status.code(), Some(1), "nothing of the refused file was imported");

    // nor can one file give a new id to two actors, or hold a row that does not fit before a valid one
    let header = &lines[0];
    let mut twice = new_row_for("carol", &lines[at]);
    let carol_id = twice["row"]["id"].as_str().unwrap().to_string();
    // a conversation item (the insert recorded one) without its actor: a table written after archival
    let item_line = lines.iter().find(|l| l["table"] == "session_items").expect("the call was recorded");
    let mut unfit = new_row_for("dave", item_line);
    unfit["row"].as_object_mut().unwrap().remove("actor_id");
    for (file, want) in [
        (
            vec![header.clone(), twice.clone(), {
                twice["row"]["actor_id"] = "mallory".into();
                twice
            }],
            "both hold archival row",
        ),
        (vec![header.clone(), new_row_for("carol", &lines[at]), unfit], "line 3: the session_items row does not fit"),
    ] {
        let path = db.path().join("../bad.jsonl");
        std::fs::write(&path, file.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n")).unwrap();
        let out = astra(db.path()).args(["memory", "import"]).arg(&path).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{want}");
        assert!(String::from_utf8_lossy(&out.stderr).contains(want), "{}", String::from_utf8_lossy(&out.stderr));
        let listed = stdout(astra(db.path()).args(["memory", "list", "--all-actors"]));
        assert!(!listed.contains(&carol_id) && !listed.contains("carol"), "nothing written: {listed}");
    }

    // a `forgotten` row deletes only its own actor's conversation item
    stdout(astra(db.path()).env("ASTRA_ACTOR", "bob").args(["sessions", "import"]).arg(fixture("responses.jsonl")));
    let items = stdout(astra(db.path()).env("ASTRA_ACTOR", "bob").args(["memory", "list", "--table", "conversation"]));
    assert!(items.lines().all(|l| l.starts_with("conversation ")), "the tier, not the table `session_items`: {items}");
    let item = items.split_whitespace().nth(1).unwrap().to_string();
    let forget = serde_json::json!({"table": "forgotten", "row": {"id": item, "actor_id": "ann", "forgotten_at": "2026-12-01T00:00:00Z"}});
    let path = db.path().join("../forget.jsonl");
    std::fs::write(&path, format!("{header}\n{forget}")).unwrap();
    stdout(astra(db.path()).args(["memory", "import"]).arg(&path));
    stdout(astra(db.path()).env("ASTRA_ACTOR", "bob").args(["memory", "show", &item]));
}

#[tokio::test]
async fn import_redacts_secrets_of_a_hand_edited_file_and_re_embeds_only_those_rows() {
    let db = tempfile::tempdir().unwrap();
    stdout(astra(db.path()).args(["smoke", "store"]));
    let insert = |text: &str| ("archival_memory_insert", serde_json::json!({"text": text, "tags": []}));
    as_ann(db.path(), &[insert("Staging runs on Kubernetes 1.31."), insert("The billing service owns invoices.")])
        .await;
    let export = db.path().join("../clean.jsonl");
    stdout(astra(db.path()).args(["memory", "export", "--out"]).arg(&export));
    let mut lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&export).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let archival: Vec<usize> = (0..lines.len()).filter(|&i| lines[i]["table"] == "archival").collect();
    assert_eq!(archival.len(), 2);
    let (edited, kept) = (archival[0], archival[1]);
    // a secret written into one row by hand, its vector left as it was; its tags in any case and order
    let secret = "Staging DB is postgres://app:hunter2-secret-pw@db.internal/app, token ghp_abcdefghijklmnopqrstuvwxyz0123456789";
    let row = &mut lines[edited]["row"];
    let stale_vector = row["vector"].clone();
    row["text"] = secret.into();
    row["embedded_text"] = secret.into();
    row["tags"] = serde_json::json!([" Infra ", "DB", "infra", null]);
    let id = row["id"].as_str().unwrap().to_string();
    let kept_row = lines[kept]["row"].clone();
    // a fix whose receipt (a JSON string) and error type hold secrets
    let fix = lines.iter().position(|l| l["table"] == "fixes").expect("the smoke fix");
    let receipt = serde_json::json!({
        "command": "pytest --token=abcdef123456", "exit_code": 0, "summary": "4 passed in 0.05s",
        "duration_ms": 50, "finished_at": "2026-12-01T00:00:00Z", "git_head": null, "workspace_root": "/w",
        "workspace_digest": "ab", "file_hashes": {}
    });
    let fix_id = lines[fix]["row"]["id"].as_str().unwrap().to_string();
    lines[fix]["row"]["receipt"] = receipt.to_string().into();
    lines[fix]["row"]["error_type"] = "AuthError AKIAQWERTYUIOPASDFGH".into();
    lines[fix]["row"]["error_type_key"] = "autherror akiaqwertyuiopasdfgh".into();
    let file = db.path().join("../secret.jsonl");
    std::fs::write(&file, lines.iter().map(|l| l.to_string()).collect::<Vec<_>>().join("\n")).unwrap();

    let fresh = tempfile::tempdir().unwrap();
    let printed = stdout(astra(fresh.path()).args(["memory", "import"]).arg(&file));
    assert!(printed.trim_end().ends_with("; secrets redacted in 2 rows"), "{printed}");
    let out = fresh.path().join("../after.jsonl");
    stdout(astra(fresh.path()).args(["memory", "export", "--out"]).arg(&out));
    let exported: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().skip(1).map(|l| serde_json::from_str(l).unwrap()).collect();
    let after: Vec<serde_json::Value> =
        exported.iter().filter(|l| l["table"] == "archival").map(|l| l["row"].clone()).collect();
    let fix = &exported.iter().find(|l| l["table"] == "fixes" && l["row"]["id"] == fix_id.as_str()).unwrap()["row"];
    assert_eq!(fix["error_type"], "AuthError [REDACTED:aws-key]");
    assert_eq!(fix["error_type_key"], "autherror [redacted:aws-key]", "the filter key follows the error type");
    let stored_receipt: astra_mcp::domain::Receipt =
        serde_json::from_str(fix["receipt"].as_str().unwrap()).expect("the receipt is still a whole receipt");
    assert_eq!(stored_receipt.command, "pytest --token=[REDACTED:secret]");
    assert_eq!((stored_receipt.exit_code, stored_receipt.summary.as_str()), (0, "4 passed in 0.05s"));
    // the store's own export imports again without a secret to redact (redacted text stays as it is)
    let again = tempfile::tempdir().unwrap();
    let printed = stdout(astra(again.path()).args(["memory", "import"]).arg(&out));
    assert!(!printed.contains("redacted"), "{printed}");
    let stored = after.iter().find(|r| r["id"] == id.as_str()).expect("the edited row was imported");
    let clean = "Staging DB is postgres://app:[REDACTED:password]@db.internal/app, token [REDACTED:token]";
    assert_eq!(stored["text"], clean);
    assert_eq!(stored["embedded_text"], clean);
    assert_eq!(stored["tags"], serde_json::json!(["db", "infra"]), "tags normalised as inserts normalise them");
    // its vector is the embedding of the redacted text, not the stale one of the file
    let vector: Vec<f32> = serde_json::from_value(stored["vector"].clone()).unwrap();
    let want = crate::support::embedder().embed_documents(vec![clean.to_string()]).await.unwrap().remove(0);
    let cosine = astra_mcp::embed::cosine(&vector, &want);
    assert!(cosine > 0.999, "re-embedded from the redacted text: cosine {cosine}");
    assert_ne!(stored["vector"], stale_vector);
    // the row without a secret is stored exactly as exported, vector included
    let other = after.iter().find(|r| r["id"] == kept_row["id"]).unwrap();
    assert_eq!(other, &kept_row);
}

/// `line` (an export line of an archival row) as a new row of `actor` with a fresh id.
fn new_row_for(actor: &str, line: &serde_json::Value) -> serde_json::Value {
    let mut row = line.clone();
    row["row"]["id"] = uuid::Uuid::new_v4().to_string().into();
    row["row"]["actor_id"] = actor.into();
    row["row"]["text"] = format!("{actor}'s note").into();
    row
}

#[tokio::test]
async fn optimize_compacts_and_reindex_reopens_a_store_of_another_model() {
    let db = tempfile::tempdir().unwrap();
    {
        use astra_mcp::memory::GateState;
        let host = crate::support::host(db.path(), crate::support::config("ann", "datekit", None, None)).await;
        let s = GateState::new("s");
        for i in 0..12 {
            let p = serde_json::json!({"text": format!("Fact number {i} about the zebra service."), "tags": []});
            assert!(!host.call(&s, "archival_memory_insert", crate::support::args(p)).await.unwrap().is_error);
        }
    }
    let stats = stdout(astra(db.path()).args(["memory", "stats", "--json"]));
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let archival =
        |s: &serde_json::Value| s.as_array().unwrap().iter().find(|t| t["table"] == "archival").unwrap().clone();
    assert_eq!(archival(&stats)["rows"], 12);
    let tables: Vec<&str> = stats.as_array().unwrap().iter().map(|t| t["table"].as_str().unwrap()).collect();
    let every = ["fixes", "archival", "session_items", "core_blocks", "forgotten", "distill_runs", "uses"];
    assert_eq!(tables, every, "stats shows every table, bookkeeping too");
    assert!(archival(&stats)["fragments"].as_u64().unwrap() >= 12, "one fragment per single insert: {stats}");
    let optimized = stdout(astra(db.path()).args(["memory", "optimize", "--prune-older-than", "0"]));
    let line = optimized.lines().find(|l| l.starts_with("archival ")).unwrap_or_else(|| panic!("{optimized}"));
    assert!(line.contains(" rows 12 -> 12, fragments ") && line.contains(" -> 1, versions "), "{optimized}");
    let after: serde_json::Value =
        serde_json::from_str(&stdout(astra(db.path()).args(["memory", "stats", "--json"]))).unwrap();
    assert_eq!(archival(&after)["rows"], 12);
    assert_eq!(archival(&after)["fragments"], 1, "{after}");
    assert!(archival(&after)["versions"].as_u64().unwrap() < archival(&stats)["versions"].as_u64().unwrap(), "{after}");

    // pretend the store was built with another model: it refuses to open and names the fix
    {
        let conn = lancedb::connect(db.path().to_str().unwrap()).execute().await.unwrap();
        let meta = conn.open_table("meta").execute().await.unwrap();
        meta.update().only_if("key = 'embedding_model'").column("value", "'another-model'").execute().await.unwrap();
    }
    let refused = astra(db.path()).args(["memory", "stats"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("astra-mcp memory reindex"), "names the command");
    let reindexed = stdout(astra(db.path()).args(["memory", "reindex"]));
    assert!(reindexed.contains("12 archival"), "{reindexed}");
    stdout(astra(db.path()).args(["memory", "stats"]));
}

/// A forgotten passage's text leaves the store's files at the next `memory optimize` (the versions
/// before it pruned), even where it was the one deleted row of a large fragment, which Lance's default
/// compaction leaves as it is below a tenth of deleted rows.
#[test]
fn memory_optimize_leaves_no_file_holding_a_forgotten_text() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let file = dir.path().join("passages.jsonl");
    let mut lines: Vec<String> = (0..200)
        .map(|i| serde_json::json!({"text": format!("Service {i} keeps its cache on shard {}.", i * 7)}).to_string())
        .collect();
    lines[5] = serde_json::json!({"text": "The vault secret is Qwertzuiopsecret; nobody may know it."}).to_string();
    std::fs::write(&file, lines.join("\n")).unwrap();
    stdout(astra(&db).args(["memory", "ingest"]).arg(&file));
    // every file of the store whose bytes hold the secret, in any case (a full-text index lower-cases)
    let holding = || -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        let mut dirs = vec![db.clone()];
        while let Some(d) = dirs.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if std::fs::read(&path)
                    .unwrap()
                    .to_ascii_lowercase()
                    .windows(16)
                    .any(|w| w == b"qwertzuiopsecret")
                {
                    found.push(path);
                }
            }
        }
        found
    };
    let list = stdout(astra(&db).args(["memory", "list", "--table", "archival", "--limit", "500", "--json"]));
    let secret = list.lines().find(|l| l.contains("Qwertzuiopsecret")).expect("ingested");
    let id = serde_json::from_str::<serde_json::Value>(secret).unwrap()["id"].as_str().unwrap().to_string();
    stdout(astra(&db).args(["memory", "rm", &id]));
    assert!(!holding().is_empty(), "deleted, not yet rewritten: a file still holds it");
    stdout(astra(&db).args(["memory", "optimize", "--prune-older-than", "0"]));
    assert_eq!(holding(), Vec::<std::path::PathBuf>::new(), "no file holds the forgotten text");
    let rows = stdout(astra(&db).args(["memory", "list", "--table", "archival", "--limit", "500", "--json"]));
    assert_eq!(rows.lines().count(), 199);
}

#[test]
fn core_history_and_restore_from_the_cli() {
    let db = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let host = crate::support::host(db.path(), crate::support::config("ann", "datekit", None, None)).await;
        let s = astra_mcp::memory::GateState::new("s");
        for text in ["v1 fact", "v2 fact"] {
            let a = serde_json::json!({"section": "project", "text": text});
            assert!(!host.call(&s, "core_memory_append", crate::support::args(a)).await.unwrap().is_error);
        }
    });
    let history = stdout(astra(db.path()).args(["core", "history", "project"]));
    assert!(
        history.contains("version 1") && history.contains("version 2") && history.contains("    v2 fact"),
        "{history}"
    );
    stdout(astra(db.path()).args(["core", "restore", "project", "1"]));
    let shown = stdout(astra(db.path()).args(["core", "show", "project"]));
    assert!(shown.contains("<project chars=\"7/2000\">\nv1 fact\n</project>"), "{shown}");

    // `memory rm` purges an old version, never the current one: its number would be taken again by
    // the next change, under an editor that showed the block at that number
    let rows = stdout(astra(db.path()).args(["memory", "list", "--table", "core_blocks", "--json"]));
    let id_of = |version: i64| {
        rows.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|r| r["id"].as_str().unwrap().ends_with(&format!("#{version:010}")))
            .unwrap_or_else(|| panic!("no version {version}: {rows}"))["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // the current version is refused; an old one named after it in the same call is still purged
    let current = astra(db.path()).args(["memory", "rm", &id_of(3), &id_of(1)]).output().unwrap();
    assert_eq!(current.status.code(), Some(1));
    let said = String::from_utf8_lossy(&current.stderr);
    assert!(said.contains("its current value: change the block first"), "{said}");
    assert!(String::from_utf8_lossy(&current.stdout).contains(&format!("deleted {} from core memory", id_of(1))));
    let restore = astra(db.path()).args(["core", "restore", "project", "1"]).output().unwrap();
    let said = String::from_utf8_lossy(&restore.stderr);
    assert_eq!(restore.status.code(), Some(1), "{said}");
    assert!(said.contains("has no version 1; its versions are 2, 3"), "{said}");
    stdout(astra(db.path()).args(["core", "restore", "project", "2"]));
    let history = stdout(astra(db.path()).args(["core", "history", "project"]));
    assert!(!history.contains("version 1"), "{history}");
    assert!(history.contains("version 3") && history.contains("version 4"), "no number is taken twice: {history}");
}

#[test]
fn a_bare_relative_db_name_is_a_local_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .current_dir(cwd.path())
        .env("ASTRA_LOG", "warn")
        .args(["smoke", "store", "--db", "db"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(cwd.path().join("db/fixes.lance").is_dir());
    let missing = Command::new(BIN).current_dir(cwd.path()).args(["memory", "stats", "--db", "nope"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no memory store at nope"));
    assert!(!cwd.path().join("nope").exists(), "an inspecting command does not create a store");
    // a --db that names a file says so, whether the command reads or would create the store
    std::fs::write(cwd.path().join("notes.txt"), "not a store").unwrap();
    let transcript = fixture("responses.jsonl");
    let transcript = transcript.to_str().unwrap();
    for command in [&["memory", "stats"][..], &["serve", "--stdio"], &["sessions", "import", transcript]] {
        let out = Command::new(BIN)
            .current_dir(cwd.path())
            .args(command)
            .args(["--db", "notes.txt"])
            .write_stdin("")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command:?}: {said}");
        assert!(said.contains("that is a file: --db (ASTRA_DB) names a store directory"), "{command:?}: {said}");
    }
    let unread = Command::new(BIN)
        .current_dir(cwd.path())
        .args(["memory", "import", "--db", "new", "missing.jsonl"])
        .output()
        .unwrap();
    assert!(!unread.status.success());
    assert!(String::from_utf8_lossy(&unread.stderr).contains("reading missing.jsonl"), "{unread:?}");
    assert!(!cwd.path().join("new").exists(), "an import that cannot read its file creates no store");
}

/// `memory ingest`: a bulk load of JSONL passages, searchable afterwards; a second run adds nothing.
#[test]
fn memory_ingest_bulk_loads_passages_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let file = dir.path().join("passages.jsonl");
    let mut lines: Vec<String> = (0..150)
        .map(|i| {
            serde_json::json!({"text": format!("Service {i} runs on port {} behind the gateway.", 8000 + i)})
                .to_string()
        })
        .collect();
    lines.push(
        serde_json::json!({"text": "The nightly backup job writes to bucket ZEBRA-77.", "tags": ["Ops"]}).to_string(),
    );
    lines.push(lines[0].clone());
    // the same text again, spaced and cased otherwise, with tags: stored once, with both lines' tags
    lines.push(
        serde_json::json!({"text": "  the nightly BACKUP job writes to bucket ZEBRA-77. ", "tags": ["Backup", "ops"]})
            .to_string(),
    );
    std::fs::write(&file, lines.join("\n")).unwrap();
    let out = astra(&db).args(["memory", "ingest", "--project", "infra"]).arg(&file).output().unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        printed.starts_with("ingested 151 passages (0 already stored, 2 lines repeating earlier ones) in "),
        "{printed}"
    );
    let again = astra(&db).args(["memory", "ingest", "--project", "infra"]).arg(&file).output().unwrap();
    assert!(
        String::from_utf8_lossy(&again.stdout)
            .starts_with("ingested 0 passages (151 already stored, 2 lines repeating earlier ones) in "),
        "{again:?}"
    );
    let list = astra(&db).args(["memory", "list", "--table", "archival", "--limit", "500", "--json"]).output().unwrap();
    let rows: Vec<serde_json::Value> =
        String::from_utf8_lossy(&list.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 151);
    let backup = rows.iter().find(|r| r.to_string().contains("ZEBRA-77")).expect("ingested");
    let shown = stdout(astra(&db).args(["memory", "show", backup["id"].as_str().unwrap()]));
    assert!(shown.contains("\"source\": \"ingest\""), "{shown}");
    let shown: serde_json::Value = serde_json::from_str(&shown).expect("memory show prints JSON");
    assert_eq!(shown["row"]["tags"], serde_json::json!(["backup", "ops"]), "tags normalised and joined: {shown}");
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"txt\": \"typo\"}\n").unwrap();
    let refused = astra(&db).args(["memory", "ingest"]).arg(&bad).output().unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("line 1: expected") && stderr.contains("nothing was ingested"), "{stderr}");
}

/// `path` as a `file://` URL (percent-encoded).
fn url_of(path: &Path) -> String {
    url::Url::from_directory_path(path).unwrap().to_string()
}

/// `--lance-io`: a store written through io_uring, in a directory whose name a URL must percent-encode,
/// reads back the same with blocking reads (and through io_uring again), under its own directory name.
#[test]
fn a_store_reads_the_same_through_io_uring_and_blocking_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("my stores #1 100%");
    let file = dir.path().join("passages.jsonl");
    let lines: Vec<String> = (0..20)
        .map(|i| serde_json::json!({"text": format!("Queue {i} drains into topic T-{i} every night.")}).to_string())
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    // run inside the temp dir: a stray directory named after a URL would show up beside the store
    let ingest = |io: &str| {
        astra(&db).current_dir(dir.path()).args(["--lance-io", io, "memory", "ingest"]).arg(&file).output().unwrap()
    };
    match astra_mcp::store::lance::io::uring_allowed() {
        Ok(()) => {
            let out = ingest("uring");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            assert!(String::from_utf8_lossy(&out.stdout).starts_with("ingested 20 passages"), "{out:?}");
        }
        Err(_) => {
            // where the kernel refuses io_uring, forcing it says so; `auto` falls back to blocking reads
            let out = ingest("uring");
            assert!(!out.status.success());
            assert!(String::from_utf8_lossy(&out.stderr).contains("use --lance-io auto or blocking"), "{out:?}");
            assert!(ingest("auto").status.success());
        }
    }
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 2, "the store and the input file, nothing named after a URL: {names:?}");
    assert!(db.join("archival.lance").is_dir(), "{names:?}");
    let list = |io: &str| {
        stdout(
            astra(&db)
                .current_dir(dir.path())
                .env("ASTRA_LANCE_IO", io)
                .args(["memory", "list", "--table", "archival", "--limit", "50", "--json"]),
        )
    };
    let blocking = list("blocking");
    assert_eq!(blocking.lines().count(), 20, "{blocking}");
    assert!(blocking.contains("topic T-17"), "{blocking}");
    assert_eq!(list("auto"), blocking, "both readers read the same rows");
    // a file:// URL is the same directory, read the same way
    let url = url_of(&db);
    let by_url = stdout(
        astra(&db)
            .current_dir(dir.path())
            .args(["memory", "list", "--table", "archival", "--limit", "50", "--json", "--db", &url]),
    );
    assert_eq!(by_url, blocking, "{url}");
    // Lance's own io_uring URL would commit unsafely: refused, saying what to give instead
    let uring_url = url.replacen("file://", "file+uring://", 1);
    let refused = astra(&db).current_dir(dir.path()).args(["memory", "stats", "--db", &uring_url]).output().unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("give the directory's path, and --lance-io uring"));
    // where io_uring cannot be set up (a ring deeper than the kernel allows stands in for a kernel that
    // refuses it): `uring` refuses before creating anything, `auto` reads with blocking reads
    let fresh = dir.path().join("fresh");
    let forced = astra(&fresh)
        .env("LANCE_URING_QUEUE_DEPTH", "100000")
        .args(["--lance-io", "uring", "memory", "ingest"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!forced.status.success());
    let stderr = String::from_utf8_lossy(&forced.stderr);
    assert!(stderr.contains("--lance-io uring: this system does not allow io_uring"), "{stderr}");
    assert!(stderr.contains("use --lance-io auto or blocking") && !stderr.contains("writable directory"), "{stderr}");
    assert!(!fresh.exists(), "nothing created for a store that cannot be opened");
    let fallback = astra(&fresh)
        .env("LANCE_URING_QUEUE_DEPTH", "100000")
        .env("ASTRA_LOG", "info")
        .args(["memory", "ingest"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(fallback.status.success(), "{fallback:?}");
    assert!(String::from_utf8_lossy(&fallback.stderr).contains("the store reads with blocking reads"), "{fallback:?}");
    let bad = astra(&db).args(["--lance-io", "mmap", "memory", "stats"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("[possible values: auto, uring, blocking]"), "{bad:?}");
}

/// `--store-cache-mib` / `ASTRA_STORE_CACHE_MIB`: a store opened with the smallest bound still takes
/// writes and searches; a bound below it is refused before anything runs, saying what to give.
#[test]
fn the_store_cache_bound_is_taken_from_flag_or_env_and_a_too_small_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let file = dir.path().join("notes.jsonl");
    std::fs::write(&file, "{\"text\": \"The gateway retries a 503 twice before it fails over.\"}\n").unwrap();
    let ingest = astra(&db).env("ASTRA_STORE_CACHE_MIB", "16").args(["memory", "ingest"]).arg(&file).output().unwrap();
    assert!(ingest.status.success(), "{ingest:?}");
    let list = astra(&db).args(["--store-cache-mib", "16", "memory", "list", "--table", "archival"]).output().unwrap();
    assert!(String::from_utf8_lossy(&list.stdout).contains("fails over"), "{list:?}");
    for (flag, env, says) in
        [(Some("8"), None, "8 MiB is too little"), (None, Some("lots"), "\"lots\" is not a whole number of MiB")]
    {
        let mut cmd = astra(&db);
        if let Some(v) = flag {
            cmd.args(["--store-cache-mib", v]);
        }
        if let Some(v) = env {
            cmd.env("ASTRA_STORE_CACHE_MIB", v);
        }
        let bad = cmd.args(["memory", "stats"]).output().unwrap();
        assert_eq!(bad.status.code(), Some(2), "{bad:?}");
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert!(stderr.contains(says) && stderr.contains("--store-cache-mib"), "{stderr}");
    }
}

/// `memory ingest` folds what it wrote into the full-text index at its end: past 250 rows a write no
/// longer does, and a passage Lance scores unindexed ranks below an older one with its words in another
/// order (found by a helper: all four ingested twins missed until `memory optimize`).
#[tokio::test]
async fn memory_ingest_leaves_its_passages_indexed_for_the_next_search() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let older = dir.path().join("older.jsonl");
    let mut lines: Vec<String> = (0..300)
        .map(|i| {
            serde_json::json!({"text": format!("Service {i} runs on port {} behind the gateway.", 8000 + i)})
                .to_string()
        })
        .collect();
    lines.push(serde_json::json!({"text": "friday deploy never on"}).to_string());
    std::fs::write(&older, lines.join("\n")).unwrap();
    stdout(astra(&db).args(["memory", "ingest"]).arg(&older));
    let newer = dir.path().join("newer.jsonl");
    std::fs::write(&newer, serde_json::json!({"text": "Never deploy on friday"}).to_string()).unwrap();
    stdout(astra(&db).args(["memory", "ingest"]).arg(&newer));

    let host = crate::support::host(&db, crate::support::config("ann", "datekit", None, None)).await;
    let session = astra_mcp::memory::GateState::new("s");
    let found = host
        .call(
            &session,
            "archival_memory_search",
            crate::support::args(serde_json::json!({"query": "Never deploy on friday", "top_k": 3})),
        )
        .await
        .unwrap();
    let results = found.structured.as_ref().expect("structuredContent")["results"].as_array().unwrap().clone();
    assert_eq!(results[0]["text"], "Never deploy on friday", "{}", found.text);
    assert_eq!(results[1]["text"], "friday deploy never on", "{}", found.text);
}

/// `memory ingest` applies `archival_memory_insert`'s limits before writing anything (a line over them
/// fails the whole file, naming the line), takes `tags: null` as no tags, and reads a file that starts
/// with a UTF-8 byte-order mark.
#[test]
fn memory_ingest_applies_the_insert_tools_limits() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let ok = serde_json::json!({"text": "The VPN config lives in ops/vpn.toml.", "tags": null}).to_string();
    let cases = [
        (serde_json::json!({"text": "x".repeat(8_001)}).to_string(), "8001 characters"),
        (serde_json::json!({"text": "fine", "tags": ["t".repeat(65)]}).to_string(), "65 characters"),
        (
            serde_json::json!({"text": "fine", "tags": (0..11).map(|i| format!("t{i}")).collect::<Vec<_>>()})
                .to_string(),
            "11 entries",
        ),
        (serde_json::json!({"text": "   "}).to_string(), "is empty"),
        (serde_json::json!({"text": "fine", "tags": ["a\nb"]}).to_string(), "line break"),
    ];
    for (bad, expected) in cases {
        let file = dir.path().join("bad.jsonl");
        std::fs::write(&file, format!("{ok}\n{bad}\n")).unwrap();
        let refused = astra(&db).args(["memory", "ingest"]).arg(&file).output().unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{bad} was ingested");
        assert!(stderr.contains("bad.jsonl line 2") && stderr.contains(expected), "{stderr}");
        assert!(stderr.contains("nothing was ingested") && !stderr.contains(".;"), "{stderr}");
    }
    let list = astra(&db).args(["memory", "list", "--table", "archival", "--json"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&list.stdout).lines().count(), 0, "a refused file wrote rows");
    let file = dir.path().join("bom.jsonl");
    std::fs::write(&file, format!("\u{feff}{ok}\n")).unwrap();
    let out = astra(&db).args(["memory", "ingest"]).arg(&file).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("ingested 1 passage ("), "{out:?}");
}

/// Whatever finds nothing for an actor says which actors the store holds (a missing `ASTRA_ACTOR` is
/// the usual cause), `--all-actors` shows whose each row is, a core block row names its block, and
/// `memory show` prints a fix's receipt as JSON, not as an escaped string.
#[test]
fn finding_nothing_for_an_actor_names_the_actors_the_store_holds() {
    let (db, ws) = (tempfile::tempdir().unwrap(), crate::support::shell_workspace());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fix_id = rt.block_on(async {
        let config = crate::support::config("ann", "datekit", Some(ws.path()), Some(crate::support::SHELL_TESTS));
        let host = crate::support::host(db.path(), config).await;
        let s = astra_mcp::memory::GateState::new("s");
        let call = |tool: &'static str, a: serde_json::Value| {
            let (host, s) = (&host, &s);
            async move {
                let out = host.call(s, tool, crate::support::args(a)).await.unwrap();
                assert!(!out.is_error, "{tool}: {}", out.text);
                out
            }
        };
        call("core_memory_append", serde_json::json!({"section": "project", "text": "dates are UTC"})).await;
        call("search_codebase_memory", serde_json::json!({"query": "app.txt says broken"})).await;
        std::fs::write(ws.path().join("app.txt"), "fixed\n").unwrap();
        let passed = call("run_tests", serde_json::json!({})).await;
        let outcome = passed.structured.unwrap()["confirmed_outcome"].as_str().unwrap().to_string();
        let stored = call(
            "store_fix_memory",
            serde_json::json!({"fix_description": "say fixed", "error_type": "AssertionError",
                "file_paths": ["app.txt"], "outcome": outcome}),
        )
        .await;
        host.flush().await;
        stored.structured.unwrap()["memory_id"].as_str().unwrap().to_string()
    });
    let as_local = || {
        let mut cmd = astra(db.path());
        cmd.env("ASTRA_ACTOR", "local");
        cmd
    };
    let listed = as_local().args(["memory", "list"]).output().unwrap();
    let said = String::from_utf8_lossy(&listed.stderr);
    assert!(listed.status.success() && listed.stdout.is_empty(), "{listed:?}");
    assert!(said.contains("no memories of actor `local`") && said.contains("other actors: `ann` ("), "{said}");
    assert!(said.contains("pass --actor ID (ASTRA_ACTOR)"), "{said}");
    for command in ["rm", "show"] {
        let out = as_local().args(["memory", command, &fix_id]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(said.contains(&"it belongs to actor `ann` (pass --actor ann".to_string()), "{command}: {said}");
    }
    // an argument that is no id at all is said to be none, not looked for
    for command in ["show", "rm"] {
        let out = astra(db.path()).args(["memory", command, "nonsense"]).output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{said}");
        assert!(said.contains("`nonsense` is not a memory id: a memory's id is a UUID"), "{command}: {said}");
    }
    // an id in another spelling is the same id; a bad argument among good ones deletes nothing
    let shouted = format!(" {} ", fix_id.to_uppercase());
    let shown = stdout(astra(db.path()).args(["memory", "show", &shouted]));
    assert!(shown.contains(&fix_id), "{shown}");
    let out = astra(db.path()).args(["memory", "rm", &fix_id, "nonsense"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).trim_end().ends_with("; nothing was deleted"), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    stdout(astra(db.path()).args(["memory", "show", &fix_id]));
    let all = stdout(as_local().args(["memory", "list", "--all-actors", "--table", "fixes"]));
    assert!(!all.is_empty() && all.lines().all(|l| l.contains("Z  ann ")), "an actor column: {all}");
    let blocks = stdout(astra(db.path()).args(["memory", "list", "--table", "core_blocks"]));
    assert!(blocks.contains("`project` v1: dates are UTC"), "the block's name and version: {blocks}");
    let shown: serde_json::Value =
        serde_json::from_str(&stdout(astra(db.path()).args(["memory", "show", &fix_id]))).unwrap();
    assert_eq!(shown["row"]["receipt"]["exit_code"], serde_json::json!(0), "{shown}");
    // `core history` names the actor and the project it looked in
    let elsewhere = tempfile::tempdir().unwrap();
    let history = stdout(
        astra(db.path()).env_remove("ASTRA_PROJECT").current_dir(elsewhere.path()).args(["core", "history", "project"]),
    );
    // (a folder in no project: the label a server started there uses)
    assert!(
        history.contains(
            "block `project` of actor `ann` in project `default` (no workspace, so the default label; pass --project \
             NAME for another)"
        ),
        "{history}"
    );
    let history = stdout(as_local().args(["core", "history", "human"]));
    assert!(history.contains("block `human` of actor `local` has never been written; the store holds"), "{history}");
}
