//! Agent-client hooks (docs/hooks.md): `astra-mcp hook claude-code` (and `hook codex`) reads one hook
//! event and either adds memory to the model's context or imports the session's transcript.
//!
//! Claude Code and Codex CLI (0.169) run a hook command with the event's JSON on stdin, in the same
//! shape (Codex's Bash output is `tool_response` text, and it has no `PostToolUseFailure`); a hook that exits 0 and prints
//! `{"hookSpecificOutput": {"hookEventName": …, "additionalContext": …}}` on stdout has that text added
//! to the model's context; exit code 2 blocks the action (never used here), any other code is a
//! non-blocking error shown to the user (<https://code.claude.com/docs/en/hooks>, "Hook output"). The
//! events, and what each one adds ([`inject`]):
//! - `SessionStart`: the actor's core memory blocks, the project's recent verified fixes and its
//!   decisions (archival passages tagged `decision`).
//! - `PostToolUse` / `PostToolUseFailure` of a Bash call that ran the tests and failed: the verified
//!   fixes that match the failing tests (the search `search_codebase_memory` runs).
//! - `UserPromptSubmit`, when enabled: the archival passages and verified fixes that match the prompt.
//! - `Stop`, `SubagentStop`, `SessionEnd`: import what is new in the transcript, a Claude Code or a
//!   Codex session file (prints nothing).
//!
//! Everything added is quoted data with provenance, within a token budget ([`budget`]), and nothing is
//! printed when nothing is relevant. A hook never breaks the session: any failure (bad input, no store,
//! a store slower than the timeout) is an error for the binary to report in one line on stderr with exit
//! code 1, and nothing on stdout. `ASTRA_HOOKS=off` ([`hooks_killed`]) and a `.astra-mcp/hooks-off`
//! file in the project ([`opted_out`]) turn every hook into a no-op.

pub mod budget;
pub mod inject;
pub mod test_runs;

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use crate::config::HookSettings;

/// The file whose presence in the project directory (or a directory above it) turns the hooks off there.
pub const OPT_OUT_FILE: &str = ".astra-mcp/hooks-off";

/// The JSON a Claude Code hook receives on stdin (<https://code.claude.com/docs/en/hooks>, "Hook
/// input"): the fields every event carries and those of the events handled here. Unknown fields are
/// ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct HookInput {
    pub hook_event_name: String,
    pub session_id: String,
    /// The session's JSONL transcript.
    #[serde(default)]
    pub transcript_path: Option<PathBuf>,
    /// Working directory of the session: the project's workspace and label are found from it as a
    /// server started there finds them (docs/settings.md, "Workspace, project and test command").
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// PostToolUse / PostToolUseFailure: `Bash`, `Edit`, …
    #[serde(default)]
    pub tool_name: Option<String>,
    /// PostToolUse / PostToolUseFailure: the tool's arguments (`{"command": …}` for Bash).
    #[serde(default)]
    pub tool_input: Option<Value>,
    /// PostToolUse: what the tool returned (Bash: `{"stdout", "stderr", "interrupted", …}`).
    #[serde(default)]
    pub tool_response: Option<Value>,
    /// PostToolUseFailure: the failure as the model sees it (Bash: `Exit code N`, stderr, stdout).
    #[serde(default)]
    pub error: Option<String>,
    /// UserPromptSubmit: the prompt.
    #[serde(default)]
    pub prompt: Option<String>,
    /// SessionStart: `startup`, `resume`, `clear` or `compact`.
    #[serde(default)]
    pub source: Option<String>,
}

impl HookInput {
    /// Parses the hook's stdin.
    ///
    /// # Errors
    /// Not JSON, or `hook_event_name` / `session_id` missing, with what was expected.
    pub fn parse(stdin: &[u8]) -> anyhow::Result<Self> {
        serde_json::from_slice(stdin).context(
            "the hook input on stdin is not Claude Code hook JSON with `hook_event_name` and `session_id` \
             (run `astra-mcp hook claude-code` as a Claude Code hook command: docs/hooks.md)",
        )
    }

    /// The session's project directory: `cwd`, else this process's working directory.
    pub fn project_dir(&self) -> Option<PathBuf> {
        self.cwd.clone().or_else(|| std::env::current_dir().ok())
    }
}

/// The events `hook claude-code` handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    SessionStart,
    UserPromptSubmit,
    PostToolUse,
    PostToolUseFailure,
    /// `Stop`, `SubagentStop`, `SessionEnd`: the transcript is imported.
    Import,
}

impl Event {
    /// # Errors
    /// An event this hook does not handle, naming the ones it does.
    pub fn from_name(name: &str) -> anyhow::Result<Self> {
        Ok(match name {
            "SessionStart" => Self::SessionStart,
            "UserPromptSubmit" => Self::UserPromptSubmit,
            "PostToolUse" => Self::PostToolUse,
            "PostToolUseFailure" => Self::PostToolUseFailure,
            "Stop" | "SubagentStop" | "SessionEnd" => Self::Import,
            other => anyhow::bail!(
                "hook event `{other}` is not handled: wire `astra-mcp hook claude-code` to SessionStart, \
                 UserPromptSubmit, PostToolUse, PostToolUseFailure, Stop, SubagentStop or SessionEnd (docs/hooks.md)"
            ),
        })
    }
}

/// What a hook did.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Context for the model: `stdout` is the JSON to print; `report` a line for stderr.
    Context { stdout: String, report: String },
    /// The transcript was imported: a line for stderr.
    Imported(String),
    /// Nothing to add (nothing relevant, not a test run, switched off): print nothing.
    Nothing,
}

/// Whether the kill switch is on: [`crate::env_vars::ASTRA_HOOKS`] is `off`, `0`, `false` or `no`.
pub fn hooks_killed() -> bool {
    std::env::var(crate::env_vars::ASTRA_HOOKS)
        .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "off" | "0" | "false" | "no"))
}

/// The opt-out file that switches the hooks off for `dir`: [`OPT_OUT_FILE`] in `dir` or above it.
pub fn opted_out(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().map(|d| d.join(OPT_OUT_FILE)).find(|f| f.exists())
}

/// The `hookSpecificOutput` JSON that adds `context` for the model.
pub fn context_json(event: &str, context: &str) -> String {
    serde_json::json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": context}}).to_string()
}

/// Runs one hook of Claude Code or Codex: `stdin` is the event's JSON.
///
/// # Errors
/// Bad input or an unhandled event; settings that do not resolve; for context events a store that is
/// missing (it is never created here) or does not answer within `settings.timeout`, or a model that does
/// not load; for imports, an unreadable transcript. The binary reports them on one line, exit code 1.
pub async fn run(stdin: &[u8], settings: &HookSettings) -> anyhow::Result<Outcome> {
    if hooks_killed() {
        return Ok(Outcome::Nothing);
    }
    let input = HookInput::parse(stdin)?;
    let event = Event::from_name(&input.hook_event_name)?;
    let dir = input.project_dir();
    if dir.as_deref().and_then(opted_out).is_some() {
        return Ok(Outcome::Nothing);
    }
    if event == Event::Import {
        return inject::import(&input, settings).await.map(Outcome::Imported);
    }
    let work = inject::context(event, &input, settings);
    let packed = tokio::time::timeout(settings.timeout, work).await.map_err(|_| {
        anyhow::anyhow!(
            "{} gave up after {} ms (the memory store or the model did not answer in time; raise --timeout-ms \
             / ASTRA_HOOK_TIMEOUT_MS)",
            input.hook_event_name,
            settings.timeout.as_millis()
        )
    })??;
    Ok(match packed {
        // a note without memories (the actor has none): the note is the report too
        Some(packed) if packed.memories == 0 => Outcome::Context {
            stdout: context_json(&input.hook_event_name, &packed.text),
            report: format!("{}: {}", input.hook_event_name, packed.text.trim_start_matches("astra-mcp: ")),
        },
        Some(packed) => Outcome::Context {
            stdout: context_json(&input.hook_event_name, &packed.text),
            report: format!(
                "{}: {} {} added to the context ({} of {} tokens){}",
                input.hook_event_name,
                packed.memories,
                if packed.memories == 1 { "memory" } else { "memories" },
                packed.tokens,
                settings.budget_tokens,
                if packed.left_out > 0 { format!(", {} left out", packed.left_out) } else { String::new() }
            ),
        },
        None => Outcome::Nothing,
    })
}
