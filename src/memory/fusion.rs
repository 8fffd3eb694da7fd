//! Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009), weighted: `score(d) = Σ_r w_r / (k +
//! rank_r(d))` over the rankings that contain `d`, ranks starting at 1. `retrieval::Fusion` sets k and w.

use std::collections::HashMap;
use std::hash::Hash;

/// A fused item: the fused score and the 1-based rank in each input ranking (`None` when absent).
#[derive(Debug, Clone, PartialEq)]
pub struct Fused<K> {
    pub key: K,
    pub score: f32,
    pub ranks: Vec<Option<usize>>,
}

/// Weighted RRF: fuses rankings (each a list of `(key, rank)`, best first, keys unique within a ranking,
/// ranks 1-based) into one, best first, by `score(d) = Σ_r w_r / (k + rank_r(d))`; with equal weights,
/// k = 60 and ranks equal to positions it is the paper's RRF. Keys with equal scores in a ranking may
/// carry equal ranks ([`competition_ranks`](crate::store::competition_ranks)), so that the other
/// rankings, not the order ties came in, decide between them. Ties of the fused score keep the order of
/// first appearance (earlier rankings first), so the result is deterministic. A weight of 0 keeps a
/// ranking's ranks in [`Fused::ranks`] without letting it move the order.
pub fn weighted_reciprocal_rank_fusion<K: Eq + Hash + Clone>(
    rankings: &[Vec<(K, usize)>],
    weights: &[f32],
    k: f32,
) -> Vec<Fused<K>> {
    assert_eq!(rankings.len(), weights.len(), "one weight per ranking");
    let mut index: HashMap<K, usize> = HashMap::new();
    let mut fused: Vec<Fused<K>> = Vec::new();
    for (r, ranking) in rankings.iter().enumerate() {
        for (key, rank) in ranking {
            let i = *index.entry(key.clone()).or_insert_with(|| {
                fused.push(Fused { key: key.clone(), score: 0.0, ranks: vec![None; rankings.len()] });
                fused.len() - 1
            });
            if fused[i].ranks[r].is_none() {
                fused[i].ranks[r] = Some(*rank);
                fused[i].score += weights[r] / (k + *rank as f32);
            }
        }
    }
    // stable sort: ties stay in first-appearance order
    fused.sort_by(|a, b| b.score.total_cmp(&a.score));
    fused
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The constant of the RRF paper.
    const RRF_K: f32 = 60.0;

    /// A ranking without ties: ranks are positions.
    fn ranked<'a>(keys: &[&'a str]) -> Vec<(&'a str, usize)> {
        keys.iter().enumerate().map(|(i, k)| (*k, i + 1)).collect()
    }

    #[test]
    fn an_item_in_both_rankings_beats_one_in_a_single_ranking() {
        let fused =
            weighted_reciprocal_rank_fusion(&[ranked(&["a", "b", "c"]), ranked(&["c", "d"])], &[1.0, 1.0], RRF_K);
        let keys: Vec<_> = fused.iter().map(|f| f.key).collect();
        assert_eq!(keys, vec!["c", "a", "b", "d"]);
        assert_eq!(fused[0].ranks, vec![Some(3), Some(1)]);
        assert!((fused[0].score - (1.0 / 63.0 + 1.0 / 61.0)).abs() < 1e-6);
        assert_eq!(fused[3].ranks, vec![None, Some(2)]);
    }

    #[test]
    fn weights_decide_which_ranking_leads() {
        // "a" tops the first ranking, "d" the second; weighting the second 3x puts "d" first
        let fused = weighted_reciprocal_rank_fusion(&[ranked(&["a", "b"]), ranked(&["d", "b"])], &[1.0, 3.0], RRF_K);
        let keys: Vec<_> = fused.iter().map(|f| f.key).collect();
        assert_eq!(keys, vec!["b", "d", "a"]);
        assert!((fused[0].score - (1.0 / 62.0 + 3.0 / 62.0)).abs() < 1e-6);
        assert!((fused[1].score - 3.0 / 61.0).abs() < 1e-6);
        let unweighted =
            weighted_reciprocal_rank_fusion(&[ranked(&["a", "b"]), ranked(&["d", "b"])], &[1.0, 1.0], RRF_K);
        let keys: Vec<_> = unweighted.iter().map(|f| f.key).collect();
        assert_eq!(keys, vec!["b", "a", "d"], "equal weights: ties keep first appearance");
    }

    #[test]
    fn a_tie_in_one_ranking_is_broken_by_the_others() {
        // "b" and "a" tie on the keyword ranking (b came first); the vector ranking puts "a" first
        let keyword = vec![("b", 1), ("a", 1), ("c", 3)];
        let fused = weighted_reciprocal_rank_fusion(&[keyword, ranked(&["a", "b", "c"])], &[1.0, 0.25], 10.0);
        let keys: Vec<_> = fused.iter().map(|f| f.key).collect();
        assert_eq!(keys, vec!["a", "b", "c"]);
        assert_eq!(fused[0].ranks, vec![Some(1), Some(1)]);
        // the same rankings read as positions let the keyword ranking's arbitrary order win
        let by_position =
            weighted_reciprocal_rank_fusion(&[ranked(&["b", "a", "c"]), ranked(&["a", "b", "c"])], &[1.0, 0.25], 10.0);
        assert_eq!(by_position[0].key, "b");
    }
}
