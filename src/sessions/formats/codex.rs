//! Codex CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`), current and legacy layout
//! ([`super::TranscriptFormat::Codex`]); their items are Responses API items ([`super::responses`]).

use serde_json::{Map, Value};

use super::responses::{Dialect, response_item_pieces};
use super::text::{str_field, timestamp_field};
use super::{FileState, LineItems};

/// A rollout line: an envelope `{timestamp, type, payload}` (any object with `type` and `payload`; bare
/// items never have a `payload`), or in the legacy layout the bare session meta, a `record_type` line or
/// a bare item.
pub(super) fn codex_line(object: &Map<String, Value>, state: &mut FileState) -> LineItems {
    let session_id = &mut state.session_id;
    let kind = str_field(object, "type");
    if let Some(kind) = kind
        && let Some(payload) = object.get("payload")
    {
        let Some(payload) = payload.as_object() else { return LineItems::default() };
        return match kind {
            "session_meta" => {
                if session_id.is_none() {
                    *session_id = str_field(payload, "id")
                        .or_else(|| str_field(payload, "session_id"))
                        .filter(|id| !id.is_empty())
                        .map(str::to_string);
                }
                LineItems::default()
            }
            "response_item" => LineItems {
                id: None,
                timestamp: timestamp_field(object),
                pieces: response_item_pieces(payload, Dialect::Codex),
            },
            // event_msg repeats response items for the UI; turn_context, compacted and newer record types
            // hold no conversation turn.
            _ => LineItems::default(),
        };
    }
    if object.contains_key("record_type") {
        return LineItems::default();
    }
    if kind.is_none() && !object.contains_key("role") {
        // Legacy first line: `{id, timestamp, instructions, git?}`.
        if session_id.is_none() {
            *session_id = str_field(object, "id").filter(|id| !id.is_empty()).map(str::to_string);
        }
        return LineItems::default();
    }
    // Legacy bare `ResponseItem`.
    LineItems { pieces: response_item_pieces(object, Dialect::Codex), ..LineItems::default() }
}

/// Texts Codex puts in user-role messages that the user did not type (AGENTS.md, environment context,
/// skills, shell commands, image wrappers…), from `codex-rs/protocol/src/instruction_markers.rs` and the
/// contextual-message checks of `codex-rs/core`. Compared ASCII case-insensitively at the start.
const CODEX_CONTEXT_PREFIXES: &[&str] = &[
    "# AGENTS.md instructions for ",
    "<INSTRUCTIONS>",
    "<user_instructions>",
    "<environment_context>",
    "<collaboration_mode>",
    "<turn_aborted>",
    "<context_update>",
    "<skill",
    "<user_shell_command>",
    "<subagent_notification",
    "<image>",
    "</image>",
    "<image name=",
];

pub(super) fn is_codex_context(text: &str) -> bool {
    let text = text.trim_start();
    CODEX_CONTEXT_PREFIXES
        .iter()
        .any(|prefix| text.get(..prefix.len()).is_some_and(|start| start.eq_ignore_ascii_case(prefix)))
}
