//! Unit tests of the search: rankings read through the row cache, rows read by address, and the HNSW
//! `ef` of a query.

use std::time::Duration;

use super::*;
use crate::domain::Passage;
use crate::store::lance::TableId;
use crate::store::lance::handle::StoreTable;
use crate::store::lance::test_rows::{fix_row, passage};
use crate::store::{ArchivalStore, FixStore, ForgetStore};

/// The row addresses of `name`, by id.
async fn addresses(store: &LanceStore, name: TableId) -> HashMap<uuid::Uuid, u64> {
    use lancedb::query::{QueryBase, Select};
    let query = StoreTable::new(store, name).table().query().select(Select::columns(&["id"])).with_row_id();
    let mut out = HashMap::new();
    for batch in collect(&query).await.unwrap() {
        out.extend(row_refs(&batch, name).unwrap().into_iter().map(|(r, _)| (r.id, r.row_id)));
    }
    out
}

/// Rows read by address from deep inside one large fragment, where a column holds one value or
/// null on every row (Lance stores it as a constant page with definition levels): each comes back
/// with its own nulls. Guards the patched jump in `ConstantPageDecoder::skip_to_row`
/// (vendor/lance-encoding/PATCHED.md), which must land on the same level the row-by-row walk did.
#[tokio::test]
async fn rows_read_by_address_deep_in_a_constant_column_keep_their_own_nulls() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    let turn = |i: usize| (!i.is_multiple_of(3)).then_some(7);
    let rows: Vec<_> = (0..12_000)
        .map(|i| {
            let (mut p, v) = passage("ann", &format!("note {i}"));
            p.turn = turn(i);
            (p, v)
        })
        .collect();
    store.insert_passages(&rows).await.unwrap();
    let at = addresses(&store, TableId::Archival).await;
    let picks = [11_999, 5, 6_000, 11_998, 7, 9_001, 4];
    let refs: Vec<crate::store::RowRef> =
        picks.iter().map(|&i| crate::store::RowRef { id: rows[i].0.id, row_id: at[&rows[i].0.id] }).collect();
    let got: Vec<crate::domain::Passage> =
        rows_by_ref(&store, "ann", &refs).await.unwrap().into_iter().map(|(p, _)| p).collect();
    assert_eq!(got.iter().map(|p| p.id).collect::<Vec<_>>(), refs.iter().map(|r| r.id).collect::<Vec<_>>());
    for (p, &i) in got.iter().zip(&picks) {
        assert_eq!((p.text.as_str(), p.turn), (format!("note {i}").as_str(), turn(i)), "row {i}");
        assert_eq!((p.actor_id.as_str(), p.project.as_str(), p.source.as_str()), ("ann", "p", "test"));
    }
}

/// A ranking's rows are read by address and filtered here; any doubt (a row of another actor, a
/// superseded row, a row no longer at its address) sends the search back to Lance's prefilter.
#[tokio::test]
async fn ranked_rows_are_read_by_address_and_any_doubt_returns_none() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    let rows = [passage("ann", "a"), passage("ann", "bb"), passage("ann", "ccc"), passage("bob", "dddd")];
    store.insert_passages(&rows).await.unwrap();
    let at = addresses(&store, TableId::Archival).await;
    let (a, b, c, d) = (rows[0].0.id, rows[1].0.id, rows[2].0.id, rows[3].0.id);
    let ann = |current_only| Broad { actor_id: "ann".into(), current_only };
    let read = |ids: Vec<uuid::Uuid>, filter: Broad| {
        let store = store.clone();
        let addresses: Vec<u64> = ids.iter().map(|id| at[id]).collect();
        async move { StoreTable::new(&store, TableId::Archival).read_ranked(addresses, &filter, true).await.unwrap() }
    };

    let got = read(vec![c, a, b], ann(true)).await.expect("all of ann's, all current");
    assert_eq!(got.iter().map(|r| r.row.id).collect::<Vec<_>>(), vec![c, a, b], "in ranking order");
    assert_eq!(got.iter().map(|r| r.row.row_id).collect::<Vec<_>>(), vec![at[&c], at[&a], at[&b]]);
    assert_eq!(got[0].vector.as_deref(), Some(rows[2].1.as_slice()), "each with its own vector");
    assert!(read(vec![a, d], ann(true)).await.is_none(), "bob's row fails ann's filter");

    let mut superseded = rows[1].0.clone();
    superseded.superseded_by = Some(a);
    store.apply_passages(&[], &[(superseded, None)]).await.unwrap();
    let at_now = addresses(&store, TableId::Archival).await;
    let moved = |id| (at_now[&id], at[&id]);
    assert_ne!(moved(b).0, moved(b).1, "an update writes the row at a new address");
    let (_, old_b) = moved(b);
    // the reads above cached b's old address; a ranking never returns it again (see
    // `a_current_only_search_never_returns_a_row_superseded_after_its_address_was_cached`), and past
    // the cache a read of it finds nothing
    assert!(StoreTable::new(&store, TableId::Archival).row_cache().get(&[old_b], false)[0].is_some());
    StoreTable::new(&store, TableId::Archival).row_cache().clear();
    let stale =
        StoreTable::new(&store, TableId::Archival).read_ranked(vec![at[&a], old_b], &ann(false), false).await.unwrap();
    assert!(stale.is_none(), "the old address of an updated row holds nothing now");
    let fresh = StoreTable::new(&store, TableId::Archival)
        .read_ranked(vec![at_now[&a], at_now[&b]], &ann(false), false)
        .await
        .unwrap();
    assert_eq!(fresh.map(|r| r.len()), Some(2), "superseded rows pass when they are asked for");
    let current = StoreTable::new(&store, TableId::Archival)
        .read_ranked(vec![at_now[&a], at_now[&b]], &ann(true), false)
        .await
        .unwrap();
    assert!(current.is_none(), "a superseded row fails a current-only filter");

    store.forget("ann", c).await.unwrap();
    StoreTable::new(&store, TableId::Archival).row_cache().clear();
    assert!(read(vec![a, c], ann(false)).await.is_none(), "a forgotten row is gone from its address");
    let before_compaction = vec![at_now[&a]];
    assert!(StoreTable::new(&store, TableId::Archival).row_cache().get(&before_compaction, false)[0].is_some());
    store.optimize(chrono::Duration::zero()).await.unwrap();
    assert_eq!(StoreTable::new(&store, TableId::Archival).row_cache().len(), 0, "a compaction clears the cache");
    let after =
        StoreTable::new(&store, TableId::Archival).read_ranked(before_compaction, &ann(false), false).await.unwrap();
    assert!(after.is_none(), "a compaction moved every row");
}

fn nearest_to(vector: &[f32], limit: usize, include_superseded: bool) -> crate::store::TextQuery {
    let filter = crate::store::SearchFilter { actor_id: "ann".into(), include_superseded, ..Default::default() };
    crate::store::TextQuery { filter, vector: vector.to_vec(), text: String::new(), limit }
}

fn ranked(ranking: &crate::store::VectorRanking) -> Vec<(uuid::Uuid, f32, usize)> {
    ranking.ranked.iter().map(|s| (s.row.id, s.cosine, s.rank)).collect()
}

/// A ranking's second read of the same candidates comes from the row cache, with the same ids,
/// cosines and ranks; a row superseded after its old address was cached (an update moves it) is
/// read at its new address and left out of a current-only search: Lance does not return a deleted
/// row's address, which is what makes the cache safe ([`row_cache`]).
#[tokio::test]
async fn a_current_only_search_never_returns_a_row_superseded_after_its_address_was_cached() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    // all of one actor's, so the rankings take the path that reads their candidates
    let rows = [passage("ann", "a"), passage("ann", "bb"), passage("ann", "ccc")];
    store.insert_passages(&rows).await.unwrap();
    let (a, b) = (rows[0].0.id, rows[1].0.id);
    let old_b = addresses(&store, TableId::Archival).await[&b];
    let cache = StoreTable::new(&store, TableId::Archival).row_cache();

    let first = Searchable::<Passage>::nearest(&store, &nearest_to(&rows[1].1, 10, false)).await.unwrap();
    assert_eq!(first.ranked.iter().map(|s| s.row.id).collect::<Vec<_>>()[..1], [b], "b is nearest to itself");
    assert_eq!(first.ranked.len(), 3);
    assert!((first.ranked[0].cosine - 1.0).abs() < 1e-6, "the cosine of b's stored vector");
    let reads = cache.reads();
    let again = Searchable::<Passage>::nearest(&store, &nearest_to(&rows[1].1, 10, false)).await.unwrap();
    assert_eq!(ranked(&again), ranked(&first), "the same ranking from the cache");
    assert_eq!(cache.reads(), reads, "and no read of the table for it");

    let mut superseded = rows[1].0.clone();
    superseded.superseded_by = Some(a);
    store.apply_passages(&[], &[(superseded, None)]).await.unwrap();
    assert!(cache.get(&[old_b], true)[0].as_ref().is_some_and(|r| !r.superseded), "cached as current");
    let current = Searchable::<Passage>::nearest(&store, &nearest_to(&rows[1].1, 10, false)).await.unwrap();
    assert!(!current.ranked.iter().any(|s| s.row.id == b), "superseded b is left out: {:?}", ranked(&current));
    assert_eq!(current.ranked.len(), 2);
    let all = Searchable::<Passage>::nearest(&store, &nearest_to(&rows[1].1, 10, true)).await.unwrap();
    assert_eq!(all.ranked[0].row.id, b, "asked for, b is found at its new address");
    assert_ne!(all.ranked[0].row.row_id, old_b);
}

/// A table that fits is read into the row cache in the background after its first search; then a
/// ranking of any query reads no row of the table.
#[tokio::test]
async fn a_small_table_is_read_into_the_row_cache_after_its_first_search() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    let rows: Vec<_> = (0..300).map(|i| passage("ann", &"x".repeat(1 + i))).collect();
    store.insert_passages(&rows).await.unwrap();
    let cache = StoreTable::new(&store, TableId::Archival).row_cache();
    let first = Searchable::<Passage>::nearest(&store, &nearest_to(&rows[7].1, 10, false)).await.unwrap();
    assert_eq!(first.ranked[0].row.id, rows[7].0.id);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while cache.len() < rows.len() {
        assert!(std::time::Instant::now() < deadline, "filled {} of {} rows", cache.len(), rows.len());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reads = cache.reads();
    let other = Searchable::<Passage>::nearest(&store, &nearest_to(&rows[250].1, 50, false)).await.unwrap();
    assert_eq!(other.ranked.len(), 50);
    assert_eq!(other.ranked[0].row.id, rows[250].0.id);
    assert_eq!(cache.reads(), reads, "50 candidates, none read from the table");
}

/// A store directory replaced under an open store (deleted, then written again by another handle)
/// starts its row addresses again: the row cache notices that the table's version went down, and a
/// search finds the new rows, not the old ones it cached at the same addresses, or fails (docs:
/// restart a server after replacing its store directory).
#[tokio::test]
async fn a_directory_replaced_under_an_open_store_is_not_answered_from_its_old_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let path = path.to_str().unwrap();
    let store = LanceStore::open(path).await.unwrap();
    // the same lengths, so the same vectors (see `passage`), under other texts and ids
    let old: Vec<_> = (0..20).map(|i| passage("ann", &format!("o{i:02}{}", "x".repeat(i)))).collect();
    let new: Vec<_> = (0..20).map(|i| passage("ann", &format!("n{i:02}{}", "x".repeat(i)))).collect();
    for chunk in old.chunks(5) {
        store.insert_passages(chunk).await.unwrap();
    }
    let before = Searchable::<Passage>::nearest(&store, &nearest_to(&old[3].1, 5, false)).await.unwrap();
    assert_eq!(before.ranked[0].row.id, old[3].0.id);
    let at = before.ranked[0].row.row_id;
    assert_eq!(
        StoreTable::new(&store, TableId::Archival).row_cache().get(&[at], true)[0].as_ref().map(|r| r.id),
        Some(old[3].0.id)
    );

    std::fs::remove_dir_all(path).unwrap();
    LanceStore::open(path).await.unwrap().insert_passages(&new).await.unwrap();
    // Lance's metadata cache remembers each manifest's size by path, and the new table's manifests
    // differ in size from the old ones of the same numbers (a merge-insert's transaction records its
    // keys): the read may fail on the stale size. It must not answer from the old rows.
    let after = match Searchable::<Passage>::nearest(&store, &nearest_to(&new[3].1, 5, false)).await {
        Ok(after) => after,
        Err(e) => {
            assert!(e.to_string().contains("unexpected EOF"), "{e}");
            return;
        }
    };
    assert_eq!(after.ranked[0].row.row_id, at, "the new row sits at the old one's address");
    assert_eq!(after.ranked[0].row.id, new[3].0.id, "and is read as itself");
    assert!(after.ranked.iter().all(|s| new.iter().any(|(p, _)| p.id == s.row.id)), "only new rows");
}

#[test]
fn ef_grows_with_the_table_between_its_bounds() {
    assert_eq!(super::ann_ef(0, 50), 200, "4 x the limit");
    assert_eq!(super::ann_ef(100_000, 50), 200);
    assert_eq!(super::ann_ef(400_000, 50), 800, "one per 500 rows");
    assert_eq!(super::ann_ef(1_000_000, 50), 2_000);
    assert_eq!(super::ann_ef(10_000_000, 50), 2_000, "capped");
    assert_eq!(super::ann_ef(10_000_000, 1_000), 4_000, "a larger limit still gets 4 x");
    assert_eq!(super::ann_ef(0, 5), 100, "at least ANN_EF");
}

#[test]
fn identifier_phrases_are_the_adjacent_parts_of_each_identifier() {
    assert_eq!(
        identifier_phrases("tests/test_http.py::test_slow_server_lock_ttl: TimeoutError"),
        ["test http", "test slow", "slow server", "server lock", "lock ttl", "timeout error"]
    );
    assert_eq!(identifier_phrases("the emails-high queue"), ["emails high"]);
    assert_eq!(identifier_phrases("parseHTTPHeader ALLOWED_ORIGINS"), ["parse http", "http header", "allowed origins"]);
    assert!(identifier_phrases("read did not time out after 2 s").is_empty(), "no identifier of two parts");
    assert!(identifier_phrases("__init__ -- _x_").is_empty(), "empty parts are not parts");
    assert_eq!(identifier_phrases("lock_ttl lock_ttl LOCK_TTL"), ["lock ttl"], "each phrase once");
    let many: String = (0..100).map(|i| format!("a{i}_b{i} ")).collect();
    assert_eq!(identifier_phrases(&many).len(), MAX_IDENTIFIER_PHRASES);
}

#[test]
fn reach_words_are_the_query_s_words_once_each_identifiers_whole() {
    assert_eq!(
        reach_words("<script>alert(1)</script> in a Display-Name: display_name SCRIPT"),
        ["script", "alert", "1", "in", "a", "display-name", "display_name"]
    );
    assert!(reach_words(" :: -- __ ").is_empty());
    let many: String = (0..100).map(|i| format!("w{i} ")).collect();
    assert_eq!(reach_words(&many).len(), MAX_REACH_WORDS);
}

#[test]
fn a_word_no_fix_holds_counts_in_the_reach_as_much_as_the_best_matched_word() {
    // "script" matched (4.0), "the" matched weakly (0.5), three words matched nothing
    assert_eq!(reach_of(&[4.0, 0.5, 0.0, 0.0, 0.0]), 4.5 + 3.0 * 4.0, "the unmatched words are part of the query");
    assert_eq!(reach_of(&[0.0, 0.0]), 0.0, "nothing matched: no reach, the ranking is empty anyway");
    assert_eq!(reach_of(&[2.0, 3.0]), 5.0, "every word matched: the plain sum");
}

/// The reach of a fix search's keyword ranking is the sum of each query word's best BM25 score in the
/// column over every actor's rows, a word no row holds counted as the best word: no row scores above
/// it, and a row that holds one word of the query gets that word's share of it, not the whole. The
/// prose tables have none (their rankings are divided by their best score).
#[tokio::test]
async fn a_fix_search_s_reach_is_the_sum_of_each_word_s_best_score() {
    let dir = tempfile::tempdir().unwrap();
    let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
    let texts = [
        "Convert Windows line endings before splitting the uploaded script into lines",
        "Escape user text with html.escape before it goes into the email template",
        "Lowercase the email address before looking up the account",
        "The nightly export job retries three times",
    ];
    let rows: Vec<_> = texts.iter().map(|t| fix_row("ann", t)).chain([fix_row("bob", "unescaped unescaped")]).collect();
    for (fix, vector) in &rows {
        store.upsert_fix(fix, vector).await.unwrap();
    }
    let filter_of = |actor: &str| {
        <crate::domain::FixRecord as TableRow>::filter(&crate::store::FixFilter {
            actor_id: actor.into(),
            error_type: None,
        })
    };
    let query = "script rendered unescaped in the email zzqx";
    let ranked = StoreTable::new(&store, TableId::Fixes).keyword_rankings(&filter_of("ann"), query, 50).await.unwrap();
    let reach = ranked.reach.expect("a ranking that matched has a reach");
    let mut best_scores = Vec::new();
    for word in reach_words(query) {
        let alone =
            StoreTable::new(&store, TableId::Fixes).keyword_rankings(&filter_of("ann"), &word, 50).await.unwrap();
        let theirs =
            StoreTable::new(&store, TableId::Fixes).keyword_rankings(&filter_of("bob"), &word, 50).await.unwrap();
        best_scores.push(alone.rankings[0].iter().chain(&theirs.rankings[0]).map(|s| s.score).fold(0.0, f32::max));
    }
    assert_eq!(best_scores.iter().filter(|s| **s == 0.0).count(), 3, "`rendered`, `in` and `zzqx` match nothing");
    let sum = reach_of(&best_scores);
    assert!((reach - sum).abs() < 1e-3 * sum, "reach {reach}, the words' best scores make {sum}");
    let best = ranked.rankings[0].iter().map(|s| s.score).fold(0.0, f32::max);
    assert!(best < reach / 2.0, "no row of ann's holds half of what the query reaches: {best} of {reach}");
    // bob's row holds the rarest word of the query: it counts in the reach, not in ann's ranking
    assert!(ranked.rankings[0].iter().all(|s| rows[4].0.memory_id != s.row.id));

    let passages: Vec<_> = texts.iter().map(|t| passage("ann", t)).collect();
    store.insert_passages(&passages).await.unwrap();
    let archival = <crate::domain::Passage as TableRow>::filter(&crate::store::SearchFilter {
        actor_id: "ann".into(),
        ..Default::default()
    });
    let prose = StoreTable::new(&store, TableId::Archival).keyword_rankings(&archival, query, 50).await.unwrap();
    assert!(!prose.rankings[0].is_empty() && prose.reach.is_none(), "{:?}", prose.reach);
}
