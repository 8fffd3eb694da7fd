//! What the search tools say about why a result ranked where it did (`structuredContent`'s `ranking`).

use chrono::{DateTime, SecondsFormat, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::memory::fusion::RankScore;
use crate::memory::retrieval::Ranked;

/// A result's rank and score in one ranking of the search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RankingPosition {
    /// 1-based; equal scores share a rank.
    #[schemars(range(min = 1))]
    pub rank: u32,
    /// The ranking's own score, 4 decimals: cosine similarity for `vector`, BM25 for the others.
    pub score: f64,
}

/// Where a result stood in each ranking the search fused (null where a ranking did not hold it); the
/// fused score (`fused_score`) adds the vector's cosine and each BM25 score relative to its ranking's
/// best, each times its weight (docs/retrieval.md).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RankingExplanation {
    /// The vector (embedding) ranking.
    pub vector: Option<RankingPosition>,
    /// The full-text (BM25) ranking; for conversation items, over the item with its context.
    pub keyword: Option<RankingPosition>,
    /// Conversation items only: the BM25 ranking over the item's own text; null elsewhere.
    pub own_text: Option<RankingPosition>,
    /// Fixes only: the BM25 ranking of the query's identifier phrases (two parts of an identifier side
    /// by side, as `lock ttl` in `test_slow_server_lock_ttl`); null elsewhere, and when the query holds
    /// no identifier of two parts.
    pub identifier: Option<RankingPosition>,
}

impl RankingExplanation {
    /// A conversation item's or a passage's: the second full-text ranking is the item's own text.
    pub fn of_text(r: &Ranked) -> Self {
        Self { vector: position(r.vector), keyword: position(r.keyword), own_text: position(r.exact), identifier: None }
    }

    /// A fix's: the second full-text ranking is of the query's identifier phrases.
    pub fn of_fix(r: &Ranked) -> Self {
        Self { vector: position(r.vector), keyword: position(r.keyword), own_text: None, identifier: position(r.exact) }
    }
}

fn position(p: Option<RankScore>) -> Option<RankingPosition> {
    p.map(|p| RankingPosition { rank: u32::try_from(p.rank).unwrap_or(u32::MAX), score: round4(p.score) })
}

/// A result's scores as its text shows them, e.g. `fused_score=1.1364, cosine=0.3779`: the fused score is
/// the one that orders the results, the cosine is `score` in `structuredContent`. A result that only a
/// keyword brought in, its cosine under the default floor ([`DEFAULT_MIN_SCORE`]), adds
/// `, keyword match only` (so a low or negative cosine above a better one reads as what it is).
///
/// [`DEFAULT_MIN_SCORE`]: crate::memory::DEFAULT_MIN_SCORE
pub fn score_label(fused_score: f64, cosine: f64, keyword_hit: bool) -> String {
    let weak = keyword_hit && cosine < f64::from(crate::memory::DEFAULT_MIN_SCORE);
    format!("fused_score={fused_score:.4}, cosine={cosine:.4}{}", if weak { ", keyword match only" } else { "" })
}

/// `x` rounded to 4 decimals, as every score the tools show.
pub(crate) fn round4(x: f32) -> f64 {
    (f64::from(x) * 10_000.0).round() / 10_000.0
}

/// An RFC 3339 time with how long before `now` it was: `2026-12-01T10:00:00Z (6 days ago)` (the age
/// a model reads beside a memory, docs/tools.md). Text that is not RFC 3339 is returned as it is.
pub fn dated(at: &str, now: DateTime<Utc>) -> String {
    match DateTime::parse_from_rfc3339(at) {
        Ok(t) => format!("{at} ({})", ago(t.with_timezone(&Utc), now)),
        Err(_) => at.to_string(),
    }
}

/// How a memory was used, for the line a model reads beside it (docs/tools.md, "Was a memory used?"):
/// `used 3 times before, last 2026-12-06T10:00:00Z (1 day ago); tests passed after it in 1 session`;
/// `None` for a memory never used nor credited.
pub fn usage_words(usage: &crate::domain::Usage, now: DateTime<Utc>) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(at) = usage.last_used_at {
        let times = if usage.uses == 1 { "once".to_string() } else { format!("{} times", usage.uses) };
        parts.push(format!("used {times} before, last {}", dated(&at.to_rfc3339_opts(SecondsFormat::Secs, true), now)));
    }
    if usage.helped > 0 {
        let sessions = if usage.helped == 1 { "session" } else { "sessions" };
        parts.push(format!("tests passed after it in {} {sessions}", usage.helped));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// How long before `now` `at` was, in its largest whole unit: `just now`, `5 minutes ago`, `1 hour ago`,
/// `12 days ago`. A time more than a minute after `now` (written by a machine whose clock is ahead, or
/// read on one that is behind) says so: `3 days ahead of this clock`.
pub fn ago(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let seconds = (now - at).num_seconds();
    if seconds.abs() < 60 {
        return "just now".to_string();
    }
    let (n, unit) = match seconds.unsigned_abs() {
        s if s < 3_600 => (s / 60, "minute"),
        s if s < 86_400 => (s / 3_600, "hour"),
        s => (s / 86_400, "day"),
    };
    let plural = if n == 1 { "" } else { "s" };
    if seconds < 0 { format!("{n} {unit}{plural} ahead of this clock") } else { format!("{n} {unit}{plural} ago") }
}

#[cfg(test)]
mod tests {
    /// The text shows the score that ordered the results, labelled, beside the cosine; a result that
    /// only a keyword brought in says so.
    #[test]
    fn the_label_names_both_scores_and_a_keyword_only_match() {
        assert_eq!(super::score_label(1.13636, 0.37791, true), "fused_score=1.1364, cosine=0.3779");
        assert_eq!(super::score_label(0.4, -0.1, true), "fused_score=0.4000, cosine=-0.1000, keyword match only");
        assert_eq!(super::score_label(0.05, 0.05, false), "fused_score=0.0500, cosine=0.0500");
    }

    #[test]
    fn ages_read_in_their_largest_whole_unit() {
        use super::{ago, dated};
        use chrono::{DateTime, Utc};
        let now = DateTime::parse_from_rfc3339("2026-12-07T12:00:00Z").unwrap().with_timezone(&Utc);
        let before = |s: i64| ago(now - chrono::Duration::seconds(s), now);
        assert_eq!(before(59), "just now");
        assert_eq!(before(60), "1 minute ago");
        assert_eq!(before(3_599), "59 minutes ago");
        assert_eq!(before(3_600), "1 hour ago");
        assert_eq!(before(86_399), "23 hours ago");
        assert_eq!(before(86_400 * 12 + 5), "12 days ago");
        assert_eq!(before(-30), "just now", "seconds of skew are no news");
        assert_eq!(before(-3 * 86_400 - 10), "3 days ahead of this clock", "a clock ahead of ours is no age");
        assert_eq!(dated("2026-12-06T12:00:00Z", now), "2026-12-06T12:00:00Z (1 day ago)");
        assert_eq!(dated("yesterday", now), "yesterday");
    }
}
