//! The entry of the official MCP Registry, `server.json` at the repository root, checked as the registry
//! checks it when it is published: valid against the registry's own schema (vendored in
//! `tests/fixtures/registry/`, with its source), and naming a PyPI package the publisher can prove is
//! theirs, by the line `mcp-name: <server name>` in the package's description, which is our README
//! (pyproject.toml's `readme`). And at the version the wheel gets, Cargo.toml's.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::support::{repo, venv_python};

/// Validates the JSON document on stdin against the schema file named by the first argument, with the
/// `jsonschema` package of the tooling venv (scripts/requirements.txt) and the validator of the draft
/// the schema declares; prints `{"validator": <class name>, "errors": ["<path>: <message>", …]}`.
const VALIDATE: &str = r#"
import json, sys
import jsonschema
with open(sys.argv[1]) as f:
    schema = json.load(f)
cls = jsonschema.validators.validator_for(schema)
cls.check_schema(schema)
validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
errors = sorted(
    "/" + "/".join(str(p) for p in e.absolute_path) + ": " + e.message
    for e in validator.iter_errors(json.load(sys.stdin))
)
print(json.dumps({"validator": cls.__name__, "errors": errors}))
"#;

fn schema_errors(document: &Value) -> Vec<String> {
    let mut child = Command::new(venv_python())
        .arg("-c")
        .arg(VALIDATE)
        .arg(repo().join("tests/fixtures/registry/server.schema.json"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(document.to_string().as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "the validator failed: {}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["validator"], "Draft7Validator", "the registry's schema is draft-07: {report}");
    report["errors"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect()
}

fn server_json() -> Value {
    serde_json::from_str(&std::fs::read_to_string(repo().join("server.json")).unwrap()).unwrap()
}

fn toml_file(name: &str) -> toml::Table {
    std::fs::read_to_string(repo().join(name)).unwrap().parse().unwrap()
}

#[test]
fn server_json_is_valid_against_the_registry_schema_which_refuses_broken_entries() {
    let server = server_json();
    assert_eq!(schema_errors(&server), Vec::<String>::new(), "server.json does not validate");
    assert_eq!(
        server["$schema"], "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
        "server.json names the schema version that is vendored"
    );

    // the validator applies the schema: each of these breaks the entry where the registry would refuse it
    type Break = (&'static str, fn(&mut Value));
    let broken: [Break; 5] = [
        ("/name", |s| s["name"] = json!("astra-mcp")),
        ("/description", |s| s["description"] = json!("x".repeat(101))),
        ("/packages/0/version", |s| s["packages"][0]["version"] = json!("latest")),
        ("/packages/0/transport", |s| s["packages"][0]["transport"] = json!({"type": "carrier-pigeon"})),
        ("/packages/0/packageArguments/0", |s| s["packages"][0]["packageArguments"][0] = json!({"type": "positional"})),
    ];
    for (path, breakage) in broken {
        let mut entry = server.clone();
        breakage(&mut entry);
        let errors = schema_errors(&entry);
        assert!(errors.iter().any(|e| e.starts_with(&format!("{path}: "))), "{path} broken, yet: {errors:?}");
    }
}

#[test]
fn server_json_is_the_pypi_wheel_at_cargo_s_version_run_as_a_stdio_server() {
    let server = server_json();
    let cargo = toml_file("Cargo.toml");
    let version = cargo["package"]["version"].as_str().unwrap();
    assert_eq!(server["version"], version, "server.json's version is Cargo.toml's");
    let packages = server["packages"].as_array().unwrap();
    assert_eq!(packages.len(), 1, "{packages:?}");
    let package = &packages[0];
    assert_eq!(package["version"], version, "the PyPI package's version is Cargo.toml's (maturin takes it)");
    assert_eq!(package["registryType"], "pypi");
    assert_eq!(package["registryBaseUrl"], "https://pypi.org", "the only PyPI the official registry accepts");
    let pyproject = toml_file("pyproject.toml");
    assert_eq!(package["identifier"], pyproject["project"]["name"].as_str().unwrap(), "the wheel's name");
    assert_eq!(package["runtimeHint"], "uvx");
    assert_eq!(package["transport"], json!({"type": "stdio"}));
    // what a client runs: `uvx astra-mcp serve --stdio`, the binary's name being the package's
    let arguments: Vec<&str> =
        package["packageArguments"].as_array().unwrap().iter().map(|a| a["value"].as_str().unwrap()).collect();
    assert_eq!(arguments, ["serve", "--stdio"]);
    let bin = cargo["bin"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap()).collect::<Vec<_>>();
    assert_eq!(bin, [package["identifier"].as_str().unwrap()], "uvx runs the executable named as the package");
}

/// The registry's ownership check of a PyPI package (its `internal/validators/registries/pypi.go`): the
/// package's description holds `mcp-name: <server name>` followed by whitespace, `<` or `-->`.
#[test]
fn the_readme_pypi_shows_carries_the_mcp_name_of_server_json() {
    let name = server_json()["name"].as_str().unwrap().to_string();
    let pyproject = toml_file("pyproject.toml");
    assert_eq!(pyproject["project"]["readme"].as_str(), Some("README.md"), "PyPI's description is the README");
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let token = regex::Regex::new(r"mcp-name:\s*(\S+?)(?:\s|-->|<|$)").unwrap();
    let named: Vec<&str> = token.captures_iter(&readme).map(|c| c.get(1).unwrap().as_str()).collect();
    assert_eq!(
        named,
        [name.as_str()],
        "README.md must carry exactly one `mcp-name:` line naming server.json's name, e.g. `<!-- mcp-name: {name} -->`"
    );
}
