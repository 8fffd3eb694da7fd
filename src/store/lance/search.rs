//! Search: the rankings every searchable table runs — one full-text (BM25) ranking per indexed column
//! (and for fixes one of the query's [`identifier_phrases`]), and one by cosine to the query's vector, through the HNSW index where the table has one ([`ann_ef`])
//! — as row references, and the reading of rows by those references. A ranking under a broad filter runs
//! unfiltered and its rows are read by address, through the [`row_cache`], and checked here
//! ([`StoreTable::rank_then_filter`]); any doubt sends it back to Lance's prefilter. The rows a search
//! returns are read whole only at the end ([`TableRow`]). The three searchable tables share this code
//! through one implementation of the store's [`Searchable`] seam.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use lancedb::index::scalar::{BooleanQuery, FtsQuery, FullTextSearchQuery, MatchQuery, Occur, PhraseQuery};
use lancedb::query::ExecutableQuery;

use super::fts::{fts_columns, has_fts_index};
use super::handle::{LanceStore, StoreTable, backend, collect};
use super::row_cache;
use super::rows::{self, Rows};
use super::sql::{Broad, Filter, in_list, sql_literal};
use super::tables::TableId;
use crate::store::{KeywordRankings, Query, RowRef, Searchable, SearchedRow, StoreError, VectorRanking};

/// HNSW candidate list of a query (`ef`), at least; raised to 4 × the limit for larger limits, and to
/// one per [`ANN_ROWS_PER_EF`] rows of the table for large tables ([`ann_ef`]).
pub const ANN_EF: usize = 100;
/// Table rows per HNSW candidate in large tables: `ef` grows with the table, since a fixed `ef` loses
/// recall there. Measured on the 1M benchmark store (100 queries, store only; docs/internals/search-latency.md,
/// "HNSW `ef` grows with the table"): `ef` 200 gave recall@10 0.830 at p50 22.7 ms, 400 0.892 (21.8 ms), 1,000 0.942 (22.2 ms), 2,000 0.982 (24.7 ms);
/// at 10k every `ef` up to 2,000 gave 1.000, and p50 5.0 ms (200), 5.9–6.4 (1,000), 6.7–7.0 (2,000).
pub const ANN_ROWS_PER_EF: usize = 500;
/// The largest `ef` [`ann_ef`] chooses (for tables of 1M rows and more) unless the limit asks for more.
pub const ANN_EF_MAX: usize = 2_000;

/// The HNSW candidate list (`ef`) of a query for `limit` rows in a table of `rows` rows: 4 × `limit`
/// and at least [`ANN_EF`], growing by one per [`ANN_ROWS_PER_EF`] rows up to [`ANN_EF_MAX`]. 200 for a
/// search of 50 candidates up to 100k rows, 2,000 at 1M.
pub fn ann_ef(rows: usize, limit: usize) -> usize {
    let least = ANN_EF.max(4 * limit);
    (rows / ANN_ROWS_PER_EF).clamp(least, ANN_EF_MAX.max(least))
}

/// Words of a query whose best scores make its keyword ranking's reach, at most ([`reach_words`]).
pub const MAX_REACH_WORDS: usize = 32;

/// The words of `text` whose best BM25 scores are summed into its keyword ranking's reach: runs of
/// letters, digits, `_` and `-` (an identifier stays one word; the column's analyzer splits it as it
/// splits the query), lower-cased, each once, in order, at most [`MAX_REACH_WORDS`]. A longer query's
/// reach leaves out its later words, and fusion divides by the best score where that is higher.
pub fn reach_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')) {
        let word = word.trim_matches(['_', '-']).to_lowercase();
        if !word.is_empty() && !words.contains(&word) {
            words.push(word);
            if words.len() == MAX_REACH_WORDS {
                break;
            }
        }
    }
    words
}

/// A keyword ranking's reach from the best score of each query word in the column (0: no row holds
/// it): their sum, where a word no row holds counts as much as the query's best-scoring word.
///
/// A word that no row holds is rarer than any word that matched, so its BM25 weight (IDF) is at least
/// theirs: counting it at the best matched word's score keeps the reach a lower bound of what the whole
/// query could score, and a row that matches one incidental word of a query whose other words match
/// nothing gets its share of the query, not all of it. Used for the fixes, whose analyzer (Lance's
/// `code`) keeps every word: with stop words dropped, a word without a match could be a stop word.
pub fn reach_of(best_scores: &[f32]) -> f32 {
    let top = best_scores.iter().copied().fold(0.0, f32::max);
    let unmatched = best_scores.iter().filter(|s| **s <= 0.0).count();
    best_scores.iter().sum::<f32>() + unmatched as f32 * top
}

/// Phrases of the identifier ranking of a fix search, at most.
pub const MAX_IDENTIFIER_PHRASES: usize = 32;

/// The phrases of a fix search's identifier ranking: each pair of adjacent parts of an identifier in
/// `text`, lower-cased and joined by a space (`test_slow_server_lock_ttl` gives `test slow`, `slow
/// server`, `server lock`, `lock ttl`; `emails-high` gives `emails high`), in order, each once, at most
/// [`MAX_IDENTIFIER_PHRASES`].
///
/// An identifier is a run of letters, digits, `_` and `-` of two or more parts, split where the fixes'
/// code analyzer splits them (at `_` and `-`, and at case changes: `parseHTTPHeader` → `parse`, `http`,
/// `header`), so each phrase matches a fix where the two parts stand next to each other in any
/// spelling (`lock_ttl`, `LOCK_TTL`, `lockTtl`, `test_lock_ttl_applies`). Agents search with test
/// names that embed the identifier they are about (`test_slow_server_lock_ttl`), and look-alike fixes
/// share most of their words but not that pair (`cache_ttl`): the pair is the evidence the word-level
/// ranking cannot see (docs/retrieval.md).
pub fn identifier_phrases(text: &str) -> Vec<String> {
    let mut phrases: Vec<String> = Vec::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '-')) {
        let parts: Vec<String> = word.split(['_', '-']).flat_map(camel_case_parts).map(|p| p.to_lowercase()).collect();
        for pair in parts.windows(2) {
            let phrase = format!("{} {}", pair[0], pair[1]);
            if !phrases.contains(&phrase) {
                phrases.push(phrase);
            }
            if phrases.len() == MAX_IDENTIFIER_PHRASES {
                return phrases;
            }
        }
    }
    phrases
}

/// `segment` split at its case changes as Lance's code analyzer splits identifiers: before an upper-case
/// letter that follows a lower-case one (`lockTtl`), and before the last upper-case letter of a run
/// followed by a lower-case one (`HTTPHeader` → `HTTP`, `Header`). Empty segments give nothing.
fn camel_case_parts(segment: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = segment.char_indices().collect();
    let mut parts = Vec::new();
    let mut start = 0;
    for i in 1..chars.len() {
        let (prev, cur) = (chars[i - 1].1, chars[i].1);
        let next_lower = chars.get(i + 1).is_some_and(|(_, c)| c.is_lowercase());
        if (prev.is_lowercase() && cur.is_uppercase()) || (prev.is_uppercase() && cur.is_uppercase() && next_lower) {
            parts.push(&segment[start..chars[i].0]);
            start = chars[i].0;
        }
    }
    if start < segment.len() {
        parts.push(&segment[start..]);
    }
    parts
}

/// Rows re-ranked with their full vectors per row returned, correcting the scalar quantisation's order.
/// 1 re-ranks exactly the rows returned: at 1M rows it costs about 4 ms less per search than 4
/// (docs/internals/search-latency.md, "Refine factor 1"); recall@10 there is measured of the 50 candidates it re-ranks.
pub const ANN_REFINE_FACTOR: u32 = 1;

impl StoreTable<'_> {
    /// Reads a table of at most `rows` rows into its [`row_cache`] in the background, when
    /// [`row_cache::RowCache::should_fill`] says so: after a table's first search, after this process
    /// compacted it, and when it has grown to twice what is cached.
    fn fill_row_cache_if_due(self, rows: usize) {
        if !self.row_cache().should_fill(rows) {
            return;
        }
        let (store, id) = (self.store.clone(), self.id);
        tokio::spawn(async move {
            let table = StoreTable::new(&store, id);
            let started = std::time::Instant::now();
            let cache = table.row_cache();
            let _filling = row_cache::Filling(cache);
            let generation = cache.generation();
            match table.read_rows_at(None, true).await {
                Ok(Some(read)) => {
                    let n = read.len();
                    cache.insert(generation, read);
                    tracing::debug!(table = %self.id, rows = n, ms = ms_since(started), "row cache filled");
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(table = %self.id, "row cache not filled: {e}"),
            }
        });
    }

    /// Is the full-text index of `column` there? Checks again while it is not, so a store opened
    /// before another process built the index starts using it.
    async fn fts_available(self, column: &'static str) -> bool {
        let mut ready = self.handle().fts_ready.lock().await;
        if !ready.contains(column) && has_fts_index(self.table(), self.id, column).await.unwrap_or(false) {
            ready.insert(column);
        }
        ready.contains(column)
    }

    /// One full-text (BM25) ranking per indexed column ([`fts_columns`]) of this table for `text`, then for
    /// fixes the ranking of `text`'s [`identifier_phrases`] (empty when it has none), filtered (see
    /// [`Self::rank_then_filter`]), as row references: the rows are read only for the hits a search
    /// returns. A query the full-text parser rejects leaves that ranking empty rather than failing the
    /// search. The rankings run one after the other; a fix search's reach ([`Self::keyword_reach`])
    /// follows its first ranking when that matched (with nothing matched there is no share to take).
    async fn keyword_rankings(self, filter: &Filter, text: &str, limit: usize) -> Result<KeywordRankings, StoreError> {
        let started = std::time::Instant::now();
        if filter.broad.is_some() {
            // the rankings below read through the row cache: check it is still this table's (a failure
            // here fails the rankings too, which are left empty below)
            if let Err(e) = self.latest_rows().await {
                tracing::debug!(table = %self.id, "no look at the table's latest version: {e}");
            }
        }
        // (column, query); the first ranking of a fix search has a reach, summed from its words once the
        // ranking matched (on the conversation items the reach lowered LoCoMo recall@5 from 0.681 to
        // 0.676 and doubled search time: they rank by the best row's score)
        let mut queries = Vec::new();
        for &column in fts_columns(self.id) {
            let query = (!text.trim().is_empty()).then(|| FtsQuery::Match(MatchQuery::new(text.to_string())));
            queries.push((column, query));
        }
        if self.id == TableId::Fixes {
            let phrases = identifier_phrases(text);
            let query = (!phrases.is_empty()).then(|| {
                FtsQuery::Boolean(BooleanQuery::new(
                    phrases.into_iter().map(|p| (Occur::Should, FtsQuery::Phrase(PhraseQuery::new(p)))),
                ))
            });
            queries.push(("embedded_text", query));
        }
        let mut rankings = Vec::new();
        let mut reach = None;
        for (i, (column, query)) in queries.into_iter().enumerate() {
            let mut refs = Vec::new();
            if let Some(query) = query
                && self.fts_available(column).await
            {
                match self.keyword_ranking(column, filter, query, limit).await {
                    Ok(ranked) => refs = ranked,
                    Err(e) => {
                        tracing::warn!(table = %self.id, column, "full-text search failed, ranking without it: {e}")
                    }
                }
                if i == 0 && self.id == TableId::Fixes && !refs.is_empty() {
                    reach = self.keyword_reach(column, text).await;
                }
            }
            rankings.push(refs);
        }
        Ok(KeywordRankings { rankings, reach, ms: ms_since(started) })
    }

    /// What `text`'s BM25 ranking of `column` could reach: the sum over its words ([`reach_words`])
    /// of each word's best score in the column, over every row of the table (unfiltered: one top-1
    /// full-text query per word, at once). BM25 sums its terms' scores, so no row scores more on the
    /// words counted ([`crate::memory::fusion`] divides by it). `None` when a query fails: fusion then
    /// divides by the ranking's best score, as before the reach.
    async fn keyword_reach(self, column: &'static str, text: &str) -> Option<f32> {
        use lancedb::query::{QueryBase, Select};
        let best = |word: String| async move {
            let query = FtsQuery::Match(MatchQuery::new(word)).with_column(column.to_string());
            let top = self
                .table()
                .query()
                .full_text_search(FullTextSearchQuery::new_query(query))
                .limit(1)
                .select(Select::columns(&["_score"]));
            let batches = collect(&top).await?;
            Ok::<f32, lancedb::Error>(batches.iter().flat_map(ranking_scores).flatten().fold(0.0, f32::max))
        };
        let scores = futures::future::join_all(reach_words(text).into_iter().map(best)).await;
        let mut best_scores = Vec::with_capacity(scores.len());
        for score in scores {
            match score {
                Ok(score) => best_scores.push(score),
                Err(e) => {
                    tracing::debug!(table = %self.id, column, "no reach for the full-text ranking: {e}");
                    return None;
                }
            }
        }
        Some(reach_of(&best_scores))
    }

    /// The BM25 ranking of `column` for `query`, at most `limit` rows: unfiltered, then checked
    /// against a broad filter ([`Self::rank_then_filter`]); with Lance's prefilter when that fails or
    /// the filter is narrow.
    async fn keyword_ranking(
        self,
        column: &str,
        filter: &Filter,
        query: FtsQuery,
        limit: usize,
    ) -> Result<Vec<crate::store::Scored<RowRef>>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let query = FullTextSearchQuery::new_query(query.with_column(column.to_string()));
        let fts = self.table().query().full_text_search(query).limit(limit);
        if let Some(broad) = &filter.broad {
            let unfiltered = fts.clone().select(Select::columns(&["_score"])).with_row_id();
            if let Some(ranked) = self.rank_then_filter(unfiltered, broad, false).await? {
                return Ok(by_score(ranked.into_iter().map(|r| (r.row, r.score)), |_| f32::NAN));
            }
        }
        let fts = fts.select(Select::columns(&["id", "_score"])).with_row_id();
        let mut refs = Vec::new();
        for batch in &prefiltered(fts, filter).await.map_err(backend)? {
            refs.extend(row_refs(batch, self.id)?);
        }
        Ok(by_score(refs, |_| f32::NAN))
    }

    /// The vector ranking of this table for `vector` (filtered, see [`Self::rank_then_filter`]) as row references with
    /// their cosine.
    async fn vector_ranking(self, filter: &Filter, vector: &[f32], limit: usize) -> Result<VectorRanking, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let started = std::time::Instant::now();
        let ranked = match &filter.broad {
            Some(broad) => {
                let (query, rows) = self.nearest_approx(vector, limit).await?;
                let unfiltered = query.select(Select::columns(&["_distance"])).with_row_id();
                let ranked = self.rank_then_filter(unfiltered, broad, true).await?;
                self.fill_row_cache_if_due(rows);
                ranked
            }
            None => None,
        };
        let by_vector = match ranked {
            // re-ranked by the exact cosine of the stored vectors, as Lance's refine step would
            Some(ranked) => {
                let mut scored: Vec<(RowRef, Option<f32>)> =
                    ranked.into_iter().map(|r| (r.row, r.vector.map(|v| crate::embed::cosine(vector, &v)))).collect();
                scored.sort_by(|a, b| b.1.unwrap_or(f32::NAN).total_cmp(&a.1.unwrap_or(f32::NAN)));
                by_score(scored, |cosine| cosine)
            }
            None => {
                let nearest = self
                    .nearest_query(vector, limit)
                    .await?
                    .select(Select::columns(&["id", "_distance"]))
                    .with_row_id();
                let mut refs = Vec::new();
                for batch in &prefiltered(nearest, filter).await.map_err(backend)? {
                    // Lance's cosine distance is 1 - cosine
                    refs.extend(
                        row_refs(batch, self.id)?.into_iter().map(|(row, distance)| (row, distance.map(|d| 1.0 - d))),
                    );
                }
                by_score(refs, |cosine| cosine)
            }
        };
        Ok(VectorRanking { ranked: by_vector, ms: ms_since(started) })
    }

    /// The `limit` rows of this table nearest to `vector` by cosine, with the ANN settings of every search
    /// ([`ann_ef`], [`ANN_REFINE_FACTOR`]; Lance searches exactly where there is no index yet).
    async fn nearest_query(self, vector: &[f32], limit: usize) -> Result<lancedb::query::VectorQuery, StoreError> {
        Ok(self.nearest_approx(vector, limit).await?.0.refine_factor(ANN_REFINE_FACTOR))
    }

    /// [`Self::nearest_query`] without the refine step: through the vector index, the rows come in the order
    /// of their quantised distances, which the caller corrects from the stored vectors. With the table's
    /// row count.
    async fn nearest_approx(
        self,
        vector: &[f32],
        limit: usize,
    ) -> Result<(lancedb::query::VectorQuery, usize), StoreError> {
        use lancedb::query::QueryBase;
        let table = self.table();
        let rows = self.latest_rows().await?;
        let query = table
            .query()
            .nearest_to(vector)
            .map_err(backend)?
            .distance_type(lancedb::DistanceType::Cosine)
            .ef(ann_ef(rows, limit))
            .limit(limit);
        Ok((query, rows))
    }

    /// The row count of the latest version of this table, from its manifest (no data is read; one look for a
    /// newer version, as every read makes). On the way, the table's [`row_cache`] checks that the
    /// directory was not replaced under this process ([`row_cache::RowCache::observe`]).
    async fn latest_rows(self) -> Result<usize, StoreError> {
        let table = self.table();
        let Some(dataset) = table.dataset() else { return table.count_rows(None).await.map_err(backend) };
        let dataset = dataset.get().await.map_err(backend)?;
        let manifest = dataset.manifest();
        if self.row_cache().observe(manifest.version, manifest.max_fragment_id().unwrap_or(0)) {
            tracing::info!(
                table = %self.id,
                version = manifest.version,
                "the table was replaced on disk: row cache cleared"
            );
        }
        dataset.count_rows(None).await.map_err(backend)
    }

    /// Runs `query` — a ranking of this table that selects only its score column and `_rowid` — without a
    /// filter, then reads the ranked rows' `id`, the columns of the broad filter and (with `vectors`)
    /// their `vector` in one read by address (those the [`row_cache`] lacks), and applies the filter
    /// here. Lance's own postfilter and refine step read those columns one take at a time (about 0.7 ms
    /// each at 10k rows, where the ranking itself takes 1 ms).
    ///
    /// Returns the ranking in order when it is the filtered ranking, i.e. every ranked row passed the
    /// filter (then the ranking's top is the filtered top). Returns `None` when a row failed the filter,
    /// or its address no longer holds it (a compaction or deletion since the ranking): the caller then
    /// ranks with Lance's prefilter. An address never holds another row, since Lance does not reuse
    /// fragment ids.
    async fn rank_then_filter<Q>(
        self,
        query: Q,
        filter: &Broad,
        vectors: bool,
    ) -> Result<Option<Vec<Ranked>>, StoreError>
    where
        Q: ExecutableQuery,
    {
        let mut addresses = Vec::new();
        let mut scores = Vec::new();
        for batch in collect(&query).await.map_err(backend)? {
            addresses.extend(row_addresses(&batch, self.id)?);
            scores.extend(ranking_scores(&batch));
        }
        let ranked = self.read_ranked(addresses, filter, vectors).await?;
        Ok(ranked.map(|rows| rows.into_iter().zip(scores).map(|(r, score)| Ranked { score, ..r }).collect()))
    }

    /// The reading half of [`Self::rank_then_filter`]: the rows at `addresses` (a ranking, best first)
    /// with their ids and, with `vectors`, their vectors, in the same order; `None` when one of them
    /// fails `filter` or is no longer at its address. Rows in the table's [`row_cache`] are not read
    /// again; the others are read in one take by address and cached.
    async fn read_ranked(
        self,
        addresses: Vec<u64>,
        filter: &Broad,
        vectors: bool,
    ) -> Result<Option<Vec<Ranked>>, StoreError> {
        if addresses.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let cache = self.row_cache();
        let generation = cache.generation();
        let mut rows = cache.get(&addresses, vectors);
        let missing: Vec<u64> = addresses.iter().zip(&rows).filter(|(_, r)| r.is_none()).map(|(a, _)| *a).collect();
        if !missing.is_empty() {
            let Some(read) = self.read_rows_at(Some(missing), vectors).await? else {
                return Ok(None);
            };
            let mut by_address: HashMap<u64, row_cache::CachedRow> = read.iter().cloned().collect();
            cache.insert(generation, read);
            for (address, row) in addresses.iter().zip(&mut rows) {
                if row.is_none() {
                    *row = by_address.remove(address);
                }
            }
        }
        let mut ranked = Vec::with_capacity(addresses.len());
        for (address, row) in addresses.into_iter().zip(rows) {
            // a row no longer at its address, or one the filter leaves out: rank again with the filter
            let Some(row) = row.filter(|r| filter.passes(&r.actor_id, r.superseded)) else { return Ok(None) };
            let vector = if vectors { row.vector } else { None };
            ranked.push(Ranked { row: RowRef { id: row.id, row_id: address }, vector, score: None });
        }
        Ok(Some(ranked))
    }

    /// What the [`row_cache`] holds of the rows of this table at `addresses` (with `None`, of every row of
    /// the table), read from the table: `id`, `actor_id`, `superseded_by` where the table has it, and
    /// with `vectors` the `vector`. A take leaves out the addresses that no longer hold a row (a
    /// deletion or compaction since the ranking); `Ok(None)` when it fails.
    async fn read_rows_at(
        self,
        addresses: Option<Vec<u64>>,
        vectors: bool,
    ) -> Result<Option<Vec<(u64, row_cache::CachedRow)>>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let superseded = self.id == TableId::Archival;
        let mut columns = vec!["id", "actor_id"];
        if superseded {
            columns.push("superseded_by");
        }
        if vectors {
            columns.push("vector");
        }
        self.row_cache().count_read();
        let table = self.table();
        let batches = match addresses {
            Some(addresses) => {
                let take = table.take_row_ids(addresses).select(Select::columns(&columns)).with_row_id();
                match collect(&take).await {
                    Ok(batches) => batches,
                    Err(e) => {
                        tracing::debug!(table = %self.id, "ranked rows moved before they were read, ranking again: {e}");
                        return Ok(None);
                    }
                }
            }
            None => {
                let scan = table.query().select(Select::columns(&columns)).with_row_id();
                collect(&scan).await.map_err(backend)?
            }
        };
        let mut out = Vec::new();
        let mut actor: Option<Arc<str>> = None;
        for batch in &batches {
            let r = rows::Rows::new(batch, self.id);
            let ids = r.uuids("id")?;
            let actors = r.strs("actor_id")?;
            let replaced = if superseded { r.opt_strs("superseded_by")? } else { vec![None; ids.len()] };
            let mut stored: Vec<Option<Arc<[f32]>>> =
                if vectors { r.shared_vectors("vector")?.into_iter().map(Some).collect() } else { Vec::new() };
            stored.resize(ids.len(), None);
            let rows = row_addresses(batch, self.id)?.into_iter().zip(ids).zip(actors).zip(replaced).zip(stored);
            for ((((address, id), actor_id), replaced), vector) in rows {
                // one allocation per run of rows of the same actor
                let actor_id = match &actor {
                    Some(a) if **a == *actor_id => a.clone(),
                    _ => actor.insert(Arc::from(actor_id)).clone(),
                };
                out.push((address, row_cache::CachedRow { id, actor_id, superseded: replaced.is_some(), vector }));
            }
        }
        Ok(Some(out))
    }

    /// [`LanceStore::nearest_ids`] for this table.
    pub async fn nearest_ids(
        self,
        actor: &str,
        vector: &[f32],
        k: usize,
        exact: bool,
    ) -> Result<Vec<String>, StoreError> {
        use lancedb::query::{QueryBase, Select};
        let mut query = self
            .nearest_query(vector, k)
            .await?
            .only_if(format!("actor_id = {}", sql_literal(actor)))
            .select(Select::columns(&["id", "_distance"]));
        if exact {
            query = query.bypass_vector_index();
        }
        let mut ids = Vec::new();
        for batch in collect(&query).await.map_err(backend)? {
            ids.extend(Rows::new(&batch, self.id).strs("id")?);
        }
        Ok(ids)
    }
}

/// The rows of `refs` in `T`'s table that are still stored for `actor_id`, in the order of `refs`.
/// Read by row address (`_rowid`), then, for any ref whose address now holds another row or none (a
/// compaction or deletion in between), by id.
pub(super) async fn rows_by_ref<T: TableRow>(
    store: &LanceStore,
    actor_id: &str,
    refs: &[RowRef],
) -> Result<Vec<(T, Vec<f32>)>, StoreError> {
    use futures::TryStreamExt;
    use lancedb::query::ExecutableQuery;
    if refs.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: std::collections::HashSet<uuid::Uuid> = refs.iter().map(|r| r.id).collect();
    let mut found: HashMap<uuid::Uuid, (T, Vec<f32>)> = HashMap::new();
    let name = T::TABLE;
    let take = StoreTable::new(store, name).table().take_row_ids(refs.iter().map(|r| r.row_id).collect());
    // the take leaves out addresses that no longer hold a row (a deletion or compaction since the
    // ranking); those, and any take that fails, are read by id below
    let taken: Vec<RecordBatch> = match take.execute().await {
        Ok(stream) => stream.try_collect().await.unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    for batch in &taken {
        for (row, vector) in T::decode(batch)? {
            if wanted.contains(&row.id()) && row.actor_id() == actor_id {
                found.insert(row.id(), (row, vector));
            }
        }
    }
    let missing: Vec<String> = refs.iter().filter(|r| !found.contains_key(&r.id)).map(|r| r.id.to_string()).collect();
    if !missing.is_empty() {
        let filter =
            format!("actor_id = {} AND {}", sql_literal(actor_id), in_list("id", missing.iter().map(String::as_str)));
        for batch in StoreTable::new(store, name).select(&filter, None).await? {
            for (row, vector) in T::decode(&batch)? {
                found.insert(row.id(), (row, vector));
            }
        }
    }
    Ok(refs.iter().filter_map(|r| found.remove(&r.id)).collect())
}

/// Runs `query` with `filter` applied before ranking (Lance's prefilter): the filtered top of the
/// ranking, whatever share of the table passes.
async fn prefiltered<Q>(query: Q, filter: &Filter) -> lancedb::Result<Vec<RecordBatch>>
where
    Q: lancedb::query::QueryBase + ExecutableQuery,
{
    collect(&query.only_if(&filter.sql)).await
}

/// The row type of a searchable table as this backend stores it: its table, its rows' owner, how its
/// columns decode, and the SQL filter of its searches.
pub(super) trait TableRow: SearchedRow {
    /// The table it is stored in.
    const TABLE: TableId;
    /// The actor it belongs to (the `actor_id` column).
    fn actor_id(&self) -> &str;
    /// Every row of `batch` (all columns of the table) with its vector (`[f32; 384]`).
    fn decode(batch: &RecordBatch) -> Result<Vec<(Self, Vec<f32>)>, StoreError>;
    /// The SQL of `filter`, which every ranking of a search applies.
    fn filter(filter: &Self::Filter) -> Filter;
}

/// The one implementation of the search seam: each table differs only by its [`TableRow`].
#[async_trait::async_trait]
impl<T: TableRow> Searchable<T> for LanceStore {
    async fn keyword(&self, query: &Query<T::Filter>) -> Result<KeywordRankings, StoreError> {
        StoreTable::new(self, T::TABLE).keyword_rankings(&T::filter(&query.filter), &query.text, query.limit).await
    }

    async fn nearest(&self, query: &Query<T::Filter>) -> Result<VectorRanking, StoreError> {
        StoreTable::new(self, T::TABLE).vector_ranking(&T::filter(&query.filter), &query.vector, query.limit).await
    }

    async fn rows(&self, actor_id: &str, refs: &[RowRef]) -> Result<Vec<(T, Vec<f32>)>, StoreError> {
        rows_by_ref(self, actor_id, refs).await
    }
}

/// One row of a ranking read by [`StoreTable::rank_then_filter`]: where it is, its stored vector
/// (`[f32; 384]`, L2-normalized) when asked for, and the ranking's score (`_distance` or `_score`).
struct Ranked {
    row: RowRef,
    vector: Option<Arc<[f32]>>,
    score: Option<f32>,
}

/// A ranking (best first) as [`Scored`](crate::store::Scored) refs: ranks from the ranking's scores,
/// ties sharing one ([`competition_ranks`](crate::store::competition_ranks)); `cosine(score)` gives the
/// cosine where the score is one (NaN for BM25). A missing score is NaN, which ties with nothing.
fn by_score(
    ranking: impl IntoIterator<Item = (RowRef, Option<f32>)>,
    cosine: impl Fn(f32) -> f32,
) -> Vec<crate::store::Scored<RowRef>> {
    let (refs, scores): (Vec<_>, Vec<f32>) =
        ranking.into_iter().map(|(row, score)| (row, score.unwrap_or(f32::NAN))).unzip();
    let ranks = crate::store::competition_ranks(scores.iter().copied());
    refs.into_iter()
        .zip(scores)
        .zip(ranks)
        .map(|((row, score), rank)| crate::store::Scored { row, cosine: cosine(score), score, rank })
        .collect()
}

/// The ranking score of each row of `batch`: `_distance` (vector) or `_score` (BM25), `None` without
/// either column.
fn ranking_scores(batch: &RecordBatch) -> Vec<Option<f32>> {
    let column = ["_distance", "_score"]
        .iter()
        .find_map(|name| batch.column_by_name(name))
        .and_then(|c| c.as_any().downcast_ref::<arrow_array::Float32Array>());
    (0..batch.num_rows()).map(|i| column.map(|c| c.value(i))).collect()
}

/// The `_rowid` of each row of `batch`.
fn row_addresses(batch: &RecordBatch, table: TableId) -> Result<Vec<u64>, StoreError> {
    let row_ids = batch
        .column_by_name("_rowid")
        .and_then(|c| c.as_any().downcast_ref::<arrow_array::UInt64Array>())
        .ok_or_else(|| StoreError::Backend(format!("{table}: a ranking without _rowid")))?;
    Ok(row_ids.values().to_vec())
}

/// The `(id, _rowid)` of each row of `batch`, with its ranking score ([`ranking_scores`]).
fn row_refs(batch: &RecordBatch, table: TableId) -> Result<Vec<(RowRef, Option<f32>)>, StoreError> {
    let ids = rows::Rows::new(batch, table).uuids("id")?;
    let row_ids = row_addresses(batch, table)?;
    Ok(ids
        .into_iter()
        .zip(row_ids)
        .zip(ranking_scores(batch))
        .map(|((id, row_id), score)| (RowRef { id, row_id }, score))
        .collect())
}

/// Milliseconds since `t`.
fn ms_since(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests;
