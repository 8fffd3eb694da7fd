//! Benchmark helpers behind `astra-mcp-dev bench` (BENCHMARKS.md; the harness is `bench/run`):
//! - [`embed_throughput`]: the embedder's own texts/s at a batch size, the baseline ingest is held to;
//! - [`populate`]: a large archival table in minutes, for the 100k and 1M search measurements: real texts
//!   beside vectors derived from real embeddings (each row's vector is one of `base` real embeddings plus
//!   seeded noise, L2-normalized, so the store has the clustered shape of real data);
//! - [`recall`]: recall@k of the indexed (ANN) vector search against exact search on the same queries.
//!
//! Nothing here is reachable by a client of the server.

use std::time::Instant;

use crate::domain::{Passage, Scope, passage_id};
use crate::embed::{DIMENSION, EmbedError, LazyEmbedder};
use crate::store::StoreError;
use crate::store::lance::{LanceStore, TableId};

/// Errors of the helpers.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Embed(#[from] EmbedError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Input(String),
}

/// Texts per second over `texts` in calls of `batch` texts, after one warm-up call: of
/// `embed_documents` (what the server and `memory ingest` do with a call, [`crate::embed::Embedder`]),
/// or with `one_batch` of `embed_one_batch`, each call one ONNX batch (what another runtime does with a
/// batch of that size).
///
/// # Errors
/// The model cannot be loaded or run.
pub async fn embed_throughput(
    embedder: &LazyEmbedder,
    texts: &[String],
    batch: usize,
    one_batch: bool,
) -> Result<f64, BenchError> {
    let batch = batch.max(1);
    let embed = |chunk: Vec<String>| async move {
        if one_batch { embedder.embed_one_batch(chunk).await } else { embedder.embed_documents(chunk).await }
    };
    embed(texts.iter().take(batch).cloned().collect()).await?;
    let started = Instant::now();
    for chunk in texts.chunks(batch) {
        embed(chunk.to_vec()).await?;
    }
    Ok(texts.len() as f64 / started.elapsed().as_secs_f64())
}

/// SplitMix64 (Steele, Lea, Flood 2014): a seeded stream for the benchmark's noise, reproducible across
/// machines.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// `[f32; 384]`, L2-normalized: `base` plus uniform noise of amplitude `noise` per dimension.
fn perturbed(base: &[f32], noise: f32, rng: &mut SplitMix64) -> Vec<f32> {
    let mut v: Vec<f32> = base.iter().map(|x| x + noise * rng.unit()).collect();
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

/// What [`populate`] wrote.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Populated {
    pub rows: usize,
    /// Distinct texts embedded for real.
    pub embedded: usize,
    /// Seconds spent writing (embedding excluded).
    pub write_seconds: f64,
}

/// Appends `rows` archival passages of `scope` (actor and project): row `i` has text `texts[i % n]` with a
/// `(#i)` suffix and the real embedding of `texts[i % n]` plus seeded noise (amplitude 0.03 per
/// dimension: cosine about 0.86 to its base). Written in batches of 20,000 rows, without the
/// insert-if-absent check (a fresh store is expected); `progress(done)` after each batch.
///
/// # Errors
/// No texts, the model, or the store.
pub async fn populate(
    store: &LanceStore,
    embedder: &LazyEmbedder,
    scope: &Scope,
    texts: &[String],
    rows: usize,
    seed: u64,
    progress: &(dyn Fn(usize) + Send + Sync),
) -> Result<Populated, BenchError> {
    if texts.is_empty() {
        return Err(BenchError::Input("no texts: give a file with one text per line".into()));
    }
    let base = &texts[..texts.len().min(rows.max(1))];
    let mut vectors = Vec::with_capacity(base.len());
    for chunk in base.chunks(64) {
        vectors.extend(embedder.embed_documents(chunk.to_vec()).await?);
    }
    let (actor_id, project) = (scope.actor_id.as_str(), scope.project.as_str());
    let mut rng = SplitMix64(seed);
    let started = Instant::now();
    let now = chrono::Utc::now();
    let mut done = 0;
    while done < rows {
        let n = (rows - done).min(20_000);
        let batch: Vec<(Passage, Vec<f32>)> = (done..done + n)
            .map(|i| {
                let k = i % base.len();
                let text = format!("{} (#{i})", base[k]);
                let vector = if i < base.len() { vectors[k].clone() } else { perturbed(&vectors[k], 0.03, &mut rng) };
                debug_assert_eq!(vector.len(), DIMENSION);
                let passage = Passage {
                    id: passage_id(actor_id, project, &text),
                    actor_id: actor_id.to_string(),
                    project: project.to_string(),
                    session_id: String::new(),
                    turn: None,
                    source: "bench".into(),
                    tags: Vec::new(),
                    embedded_text: text.clone(),
                    text,
                    created_at: now,
                    updated_at: now,
                    superseded_by: None,
                };
                (passage, vector)
            })
            .collect();
        store.append_passages(&batch).await?;
        done += n;
        progress(done);
    }
    Ok(Populated { rows, embedded: base.len(), write_seconds: started.elapsed().as_secs_f64() })
}

/// What [`recall`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Recall {
    pub queries: usize,
    pub k: usize,
    /// Mean over queries of |indexed top-k ∩ exact top-k| / k.
    pub recall: f64,
    /// Median and 99th percentile of the indexed search, ms (store only, embedding excluded).
    pub indexed_p50_ms: f64,
    pub indexed_p99_ms: f64,
    /// The same for the exact (flat) search.
    pub exact_p50_ms: f64,
    pub exact_p99_ms: f64,
    /// Whether the table had a vector index.
    pub indexed: bool,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Recall@`k` of the archival table's vector search with its index against the exact search, for
/// the embeddings of `queries`, filtered to `actor_id` as the tools filter. The indexed query asks for
/// as many candidates as a search of `k` results does (`Fusion::limit`, 50 for k = 10) and its first `k`
/// are scored: that is the vector ranking a search fuses.
///
/// # Errors
/// The model or the store.
pub async fn recall(
    store: &LanceStore,
    embedder: &LazyEmbedder,
    actor_id: &str,
    queries: &[String],
    k: usize,
) -> Result<Recall, BenchError> {
    let indexed = store.has_vector_index(TableId::Archival).await?;
    let candidates = crate::memory::retrieval::Fusion::archival().limit(k);
    let mut hits = 0usize;
    let (mut fast, mut exact) = (Vec::new(), Vec::new());
    for query in queries {
        let vector = embedder.embed_query(query).await?;
        let started = Instant::now();
        let mut approximate = store.nearest_ids(TableId::Archival, actor_id, &vector, candidates, false).await?;
        approximate.truncate(k);
        fast.push(started.elapsed().as_secs_f64() * 1000.0);
        let started = Instant::now();
        let truth = store.nearest_ids(TableId::Archival, actor_id, &vector, k, true).await?;
        exact.push(started.elapsed().as_secs_f64() * 1000.0);
        hits += approximate.iter().filter(|id| truth.contains(id)).count();
    }
    fast.sort_by(f64::total_cmp);
    exact.sort_by(f64::total_cmp);
    Ok(Recall {
        queries: queries.len(),
        k,
        recall: if queries.is_empty() { 0.0 } else { hits as f64 / (queries.len() * k) as f64 },
        indexed_p50_ms: percentile(&fast, 50.0),
        indexed_p99_ms: percentile(&fast, 99.0),
        exact_p50_ms: percentile(&exact, 50.0),
        exact_p99_ms: percentile(&exact, 99.0),
        indexed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_seeded_and_vectors_stay_unit_length_near_their_base() {
        let base: Vec<f32> = {
            let mut v = vec![0.0; DIMENSION];
            v[0] = 1.0;
            v
        };
        let a = perturbed(&base, 0.03, &mut SplitMix64(7));
        let b = perturbed(&base, 0.03, &mut SplitMix64(7));
        assert_eq!(a, b);
        assert_ne!(a, perturbed(&base, 0.03, &mut SplitMix64(8)));
        let norm: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5);
        let cosine: f32 = a.iter().zip(&base).map(|(x, y)| x * y).sum();
        assert!((0.75..0.95).contains(&cosine), "{cosine}");
    }
}
