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
