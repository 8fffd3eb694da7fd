//! Responses API items, one per line ([`super::TranscriptFormat::Responses`]), also the payload of
//! Codex `response_item` lines.

use serde_json::{Map, Value};

use super::Role;
use super::text::{arguments_text, canonical_json, content_text, str_field, tool_call_text, tool_result_text};

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Dialect {
    Codex,
    Responses,
}

pub(super) fn response_item_pieces(item: &Map<String, Value>, dialect: Dialect) -> Vec<(Role, String)> {
    let kind = str_field(item, "type");
    let call = |name: Option<&str>, arguments: String| vec![(Role::Tool, tool_call_text(name, &arguments))];
    match kind {
        Some("message") => message_pieces(item, dialect),
        None if item.contains_key("role") => message_pieces(item, dialect),
        Some("function_call") => {
            // a tool inside a `namespace` tool (Codex lists an MCP server's tools as namespace `mcp__<server>`)
            // is named with its namespace, so the item says which server it called
            let name = match (str_field(item, "namespace").filter(|ns| !ns.is_empty()), str_field(item, "name")) {
                (Some(namespace), Some(name)) => Some(format!("{namespace}.{name}")),
                (_, name) => name.map(str::to_string),
            };
            call(name.as_deref(), item.get("arguments").map(arguments_text).unwrap_or_default())
        }
        Some("tool_search_call") => {
            call(Some("tool_search"), item.get("arguments").map(arguments_text).unwrap_or_default())
        }
        Some("custom_tool_call") => {
            call(str_field(item, "name"), item.get("input").map(arguments_text).unwrap_or_default())
        }
        Some("local_shell_call") => {
            let action = item.get("action");
            let command = action.and_then(|action| action.get("command")).or(action);
            call(Some("local_shell"), command.map(canonical_json).unwrap_or_default())
        }
        Some("web_search_call") => match item.get("action") {
            Some(action) => call(Some("web_search"), canonical_json(action)),
            None => Vec::new(),
        },
        Some("mcp_call") => {
            let mut pieces =
                call(str_field(item, "name"), item.get("arguments").map(arguments_text).unwrap_or_default());
            let output = item.get("output").filter(|output| !output.is_null()).or(item.get("error"));
            if let Some(output) = output.map(content_text).filter(|output| !output.trim().is_empty()) {
                pieces.push((Role::Tool, tool_result_text(&output)));
            }
            pieces
        }
        Some("function_call_output" | "custom_tool_call_output" | "local_shell_call_output") => {
            vec![(Role::Tool, tool_result_text(&item.get("output").map(content_text).unwrap_or_default()))]
        }
        // reasoning, compaction, ghost snapshots, item references, other tools' bookkeeping.
        _ => Vec::new(),
    }
}

/// A `message` item: user and assistant messages only (system and developer messages are instructions);
/// in Codex, user texts injected by the harness are dropped.
fn message_pieces(item: &Map<String, Value>, dialect: Dialect) -> Vec<(Role, String)> {
    let role = match str_field(item, "role") {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        _ => return Vec::new(),
    };
    let mut texts: Vec<&str> = Vec::new();
    match item.get("content") {
        Some(Value::String(text)) => texts.push(text),
        Some(Value::Array(parts)) => {
            for part in parts.iter().filter_map(Value::as_object) {
                let text = match str_field(part, "type") {
                    Some("input_text" | "output_text" | "text") => str_field(part, "text"),
                    Some("refusal") => str_field(part, "refusal"),
                    _ => None,
                };
                if let Some(text) = text.filter(|text| !text.trim().is_empty()) {
                    texts.push(text);
                }
            }
        }
        _ => {}
    }
    if dialect == Dialect::Codex && role == Role::User {
        texts.retain(|text| !is_codex_context(text));
    }
    if texts.is_empty() { Vec::new() } else { vec![(role, texts.join("\n"))] }
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

fn is_codex_context(text: &str) -> bool {
    let text = text.trim_start();
    CODEX_CONTEXT_PREFIXES
        .iter()
        .any(|prefix| text.get(..prefix.len()).is_some_and(|start| start.eq_ignore_ascii_case(prefix)))
}
