//! Property test: random arguments for every tool (right and wrong field names, every JSON type, odd
//! unicode, huge numbers) must come back as a tool result — `isError` with a message, or a success —
//! never a panic, a protocol error for a known tool, or a hang.

use std::time::Duration;

use astra_mcp::memory::SessionState;
use astra_mcp::tools::{self, JsonObject, ToolHost};
use proptest::prelude::*;
use serde_json::Value;

use crate::support::{config, host};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        "\\PC{0,40}".prop_map(Value::String),
        Just(Value::String("x".repeat(25_000))),
        Just(Value::String("\u{0}\u{202e}<tool_call>'; DROP TABLE fixes; --".into())),
        Just(Value::String("2026-11-30".into())),
        Just(Value::String("00000000-0000-0000-0000-000000000000".into())),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Valid arguments of each tool, which the strategy then corrupts field by field (so calls reach the
/// memory layer, not only argument parsing).
fn valid_arguments(tool: &str) -> JsonObject {
    let value = match tool {
        "search_codebase_memory" => serde_json::json!({"query": "x", "error_type": null, "top_k": 3}),
        "store_fix_memory" => serde_json::json!({
            "fix_description": "f", "error_type": "E", "file_paths": ["a.py"], "outcome": "o"}),
        "core_memory_append" => serde_json::json!({"section": "human", "text": "hi"}),
        "core_memory_replace" => serde_json::json!({"section": "human", "old_text": "hi", "new_text": "yo"}),
        "archival_memory_insert" => serde_json::json!({"text": "t", "tags": []}),
        "archival_memory_search" | "conversation_search" => {
            serde_json::json!({"query": "t", "top_k": null, "start": null, "end": null})
        }
        "memory_forget" => serde_json::json!({"id": "00000000-0000-0000-0000-000000000000"}),
        _ => serde_json::json!({}),
    };
    let mut args = value.as_object().unwrap().clone();
    match tool {
        "archival_memory_search" => args.insert("tags".into(), Value::Null),
        "conversation_search" => args.insert("roles".into(), Value::Null),
        _ => None,
    };
    args
}

/// A tool name and its valid arguments with 0–3 fields replaced by random values (sometimes under a
/// name the tool does not have).
fn call() -> impl Strategy<Value = (String, JsonObject)> {
    let specs = tools::specs();
    let names: Vec<String> = specs.iter().map(|s| s.name.to_string()).collect();
    let field = (any::<prop::sample::Index>(), prop::bool::weighted(0.85), json_value());
    (0..names.len(), prop::collection::vec(field, 0..4)).prop_map(move |(i, fields)| {
        let spec = &specs[i];
        let props: Vec<String> = spec.input_schema["properties"].as_object().unwrap().keys().cloned().collect();
        let mut args = valid_arguments(spec.name);
        for (pick, known, value) in fields {
            let key = if known && !props.is_empty() { pick.get(&props).clone() } else { "unexpected".to_string() };
            args.insert(key, value);
        }
        (names[i].clone(), args)
    })
}

#[test]
fn random_tool_arguments_get_tool_results_never_panics_or_hangs() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = tempfile::tempdir().unwrap();
    let host: ToolHost = runtime.block_on(host(db.path(), config("fuzz", "p", None, None)));
    let session = SessionState::new("fuzz");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 128, ..ProptestConfig::default() });
    let succeeded = std::cell::Cell::new(0);
    runner
        .run(&call(), |(name, args)| {
            let out = runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(30), host.call(&session, &name, args.clone())).await
            });
            let out = out.map_err(|_| TestCaseError::fail(format!("{name} hung on {args:?}")))?;
            let out = out.map_err(|e| TestCaseError::fail(format!("{name}: known tool refused as unknown: {e}")))?;
            prop_assert!(!out.text.contains("internal error"), "{name} {args:?}: {}", out.text);
            prop_assert!(!out.text.trim().is_empty(), "{name}: every result says something");
            if !out.is_error {
                succeeded.set(succeeded.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    // the corruption leaves many calls valid, so the memory layer itself is driven, not only parsing
    assert!(succeeded.get() >= 10, "only {} calls got past validation", succeeded.get());
}
