//! The LanceDB store on a real directory: round trip, upsert, filters, persistence across reopen, the
//! meta check, and that another open store sees new writes.

use std::collections::BTreeMap;

use astra_mcp::domain::{FailedAttempt, FileChange, FixRecord, Passage, Receipt, VerifiedRun, fix_memory_id};
use astra_mcp::store::lance::LanceStore;
use astra_mcp::store::{Candidates, FixFilter, FixQuery, FixStore, Searchable, StoreError};
use chrono::{TimeZone, Utc};

use crate::support::embedder;

fn record(actor: &str, project: &str, fix: &str, error_type: &str) -> FixRecord {
    let at = Utc.with_ymd_and_hms(2026, 11, 30, 7, 0, 0).unwrap();
    FixRecord {
        memory_id: fix_memory_id(actor, "s1", fix, error_type, "ok", &["a.py".into()]),
        actor_id: actor.into(),
        project: project.into(),
        session_id: "s1".into(),
        created_at: at,
        updated_at: at,
        fix_description: fix.into(),
        error_type: error_type.into(),
        file_paths: vec!["a.py".into(), "b/c.py".into()],
        outcome: "ok".into(),
        verified: true,
        receipt: Some(Receipt {
            command: "pytest -q".into(),
            exit_code: 0,
            summary: "4 passed in 0.01s".into(),
            duration_ms: 120,
            finished_at: at,
            git_head: None,
            workspace_root: "/work/alpha".into(),
            workspace_digest: "d".repeat(64),
            file_hashes: BTreeMap::from([("a.py".into(), "h".repeat(64))]),
            changes: BTreeMap::from([(
                "a.py".into(),
                FileChange { added: vec!["if x is None:".into()], removed: vec!["return x + 1".into()] },
            )]),
            failed_attempts: vec![FailedAttempt {
                what: "retried with a longer timeout".into(),
                command: "pytest -q".into(),
                summary: "1 failed in 0.02s".into(),
                finished_at: at,
            }],
            last_verified: Some(VerifiedRun {
                command: "pytest -q".into(),
                summary: "5 passed in 0.02s".into(),
                finished_at: at + chrono::Duration::days(3),
                git_head: Some("a".repeat(40)),
                workspace_digest: "e".repeat(64),
            }),
        }),
        embedded_text: format!("Error type: {error_type}\nFix: {fix}"),
    }
}

async fn put(store: &LanceStore, r: &FixRecord) -> bool {
    let v = embedder().embed_documents(vec![r.embedded_text.clone()]).await.unwrap().remove(0);
    store.upsert_fix(r, &v).await.unwrap()
}

async fn query(actor: &str, text: &str, error_type: Option<&str>) -> FixQuery {
    FixQuery {
        filter: FixFilter { actor_id: actor.into(), error_type: error_type.map(str::to_string) },
        vector: embedder().embed_query(text).await.unwrap(),
        text: text.into(),
        limit: 10,
    }
}

#[tokio::test]
async fn rows_round_trip_and_upsert_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    let r = record("ann", "alpha", "strip whitespace from comma separated env values", "AssertionError");
    assert!(put(&store, &r).await, "first store creates the row");
    assert!(!put(&store, &r).await, "an identical store upserts the same row");
    let back = store.get_fix("ann", r.memory_id).await.unwrap().expect("stored row");
    assert_eq!(back, r);
    assert_eq!(store.get_fix("bob", r.memory_id).await.unwrap(), None, "another actor cannot read it");
    let found =
        Searchable::<FixRecord>::candidates(&store, &query("ann", "comma separated env whitespace", None).await)
            .await
            .unwrap();
    assert_eq!(found.by_vector.len(), 1, "one row, not two, after the upsert");
    assert!(found.by_vector[0].cosine > 0.3, "cosine {}", found.by_vector[0].cosine);
}

/// `renew_fixes` replaces only the receipt, and only of rows as the caller read them: a row stored again
/// since (another `updated_at`) and the rows of another actor are left as they are; vectors are kept.
#[tokio::test]
async fn renewal_replaces_only_the_receipt_of_rows_as_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    let a = record("ann", "alpha", "strip whitespace from comma separated env values", "AssertionError");
    let b = record("ann", "alpha", "close the file handle before rename", "PermissionError");
    put(&store, &a).await;
    put(&store, &b).await;
    let renewal = |r: &FixRecord| {
        let mut r = r.clone();
        r.receipt.as_mut().unwrap().last_verified.as_mut().unwrap().summary = "9 passed in 0.03s".into();
        r.fix_description = "not written: a renewal changes the receipt alone".into();
        r
    };
    let b_again = FixRecord { updated_at: b.updated_at + chrono::Duration::seconds(1), ..b.clone() };
    put(&store, &b_again).await; // stored again after the renewal read `b`
    assert_eq!(store.renew_fixes("bob", &[renewal(&a)]).await.unwrap(), 0, "ann's rows are not bob's to renew");
    assert_eq!(store.renew_fixes("ann", &[renewal(&a), renewal(&b)]).await.unwrap(), 1);
    let back = store.get_fix("ann", a.memory_id).await.unwrap().unwrap();
    let receipt = back.receipt.clone().unwrap();
    assert_eq!(receipt.last_verified.unwrap().summary, "9 passed in 0.03s");
    assert_eq!(FixRecord { receipt: a.receipt.clone(), ..back }, a, "every other column as stored");
    assert_eq!(store.get_fix("ann", b.memory_id).await.unwrap().unwrap(), b_again, "the newer store is kept");
    let found =
        Searchable::<FixRecord>::candidates(&store, &query("ann", "comma separated env whitespace", None).await)
            .await
            .unwrap();
    assert_eq!(found.by_vector[0].row.memory_id, a.memory_id);
    assert!(found.by_vector[0].cosine > 0.3, "the vector is kept: cosine {}", found.by_vector[0].cosine);
}

#[tokio::test]
async fn filters_apply_before_ranking() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    put(&store, &record("ann", "alpha", "fix the borrow of a moved vector", "E0502")).await;
    put(&store, &record("ann", "beta", "close the file handle before rename", "PermissionError")).await;
    put(&store, &record("bob", "alpha", "fix the borrow of a moved vector", "E0502")).await;
    let q = query("ann", "cannot borrow as mutable because it is also borrowed as immutable", Some("e0502")).await;
    let found = Searchable::<FixRecord>::candidates(&store, &q).await.unwrap();
    assert_eq!(found.by_vector.len(), 1, "error_type filter is exact and case-insensitive, actor filter holds");
    assert_eq!(found.by_vector[0].row.actor_id, "ann");
    assert_eq!(found.by_vector[0].row.error_type, "E0502");
    let keyword = Searchable::<FixRecord>::candidates(&store, &query("ann", "E0502", None).await).await.unwrap();
    assert_eq!(keyword.by_keyword.len(), 1, "the full-text ranking finds the error code");
    assert_eq!(keyword.by_keyword[0].row.error_type, "E0502");
}

#[tokio::test]
async fn writes_persist_and_other_open_stores_see_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let first = LanceStore::open(path).await.unwrap();
    let reader = LanceStore::open(path).await.unwrap(); // a second handle, like a second process
    let r = record("ann", "alpha", "retry the commit on conflict", "CommitConflict");
    put(&first, &r).await;
    drop(first);
    let reopened = LanceStore::open(path).await.unwrap();
    assert_eq!(reopened.get_fix("ann", r.memory_id).await.unwrap().map(|x| x.memory_id), Some(r.memory_id));
    // the long-open handle sees it within the read-consistency interval
    // no sleep: every read checks for new commits (READ_CONSISTENCY is zero)
    assert_eq!(astra_mcp::store::lance::READ_CONSISTENCY, std::time::Duration::ZERO);
    assert!(reader.get_fix("ann", r.memory_id).await.unwrap().is_some(), "an open store must see another's write");
    assert!(reopened.delete_fix("ann", r.memory_id).await.unwrap());
    assert!(reopened.get_fix("ann", r.memory_id).await.unwrap().is_none());
}

#[tokio::test]
async fn a_store_built_with_another_model_is_refused() {
    use arrow_array::{RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let conn = lancedb::connect(path).execute().await.unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("key", DataType::Utf8, false),
        Field::new("value", DataType::Utf8, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["format_version", "embedding_model", "embedding_dimension"])),
            Arc::new(StringArray::from(vec!["1", "bge-large", "1024"])),
        ],
    )
    .unwrap();
    drop(schema);
    conn.create_table("meta", batch).execute().await.unwrap();
    let err = LanceStore::open(path).await.err().expect("must refuse");
    assert!(matches!(err, StoreError::ModelMismatch { .. }), "{err:?}");
    assert!(err.to_string().contains("bge-large") && err.to_string().contains("--db"), "{err}");
}

#[tokio::test]
async fn keyword_search_finds_rows_added_after_the_index_was_built() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    put(&store, &record("ann", "alpha", "first fix builds the full-text index", "ValueError")).await;
    let later = record("ann", "alpha", "quux_frobnicator overflowed its ring buffer", "OverflowError");
    put(&store, &later).await;
    let found =
        Searchable::<FixRecord>::candidates(&store, &query("ann", "quux_frobnicator", None).await).await.unwrap();
    let ids: Vec<_> = found.by_keyword.iter().map(|c| c.row.memory_id).collect();
    assert_eq!(ids, vec![later.memory_id], "a row written after the index was built must be keyword-searchable");
}

#[tokio::test]
async fn concurrent_writers_on_one_directory_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    // two handles stand in for two server processes (separate connections, separate caches)
    let stores = [LanceStore::open(path).await.unwrap(), LanceStore::open(path).await.unwrap()];
    let vector = embedder().embed_query("a concurrent write").await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    let mut ids = Vec::new();
    for i in 0..40 {
        let store = stores[i % 2].clone();
        let mut r = record("ann", "alpha", &format!("concurrent fix number {i}"), "Race");
        r.memory_id = fix_memory_id("ann", &format!("s{i}"), &r.fix_description, "Race", "ok", &[]);
        ids.push(r.memory_id);
        let v = vector.clone();
        tasks.spawn(async move { store.upsert_fix(&r, &v).await });
    }
    while let Some(result) = tasks.join_next().await {
        assert!(result.unwrap().unwrap(), "every acknowledged write created its row");
    }
    let fresh = LanceStore::open(path).await.unwrap();
    for id in ids {
        assert!(fresh.get_fix("ann", id).await.unwrap().is_some(), "acknowledged write {id} is missing");
    }
}

/// Past `ANN_MIN_ROWS` rows, upkeep builds the vector index; indexed searches agree with exact ones
/// (recall@10) and the hybrid search still ranks an exact text first.
#[tokio::test]
async fn a_large_archival_table_gets_a_vector_index_that_keeps_recall() {
    use astra_mcp::store::lance::{ANN_MIN_ROWS, TableId};
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().join("db").to_str().unwrap()).await.unwrap();
    let texts: Vec<String> = (0..40)
        .map(|i| {
            format!(
                "Runbook {i}: the service-{i} deploy needs the flag --region-{} and a warm cache of {} entries",
                i * 7,
                i * 131
            )
        })
        .collect();
    let embedder = crate::support::embedder();
    let scope = |project: &str| astra_mcp::domain::Scope { actor_id: "ann".into(), project: project.into() };
    astra_mcp::bench::populate(&store, &embedder, &scope("p"), &texts, ANN_MIN_ROWS - 1, 7, &|_| {}).await.unwrap();
    assert!(!store.ensure_vector_index(TableId::Archival).await.unwrap(), "below the threshold: flat search");
    assert!(
        store.ensure_scalar_indexes(TableId::Archival).await.unwrap().is_empty(),
        "below the threshold: no scalar index"
    );
    astra_mcp::bench::populate(&store, &embedder, &scope("q"), &texts[..1], 1, 8, &|_| {}).await.unwrap();
    assert!(store.ensure_vector_index(TableId::Archival).await.unwrap(), "at the threshold the index is built");
    assert!(store.has_vector_index(TableId::Archival).await.unwrap());
    assert!(!store.ensure_vector_index(TableId::Archival).await.unwrap(), "not rebuilt before the table doubles");
    assert_eq!(store.ensure_scalar_indexes(TableId::Archival).await.unwrap(), vec!["actor_id", "superseded_by"]);
    assert!(store.ensure_scalar_indexes(TableId::Archival).await.unwrap().is_empty(), "built once");
    let queries: Vec<String> = texts.iter().step_by(2).cloned().collect();
    let measured = astra_mcp::bench::recall(&store, &embedder, "ann", &queries, 10).await.unwrap();
    assert!(measured.indexed && measured.recall >= 0.95, "{measured:?}");
    let archival = astra_mcp::memory::ArchivalMemory::new(
        std::sync::Arc::new(store),
        embedder,
        astra_mcp::memory::ArchivalConfig {
            scope: astra_mcp::domain::Scope { actor_id: "ann".into(), project: "p".into() },
            near_duplicate_cosine: 0.95,
            fusion: astra_mcp::memory::Fusion::archival(),
        },
    );
    let request = astra_mcp::memory::PassageSearch { query: texts[3].clone(), top_k: 5, ..Default::default() };
    let hits = archival.search(&request).await.unwrap();
    assert!(hits[0].row.text.starts_with(&format!("{} (#", texts[3])), "{:?}", hits[0].row.text);
}

/// Upkeep on an indexed table folds each run's new rows into the vector index as a new segment, and Lance
/// compacts only fragments covered by the same segments. Past `MAX_VECTOR_INDEX_SEGMENTS` upkeep merges
/// the segments, so compaction joins their fragments: the table no longer gains a fragment (and the
/// searches a segment) per upkeep run, and every row stays findable through the index.
#[tokio::test]
async fn upkeep_merges_vector_index_segments_so_an_indexed_table_stays_compact() {
    use astra_mcp::store::lance::{ANN_MIN_ROWS, MAX_VECTOR_INDEX_SEGMENTS, TableId, TableStats};
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().join("db").to_str().unwrap()).await.unwrap();
    let texts: Vec<String> = (0..40)
        .map(|i| format!("Incident {i}: the queue-{i} consumer stalls after {} retries on shard {}", i * 3, i * 17))
        .collect();
    let embedder = crate::support::embedder();
    let scope = |project: String| astra_mcp::domain::Scope { actor_id: "ann".into(), project };
    let archival = |stats: Vec<TableStats>| {
        stats.into_iter().find(|s| s.table == TableId::Archival.name()).expect("archival stats")
    };
    astra_mcp::bench::populate(&store, &embedder, &scope("base".into()), &texts, ANN_MIN_ROWS, 1, &|_| {})
        .await
        .unwrap();
    store.optimize(chrono::Duration::zero()).await.unwrap();
    assert_eq!(archival(store.stats().await.unwrap()).vector_index_segments, Some(1), "indexed in one segment");
    let mut merged = false;
    for round in 0..3 * MAX_VECTOR_INDEX_SEGMENTS {
        let project = format!("round-{round}");
        astra_mcp::bench::populate(&store, &embedder, &scope(project), &texts, 5, round as u64 + 2, &|_| {})
            .await
            .unwrap();
        store.optimize(chrono::Duration::zero()).await.unwrap();
        let stats = archival(store.stats().await.unwrap());
        let segments = stats.vector_index_segments.expect("still indexed");
        assert_eq!(stats.rows, ANN_MIN_ROWS + 5 * (round + 1));
        assert!(segments <= MAX_VECTOR_INDEX_SEGMENTS, "round {round}: {stats:?}");
        // one fragment per segment: the first over the bulk, then one per run since the last merge
        assert_eq!(stats.fragments, segments, "round {round}: {stats:?}");
        merged |= round > 0 && segments == 2;
    }
    assert!(merged, "segments were merged along the way");
    let queries: Vec<String> = texts.iter().step_by(2).cloned().collect();
    let measured = astra_mcp::bench::recall(&store, &embedder, "ann", &queries, 10).await.unwrap();
    assert!(measured.indexed && measured.recall >= 0.95, "{measured:?}");
}

/// Passages of `actor` with `texts`, embedded for real, inserted one commit (one fragment) each.
async fn passages(store: &LanceStore, actor: &str, texts: &[&str]) -> Vec<astra_mcp::domain::Passage> {
    use astra_mcp::store::ArchivalStore;
    let embedder = embedder();
    let mut out = Vec::new();
    for text in texts {
        let now = Utc::now();
        let passage = astra_mcp::domain::Passage {
            id: astra_mcp::domain::passage_id(actor, "p", text),
            actor_id: actor.into(),
            project: "p".into(),
            session_id: String::new(),
            turn: None,
            source: "test".into(),
            tags: Vec::new(),
            text: text.to_string(),
            embedded_text: text.to_string(),
            created_at: now,
            updated_at: now,
            superseded_by: None,
        };
        let vector = embedder.embed_query(text).await.unwrap();
        store.insert_passages(&[(passage.clone(), vector)]).await.unwrap();
        out.push(passage);
    }
    out
}

fn text_query(actor: &str, vector: Vec<f32>, text: &str) -> astra_mcp::store::TextQuery {
    astra_mcp::store::TextQuery {
        filter: astra_mcp::store::SearchFilter { actor_id: actor.into(), ..Default::default() },
        vector,
        text: text.into(),
        limit: 50,
    }
}

#[tokio::test]
async fn a_search_reads_its_rows_after_a_compaction_and_drops_forgotten_ones() {
    use astra_mcp::store::ForgetStore;
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    let texts =
        ["rotate the signing key before the audit", "the signing key lives in vault", "audit log retention is 90 days"];
    let stored = passages(&store, "ann", &texts).await;
    let q = text_query("ann", embedder().embed_query("signing key").await.unwrap(), "signing key");
    let keyword = Searchable::<Passage>::keyword(&store, &q).await.unwrap();
    let ranked = Candidates::join(Searchable::<Passage>::nearest(&store, &q).await.unwrap(), keyword);
    assert_eq!(ranked.by_vector.len(), 3);
    assert_eq!(ranked.by_keyword.len(), 2, "two texts hold the words");
    let refs: Vec<_> = ranked.all().copied().collect();
    // between ranking and reading: one row forgotten, then the fragments compacted into new ones, so the
    // row addresses the ranking read now point elsewhere or nowhere
    store.forget("ann", stored[1].id).await.unwrap();
    store.optimize(chrono::Duration::zero()).await.unwrap();
    let rows = Searchable::<Passage>::rows(&store, "ann", &refs).await.unwrap();
    let got: Vec<_> = rows.iter().map(|(p, _)| p.id).collect();
    let want: Vec<_> = refs.iter().map(|r| r.id).filter(|id| *id != stored[1].id).collect();
    assert_eq!(got, want, "every row still stored, by id, in ranking order; the forgotten one dropped");
    assert!(rows.iter().all(|(p, v)| p.actor_id == "ann" && v.len() == 384));
    assert!(
        Searchable::<Passage>::rows(&store, "bob", &refs).await.unwrap().is_empty(),
        "another actor reads none of them"
    );
}

#[tokio::test]
async fn another_actors_rows_crowding_the_top_do_not_empty_a_search() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    // 60 rows of bob's are all nearer to the query, and match its words, than ann's one row
    let crowd: Vec<String> =
        (0..60).map(|i| format!("deploy the billing service to region {i} with the canary flag")).collect();
    passages(&store, "bob", &crowd.iter().map(String::as_str).collect::<Vec<_>>()).await;
    let mine = passages(&store, "ann", &["billing reports are sent on mondays"]).await;
    let text = "deploy the billing service with the canary flag";
    let q = text_query("ann", embedder().embed_query(text).await.unwrap(), text);
    let found = Searchable::<Passage>::candidates(&store, &q).await.unwrap();
    let ids =
        |s: &[astra_mcp::store::Scored<astra_mcp::domain::Passage>]| s.iter().map(|c| c.row.id).collect::<Vec<_>>();
    assert_eq!(ids(&found.by_vector), vec![mine[0].id], "the filter is applied before ranking when after is short");
    assert_eq!(ids(&found.by_keyword), vec![mine[0].id]);
}

/// The fix search's second full-text ranking is of the query's identifier phrases: a failing test's name
/// that embeds the identifier (`test_slow_server_lock_ttl`, `test_emails_high_…`) finds the fix holding
/// those two parts side by side in any spelling (`lock_ttl`, `emails-high`), and not its look-alikes
/// (`cache_ttl`, `emails-low`), which share every other word of the query.
#[tokio::test]
async fn a_test_name_finds_the_fix_of_the_identifier_it_embeds_not_its_look_alikes() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    let lock =
        record("ann", "alpha", "The client takes seconds but lock_ttl is set in ms: divide by 1000.", "TimeoutError");
    let cache =
        record("ann", "alpha", "The client takes seconds but cache_ttl is set in ms: divide by 1000.", "TimeoutError");
    let high =
        record("ann", "alpha", "The emails-high consumer acked before the handler: ack after it.", "AssertionError");
    let low =
        record("ann", "alpha", "The emails-low consumer acked before the handler: ack after it.", "AssertionError");
    for r in [&lock, &cache, &high, &low] {
        put(&store, r).await;
    }
    let k = Searchable::<FixRecord>::keyword(
        &store,
        &query("ann", "tests/test_client.py::test_slow_server_lock_ttl: TimeoutError", None).await,
    )
    .await
    .unwrap();
    // both hold `timeout error` (their error type); only one holds `lock ttl`
    let scored: Vec<(uuid::Uuid, f32)> = k.rankings[1].iter().map(|s| (s.row.id, s.score)).collect();
    assert_eq!(scored[0].0, lock.memory_id, "`lock ttl` first: {scored:?}");
    assert!(scored.iter().skip(1).all(|(_, score)| *score < scored[0].1), "and alone first: {scored:?}");
    let k = Searchable::<FixRecord>::keyword(
        &store,
        &query("ann", "tests/test_consumer.py::test_emails_high_message_not_lost: AssertionError", None).await,
    )
    .await
    .unwrap();
    let scored: Vec<(uuid::Uuid, f32)> = k.rankings[1].iter().map(|s| (s.row.id, s.score)).collect();
    assert_eq!(scored[0].0, high.memory_id, "`emails high` first: {scored:?}");
    let low_score = scored.iter().find(|(id, _)| *id == low.memory_id).map(|(_, score)| *score);
    assert!(low_score.is_none_or(|s| s < scored[0].1), "`emails-low` holds no `emails high`: {scored:?}");
    let k = Searchable::<FixRecord>::keyword(&store, &query("ann", "read timed out", None).await).await.unwrap();
    assert!(k.rankings[1].is_empty(), "a query without identifiers has no identifier ranking");
}

/// Fix texts are indexed with Lance's code analyzer: `retry_limits` and `retry_limit` are two tokens
/// (English stemming made them one), so BM25 ranks the fix that holds the exact identifier first, alone.
/// A store whose fixes index an earlier version built (with the text analyzer, or without positions)
/// gets it rebuilt at open.
#[tokio::test]
async fn fix_identifiers_that_differ_by_a_plural_are_told_apart_also_after_an_older_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_str().unwrap();
    let store = LanceStore::open(path).await.unwrap();
    let one = record("ann", "alpha", "Use <= when checking retry_limit: the maximum was refused.", "AssertionError");
    let many = record("ann", "alpha", "Use <= when checking retry_limits: the maximum was refused.", "AssertionError");
    put(&store, &one).await;
    put(&store, &many).await;
    let ranks = |c: &astra_mcp::store::KeywordRankings| -> Vec<(uuid::Uuid, usize)> {
        c.rankings[0].iter().map(|s| (s.row.id, s.rank)).collect()
    };
    let keyword = Searchable::<FixRecord>::keyword(&store, &query("ann", "retry_limits", None).await).await.unwrap();
    assert_eq!(ranks(&keyword)[0], (many.memory_id, 1), "the exact identifier first: {:?}", ranks(&keyword));
    assert!(ranks(&keyword).iter().all(|(id, rank)| *id != one.memory_id || *rank > 1), "no tie with its look-alike");
    drop(store);

    // an older version's index: the text analyzer (stemming), under Lance's default name
    let conn = lancedb::connect(path).execute().await.unwrap();
    let fixes = conn.open_table("fixes").execute().await.unwrap();
    for ix in fixes.list_indices().await.unwrap() {
        if ix.index_type == lancedb::index::IndexType::FTS {
            fixes.drop_index(&ix.name).await.unwrap();
        }
    }
    fixes.create_index(&["embedded_text"], lancedb::index::Index::FTS(Default::default())).execute().await.unwrap();
    let names = |ixs: Vec<lancedb::index::IndexConfig>| -> Vec<String> {
        ixs.into_iter().filter(|ix| ix.index_type == lancedb::index::IndexType::FTS).map(|ix| ix.name).collect()
    };
    assert_eq!(names(fixes.list_indices().await.unwrap()), vec!["embedded_text_idx".to_string()]);

    let reopened = LanceStore::open(path).await.unwrap();
    let conn = lancedb::connect(path).execute().await.unwrap();
    let fixes = conn.open_table("fixes").execute().await.unwrap();
    assert_eq!(names(fixes.list_indices().await.unwrap()), vec!["embedded_text_code_pos_idx".to_string()]);
    let keyword = Searchable::<FixRecord>::keyword(&reopened, &query("ann", "retry_limits", None).await).await.unwrap();
    assert_eq!(ranks(&keyword)[0], (many.memory_id, 1), "rebuilt: {:?}", ranks(&keyword));
    assert!(ranks(&keyword).iter().all(|(id, rank)| *id != one.memory_id || *rank > 1));
}

/// On a bucket a server's reads may lag another machine's writes by the read consistency interval
/// (stood in for here by two handles on one directory that re-read the table only hourly). A passage
/// forgotten through one handle and inserted again at once through the other, whose view still holds it,
/// is stored anew (with or without new tags), not answered "already stored" with nothing kept; and a
/// passage the lagging handle has not seen yet is still found and deleted by its forget.
#[tokio::test]
async fn a_lagging_view_neither_keeps_a_forgotten_passage_nor_misses_a_new_one() {
    use std::sync::Arc;

    use astra_mcp::domain::Scope;
    use astra_mcp::memory::{ArchivalConfig, ArchivalMemory, Fusion};
    use astra_mcp::store::lance::OpenOptions;
    use astra_mcp::store::{ArchivalStore, ForgetStore};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let path = path.to_str().unwrap();
    let lagging = || OpenOptions { read_consistency: Some(std::time::Duration::from_secs(3600)), ..Default::default() };
    let memory = |store: Arc<LanceStore>| {
        ArchivalMemory::new(
            store,
            embedder(),
            ArchivalConfig {
                scope: Scope { actor_id: "ann".into(), project: "p".into() },
                near_duplicate_cosine: 0.95,
                fusion: Fusion::archival(),
            },
        )
    };
    let first = Arc::new(LanceStore::open_with(path, lagging()).await.unwrap());
    let texts = ["the billing queue drains every five minutes", "the search cluster reindexes at night"];
    let mut ids = Vec::new();
    for text in texts {
        ids.push(memory(first.clone()).insert(None, text, &[], "test").await.unwrap().passage.id);
    }
    let second = Arc::new(LanceStore::open_with(path, lagging()).await.unwrap());
    for &id in &ids {
        assert_eq!(first.forget("ann", id).await.unwrap(), Some("archival"));
    }
    let again = memory(second.clone()).insert(None, texts[0], &[], "test").await.unwrap();
    assert!(!again.deduplicated, "the forgotten passage was answered as stored");
    let tagged = memory(second.clone()).insert(None, texts[1], &["ops".to_string()], "test").await.unwrap();
    assert!(!tagged.deduplicated, "the forgotten passage was answered as stored, its tags merged");
    let fresh = LanceStore::open(path).await.unwrap();
    assert!(fresh.get_passage("ann", ids[0]).await.unwrap().is_some(), "the passage stored again is missing");
    let stored = fresh.get_passage("ann", ids[1]).await.unwrap().expect("the passage stored again with a tag");
    assert_eq!(stored.tags, vec!["ops".to_string()]);
    // the first handle has not read the second's inserts: its forget must find them all the same
    assert_eq!(first.forget("ann", ids[0]).await.unwrap(), Some("archival"));
    assert!(LanceStore::open(path).await.unwrap().get_passage("ann", ids[0]).await.unwrap().is_none());
}
