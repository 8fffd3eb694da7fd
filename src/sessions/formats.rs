//! Parsers for coding-agent transcript files: Claude Code session JSONL, Codex CLI rollout JSONL and
//! OpenAI Responses API items as JSONL. Pure functions over bytes: no I/O, no panics on any input.
//!
//! Every format is JSON Lines. Lines are numbered from 1 as in an editor; a blank line is ignored, a line
//! that is not a JSON object (garbage, or the half-written last line of a file being appended to) is
//! skipped and counted in [`ParsedTranscript::skipped_lines`]. Each parsed line yields zero or more
//! [`ParsedItem`]s, numbered by [`ParsedItem::turn`] in file order, each with a
//! [`ParsedItem::source_key`] that depends only on its own line (earlier lines matter only to drop a
//! repeated key), so appending lines never changes the keys of earlier items and a re-import can upsert
//! by key.
//!
//! Sources of the formats (none of the three files has an official versioned schema):
//! - Claude Code: community write-ups of real files, which agree with each other:
//!   <https://github.com/neilberkman/ccrider/blob/main/research/schema.md>,
//!   <https://github.com/DRMacIver/claude-reliability/blob/main/notes/transcript-format.md>,
//!   <https://github.com/simonw/claude-code-transcripts>; the hook input's `transcript_path` points at
//!   these files (<https://code.claude.com/docs/en/hooks>).
//! - Codex CLI: the writer's own types in <https://github.com/openai/codex>:
//!   `codex-rs/protocol/src/protocol.rs` (`RolloutLine`, `RolloutItem`, `SessionMetaLine`),
//!   `codex-rs/protocol/src/models.rs` (`ResponseItem`, `ContentItem`, `FunctionCallOutputPayload`),
//!   `codex-rs/protocol/src/instruction_markers.rs` (markers of injected context), and for the older
//!   layout `codex-rs/core/src/rollout.rs` at commit `89a151f502213bec8140159e728170b0d999eca2`.
//! - Responses API: <https://platform.openai.com/docs/api-reference/responses> and its generated types in
//!   <https://github.com/openai/openai-python> (`src/openai/types/responses/response_input_item_param.py`,
//!   `easy_input_message_param.py`).

use std::collections::HashSet;
use std::fmt;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

/// Tool results (and tool call arguments) longer than this many characters are cut to this many,
/// the last one being `…`.
pub const TOOL_TEXT_MAX_CHARS: usize = 4000;

/// How many non-blank lines [`detect_format`] looks at before giving up.
const DETECT_MAX_LINES: usize = 100;

/// What [`FormatError::Unrecognized`] lists as supported.
const SUPPORTED_FORMATS: &str = "claude-code (Claude Code session JSONL, \
    ~/.claude/projects/<project>/<session-id>.jsonl), codex (Codex CLI rollout JSONL, \
    ~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl), responses (OpenAI Responses API input/output items, \
    one JSON object per line)";

/// Which transcript format a file is in.
///
/// - `ClaudeCode`: a Claude Code session file, `~/.claude/projects/<project>/<session-id>.jsonl`. One
///   record per line with `type` (`user`, `assistant`, `summary`, `system`, `file-history-snapshot`, …);
///   `user`/`assistant` records carry `uuid`, `parentUuid`, `sessionId`, `timestamp`, optional `isMeta`,
///   `isSidechain`, `isCompactSummary`, and `message: {role, content}` where `content` is a string or an
///   array of blocks `text {text}`, `thinking {thinking}`, `tool_use {id, name, input}`,
///   `tool_result {tool_use_id, content: string | [blocks], is_error?}`. Sources: see the module docs.
/// - `Codex`: a Codex CLI rollout, `~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl`. Current
///   layout (`RolloutLine` in `openai/codex` `codex-rs/protocol/src/protocol.rs`): each line is
///   `{timestamp, type, payload}` with `type` one of `session_meta` (payload `{id, timestamp, cwd, …}`),
///   `response_item` (payload a Responses API item), `event_msg`, `turn_context`, `compacted`. Older
///   layout (`codex-rs/core/src/rollout.rs` at `89a151f`): a bare first line `{id, timestamp,
///   instructions}`, then bare Responses items and `{"record_type":"state", …}` lines.
/// - `Responses`: OpenAI Responses API items, one per line, as sent in `input` or returned in `output`
///   (<https://platform.openai.com/docs/api-reference/responses>): `{"type":"message", "role", "content"}`
///   (content a string or `[{type: input_text | output_text | refusal, …}]`), `{"role","content"}` without
///   `type` (EasyInputMessage), `{"type":"function_call", call_id, name, arguments}`,
///   `{"type":"function_call_output", call_id, output}`, and the other item types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TranscriptFormat {
    ClaudeCode,
    Codex,
    Responses,
}

impl TranscriptFormat {
    /// Every format, in the order they are documented.
    pub const ALL: [TranscriptFormat; 3] =
        [TranscriptFormat::ClaudeCode, TranscriptFormat::Codex, TranscriptFormat::Responses];

    /// `"claude-code"`, `"codex"` or `"responses"` (also the serde form).
    pub fn name(self) -> &'static str {
        match self {
            TranscriptFormat::ClaudeCode => "claude-code",
            TranscriptFormat::Codex => "codex",
            TranscriptFormat::Responses => "responses",
        }
    }

    /// The format whose [`name`](Self::name) is `name` (ASCII case-insensitive).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|format| format.name().eq_ignore_ascii_case(name.trim()))
    }
}

impl fmt::Display for TranscriptFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Conversation role of an item: tool calls and tool results are both [`Role::Tool`].
pub use crate::domain::Role;

/// One item read from a transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedItem {
    /// Session id found in the file: Claude Code `sessionId` of the item's line (or of the nearest line
    /// above that has one), Codex `session_meta.payload.id` (legacy: `id` of the first line); `None` for
    /// Responses items, which carry none.
    pub session_id: Option<String>,
    /// Stable key of this item inside its source, for idempotent re-imports: the Claude Code `uuid` of the
    /// line (`"<uuid>:<k>"` for the k-th item, k ≥ 1, when one line yields several), else
    /// `"line:<n>:<k>"` with `n` the 1-based line number and `k` the 0-based item index within the line.
    /// Identical when the same bytes are parsed twice; unchanged when lines are appended. Unique within a
    /// file: a later item with an already seen key (a repeated Claude Code `uuid`) is dropped.
    pub source_key: String,
    /// 0-based position of the item among the items parsed from this file (turn number).
    pub turn: u32,
    pub role: Role,
    /// Human-readable text, trimmed, never empty: the message text; for tool items `tool call <name>:
    /// <arguments as compact JSON with sorted keys, or raw text>` or `tool result: <text>`, the part after
    /// the colon cut to [`TOOL_TEXT_MAX_CHARS`].
    pub text: String,
    /// Timestamp of the line when the format has one (Claude Code `timestamp`, Codex envelope
    /// `timestamp`); `None` for legacy Codex items and Responses items.
    pub timestamp: Option<DateTime<Utc>>,
}

/// The items of one transcript file.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedTranscript {
    pub format: TranscriptFormat,
    pub items: Vec<ParsedItem>,
    /// Non-blank lines that are not a JSON object (malformed, truncated, or a bare JSON value). Lines that
    /// are JSON objects but carry no conversation item (metadata, events, system messages) are not counted.
    pub skipped_lines: usize,
}

/// Why a transcript could not be parsed.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// No line among the first ones has the shape of a supported format.
    #[error("unrecognized transcript format: {hint}. Supported formats: {supported}", supported = SUPPORTED_FORMATS)]
    Unrecognized { hint: String },
}

/// Detects the format from the content (the first non-blank lines that are JSON objects with a known
/// shape, never the file name) and parses it. Input is raw bytes: invalid UTF-8 is replaced by U+FFFD.
/// Malformed lines are skipped and counted, not fatal; items with empty text are dropped.
pub fn parse_transcript(bytes: &[u8]) -> Result<ParsedTranscript, FormatError> {
    let text = decode(bytes);
    let format = detect_in_text(&text)?;
    Ok(parse_text(format, &text))
}

/// [`parse_transcript`] with the format forced: lines of another shape yield no items.
pub fn parse_as(format: TranscriptFormat, bytes: &[u8]) -> ParsedTranscript {
    parse_text(format, &decode(bytes))
}

/// The format [`parse_transcript`] would use for these bytes.
pub fn detect_format(bytes: &[u8]) -> Result<TranscriptFormat, FormatError> {
    detect_in_text(&decode(bytes))
}

fn decode(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text.into_owned(),
    }
}

/// `(1-based line number, line without its line ending)`, blank lines included.
fn numbered_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split('\n').enumerate().map(|(index, line)| (index + 1, line.strip_suffix('\r').unwrap_or(line)))
}

/// A non-blank line parsed as a JSON object, or `None` (malformed or not an object).
fn parse_object(line: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(line.trim()) {
        Ok(Value::Object(object)) => Some(object),
        _ => None,
    }
}

fn detect_in_text(text: &str) -> Result<TranscriptFormat, FormatError> {
    let mut checked = 0usize;
    let mut first_object: Option<Map<String, Value>> = None;
    for (_, line) in numbered_lines(text) {
        if line.trim().is_empty() {
            continue;
        }
        if checked == DETECT_MAX_LINES {
            break;
        }
        checked += 1;
        let Some(object) = parse_object(line) else { continue };
        if let Some(format) = classify(&object) {
            return Ok(format);
        }
        if first_object.is_none() {
            first_object = Some(object);
        }
    }
    let hint = match first_object {
        _ if checked == 0 => "the input is empty".to_string(),
        None => format!("none of the first {checked} non-blank lines is a JSON object"),
        Some(object) => {
            let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
            keys.sort_unstable();
            keys.truncate(12);
            format!(
                "no known record shape in the first {checked} non-blank lines (first JSON object has keys [{}])",
                keys.join(", ")
            )
        }
    };
    Err(FormatError::Unrecognized { hint })
}

/// Record `type`s of Claude Code session files.
const CLAUDE_CODE_TYPES: &[&str] = &[
    "user",
    "assistant",
    "summary",
    "system",
    "file-history-snapshot",
    "queue-operation",
    "progress",
    "attachment",
    "custom-title",
];

/// `type`s of a Codex `RolloutLine` envelope.
const CODEX_ENVELOPE_TYPES: &[&str] = &["session_meta", "response_item", "event_msg", "turn_context", "compacted"];

/// Item `type`s of the Responses API (input and output items).
const RESPONSES_ITEM_TYPES: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
    "local_shell_call",
    "local_shell_call_output",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "code_interpreter_call",
    "image_generation_call",
    "mcp_call",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "item_reference",
    "tool_search_call",
    "tool_search_output",
    "compaction",
];

/// The format one JSON line belongs to, when its shape says so.
fn classify(object: &Map<String, Value>) -> Option<TranscriptFormat> {
    let kind = str_field(object, "type");
    if let Some(kind) = kind
        && object.contains_key("payload")
        && CODEX_ENVELOPE_TYPES.contains(&kind)
    {
        return Some(TranscriptFormat::Codex);
    }
    if str_field(object, "record_type") == Some("state") {
        return Some(TranscriptFormat::Codex);
    }
    if kind.is_none()
        && !object.contains_key("role")
        && str_field(object, "id").is_some()
        && object.contains_key("timestamp")
    {
        return Some(TranscriptFormat::Codex);
    }
    if kind.is_some_and(|kind| CLAUDE_CODE_TYPES.contains(&kind))
        || object.contains_key("sessionId")
        || object.contains_key("parentUuid")
        || object.contains_key("leafUuid")
    {
        return Some(TranscriptFormat::ClaudeCode);
    }
    if kind.is_some_and(|kind| RESPONSES_ITEM_TYPES.contains(&kind))
        || (kind.is_none() && object.contains_key("role") && object.contains_key("content"))
    {
        return Some(TranscriptFormat::Responses);
    }
    None
}

fn parse_text(format: TranscriptFormat, text: &str) -> ParsedTranscript {
    let mut out = Collector::default();
    let mut skipped_lines = 0usize;
    let mut state = FileState::default();
    for (line_number, line) in numbered_lines(text) {
        if line.trim().is_empty() {
            continue;
        }
        let Some(object) = parse_object(line) else {
            skipped_lines += 1;
            continue;
        };
        let parsed = match format {
            TranscriptFormat::ClaudeCode => claude_code_line(&object, &mut state),
            TranscriptFormat::Codex => codex_line(&object, &mut state),
            TranscriptFormat::Responses => {
                LineItems { pieces: response_item_pieces(&object, Dialect::Responses), ..LineItems::default() }
            }
        };
        out.push_line(
            line_number,
            parsed,
            if format == TranscriptFormat::Responses { None } else { state.session_id.as_deref() },
        );
    }
    ParsedTranscript { format, items: out.items, skipped_lines }
}

/// What earlier lines of the file tell about the next ones.
#[derive(Default)]
struct FileState {
    /// The session id in force (Claude Code: the latest `sessionId`; Codex: the first session meta's id).
    session_id: Option<String>,
    /// Claude Code: whether the first `user`/`assistant` line was a sidechain, i.e. the whole file is a
    /// sub-agent transcript (`agent-<id>.jsonl`); `None` before that line.
    subagent_file: Option<bool>,
}

/// What one line yields before keys and turns are assigned.
#[derive(Default)]
struct LineItems {
    /// The line's own id (Claude Code `uuid`), used as the key base.
    id: Option<String>,
    timestamp: Option<DateTime<Utc>>,
    pieces: Vec<(Role, String)>,
}

#[derive(Default)]
struct Collector {
    items: Vec<ParsedItem>,
    keys: HashSet<String>,
}

impl Collector {
    fn push_line(&mut self, line_number: usize, line: LineItems, session_id: Option<&str>) {
        let pieces = line.pieces.into_iter().map(|(role, text)| (role, text.trim().to_string()));
        for (index, (role, text)) in pieces.filter(|(_, text)| !text.is_empty()).enumerate() {
            let source_key = match (&line.id, index) {
                (Some(id), 0) => id.clone(),
                (Some(id), index) => format!("{id}:{index}"),
                (None, index) => format!("line:{line_number}:{index}"),
            };
            if !self.keys.insert(source_key.clone()) {
                continue;
            }
            let turn = u32::try_from(self.items.len()).unwrap_or(u32::MAX);
            self.items.push(ParsedItem {
                session_id: session_id.map(str::to_string),
                source_key,
                turn,
                role,
                text,
                timestamp: line.timestamp,
            });
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Claude Code

/// User-role texts that the Claude Code harness writes, not the user: output of local slash commands
/// and reminders. (Meta lines, compaction summaries and sidechains are recognized by their flags.)
const CLAUDE_CODE_HARNESS_PREFIXES: &[&str] =
    &["<local-command-stdout>", "<local-command-stderr>", "<local-command-caveat>", "<system-reminder>"];

/// A `user` or `assistant` line. Skipped: other `type`s (`summary`, `system`, `file-history-snapshot`…),
/// lines flagged `isMeta` (harness-injected text), `isCompactSummary` / `isVisibleInTranscriptOnly`
/// (compaction summaries) and `isSidechain` (a sub-agent's own conversation inside the main session
/// file; its result reaches the main thread as a tool result) — unless the file's first `user` /
/// `assistant` line is itself a sidechain, which makes the file a sub-agent transcript, read whole.
fn claude_code_line(object: &Map<String, Value>, state: &mut FileState) -> LineItems {
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

// ---------------------------------------------------------------------------------------------------
// Codex CLI

/// A rollout line: an envelope `{timestamp, type, payload}` (any object with `type` and `payload`; bare
/// items never have a `payload`), or in the legacy layout the bare session meta, a `record_type` line or
/// a bare item.
fn codex_line(object: &Map<String, Value>, state: &mut FileState) -> LineItems {
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

fn is_codex_context(text: &str) -> bool {
    let text = text.trim_start();
    CODEX_CONTEXT_PREFIXES
        .iter()
        .any(|prefix| text.get(..prefix.len()).is_some_and(|start| start.eq_ignore_ascii_case(prefix)))
}

// ---------------------------------------------------------------------------------------------------
// Responses API items (also the payload of Codex `response_item` lines)

#[derive(Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Codex,
    Responses,
}

fn response_item_pieces(item: &Map<String, Value>, dialect: Dialect) -> Vec<(Role, String)> {
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

// ---------------------------------------------------------------------------------------------------
// Rendering

fn tool_call_text(name: Option<&str>, arguments: &str) -> String {
    let name = name.map(str::trim).filter(|name| !name.is_empty()).unwrap_or("unknown");
    let arguments = arguments.trim();
    if arguments.is_empty() {
        format!("tool call {name}")
    } else {
        format!("tool call {name}: {}", truncate_chars(arguments, TOOL_TEXT_MAX_CHARS))
    }
}

fn tool_result_text(result: &str) -> String {
    let result = result.trim();
    if result.is_empty() {
        String::new()
    } else {
        format!("tool result: {}", truncate_chars(result, TOOL_TEXT_MAX_CHARS))
    }
}

/// Function-call arguments: a JSON string holding JSON (rendered canonically), or free text as is.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(parsed @ (Value::Object(_) | Value::Array(_))) => canonical_json(&parsed),
            _ => raw.clone(),
        },
        other => canonical_json(other),
    }
}

/// Text of a tool result or message content: a string as is; an array of blocks/parts as their texts
/// joined by newlines (images as `[image]`); an object `{content: "…"}` (older Codex
/// `FunctionCallOutputPayload`) as its content; anything else as compact JSON.
fn content_text(content: &Value) -> String {
    match content {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            let mut texts: Vec<String> = Vec::new();
            for part in parts {
                match part {
                    Value::String(text) => texts.push(text.clone()),
                    Value::Object(part) => match str_field(part, "type") {
                        Some("image" | "input_image") => texts.push("[image]".to_string()),
                        _ => {
                            if let Some(text) = str_field(part, "text") {
                                texts.push(text.to_string());
                            }
                        }
                    },
                    _ => {}
                }
            }
            texts.join("\n")
        }
        Value::Object(object) => match object.get("content") {
            Some(Value::String(text)) => text.clone(),
            Some(inner @ Value::Array(_)) => content_text(inner),
            _ => canonical_json(content),
        },
        other => canonical_json(other),
    }
}

/// Compact JSON with object keys sorted, so the rendering does not depend on serde_json's
/// `preserve_order` feature.
fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical_json(value, &mut out);
    out
}

fn write_canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(object) => {
            let mut entries: Vec<(&String, &Value)> = object.iter().collect();
            entries.sort_unstable_by(|left, right| left.0.cmp(right.0));
            out.push('{');
            for (index, (key, value)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical_json(value, out);
            }
            out.push('}');
        }
        Value::Array(values) => {
            out.push('[');
            for (index, value) in values.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical_json(value, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// `text` if it has at most `max` characters, else its first `max - 1` characters and `…`.
fn truncate_chars(text: &str, max: usize) -> String {
    if max == 0 {
        return String::new();
    }
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some(_) => {
            let cut = text.char_indices().nth(max - 1).map_or(text.len(), |(index, _)| index);
            format!("{}…", &text[..cut])
        }
    }
}

fn str_field<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

fn timestamp_field(object: &Map<String, Value>) -> Option<DateTime<Utc>> {
    let raw = str_field(object, "timestamp")?;
    DateTime::parse_from_rfc3339(raw.trim()).ok().map(|timestamp| timestamp.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAUDE_CODE: &[u8] = include_bytes!("../../tests/fixtures/transcripts/claude-code.jsonl");
    const CODEX: &[u8] = include_bytes!("../../tests/fixtures/transcripts/codex.jsonl");
    const RESPONSES: &[u8] = include_bytes!("../../tests/fixtures/transcripts/responses.jsonl");
    /// Real files the pinned clients wrote (tests/clients: session 2 of the main job, scripted model).
    const CODEX_REAL: &[u8] = include_bytes!("../../tests/fixtures/transcripts/codex-0.169.0.jsonl");
    const CLAUDE_CODE_REAL: &[u8] = include_bytes!("../../tests/fixtures/transcripts/claude-code-2.1.328.jsonl");

    const CLAUDE_SESSION: &str = "5c0f3e2a-8b7d-4e1f-9a6c-2d4b8e7f1a93";
    const CODEX_SESSION: &str = "019a4f6e-7c21-7d30-b8a5-3e9f1c2d4a6b";

    fn parse(bytes: &[u8]) -> ParsedTranscript {
        match parse_transcript(bytes) {
            Ok(parsed) => parsed,
            Err(error) => panic!("fixture must parse: {error}"),
        }
    }

    fn ts(raw: &str) -> Option<DateTime<Utc>> {
        Some(DateTime::parse_from_rfc3339(raw).expect("test timestamp").with_timezone(&Utc))
    }

    /// `(turn, key, role, text)` of every item.
    fn summary(parsed: &ParsedTranscript) -> Vec<(u32, String, Role, String)> {
        parsed.items.iter().map(|item| (item.turn, item.source_key.clone(), item.role, item.text.clone())).collect()
    }

    fn row(turn: u32, key: &str, role: Role, text: &str) -> (u32, String, Role, String) {
        (turn, key.to_string(), role, text.to_string())
    }

    #[test]
    fn claude_code_fixture() {
        let parsed = parse(CLAUDE_CODE);
        assert_eq!(parsed.format, TranscriptFormat::ClaudeCode);
        assert_eq!(parsed.skipped_lines, 0);
        let uuid = |n: u32| format!("0b6f1d3e-2c4a-4f5b-8e9d-1a2b3c4d5e{n:02}");
        assert_eq!(
            summary(&parsed),
            vec![
                row(0, &uuid(1), Role::User, "The test `parses_iso_dates` fails since yesterday, can you fix it?"),
                row(1, &uuid(4), Role::Assistant, "I'll run the failing test first to see the error."),
                row(
                    2,
                    &uuid(5),
                    Role::Tool,
                    r#"tool call Bash: {"command":"cargo test parses_iso_dates","description":"Run the failing test"}"#
                ),
                row(
                    3,
                    &uuid(6),
                    Role::Tool,
                    "tool result: running 1 test\ntest parse::tests::parses_iso_dates ... FAILED\n\n\
                     thread 'parse::tests::parses_iso_dates' panicked at src/parse.rs:41:9:\n\
                     assertion `left == right` failed\n  left: None\n right: Some(2025-11-03)"
                ),
                row(
                    4,
                    &uuid(7),
                    Role::Tool,
                    r#"tool call Read: {"file_path":"/home/dev/datekit/src/parse.rs","limit":12,"offset":30}"#
                ),
                row(
                    5,
                    &uuid(8),
                    Role::Tool,
                    "tool result: 30→pub fn parse_iso(s: &str) -> Option<NaiveDate> {\n    31→    \
                     NaiveDate::parse_from_str(s, \"%Y/%m/%d\").ok()\n    32→}"
                ),
                row(
                    6,
                    &uuid(11),
                    Role::Assistant,
                    "Fixed: `parse_iso` used the format `%Y/%m/%d`; ISO dates need `%Y-%m-%d`. The test passes now."
                ),
                row(7, &uuid(12), Role::User, "Thanks!"),
            ]
        );
        assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == Some(CLAUDE_SESSION)));
        assert_eq!(parsed.items[0].timestamp, ts("2025-11-03T09:14:02.118Z"));
        assert_eq!(parsed.items[7].timestamp, ts("2025-11-03T09:15:02.310Z"));
    }

    #[test]
    fn codex_fixture() {
        let parsed = parse(CODEX);
        assert_eq!(parsed.format, TranscriptFormat::Codex);
        assert_eq!(parsed.skipped_lines, 0);
        assert_eq!(
            summary(&parsed),
            vec![
                row(0, "line:5:0", Role::User, "Add a --verbose flag to the CLI"),
                row(
                    1,
                    "line:9:0",
                    Role::Tool,
                    concat!(
                        r#"tool call shell: {"command":["bash","-lc","rg -n 'struct Args' src"],"#,
                        r#""workdir":"/home/dev/datekit"}"#
                    )
                ),
                row(
                    2,
                    "line:10:0",
                    Role::Tool,
                    concat!(
                        r#"tool result: {"output":"src/cli.rs:12:pub struct Args {\n","#,
                        r#""metadata":{"exit_code":0,"duration_seconds":0.1}}"#
                    )
                ),
                row(
                    3,
                    "line:11:0",
                    Role::Tool,
                    "tool call apply_patch: *** Begin Patch\n*** Update File: src/cli.rs\n@@\n pub struct Args {\n\
                     +    /// Print every step.\n+    #[arg(long)]\n+    pub verbose: bool,\n*** End Patch"
                ),
                row(
                    4,
                    "line:12:0",
                    Role::Tool,
                    concat!(
                        r#"tool result: {"output":"Success. Updated the following files:\nM src/cli.rs\n","#,
                        r#""metadata":{"exit_code":0,"duration_seconds":0.0}}"#
                    )
                ),
                row(5, "line:14:0", Role::Assistant, "Added a `--verbose` flag to `Args` in src/cli.rs."),
            ]
        );
        assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == Some(CODEX_SESSION)));
        assert_eq!(parsed.items[0].timestamp, ts("2025-11-04T16:02:30.118Z"));
        assert_eq!(parsed.items[5].timestamp, ts("2025-11-04T16:02:45.508Z"));
    }

    #[test]
    fn responses_fixture() {
        let parsed = parse(RESPONSES);
        assert_eq!(parsed.format, TranscriptFormat::Responses);
        assert_eq!(parsed.skipped_lines, 0);
        assert_eq!(
            summary(&parsed),
            vec![
                row(0, "line:3:0", Role::User, "What is the crate name in Cargo.toml?"),
                row(1, "line:5:0", Role::Tool, r#"tool call read_file: {"path":"Cargo.toml"}"#),
                row(
                    2,
                    "line:6:0",
                    Role::Tool,
                    "tool result: [package]\nname = \"datekit\"\nversion = \"0.2.0\"\nedition = \"2024\""
                ),
                row(3, "line:7:0", Role::Assistant, "The crate is called `datekit` (version 0.2.0)."),
                row(4, "line:8:0", Role::User, "Bump it to the next minor version."),
                row(5, "line:9:0", Role::Tool, r#"tool call bump_version: {"level":"minor","manifest":"Cargo.toml"}"#),
                row(6, "line:10:0", Role::Tool, "tool result: version is now 0.3.0"),
                row(7, "line:11:0", Role::Assistant, "Bumped `datekit` to 0.3.0."),
            ]
        );
        assert!(parsed.items.iter().all(|item| item.session_id.is_none() && item.timestamp.is_none()));
    }

    #[test]
    fn detection_is_by_content() {
        for (bytes, format) in [
            (CLAUDE_CODE, TranscriptFormat::ClaudeCode),
            (CODEX, TranscriptFormat::Codex),
            (RESPONSES, TranscriptFormat::Responses),
            (&legacy_codex()[..], TranscriptFormat::Codex),
        ] {
            assert_eq!(detect_format(bytes).ok(), Some(format));
        }
        // Leading blank lines, garbage and lines of no known shape are looked past.
        let late = "\n\nnot json\n{\"unrelated\":true}\n{\"role\":\"user\",\"content\":\"hi\"}\n";
        assert_eq!(detect_format(late.as_bytes()).ok(), Some(TranscriptFormat::Responses));
    }

    #[test]
    fn parsing_is_idempotent() {
        let legacy = legacy_codex();
        for bytes in [CLAUDE_CODE, CODEX, RESPONSES, &legacy[..]] {
            assert_eq!(parse(bytes), parse(bytes));
        }
    }

    #[test]
    fn appending_lines_keeps_earlier_keys_and_turns() {
        let legacy = legacy_codex();
        for bytes in [CLAUDE_CODE, CODEX, RESPONSES, &legacy[..]] {
            let full = parse(bytes);
            let text = std::str::from_utf8(bytes).expect("fixtures are UTF-8");
            let lines: Vec<&str> = text.lines().collect();
            for cut in 1..lines.len() {
                let prefix = lines[..cut].join("\n") + "\n";
                let Ok(partial) = parse_transcript(prefix.as_bytes()) else { continue };
                assert_eq!(partial.items[..], full.items[..partial.items.len()], "prefix of {cut} lines");
            }
        }
    }

    #[test]
    fn truncated_last_line_is_skipped_and_counted() {
        let complete = std::str::from_utf8(CLAUDE_CODE).expect("fixture is UTF-8");
        let last_start = complete.trim_end().rfind('\n').map_or(0, |index| index + 1);
        let being_written = &complete[..last_start + 40];
        let parsed = parse(being_written.as_bytes());
        assert_eq!(parsed.skipped_lines, 1);
        assert_eq!(parsed.items[..], parse(CLAUDE_CODE).items[..7]);
    }

    #[test]
    fn garbage_line_is_skipped_and_counted() {
        let mut bytes = b"this is not json at all\n[1, 2]\n\"a string\"\n".to_vec();
        bytes.extend_from_slice(RESPONSES);
        bytes.extend_from_slice(b"{\"type\":\"message\",\"role\":\"user\",\"content\":\"unterminated\n\n");
        let parsed = parse(&bytes);
        assert_eq!(parsed.format, TranscriptFormat::Responses);
        assert_eq!(parsed.skipped_lines, 4);
        assert_eq!(parsed.items.len(), 8);
        assert_eq!(parsed.items[0].source_key, "line:6:0");
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let mut bytes = b"{\"role\":\"user\",\"content\":\"caf".to_vec();
        bytes.extend_from_slice(&[0xff, 0xfe]);
        bytes.extend_from_slice(b" au lait\"}\n\xc3\x28garbage\n");
        let parsed = parse(&bytes);
        assert_eq!(parsed.skipped_lines, 1);
        assert_eq!(summary(&parsed), vec![row(0, "line:1:0", Role::User, "caf\u{fffd}\u{fffd} au lait")]);
        // Any bytes at all: no panic.
        let noise: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
        let _ = parse_transcript(&noise);
        for format in TranscriptFormat::ALL {
            let _ = parse_as(format, &noise);
        }
    }

    /// `(role, start of text)` of each item must appear in this order among the parsed items.
    fn assert_in_order(parsed: &ParsedTranscript, want: &[(Role, &str)]) {
        let mut items = parsed.items.iter();
        for (role, start) in want {
            assert!(
                items.any(|item| item.role == *role && item.text.starts_with(start)),
                "no {role:?} item starting {start:?} (in order) among {:#?}",
                summary(parsed)
            );
        }
    }

    #[test]
    fn real_codex_session_file_of_the_pinned_version() {
        let parsed = parse(CODEX_REAL);
        assert_eq!(parsed.format, TranscriptFormat::Codex);
        assert_eq!(parsed.skipped_lines, 0);
        assert_in_order(
            &parsed,
            &[
                (Role::User, "Fix the failing tests."),
                (Role::Tool, "tool call tool_search: {"),
                (Role::Tool, "tool call exec_command: {\"cmd\":"),
                (Role::Tool, "tool result: Chunk ID: "),
                (
                    Role::Tool,
                    "tool call mcp__astra.search_codebase_memory: {\"error_type\":null,\"query\":\"AssertionError: assert",
                ),
                // Codex passes on the result's structuredContent as JSON
                (Role::Tool, "tool result: Wall time: "),
                (Role::Assistant, "Found a remembered fix for this failure."),
            ],
        );
        assert!(
            parsed.items.iter().any(|item| item.text.contains("{\"matches\":[{\"rank\":1,")),
            "{:#?}",
            summary(&parsed)
        );
        // the harness's own texts (AGENTS.md, environment context, skills) are not turns
        assert!(parsed.items.iter().all(|item| !item.text.contains("<environment_context>")));
        let session = parsed.items[0].session_id.clone().expect("a session id");
        assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == Some(session.as_str())));
    }

    #[test]
    fn real_claude_code_session_file_of_the_pinned_version() {
        let parsed = parse(CLAUDE_CODE_REAL);
        assert_eq!(parsed.format, TranscriptFormat::ClaudeCode);
        assert_eq!(parsed.skipped_lines, 0);
        assert_in_order(
            &parsed,
            &[
                (Role::User, "Fix the failing tests."),
                (Role::Tool, "tool call ToolSearch: {\"query\":\"select:"),
                (Role::Tool, "tool call Bash: {\"command\":"),
                (Role::Tool, "tool result: "),
                (
                    Role::Tool,
                    "tool call mcp__astra__search_codebase_memory: {\"error_type\":null,\"query\":\"AssertionError: assert",
                ),
                // Claude Code passes on the result's structuredContent as JSON
                (Role::Tool, "tool result: {\"matches\":[{\"rank\":1,"),
                (Role::Assistant, "Found a remembered fix for this failure."),
            ],
        );
        // the request records, attachments and snapshots this version also writes are not turns
        assert!(parsed.items.iter().all(|item| !item.text.contains("<system-reminder>")), "{:#?}", summary(&parsed));
        let session = parsed.items[0].session_id.clone().expect("a session id");
        assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == Some(session.as_str())));
    }

    #[test]
    fn every_prefix_of_every_fixture_parses_without_panic() {
        for bytes in [CLAUDE_CODE, CODEX, RESPONSES] {
            for cut in (0..=bytes.len()).step_by(5) {
                let prefix = &bytes[..cut];
                if let Ok(parsed) = parse_transcript(prefix) {
                    assert!(parsed.items.iter().enumerate().all(|(turn, item)| item.turn as usize == turn));
                }
                for format in TranscriptFormat::ALL {
                    let _ = parse_as(format, prefix);
                }
            }
        }
    }

    #[test]
    fn unrecognized_input_names_the_supported_formats() {
        for input in ["", "\n \n", "hello\nworld\n", "{\"foo\":1}\n{\"bar\":[2]}\n"] {
            let Err(error) = parse_transcript(input.as_bytes()) else { panic!("{input:?} must not be recognized") };
            let message = error.to_string();
            assert!(message.starts_with("unrecognized transcript format: "), "{message}");
            for name in ["claude-code", "codex", "responses"] {
                assert!(message.contains(name), "{message}");
            }
        }
        let Err(FormatError::Unrecognized { hint }) = parse_transcript(b"{\"foo\":1}\n") else {
            panic!("unrecognized")
        };
        assert!(hint.contains("[foo]"), "{hint}");
    }

    /// A rollout in the older layout: bare session meta first, bare items, `record_type` state lines.
    fn legacy_codex() -> Vec<u8> {
        let lines = [
            serde_json::json!({"id": "5973b6c0-94b8-487b-a530-2aeb6098ae0e", "timestamp": "2025-05-07T17:24:21.123Z",
                "instructions": null}),
            serde_json::json!({"record_type": "state"}),
            serde_json::json!({"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "<user_instructions>\nBe terse.\n</user_instructions>"}]}),
            serde_json::json!({"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "list the files"}]}),
            serde_json::json!({"type": "local_shell_call", "id": "lsh_1", "call_id": "call_1", "status": "completed",
                "action": {"type": "exec", "command": ["ls", "-a"], "timeout_ms": null, "working_directory": null,
                    "env": null, "user": null}}),
            serde_json::json!({"type": "function_call_output", "call_id": "call_1",
                "output": {"content": ".\n..\nsrc\n", "success": true}}),
            serde_json::json!({"record_type": "state", "previous_response_id": "resp_1"}),
            serde_json::json!({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": "There is one directory, `src`."}]}),
        ];
        lines.iter().map(|line| format!("{line}\n")).collect::<String>().into_bytes()
    }

    #[test]
    fn legacy_codex_layout() {
        let parsed = parse(&legacy_codex());
        assert_eq!(parsed.format, TranscriptFormat::Codex);
        assert_eq!(
            summary(&parsed),
            vec![
                row(0, "line:4:0", Role::User, "list the files"),
                row(1, "line:5:0", Role::Tool, r#"tool call local_shell: ["ls","-a"]"#),
                row(2, "line:6:0", Role::Tool, "tool result: .\n..\nsrc"),
                row(3, "line:8:0", Role::Assistant, "There is one directory, `src`."),
            ]
        );
        let session = Some("5973b6c0-94b8-487b-a530-2aeb6098ae0e");
        assert!(parsed.items.iter().all(|item| item.session_id.as_deref() == session && item.timestamp.is_none()));
    }

    #[test]
    fn claude_code_mixed_blocks_get_sub_keys_and_repeated_uuids_are_dropped() {
        let line = serde_json::json!({"type": "assistant", "uuid": "u-1", "sessionId": "s-1",
            "timestamp": "2025-01-01T00:00:00Z", "message": {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "pwd"}}]}});
        let user = serde_json::json!({"type": "user", "uuid": "u-2", "sessionId": "s-1",
            "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]},
                {"type": "text", "text": "<system-reminder>ignore</system-reminder>"},
                {"type": "text", "text": "and also check b"}]}});
        let input = format!("{line}\n{user}\n{line}\n");
        let parsed = parse(input.as_bytes());
        assert_eq!(
            summary(&parsed),
            vec![
                row(0, "u-1", Role::Assistant, "Listing."),
                row(1, "u-1:1", Role::Tool, r#"tool call Bash: {"command":"ls"}"#),
                row(2, "u-1:2", Role::Tool, r#"tool call Bash: {"command":"pwd"}"#),
                row(3, "u-2", Role::Tool, "tool result: a\n[image]"),
                row(4, "u-2:1", Role::User, "and also check b"),
            ]
        );
    }

    #[test]
    fn claude_code_sidechains_are_skipped_unless_the_whole_file_is_a_sub_agent() {
        let main = std::str::from_utf8(CLAUDE_CODE).expect("fixture is UTF-8");
        assert!(!parse(CLAUDE_CODE).items.iter().any(|item| item.text.contains("other callers")));
        // The sidechain line alone, as the first conversation line of an `agent-<id>.jsonl` file.
        let sidechain = main.lines().find(|line| line.contains("\"isSidechain\":true")).expect("sidechain line");
        let agent_file = format!("{sidechain}\n");
        let parsed = parse(agent_file.as_bytes());
        assert_eq!(
            summary(&parsed),
            vec![row(
                0,
                "0b6f1d3e-2c4a-4f5b-8e9d-1a2b3c4d5e09",
                Role::Assistant,
                "Searching for other callers of parse_iso."
            )]
        );
    }

    #[test]
    fn long_tool_results_are_truncated() {
        let long = "é".repeat(TOOL_TEXT_MAX_CHARS + 500);
        let line = serde_json::json!({"type": "function_call_output", "call_id": "c", "output": long}).to_string();
        let parsed = parse(format!("{line}\n").as_bytes());
        let body = parsed.items[0].text.strip_prefix("tool result: ").expect("tool result prefix");
        assert_eq!(body.chars().count(), TOOL_TEXT_MAX_CHARS);
        assert!(body.ends_with('…'));
        assert_eq!(truncate_chars("abc", 3), "abc");
        assert_eq!(truncate_chars("abcd", 3), "ab…");
    }

    #[test]
    fn forced_format_ignores_other_shapes() {
        let parsed = parse_as(TranscriptFormat::Responses, CLAUDE_CODE);
        assert_eq!((parsed.format, parsed.items.len(), parsed.skipped_lines), (TranscriptFormat::Responses, 0, 0));
        assert_eq!(parse_as(TranscriptFormat::Codex, CODEX), parse(CODEX));
    }

    #[test]
    fn names_round_trip() {
        for format in TranscriptFormat::ALL {
            assert_eq!(TranscriptFormat::from_name(format.name()), Some(format));
            assert_eq!(serde_json::to_value(format).ok(), Some(Value::String(format.name().to_string())));
        }
        assert_eq!([Role::User, Role::Assistant, Role::Tool].map(Role::as_str), ["user", "assistant", "tool"]);
    }
}
