//! Claude Code session files (`~/.claude/projects/<project>/<session-id>.jsonl`): which lines and
//! blocks are conversation items ([`super::TranscriptFormat::ClaudeCode`]).

use serde_json::{Map, Value};

use super::text::{canonical_json, content_text, str_field, timestamp_field, tool_call_text, tool_result_text};
use super::{FileState, LineItems, Role};

/// User-role texts that the Claude Code harness writes, not the user: output of local slash commands
/// and reminders. (Meta lines, compaction summaries and sidechains are recognized by their flags.)
const CLAUDE_CODE_HARNESS_PREFIXES: &[&str] =
    &["<local-command-stdout>", "<local-command-stderr>", "<local-command-caveat>", "<system-reminder>"];

/// A `user` or `assistant` line. Skipped: other `type`s (`summary`, `system`, `file-history-snapshot`…),
/// lines flagged `isMeta` (harness-injected text), `isCompactSummary` / `isVisibleInTranscriptOnly`
/// (compaction summaries) and `isSidechain` (a sub-agent's own conversation inside the main session
/// file; its result reaches the main thread as a tool result) — unless the file's first `user` /
/// `assistant` line is itself a sidechain, which makes the file a sub-agent transcript, read whole.
pub(super) fn claude_code_line(object: &Map<String, Value>, state: &mut FileState) -> LineItems {
    if let Some(id) = str_field(object, "sessionId").filter(|id| !id.is_empty()) {
        state.session_id = Some(id.to_string());
    }
    let base_role = match str_field(object, "type") {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        _ => return LineItems::default(),
    };
    let flag = |name: &str| object.get(name).and_then(Value::as_bool) == Some(true);
    let subagent_file = *state.subagent_file.get_or_insert(flag("isSidechain"));
    if flag("isMeta") || flag("isCompactSummary") || flag("isVisibleInTranscriptOnly") {
        return LineItems::default();
    }
    if flag("isSidechain") && !subagent_file {
        return LineItems::default();
    }
    let Some(message) = object.get("message").and_then(Value::as_object) else { return LineItems::default() };
    let mut pieces = Vec::new();
    match message.get("content") {
        Some(Value::String(text)) if !is_claude_code_harness_text(base_role, text) => {
            pieces.push((base_role, text.clone()))
        }
        Some(Value::Array(blocks)) => claude_blocks(&mut pieces, base_role, blocks),
        _ => {}
    }
    LineItems {
        id: str_field(object, "uuid").filter(|id| !id.is_empty()).map(str::to_string),
        timestamp: timestamp_field(object),
        pieces,
    }
}

fn is_claude_code_harness_text(role: Role, text: &str) -> bool {
    let text = text.trim_start();
    role == Role::User && CLAUDE_CODE_HARNESS_PREFIXES.iter().any(|prefix| text.starts_with(prefix))
}

/// Text blocks in a row become one item of the line's role; every `tool_use` / `tool_result` block is
/// its own `Tool` item; `thinking`, `redacted_thinking`, images and documents are skipped.
fn claude_blocks(pieces: &mut Vec<(Role, String)>, role: Role, blocks: &[Value]) {
    let mut texts: Vec<&str> = Vec::new();
    let flush = |texts: &mut Vec<&str>, pieces: &mut Vec<(Role, String)>| {
        if !texts.is_empty() {
            pieces.push((role, texts.join("\n")));
            texts.clear();
        }
    };
    for block in blocks {
        let Some(block) = block.as_object() else { continue };
        match str_field(block, "type") {
            Some("text") => {
                let text = str_field(block, "text");
                if let Some(text) =
                    text.filter(|text| !text.trim().is_empty() && !is_claude_code_harness_text(role, text))
                {
                    texts.push(text);
                }
            }
            Some("tool_use" | "server_tool_use") => {
                flush(&mut texts, pieces);
                let input = block.get("input").map(canonical_json).unwrap_or_default();
                pieces.push((Role::Tool, tool_call_text(str_field(block, "name"), &input)));
            }
            Some("tool_result") => {
                flush(&mut texts, pieces);
                let result = block.get("content").map(content_text).unwrap_or_default();
                pieces.push((Role::Tool, tool_result_text(&result)));
            }
            _ => {}
        }
    }
    flush(&mut texts, pieces);
}
