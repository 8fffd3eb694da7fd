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

mod claude_code;
mod codex;
mod responses;
#[cfg(test)]
mod tests;
mod text;

use claude_code::claude_code_line;
use codex::codex_line;
use responses::{Dialect, response_item_pieces};
use text::str_field;
#[cfg(test)]
use text::truncate_chars;

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
