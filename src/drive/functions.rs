//! The Responses API function definitions of the runner, derived from the MCP tool schemas (one
//! registry, one set of schemas; docs/tools.md): `{"type": "function", "name", "description",
//! "parameters", "strict": true}`. OpenAI's strict mode (Structured Outputs) accepts only a subset of JSON
//! Schema, so the keywords it rejects are dropped here; the tools still enforce those limits when called.

use serde_json::{Map, Value, json};

use crate::tools::ToolSpec;

/// JSON Schema keywords kept in a strict function definition; everything else (`maxLength`,
/// `minimum`, `format`, `pattern`, `default`, `title`, …) is dropped.
const KEPT: [&str; 11] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "anyOf",
    "description",
    "$ref",
    "$defs",
    "const",
];

/// The strict-mode form of a JSON Schema: only [`KEPT`] keywords, recursively (property names are kept
/// whatever they are called).
pub fn strict_parameters(schema: &Map<String, Value>) -> Value {
    let mut out = Map::new();
    for (key, value) in schema {
        if !KEPT.contains(&key.as_str()) {
            continue;
        }
        let value = match (key.as_str(), value) {
            ("properties" | "$defs", Value::Object(children)) => {
                Value::Object(children.iter().map(|(name, child)| (name.clone(), strict_value(child))).collect())
            }
            ("items", child) => strict_value(child),
            ("anyOf", Value::Array(options)) => Value::Array(options.iter().map(strict_value).collect()),
            (_, other) => other.clone(),
        };
        out.insert(key.clone(), value);
    }
    Value::Object(out)
}

fn strict_value(value: &Value) -> Value {
    match value {
        Value::Object(map) => strict_parameters(map),
        other => other.clone(),
    }
}

/// One function definition for the Responses API `tools` array.
pub fn function_definition(name: &str, description: &str, parameters: &Map<String, Value>) -> Value {
    json!({
        "type": "function",
        "name": name,
        "description": description,
        "parameters": strict_parameters(parameters),
        "strict": true,
    })
}

/// The definition of a registry tool.
pub fn from_spec(spec: &ToolSpec) -> Value {
    function_definition(spec.name, spec.description, &spec.input_schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registry_tool_becomes_a_strict_function_without_rejected_keywords() {
        for spec in crate::tools::specs() {
            let f = from_spec(&spec);
            assert_eq!(f["strict"], true);
            assert_eq!(f["parameters"]["additionalProperties"], false, "{}", spec.name);
            let text = f["parameters"].to_string();
            for rejected in ["maxLength", "minLength", "minimum", "maximum", "maxItems", "format\"", "\"default\""] {
                assert!(!text.contains(rejected), "{}: {rejected} left in {text}", spec.name);
            }
            let required = f["parameters"]["required"].as_array().unwrap().len();
            let properties = f["parameters"]["properties"].as_object().unwrap().len();
            assert_eq!(required, properties, "{}: strict mode needs every property required", spec.name);
        }
    }

    #[test]
    fn a_property_named_like_a_keyword_is_kept() {
        let schema = json!({"type": "object", "properties": {"format": {"type": "string", "maxLength": 3}},
            "required": ["format"], "additionalProperties": false});
        let strict = strict_parameters(schema.as_object().unwrap());
        assert_eq!(strict["properties"]["format"], json!({"type": "string"}));
    }
}
