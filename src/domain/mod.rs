//! Plain data types shared by every layer: fix records, receipts, scopes and ids. No I/O, no Arrow, no MCP.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Who owns a memory and which project it was made in. Both come from trusted configuration (flags and
/// their environment variables), never from tool arguments (design.md §6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The actor whose long-term memory this is.
    pub actor_id: String,
    /// The project label (by default the workspace folder's name).
    pub project: String,
}

/// Evidence that the server itself saw the project's tests pass, stored inside the fix row (design.md §3).
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
/// and the sorted file paths (design.md §2, plus the actor so two actors can never share a row), so an
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
}
