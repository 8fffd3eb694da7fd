//! Hybrid retrieval shared by archival memory, conversation search and fix memory: the vector and full-text (BM25)
//! rankings of one query, both filtered before ranking, fused by their scores ([`score_fusion`]).

use std::collections::HashMap;
use std::sync::Arc;

use uuid::Uuid;

use super::MemoryError;
use super::fusion::{RankScore, Ranking, ScoreKind, score_fusion};
use crate::embed::LazyEmbedder;
use crate::store::{
    Candidates, KeywordRankings, Query, QueryFilter, RowRef, Searchable, SearchedRow, StageTimings, StoreError,
    VectorRanking,
};

/// Default of `--min-score`: the cosine floor of matches without a keyword hit.
pub const DEFAULT_MIN_SCORE: f32 = 0.10;

/// How a table's rankings are fused ([`score_fusion`]): `score = vector_weight · cosine + keyword_weight
/// · (bm25 / reach)^keyword_exponent + exact_weight · bm25_exact / best_bm25_exact` (the reach: what the
/// query's words could score at best for fixes, [`KeywordRankings::reach`]; elsewhere the best row's
/// score), the last over the table's second
/// full-text ranking ([`Candidates::by_exact`](crate::store::Candidates::by_exact)): a conversation item's
/// own text, a fix's identifier phrases.
///
/// The weights of each table are set here, in [`Fusion::fixes`], [`Fusion::archival`] and
/// [`Fusion::conversation`], and were chosen on evaluations (`astra-mcp-dev eval fixes`, tune split only;
/// `astra-mcp-dev eval locomo`; docs/retrieval.md has the figures).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    /// Weight of the cosine of the vector ranking.
    pub vector_weight: f32,
    /// Weight of the relative BM25 score of the full-text ranking (conversation items: in context).
    pub keyword_weight: f32,
    /// The power that score is raised to ([`Ranking::exponent`]): 1
    /// counts a row's share of what the query reaches as it is; 3 (fixes) counts a row that holds one
    /// incidental word of a symptom for next to nothing and a row holding all of it in full.
    pub keyword_exponent: f32,
    /// Weight of the relative BM25 score of the second full-text ranking: over a conversation item's own
    /// text, or of a fix search's identifier phrases (none for archival passages).
    pub exact_weight: f32,
    /// Candidates fetched from each ranking: `max(top_k * 5, candidates)`.
    pub candidates: usize,
    /// Hits below this cosine are dropped unless a full-text ranking also found them.
    pub min_score: f32,
}

impl Fusion {
    /// Fixes: short, structured texts (error type, fix, the failing tests seen), full-text indexed with
    /// Lance's code analyzer. The symptom a later agent searches with is worded apart from the fix, so the
    /// embedding carries much of the match; BM25 of its words, and as much BM25 of its identifier phrases
    /// (`test_slow_server_lock_ttl` holds `lock ttl`, which `cache_ttl`'s fix lacks), decide between
    /// look-alikes. A symptom in other words shares at most an incidental word with some other fix: its
    /// BM25 share of the query's reach, cubed, counts for next to nothing. Chosen on the tune split of
    /// `astra-mcp-dev eval fixes` (hit@1, symptom / paraphrase queries): exponent 1 and keyword weight 0.75 →
    /// 0.987 / 0.625; exponent 2, 1.5 → 0.987 / 0.863; exponent 3, 1.5 → 0.954 / 0.925; exponent 4, 2 →
    /// 0.908 / 0.938 (docs/retrieval.md). Identifier weight 0 → 0.908 symptom hit@1, 0.5 → 0.974, 1 → 0.987.
    pub const fn fixes() -> Self {
        Self {
            vector_weight: 1.0,
            keyword_weight: 1.5,
            keyword_exponent: 3.0,
            exact_weight: 1.0,
            candidates: 50,
            min_score: DEFAULT_MIN_SCORE,
        }
    }

    /// Archival passages: prose, full-text indexed like conversation items (stemmed), so weighted like
    /// their vector and in-context rankings.
    pub const fn archival() -> Self {
        Self {
            vector_weight: 1.0,
            keyword_weight: 1.0,
            keyword_exponent: 1.0,
            exact_weight: 0.0,
            candidates: 50,
            min_score: DEFAULT_MIN_SCORE,
        }
    }

    /// Conversation items: chatty turns; BM25 over the item in its context (date, previous turns)
    /// carries most of the match on LoCoMo, the embedding of the turn itself as much, and BM25 over the
    /// turn's own text a little (it decides between a message and the replies that quote it).
    pub const fn conversation() -> Self {
        Self {
            vector_weight: 1.0,
            keyword_weight: 1.0,
            keyword_exponent: 1.0,
            exact_weight: 0.25,
            candidates: 50,
            min_score: DEFAULT_MIN_SCORE,
        }
    }

    /// Candidates to fetch from each ranking for `top_k` results.
    pub fn limit(&self, top_k: usize) -> usize {
        (top_k * 5).max(self.candidates)
    }
}

/// Where one hit stood in each ranking, and so why it ranked where it did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Ranked {
    /// In the vector ranking (its score is the cosine).
    pub vector: Option<RankScore>,
    /// In the full-text (BM25) ranking (conversation items: over the item in its context).
    pub keyword: Option<RankScore>,
    /// In the second full-text ranking ([`Fusion::exact_weight`]): over a conversation item's own text,
    /// or of a fix search's identifier phrases.
    pub exact: Option<RankScore>,
}

/// One fused result.
#[derive(Debug, Clone)]
pub struct Hit<T> {
    pub row: T,
    /// Cosine similarity of the query with the row's embedding.
    pub score: f32,
    /// The fused score that ordered the results ([`score_fusion`]).
    pub fused_score: f32,
    /// Did a full-text (BM25) ranking contain this row?
    pub keyword_hit: bool,
    /// Each ranking's rank and score of this row.
    pub ranked: Ranked,
}

/// Fuses the rankings of `candidates` (rows identified by `id`) and keeps the best `top_k`; `limit` is
/// how many rows each ranking was asked for (a ranking that returned as many was cut).
pub fn fuse<T>(
    candidates: Candidates<T>,
    id: impl Fn(&T) -> Uuid,
    fusion: &Fusion,
    top_k: usize,
    limit: usize,
) -> Vec<Hit<T>> {
    let ranking = |scored: &[crate::store::Scored<T>], kind, weight, reach, exponent| Ranking {
        entries: scored.iter().map(|c| (id(&c.row), c.score, c.rank)).collect(),
        kind,
        weight,
        cut: scored.len() >= limit,
        reach,
        exponent,
    };
    let rankings = [
        ranking(&candidates.by_vector, ScoreKind::Cosine, fusion.vector_weight, None, 1.0),
        ranking(
            &candidates.by_keyword,
            ScoreKind::Bm25,
            fusion.keyword_weight,
            candidates.keyword_reach,
            fusion.keyword_exponent,
        ),
        ranking(&candidates.by_exact, ScoreKind::Bm25, fusion.exact_weight, None, 1.0),
    ];
    // the first ranking a row appears in provides it: the vector ranking's carries the cosine
    let mut by_id: HashMap<Uuid, _> = HashMap::new();
    for c in candidates.by_vector.into_iter().chain(candidates.by_keyword).chain(candidates.by_exact) {
        by_id.entry(id(&c.row)).or_insert(c);
    }
    let mut hits = Vec::new();
    for f in score_fusion(&rankings) {
        let ranked = Ranked { vector: f.ranked[0], keyword: f.ranked[1], exact: f.ranked[2] };
        let keyword_hit = ranked.keyword.is_some() || ranked.exact.is_some();
        let Some(candidate) = by_id.remove(&f.key) else { continue };
        if candidate.cosine < fusion.min_score && !keyword_hit {
            continue;
        }
        hits.push(Hit { row: candidate.row, score: candidate.cosine, fused_score: f.score, keyword_hit, ranked });
        if hits.len() == top_k {
            break;
        }
    }
    hits
}

/// Logs one search's stage timings at debug level under target `astra_mcp::search` (`--log
/// astra_mcp::search=debug`), all in ms: `embed_ms` (the query's embedding), the store's [`StageTimings`]
/// (the full-text queries overlap the embedding), and `total_ms` from the request to the fused hits.
/// `bench/run` reads these lines to split the latency it measures over stdio.
pub(crate) fn log_timings(search: &'static str, embed_ms: f64, store: &StageTimings, total_ms: f64) {
    tracing::debug!(
        target: "astra_mcp::search",
        search,
        embed_ms,
        keyword_ms = store.keyword_ms,
        vector_ms = store.vector_ms,
        rows_ms = store.rows_ms,
        total_ms,
        "search timings"
    );
}

/// The fused `hits` (row references, from [`fuse`]) over their `rows` (read for them, matched by `id`),
/// each scored by the cosine of its stored vector with `query`, in the same order; a hit whose row is
/// gone (forgotten meanwhile) is dropped.
pub(crate) fn with_rows<T>(
    hits: Vec<Hit<RowRef>>,
    rows: Vec<(T, Vec<f32>)>,
    id: impl Fn(&T) -> Uuid,
    query: &[f32],
) -> Vec<Hit<T>> {
    let mut by_id: HashMap<Uuid, (T, Vec<f32>)> = rows.into_iter().map(|(row, v)| (id(&row), (row, v))).collect();
    hits.into_iter()
        .filter_map(|hit| {
            let (row, vector) = by_id.remove(&hit.row.id)?;
            Some(Hit {
                row,
                score: crate::embed::cosine(query, &vector),
                fused_score: hit.fused_score,
                keyword_hit: hit.keyword_hit,
                ranked: hit.ranked,
            })
        })
        .collect()
}

/// How many refs of each keyword ranking a search of `top_k` results reads the rows of while the query
/// is embedded ([`Search::run`]): `2 × top_k`. A hit outside the keyword rankings' first `2 × top_k` is
/// rare, so the read after fusion is mostly gone from the path. Measured under the earlier rank fusion:
/// `top_k` alone left about half of it (hits at keyword ranks 11–20 that the vector ranking also holds);
/// 30 was no better than 20 (docs/internals/search-latency.md, "Prefetch in the embedding's shadow").
pub(crate) fn prefetch(top_k: usize) -> usize {
    2 * top_k
}

/// The rows of the fused `hits`: those among `prefetched` (read while the query was embedded, see
/// [`Search::run`]), and the others read by `read`, which gets their refs and
/// returns the rows still stored. In no particular order ([`with_rows`] matches them by `id`).
///
/// # Errors
/// Those of `read`.
pub(crate) async fn hit_rows<T, Fut>(
    hits: &[Hit<RowRef>],
    prefetched: Vec<(T, Vec<f32>)>,
    id: impl Fn(&T) -> Uuid,
    read: impl FnOnce(Vec<RowRef>) -> Fut,
) -> Result<Vec<(T, Vec<f32>)>, StoreError>
where
    Fut: Future<Output = Result<Vec<(T, Vec<f32>)>, StoreError>>,
{
    let wanted: std::collections::HashSet<Uuid> = hits.iter().map(|h| h.row.id).collect();
    let mut rows: Vec<(T, Vec<f32>)> = prefetched.into_iter().filter(|(row, _)| wanted.contains(&id(row))).collect();
    let have: std::collections::HashSet<Uuid> = rows.iter().map(|(row, _)| id(row)).collect();
    let missing: Vec<RowRef> = hits.iter().map(|h| h.row).filter(|r| !have.contains(&r.id)).collect();
    if !missing.is_empty() {
        rows.extend(read(missing).await?);
    }
    Ok(rows)
}

/// One hybrid search, the shape archival memory, conversation search and fix memory share: the query is
/// embedded while its full-text rankings run, the vector ranking starts as soon as the embedding is
/// done (beside full-text rankings still running), then the fusion and the read of the hits' rows
/// follow. Built by each search with its table's operations ([`Search::run`]).
pub(crate) struct Search<'a> {
    /// Names the search in the timings log line ([`log_timings`]): `archival`, `conversation`, `fixes`.
    pub name: &'static str,
    pub embedder: &'a LazyEmbedder,
    /// The query text as searched (already redacted).
    pub query: &'a str,
    pub fusion: &'a Fusion,
    pub top_k: usize,
    /// When the request arrived: `total_ms` of the timings counts from here.
    pub started: std::time::Instant,
}

impl Search<'_> {
    /// Runs the search over `table` for `query` (whose vector is filled in once the query is embedded):
    /// [`Self::run`] with the table's three steps. What archival memory, conversation search and fix
    /// memory each call.
    ///
    /// # Errors
    /// Those of [`Self::run`].
    pub(crate) async fn over<T: SearchedRow>(
        self,
        table: Arc<dyn Searchable<T>>,
        query: Query<T::Filter>,
    ) -> Result<Vec<Hit<T>>, MemoryError> {
        let rank = {
            let (table, query) = (Arc::clone(&table), query.clone());
            move |vector| async move { table.nearest(&query.with_vector(vector)).await }
        };
        let (table, actor_id) = (&table, query.filter.actor_id());
        let read = move |refs: Vec<RowRef>| async move { table.rows(actor_id, &refs).await };
        self.run(table.keyword(&query), rank, read, T::id).await
    }

    /// Runs the search. Two branches run at once:
    /// - the query's embedding (on the blocking pool; `[f32; 384]`, L2-normalized), then `rank` of it
    ///   (the vector ranking), spawned as its own task (on the server's multi-thread runtime it can run
    ///   on another worker thread than the other branch; aborted when the search is dropped);
    /// - `keyword` (the full-text rankings, which need no vector), then, when the vector ranking is not
    ///   done yet, a read of the rows of their tops ([`KeywordRankings::tops`] of [`prefetch`]`(top_k)`):
    ///   a search's hits are nearly always among them, so the read after fusion mostly disappears.
    ///
    /// On a small table the full-text rankings finish before the embedding, so the vector ranking runs
    /// alone; on a large one (about 15 ms at 1M rows) they outlast it, and the vector ranking no longer
    /// waits for them (docs/internals/search-latency.md, "The vector ranking does not wait for the
    /// full-text rankings").
    /// Then [`fuse`] keeps `top_k`, `read` returns the rows still stored for the hits not read yet
    /// (matched by `id`), and each hit is scored by its row's cosine with the query ([`with_rows`]).
    ///
    /// # Errors
    /// [`MemoryError::Embed`] when the query cannot be embedded, [`MemoryError::Store`] when a ranking or a
    /// read fails (or the vector ranking's task panics).
    async fn run<T, K, Rank, RankFut, Read, ReadFut>(
        self,
        keyword: K,
        rank: Rank,
        read: Read,
        id: impl Fn(&T) -> Uuid + Copy,
    ) -> Result<Vec<Hit<T>>, MemoryError>
    where
        K: Future<Output = Result<KeywordRankings, StoreError>>,
        Rank: FnOnce(Vec<f32>) -> RankFut,
        RankFut: Future<Output = Result<VectorRanking, StoreError>> + Send + 'static,
        Read: FnOnce(Vec<RowRef>) -> ReadFut + Copy,
        ReadFut: Future<Output = Result<Vec<(T, Vec<f32>)>, StoreError>>,
    {
        use std::sync::atomic::{AtomicBool, Ordering};
        let ranked = AtomicBool::new(false);
        let embed_then_rank = async {
            let started = std::time::Instant::now();
            let vector = self.embedder.embed_query(self.query).await;
            let embed_ms = ms_since(started);
            let vector = vector?;
            // aborted when the call is (the handle is dropped with this future)
            let ranking = AbortOnDrop(tokio::spawn(rank(vector.clone()))).await;
            ranked.store(true, Ordering::Release);
            let ranking = ranking.map_err(|e| {
                // a panic's message is for the log, not for the client
                tracing::error!(target: "astra_mcp::search", search = self.name, "the vector ranking's task failed: {e}");
                StoreError::Backend("the vector ranking failed (the server's log has the cause); try the search again".into())
            })??;
            Ok::<_, MemoryError>((vector, embed_ms, ranking))
        };
        let keyword_then_prefetch = async {
            let keyword = keyword.await?;
            let tops = if ranked.load(Ordering::Acquire) { Vec::new() } else { keyword.tops(prefetch(self.top_k)) };
            let rows = if tops.is_empty() { Vec::new() } else { read(tops).await? };
            Ok::<_, MemoryError>((keyword, rows))
        };
        // the embedding is polled first, so the model starts before the full-text query's first CPU work;
        // the first branch to fail ends the search (the other is dropped, its vector ranking aborted)
        let ((vector, embed_ms, ranking), (keyword, prefetched)) =
            tokio::try_join!(embed_then_rank, keyword_then_prefetch)?;
        let candidates = Candidates::join(ranking, keyword);
        let mut timings = candidates.timings;
        let hits = fuse(candidates, |r| r.id, self.fusion, self.top_k, self.fusion.limit(self.top_k));
        let reading = std::time::Instant::now();
        let rows = hit_rows(&hits, prefetched, id, read).await?;
        let hits = with_rows(hits, rows, id, &vector);
        timings.rows_ms = ms_since(reading);
        log_timings(self.name, embed_ms, &timings, ms_since(self.started));
        Ok(hits)
    }
}

/// A spawned task that is aborted when its handle is dropped unfinished (a cancelled call stops its
/// vector ranking). `tokio_util::task::AbortOnDropHandle` does this, behind a feature that would rebuild
/// half the dependency tree.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0).poll(cx)
    }
}

/// Milliseconds since `t`.
pub(crate) fn ms_since(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    //! Stub embedder and stub rankings, on purpose: each test provokes an order or a failure that the
    //! real model and LanceDB cannot be made to produce on demand — full-text rankings that finish only
    //! after the vector ranking ran (real ones race, and a test passing in either order proves nothing),
    //! a ranking that panics (a bug), a search dropped while its vector ranking runs, a full-text index
    //! that fails, and which rows a read is asked for. The same `Search::run` on the real stack, with its
    //! results, is tested in tests/it (retrieval.rs, tiered.rs, and the search timings of bench/).

    use super::*;

    fn hit(id: Uuid) -> Hit<RowRef> {
        Hit {
            row: RowRef { id, row_id: 0 },
            score: f32::NAN,
            fused_score: 0.0,
            keyword_hit: true,
            ranked: Ranked::default(),
        }
    }

    /// Embeds every text as the same unit vector, at once: the searches below test scheduling, not
    /// the model.
    struct SameVector;

    impl crate::embed::Embedder for SameVector {
        fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, crate::embed::EmbedError> {
            Ok(texts.iter().map(|_| unit()).collect())
        }
    }

    fn unit() -> Vec<f32> {
        let mut v = vec![0.0; 384];
        v[0] = 1.0;
        v
    }

    fn scored(id: Uuid) -> crate::store::Scored<RowRef> {
        crate::store::Scored { row: RowRef { id, row_id: 0 }, cosine: 1.0, score: 1.0, rank: 1 }
    }

    /// Runs one search over `keyword` and `rank`; every ref reads as a row with [`unit`] as its vector.
    async fn search<K, Rank, RankFut>(keyword: K, rank: Rank) -> Result<Vec<Hit<Uuid>>, MemoryError>
    where
        K: Future<Output = Result<KeywordRankings, StoreError>>,
        Rank: FnOnce(Vec<f32>) -> RankFut,
        RankFut: Future<Output = Result<VectorRanking, StoreError>> + Send + 'static,
    {
        let embedder = LazyEmbedder::ready(std::sync::Arc::new(SameVector));
        let fusion = Fusion::archival();
        let search = Search {
            name: "test",
            embedder: &embedder,
            query: "q",
            fusion: &fusion,
            top_k: 5,
            started: std::time::Instant::now(),
        };
        let read = |refs: Vec<RowRef>| async move { Ok(refs.iter().map(|r| (r.id, unit())).collect()) };
        search.run(keyword, rank, read, |id: &Uuid| *id).await
    }

    #[tokio::test]
    async fn the_vector_ranking_does_not_wait_for_the_keyword_rankings() {
        let [by_vector, by_keyword] = [1u128, 2].map(Uuid::from_u128);
        // the full-text rankings finish only once the vector ranking has run: a search that started
        // the vector ranking after them would never finish
        let (ranked, ranked_rx) = tokio::sync::oneshot::channel::<()>();
        let keyword = async move {
            ranked_rx.await.expect("the vector ranking ran");
            Ok(KeywordRankings { rankings: vec![vec![scored(by_keyword)]], reach: None, ms: 0.0 })
        };
        let rank = move |vector: Vec<f32>| async move {
            assert_eq!(vector, unit(), "the vector ranking gets the query's embedding");
            ranked.send(()).unwrap();
            Ok(VectorRanking { ranked: vec![scored(by_vector)], ms: 0.0 })
        };
        let hits = tokio::time::timeout(std::time::Duration::from_secs(10), search(keyword, rank))
            .await
            .expect("the search finished: its vector ranking ran while the keyword rankings were still running")
            .unwrap();
        let mut got: Vec<Uuid> = hits.iter().map(|h| h.row).collect();
        got.sort();
        assert_eq!(got, vec![by_vector, by_keyword], "both rankings' rows are fused");
        assert!(hits.iter().find(|h| h.row == by_keyword).unwrap().keyword_hit);
    }

    #[tokio::test]
    async fn a_panicking_vector_ranking_fails_the_search_with_an_error() {
        let keyword = async { Ok(KeywordRankings::default()) };
        let rank = |_: Vec<f32>| async {
            if unit()[0] > 0.0 {
                panic!("a bug in the ranking");
            }
            Ok(VectorRanking::default())
        };
        let err = search(keyword, rank).await.unwrap_err();
        assert!(matches!(err, MemoryError::Store(StoreError::Backend(_))), "{err:?}");
        assert!(err.to_string().contains("the vector ranking failed"), "{err}");
        assert!(!err.to_string().contains("a bug in the ranking"), "the panic's message stays in the log: {err}");
    }

    #[tokio::test]
    async fn a_cancelled_search_stops_its_vector_ranking() {
        struct SetOnDrop(std::sync::Arc<std::sync::atomic::AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (started, started_rx) = tokio::sync::oneshot::channel::<()>();
        let guard = SetOnDrop(dropped.clone());
        let rank = move |_: Vec<f32>| async move {
            let _guard = guard;
            started.send(()).unwrap();
            std::future::pending::<Result<VectorRanking, StoreError>>().await
        };
        let keyword = std::future::pending::<Result<KeywordRankings, StoreError>>();
        tokio::select! {
            _ = search(keyword, rank) => panic!("the search cannot finish"),
            r = started_rx => r.unwrap(),
        }
        // the search future is dropped (the call was cancelled): its spawned ranking must stop too
        for _ in 0..500 {
            if dropped.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the vector ranking's task still runs 5 s after its search was dropped");
    }

    #[tokio::test]
    async fn a_failing_keyword_ranking_ends_the_search_without_waiting_for_the_vector_ranking() {
        let keyword = async { Err(StoreError::Backend("the full-text index is broken".into())) };
        // a vector ranking that never finishes: the search must not wait for it
        let rank = |_: Vec<f32>| std::future::pending::<Result<VectorRanking, StoreError>>();
        let err = tokio::time::timeout(std::time::Duration::from_secs(10), search(keyword, rank))
            .await
            .expect("the search ended on the keyword ranking's error")
            .unwrap_err();
        assert!(err.to_string().contains("the full-text index is broken"), "{err}");
    }

    #[tokio::test]
    async fn hit_rows_reads_only_the_hits_not_prefetched() {
        let [a, b, c, other] = [1u128, 2, 3, 4].map(Uuid::from_u128);
        let hits = [hit(a), hit(b), hit(c)];
        let prefetched = vec![(a, vec![1.0]), (other, vec![4.0]), (c, vec![3.0])];
        let mut asked = Vec::new();
        let rows = hit_rows(
            &hits,
            prefetched,
            |id| *id,
            |missing| {
                asked = missing.iter().map(|r| r.id).collect();
                async move { Ok(missing.iter().map(|r| (r.id, vec![2.0])).collect()) }
            },
        )
        .await
        .unwrap();
        assert_eq!(asked, vec![b], "only the hit not prefetched is read");
        let mut got: Vec<(Uuid, f32)> = rows.into_iter().map(|(id, v)| (id, v[0])).collect();
        got.sort_by_key(|(id, _)| *id);
        assert_eq!(got, vec![(a, 1.0), (b, 2.0), (c, 3.0)], "a prefetched row that is no hit is dropped");

        let mut called = false;
        let all = hit_rows(
            &hits[..1],
            vec![(a, vec![1.0])],
            |id| *id,
            |_| {
                called = true;
                async { Ok(Vec::new()) }
            },
        )
        .await
        .unwrap();
        assert!(!called && all.len() == 1, "nothing is read when every hit was prefetched");
    }
}
