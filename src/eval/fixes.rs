//! `astra-mcp-dev eval fixes`: does `search_codebase_memory` put the right earlier fix first?
//!
//! The evaluation set (`fix_eval_set.json`, made by `bench/fix_eval_set.py`, compiled into the binary)
//! holds 345 confirmed fixes. 225 are in look-alike groups (one cause in many instances that differ
//! only in an identifier, some by one character; several causes with the same error type in the same
//! file), each with a `symptom` query worded apart from it: the failing test and assertion line that
//! `run_tests` reports in another project that hit the same cause. `identifier` queries ask for the one
//! fix holding a token (`E4102`, `AssertionError E4102`). The other 120 are 60 pairs of a target fix and
//! a distractor, with two `paraphrase` queries per pair: the bug described in other words, sharing no
//! content word with the target's stored text (error type, fix, symptoms), and exactly one incidental,
//! rare word with the distractor, a fix of an unrelated bug (a symptom about `<script>` in a display
//! name beside a fix that splits an uploaded shell script into lines). There only the meaning finds the
//! target, and a keyword ranking normalised by the query's best match gives the one shared word full
//! credit. Causes are split into `tune` (the fusion's weights were chosen on it) and `held_out` (never
//! looked at while tuning).
//!
//! Every fix is stored as `store_fix_memory` would store it (the same embedded text: error type, fix,
//! the symptoms its session saw) in a fresh store, and every query runs through [`FixMemory::search`],
//! once with the product's fusion and once with each ranking alone, so the report shows whether the
//! fusion ever loses to one of its own parts. hit@k = share of queries whose target is among the first
//! k matches; MRR is over the first 10.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use chrono::Utc;
use serde::{Deserialize, Serialize};

use crate::domain::{FixRecord, fix_memory_id};
use crate::embed::LazyEmbedder;
use crate::memory::fixes::embedded_text;
use crate::memory::{FixMemory, FixMemoryConfig, Fusion, GateState};
use crate::store::FixStore;

/// The set as generated, compiled in so the evaluation runs from any checkout or binary.
const EVAL_SET: &str = include_str!("fix_eval_set.json");

/// The actor every evaluation fix belongs to.
const ACTOR: &str = "eval-fixes";

/// Matches kept per query (MRR is over these).
const DEPTH: usize = 10;

/// One stored fix of the set.
#[derive(Debug, Clone, Deserialize)]
pub struct EvalFix {
    pub id: String,
    pub cause: String,
    pub split: String,
    pub project: String,
    pub error_type: String,
    pub fix_description: String,
    pub file_paths: Vec<String>,
    /// What `run_tests` reported in the session that made the fix (embedded with it).
    pub symptoms: Vec<String>,
    pub identifier: String,
}

/// One query and the fix it should find.
#[derive(Debug, Clone, Deserialize)]
pub struct EvalQuery {
    /// `symptom`, `identifier` or `paraphrase`.
    pub kind: String,
    pub split: String,
    /// [`EvalFix::id`] of the right answer.
    pub target: String,
    pub query: String,
}

/// The evaluation set.
#[derive(Debug, Clone, Deserialize)]
pub struct EvalSet {
    pub fixes: Vec<EvalFix>,
    pub queries: Vec<EvalQuery>,
}

impl EvalSet {
    /// The set compiled into the binary.
    ///
    /// # Panics
    /// Never for the file `bench/fix_eval_set.py` writes (a unit test parses it).
    pub fn bundled() -> Self {
        serde_json::from_str(EVAL_SET).expect("src/eval/fix_eval_set.json is a valid evaluation set")
    }
}

/// Figures of one (split, kind) group of queries under one fusion.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Scores {
    pub queries: usize,
    pub hit_at_1: f64,
    pub hit_at_3: f64,
    pub mrr: f64,
}

/// One fusion's figures by `split/kind` (`tune/symptom`, `held_out/identifier`, …).
#[derive(Debug, Clone, Serialize)]
pub struct FusionScores {
    /// `fused` (the product), `vector only`, `BM25 only`.
    pub name: String,
    pub fusion: FusionWeights,
    pub groups: BTreeMap<String, Scores>,
}

/// The weights a run used.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FusionWeights {
    pub vector_weight: f32,
    pub keyword_weight: f32,
    /// Weight of the identifier ranking ([`Fusion::exact_weight`] of the fix search).
    pub identifier_weight: f32,
}

/// A tune-split query whose target the first fusion (the product's) did not rank first.
#[derive(Debug, Clone, Serialize)]
pub struct Miss {
    pub query: String,
    /// [`EvalFix::id`] of the right answer.
    pub target: String,
    /// Its 1-based position in the fused results (`None`: not in the first 10).
    pub position: Option<usize>,
    /// [`EvalFix::id`] of the fix ranked first instead (`None`: no match at all).
    pub first: Option<String>,
}

/// The evaluation's result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub fixes: usize,
    pub runs: Vec<FusionScores>,
    /// The first fusion's misses on the tune split. Held-out misses are never listed: looking at them
    /// would be tuning on them.
    pub tune_misses: Vec<Miss>,
    /// Ranking with usefulness, replayed: the `later` queries under each boost ([`replay_usage`]).
    pub usage_replay: Vec<UsageReplay>,
    /// Embedding and storing every fix, ms.
    pub store_ms: u128,
}

/// The `later` queries of a usage replay under one boost: `fused score + boost · ln(1 + helped)`.
#[derive(Debug, Clone, Serialize)]
pub struct UsageReplay {
    pub boost: f32,
    /// By `split/kind`, as [`FusionScores::groups`].
    pub groups: BTreeMap<String, Scores>,
}

/// Matches an earlier session was shown (`search_codebase_memory`'s default `top_k`).
const REPLAY_SHOWN: usize = 5;

/// The boosts a usage replay compares (0: the product's ranking).
const REPLAY_BOOSTS: [f32; 4] = [0.0, 0.01, 0.05, 0.2];

/// The fusions compared: the given one (the product's unless overridden), and each ranking alone.
pub fn compared(fused: Fusion) -> Vec<(String, Fusion)> {
    vec![
        ("fused".to_string(), fused),
        ("vector only".to_string(), Fusion { vector_weight: 1.0, keyword_weight: 0.0, exact_weight: 0.0, ..fused }),
        ("BM25 only".to_string(), Fusion { vector_weight: 0.0, keyword_weight: 1.0, exact_weight: 0.0, ..fused }),
    ]
}

/// Stores every fix of `set` into `store` (embedded by `embedder`), then runs every query with each of
/// `fusions`.
///
/// # Errors
/// The store or the embedder fails.
pub async fn run(
    store: Arc<dyn FixStore>,
    embedder: LazyEmbedder,
    set: &EvalSet,
    fusions: &[(String, Fusion)],
) -> anyhow::Result<Report> {
    let started = std::time::Instant::now();
    let records: Vec<FixRecord> = set.fixes.iter().map(record).collect();
    let texts: Vec<String> = records.iter().map(|r| r.embedded_text.clone()).collect();
    let vectors = embedder.embed_documents(texts).await.context("embedding the evaluation fixes")?;
    for (record, vector) in records.iter().zip(&vectors) {
        store.upsert_fix(record, vector).await.context("storing an evaluation fix")?;
    }
    let store_ms = started.elapsed().as_millis();
    let id_of: BTreeMap<&str, uuid::Uuid> =
        set.fixes.iter().zip(&records).map(|(f, r)| (f.id.as_str(), r.memory_id)).collect();
    let fix_of: BTreeMap<uuid::Uuid, &str> = id_of.iter().map(|(f, id)| (*id, *f)).collect();

    let mut runs = Vec::new();
    let mut tune_misses = Vec::new();
    for (run, (name, fusion)) in fusions.iter().enumerate() {
        let memory = FixMemory::new(Arc::clone(&store), embedder.clone(), eval_config(fusion)).with_fusion(*fusion);
        let mut sums: BTreeMap<String, (usize, f64, f64, f64)> = BTreeMap::new();
        for q in &set.queries {
            let target =
                id_of.get(q.target.as_str()).with_context(|| format!("query target {} is no fix", q.target))?;
            let hits = memory.search(&GateState::random(), &q.query, None, DEPTH).await?;
            let position = hits.iter().position(|h| h.record.memory_id == *target);
            if run == 0 && q.split == "tune" && position != Some(0) {
                tune_misses.push(Miss {
                    query: q.query.clone(),
                    target: q.target.clone(),
                    position: position.map(|p| p + 1),
                    first: hits.first().and_then(|h| fix_of.get(&h.record.memory_id)).map(|f| f.to_string()),
                });
            }
            let s = sums.entry(format!("{}/{}", q.split, q.kind)).or_default();
            s.0 += 1;
            s.1 += f64::from(u8::from(position == Some(0)));
            s.2 += f64::from(u8::from(position.is_some_and(|p| p < 3)));
            s.3 += position.map_or(0.0, |p| 1.0 / (p + 1) as f64);
        }
        let groups = scores_of(sums);
        runs.push(FusionScores {
            name: name.clone(),
            fusion: FusionWeights {
                vector_weight: fusion.vector_weight,
                keyword_weight: fusion.keyword_weight,
                identifier_weight: fusion.exact_weight,
            },
            groups,
        });
    }
    let (product, fusion) = fusions.first().context("no fusion to run")?;
    let memory = FixMemory::new(Arc::clone(&store), embedder.clone(), eval_config(fusion)).with_fusion(*fusion);
    let usage_replay =
        replay_usage(&memory, set, &id_of).await.with_context(|| format!("replaying usage on {product}"))?;
    Ok(Report { fixes: set.fixes.len(), runs, tune_misses, usage_replay, store_ms })
}

/// Whether ranking by usefulness (`helped`: sessions that saw a fix and then passed, docs/tools.md "Was
/// a memory used?") would put the right fix first more often, replayed on the set. The queries are cut
/// into `earlier` and `later`: of the two paraphrase (or identifier) queries of a fix the first is
/// earlier; of the look-alike fixes of one cause, every other fix's symptom query is earlier (a sibling
/// of the same cause was fixed before). Each earlier query is a session: it is shown the first
/// [`REPLAY_SHOWN`] matches, and passes when the right fix is among them; a pass credits every match it
/// was shown, as the product does (it cannot tell which one the agent used). Then every later query is
/// ranked again with `fused score + boost · ln(1 + helped)` for each of [`REPLAY_BOOSTS`].
///
/// # Errors
/// A search fails.
pub async fn replay_usage(
    memory: &FixMemory,
    set: &EvalSet,
    id_of: &BTreeMap<&str, uuid::Uuid>,
) -> anyhow::Result<Vec<UsageReplay>> {
    let cause_of: BTreeMap<&str, &str> = set.fixes.iter().map(|f| (f.id.as_str(), f.cause.as_str())).collect();
    let mut seen_targets: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut seen_in_cause: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut earlier, mut later) = (Vec::new(), Vec::new());
    for q in &set.queries {
        let first_of_target = {
            let n = seen_targets.entry((q.kind.as_str(), q.target.as_str())).or_default();
            *n += 1;
            *n == 1
        };
        let is_earlier = if q.kind == "symptom" {
            let n = seen_in_cause.entry(cause_of.get(q.target.as_str()).copied().unwrap_or_default()).or_default();
            *n += 1;
            *n % 2 == 1
        } else {
            first_of_target
        };
        if is_earlier { earlier.push(q) } else { later.push(q) }
    }
    let mut helped: BTreeMap<uuid::Uuid, u32> = BTreeMap::new();
    for q in earlier {
        let hits = memory.search(&GateState::random(), &q.query, None, REPLAY_SHOWN).await?;
        if hits.iter().any(|h| Some(&h.record.memory_id) == id_of.get(q.target.as_str())) {
            for h in &hits {
                *helped.entry(h.record.memory_id).or_default() += 1;
            }
        }
    }
    let mut ranked = Vec::new();
    for q in &later {
        let hits = memory.search(&GateState::random(), &q.query, None, DEPTH).await?;
        let target = id_of.get(q.target.as_str()).copied();
        ranked.push((q, target, hits.iter().map(|h| (h.record.memory_id, h.fused_score)).collect::<Vec<_>>()));
    }
    let mut replays = Vec::new();
    for boost in REPLAY_BOOSTS {
        let mut sums: BTreeMap<String, (usize, f64, f64, f64)> = BTreeMap::new();
        for (q, target, hits) in &ranked {
            let mut scored: Vec<(uuid::Uuid, f32)> = hits
                .iter()
                .map(|(id, score)| (*id, score + boost * (1.0 + helped.get(id).copied().unwrap_or(0) as f32).ln()))
                .collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1));
            let position = scored.iter().position(|(id, _)| Some(*id) == *target);
            let s = sums.entry(format!("{}/{}", q.split, q.kind)).or_default();
            s.0 += 1;
            s.1 += f64::from(u8::from(position == Some(0)));
            s.2 += f64::from(u8::from(position.is_some_and(|p| p < 3)));
            s.3 += position.map_or(0.0, |p| 1.0 / (p + 1) as f64);
        }
        replays.push(UsageReplay { boost, groups: scores_of(sums) });
    }
    Ok(replays)
}

/// Per-group sums `(queries, hits@1, hits@3, reciprocal ranks)` as [`Scores`].
fn scores_of(sums: BTreeMap<String, (usize, f64, f64, f64)>) -> BTreeMap<String, Scores> {
    sums.into_iter()
        .map(|(group, (n, h1, h3, rr))| {
            let d = n.max(1) as f64;
            (group, Scores { queries: n, hit_at_1: h1 / d, hit_at_3: h3 / d, mrr: rr / d })
        })
        .collect()
}

/// The configuration every evaluation search runs with: the evaluation actor, no workspace.
fn eval_config(fusion: &Fusion) -> FixMemoryConfig {
    FixMemoryConfig {
        scope: crate::domain::Scope { actor_id: ACTOR.to_string(), project: "eval".to_string() },
        workspace: None,
        test_command: None,
        test_timeout: std::time::Duration::from_secs(1),
        trust_client_outcomes: false,
        min_score: fusion.min_score,
    }
}

/// A fix of the set as `store_fix_memory` stores it (verified, the embedded text of
/// [`embedded_text`]); its session is the fix's id.
fn record(fix: &EvalFix) -> FixRecord {
    let now = Utc::now();
    let outcome = format!("eval: {} passed", fix.id);
    FixRecord {
        memory_id: fix_memory_id(ACTOR, &fix.id, &fix.fix_description, &fix.error_type, &outcome, &fix.file_paths),
        actor_id: ACTOR.to_string(),
        project: fix.project.clone(),
        session_id: fix.id.clone(),
        created_at: now,
        updated_at: now,
        fix_description: fix.fix_description.clone(),
        error_type: fix.error_type.clone(),
        file_paths: fix.file_paths.clone(),
        outcome,
        verified: true,
        receipt: None,
        embedded_text: embedded_text(&fix.fix_description, &fix.error_type, &fix.symptoms, &[]),
    }
}

/// The report as a plain-text table: one row per group, the three runs side by side.
pub fn render(report: &Report) -> String {
    let mut out = format!("Fix retrieval: {} fixes stored in {:.1} s\n\n", report.fixes, report.store_ms as f64 / 1e3);
    out.push_str(&format!("{:<22} {:>5}", "split/queries", "n"));
    for run in &report.runs {
        out.push_str(&format!(" | {:^23}", run.name));
    }
    out.push_str(&format!("\n{:<22} {:>5}", "", ""));
    for _ in &report.runs {
        out.push_str(&format!(" | {:>7} {:>7} {:>7}", "hit@1", "hit@3", "MRR"));
    }
    out.push('\n');
    let groups: Vec<&String> = report.runs.first().map(|r| r.groups.keys().collect()).unwrap_or_default();
    for group in groups {
        let n = report.runs[0].groups[group].queries;
        out.push_str(&format!("{group:<22} {n:>5}"));
        for run in &report.runs {
            let s = &run.groups[group];
            out.push_str(&format!(" | {:>7.3} {:>7.3} {:>7.3}", s.hit_at_1, s.hit_at_3, s.mrr));
        }
        out.push('\n');
    }
    out
}

/// The usage replay as a plain-text table: one row per group of `later` queries, one column per boost.
pub fn render_usage_replay(report: &Report) -> String {
    let mut out = format!(
        "\nUsage replay: later queries ranked by fused score + boost * ln(1 + helped), after earlier sessions \
         shown {REPLAY_SHOWN} matches each\n{:<22} {:>5}",
        "split/queries", "n"
    );
    for r in &report.usage_replay {
        out.push_str(&format!(" | {:^23}", format!("boost {}", r.boost)));
    }
    out.push_str(&format!("\n{:<22} {:>5}", "", ""));
    for _ in &report.usage_replay {
        out.push_str(&format!(" | {:>7} {:>7} {:>7}", "hit@1", "hit@3", "MRR"));
    }
    out.push('\n');
    let Some(first) = report.usage_replay.first() else { return out };
    for (group, s) in &first.groups {
        out.push_str(&format!("{group:<22} {:>5}", s.queries));
        for r in &report.usage_replay {
            let s = &r.groups[group];
            out.push_str(&format!(" | {:>7.3} {:>7.3} {:>7.3}", s.hit_at_1, s.hit_at_3, s.mrr));
        }
        out.push('\n');
    }
    out
}

/// The tune split's misses, one per line: the query, the right fix and its position, the fix ranked
/// first instead.
pub fn render_misses(report: &Report) -> String {
    let mut out = format!(
        "\n{} tune-split misses of the fused search (held-out misses are not shown):\n",
        report.tune_misses.len()
    );
    for m in &report.tune_misses {
        let position = m.position.map_or("not in the top 10".to_string(), |p| format!("at {p}"));
        let first = m.first.as_deref().unwrap_or("nothing");
        out.push_str(&format!("- {}\n  right fix {} {position}; first: {first}\n", m.query, m.target));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_bundled_set_has_look_alikes_both_splits_and_a_target_for_every_query() {
        let set = EvalSet::bundled();
        assert!(set.fixes.len() >= 200, "{} fixes", set.fixes.len());
        let ids: std::collections::HashSet<&str> = set.fixes.iter().map(|f| f.id.as_str()).collect();
        assert!(set.queries.iter().all(|q| ids.contains(q.target.as_str())));
        for split in ["tune", "held_out"] {
            for kind in ["symptom", "identifier"] {
                assert!(set.queries.iter().any(|q| q.split == split && q.kind == kind), "{split}/{kind}");
            }
        }
        // no cause is in both splits
        let mut split_of: BTreeMap<&str, &str> = BTreeMap::new();
        for f in &set.fixes {
            assert_eq!(*split_of.entry(&f.cause).or_insert(&f.split), f.split, "cause {}", f.cause);
        }
        // a query never repeats its fix's words verbatim
        let by_id: BTreeMap<&str, &EvalFix> = set.fixes.iter().map(|f| (f.id.as_str(), f)).collect();
        for q in set.queries.iter().filter(|q| q.kind == "symptom") {
            let fix = by_id[q.target.as_str()];
            assert!(!fix.fix_description.contains(&q.query) && !fix.symptoms.contains(&q.query), "{}", q.query);
        }
    }

    /// Function words of four letters or more that paraphrase queries and their fixes may share.
    const FUNCTION_WORDS: &[&str] = &[
        "about", "after", "also", "before", "does", "each", "even", "ever", "every", "from", "have", "inside",
        "instead", "into", "once", "only", "other", "outside", "over", "same", "some", "still", "such", "than", "that",
        "their", "them", "then", "there", "these", "they", "this", "those", "three", "very", "were", "what", "when",
        "where", "which", "while", "whose", "with", "within", "without",
    ];

    /// The content words of `text`: its lower-case alphanumeric runs of four characters or more, less
    /// [`FUNCTION_WORDS`].
    fn content_words(text: &str) -> BTreeSet<String> {
        let lower = text.to_lowercase();
        lower
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| w.chars().count() >= 4 && !FUNCTION_WORDS.contains(w))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn paraphrase_queries_are_in_both_splits_and_share_no_word_with_their_fix() {
        let set = EvalSet::bundled();
        let paraphrases: Vec<&EvalQuery> = set.queries.iter().filter(|q| q.kind == "paraphrase").collect();
        assert!(paraphrases.len() >= 100, "{} paraphrase queries", paraphrases.len());
        for split in ["tune", "held_out"] {
            assert!(paraphrases.iter().any(|q| q.split == split), "no paraphrase query in {split}");
        }
        let by_id: BTreeMap<&str, &EvalFix> = set.fixes.iter().map(|f| (f.id.as_str(), f)).collect();
        for q in paraphrases {
            let fix = by_id[q.target.as_str()];
            let stored = format!("{}\n{}\n{}", fix.error_type, fix.fix_description, fix.symptoms.join("\n"));
            let fix_words = content_words(&stored);
            let query_words = content_words(&q.query);
            let shared: Vec<&String> = query_words.intersection(&fix_words).collect();
            assert!(shared.is_empty(), "paraphrase query {:?} shares {shared:?} with its fix {}", q.query, fix.id);
        }
    }
}
