//! `astra-mcp-dev eval locomo DIR`: the turn-level LoCoMo retrieval protocol of docs/retrieval.md (Maharana
//! et al., ACL 2024, "Evaluating Very Long-Term Conversational Memory of LLM Agents").
//!
//! Each dialog turn is one conversation item, scoped to its conversation (one actor per conversation),
//! imported and searched through [`ConversationMemory`] exactly as `conversation_search` does. For every
//! question with evidence, recall@K = |evidence ∩ top K| / |evidence|; MRR is the reciprocal rank of the
//! first evidence turn within the top 10 (0 when none). Evidence ids are read leniently: split on `;`,
//! `,` and spaces, normalised to `D<session>:<turn>`, and ids naming no turn dropped.
//!
//! The data is research-licensed (CC BY-NC 4.0): it is read from the given directory, never shipped.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::Role;
use crate::memory::{ConversationMemory, ConversationSearch, ImportTarget, NewItem};

/// Results kept per question (recall@10 and MRR@10 need ten).
const DEPTH: usize = 10;

/// One conversation of the dataset.
#[derive(Debug, Clone)]
pub struct Conversation {
    /// The file stem, e.g. `26`.
    pub sample_id: String,
    /// Sessions in order: (session number, date text, turns).
    pub sessions: Vec<(u32, String, Vec<Turn>)>,
    pub questions: Vec<Question>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Turn {
    pub speaker: String,
    pub dia_id: String,
    pub text: String,
    #[serde(default)]
    pub blip_caption: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Question {
    pub question: String,
    pub category: u32,
    /// Normalised `D<session>:<turn>` ids that name turns of the conversation.
    pub evidence: Vec<String>,
}

/// Normalises one evidence token (`D:11:26` → `D11:26`, `D30:05` → `D30:5`); `None` when it is not an id.
pub fn normalize_dia_id(token: &str) -> Option<String> {
    let t = token.trim().trim_start_matches(['D', 'd']).trim_start_matches(':');
    let (session, turn) = t.split_once(':')?;
    let session: u32 = session.trim().parse().ok()?;
    let turn: u32 = turn.trim().parse().ok()?;
    Some(format!("D{session}:{turn}"))
}

/// Splits an `evidence` list leniently into normalised ids.
pub fn parse_evidence(entries: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for entry in entries {
        for token in entry.split([';', ',', ' ']).filter(|t| !t.trim().is_empty()) {
            if let Some(id) = normalize_dia_id(token)
                && !out.contains(&id)
            {
                out.push(id);
            }
        }
    }
    out
}

/// Reads every `*.json` conversation of `dir`, in file name order.
///
/// # Errors
/// The directory or a file cannot be read, or a file is not a LoCoMo conversation.
pub fn load(dir: &Path) -> anyhow::Result<Vec<Conversation>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    anyhow::ensure!(!paths.is_empty(), "{} has no *.json LoCoMo conversations", dir.display());
    paths.iter().map(|p| load_one(p).with_context(|| format!("reading {}", p.display()))).collect()
}

fn load_one(path: &Path) -> anyhow::Result<Conversation> {
    let value: Value = serde_json::from_slice(&std::fs::read(path)?)?;
    let object = value.as_object().context("not a JSON object")?;
    // some copies nest the dialog under `conversation`
    let conv = object.get("conversation").and_then(Value::as_object).unwrap_or(object);
    let mut sessions = Vec::new();
    for (key, turns) in conv {
        let Some(n) = key.strip_prefix("session_").and_then(|n| n.parse::<u32>().ok()) else { continue };
        let turns: Vec<Turn> = serde_json::from_value(turns.clone()).with_context(|| key.to_string())?;
        let date = conv.get(&format!("session_{n}_date_time")).and_then(Value::as_str).unwrap_or("").to_string();
        sessions.push((n, date, turns));
    }
    sessions.sort_by_key(|(n, _, _)| *n);
    let turn_ids: HashSet<&str> = sessions.iter().flat_map(|(_, _, t)| t.iter().map(|t| t.dia_id.as_str())).collect();
    let mut questions = Vec::new();
    for qa in object.get("qa").and_then(Value::as_array).context("no `qa` list")? {
        let evidence: Vec<String> = qa
            .get("evidence")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        let evidence: Vec<String> =
            parse_evidence(&evidence).into_iter().filter(|id| turn_ids.contains(id.as_str())).collect();
        if evidence.is_empty() {
            continue;
        }
        questions.push(Question {
            question: qa.get("question").and_then(Value::as_str).unwrap_or("").to_string(),
            category: qa.get("category").and_then(Value::as_u64).unwrap_or(0) as u32,
            evidence,
        });
    }
    Ok(Conversation {
        sample_id: path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default(),
        sessions,
        questions,
    })
}

/// The actor a conversation's turns belong to (searches are scoped to it).
pub fn actor_of(sample_id: &str) -> String {
    format!("locomo-{sample_id}")
}

/// The items of one LoCoMo session, in order: the first speaker as `user`, the other as `assistant`,
/// each turn's text with its shared photo's caption, and the session's date (without the time of day,
/// `8 May, 2023`) as the context label.
pub fn session_items(speaker_a: &str, date: &str, turns: &[Turn]) -> Vec<NewItem> {
    turns
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut text = t.text.clone();
            if let Some(caption) = t.blip_caption.as_deref().filter(|c| !c.trim().is_empty()) {
                text.push_str(&format!(" [image: {caption}]"));
            }
            NewItem {
                source_key: t.dia_id.clone(),
                turn: i as i64,
                role: if t.speaker == speaker_a { Role::User } else { Role::Assistant },
                speaker: Some(t.speaker.clone()),
                text,
                timestamp: None,
                date_label: Some(date.rsplit(" on ").next().unwrap_or(date).trim().to_string())
                    .filter(|d| !d.is_empty()),
            }
        })
        .collect()
}

/// Mean figures over a set of questions.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Scores {
    pub questions: usize,
    pub recall_at_5: f64,
    pub recall_at_10: f64,
    pub mrr: f64,
}

/// The evaluation's result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub overall: Scores,
    /// By LoCoMo category: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial.
    pub by_category: BTreeMap<u32, Scores>,
    pub conversations: usize,
    pub turns: usize,
    /// Turns embedded and stored by this run (0 when a reused `--db` had them all).
    pub turns_imported: usize,
    pub import_ms: u128,
    pub search_ms: u128,
    /// Median per-question search time (embedding the question included), in ms.
    pub search_p50_ms: f64,
}

/// Category names of the LoCoMo paper.
pub fn category_name(c: u32) -> &'static str {
    match c {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        5 => "adversarial",
        _ => "other",
    }
}

#[derive(Default)]
struct Sums {
    n: usize,
    r5: f64,
    r10: f64,
    rr: f64,
}

impl Sums {
    fn add(&mut self, r5: f64, r10: f64, rr: f64) {
        self.n += 1;
        self.r5 += r5;
        self.r10 += r10;
        self.rr += rr;
    }

    fn scores(&self) -> Scores {
        let n = self.n.max(1) as f64;
        Scores { questions: self.n, recall_at_5: self.r5 / n, recall_at_10: self.r10 / n, mrr: self.rr / n }
    }
}

/// Recall@K of one ranked list of dialog ids against the evidence.
pub fn recall_at(ranked: &[String], evidence: &[String], k: usize) -> f64 {
    let top: HashSet<&str> = ranked.iter().take(k).map(String::as_str).collect();
    evidence.iter().filter(|e| top.contains(e.as_str())).count() as f64 / evidence.len().max(1) as f64
}

/// Imports every turn (skipping those a reused store has) and scores every question.
///
/// `progress` is called after each conversation with (conversations done, total).
pub async fn run(
    memory: &ConversationMemory,
    conversations: &[Conversation],
    mut progress: impl FnMut(&str, usize, usize),
) -> anyhow::Result<Report> {
    let started = Instant::now();
    let mut turns = 0;
    let mut imported = 0;
    for (i, conv) in conversations.iter().enumerate() {
        let speaker_a = conv.sessions.first().and_then(|(_, _, t)| t.first()).map(|t| t.speaker.clone());
        for (n, date, session_turns) in &conv.sessions {
            let items = session_items(speaker_a.as_deref().unwrap_or(""), date, session_turns);
            turns += items.len();
            let target = ImportTarget {
                actor_id: actor_of(&conv.sample_id),
                project: "locomo".to_string(),
                session_id: format!("locomo-{}-session-{n}", conv.sample_id),
                source: "locomo".to_string(),
            };
            imported += memory.import(&target, &items).await?.added;
        }
        progress("imported", i + 1, conversations.len());
    }
    let import_ms = started.elapsed().as_millis();

    let searching = Instant::now();
    let mut overall = Sums::default();
    let mut by_category: BTreeMap<u32, Sums> = BTreeMap::new();
    let mut latencies = Vec::new();
    for (i, conv) in conversations.iter().enumerate() {
        let actor = actor_of(&conv.sample_id);
        for q in &conv.questions {
            let t = Instant::now();
            let hits = memory
                .search(&actor, &ConversationSearch { query: q.question.clone(), top_k: DEPTH, ..Default::default() })
                .await?;
            latencies.push(t.elapsed().as_secs_f64() * 1000.0);
            let ranked: Vec<String> = hits.iter().map(|h| h.row.source_key.clone()).collect();
            let rr = ranked.iter().position(|id| q.evidence.contains(id)).map_or(0.0, |p| 1.0 / (p + 1) as f64);
            let (r5, r10) = (recall_at(&ranked, &q.evidence, 5), recall_at(&ranked, &q.evidence, 10));
            overall.add(r5, r10, rr);
            by_category.entry(q.category).or_default().add(r5, r10, rr);
        }
        progress("searched", i + 1, conversations.len());
    }
    latencies.sort_by(f64::total_cmp);
    Ok(Report {
        overall: overall.scores(),
        by_category: by_category.iter().map(|(c, s)| (*c, s.scores())).collect(),
        conversations: conversations.len(),
        turns,
        turns_imported: imported,
        import_ms,
        search_ms: searching.elapsed().as_millis(),
        search_p50_ms: latencies.get(latencies.len() / 2).copied().unwrap_or(0.0),
    })
}

/// The report as a plain-text table.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "LoCoMo turn-level retrieval: {} conversations, {} turns, {} questions\n\n",
        report.conversations, report.turns, report.overall.questions
    ));
    out.push_str(&format!("{:<16} {:>9} {:>9} {:>9} {:>7}\n", "category", "recall@5", "recall@10", "MRR", "n"));
    let row = |name: &str, s: &Scores| {
        format!("{:<16} {:>9.3} {:>9.3} {:>9.3} {:>7}\n", name, s.recall_at_5, s.recall_at_10, s.mrr, s.questions)
    };
    for (c, s) in &report.by_category {
        out.push_str(&row(&format!("{c} {}", category_name(*c)), s));
    }
    out.push_str(&row("overall", &report.overall));
    out.push_str(&format!(
        "\nimport: {} turns embedded in {:.1} s; search: {:.1} s total, p50 {:.1} ms per question (embedding included)\n",
        report.turns_imported,
        report.import_ms as f64 / 1000.0,
        report.search_ms as f64 / 1000.0,
        report.search_p50_ms
    ));
    out
}

/// Counts of questions by category, for the data summary.
pub fn question_counts(conversations: &[Conversation]) -> HashMap<u32, usize> {
    let mut counts = HashMap::new();
    for q in conversations.iter().flat_map(|c| &c.questions) {
        *counts.entry(q.category).or_insert(0) += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_read_leniently() {
        let raw = vec!["D8:6; D9:17".to_string(), "D:11:26".to_string(), "D30:05".to_string(), "junk".to_string()];
        assert_eq!(parse_evidence(&raw), vec!["D8:6", "D9:17", "D11:26", "D30:5"]);
    }

    #[test]
    fn recall_counts_evidence_in_the_top_k() {
        let ranked: Vec<String> = ["D1:1", "D1:2", "D1:3"].iter().map(|s| s.to_string()).collect();
        let evidence = vec!["D1:3".to_string(), "D2:1".to_string()];
        assert_eq!(recall_at(&ranked, &evidence, 2), 0.0);
        assert_eq!(recall_at(&ranked, &evidence, 3), 0.5);
    }
}
