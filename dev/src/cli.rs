//! The developers' command line (clap derive): `astra-mcp-dev bench | eval | session-demo | schemas | settings`,
//! with the global flags of `astra-mcp` ([`GlobalArgs`]).

use std::path::PathBuf;

use astra_mcp::cli::{GlobalArgs, LoopArgs, ModelArgs, StoreArgs};
use astra_mcp::env_vars as ev;
use clap::{Args, Parser, Subcommand};

/// The developers' tools of astra-mcp: benchmarks, retrieval evaluations, the cross-session demo, the
/// tools' schema files and the settings page. Not part of the product (the wheel does not ship it).
#[derive(Debug, Parser)]
#[command(name = "astra-mcp-dev", version, about, long_about = None)]
pub struct DevCli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: DevCommand,
}

#[derive(Debug, Subcommand)]
pub enum DevCommand {
    /// Benchmark helpers (BENCHMARKS.md; the harness is `bench/run`): embedder throughput, bulk
    /// loading of large stores, recall of the vector index.
    Bench {
        #[command(subcommand)]
        command: BenchCommand,
    },
    /// Retrieval evaluations: LoCoMo conversations, the bundled fixes set, the code check of fixes.
    Eval {
        #[command(subcommand)]
        command: EvalCommand,
    },
    /// The cross-session experiment: `drive` fixes scenario_alpha, then scenario_beta in a new session
    /// must find alpha's fix in memory before its first edit; the untouched acceptance tests decide.
    SessionDemo(Box<SessionDemoArgs>),
    /// Write every tool's schema to `schemas/<tool>.json`, or check the checked-in files match.
    Schemas(SchemasArgs),
    /// Write docs/settings.md from `astra-mcp`'s flags, its environment variables and the page's template
    /// (dev/settings.template.md), or check the checked-in page matches.
    Settings(SettingsArgs),
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Texts per second of the embedder at each batch size, over the texts of FILE (one per line).
    Embed {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long, value_name = "FILE")]
        texts: PathBuf,
        /// Batch sizes (texts per call, at least 1), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "1,8,32,64", value_name = "N,...",
              value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
        batch: Vec<usize>,
        /// Sort the texts by length first (less padding per batch).
        #[arg(long)]
        sort_by_length: bool,
        /// Run each call of N texts as one ONNX batch of N, in the given order (as another runtime
        /// would), instead of the server's own batching (length order, ONNX batches of 8).
        #[arg(long)]
        one_batch: bool,
    },
    /// Append ROWS archival passages built from the texts of FILE (one per line; each text embedded for
    /// real, further rows get its vector plus seeded noise), then build the indexes and run `memory
    /// optimize`'s upkeep (compaction, pruning). For a fresh store.
    Populate {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long, value_name = "FILE")]
        texts: PathBuf,
        #[arg(long, value_name = "N")]
        rows: usize,
        #[arg(long, default_value_t = 42, value_name = "N")]
        seed: u64,
    },
    /// Recall@K of the archival vector search through its index against exact search, for the
    /// queries of FILE (one per line), with both latencies (store only).
    Recall {
        #[command(flatten)]
        store: StoreArgs,
        #[arg(long, value_name = "FILE")]
        queries: PathBuf,
        #[arg(long, default_value_t = 10, value_name = "K")]
        k: usize,
    },
}

#[derive(Debug, Subcommand)]
pub enum EvalCommand {
    /// The turn-level LoCoMo retrieval protocol (recall@5, recall@10, MRR by category) through the
    /// product's own conversation import and search.
    Locomo {
        /// Directory of LoCoMo conversation JSON files.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
        /// Store to use (kept, and reused on the next run); default: a temporary directory.
        #[arg(long, value_name = "PATH")]
        db: Option<String>,
        #[command(flatten)]
        common: EvalArgs,
        /// Weight of the BM25 ranking over each turn's own text (default: the product's).
        #[arg(long)]
        own_text_weight: Option<f32>,
    },
    /// Fix retrieval on the bundled evaluation set (345 fixes: 225 look-alikes with symptom and
    /// identifier queries, 60 target and distractor pairs with paraphrase queries; tune and held-out
    /// splits): hit@1, hit@3 and MRR of `search_codebase_memory`, fused and with each ranking alone, in a
    /// fresh temporary store.
    Fixes {
        #[command(flatten)]
        common: EvalArgs,
        /// The power the BM25 ranking's share of the query's reach is raised to (default: the product's).
        #[arg(long)]
        keyword_exponent: Option<f32>,
        /// Weight of the identifier ranking (BM25 of the query's identifier phrases) in the fusion
        /// (default: the product's).
        #[arg(long)]
        identifier_weight: Option<f32>,
        /// Also list the tune split's misses of the fused search: the query, the right fix and where it
        /// ranked, the fix ranked first instead. The held-out split's are never listed.
        #[arg(long)]
        misses: bool,
    },
    /// The code check of stored fixes (in place, changed around, reverted, unknown) on generated git
    /// repositories whose code moves on after the fix: precision and recall of each state. Needs git.
    Staleness {
        /// Cases of each of the ten moves (half with the fix committed before it is stored).
        #[arg(long, default_value_t = 12)]
        per_move: usize,
        /// Seed of the generated repositories.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Also write the report as JSON to this file.
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
    },
}

/// What the retrieval evaluations share: the model, the weights of the two rankings every fusion has,
/// and where the report goes.
#[derive(Debug, Clone, Args)]
pub struct EvalArgs {
    #[arg(long, env = ev::ASTRA_MODEL_DIR, value_name = "DIR")]
    pub model_dir: Option<PathBuf>,
    #[arg(long, env = ev::ORT_DYLIB_PATH, value_name = "FILE")]
    pub ort_dylib: Option<PathBuf>,
    /// Weight of the vector ranking in the fusion (default: the product's).
    #[arg(long)]
    pub vector_weight: Option<f32>,
    /// Weight of the BM25 ranking in the fusion (default: the product's).
    #[arg(long)]
    pub keyword_weight: Option<f32>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
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

#[derive(Debug, Clone, Args)]
pub struct SettingsArgs {
    /// The page to write (or to compare with, with --check).
    #[arg(long, default_value = "docs/settings.md", value_name = "FILE")]
    pub out: PathBuf,
    /// Do not write: exit 1 when the page differs from what the code generates.
    #[arg(long)]
    pub check: bool,
}

#[derive(Debug, Clone, Args)]
pub struct SessionDemoArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The demo projects (`scenario_alpha`, `scenario_beta`), copied fresh for every session.
    #[arg(long, default_value = "demo_projects", value_name = "DIR")]
    pub projects: PathBuf,
    /// Test command of the demo projects.
    #[arg(long, env = ev::ASTRA_TEST_COMMAND, default_value = "python3 -m pytest -q -p no:cacheprovider", value_name = "CMD")]
    pub test_command: String,
    /// Seconds before a test run is killed.
    #[arg(long, env = ev::ASTRA_TEST_TIMEOUT, default_value_t = 600, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub test_timeout: u64,
    /// The experiment's id; its sessions are `<ID>-alpha`, `<ID>-beta`, `<ID>-beta-r1`, ….
    #[arg(long, value_name = "ID")]
    pub run_id: String,
    /// Run beta this many more times against alpha's memory alone (what those runs store is removed).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub repeat: usize,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub tool_loop: LoopArgs,
}
