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

mod pass;

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::{ConversationItem, DistillRun, Role, RunState};
use crate::embed::LazyEmbedder;
use crate::llm::{Client, ClientSettings, LlmError, check_usd};
use crate::memory::redact::{escape_controls, redact};
use crate::store::{ArchivalStore, ConversationStore, DistillRunStore, StoreError};
use pass::{Pass, Plan};

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
(`astra-mcp distill status --actor {actor}` lists runs; on object storage, a run whose machine stopped holds \
the lock until its lease expires, at most 10 minutes after that)"
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
    sessions: Arc<dyn ConversationStore>,
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
        S: ConversationStore + ArchivalStore + DistillRunStore + 'static,
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
            let interrupted = run.state == RunState::Running
                && match self.runs.try_lock_runs(&run.actor_id).await? {
                    Some(lock) => {
                        lock.release().await;
                        true
                    }
                    None => false,
                };
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
        let Some(lock) = self.runs.try_lock_runs(actor).await? else {
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
        let result = self.run_locked(config, client).await;
        lock.release().await;
        result
    }

    /// [`Self::run`] once the actor's lock is held.
    async fn run_locked(&self, config: &DistillConfig, client: Client) -> Result<DistillRun, DistillError> {
        let actor = &config.actor_id;
        let distilled: HashSet<Uuid> =
            self.close_interrupted(actor).await?.iter().flat_map(|r| r.distilled().iter().copied()).collect();
        let items: Vec<ConversationItem> = self
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
