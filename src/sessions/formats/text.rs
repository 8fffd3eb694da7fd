//! Rendering shared by the formats: tool calls and results as item text, content blocks as text,
//! canonical JSON, and field access.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::TOOL_TEXT_MAX_CHARS;

pub(super) fn tool_call_text(name: Option<&str>, arguments: &str) -> String {
    let name = name.map(str::trim).filter(|name| !name.is_empty()).unwrap_or("unknown");
    let arguments = arguments.trim();
    if arguments.is_empty() {
        format!("tool call {name}")
    } else {
        format!("tool call {name}: {}", truncate_chars(arguments, TOOL_TEXT_MAX_CHARS))
    }
}

pub(super) fn tool_result_text(result: &str) -> String {
    let result = result.trim();
    if result.is_empty() {
        String::new()
    } else {
        format!("tool result: {}", truncate_chars(result, TOOL_TEXT_MAX_CHARS))
    }
}

/// Function-call arguments: a JSON string holding JSON (rendered canonically), or free text as is.
pub(super) fn arguments_text(arguments: &Value) -> String {
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
pub(super) fn content_text(content: &Value) -> String {
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
pub(super) fn canonical_json(value: &Value) -> String {
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
pub(super) fn truncate_chars(text: &str, max: usize) -> String {
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

pub(super) fn str_field<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

pub(super) fn timestamp_field(object: &Map<String, Value>) -> Option<DateTime<Utc>> {
    let raw = str_field(object, "timestamp")?;
    DateTime::parse_from_rfc3339(raw.trim()).ok().map(|timestamp| timestamp.with_timezone(&Utc))
}
