//! Plain data types shared by every layer: fix records, receipts, scopes and ids. No I/O, no Arrow, no MCP.

pub mod text;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Who owns a memory and which project it was made in. Both come from trusted configuration (flags and
/// their environment variables), never from tool arguments (docs/http.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Scope {
    /// The actor whose long-term memory this is.
    pub actor_id: String,
    /// The project label (by default the workspace folder's name).
    pub project: String,
}

/// Evidence that the server itself saw the project's tests pass, stored inside the fix row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Receipt {
    /// The shell command that ran the tests.
    pub command: String,
    /// Exit code of that command (0 for every verified fix).
    pub exit_code: i32,
    /// The test runner's summary line, e.g. `4 passed in 0.05s`.
    pub summary: String,
    /// Wall time of the run, in milliseconds.
    pub duration_ms: u64,
    /// When the run ended (RFC 3339, UTC).
    pub finished_at: DateTime<Utc>,
    /// `git rev-parse HEAD` of the workspace at that time, when it is a git repository.
    pub git_head: Option<String>,
    /// Canonical path of the workspace root the tests ran in.
    pub workspace_root: String,
    /// SHA-256 over the workspace's files when the run ended (hex; see `memory::workspace`).
    pub workspace_digest: String,
    /// SHA-256 (hex) of each file in `file_paths`, by workspace-relative path, at store time.
    pub file_hashes: BTreeMap<String, String>,
    /// What the fix changed in each of its files that git shows changed, by workspace-relative path: the
    /// lines a later read looks for (`memory::revalidate`). Stored, never sent to a client: empty in tool
    /// results, outside git, and in fixes stored before it was recorded.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(skip)]
    pub changes: BTreeMap<String, FileChange>,
    /// What was tried before this fix and did not work, each shown failing by a `run_tests` of the
    /// same session (docs/tools.md, "What did not work"); at most 5.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_attempts: Vec<FailedAttempt>,
    /// The latest passing `run_tests` of this project after which the fix was still in the code, at a
    /// tree other than the one it was confirmed at (docs/tools.md, "How fresh is a fix?"); null until
    /// one renews it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified: Option<VerifiedRun>,
}

impl Receipt {
    /// When the fix was last shown to hold: its latest renewal, else the passing run that confirmed it.
    pub fn last_verified_at(&self) -> DateTime<Utc> {
        self.last_verified.as_ref().map_or(self.finished_at, |v| v.finished_at)
    }

    /// The workspace digest of that run.
    pub fn last_verified_digest(&self) -> &str {
        self.last_verified.as_ref().map_or(&self.workspace_digest, |v| &v.workspace_digest)
    }
}

/// A passing `run_tests` that renewed a stored fix: the tests passed with the fix's lines still in its
/// files, at a later tree than the fix's own receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VerifiedRun {
    /// The shell command that ran the tests (redacted).
    pub command: String,
    /// The test runner's summary line, e.g. `5 passed in 0.06s`.
    pub summary: String,
    /// When the run ended (RFC 3339, UTC).
    pub finished_at: DateTime<Utc>,
    /// `git rev-parse HEAD` of the workspace at that time, when it is a git repository.
    pub git_head: Option<String>,
    /// SHA-256 over the workspace's files when the run ended (hex; see `memory::workspace`).
    pub workspace_digest: String,
}

/// How a memory has been used: how often a search returned it or a hook injected it, when last, and in
/// how many sessions that got it the tests then passed (docs/tools.md, "Was a memory used?").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// Times a search returned it or a hook injected it before this result.
    pub uses: u32,
    /// When that last happened (RFC 3339, UTC); null when never.
    pub last_used_at: Option<DateTime<Utc>>,
    /// Sessions that got it and then ran passing tests (`run_tests`, or a test command the hook saw).
    pub helped: u32,
    /// When a person last kept it (restored it from expiry, or imported it): its expiry counts from then
    /// as from a use.
    #[serde(skip)]
    #[schemars(skip)]
    pub kept_at: Option<DateTime<Utc>>,
}

/// What a recorded use of a memory was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UseEvent {
    /// A search tool returned it.
    Returned,
    /// A hook put it into the agent's context.
    Injected,
    /// A session that had been given it then saw its tests pass (once per memory and session).
    Helped,
    /// A person kept it: restored it from expiry (`memory restore`, the browser) or imported it.
    Kept,
}

impl UseEvent {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Returned => "returned",
            Self::Injected => "injected",
            Self::Helped => "helped",
            Self::Kept => "kept",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Returned, Self::Injected, Self::Helped, Self::Kept].into_iter().find(|e| e.as_str() == text)
    }
}

/// One recorded use of a memory (a row of the `uses` table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryUse {
    /// The row's own id: random for a return or an injection; for [`UseEvent::Helped`] derived from the
    /// memory and the session, so a session credits a memory once.
    pub id: Uuid,
    /// The fix, passage or conversation item used.
    pub memory_id: Uuid,
    pub actor_id: String,
    /// The session it was used in (an MCP session, or `hook:<agent session id>`).
    pub session_id: String,
    pub event: UseEvent,
    pub at: DateTime<Utc>,
}

impl MemoryUse {
    /// A return or an injection of `memory_id` in `session_id`, now.
    pub fn now(memory_id: Uuid, actor_id: &str, session_id: &str, event: UseEvent) -> Self {
        let id = match event {
            UseEvent::Helped => {
                Uuid::new_v5(&FIX_ID_NAMESPACE, format!("helped\0{actor_id}\0{session_id}\0{memory_id}").as_bytes())
            }
            _ => Uuid::new_v4(),
        };
        Self {
            id,
            memory_id,
            actor_id: actor_id.to_string(),
            session_id: session_id.to_string(),
            event,
            at: Utc::now(),
        }
    }
}

/// An attempt that did not fix the failure, cited by a fix stored in the same session: what the agent
/// tried, and the server's own failing `run_tests` that showed it did not work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FailedAttempt {
    /// What was tried, in the agent's words (redacted).
    pub what: String,
    /// The shell command of the failing run (redacted).
    pub command: String,
    /// That run's summary line, e.g. `1 failed, 3 passed in 0.05s`.
    pub summary: String,
    /// When that run ended (RFC 3339, UTC).
    pub finished_at: DateTime<Utc>,
}

/// The lines a fix added to one file and removed from it (trimmed, in file order, each once; at most
/// `memory::revalidate::MAX_LINES_PER_FILE` each way).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

/// One confirmed fix as stored in the `fixes` table.
#[derive(Debug, Clone, PartialEq)]
pub struct FixRecord {
    /// UUIDv5 of (session, fix, error type, outcome, paths): see [`fix_memory_id`].
    pub memory_id: Uuid,
    pub actor_id: String,
    pub project: String,
    pub session_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub fix_description: String,
    pub error_type: String,
    /// Workspace-relative paths of the files the fix touched.
    pub file_paths: Vec<String>,
    /// The `confirmed_outcome` of the passing `run_tests` (or, in trust mode, the client's outcome).
    pub outcome: String,
    /// False when the outcome was reported by the client (`--trust-client-outcomes`), not confirmed here.
    pub verified: bool,
    /// Absent only for rows stored without a server-side test run (trust mode, smoke check).
    pub receipt: Option<Receipt>,
    /// The exact text that was embedded and full-text indexed: fix, error type, and observed symptoms.
    pub embedded_text: String,
}

/// Namespace of fix-memory ids (a fixed random UUID; changing it would change every id).
const FIX_ID_NAMESPACE: Uuid = Uuid::from_u128(0x6a1f_52c4_8e0b_4d7e_9b1a_3c5f_0e2d_7a91);

/// The id of a fix: UUIDv5 (RFC 9562 §5.5) over the actor, session, fix description, error type, outcome
/// and the sorted file paths (plus the actor, so two actors can never share a row), so an
/// identical retried store upserts the same row instead of adding a second one.
pub fn fix_memory_id(
    actor_id: &str,
    session_id: &str,
    fix_description: &str,
    error_type: &str,
    outcome: &str,
    file_paths: &[String],
) -> Uuid {
    let mut paths: Vec<&str> = file_paths.iter().map(String::as_str).collect();
    paths.sort_unstable();
    paths.dedup();
    let mut name = String::new();
    for part in [actor_id, session_id, fix_description, error_type, outcome] {
        name.push_str(part);
        name.push('\u{0}');
    }
    name.push_str(&paths.join("\u{0}"));
    Uuid::new_v5(&FIX_ID_NAMESPACE, name.as_bytes())
}

/// Who said a conversation item (the `roles` values of `conversation_search`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    // a tool call or its result (a plain comment: a doc comment would turn the schema's enum into oneOf)
    Tool,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::User, Role::Assistant, Role::Tool];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses `user`, `assistant` or `tool`.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tags one passage keeps at most: what one `archival_memory_insert` may give, and the bound of the tags
/// merged into a stored passage by repeated inserts of its text (those past it are not added).
pub const MAX_PASSAGE_TAGS: usize = 10;

/// A passage of archival memory (MemGPT's archival storage), as stored in the `archival` table.
#[derive(Debug, Clone, PartialEq)]
pub struct Passage {
    /// [`passage_id`] of the actor, project and normalised text: identical text is one row.
    pub id: Uuid,
    pub actor_id: String,
    pub project: String,
    /// The session that inserted it (empty for imports without one).
    pub session_id: String,
    /// Turn of that session when known.
    pub turn: Option<i64>,
    /// Where it came from: `archival_memory_insert`, `import`, `distill`, …
    pub source: String,
    pub tags: Vec<String>,
    /// The passage as stored and returned (secrets redacted).
    pub text: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The exact text that was embedded and full-text indexed.
    pub embedded_text: String,
    /// Set when a later memory superseded this one (kept, hidden from searches by default).
    pub superseded_by: Option<Uuid>,
}

/// One item of a stored conversation (the `session_items` table): MemGPT's recall storage.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationItem {
    /// [`conversation_item_id`] of actor, session, source and source key: re-importing the same item is a no-op.
    pub id: Uuid,
    pub actor_id: String,
    pub project: String,
    pub session_id: String,
    /// 0-based position in its session (as read from its source).
    pub turn: i64,
    pub role: Role,
    /// `mcp` (this server's own tool calls), `claude-code`, `codex`, `responses`, `locomo`, …
    pub source: String,
    /// The item's key inside its source (a message uuid, or a line position).
    pub source_key: String,
    /// The item as stored and returned (secrets redacted).
    pub text: String,
    /// When the item was said (the transcript's timestamp; import time when it has none).
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// The exact text that was embedded: `speaker: text`.
    pub embedded_text: String,
    /// The text the full-text index covers: the item with its context (date, previous turns).
    pub search_text: String,
}

/// One version of a core memory block (the `core_blocks` table keeps every version: the history).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreBlockVersion {
    pub actor_id: String,
    /// Empty for actor-scoped blocks (`persona`, `human`); the project label for project blocks.
    pub project: String,
    pub section: String,
    /// 1 for the first write; each change adds one.
    pub version: i64,
    /// The whole block after this change.
    pub value: String,
    /// `append`, `replace`, `restore`, `import`.
    pub operation: String,
    /// The session that made the change (empty from the CLI).
    pub session_id: String,
    pub created_at: DateTime<Utc>,
}

/// The state of a distillation run (`astra-mcp distill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunState {
    /// Started and not finished; while its process lives, other runs of the actor are refused.
    Running,
    /// Finished: its changes are committed and its items count as distilled.
    Succeeded,
    /// Stopped by an error or interrupted: nothing it planned was written; its items stay pending.
    Failed,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "RUNNING",
            RunState::Succeeded => "SUCCEEDED",
            RunState::Failed => "FAILED",
        }
    }

    /// Parses `RUNNING`, `SUCCEEDED` or `FAILED`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "RUNNING" => Some(RunState::Running),
            "SUCCEEDED" => Some(RunState::Succeeded),
            "FAILED" => Some(RunState::Failed),
            _ => None,
        }
    }
}

/// One distillation run of one actor (the `distill_runs` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DistillRun {
    pub run_id: String,
    pub actor_id: String,
    pub state: RunState,
    pub started_at: DateTime<Utc>,
    /// When it reached SUCCEEDED or FAILED.
    pub finished_at: Option<DateTime<Utc>>,
    pub model: String,
    /// `--since`: only items said at or after this time were read.
    pub since: Option<DateTime<Utc>>,
    /// User and assistant items read.
    pub items_read: u64,
    /// New archival memories written.
    pub added: u64,
    /// Stored memories rewritten because a new one restated them.
    pub updated: u64,
    /// Stored memories marked superseded because a new one contradicted them.
    pub superseded: u64,
    /// Extracted memories that were already stored (identical, or judged covered): nothing written.
    pub unchanged: u64,
    /// Extracted memories dropped as unusable (blank, or citing no item that was read).
    pub rejected: u64,
    /// Responses API requests sent.
    pub requests: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// What the requests cost, USD, at the run's prices.
    pub cost_usd: f64,
    /// Why it failed.
    pub error: Option<String>,
    /// The `updated_at` of every row its latest commit wrote, recorded just before that commit (how an
    /// interrupted run is known to have landed it).
    #[serde(default)]
    pub commit_at: Option<DateTime<Utc>>,
    /// The conversation items it set out to read.
    pub item_ids: Vec<Uuid>,
    /// The items whose chunk's changes are committed: they count as distilled (all of `item_ids` once
    /// the run succeeded) and no later run reads them again. Empty in records written before runs
    /// committed per chunk, which committed once.
    #[serde(default)]
    pub distilled_item_ids: Vec<Uuid>,
    /// The items of the chunk whose commit (at `commit_at`) is under way.
    #[serde(default)]
    pub pending_item_ids: Vec<Uuid>,
    /// What it changed, one JSON object per change (`action`, `memory_id`, `text`, `previous_text`,
    /// `target_id`, `session_id`, `turn`): the audit trail of updates and supersessions.
    pub changes: Vec<serde_json::Value>,
}

impl DistillRun {
    /// The items that count as distilled: all it read once it succeeded, else those of its committed
    /// chunks.
    pub fn distilled(&self) -> &[Uuid] {
        if self.state == RunState::Succeeded { &self.item_ids } else { &self.distilled_item_ids }
    }
}

/// Characters of an item's text kept in a later item's search text (its context line).
pub const CONTEXT_CHARS: usize = 600;
/// Items before a conversation item whose context lines its search text includes.
pub const CONTEXT_ITEMS: usize = 2;

/// The line an item contributes to the search text of the items after it: its embedded text
/// (`speaker: text`) cut to the speaker and [`CONTEXT_CHARS`] characters of text. Derived from the
/// embedded text alone, so forgetting an item can remove its line from its neighbours.
pub fn context_line(embedded_text: &str) -> String {
    let label_chars = embedded_text.split_once(": ").map_or(0, |(label, _)| label.chars().count() + 2);
    embedded_text.chars().take(label_chars + CONTEXT_CHARS).collect()
}

/// The text a conversation item's vector is computed from: its embedded text without UUIDs. A UUID is
/// about 25 word pieces of noise to the model (the record of a call that stored a memory, "Stored passage
/// 3f2a…", is mostly its id), while the full-text indexes, which see the embedded text whole, find the
/// item by it. Records of one tool's calls then share one vector text, embedded once per import.
pub fn conversation_vector_text(embedded_text: &str) -> std::borrow::Cow<'_, str> {
    static UUID: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\s?\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
            .expect("a valid pattern")
    });
    UUID.replace_all(embedded_text, "")
}

/// Namespace of archival passage ids.
const PASSAGE_ID_NAMESPACE: Uuid = Uuid::from_u128(0x3b9c_0d71_5f2e_4a86_b0c4_9e17_d2a8_6f03);
/// Namespace of conversation item ids.
const SESSION_ITEM_ID_NAMESPACE: Uuid = Uuid::from_u128(0x8e24_7a90_c1d3_4b5f_a6e8_0f91_2c7d_b354);

/// Text normalised for duplicate detection (docs/storage.md): lower-cased, whitespace runs collapsed to one
/// space, trimmed.
pub fn normalize_for_dedupe(text: &str) -> String {
    text.split_whitespace().map(str::to_lowercase).collect::<Vec<_>>().join(" ")
}

/// The id of an archival passage: UUIDv5 (RFC 9562 §5.5) over actor, project and the normalised text, so
/// inserting the same text twice (after whitespace/case normalisation) addresses one row.
pub fn passage_id(actor_id: &str, project: &str, text: &str) -> Uuid {
    let name = format!("{actor_id}\u{0}{project}\u{0}{}", normalize_for_dedupe(text));
    Uuid::new_v5(&PASSAGE_ID_NAMESPACE, name.as_bytes())
}

/// The id of a conversation item: UUIDv5 over actor, session, source and the item's key in its source.
pub fn conversation_item_id(actor_id: &str, session_id: &str, source: &str, source_key: &str) -> Uuid {
    let name = format!("{actor_id}\u{0}{session_id}\u{0}{source}\u{0}{source_key}");
    Uuid::new_v5(&SESSION_ITEM_ID_NAMESPACE, name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fix_id_ignores_path_order_but_not_content() {
        let a = fix_memory_id("a", "s", "fix", "E", "ok", &["b.py".into(), "a.py".into()]);
        let b = fix_memory_id("a", "s", "fix", "E", "ok", &["a.py".into(), "b.py".into()]);
        assert_eq!(a, b);
        assert_ne!(a, fix_memory_id("a", "s2", "fix", "E", "ok", &["a.py".into(), "b.py".into()]));
        assert_ne!(a, fix_memory_id("a", "s", "fix", "E", "ok!", &["a.py".into(), "b.py".into()]));
        // field boundaries matter: ("ab","c") must differ from ("a","bc")
        assert_ne!(fix_memory_id("a", "s", "ab", "c", "ok", &[]), fix_memory_id("a", "s", "a", "bc", "ok", &[]));
        assert_ne!(a, fix_memory_id("b", "s", "fix", "E", "ok", &["a.py".into(), "b.py".into()]));
        assert_eq!(a.get_version_num(), 5);
    }

    #[test]
    fn passage_ids_ignore_case_and_whitespace_only() {
        assert_eq!(passage_id("a", "p", "Use  tabs\n here"), passage_id("a", "p", "use tabs here"));
        assert_ne!(passage_id("a", "p", "use tabs here"), passage_id("a", "p", "use tabs there"));
        assert_ne!(passage_id("a", "p", "x"), passage_id("b", "p", "x"));
        assert_ne!(passage_id("a", "p", "x"), passage_id("a", "q", "x"));
    }
}
