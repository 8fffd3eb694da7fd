//! Verified fix memory: `search_codebase_memory`, `run_tests` and `store_fix_memory` as rules over a
//! session's gate state (docs/tools.md). A fix becomes memory only when this server saw the project's
//! tests pass on the current files (or, in trust mode, marked `verified: false`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;

use super::MemoryError;
use super::gate::{Confirmed, FailedRun, GateState};
use super::project::{PROJECT_FILE, TestCommand};
use super::redact::{for_storage, redact};
use super::retrieval::{Fusion, Ranked, Search};
use super::revalidate::{self, CodeCheck, CodeState};
use super::testrun::{self, TestRun};
use super::workspace::Workspace;
use crate::domain::{FailedAttempt, FixRecord, Receipt, Scope, VerifiedRun, fix_memory_id};
use crate::embed::LazyEmbedder;
use crate::store::{FixFilter, FixQuery, FixStore, Searchable};

/// Failed attempts one fix keeps, at most (docs/tools.md, "What did not work").
pub const MAX_FAILED_ATTEMPTS: usize = 5;

/// Fixes of the project a passing `run_tests` looks at for renewal, at most: the most recently
/// confirmed ones (docs/tools.md, "How fresh is a fix?").
const RENEW_AT_MOST: usize = 200;

/// Symptom text embedded with a fix, in characters (the model reads 256 word pieces at most).
const MAX_SYMPTOM_CHARS: usize = 700;

/// Settings of the fix memory, resolved from flags and env (see `config`).
#[derive(Debug, Clone)]
pub struct FixMemoryConfig {
    /// Owner and project label of new fixes.
    pub scope: Scope,
    /// Workspace root; `None` disables `run_tests` and `store_fix_memory`.
    pub workspace: Option<Workspace>,
    /// Shell command `run_tests` runs in the workspace root, and why it is that one.
    pub test_command: Option<TestCommand>,
    /// Test run timeout.
    pub test_timeout: Duration,
    /// Accept client-reported outcomes (rows stored `verified: false`).
    pub trust_client_outcomes: bool,
    /// Cosine floor for hits without a keyword match.
    pub min_score: f32,
}

/// One search result.
#[derive(Debug, Clone)]
pub struct FixHit {
    pub record: FixRecord,
    /// Cosine similarity of query and stored fix.
    pub score: f32,
    /// The fused score that ordered the results.
    pub fused_score: f32,
    /// Did the full-text (BM25) ranking contain this fix?
    pub keyword_hit: bool,
    /// Each ranking's rank and score of this fix.
    pub ranked: super::retrieval::Ranked,
    /// Is the fix still in the code ([`Self::code`](FixMemory::code))?
    pub code: CodeCheck,
}

/// What `run_tests` reports.
#[derive(Debug, Clone)]
pub struct RunTestsReport {
    pub run: TestRun,
    /// Set only when the run passed (exit code 0, no reported failures) and no file changed during it.
    pub confirmed_outcome: Option<String>,
    /// The tests passed but the workspace changed while they ran, so nothing was confirmed.
    pub changed_during_run: bool,
    /// The files that changed while the tests ran (added, removed or edited), sorted; empty unless
    /// `changed_during_run`.
    pub changed_files: Vec<String>,
    /// Set only when the run failed: the id a fix of this session cites in its failed attempts.
    pub failed_run_id: Option<String>,
    /// Stored fixes of this project this pass renewed: still in place, at a tree none of their runs had
    /// tested ([`FixMemory::renew`]); 0 unless the run confirmed an outcome.
    pub renewed: usize,
}

/// A `store_fix_memory` request after shape validation.
#[derive(Debug, Clone)]
pub struct StoreFixRequest {
    pub fix_description: String,
    pub error_type: String,
    pub file_paths: Vec<String>,
    pub outcome: String,
    /// What was tried before and did not work, each with the id of the failing `run_tests` of this
    /// session that showed it (`(what, failed_run_id)`).
    pub failed_attempts: Vec<(String, String)>,
}

/// A stored (or re-stored) fix.
#[derive(Debug, Clone)]
pub struct StoredFix {
    pub record: FixRecord,
    /// False when an identical store of this session had already written the row (idempotent retry),
    /// or when `earlier` is true.
    pub created: bool,
    /// True when nothing was written: the session had no failing run, and `record` is the same fix as an
    /// earlier session stored it.
    pub earlier: bool,
}

/// The fix-memory service: one per server, shared by every session.
pub struct FixMemory {
    store: Arc<dyn FixStore>,
    embedder: LazyEmbedder,
    config: FixMemoryConfig,
    /// [`Fusion::fixes`] with the config's cosine floor.
    fusion: Fusion,
}

impl FixMemory {
    pub fn new(store: Arc<dyn FixStore>, embedder: LazyEmbedder, config: FixMemoryConfig) -> Self {
        let fusion = Fusion { min_score: config.min_score, ..Fusion::fixes() };
        Self { store, embedder, config, fusion }
    }

    /// The same memory, its searches fused with `fusion` (the evaluations compare settings with it).
    pub fn with_fusion(self, fusion: Fusion) -> Self {
        Self { fusion, ..self }
    }

    /// The embedder searches use (its tokenizer also counts tokens).
    pub fn embedder(&self) -> &LazyEmbedder {
        &self.embedder
    }

    /// Hybrid search over the actor's confirmed fixes in every project: vector and BM25 rankings fused
    /// by their scores ([`Fusion::fixes`]); hits below `min_score` cosine without a keyword match are dropped. Opens the session's
    /// memory gate even when nothing is found.
    pub async fn search(
        &self,
        session: &GateState,
        query: &str,
        error_type: Option<&str>,
        top_k: usize,
    ) -> Result<Vec<FixHit>, MemoryError> {
        let started = std::time::Instant::now();
        let query = redact(query).into_owned();
        let fusion = self.fusion;
        let fix_query = FixQuery {
            filter: FixFilter {
                actor_id: self.config.scope.actor_id.clone(),
                error_type: error_type.map(str::to_string),
            },
            vector: Vec::new(),
            text: query.clone(),
            limit: fusion.limit(top_k),
        };
        let search = Search { name: "fixes", embedder: &self.embedder, query: &query, fusion: &fusion, top_k, started };
        let hits = search.over(Arc::clone(&self.store) as Arc<dyn Searchable<FixRecord>>, fix_query).await?;
        let hits: Vec<FixHit> = hits
            .into_iter()
            .map(|hit| FixHit {
                code: self.code(&hit.row),
                record: hit.row,
                score: hit.score,
                fused_score: hit.fused_score,
                keyword_hit: hit.keyword_hit,
                ranked: hit.ranked,
            })
            .collect();
        session.record_search(&query);
        Ok(hits)
    }

    /// The verified fixes of this project, the most recently confirmed first, at most `limit`, each with
    /// its staleness (as a search reports it). `score` is the cosine of nothing: 0; `keyword_hit` false; `ranked` empty.
    pub async fn recent(&self, limit: usize) -> Result<Vec<FixHit>, MemoryError> {
        let scope = &self.config.scope;
        let fixes = self.store.recent_fixes(&scope.actor_id, &scope.project, limit).await?;
        Ok(fixes
            .into_iter()
            .map(|record| FixHit {
                code: self.code(&record),
                record,
                score: 0.0,
                fused_score: 0.0,
                keyword_hit: false,
                ranked: Ranked::default(),
            })
            .collect())
    }

    /// Is a fix still in the code ([`revalidate::classify`])? Known only for a fix made in this very
    /// project and workspace root, from its receipt: [`CodeState::Unknown`](revalidate::CodeState) for
    /// other projects, other checkouts that share the project label, or no receipt. Reads the fix's files.
    pub fn code(&self, record: &FixRecord) -> CodeCheck {
        let Some(workspace) = self.config.workspace.as_ref() else {
            return CodeCheck::unknown("this server has no workspace");
        };
        if record.project != self.config.scope.project {
            return CodeCheck::unknown("a fix of another project");
        }
        let Some(receipt) = record.receipt.as_ref() else {
            return CodeCheck::unknown("no receipt: its outcome was reported by the client");
        };
        if receipt.file_hashes.is_empty() {
            return CodeCheck::unknown("its files were not recorded");
        }
        if Path::new(&receipt.workspace_root) != workspace.root() {
            return CodeCheck::unknown("made in another checkout of this project");
        }
        let paths: Vec<String> = receipt.file_hashes.keys().cloned().collect();
        let current = workspace.file_hashes(&paths);
        revalidate::classify(&receipt.changes, &receipt.file_hashes, &current, |rel| {
            std::fs::read_to_string(workspace.root().join(rel)).ok()
        })
    }

    /// The test command `run_tests` runs and why, when there is one.
    pub fn test_command(&self) -> Option<&TestCommand> {
        self.config.test_command.as_ref()
    }

    fn workspace(&self, tool: &str) -> Result<&Workspace, MemoryError> {
        self.config.workspace.as_ref().ok_or_else(|| {
            MemoryError::refused(format!(
                "{tool} needs a workspace, and this server has none: it was started outside a project (its \
                 working directory is in no git work tree and has no {PROJECT_FILE} or test setup) and without \
                 --workspace (ASTRA_WORKSPACE). Searching works; to run tests and store fixes, the user starts the \
                 server in the project directory or passes --workspace DIR."
            ))
        })
    }

    /// Runs the configured test command in the workspace. A pass records the session's confirmed outcome
    /// with the workspace digest, which must be the same before and after the run; a failure records its
    /// symptoms and clears any confirmed outcome. A command that could not run
    /// ([`TestRun::could_not_run`]) is a refusal naming where the command came from, and changes no gate.
    pub async fn run_tests(&self, session: &GateState) -> Result<RunTestsReport, MemoryError> {
        let workspace = self.workspace("run_tests")?;
        let chosen = self.config.test_command.as_ref().ok_or_else(|| {
            MemoryError::refused(format!(
                "run_tests has no test command: none was given and none was detected at the workspace root {} \
                 (pytest, cargo test, go test, npm test, make test). The user sets one with `test_command = \"...\"` \
                 in {PROJECT_FILE} at the workspace root, or with --test-command CMD (ASTRA_TEST_COMMAND), e.g. \
                 --test-command 'python3 -m pytest -q'.",
                workspace.root().display()
            ))
        })?;
        let command = chosen.command.as_str();
        // held until the run's report is ready (dropped with the call when it is cancelled)
        let _slot = testrun::run_slot(workspace.root()).map_err(MemoryError::refused)?;
        let before = self.blocking(workspace, Workspace::snapshot).await?;
        // a run that did not start, or whose command could not run, tested nothing: the gates stay as
        // they were, and the answer is an error that names the command
        let run = testrun::run(command, workspace.root(), self.config.test_timeout)
            .await
            .map_err(|source| MemoryError::Io { context: format!("starting `{command}`"), source })?;
        if let Some(why) = run.could_not_run() {
            return Err(MemoryError::refused(testrun::not_run_message(&run, &why, chosen)));
        }
        if !run.passed() {
            session.record_failure(run.symptom_lines());
            let id = testrun::failed_run_id(&run.command, &before.digest, &run.finished_at);
            session.record_failed_run(FailedRun {
                id: id.clone(),
                command: redact(&run.command).into_owned(),
                summary: redact(&run.summary).into_owned(),
                finished_at: run.finished_at,
                workspace_digest: before.digest.clone(),
                git_head: workspace.git_head().await,
            });
            return Ok(RunTestsReport {
                run,
                confirmed_outcome: None,
                changed_during_run: false,
                changed_files: Vec::new(),
                failed_run_id: Some(id),
                renewed: 0,
            });
        }
        // Confirm only the files the tests actually ran against: an edit during the run voids the pass.
        let after = self.blocking(workspace, Workspace::snapshot).await?;
        if after.digest != before.digest {
            session.record_failure(Vec::new());
            let changed_files = before.changed_files(&after);
            return Ok(RunTestsReport {
                run,
                confirmed_outcome: None,
                changed_during_run: true,
                changed_files,
                failed_run_id: None,
                renewed: 0,
            });
        }
        let outcome = testrun::confirmed_outcome(&run, &after.digest);
        let digest = after.digest.clone();
        session.record_pass(Confirmed {
            outcome: outcome.clone(),
            workspace_digest: after.digest,
            workspace_files: after.files,
            command: redact(&run.command).into_owned(),
            summary: redact(&run.summary).into_owned(),
            duration_ms: run.duration_ms,
            finished_at: run.finished_at,
        });
        let confirmed_outcome = Some(outcome);
        let renewed = self.renew(workspace, &run, &digest).await;
        Ok(RunTestsReport {
            run,
            confirmed_outcome,
            changed_during_run: false,
            changed_files: Vec::new(),
            failed_run_id: None,
            renewed,
        })
    }

    /// Renewal by a passing run: each verified fix of this project (the [`RENEW_AT_MOST`] most recently
    /// confirmed) that is [in place](CodeState::InPlace) at the tree `run` tested (`digest`), whose own
    /// receipt ran the same test command (a subset of the tests, or another command, proves less than the
    /// pass that confirmed it), and that no run of it had tested at that tree, gets `run` as its receipt's
    /// `last_verified`. Times are not compared: another machine's clock may be ahead. One write for all;
    /// the rest of a row is untouched. A failure of it is logged and renews nothing: the run's answer does
    /// not depend on it.
    async fn renew(&self, workspace: &Workspace, run: &TestRun, digest: &str) -> usize {
        let scope = &self.config.scope;
        let fixes = match self.store.recent_fixes(&scope.actor_id, &scope.project, RENEW_AT_MOST).await {
            Ok(fixes) => fixes,
            Err(error) => {
                tracing::warn!(%error, "renewing the fixes this passing run verified: reading them failed");
                return 0;
            }
        };
        let command = redact(&run.command);
        let mut renewed: Vec<FixRecord> = fixes
            .into_iter()
            .filter(|fix| {
                fix.receipt.as_ref().is_some_and(|r| r.command == command && r.last_verified_digest() != digest)
                    && self.code(fix).state == CodeState::InPlace
            })
            .collect();
        if renewed.is_empty() {
            return 0;
        }
        let verified = VerifiedRun {
            command: command.into_owned(),
            summary: redact(&run.summary).into_owned(),
            finished_at: run.finished_at,
            git_head: workspace.git_head().await,
            workspace_digest: digest.to_string(),
        };
        for receipt in renewed.iter_mut().filter_map(|fix| fix.receipt.as_mut()) {
            receipt.last_verified = Some(verified.clone());
        }
        match self.store.renew_fixes(&scope.actor_id, &renewed).await {
            Ok(n) => n as usize,
            Err(error) => {
                tracing::warn!(%error, fixes = renewed.len(), "renewing the fixes this passing run verified failed");
                0
            }
        }
    }

    /// Runs a workspace walk on the blocking pool (it reads every file).
    async fn blocking<T: Send + 'static>(
        &self,
        workspace: &Workspace,
        op: fn(&Workspace) -> std::io::Result<T>,
    ) -> Result<T, MemoryError> {
        let ws = workspace.clone();
        let io = |source| MemoryError::Io { context: "reading the workspace".into(), source };
        tokio::task::spawn_blocking(move || op(&ws)).await.map_err(|e| io(std::io::Error::other(e)))?.map_err(io)
    }

    /// Stores a fix through the gates (docs/tools.md, "The gates"), in order: workspace configured, memory gate,
    /// paths, confirmed outcome (unless trust mode), workspace unchanged since the pass. The id is
    /// UUIDv5(session, fix, error type, outcome, paths), so an identical retry upserts the same row.
    pub async fn store_fix(&self, session: &GateState, request: StoreFixRequest) -> Result<StoredFix, MemoryError> {
        let workspace = self.workspace("store_fix_memory")?;
        if !session.has_searched() {
            let failed = session
                .failed_search()
                .map(|answer| {
                    format!(
                        " Your earlier search_codebase_memory call failed, so it did not count; it was answered: \
                         \"{}\"",
                        answer.trim()
                    )
                })
                .unwrap_or_default();
            return Err(MemoryError::refused(format!(
                "memory gate: call search_codebase_memory with the failure symptoms first (an empty result counts), \
                 then store the fix.{failed}"
            )));
        }
        let snapshot = self.blocking(workspace, Workspace::snapshot).await?;
        let mut paths = Vec::with_capacity(request.file_paths.len());
        for raw in &request.file_paths {
            let rel = workspace.check_relative_file(raw).map_err(|e| MemoryError::refused(e.to_string()))?;
            if !snapshot.files.contains_key(&rel) {
                return Err(MemoryError::refused(format!(
                    "`{rel}` is not covered by the workspace digest (ignored by .gitignore/.ignore, or inside .git or a \
                     cache/build directory), so this server cannot vouch for it: list the source files the fix changed."
                )));
            }
            if !paths.contains(&rel) {
                paths.push(rel);
            }
        }
        // each failed attempt cites a failing run of this session: only what the server saw fail is kept
        let mut failed_attempts: Vec<FailedAttempt> = Vec::with_capacity(request.failed_attempts.len());
        let passed_on = session.confirmed().map(|c| c.workspace_digest);
        for (what, id) in &request.failed_attempts {
            let Some(run) = session.failed_run(id.trim()) else {
                let known = session.failed_run_ids();
                let listed = if known.is_empty() {
                    "this session has none".to_string()
                } else {
                    format!("this session's are {}", known.join(", "))
                };
                return Err(MemoryError::refused(format!(
                    "failed_attempts: `{id}` is not the failed_run_id of a run_tests that failed in this session \
                     ({listed}). Cite the failed_run_id that run_tests returned when the attempt failed, or store \
                     the fix without that attempt."
                )));
            };
            if passed_on.as_deref() == Some(run.workspace_digest.as_str()) {
                return Err(MemoryError::refused(format!(
                    "failed_attempts: run `{id}` tested the same files as the passing run: it shows a flaky test, not \
                     an attempt that failed. Store the fix without it."
                )));
            }
            let attempt = FailedAttempt {
                what: for_storage(what.trim()),
                command: run.command,
                summary: run.summary,
                finished_at: run.finished_at,
            };
            if !failed_attempts.contains(&attempt) {
                failed_attempts.push(attempt);
            }
        }
        if self.config.trust_client_outcomes && !failed_attempts.is_empty() {
            return Err(MemoryError::refused(
                "failed_attempts are kept with the receipt of a fix this server verified, and in trust mode \
                 (--trust-client-outcomes) a fix has none: store the fix without them.",
            ));
        }
        let receipt = if self.config.trust_client_outcomes {
            None
        } else {
            let Some(confirmed) = session.confirmed() else {
                return Err(MemoryError::refused(
                    "confirmed-outcome gate: this session has no passing run_tests. Call run_tests; when it passes, \
                     store the fix with its confirmed_outcome as `outcome`.",
                ));
            };
            if request.outcome != confirmed.outcome {
                return Err(MemoryError::refused(format!(
                    "confirmed-outcome gate: `outcome` must be exactly the latest confirmed_outcome of this session: \
                     `{}`. Only the server's own run_tests issues it.",
                    confirmed.outcome
                )));
            }
            if snapshot.digest != confirmed.workspace_digest {
                let changed = super::workspace::changed_files(&confirmed.workspace_files, &snapshot.files);
                let mut message = String::from(
                    "workspace gate: files changed since the tests passed: run `run_tests` again, then store with \
                     its new confirmed_outcome.",
                );
                let note = super::workspace::describe_changes(&changed);
                if !note.is_empty() {
                    message.push(' ');
                    message.push_str(&note);
                }
                return Err(MemoryError::refused(message));
            }
            let root = workspace.root().to_path_buf();
            let captured = paths.clone();
            let base = session.first_failing_head();
            let changes = tokio::task::spawn_blocking(move || revalidate::capture(&root, &captured, base.as_deref()))
                .await
                .unwrap_or_default();
            Some(Receipt {
                command: confirmed.command,
                exit_code: 0,
                summary: confirmed.summary,
                duration_ms: confirmed.duration_ms,
                finished_at: confirmed.finished_at,
                git_head: workspace.git_head().await,
                workspace_root: workspace.root().to_string_lossy().into_owned(),
                workspace_digest: confirmed.workspace_digest,
                file_hashes: workspace.file_hashes(&paths),
                changes,
                failed_attempts,
                last_verified: None,
            })
        };
        let fix_description = for_storage(request.fix_description.trim());
        let error_type = for_storage(request.error_type.trim());
        // a server-issued outcome is stored verbatim; a client-reported one (trust mode) is text like any other
        let outcome = match &receipt {
            Some(_) => request.outcome.trim().to_string(),
            None => for_storage(request.outcome.trim()),
        };
        // A session whose tests never failed here fixed nothing here: the fix it stores, when an earlier
        // session of the project stored it (same description, error type and files), is that fix, whose
        // verification this session's passing run renewed; a second row would show it twice.
        if receipt.is_some() && session.failed_run_ids().is_empty() {
            let (actor, project) = (&self.config.scope.actor_id, &self.config.scope.project);
            let same_paths = |stored: &[String]| {
                let mut stored = stored.to_vec();
                stored.sort_unstable();
                let mut ours = paths.clone();
                ours.sort_unstable();
                stored == ours
            };
            let earlier = self.store.recent_fixes(actor, project, usize::MAX).await?.into_iter().find(|f| {
                f.fix_description == fix_description && f.error_type == error_type && same_paths(&f.file_paths)
            });
            if let Some(record) = earlier {
                return Ok(StoredFix { record, created: false, earlier: true });
            }
        }
        let embedded_text = embedded_text(&fix_description, &error_type, &session.symptoms(), &session.queries());
        let memory_id = fix_memory_id(
            &self.config.scope.actor_id,
            session.session_id(),
            &fix_description,
            &error_type,
            &outcome,
            &paths,
        );
        // an identical retry keeps the failed attempts the stored row already holds
        let mut receipt = receipt;
        if let Some(receipt) = receipt.as_mut()
            && let Some(stored) = self.store.get_fix(&self.config.scope.actor_id, memory_id).await?
        {
            for attempt in stored.receipt.into_iter().flat_map(|r| r.failed_attempts) {
                if receipt.failed_attempts.len() < MAX_FAILED_ATTEMPTS && !receipt.failed_attempts.contains(&attempt) {
                    receipt.failed_attempts.push(attempt);
                }
            }
        }
        let now = Utc::now();
        let record = FixRecord {
            memory_id,
            actor_id: self.config.scope.actor_id.clone(),
            project: self.config.scope.project.clone(),
            session_id: session.session_id().to_string(),
            created_at: now,
            updated_at: now,
            fix_description,
            error_type,
            file_paths: paths,
            outcome,
            verified: receipt.is_some(),
            receipt,
            embedded_text,
        };
        let vector = self.embedder.embed_documents(vec![record.embedded_text.clone()]).await?.remove(0);
        let created = self.store.upsert_fix(&record, &vector).await?;
        Ok(StoredFix { record, created, earlier: false })
    }
}

/// The text a fix row embeds and indexes (docs/tools.md): the error type, the fix, and the symptoms the
/// server saw in the session — failing tests with their assertion lines, then the search queries.
/// Symptoms are capped at [`MAX_SYMPTOM_CHARS`]; everything is redacted.
pub fn embedded_text(fix_description: &str, error_type: &str, symptoms: &[String], queries: &[String]) -> String {
    let mut symptom_text = String::new();
    for line in symptoms.iter().chain(queries) {
        if symptom_text.chars().count() + line.chars().count() > MAX_SYMPTOM_CHARS {
            continue; // a shorter line further on may still fit
        }
        symptom_text.push_str(line);
        symptom_text.push('\n');
    }
    let text = format!("Error type: {error_type}\nFix: {fix_description}\nSymptoms:\n{symptom_text}");
    for_storage(text.trim_end())
}
