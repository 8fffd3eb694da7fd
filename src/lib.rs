//! astra-mcp: a verified fix memory for coding agents, served over MCP (stdio or HTTP), on one embedded
//! LanceDB directory with local all-MiniLM-L6-v2 embeddings. See `README.md` and `docs/development.md`.
//!
//! Layers, outermost first: the pipelines (`hooks`, `drive`, `distill`, `sessions`, `eval`) → `app` (the
//! wiring room: opens the store, builds the memories and tool hosts) → `cli`/`config` (settings) →
//! `transport` (rmcp wiring, the HTTP listener) → `ui` (the memory browser's pages) → `tools` (registry, schemas, what the model reads) → `memory` (the rules:
//! gates, ranking, redaction) → `store` and `embed` (the seams to LanceDB and ONNX Runtime). `domain`
//! holds the plain types they share. Each layer imports only the layers below it.
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod app;
pub mod bench;
pub mod cli;
pub mod config;
pub mod distill;
pub mod domain;
pub mod drive;
pub mod embed;
pub mod env_vars;
pub mod eval;
pub mod hooks;
pub mod llm;
pub mod memory;
pub mod sessions;
pub mod smoke;
pub mod store;
pub mod tools;
pub mod transport;
pub mod ui;

/// `(file name, pretty JSON + newline)` of every tool's schema file under `schemas/`.
pub fn schema_files() -> Vec<(String, String)> {
    tools::specs()
        .iter()
        .map(|spec| {
            let body = serde_json::to_string_pretty(&spec.to_json()).expect("schemas serialize");
            (format!("{}.json", spec.name), format!("{body}\n"))
        })
        .collect()
}
