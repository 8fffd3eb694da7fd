//! JSON Schemas of tool inputs and outputs, generated from Rust types (schemars) and made strict as
//! docs/tools.md requires: every object has `additionalProperties: false` and lists every property in
//! `required` (optional properties are nullable instead), and numbers carry `minimum`/`maximum`
//! rather than schemars' `format: "uint8"` / `"double"` hints.

use schemars::JsonSchema;
use serde_json::{Map, Value};

/// A JSON object (what MCP calls `JsonObject`).
pub type JsonObject = Map<String, Value>;

/// The strict input schema of `T`. A struct without fields still gets `properties: {}` and
/// `required: []`, as strict-mode function definitions expect.
pub fn input_schema<T: JsonSchema>() -> JsonObject {
    let mut value = serde_json::to_value(schemars::schema_for!(T)).expect("schemas serialize");
    if let Value::Object(map) = &mut value {
        map.entry("properties").or_insert_with(|| Value::Object(Map::new()));
    }
    strictify(&mut value, true);
    into_object(value)
}

/// The output schema of `T` (same clean-up; properties skipped when `None` stay optional).
pub fn output_schema<T: JsonSchema>() -> JsonObject {
    let mut value = serde_json::to_value(schemars::schema_for!(T)).expect("schemas serialize");
    strictify(&mut value, false);
    into_object(value)
}

fn into_object(value: Value) -> JsonObject {
    match value {
        Value::Object(mut map) => {
            map.remove("$schema");
            map.remove("title");
            map
        }
        _ => unreachable!("schemars produces an object schema for a struct"),
    }
}

fn strictify(value: &mut Value, all_required: bool) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(props)) = map.get("properties") {
                let names: Vec<Value> = props.keys().cloned().map(Value::String).collect();
                if all_required {
                    map.insert("required".into(), Value::Array(names));
                }
                map.insert("additionalProperties".into(), Value::Bool(false));
            }
            let numeric = |t: &Value| t == "integer" || t == "number";
            let is_numeric = match map.get("type") {
                Some(t @ Value::String(_)) => numeric(t),
                Some(Value::Array(ts)) => ts.iter().any(numeric),
                _ => false,
            };
            if is_numeric {
                map.remove("format");
            }
            for child in map.values_mut() {
                strictify(child, all_required);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| strictify(v, all_required)),
        _ => {}
    }
}
