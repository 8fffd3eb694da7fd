//! `astra-mcp distill`: the memory pipeline that turns an actor's stored conversations into durable,
//! consolidated archival memories (the managed-platform pattern of extraction then consolidation, e.g.
//! Mem0, arXiv:2504.19413 §2; MemGPT's archival storage, arXiv:2310.08560 §2.2).
//!
//! A run of one actor:
//! 1. takes the actor's lock (`<db>/distill-<actor hash>.lock`, `flock(2)` without waiting): a second
//!    run of the same actor is refused while one is running; a run found RUNNING under a free lock was
//!    interrupted and is closed first (FAILED, or SUCCEEDED when its commit had landed);
//! 2. reads the actor's user and assistant items that no succeeded run has read (tool calls and
//!    results are never read), and records itself RUNNING with their ids;
//! 3. per chunk of items, asks the model (Responses API, strict structured output) for durable
//!    memories citing the item each came from;
//! 4. for each memory, retrieves the actor's most similar stored memories; when there are any, asks the
//!    model whether the new one adds, updates (restates), supersedes (contradicts) or is covered by one;
//! 5. writes each chunk's changes in one commit to the archival table — new memories with their session
//!    and turn as provenance and `source` = `distill:<run id>`; updated ones rewritten; superseded ones
//!    kept, marked with `superseded_by`, hidden from searches by default — and records the chunk's items
//!    as distilled with the run's counts and cost; after the last chunk, SUCCEEDED.
//!
//! A failure keeps what the chunks before it committed and changes nothing of its own chunk: the run is
//! recorded FAILED with the error and what its requests cost, and only the items of the chunks it did
//! not commit stay pending, so the next run reads (and pays for) just those again. Running again over
//! the same sessions reads nothing new and adds nothing. The cost guard is the runner's: approval,
//! key, the ledger with a run budget and a budget of the actor's distill runs together (ledger project
//! `distill:<actor>`), checked before every request.

pub mod prompt;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::domain::{DistillRun, Passage, Role, RunState, SessionItem, normalize_for_dedupe, passage_id};
use crate::embed::LazyEmbedder;
use crate::llm::responses::check_completed;
use crate::llm::{Account, Client, ClientSettings, LlmError, check_usd};
use crate::memory::redact::{escape_controls, is_bidi_control, redact};
use crate::store::{ArchivalStore, DistillRunStore, SearchFilter, SessionStore, StoreError, TextQuery};
use prompt::{Action, Consolidation, Decision, Extraction, Pending};

/// Characters of conversation text per extraction request at most (about 6k tokens).
pub const CHUNK_CHARS: usize = 24_000;
/// Stored memories offered to the model as consolidation candidates of one new memory, at most.
pub const CANDIDATES: usize = 5;
/// Cosine similarity from which a stored memory is a consolidation candidate. Paraphrases and
/// contradictions of one subject score about 0.6–0.9 with all-MiniLM-L6-v2; unrelated text below 0.3.
pub const CANDIDATE_MIN_COSINE: f32 = 0.45;
/// Characters of one distilled memory at most; longer ones are rejected.
pub const MAX_MEMORY_CHARS: usize = 2_000;

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct DistillConfig {
    /// The actor whose sessions are read and whose archival memory is written (trusted configuration).
    pub actor_id: String,
    /// Read only items said at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Read at most this many pending items (the oldest first); the rest stay pending for the next run.
    pub max_items: Option<usize>,
    /// Operator's extra instructions for extraction (e.g. "only build and deployment facts").
    pub instructions: Option<String>,
    /// The model API: URL, key, approval, model, prices, ledger, request timeout.
    pub client: ClientSettings,
    /// `max_output_tokens` of every request.
    pub max_output_tokens: u32,
    /// `reasoning.effort`, passed through.
    pub reasoning_effort: Option<String>,
    /// Budget of this run, USD.
    pub run_budget_usd: f64,
    /// Budget of all distill runs of this actor together (summed from the ledger), USD.
    pub actor_budget_usd: f64,
}

/// Why a run did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum DistillError {
    /// Another run of the actor holds the lock.
    #[error(
        "a distill run of actor `{actor}` is already running{running}: wait for it to finish \
(`astra-mcp distill status --actor {actor}` lists runs)"
    )]
    Busy { actor: String, running: String },
    /// The run started and failed; it is recorded FAILED. `message` is the cause as shown and stored
    /// (secrets redacted, control characters escaped); `cause` the error itself.
    #[error("distill run {run_id} failed: {message}; {kept}")]
    Failed {
        run_id: String,
        message: String,
        /// What the run's committed chunks keep, and what the next run reads again.
        kept: String,
        cause: Box<DistillError>,
    },
    /// Approval, key, budget, transport, API or protocol failures of a request (the cost guard's client).
    #[error(transparent)]
    Request(#[from] LlmError),
    /// The model's answer could not be used.
    #[error("the model's answer is not usable: {0}")]
    Model(String),
    #[error(transparent)]
    Embed(#[from] crate::embed::EmbedError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("invalid settings: {0}")]
    Settings(String),
}

/// The stores a run reads and writes.
#[derive(Clone)]
pub struct Distiller {
    sessions: Arc<dyn SessionStore>,
    archival: Arc<dyn ArchivalStore>,
    runs: Arc<dyn DistillRunStore>,
    embedder: LazyEmbedder,
}

/// A run as listed by `distill status`.
#[derive(Debug, Clone)]
pub struct RunStatus {
    pub run: DistillRun,
    /// RUNNING in the table but no process holds the actor's lock: it was interrupted (the next run of
    /// the actor closes it).
    pub interrupted: bool,
}

impl Distiller {
    /// A distiller over one store holding the conversation items, archival memory and run records.
    pub fn new<S>(store: Arc<S>, embedder: LazyEmbedder) -> Self
    where
        S: SessionStore + ArchivalStore + DistillRunStore + 'static,
    {
        Self { sessions: store.clone(), archival: store.clone(), runs: store, embedder }
    }

    /// Every run of `actor_id` (of every actor when `None`), oldest first.
    ///
    /// # Errors
    /// The store failed.
    pub async fn status(&self, actor_id: Option<&str>) -> Result<Vec<RunStatus>, DistillError> {
        let runs = self.runs.runs(actor_id).await?;
        let mut out = Vec::with_capacity(runs.len());
        for run in runs {
            let interrupted = run.state == RunState::Running && self.runs.try_lock_runs(&run.actor_id).await?.is_some();
            out.push(RunStatus { run, interrupted });
        }
        Ok(out)
    }

    /// Runs the pipeline for `config.actor_id` and returns the finished run (SUCCEEDED).
    ///
    /// # Errors
    /// Before anything is recorded: settings, approval, key ([`DistillError::Request`]) and
    /// [`DistillError::Busy`]. After the run is recorded: [`DistillError::Failed`] with the cause; the
    /// run is then FAILED in the table and nothing in memory changed.
    pub async fn run(&self, config: &DistillConfig) -> Result<DistillRun, DistillError> {
        validate(config)?;
        let client = Client::new(&config.client)?;
        let actor = &config.actor_id;
        let Some(_lock) = self.runs.try_lock_runs(actor).await? else {
            let running = self.runs.runs(Some(actor)).await?.into_iter().rev().find(|r| r.state == RunState::Running);
            let running = running
                .map(|r| {
                    format!(
                        " (run {}, started {})",
                        r.run_id,
                        r.started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    )
                })
                .unwrap_or_default();
            return Err(DistillError::Busy { actor: actor.clone(), running });
        };
        let distilled: HashSet<Uuid> =
            self.close_interrupted(actor).await?.iter().flat_map(|r| r.distilled().iter().copied()).collect();
        let items: Vec<SessionItem> = self
            .sessions
            .actor_items(actor, &[Role::User, Role::Assistant], config.since)
            .await?
            .into_iter()
            .filter(|i| !distilled.contains(&i.id) && !i.text.trim().is_empty())
            .collect();
        let items = match config.max_items {
            Some(max) if items.len() > max => {
                let mut oldest = items;
                oldest.sort_by_key(|i| i.created_at);
                oldest.truncate(max);
                oldest.sort_by(|a, b| (&a.session_id, a.turn).cmp(&(&b.session_id, b.turn)));
                oldest
            }
            _ => items,
        };
        // a missing model fails here, before anything is paid for
        self.embedder.get().await?;
        let mut run = DistillRun {
            run_id: new_run_id(),
            actor_id: actor.clone(),
            state: RunState::Running,
            started_at: Utc::now(),
            finished_at: None,
            model: config.client.model.clone(),
            since: config.since,
            items_read: items.len() as u64,
            added: 0,
            updated: 0,
            superseded: 0,
            unchanged: 0,
            rejected: 0,
            requests: 0,
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: 0.0,
            error: None,
            commit_at: None,
            item_ids: items.iter().map(|i| i.id).collect(),
            distilled_item_ids: Vec::new(),
            pending_item_ids: Vec::new(),
            changes: Vec::new(),
        };
        self.runs.put_run(&run).await?;
        tracing::info!(run_id = %run.run_id, actor = %actor, items = items.len(), "distill run started");
        let mut pass = Pass { distiller: self, config, client, plan: Plan::default(), run: &mut run };
        let committed = pass.work(&items).await;
        run.finished_at = Some(Utc::now());
        match committed {
            Ok(()) => {
                run.state = RunState::Succeeded;
                self.runs.put_run(&run).await?;
                tracing::info!(run_id = %run.run_id, added = run.added, updated = run.updated,
                    superseded = run.superseded, cost_usd = run.cost_usd, "distill run succeeded");
                Ok(run)
            }
            Err(e) => {
                let message = shown(&e.to_string());
                run.state = RunState::Failed;
                run.error = Some(message.clone());
                run.pending_item_ids.clear();
                if let Err(store) = self.runs.put_run(&run).await {
                    tracing::error!(run_id = %run.run_id, "cannot record the run as FAILED: {store}");
                }
                let (done, all) = (run.distilled_item_ids.len(), run.item_ids.len());
                let kept = if done == 0 {
                    "no memory was changed, and the next run reads the same items again".to_string()
                } else {
                    format!(
                        "the changes from {done} of its {all} items are kept, and the next run reads the other {} again",
                        all - done
                    )
                };
                Err(DistillError::Failed { run_id: run.run_id.clone(), message, kept, cause: Box::new(e) })
            }
        }
    }

    /// Closes the actor's runs left RUNNING by a process that ended (the caller holds the actor's lock).
    /// A run whose commit landed (its memories are stored) becomes SUCCEEDED; any other FAILED. Returns
    /// every run of the actor as it stands afterwards.
    async fn close_interrupted(&self, actor: &str) -> Result<Vec<DistillRun>, DistillError> {
        let mut runs = self.runs.runs(Some(actor)).await?;
        for run in runs.iter_mut().filter(|r| r.state == RunState::Running) {
            // A commit's rows all carry its time as `updated_at`: one found means the commit landed
            // (unless a later write to every one of them changed that time since).
            let landed = match run.commit_at {
                Some(at) => self.archival.count_written_at(actor, at).await? > 0,
                None => false,
            };
            if landed {
                let pending = std::mem::take(&mut run.pending_item_ids);
                if pending.is_empty() {
                    // a record from before runs committed per chunk: its one commit held everything
                    run.distilled_item_ids = run.item_ids.clone();
                } else {
                    run.distilled_item_ids.extend(pending);
                }
            }
            run.pending_item_ids.clear();
            run.finished_at = Some(Utc::now());
            let done: HashSet<&Uuid> = run.distilled_item_ids.iter().collect();
            if run.item_ids.iter().all(|id| done.contains(id)) && !run.item_ids.is_empty() {
                run.state = RunState::Succeeded;
                run.error = Some("interrupted after its changes were committed; closed by the next run".into());
            } else {
                run.state = RunState::Failed;
                run.error = Some(format!(
                    "interrupted: the process ended before the run finished; {} of its {} items were committed, \
                     the others are read again",
                    run.distilled_item_ids.len(),
                    run.item_ids.len()
                ));
            }
            tracing::warn!(run_id = %run.run_id, state = run.state.as_str(), "closing an interrupted distill run");
            self.runs.put_run(run).await?;
        }
        Ok(runs)
    }

    /// Writes one chunk's plan in one commit and records the chunk's items as distilled. Before the
    /// commit, the run's counts, changes, commit time and the chunk's items (pending) are recorded (still
    /// RUNNING), so an interrupted run can be closed with what it did. A chunk that changes nothing
    /// commits nothing.
    async fn commit_chunk(&self, run: &mut DistillRun, plan: Plan, chunk: Vec<Uuid>) -> Result<(), DistillError> {
        let before = (run.added, run.updated, run.superseded, run.unchanged, run.rejected, run.changes.len());
        run.added += plan.added;
        run.updated += plan.updated;
        run.superseded += plan.superseded;
        run.unchanged += plan.unchanged;
        run.rejected += plan.rejected;
        run.changes.extend(plan.changes);
        if plan.order.is_empty() {
            run.distilled_item_ids.extend(chunk);
            self.runs.put_run(run).await?;
            return Ok(());
        }
        // µs: what the table stores, so the time reads back equal
        let commit_at = chrono::SubsecRound::trunc_subsecs(Utc::now(), 6);
        let mut new = Vec::new();
        let mut changed = Vec::new();
        for id in &plan.order {
            let planned = &plan.rows[id];
            let mut passage = planned.passage.clone();
            passage.updated_at = commit_at;
            if planned.is_new {
                let vector = planned.vector.clone().expect("a new memory is embedded when planned");
                new.push((passage, vector));
            } else {
                changed.push((passage, planned.vector.clone()));
            }
        }
        run.commit_at = Some(commit_at);
        run.pending_item_ids = chunk;
        self.runs.put_run(run).await?;
        let applied = match self.archival.apply_passages(&new, &changed).await {
            Ok(applied) => applied,
            Err(e) => {
                // the chunk's changes did not land: the run's record says what did
                (run.added, run.updated, run.superseded, run.unchanged, run.rejected) =
                    (before.0, before.1, before.2, before.3, before.4);
                run.changes.truncate(before.5);
                return Err(e.into());
            }
        };
        if applied.skipped > 0 {
            tracing::warn!(run_id = %run.run_id, skipped = applied.skipped, "memories forgotten during the run were left forgotten");
        }
        let pending = std::mem::take(&mut run.pending_item_ids);
        run.distilled_item_ids.extend(pending);
        self.runs.put_run(run).await?;
        Ok(())
    }
}

/// An error as stored and printed: secrets redacted, control characters escaped (`\u{1b}`), one line.
fn shown(text: &str) -> String {
    redact(&escape_controls(text)).into_owned()
}

/// The `source` of the memories a run adds.
pub fn source_of(run_id: &str) -> String {
    format!("distill:{run_id}")
}

fn new_run_id() -> String {
    let id = Uuid::new_v4().simple().to_string();
    format!("distill-{}-{}", Utc::now().format("%Y%m%dT%H%M%SZ"), &id[..8])
}

fn validate(config: &DistillConfig) -> Result<(), DistillError> {
    if config.actor_id.trim().is_empty() {
        return Err(DistillError::Settings("--actor is empty: give the actor whose sessions to distil".into()));
    }
    check_usd(&[
        ("--input-usd-per-million", config.client.pricing.input_per_million_usd),
        ("--output-usd-per-million", config.client.pricing.output_per_million_usd),
        ("--run-budget-usd", config.run_budget_usd),
        ("--project-budget-usd", config.actor_budget_usd),
    ])
    .map_err(DistillError::Settings)?;
    if config.max_output_tokens == 0 {
        return Err(DistillError::Settings("--max-output-tokens must be at least 1".into()));
    }
    Ok(())
}

/// One row the run will write, in its final state.
struct Planned {
    passage: Passage,
    /// The embedding of its text; `None` keeps the stored one (the text did not change).
    vector: Option<Vec<f32>>,
    /// Not stored before this run.
    is_new: bool,
}

/// Everything one chunk will write, built in memory and committed when the chunk is done.
#[derive(Default)]
struct Plan {
    rows: HashMap<Uuid, Planned>,
    /// Ids in the order they were first touched.
    order: Vec<Uuid>,
    changes: Vec<Value>,
    added: u64,
    updated: u64,
    superseded: u64,
    unchanged: u64,
    rejected: u64,
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
    item: &'a SessionItem,
    vector: Vec<f32>,
}

/// One run's work: the requests, and the plan they build.
struct Pass<'a> {
    distiller: &'a Distiller,
    config: &'a DistillConfig,
    /// The run's requests: budget checked first, then tokens and cost go to the run and the ledger.
    client: Client,
    plan: Plan,
    run: &'a mut DistillRun,
}

impl Pass<'_> {
    async fn work(&mut self, items: &[SessionItem]) -> Result<(), DistillError> {
        for chunk in chunks(items) {
            self.chunk(&chunk).await?;
            let plan = std::mem::take(&mut self.plan);
            let ids = chunk.iter().map(|i| i.id).collect();
            self.distiller.commit_chunk(self.run, plan, ids).await?;
        }
        Ok(())
    }

    /// Plans one chunk's changes: extraction, then consolidation in rounds.
    async fn chunk(&mut self, chunk: &[&SessionItem]) -> Result<(), DistillError> {
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
    async fn extract<'i>(&mut self, chunk: &[&'i SessionItem]) -> Result<Vec<Memory<'i>>, DistillError> {
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
        let mut kept: Vec<(String, String, &SessionItem)> = Vec::new();
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
            .passage_candidates(&TextQuery {
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
fn chunks(items: &[SessionItem]) -> Vec<Vec<&SessionItem>> {
    let mut out: Vec<Vec<&SessionItem>> = Vec::new();
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

/// Cosine of two L2-normalized vectors.
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
