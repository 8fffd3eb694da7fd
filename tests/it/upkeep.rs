//! Upkeep beside a live server: `memory optimize --prune-older-than 0` and `memory reindex` run in other
//! processes while a tool host on the same store answers searches and takes writes, as a server would.

use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};

use astra_mcp::memory::GateState;
use astra_mcp::tools::{ArchivalInsertOutput, ArchivalSearchOutput, ToolHost};
use serde_json::json;

use crate::support::{call, config, host, repo, structured};

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

fn astra(db: &Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.env("ASTRA_DB", db).env("ASTRA_ACTOR", "ann").env("ASTRA_PROJECT", "datekit").env("ASTRA_LOG", "warn");
    cmd.kill_on_drop(true);
    cmd
}

fn succeeded(what: &str, out: &Output) -> String {
    assert!(out.status.success(), "{what} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fact(i: usize) -> String {
    format!("Fact {i}: the zebra service of region r{i}x listens on port {}.", 9000 + i)
}

async fn insert(host: &ToolHost, s: &GateState, i: usize) -> String {
    let out = call(host, s, "archival_memory_insert", json!({"text": fact(i), "tags": []})).await;
    structured::<ArchivalInsertOutput>(&out).id
}

/// Searches `host` until `stop`, for an archival fact by its identifier and for a conversation item.
/// Returns how many rounds ran and what went wrong in each that failed or missed.
async fn search_load(host: &ToolHost, stop: &AtomicBool) -> (usize, Vec<String>) {
    let s = GateState::new("load");
    let (mut runs, mut failures) = (0, Vec::new());
    while !stop.load(Ordering::Relaxed) {
        let i = runs % 20;
        let found =
            call(host, &s, "archival_memory_search", json!({"query": format!("region r{i}x"), "top_k": 3})).await;
        if found.is_error {
            failures.push(format!("archival_memory_search: {}", found.text));
        } else {
            let found: ArchivalSearchOutput = structured(&found);
            // the fact is the only memory holding `r{i}x`: Match 1, found by BM25 too (a keyword ranking
            // that failed would leave the vector's alone, silently)
            match found.results.first() {
                Some(hit) if hit.text.contains(&format!("r{i}x")) && hit.keyword_hit => {}
                first => failures.push(format!("region r{i}x: Match 1 is not its fact by keyword: {first:?}")),
            }
        }
        let said = call(host, &s, "conversation_search", json!({"query": "pytest failure in the parser"})).await;
        if said.is_error {
            failures.push(format!("conversation_search: {}", said.text));
        }
        runs += 1;
    }
    (runs, failures)
}

/// A store with 20 facts inserted one at a time (20 versions and fragments to compact and prune) and
/// an imported transcript.
async fn store_with_history(db: &Path) -> ToolHost {
    let transcript = repo().join("tests/fixtures/transcripts/claude-code.jsonl");
    succeeded("sessions import", &astra(db).args(["sessions", "import"]).arg(transcript).output().await.unwrap());
    let host = host(db, config("ann", "datekit", None, None)).await;
    let s = GateState::new("setup");
    for i in 0..20 {
        insert(&host, &s, i).await;
    }
    host
}

/// `optimize --prune-older-than 0` compacts and prunes every table six times from another process
/// while the server searches without pause and writes between the rounds: every search is answered,
/// with the right Match 1. Whether a read loses the race to a prune in a given run is up to timing (at
/// this size it rarely does); the unit test `a_read_of_a_pruned_version_fails_as_a_missing_file`
/// provokes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_server_keeps_answering_while_another_process_prunes_every_old_version() {
    let db = tempfile::tempdir().unwrap();
    let host = store_with_history(db.path()).await;
    let stop = AtomicBool::new(false);
    let upkeep = async {
        let s = GateState::new("writer");
        for round in 0..6 {
            let out = astra(db.path()).args(["memory", "optimize", "--prune-older-than", "0"]).output().await.unwrap();
            succeeded(&format!("optimize round {round}"), &out);
            for i in 0..5 {
                insert(&host, &s, 100 + 5 * round + i).await;
            }
        }
        stop.store(true, Ordering::Relaxed);
    };
    let ((runs, failures), ()) = tokio::join!(search_load(&host, &stop), upkeep);
    assert!(runs >= 3, "only {runs} rounds of searches ran beside the upkeep");
    assert!(failures.is_empty(), "{} of {runs} rounds failed: {failures:#?}", failures.len());
}

/// Writes taken while `optimize --prune-older-than 0` compacts and prunes from another process (20
/// rounds, passages and core memory lines one after another until each round ends): every write is
/// acknowledged, and every acknowledged passage and line is there afterwards. A prune that young
/// removes versions a write may be committing on top of unless it holds the table's write lock: the
/// write then fails with a missing file, or is acknowledged and gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_beside_a_prune_of_every_old_version_are_all_kept() {
    let db = tempfile::tempdir().unwrap();
    let host = store_with_history(db.path()).await;
    let s = GateState::new("writer");
    let (mut passages, mut lines, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..20 {
        let done = AtomicBool::new(false);
        let optimize = async {
            let out = astra(db.path()).args(["memory", "optimize", "--prune-older-than", "0"]).output().await.unwrap();
            done.store(true, Ordering::Relaxed);
            out
        };
        let writes = async {
            let mut i = 0;
            while !done.load(Ordering::Relaxed) {
                let n = 1000 * (round + 1) + i;
                let out = call(&host, &s, "archival_memory_insert", json!({"text": fact(n), "tags": []})).await;
                if out.is_error {
                    failed.push(out.text);
                } else {
                    passages.push(structured::<ArchivalInsertOutput>(&out).id);
                }
                // lines of 5 or 6 characters, at most 200 of them: within the block's 2,000
                if lines.len() < 200 {
                    let line = format!("l{n}");
                    let out = call(&host, &s, "core_memory_append", json!({"section": "human", "text": line})).await;
                    if out.is_error { failed.push(out.text) } else { lines.push(line) }
                }
                i += 1;
            }
        };
        let (out, ()) = tokio::join!(optimize, writes);
        succeeded(&format!("optimize round {round}"), &out);
    }
    assert!(failed.is_empty(), "{} writes failed: {failed:#?}", failed.len());
    assert!(passages.len() >= 20, "only {} writes ran beside the prunes", passages.len());
    let listed = astra(db.path()).args(["memory", "list", "--json", "--limit", "100000"]).output().await.unwrap();
    let listed = succeeded("memory list", &listed);
    let missing: Vec<&String> = passages.iter().filter(|id| !listed.contains(id.as_str())).collect();
    assert!(missing.is_empty(), "{} of {} acknowledged passages are gone: {missing:?}", missing.len(), passages.len());
    let block = succeeded("core show", &astra(db.path()).args(["core", "show", "human"]).output().await.unwrap());
    let lost: Vec<&String> = lines.iter().filter(|l| !block.split_whitespace().any(|w| w == l.as_str())).collect();
    assert!(lost.is_empty(), "{} of {} acknowledged core lines are gone: {lost:?}", lost.len(), lines.len());
}

/// `memory reindex` and `memory optimize` at once, beside the same search load: both finish (each
/// retries a commit it loses to the other), and no row is lost or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_and_optimize_at_once_both_finish_beside_a_live_server() {
    let db = tempfile::tempdir().unwrap();
    let host = store_with_history(db.path()).await;
    let stop = AtomicBool::new(false);
    let upkeep = async {
        let reindex = astra(db.path()).args(["memory", "reindex"]).output();
        let optimize = async {
            let mut outs = Vec::new();
            for _ in 0..3 {
                outs.push(astra(db.path()).args(["memory", "optimize", "--prune-older-than", "0"]).output().await);
            }
            outs
        };
        let (reindex, optimized) = tokio::join!(reindex, optimize);
        stop.store(true, Ordering::Relaxed);
        (reindex.unwrap(), optimized)
    };
    let ((runs, failures), (reindex, optimized)) = tokio::join!(search_load(&host, &stop), upkeep);
    let reindexed = succeeded("reindex", &reindex);
    assert!(reindexed.contains("20 archival"), "{reindexed}");
    for (round, out) in optimized.into_iter().enumerate() {
        succeeded(&format!("optimize round {round}"), &out.unwrap());
    }
    assert!(failures.is_empty(), "{} of {runs} rounds failed: {failures:#?}", failures.len());
    let stats = succeeded("stats", &astra(db.path()).args(["memory", "stats", "--json"]).output().await.unwrap());
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let archival = stats.as_array().unwrap().iter().find(|t| t["table"] == "archival").unwrap();
    assert_eq!(archival["rows"], 20, "{stats}");
}

/// Passages forgotten while `memory reindex` re-embeds them stay forgotten: the reindex read them
/// before the deletes (its count includes them) and wrote its new vectors after, and an update never
/// brings back a row deleted since it was read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passage_forgotten_during_a_reindex_stays_forgotten() {
    let db = tempfile::tempdir().unwrap();
    let host = host(db.path(), config("ann", "datekit", None, None)).await;
    let s = GateState::new("s");
    let mut ids = Vec::new();
    for i in 0..200 {
        ids.push(insert(&host, &s, i).await);
    }
    // the server's own background upkeep and compactions of these writes move the table's version too
    astra_mcp::store::lance::wait_for_upkeep().await;
    let mut reindex =
        astra(db.path()).args(["memory", "reindex"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
    // the reindex has read the rows once its first re-embedded rows are committed: the table's version moves
    let conn = lancedb::connect(db.path().to_str().unwrap())
        .read_consistency_interval(std::time::Duration::ZERO)
        .execute()
        .await
        .unwrap();
    let table = conn.open_table("archival").execute().await.unwrap();
    let before = table.version().await.unwrap();
    let waited = std::time::Instant::now();
    while table.version().await.unwrap() == before {
        assert!(waited.elapsed() < std::time::Duration::from_secs(60), "the reindex never wrote");
        assert!(reindex.try_wait().unwrap().is_none(), "the reindex ended before writing");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let forgotten: Vec<usize> = (180..200).collect();
    for &i in &forgotten {
        let out = call(&host, &s, "memory_forget", json!({"id": ids[i]})).await;
        assert!(!out.is_error, "{}", out.text);
    }
    assert!(reindex.try_wait().unwrap().is_none(), "the reindex ended before the deletes: no race was tried");
    let reindexed = succeeded("reindex", &reindex.wait_with_output().await.unwrap());
    assert!(reindexed.contains("200 archival"), "it read the forgotten rows too: {reindexed}");
    let stats = succeeded("stats", &astra(db.path()).args(["memory", "stats", "--json"]).output().await.unwrap());
    let stats: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let archival = stats.as_array().unwrap().iter().find(|t| t["table"] == "archival").unwrap();
    assert_eq!(archival["rows"], 180, "{stats}");
    for &i in &forgotten {
        let out =
            call(&host, &s, "archival_memory_search", json!({"query": format!("region r{i}x"), "top_k": 5})).await;
        let found: ArchivalSearchOutput = structured(&out);
        assert!(found.results.iter().all(|hit| hit.id != ids[i]), "fact {i} came back: {:?}", found.results);
    }
}
