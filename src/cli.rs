//! The command line, as the user types it (clap derive). Every flag that has an environment variable
//! names it from `env_vars`; clap resolves flag > env > default. `config` turns this into settings.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::env_vars as ev;

/// Verified fix memory for coding agents, served over MCP (stdio).
#[derive(Debug, Parser)]
#[command(name = "astra-mcp", version, about, long_about = None)]
pub struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `astra_mcp=debug`. Logs go to stderr only.
    #[arg(long, global = true, env = ev::ASTRA_LOG, default_value = "warn,astra_mcp=info")]
    pub log: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the MCP server (stdio).
    Serve(ServeArgs),
    /// Operator check of the store: `smoke store`, then (after a restart) `smoke verify --memory-id ID`.
    Smoke {
        #[command(subcommand)]
        command: SmokeCommand,
    },
    /// Write every tool's schema to `schemas/<tool>.json`, or check the checked-in files match.
    Schemas(SchemasArgs),
}

/// Where memory lives and whose it is.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// LanceDB directory. Default: `<data dir>/astra-mcp/db`, e.g. `~/.local/share/astra-mcp/db`.
    #[arg(long, env = ev::ASTRA_DB, value_name = "PATH")]
    pub db: Option<String>,
    /// The actor that owns long-term memory. Trusted configuration: tools cannot choose it.
    #[arg(long, env = ev::ASTRA_ACTOR, default_value = "local", value_name = "ID")]
    pub actor: String,
    /// Project label for new memories. Default: the workspace folder's name (`default` without one).
    #[arg(long, env = ev::ASTRA_PROJECT, value_name = "NAME")]
    pub project: Option<String>,
    /// Directory with `model.onnx` and the tokenizer files. Default: the cache `scripts/setup` fills.
    #[arg(long, env = ev::ASTRA_MODEL_DIR, value_name = "DIR")]
    pub model_dir: Option<PathBuf>,
    /// ONNX Runtime library (`libonnxruntime.so.1.31.1`). Default: the cache `scripts/setup` fills.
    #[arg(long, env = ev::ORT_DYLIB_PATH, value_name = "FILE")]
    pub ort_dylib: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Serve over stdin/stdout. The default and, for now, the only transport; accepted so that
    /// `serve --stdio` reads as it does for other MCP servers.
    #[arg(long, default_value_t = true)]
    pub stdio: bool,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Workspace root: where `run_tests` runs and what `store_fix_memory` paths are relative to.
    /// Without it, only the searches are offered.
    #[arg(long, env = ev::ASTRA_WORKSPACE, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Shell command that runs the workspace's tests, e.g. `python -m pytest -q`.
    #[arg(long, env = ev::ASTRA_TEST_COMMAND, value_name = "CMD")]
    pub test_command: Option<String>,
    /// Seconds before a test run is killed.
    #[arg(long, env = ev::ASTRA_TEST_TIMEOUT, default_value_t = 600, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub test_timeout: u64,
    /// Accept outcomes reported by clients that run tests themselves; such fixes are stored `verified: false`.
    #[arg(long, env = ev::ASTRA_TRUST_CLIENT_OUTCOMES, value_parser = clap::builder::BoolishValueParser::new())]
    pub trust_client_outcomes: bool,
    /// Cosine floor: matches below it are dropped unless they also matched by keyword.
    #[arg(long, env = ev::ASTRA_MIN_SCORE, default_value_t = 0.10, value_name = "COSINE")]
    pub min_score: f32,
}

#[derive(Debug, Subcommand)]
pub enum SmokeCommand {
    /// Store a temporary fix directly (no gates), find it by search, print its memory_id.
    Store(StoreArgs),
    /// Check that a fix stored by `smoke store` survived a restart, then delete it.
    Verify {
        #[command(flatten)]
        store: StoreArgs,
        /// The memory_id `smoke store` printed.
        #[arg(long, value_name = "ID")]
        memory_id: uuid::Uuid,
    },
}

#[derive(Debug, Clone, Args)]
pub struct SchemasArgs {
    /// Directory to write into (or to compare with, with --check).
    #[arg(long, default_value = "schemas", value_name = "DIR")]
    pub out: PathBuf,
    /// Do not write: exit 1 when a file differs from what the code generates.
    #[arg(long)]
    pub check: bool,
}
