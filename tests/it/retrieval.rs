//! Retrieval quality that ranking changes must keep: an identifier that one memory holds ranks that
//! memory first among look-alikes, and the fused search never loses to one of its own rankings on the
//! fix evaluation set (`astra-mcp-dev eval fixes`; both through the real model and LanceDB).

use std::sync::Arc;

use astra_mcp::eval::fixes::{EvalSet, compared, run};
use astra_mcp::memory::{Fusion, GateState};
use astra_mcp::store::lance::LanceStore;
use astra_mcp::tools::{ArchivalInsertOutput, ArchivalSearchOutput};
use serde_json::json;

use crate::support::{call, config, embedder, host, structured};

/// Twenty passages that differ only in one identifier (`kq0z`, `kq1z`, …): the query `widget kq0z`
/// shares its common word with all of them and its rare one with one. Rank fusion by position put the
/// right one third (a keyword rank of 1 instead of 2 was worth less than the vector's spread over the
/// look-alikes); fusion by score must put it first, for every one of the twenty, and say why.
#[tokio::test]
async fn an_identifier_ranks_its_passage_first_among_twenty_look_alikes() {
    let db = tempfile::tempdir().unwrap();
    let host = host(db.path(), config("ann", "p", None, None)).await;
    let s = GateState::new("s");
    let mut ids = Vec::new();
    for i in 0..20 {
        let text = format!("The nightly export job retries three times before it pages on-call about widget kq{i}z.");
        let out: ArchivalInsertOutput =
            structured(&call(&host, &s, "archival_memory_insert", json!({"text": text, "tags": []})).await);
        ids.push(out.id);
    }
    for (i, id) in ids.iter().enumerate() {
        let query = format!("widget kq{i}z");
        let found = call(
            &host,
            &s,
            "archival_memory_search",
            json!({"query": query, "tags": null, "top_k": 5, "start": null, "end": null}),
        )
        .await;
        let out: ArchivalSearchOutput = structured(&found);
        let first = &out.results[0];
        assert_eq!(&first.id, id, "`{query}` must rank its passage first: {}", found.text);
        let keyword = first.ranking.keyword.expect("the full-text ranking holds it");
        assert_eq!(keyword.rank, 1, "BM25 ranks the only holder of the rare token first");
        assert!(keyword.score > 0.0);
        let vector = first.ranking.vector.expect("a table of 20 rows is all in the vector ranking");
        assert!((vector.score - first.score).abs() < 1e-3, "the vector ranking's score is the cosine");
        assert_eq!(first.ranking.own_text, None, "passages have no own-text ranking");
        assert!(first.fused_score > out.results[1].fused_score, "strictly first: {}", found.text);
    }
}

/// On the bundled fix evaluation set, through `search_codebase_memory`'s search, on both splits (tune,
/// held out): every identifier query ranks its fix first; for symptoms the fused search puts the right
/// fix first at least as often as the better of its two rankings alone, and on the held-out split (never
/// tuned on) for at least 0.90 of them (issue 26); for paraphrases (a symptom in other words that shares
/// one incidental word with another fix, issue 53) the right fix is in the top 3 every time and first
/// for at least 0.80 of them, where BM25's share of the query's reach, not cubed, put it first for about
/// half (the figures are in BENCHMARKS.md).
#[tokio::test]
async fn fix_search_never_loses_to_its_own_rankings_and_finds_every_identifier() {
    let db = tempfile::tempdir().unwrap();
    let store = LanceStore::open(db.path().to_str().unwrap()).await.unwrap();
    let report = run(Arc::new(store), embedder(), &EvalSet::bundled(), &compared(Fusion::fixes())).await.unwrap();
    let [fused, vector, bm25] = &report.runs[..] else { panic!("three runs: {report:?}") };
    for split in ["tune", "held_out"] {
        let identifier = &fused.groups[&format!("{split}/identifier")];
        assert_eq!(identifier.hit_at_1, 1.0, "{split}: every identifier query ranks its fix first: {report:#?}");
        let group = format!("{split}/symptom");
        let best_part = vector.groups[&group].hit_at_1.max(bm25.groups[&group].hit_at_1);
        assert!(
            fused.groups[&group].hit_at_1 >= best_part,
            "{split}: fused hit@1 {} < the better ranking alone {best_part}: {report:#?}",
            fused.groups[&group].hit_at_1
        );
        let paraphrase = &fused.groups[&format!("{split}/paraphrase")];
        assert_eq!(paraphrase.hit_at_3, 1.0, "{split}: every paraphrase finds its fix in the top 3: {report:#?}");
        assert!(paraphrase.hit_at_1 >= 0.80, "{split}: paraphrases first {} < 0.80: {report:#?}", paraphrase.hit_at_1);
    }
    let held_out = fused.groups["held_out/symptom"].hit_at_1;
    assert!(held_out >= 0.90, "held-out symptoms: the right fix first for {held_out} < 0.90 of them: {report:#?}");
    // the usage replay ranks the later query of each paraphrase and identifier pair, and the symptoms of
    // every other look-alike of a cause; with no boost, as the product ranks
    let replay = &report.usage_replay;
    assert_eq!(replay.iter().map(|r| r.boost).collect::<Vec<_>>(), [0.0, 0.01, 0.05, 0.2]);
    let later = |kind: &str| {
        ["tune", "held_out"].map(|s| replay[0].groups[&format!("{s}/{kind}")].queries).iter().sum::<usize>()
    };
    assert_eq!([later("paraphrase"), later("identifier"), later("symptom")], [60, 20, 100], "{replay:#?}");
}
