//! Per-session gate state (docs/tools.md, "The gates"): whether this session has searched, what it
//! searched for, the symptoms of its last failing test run, and its latest confirmed outcome.
//!
//! A session is one MCP session: one stdio connection, one HTTP `Mcp-Session-Id`, or one `drive` run.
//! Two sessions never share a [`GateState`], so they cannot satisfy each other's gates.

use std::sync::Mutex;

use chrono::{DateTime, Utc};

/// Search queries remembered per session (the oldest are dropped).
const MAX_QUERIES: usize = 8;

/// Failing runs remembered per session, for the failed attempts a fix may cite (the oldest are dropped).
const MAX_FAILED_RUNS: usize = 16;

/// A failing run of the server's own `run_tests`, which a fix stored in the same session may cite as an
/// attempt that did not work (`failed_attempts` of `store_fix_memory`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedRun {
    /// `run-` and 8 hex digits ([`crate::memory::testrun::failed_run_id`]).
    pub id: String,
    /// The command (redacted).
    pub command: String,
    /// The runner's summary line (redacted).
    pub summary: String,
    pub finished_at: DateTime<Utc>,
    /// The workspace digest the run tested (taken before it).
    pub workspace_digest: String,
    /// `git rev-parse HEAD` of the workspace then, when it is a git work tree.
    pub git_head: Option<String>,
}

/// A passing run of the server's own `run_tests`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirmed {
    /// The `confirmed_outcome` string handed to the client.
    pub outcome: String,
    /// Workspace digest taken when that run ended.
    pub workspace_digest: String,
    /// The files that digest covered, each with its hash ([`crate::memory::workspace::Snapshot::files`]),
    /// so that a store refused by the workspace gate can name what changed since.
    pub workspace_files: std::collections::BTreeMap<String, String>,
    pub command: String,
    pub summary: String,
    pub duration_ms: u64,
    pub finished_at: DateTime<Utc>,
}

#[derive(Debug, Default)]
struct Gates {
    searched: bool,
    /// The answer to this session's latest failed search, while no search has completed.
    failed_search: Option<String>,
    queries: Vec<String>,
    symptoms: Vec<String>,
    confirmed: Option<Confirmed>,
    failed_runs: Vec<FailedRun>,
}

/// One session's identity and gate state. Interior mutability: shared by concurrent tool calls.
#[derive(Debug)]
pub struct GateState {
    session_id: String,
    gates: Mutex<Gates>,
    /// Tool calls started in this session: the turn number of provenance and recorded tool items.
    turns: std::sync::atomic::AtomicI64,
}

impl GateState {
    pub fn new(session_id: impl Into<String>) -> Self {
        Self { session_id: session_id.into(), gates: Mutex::new(Gates::default()), turns: Default::default() }
    }

    /// A session whose first tool call or turn gets number `turn` (a session continued later).
    pub fn starting_at(session_id: impl Into<String>, turn: i64) -> Self {
        let session = Self::new(session_id);
        session.turns.store(turn, std::sync::atomic::Ordering::Relaxed);
        session
    }

    /// A session with a fresh random (v4) id.
    pub fn random() -> Self {
        Self::new(uuid::Uuid::new_v4().to_string())
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Counts a tool call and returns its 0-based turn number in this session.
    pub fn next_turn(&self) -> i64 {
        self.turns.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// The turn number of the tool call in progress (the latest one counted).
    pub fn turn(&self) -> i64 {
        (self.turns.load(std::sync::atomic::Ordering::Relaxed) - 1).max(0)
    }

    fn gates(&self) -> std::sync::MutexGuard<'_, Gates> {
        self.gates.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a completed `search_codebase_memory` (an empty result counts): opens the memory gate.
    pub fn record_search(&self, query: &str) {
        let mut g = self.gates();
        g.searched = true;
        g.failed_search = None;
        if !g.queries.iter().any(|q| q == query) {
            g.queries.push(query.to_string());
            if g.queries.len() > MAX_QUERIES {
                g.queries.remove(0);
            }
        }
    }

    /// Records a `search_codebase_memory` call that failed (`answer`: its error text). The memory gate
    /// stays as it was; until a search completes, the store's refusal quotes this answer, so the agent
    /// learns that its call did not count and why.
    pub fn record_failed_search(&self, answer: &str) {
        let mut g = self.gates();
        if !g.searched {
            g.failed_search = Some(answer.chars().take(300).collect());
        }
    }

    /// The answer to the latest failed search, while no search of this session has completed.
    pub fn failed_search(&self) -> Option<String> {
        self.gates().failed_search.clone()
    }

    /// Has a search completed in this session?
    pub fn has_searched(&self) -> bool {
        self.gates().searched
    }

    /// This session's search queries, oldest first.
    pub fn queries(&self) -> Vec<String> {
        self.gates().queries.clone()
    }

    /// Records a failing run: its symptoms replace the previous ones, and any confirmed outcome is
    /// cleared (the latest run decides).
    pub fn record_failure(&self, symptoms: Vec<String>) {
        let mut g = self.gates();
        if !symptoms.is_empty() {
            g.symptoms = symptoms;
        }
        g.confirmed = None;
    }

    /// Records a failing run that a fix of this session may cite as a failed attempt.
    pub fn record_failed_run(&self, run: FailedRun) {
        let mut g = self.gates();
        g.failed_runs.retain(|r| r.id != run.id);
        g.failed_runs.push(run);
        if g.failed_runs.len() > MAX_FAILED_RUNS {
            g.failed_runs.remove(0);
        }
    }

    /// The failing run of this session with this id.
    pub fn failed_run(&self, id: &str) -> Option<FailedRun> {
        self.gates().failed_runs.iter().find(|r| r.id == id).cloned()
    }

    /// The commit the oldest remembered failing run of this session ran on: what a fix stored later is
    /// told from (`memory::revalidate::capture`).
    pub fn first_failing_head(&self) -> Option<String> {
        self.gates().failed_runs.iter().find_map(|r| r.git_head.clone())
    }

    /// The ids of this session's failing runs, oldest first.
    pub fn failed_run_ids(&self) -> Vec<String> {
        self.gates().failed_runs.iter().map(|r| r.id.clone()).collect()
    }

    /// Voids the confirmed outcome (an edit happened after the passing run; `drive`'s `apply_edit`).
    pub fn revoke_confirmed(&self) {
        self.gates().confirmed = None;
    }

    /// Records a passing run of the server's own `run_tests`.
    pub fn record_pass(&self, confirmed: Confirmed) {
        self.gates().confirmed = Some(confirmed);
    }

    /// Symptom lines of the last failing run that named failures.
    pub fn symptoms(&self) -> Vec<String> {
        self.gates().symptoms.clone()
    }

    /// The latest confirmed outcome, if the latest run passed.
    pub fn confirmed(&self) -> Option<Confirmed> {
        self.gates().confirmed.clone()
    }
}
