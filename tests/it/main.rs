//! The one integration-test binary: real LanceDB in temp dirs, the real embedding model, real MCP
//! clients (rmcp in-process over a duplex pipe, the real binary over stdio, the official Python SDK).
//! Needs `scripts/setup` to have run (model, ONNX Runtime, tooling venv); `scripts/test` does that.

/// The server's allocator (see `src/main.rs`), so the in-process tests and fuzz targets measure the
/// memory the server would use.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod binary;
mod browser;
mod bucket;
mod clients;
mod cost_guard;
mod distill;
mod drive;
mod embedding;
mod fuzz;
mod gates;
mod hooks;
mod http;
mod install;
mod interop;
mod limits;
mod manage;
mod mcp;
mod multiprocess;
mod registry;
mod retrieval;
mod schemas;
mod setup;
mod staleness;
mod store;
mod support;
mod tiered;
mod ui;
mod upkeep;
mod uses;
mod zeroconf;
