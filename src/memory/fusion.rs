//! Score fusion of a hybrid search's rankings: the one function that orders every search's results
//! (fixes, archival memory, conversation search). Weights per table live in
//! [`retrieval::Fusion`](super::retrieval::Fusion).
//!
//! `score(d) = Σ_r w_r · s_r(d)` over the rankings r, where `s_r` is the ranking's own score made
//! comparable across queries:
//! - a cosine ranking contributes the cosine as it is (in [-1, 1]; MiniLM's are comparable across
//!   queries already);
//! - a BM25 ranking contributes `bm25(d) / max(reach, max_d' bm25(d'))` (in [0, 1]): the share of what
//!   the query could reach that the row got. The reach is the sum over the query's words of each word's
//!   best score in the column ([`Ranking::reach`]): BM25 is a sum over the query's terms, so no row
//!   scores above it, and a row that holds every word as strongly as the best row for that word gets
//!   1 (the per-term upper bounds of max-score evaluation, Turtle & Flood, "Query evaluation:
//!   strategies and optimizations", IP&M 1995). A row that shares one incidental word of twelve gets
//!   that word's share, where dividing by the best row alone (relative score fusion, Weaviate's
//!   `relativeScoreFusion`; the theoretical-minimum normalisation of Bruch et al., "An analysis of
//!   fusion functions for hybrid retrieval", TOIS 2023) gave whatever matched best a full 1.0 however
//!   little of the query it held. Without a reach the best row's score is the divisor.
//!
//! A row absent from a ranking gets that ranking's lowest score when the ranking was cut at its limit
//! (the row scores at most that), and its no-match score otherwise (0 for BM25; for a cosine ranking,
//! which holds every candidate of a table smaller than its limit, the lowest score too).
//!
//! Why scores and not ranks: reciprocal rank fusion (Cormack et al., SIGIR 2009) sees only positions,
//! so a query's rare identifier that only one row holds (BM25 ranks it first by a wide margin) is
//! worth the same `1/(k+1) − 1/(k+2)` as a near-tie, and a confident vector ranking can be overruled by
//! a keyword ranking that barely prefers another row. The scores keep how strong each match is.
//!
//! The order is total and the same in every process: the fused score (higher first), then the key
//! (lower first), so ties and rows whose scores are equal come out in one order on every run.

use std::collections::HashMap;
use std::hash::Hash;

/// What a ranking's score is, which decides how it is made comparable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreKind {
    /// Cosine similarity of embeddings, in [-1, 1]: used as it is.
    Cosine,
    /// BM25 (≥ 0, unbounded): divided by the larger of the query's reach and the ranking's best score.
    Bm25,
}

/// One ranking to fuse.
#[derive(Debug, Clone)]
pub struct Ranking<K> {
    /// `(key, score, rank)`, best first; keys unique; ranks 1-based (ties may share one).
    pub entries: Vec<(K, f32, usize)>,
    pub kind: ScoreKind,
    /// Its weight in the sum; 0 keeps its ranks and scores in [`Fused::ranked`] without moving the order.
    pub weight: f32,
    /// The ranking stopped at its limit: rows absent from it may still match, scoring at most its last.
    pub cut: bool,
    /// A BM25 ranking's reach: the most a row could score for this query (the sum of each query word's
    /// best score, a word no row holds counted at the best word's score; `None`: not known, the best
    /// row's score stands in). Ignored for cosine rankings.
    pub reach: Option<f32>,
    /// A BM25 ranking's normalised score is raised to this power (1: as it is). Above 1 a row that holds
    /// a small share of what the query reaches counts for much less than its share (at 3, a third of the
    /// reach counts 1/27), while a row holding all of it still counts 1. Ignored for cosine rankings.
    pub exponent: f32,
}

/// A row's rank and score in one ranking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankScore {
    /// 1-based.
    pub rank: usize,
    /// The ranking's own score (cosine or BM25), as the store gave it.
    pub score: f32,
}

/// A fused item: its fused score and where each input ranking had it (`None` when absent).
#[derive(Debug, Clone, PartialEq)]
pub struct Fused<K> {
    pub key: K,
    pub score: f32,
    pub ranked: Vec<Option<RankScore>>,
}

/// Fuses `rankings` into one list, best first, by the module's formula. Every key of every ranking is
/// in the result once. NaN scores count as absent.
pub fn score_fusion<K: Eq + Hash + Clone + Ord>(rankings: &[Ranking<K>]) -> Vec<Fused<K>> {
    let mut index: HashMap<K, usize> = HashMap::new();
    let mut fused: Vec<Fused<K>> = Vec::new();
    for (r, ranking) in rankings.iter().enumerate() {
        for (key, score, rank) in &ranking.entries {
            let i = *index.entry(key.clone()).or_insert_with(|| {
                fused.push(Fused { key: key.clone(), score: 0.0, ranked: vec![None; rankings.len()] });
                fused.len() - 1
            });
            if fused[i].ranked[r].is_none() && !score.is_nan() {
                fused[i].ranked[r] = Some(RankScore { rank: *rank, score: *score });
            }
        }
    }
    for (r, ranking) in rankings.iter().enumerate() {
        if ranking.weight == 0.0 {
            continue;
        }
        let scores = ranking.entries.iter().map(|(_, s, _)| *s).filter(|s| !s.is_nan());
        let (best, lowest) = scores.fold((f32::NEG_INFINITY, f32::INFINITY), |(b, l), s| (b.max(s), l.min(s)));
        let absent = match (ranking.kind, ranking.cut) {
            _ if !lowest.is_finite() => 0.0,
            (ScoreKind::Cosine, _) | (ScoreKind::Bm25, true) => lowest,
            (ScoreKind::Bm25, false) => 0.0,
        };
        let divisor = ranking.reach.filter(|r| r.is_finite()).map_or(best, |reach| reach.max(best));
        let normalise = |s: f32| match ranking.kind {
            ScoreKind::Cosine => s,
            ScoreKind::Bm25 if divisor > 0.0 => (s / divisor).powf(ranking.exponent),
            ScoreKind::Bm25 => 0.0,
        };
        for f in &mut fused {
            let s = f.ranked[r].map_or(absent, |rs| rs.score);
            f.score += ranking.weight * normalise(s);
        }
    }
    fused.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| a.key.cmp(&b.key)));
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranking(entries: &[(&'static str, f32)], kind: ScoreKind, weight: f32, cut: bool) -> Ranking<&'static str> {
        let ranks = crate::store::competition_ranks(entries.iter().map(|(_, s)| *s));
        Ranking {
            entries: entries.iter().zip(ranks).map(|((k, s), r)| (*k, *s, r)).collect(),
            kind,
            weight,
            cut,
            reach: None,
            exponent: 1.0,
        }
    }

    fn keys(fused: &[Fused<&'static str>]) -> Vec<&'static str> {
        fused.iter().map(|f| f.key).collect()
    }

    #[test]
    fn a_rare_identifier_that_bm25_alone_finds_beats_a_slightly_closer_look_alike() {
        // twenty look-alikes: the vector barely prefers "kq1z"; BM25 finds "kq0z" by its rare token,
        // far ahead of the rest, which share only the common word
        let vector = ranking(&[("kq1z", 0.82), ("kq2z", 0.81), ("kq0z", 0.80)], ScoreKind::Cosine, 0.5, false);
        let bm25 = ranking(&[("kq0z", 4.1), ("kq1z", 0.2), ("kq2z", 0.2)], ScoreKind::Bm25, 1.0, false);
        let fused = score_fusion(&[vector, bm25]);
        assert_eq!(keys(&fused), vec!["kq0z", "kq1z", "kq2z"]);
        let expected = 0.5 * 0.80 + 1.0;
        assert!((fused[0].score - expected).abs() < 1e-6, "{}", fused[0].score);
        assert_eq!(
            fused[0].ranked,
            vec![Some(RankScore { rank: 3, score: 0.80 }), Some(RankScore { rank: 1, score: 4.1 })]
        );
    }

    #[test]
    fn a_confident_vector_match_is_not_overruled_by_a_keyword_near_tie() {
        // BM25 barely prefers "b" (all matches share the query's words); the vector clearly prefers "a"
        let vector = ranking(&[("a", 0.78), ("b", 0.41)], ScoreKind::Cosine, 0.5, false);
        let bm25 = ranking(&[("b", 6.0), ("a", 5.8)], ScoreKind::Bm25, 0.25, false);
        assert_eq!(keys(&score_fusion(&[vector, bm25])), vec!["a", "b"]);
    }

    #[test]
    fn absent_rows_score_the_ranking_s_lowest_when_it_was_cut_and_nothing_otherwise() {
        let vector = ranking(&[("a", 0.6), ("b", 0.5)], ScoreKind::Cosine, 1.0, true);
        let bm25 = ranking(&[("c", 2.0), ("a", 1.0)], ScoreKind::Bm25, 1.0, false);
        let fused = score_fusion(&[vector.clone(), bm25.clone()]);
        let score = |k| fused.iter().find(|f| f.key == k).unwrap().score;
        assert!((score("a") - (0.6 + 0.5)).abs() < 1e-6);
        assert!((score("b") - 0.5).abs() < 1e-6, "b has no keyword match: 0");
        assert!((score("c") - (0.5 + 1.0)).abs() < 1e-6, "c, beyond the cut vector ranking, gets its lowest cosine");
        assert_eq!(fused.iter().find(|f| f.key == "c").unwrap().ranked[0], None);
        let cut_bm25 = Ranking { cut: true, ..bm25 };
        let fused = score_fusion(&[vector, cut_bm25]);
        let b = fused.iter().find(|f| f.key == "b").unwrap().score;
        assert!((b - (0.5 + 0.5)).abs() < 1e-6, "a cut BM25 ranking gives absent rows its lowest relative score");
    }

    #[test]
    fn a_zero_weight_ranking_is_explained_but_moves_nothing() {
        let vector = ranking(&[("a", 0.9), ("b", 0.2)], ScoreKind::Cosine, 1.0, false);
        let bm25 = ranking(&[("b", 9.0)], ScoreKind::Bm25, 0.0, false);
        let fused = score_fusion(&[vector, bm25]);
        assert_eq!(keys(&fused), vec!["a", "b"]);
        assert_eq!(fused[1].ranked[1], Some(RankScore { rank: 1, score: 9.0 }));
        assert!((fused[1].score - 0.2).abs() < 1e-6);
    }

    #[test]
    fn equal_scores_are_ordered_by_key_whatever_order_they_came_in() {
        let one = ranking(&[("b", 1.0), ("a", 1.0), ("c", 1.0)], ScoreKind::Bm25, 1.0, false);
        let other = ranking(&[("c", 1.0), ("a", 1.0), ("b", 1.0)], ScoreKind::Bm25, 1.0, false);
        assert_eq!(keys(&score_fusion(&[one])), vec!["a", "b", "c"]);
        assert_eq!(keys(&score_fusion(&[other])), vec!["a", "b", "c"]);
    }

    #[test]
    fn nan_scores_count_as_absent_and_an_empty_ranking_adds_nothing() {
        let vector = ranking(&[("c", 0.3), ("a", f32::NAN), ("b", 0.2)], ScoreKind::Cosine, 1.0, false);
        let empty = ranking(&[], ScoreKind::Bm25, 1.0, false);
        let fused = score_fusion(&[vector, empty]);
        assert_eq!(keys(&fused), vec!["c", "a", "b"], "a scores b's 0.2 and comes first by key");
        assert_eq!(fused[1].ranked[0], None);
        assert!((fused[1].score - 0.2).abs() < 1e-6, "absent from an uncut cosine ranking: its lowest");
    }

    #[test]
    fn one_incidental_shared_word_counts_for_its_share_of_the_reach_not_for_the_whole_query() {
        // a twelve-word symptom: "d" shares only the word "script" (BM25 4.0, the keyword ranking's best),
        // "r" shares none of its words but is clearly closer by meaning; the query could reach 30.0, so the
        // one word adds 0.75 · 4 / 30 = 0.10 to "d" (0.35 < 0.40), not the whole keyword weight
        let vector = ranking(&[("r", 0.40), ("d", 0.25)], ScoreKind::Cosine, 1.0, false);
        let bm25 = Ranking { reach: Some(30.0), ..ranking(&[("d", 4.0)], ScoreKind::Bm25, 0.75, false) };
        let fused = score_fusion(&[vector.clone(), bm25.clone()]);
        assert_eq!(keys(&fused), vec!["r", "d"]);
        let d = fused.iter().find(|f| f.key == "d").unwrap().score;
        assert!((d - (0.25 + 0.75 * 4.0 / 30.0)).abs() < 1e-6, "{d}");
        // divided by the best row alone, the one word counted as the whole query, and "d" came first
        let relative = score_fusion(&[vector, Ranking { reach: None, ..bm25 }]);
        assert_eq!(keys(&relative), vec!["d", "r"]);
    }

    #[test]
    fn an_exponent_shrinks_a_small_share_of_the_reach_and_leaves_a_full_match_whole() {
        let bm25 = Ranking {
            reach: Some(12.0),
            exponent: 3.0,
            ..ranking(&[("all", 12.0), ("third", 4.0)], ScoreKind::Bm25, 1.0, false)
        };
        let fused = score_fusion(&[bm25]);
        assert!((fused[0].score - 1.0).abs() < 1e-6, "{fused:?}");
        assert!((fused[1].score - 1.0 / 27.0).abs() < 1e-6, "a third of the reach counts (1/3)³: {fused:?}");
    }

    #[test]
    fn a_row_holding_all_the_query_reaches_counts_in_full_and_a_reach_below_the_best_changes_nothing() {
        let bm25 = Ranking { reach: Some(9.0), ..ranking(&[("a", 9.0), ("b", 3.0)], ScoreKind::Bm25, 1.0, false) };
        let fused = score_fusion(std::slice::from_ref(&bm25));
        assert!((fused[0].score - 1.0).abs() < 1e-6 && (fused[1].score - 1.0 / 3.0).abs() < 1e-6, "{fused:?}");
        // a reach under the best score (words the reach left out) divides by the best instead
        let under = score_fusion(&[Ranking { reach: Some(4.5), ..bm25.clone() }]);
        assert!((under[0].score - 1.0).abs() < 1e-6, "{under:?}");
        // and a reach that is no number is ignored
        let nan = score_fusion(&[Ranking { reach: Some(f32::NAN), ..bm25 }]);
        assert!((nan[1].score - 1.0 / 3.0).abs() < 1e-6, "{nan:?}");
    }
}
