//! The checked-in `schemas/*.json` must be what the code generates (regenerate with `astra-mcp-dev schemas`),
//! and the limits the schemas state must be the limits the server enforces.

use crate::support::repo;

#[test]
fn checked_in_schemas_match_the_code() {
    let dir = repo().join("schemas");
    let generated = astra_mcp::schema_files();
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    on_disk.sort();
    let mut names: Vec<String> = generated.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    assert_eq!(on_disk, names, "schemas/ has exactly one file per tool");
    for (name, body) in generated {
        let disk = std::fs::read_to_string(dir.join(&name)).unwrap();
        assert_eq!(disk, body, "schemas/{name} drifted: run `astra-mcp-dev schemas` and commit the result");
    }
}

#[test]
fn schema_limits_are_the_enforced_limits() {
    use astra_mcp::tools::{
        self, MAX_ERROR_TYPE_CHARS, MAX_FIX_CHARS, MAX_OUTCOME_CHARS, MAX_PATHS, MAX_QUERY_CHARS, TOP_K_MAX,
    };
    use serde_json::json;
    let specs = tools::specs();
    let prop = |tool: &str, field: &str, key: &str| {
        let spec = specs.iter().find(|s| s.name == tool).unwrap();
        spec.input_schema["properties"][field][key].clone()
    };
    assert_eq!(prop("search_codebase_memory", "query", "maxLength"), json!(MAX_QUERY_CHARS));
    assert_eq!(prop("search_codebase_memory", "error_type", "maxLength"), json!(MAX_ERROR_TYPE_CHARS));
    assert_eq!(prop("search_codebase_memory", "top_k", "maximum"), json!(TOP_K_MAX));
    assert_eq!(prop("store_fix_memory", "fix_description", "maxLength"), json!(MAX_FIX_CHARS));
    assert_eq!(prop("store_fix_memory", "error_type", "maxLength"), json!(MAX_ERROR_TYPE_CHARS));
    assert_eq!(prop("store_fix_memory", "outcome", "maxLength"), json!(MAX_OUTCOME_CHARS));
    assert_eq!(prop("store_fix_memory", "file_paths", "maxItems"), json!(MAX_PATHS));
    use astra_mcp::tools::{
        MAX_CORE_TEXT_CHARS, MAX_PASSAGE_CHARS, MAX_SEARCH_QUERY_CHARS, MAX_TAG_CHARS, MAX_TAGS, SEARCH_TOP_K_MAX,
    };
    assert_eq!(prop("core_memory_append", "text", "maxLength"), json!(MAX_CORE_TEXT_CHARS));
    assert_eq!(prop("core_memory_replace", "new_text", "maxLength"), json!(MAX_CORE_TEXT_CHARS));
    assert_eq!(prop("archival_memory_insert", "text", "maxLength"), json!(MAX_PASSAGE_CHARS));
    assert_eq!(prop("archival_memory_insert", "tags", "maxItems"), json!(MAX_TAGS));
    assert_eq!(prop("archival_memory_insert", "tags", "items")["maxLength"], json!(MAX_TAG_CHARS));
    for tool in ["archival_memory_search", "conversation_search"] {
        assert_eq!(prop(tool, "query", "maxLength"), json!(MAX_SEARCH_QUERY_CHARS));
        assert_eq!(prop(tool, "top_k", "maximum"), json!(SEARCH_TOP_K_MAX));
    }
    let spec = specs.iter().find(|s| s.name == "conversation_search").unwrap();
    let schema = serde_json::Value::Object(spec.input_schema.clone()).to_string();
    assert!(schema.contains(r#""enum":["user","assistant","tool"]"#), "roles are an enum: {schema}");
}
