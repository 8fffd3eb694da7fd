//! One distill run's work (steps 3 and 4 of [`super`]): the items in chunks, each chunk's memories
//! extracted and checked against what is stored, consolidated with their nearest stored memories, and
//! planned as the rows the chunk's commit will write ([`Plan`]); [`super::Distiller`] commits each plan.

use std::collections::{HashMap, HashSet};

use chrono::Utc;
use serde_json::{Value, json};
use uuid::Uuid;

use super::prompt::{self, Action, Consolidation, Decision, Extraction, Pending};
use super::{
    CANDIDATE_MIN_COSINE, CANDIDATES, CHUNK_CHARS, DistillConfig, DistillError, Distiller, MAX_MEMORY_CHARS, source_of,
};
use crate::domain::{ConversationItem, DistillRun, Passage, normalize_for_dedupe, passage_id};
use crate::embed::cosine;
use crate::llm::responses::check_completed;
use crate::llm::{Account, Client};
use crate::memory::redact::{is_bidi_control, redact};
use crate::store::{SearchFilter, TextQuery};

/// One row the run will write, in its final state.
pub(super) struct Planned {
    pub(super) passage: Passage,
    /// The embedding of its text; `None` keeps the stored one (the text did not change).
    pub(super) vector: Option<Vec<f32>>,
    /// Not stored before this run.
    pub(super) is_new: bool,
}

/// Everything one chunk will write, built in memory and committed when the chunk is done.
#[derive(Default)]
pub(super) struct Plan {
    pub(super) rows: HashMap<Uuid, Planned>,
    /// Ids in the order they were first touched.
    pub(super) order: Vec<Uuid>,
    pub(super) changes: Vec<Value>,
    pub(super) added: u64,
    pub(super) updated: u64,
    pub(super) superseded: u64,
    pub(super) unchanged: u64,
    pub(super) rejected: u64,
}

impl Plan {
    fn put(&mut self, planned: Planned) {
        let id = planned.passage.id;
        if !self.order.contains(&id) {
            self.order.push(id);
        }
        self.rows.insert(id, planned);
    }
}

/// A validated extracted memory.
struct Memory<'a> {
    kind: String,
    text: String,
    item: &'a ConversationItem,
    vector: Vec<f32>,
}

/// One run's work: the requests, and the plan they build.
pub(super) struct Pass<'a> {
    pub(super) distiller: &'a Distiller,
    pub(super) config: &'a DistillConfig,
    /// The run's requests: budget checked first, then tokens and cost go to the run and the ledger.
    pub(super) client: Client,
    pub(super) plan: Plan,
    pub(super) run: &'a mut DistillRun,
}

impl Pass<'_> {
    pub(super) async fn work(&mut self, items: &[ConversationItem]) -> Result<(), DistillError> {
        for chunk in chunks(items) {
            self.chunk(&chunk).await?;
            let plan = std::mem::take(&mut self.plan);
            let ids = chunk.iter().map(|i| i.id).collect();
            self.distiller.commit_chunk(self.run, plan, ids).await?;
        }
        Ok(())
    }

    /// Plans one chunk's changes: extraction, then consolidation in rounds.
    async fn chunk(&mut self, chunk: &[&ConversationItem]) -> Result<(), DistillError> {
        let mut queue = self.extract(chunk).await?;
        // Rounds: a memory whose candidates overlap those of a memory already in this round's
        // request, or that is similar to one of them, waits for the next round, where it sees what
        // that decision made. So no two decisions of one request touch the same memory.
        while !queue.is_empty() {
            let mut batch: Vec<(Memory<'_>, Vec<Passage>)> = Vec::new();
            let mut touched: HashSet<Uuid> = HashSet::new();
            let mut deferred = Vec::new();
            for memory in queue {
                if self.already_stored(&memory).await? {
                    self.plan.unchanged += 1;
                    continue;
                }
                let near_batch = batch.iter().any(|(m, _)| cosine(&m.vector, &memory.vector) >= CANDIDATE_MIN_COSINE);
                let candidates = self.candidates(&memory.vector).await?;
                if near_batch || candidates.iter().any(|c| touched.contains(&c.id)) {
                    deferred.push(memory);
                } else if candidates.is_empty() {
                    let text = memory.text.clone();
                    self.add(&memory, &text, memory.vector.clone(), None).await?;
                } else {
                    touched.extend(candidates.iter().map(|c| c.id));
                    batch.push((memory, candidates));
                }
            }
            if !batch.is_empty() {
                let decisions = self.consolidate(&batch).await?;
                self.apply(batch, decisions).await?;
            }
            queue = deferred;
        }
        Ok(())
    }

    /// One request; its usage and cost are added to the run and the ledger before the answer is used.
    async fn send(&mut self, body: &Value) -> Result<Value, DistillError> {
        let config = self.config;
        let project = format!("distill:{}", config.actor_id);
        let account = Account {
            run_id: &self.run.run_id,
            project: &project,
            run_budget_usd: config.run_budget_usd,
            project_budget_usd: config.actor_budget_usd,
        };
        let sent = self.client.send(body, &account, 0).await;
        let (response, charge) = match sent {
            Ok(answered) => answered,
            Err(failure) => {
                if failure.sent {
                    self.run.requests += 1;
                }
                if let Some(charged) = failure.charged {
                    // what may have been paid is on record with the run too
                    self.run.input_tokens += charged.input_tokens;
                    self.run.output_tokens += charged.output_tokens;
                    self.run.cost_usd += charged.usd;
                    self.distiller.runs.put_run(self.run).await?;
                }
                return Err(failure.error.into());
            }
        };
        self.run.requests += 1;
        self.run.input_tokens += charge.input_tokens;
        self.run.output_tokens += charge.output_tokens;
        self.run.cost_usd += charge.usd;
        // what was paid is on record even if the process dies next
        self.distiller.runs.put_run(self.run).await?;
        check_completed(&response)?;
        Ok(response)
    }

    /// Asks for the chunk's durable memories; keeps the usable ones, embedded.
    async fn extract<'i>(&mut self, chunk: &[&'i ConversationItem]) -> Result<Vec<Memory<'i>>, DistillError> {
        let config = self.config;
        let instructions = match config.instructions.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            Some(extra) => format!("{}\n\nThe operator adds: {extra}", prompt::EXTRACT_INSTRUCTIONS),
            None => prompt::EXTRACT_INSTRUCTIONS.to_string(),
        };
        let body = prompt::request_body(
            &config.client.model,
            &instructions,
            prompt::extraction_input(chunk),
            "durable_memories",
            prompt::extraction_schema(),
            config.max_output_tokens,
            config.reasoning_effort.as_deref(),
        );
        let response = self.send(&body).await?;
        let extraction: Extraction = prompt::parse_answer(&response).map_err(DistillError::Model)?;
        let mut kept: Vec<(String, String, &ConversationItem)> = Vec::new();
        for m in extraction.memories {
            let text = clean(&m.text);
            let item = usize::try_from(m.item).ok().and_then(|n| n.checked_sub(1)).and_then(|i| chunk.get(i));
            match item {
                Some(item) if !text.is_empty() && text.chars().count() <= MAX_MEMORY_CHARS => {
                    kept.push((m.kind, text, item));
                }
                _ => {
                    tracing::warn!(
                        item = m.item,
                        chars = text.chars().count(),
                        "a distilled memory was rejected (blank, too long, or citing no item read)"
                    );
                    self.plan.rejected += 1;
                }
            }
        }
        let vectors = if kept.is_empty() {
            Vec::new()
        } else {
            self.distiller.embedder.embed_documents(kept.iter().map(|(_, t, _)| t.clone()).collect()).await?
        };
        Ok(kept
            .into_iter()
            .zip(vectors)
            .map(|((kind, text, item), vector)| Memory { kind, text, item, vector })
            .collect())
    }

    /// The identical text (after normalisation) is stored already and current, or planned.
    async fn already_stored(&self, memory: &Memory<'_>) -> Result<bool, DistillError> {
        let id = passage_id(&self.config.actor_id, &memory.item.project, &memory.text);
        if let Some(planned) = self.plan.rows.get(&id) {
            return Ok(planned.passage.superseded_by.is_none());
        }
        Ok(self
            .distiller
            .archival
            .get_passage(&self.config.actor_id, id)
            .await?
            .is_some_and(|p| p.superseded_by.is_none()))
    }

    /// The actor's current memories most similar to `vector`: stored ones as this run has changed
    /// them, and the ones this run added; best first.
    async fn candidates(&self, vector: &[f32]) -> Result<Vec<Passage>, DistillError> {
        let stored = self
            .distiller
            .archival
            .candidates(&TextQuery {
                filter: SearchFilter { actor_id: self.config.actor_id.clone(), ..Default::default() },
                vector: vector.to_vec(),
                text: String::new(),
                limit: CANDIDATES * 2,
            })
            .await?;
        let mut scored: Vec<(f32, Passage)> = Vec::new();
        for c in stored.by_vector {
            match self.plan.rows.get(&c.row.id) {
                Some(planned) if planned.passage.superseded_by.is_some() => {}
                Some(Planned { passage, vector: Some(v), .. }) => scored.push((cosine(vector, v), passage.clone())),
                Some(_) | None => scored.push((c.cosine, c.row)),
            }
        }
        for planned in self.plan.rows.values().filter(|p| p.is_new && p.passage.superseded_by.is_none()) {
            if let Some(v) = &planned.vector
                && !scored.iter().any(|(_, p)| p.id == planned.passage.id)
            {
                scored.push((cosine(vector, v), planned.passage.clone()));
            }
        }
        scored.retain(|(c, _)| *c >= CANDIDATE_MIN_COSINE);
        scored.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(scored.into_iter().take(CANDIDATES).map(|(_, p)| p).collect())
    }

    /// Asks what each pending memory does to its candidates.
    async fn consolidate(&mut self, pending: &[(Memory<'_>, Vec<Passage>)]) -> Result<Vec<Decision>, DistillError> {
        let config = self.config;
        let input: Vec<Pending<'_>> = pending
            .iter()
            .map(|(m, c)| Pending { kind: &m.kind, text: &m.text, candidates: c.iter().collect() })
            .collect();
        let body = prompt::request_body(
            &config.client.model,
            prompt::CONSOLIDATE_INSTRUCTIONS,
            prompt::consolidation_input(&input),
            "memory_decisions",
            prompt::consolidation_schema(),
            config.max_output_tokens,
            config.reasoning_effort.as_deref(),
        );
        let response = self.send(&body).await?;
        let answer: Consolidation = prompt::parse_answer(&response).map_err(DistillError::Model)?;
        Ok(answer.decisions)
    }

    /// Applies the decisions to the plan. A memory without a usable decision is added (nothing is lost).
    async fn apply(
        &mut self,
        pending: Vec<(Memory<'_>, Vec<Passage>)>,
        decisions: Vec<Decision>,
    ) -> Result<(), DistillError> {
        let mut by_index: HashMap<usize, Decision> = HashMap::new();
        for d in decisions {
            if let Some(i) = usize::try_from(d.index).ok().and_then(|n| n.checked_sub(1)).filter(|i| *i < pending.len())
            {
                by_index.entry(i).or_insert(d);
            }
        }
        // texts the model rewrote are embedded together
        let mut texts: Vec<String> = Vec::new();
        let mut chosen: Vec<(Action, Option<Passage>, String)> = Vec::new();
        for (i, (memory, candidates)) in pending.iter().enumerate() {
            let decision = by_index.remove(&i);
            let target = decision
                .as_ref()
                .and_then(|d| d.target_id.as_deref())
                .and_then(|t| candidates.iter().find(|c| c.id.to_string() == t.trim()).cloned());
            let action = match (decision.as_ref().map(|d| d.action), &target) {
                (Some(Action::Add), _) => Action::Add,
                (Some(action), Some(_)) => action,
                (Some(action), None) => {
                    tracing::warn!(
                        index = i + 1,
                        ?action,
                        "a consolidation decision names no candidate; the memory is added"
                    );
                    Action::Add
                }
                (None, _) => {
                    tracing::warn!(index = i + 1, "no consolidation decision for a memory; it is added");
                    Action::Add
                }
            };
            let text = decision
                .as_ref()
                .map(|d| clean(&d.text))
                .filter(|t| !t.is_empty() && t.chars().count() <= MAX_MEMORY_CHARS)
                .unwrap_or_else(|| memory.text.clone());
            if action != Action::Skip && text != memory.text {
                texts.push(text.clone());
            }
            chosen.push((action, target, text));
        }
        let mut vectors: HashMap<String, Vec<f32>> = HashMap::new();
        if !texts.is_empty() {
            let embedded = self.distiller.embedder.embed_documents(texts.clone()).await?;
            vectors.extend(texts.into_iter().zip(embedded));
        }
        for ((memory, _), (action, target, text)) in pending.iter().zip(chosen) {
            let vector = vectors.get(&text).cloned().unwrap_or_else(|| memory.vector.clone());
            match (action, target) {
                (Action::Skip, Some(target)) => {
                    self.plan.unchanged += 1;
                    self.plan.changes.push(json!({"action": "unchanged", "memory_id": target.id.to_string(),
                        "text": memory.text, "session_id": memory.item.session_id, "turn": memory.item.turn}));
                }
                (Action::Update, Some(target)) => self.update(memory, target, &text, vector),
                (Action::Supersede, Some(target)) => {
                    self.add(memory, &text, vector, Some(target)).await?;
                }
                _ => self.add(memory, &text, vector, None).await?,
            }
        }
        Ok(())
    }

    /// Plans a new memory (`supersedes`: the stored memory it replaces, kept and marked).
    async fn add(
        &mut self,
        memory: &Memory<'_>,
        text: &str,
        vector: Vec<f32>,
        supersedes: Option<Passage>,
    ) -> Result<(), DistillError> {
        let actor = &self.config.actor_id;
        let id = passage_id(actor, &memory.item.project, text);
        let now = Utc::now();
        // the same text may be stored already, superseded: it is current again
        let stored = match self.plan.rows.get(&id) {
            Some(planned) => Some((planned.passage.clone(), planned.is_new)),
            None => self.distiller.archival.get_passage(actor, id).await?.map(|p| (p, false)),
        };
        if let Some((existing, _)) = &stored
            && existing.superseded_by.is_none()
        {
            self.plan.unchanged += 1;
            return Ok(());
        }
        let mut tags = vec!["distilled".to_string(), memory.kind.clone()];
        tags.sort();
        let passage = Passage {
            id,
            actor_id: actor.clone(),
            project: memory.item.project.clone(),
            session_id: memory.item.session_id.clone(),
            turn: Some(memory.item.turn),
            source: source_of(&self.run.run_id),
            tags,
            text: text.to_string(),
            created_at: stored.as_ref().map_or(now, |(p, _)| p.created_at),
            updated_at: now,
            embedded_text: text.to_string(),
            superseded_by: None,
        };
        let is_new = stored.as_ref().is_none_or(|(_, new)| *new);
        self.plan.put(Planned { passage, vector: Some(vector), is_new });
        self.plan.added += 1;
        let mut change = json!({"action": "add", "memory_id": id.to_string(), "text": text,
            "session_id": memory.item.session_id, "turn": memory.item.turn});
        if let Some(old) = supersedes {
            change["action"] = json!("supersede");
            change["target_id"] = json!(old.id.to_string());
            change["previous_text"] = json!(old.text);
            self.mark_superseded(old, id);
        }
        self.plan.changes.push(change);
        Ok(())
    }

    fn mark_superseded(&mut self, old: Passage, by: Uuid) {
        let (mut passage, vector, is_new) = match self.plan.rows.remove(&old.id) {
            Some(p) => (p.passage, p.vector, p.is_new),
            None => (old, None, false),
        };
        passage.superseded_by = Some(by);
        passage.updated_at = Utc::now();
        self.plan.superseded += 1;
        self.plan.put(Planned { passage, vector, is_new });
    }

    /// Plans the rewrite of a stored memory that the new one restates.
    fn update(&mut self, memory: &Memory<'_>, target: Passage, text: &str, vector: Vec<f32>) {
        let previous = self.plan.rows.get(&target.id).map_or_else(|| target.clone(), |p| p.passage.clone());
        if normalize_for_dedupe(&previous.text) == normalize_for_dedupe(text) {
            self.plan.unchanged += 1;
            return;
        }
        let is_new = self.plan.rows.get(&target.id).is_some_and(|p| p.is_new);
        // a stored memory counts once however often this run rewrites it
        let first_touch = !self.plan.rows.contains_key(&target.id);
        let mut passage = previous.clone();
        passage.text = text.to_string();
        passage.embedded_text = text.to_string();
        passage.session_id = memory.item.session_id.clone();
        passage.turn = Some(memory.item.turn);
        passage.updated_at = Utc::now();
        if !passage.tags.contains(&memory.kind) {
            passage.tags.push(memory.kind.clone());
            passage.tags.sort();
        }
        self.plan.put(Planned { passage, vector: Some(vector), is_new });
        if !is_new && first_touch {
            self.plan.updated += 1;
        }
        self.plan.changes.push(json!({"action": "update", "memory_id": target.id.to_string(), "text": text,
            "previous_text": previous.text, "session_id": memory.item.session_id, "turn": memory.item.turn}));
    }
}

/// The items in chunks of at most [`CHUNK_CHARS`] characters (an item longer than that is a chunk of its
/// own), keeping their order.
fn chunks(items: &[ConversationItem]) -> Vec<Vec<&ConversationItem>> {
    let mut out: Vec<Vec<&ConversationItem>> = Vec::new();
    let mut size = 0;
    for item in items {
        let chars = item.text.chars().count().min(prompt::MAX_ITEM_CHARS) + 120;
        if out.is_empty() || size + chars > CHUNK_CHARS {
            out.push(Vec::new());
            size = 0;
        }
        out.last_mut().expect("a chunk was pushed").push(item);
        size += chars;
    }
    out
}

/// A memory text as stored: secrets redacted, control characters (but newline and tab) and bidirectional
/// overrides replaced by spaces, so stored text cannot drive a terminal or reorder what a reader sees.
fn clean(text: &str) -> String {
    let text: String = text
        .chars()
        .map(|c| if (c.is_control() && c != '\n' && c != '\t') || is_bidi_control(c) { ' ' } else { c })
        .collect();
    redact(text.trim()).into_owned()
}
