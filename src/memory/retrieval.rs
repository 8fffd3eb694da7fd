//! Hybrid retrieval shared by archival memory and conversation search: the vector and full-text (BM25)
//! rankings of one query, both filtered before ranking, fused by weighted reciprocal rank fusion.

use std::collections::HashMap;

use uuid::Uuid;

use super::fusion::weighted_reciprocal_rank_fusion;
use crate::embed::{EmbedError, LazyEmbedder};
use crate::store::{Candidates, KeywordRankings, RowRef, StageTimings, StoreError};

/// How the rankings are fused: `score = keyword_weight / (k + rank_bm25) + vector_weight / (k +
/// rank_vector)`, plus `own_text_weight / (k + rank_own)` for conversation items, whose BM25 ranking
/// over the item in its context is joined by one over the item's own text. The defaults (k = 10, weights 1 and 0.25) were chosen on the LoCoMo evaluation
/// (`astra-mcp eval locomo`, README "Benchmarks"), where plain RRF (k = 60, equal weights) lost to BM25
/// alone; the flat neighbourhood (k 5–20, vector weight 0.15–0.4) scored within 0.01. With them an exact
/// identifier the embedding misses (`E0502`) still ranks first on its keyword match alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    /// RRF constant k (Cormack et al. 2009 use 60).
    pub k: f32,
    /// Weight of the vector (cosine) ranking.
    pub vector_weight: f32,
    /// Weight of the full-text (BM25) ranking (for conversation items: over the item in its context).
    pub keyword_weight: f32,
    /// Weight of the BM25 ranking over a conversation item's own text (absent elsewhere).
    pub own_text_weight: f32,
    /// Candidates fetched from each ranking: `max(top_k * 5, candidates)`.
    pub candidates: usize,
    /// Hits below this cosine are dropped unless the keyword ranking also found them.
    pub min_score: f32,
}

impl Default for Fusion {
    fn default() -> Self {
        Self {
            k: 10.0,
            vector_weight: 0.25,
            keyword_weight: 1.0,
            own_text_weight: 0.5,
            candidates: 50,
            min_score: 0.10,
        }
    }
}

impl Fusion {
    /// Candidates to fetch from each ranking for `top_k` results.
    pub fn limit(&self, top_k: usize) -> usize {
        (top_k * 5).max(self.candidates)
    }
}

/// One fused result.
#[derive(Debug, Clone)]
pub struct Hit<T> {
    pub row: T,
    /// Cosine similarity of the query with the row's embedding.
    pub score: f32,
    /// Weighted RRF score that ordered the results.
    pub fused_score: f32,
    /// Did a full-text (BM25) ranking contain this row?
    pub keyword_hit: bool,
}

/// Fuses both rankings of `candidates` (rows identified by `id`) and keeps the best `top_k`.
pub fn fuse<T>(candidates: Candidates<T>, id: impl Fn(&T) -> Uuid, fusion: &Fusion, top_k: usize) -> Vec<Hit<T>> {
    let vector_ids: Vec<Uuid> = candidates.by_vector.iter().map(|c| id(&c.row)).collect();
    let keyword_ids: Vec<Uuid> = candidates.by_keyword.iter().map(|c| id(&c.row)).collect();
    let own_ids: Vec<Uuid> = candidates.by_own_text.iter().map(|c| id(&c.row)).collect();
    // the first ranking a row appears in provides it: the vector ranking's carries the cosine
    let mut by_id: HashMap<Uuid, _> = HashMap::new();
    for c in candidates.by_vector.into_iter().chain(candidates.by_keyword).chain(candidates.by_own_text) {
        by_id.entry(id(&c.row)).or_insert(c);
    }
    let mut hits = Vec::new();
    let fused = weighted_reciprocal_rank_fusion(
        &[vector_ids, keyword_ids, own_ids],
        &[fusion.vector_weight, fusion.keyword_weight, fusion.own_text_weight],
        fusion.k,
    );
    for f in fused {
        let keyword_hit = f.ranks[1].is_some() || f.ranks[2].is_some();
        let Some(candidate) = by_id.remove(&f.key) else { continue };
        if candidate.cosine < fusion.min_score && !keyword_hit {
            continue;
        }
        hits.push(Hit { row: candidate.row, score: candidate.cosine, fused_score: f.score, keyword_hit });
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
            })
        })
        .collect()
}

/// How many refs of each keyword ranking a search of `top_k` results reads the rows of while the query
/// is embedded ([`embed_alongside`]): `2 × top_k`. With the fusion's weights
/// (keyword 1, vector 0.25) a hit outside the keyword rankings' first `2 × top_k` is rare, so the read
/// after fusion is mostly gone from the path. `top_k` alone left about half of it (hits at keyword ranks
/// 11–20 that the vector ranking also holds); 30 was no better than 20 (BENCHMARKS.md).
pub(crate) fn prefetch(top_k: usize) -> usize {
    2 * top_k
}

/// The rows of the fused `hits`: those among `prefetched` (read while the query was embedded, see
/// [`embed_alongside`]), and the others read by `read`, which gets their refs and
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

/// The full-text rankings of a search, and the rows of their tops when they were read in the
/// embedding's shadow (see [`embed_alongside`]; empty otherwise).
pub(crate) type KeywordWithRows<T> = (KeywordRankings, Vec<(T, Vec<f32>)>);

/// Embeds `query` while `keyword` (the full-text rankings, which need no vector) runs, so they overlap
/// the model's work (on the blocking pool). When the rankings are done before the embedding, the rows of
/// their tops ([`KeywordRankings::tops`] of [`prefetch`]`(top_k)`) are read by `read` in the time left:
/// a search's hits are nearly always among them, so the read after fusion mostly disappears. When the
/// embedding is done first (a large table's full-text query can outlast it), nothing is prefetched, since
/// that read would now delay the vector ranking. Returns the embedding (`[f32; 384]`, L2-normalized), the
/// embedding's own time in ms, and the rankings with the rows prefetched.
pub(crate) async fn embed_alongside<T, K, R, F>(
    embedder: &LazyEmbedder,
    query: &str,
    keyword: K,
    top_k: usize,
    read: R,
) -> (Result<Vec<f32>, EmbedError>, f64, Result<KeywordWithRows<T>, StoreError>)
where
    K: Future<Output = Result<KeywordRankings, StoreError>>,
    R: FnOnce(Vec<RowRef>) -> F,
    F: Future<Output = Result<Vec<(T, Vec<f32>)>, StoreError>>,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    let embedded = AtomicBool::new(false);
    let embed = async {
        let started = std::time::Instant::now();
        let vector = embedder.embed_query(query).await;
        embedded.store(true, Ordering::Release);
        (vector, ms_since(started))
    };
    let keyword = async {
        let keyword = keyword.await?;
        let tops = if embedded.load(Ordering::Acquire) { Vec::new() } else { keyword.tops(prefetch(top_k)) };
        let rows = if tops.is_empty() { Vec::new() } else { read(tops).await? };
        Ok((keyword, rows))
    };
    let ((vector, embed_ms), keyword) = tokio::join!(embed, keyword);
    (vector, embed_ms, keyword)
}

/// Milliseconds since `t`.
pub(crate) fn ms_since(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(id: Uuid) -> Hit<RowRef> {
        Hit { row: RowRef { id, row_id: 0 }, score: f32::NAN, fused_score: 0.0, keyword_hit: true }
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
