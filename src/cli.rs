//! The command line, as the user types it (clap derive). Every flag that has an environment variable
//! names it from `env_vars`; clap resolves flag > env > default. `config` turns this into settings.
//!
//! One file on purpose, though long: every clap type of the binary lives here and nowhere else, so the
//! whole command line reads in one place and no lower layer depends on clap.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::env_vars as ev;
use crate::memory::testrun::{DEFAULT_MAX_TEST_RUNS, DEFAULT_MAX_TEST_RUNS_PER_WORKSPACE};
use crate::store::lance::OpenOptions;
use crate::store::lance::io::{DEFAULT_CACHE_MIB, ReadIo};
use crate::store::lance::row_cache::DEFAULT_ROW_CACHE_ROWS;
use crate::transport::limits;

/// Default of `--tool-timeout`: below the 60 s after which Codex CLI gives up on a tool call
/// (`tool_timeout_sec`), so the agent reads why, and above the slowest writes measured under load (31 s
/// for a fix with 800 writes in flight on the S3 test server, `multiprocess` tests).
pub const DEFAULT_TOOL_TIMEOUT_SECS: u64 = 50;

/// Default of `--log`. Lance's warning that a compaction lost its commit to another writer's (two
/// processes on one store compact the same fragments at about the same time) is left out: upkeep retries
/// that compaction on the latest version and logs the conflict at debug level.
pub const DEFAULT_LOG: &str = "warn,astra_mcp=info,lance::dataset::optimize=error";

/// The filter `--log` asks for, with what names no crate made astra-mcp's own: a bare `debug` or `trace`
/// level (or `4`, `5`) becomes `info` plus that level for `astra_mcp`, and a span directive without a
/// target (`[span]=debug`) is scoped to `astra_mcp`. At debug, rmcp logs every JSON-RPC message in full
/// (tool arguments, the text of a memory before its secrets are redacted) and Lance its query plans (the
/// words searched for). A crate named in the filter (`debug,rmcp=debug`) gets the level it is given.
pub fn log_filter(filter: &str) -> std::borrow::Cow<'_, str> {
    use tracing::level_filters::LevelFilter;
    let directives: Vec<&str> = filter.split(',').map(str::trim).filter(|d| !d.is_empty()).collect();
    let verbose = |d: &str| d.parse::<LevelFilter>().ok().filter(|level| *level > LevelFilter::INFO);
    if !directives.iter().any(|d| verbose(d).is_some() || d.starts_with('[')) {
        return filter.into();
    }
    let level = directives.iter().filter_map(|d| verbose(d)).max();
    let rest: Vec<String> = directives
        .iter()
        .filter(|d| verbose(d).is_none())
        .map(|d| if d.starts_with('[') { format!("astra_mcp{d}") } else { d.to_string() })
        .collect();
    let mut out = Vec::new();
    if let Some(level) = level {
        // the level everything else keeps: another bare level of the filter, else `info`
        if !rest.iter().any(|d| d.parse::<LevelFilter>().is_ok()) {
            out.push("info".to_string());
        }
        out.extend(rest);
        if !out.iter().any(|d| d.split('=').next() == Some("astra_mcp")) {
            out.push(format!("astra_mcp={}", level.to_string().to_ascii_lowercase()));
        }
    } else {
        out = rest;
    }
    out.join(",").into()
}

/// Help heading of the logging and store tuning flags every command takes (shown by `--help`, not `-h`).
const ADVANCED_STORE: &str = "Logging and store tuning (advanced)";
/// Help heading of a command's settings a newcomer leaves alone (shown by `--help`, not `-h`).
const ADVANCED: &str = "Advanced";

/// Verified fix memory for coding agents, served over MCP (stdio or HTTP).
#[derive(Debug, Parser)]
#[command(name = "astra-mcp", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The flags every command takes: the log filter and how the store is opened (`astra-mcp-dev`'s
/// commands take them too).
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `astra_mcp=debug`. Logs go to stderr only
    /// (on stdio, stdout is the protocol).
    ///
    /// The default's last part hides Lance's warning "Compaction commit failed", which two processes on
    /// one store cause in normal upkeep: the compaction is retried. Add `astra_mcp::search=debug` for one
    /// `search timings` line per search: `embed_ms`, `keyword_ms`, `vector_ms`, `rows_ms`, `total_ms`.
    /// Hooks log nothing unless `--log` / `ASTRA_LOG` is given.
    ///
    /// What names no crate is astra-mcp's own: a bare `debug` or `trace` (or `4`, `5`) means
    /// `info,astra_mcp=debug` (`=trace`), a span directive without a target (`[span]=debug`) means
    /// `astra_mcp[span]=debug`. At debug, rmcp logs every JSON-RPC message in full (tool arguments, the
    /// text of a memory before redaction) and Lance its query plans (the words searched for): name a crate
    /// to get its lines on purpose (`debug,rmcp=debug`, `debug,lance=debug`) and keep such a log private.
    #[arg(long, global = true, env = ev::ASTRA_LOG, default_value = DEFAULT_LOG, value_name = "FILTER",
          help_heading = ADVANCED_STORE, hide_short_help = true)]
    pub log: String,
    /// How the store reads its files: `auto` (io_uring where the kernel allows it, else blocking reads),
    /// `uring`, or `blocking` (Lance's default reader, a thread-pool hop per read).
    ///
    /// What each costs: docs/storage.md, "How the store reads its files".
    #[arg(long, global = true, env = ev::ASTRA_LANCE_IO, value_enum, default_value_t = LanceIo::Auto,
          value_name = "MODE", help_heading = ADVANCED_STORE, hide_short_help = true)]
    pub lance_io: LanceIo,
    /// Rows per searchable table whose `id`, filter columns and vector searches keep in memory (about
    /// 1.6 KiB each): a table of up to this many rows is read in whole after its first search, so a
    /// search reads only the rows it returns. 0 turns the cache off.
    ///
    /// How the cache is kept current: docs/storage.md, "How the store reads its files".
    #[arg(long, global = true, env = ev::ASTRA_ROW_CACHE_ROWS, default_value_t = DEFAULT_ROW_CACHE_ROWS,
          value_name = "N", help_heading = ADVANCED_STORE, hide_short_help = true)]
    pub row_cache_rows: usize,
    /// MiB of memory the store's caches may hold in all: three quarters for index pages (full-text and
    /// vector), one quarter for table metadata; on a bucket half, a quarter, and a quarter for the files
    /// read from it that Lance never rewrites. At least 16. Raise it for stores past about 1M rows,
    /// whose indexes no longer fit (searches then read them from disk again).
    ///
    /// What the caches hold: docs/storage.md, "How the store reads its files".
    #[arg(long, global = true, env = ev::ASTRA_STORE_CACHE_MIB, default_value_t = DEFAULT_CACHE_MIB,
          value_name = "MIB", value_parser = store_cache_mib, help_heading = ADVANCED_STORE, hide_short_help = true)]
    pub store_cache_mib: u64,
    /// Milliseconds a read may lag the commits of other processes: each search checks the tables'
    /// latest versions at most this often. Default: 0 (every read checks) on a local directory, 500
    /// on object storage, where each check is a round trip to the bucket.
    ///
    /// Why a bucket reads with a lag: docs/storage.md, "When one machine is not enough: a store in a bucket".
    #[arg(long, global = true, env = ev::ASTRA_READ_CONSISTENCY_MS, value_name = "MS", help_heading = ADVANCED_STORE,
          hide_short_help = true)]
    pub read_consistency_ms: Option<u64>,
    /// Open an object store although it does not refuse a second conditional write of one key. Such a
    /// store silently loses commits when two processes write at once: only for a store that one
    /// process alone ever writes to.
    ///
    /// Off, such a store is refused when it is opened: docs/storage.md, "When one machine is not enough: a
    /// store in a bucket".
    #[arg(long, global = true, env = ev::ASTRA_UNSAFE_SINGLE_WRITER,
          value_parser = clap::builder::BoolishValueParser::new(), help_heading = ADVANCED_STORE, hide_short_help = true)]
    pub unsafe_single_writer: bool,
}

impl GlobalArgs {
    /// How every store this command opens is opened.
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions {
            read_io: self.lance_io.into(),
            row_cache_rows: self.row_cache_rows,
            cache_mib: self.store_cache_mib,
            read_consistency: self.read_consistency_ms.map(std::time::Duration::from_millis),
            unsafe_single_writer: self.unsafe_single_writer,
        }
    }
}

/// `--store-cache-mib`: a whole number of MiB, at least 16.
fn store_cache_mib(value: &str) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(mib) if mib >= 16 => Ok(mib),
        Ok(mib) => Err(format!("{mib} MiB is too little for Lance's caches; give at least 16")),
        Err(_) => Err(format!("{value:?} is not a whole number of MiB (e.g. {DEFAULT_CACHE_MIB})")),
    }
}

/// `memory list --limit`: rows per table, at least one (0 would list nothing and read as an empty store).
fn rows_to_list(value: &str) -> Result<usize, String> {
    match value.trim().parse::<usize>() {
        Ok(0) => Err("list at least 1 row per table (the default is 20)".into()),
        Ok(rows) => Ok(rows),
        Err(_) => Err(format!("{value:?} is not a whole number of rows (e.g. 20)")),
    }
}

/// `--lance-io`: how the store reads its files ([`ReadIo`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LanceIo {
    /// io_uring where this process can use it (checked once), else `blocking`, said
    /// once at `info` level. io_uring is often switched off: `sysctl kernel.io_uring_disabled`, or the
    /// seccomp profile of a container (Docker's default blocks it).
    Auto,
    /// Linux io_uring: Lance's ring threads (`LANCE_URING_THREAD_COUNT`, 1 unless set) read the files.
    /// Opening the store fails where io_uring is not allowed.
    Uring,
    /// Lance's default local reader: each read a `pread(2)` on tokio's blocking pool.
    Blocking,
}

impl From<LanceIo> for ReadIo {
    fn from(io: LanceIo) -> Self {
        match io {
            LanceIo::Auto => ReadIo::Auto,
            LanceIo::Uring => ReadIo::Uring,
            LanceIo::Blocking => ReadIo::Blocking,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the MCP server (stdio, or HTTP with `--http`).
    Serve(ServeArgs),
    /// Run the OpenAI Responses API tool loop on this server's tools against a workspace (paid requests:
    /// needs --approve-live-cost and OPENAI_API_KEY).
    Drive(Box<DriveArgs>),
    /// Distil the actor's stored conversations into durable archival memories, merging them with what
    /// is stored (paid requests: needs --approve-live-cost and OPENAI_API_KEY); `distill status` lists runs.
    Distill(Box<DistillArgs>),
    /// Operator check of the store: `smoke store`, then (after a restart) `smoke verify --memory-id ID`.
    Smoke {
        #[command(subcommand)]
        command: SmokeCommand,
    },
    /// Wire the server and the hooks into an agent client for every project, through the client's own
    /// plugin commands: `setup claude-code` or `setup codex` (docs/clients.md, "Wire it into your agent").
    Setup(SetupArgs),
    /// Import agent transcripts into conversation memory (searchable with `conversation_search`).
    Sessions {
        #[command(subcommand)]
        command: SessionsCommand,
    },
    /// Hooks for agent clients: `hook claude-code` and `hook codex` put memory into the agent's session
    /// context and import its transcript (docs/hooks.md).
    Hook {
        #[command(subcommand)]
        command: HookCommand,
    },
    /// Open the memory browser: a page on 127.0.0.1 to see, search, judge and correct what agents stored
    /// (docs/ui.md). Prints a URL that logs the browser in once.
    ///
    /// The HTTP limits of `serve` (docs/limits.md) keep their defaults here.
    Ui(Box<UiArgs>),
    /// See and undo what agents stored: list, show, rm, expired, restore, export, import, ingest, stats, reindex,
    /// optimize.
    Memory {
        #[command(subcommand)]
        command: MemoryCommand,
    },
    /// Core memory blocks: show them, list a block's history, restore an earlier version.
    Core {
        #[command(subcommand)]
        command: CoreCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum SessionsCommand {
    /// Import transcript files: Claude Code session JSONL, Codex CLI session JSONL, or OpenAI Responses
    /// items as JSONL (detected from the content). Re-importing a file adds only what is new.
    Import {
        #[command(flatten)]
        store: StoreArgs,
        /// Transcript files.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Force the format instead of detecting it: `claude-code`, `codex` or `responses`.
        #[arg(long, value_name = "FORMAT")]
        format: Option<String>,
        /// File the items under this session id (default: the id in the file, else the file name).
        #[arg(long, value_name = "ID")]
        session_id: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// A Claude Code hook command (docs/hooks.md): reads the event's JSON on stdin. SessionStart prints
    /// core memory and the project's recent verified fixes and decisions; PostToolUse /
    /// PostToolUseFailure of a Bash test run that failed prints the verified fixes matching its
    /// failures; UserPromptSubmit (with --prompt-search) prints what matches the prompt; Stop /
    /// SessionEnd import the transcript. What it prints is added to the model's context. It never
    /// blocks the session: errors exit 1 (never 2) with one line on stderr and nothing on stdout.
    ClaudeCode(HookArgs),
    /// A Codex CLI hook command (docs/hooks.md): the same events and output as `claude-code` (Codex
    /// sends the same hook JSON; a failing command is a PostToolUse of `Bash`), and Stop imports the
    /// Codex session file.
    Codex(HookArgs),
}

/// Settings of `astra-mcp hook claude-code`. Precedence: flag > env > config file `[hooks]` > default.
#[derive(Debug, Clone, Args)]
pub struct HookArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Most tokens one hook adds to the context (default 1,500), counted with the embedding model's
    /// tokenizer; what does not fit is left out and the cut is marked.
    ///
    /// 1 to 100,000. Also `budget_tokens` in the config file's `[hooks]`. How the budget is spent:
    /// docs/hooks.md, "The budget".
    #[arg(long, env = ev::ASTRA_HOOK_BUDGET_TOKENS, value_name = "TOKENS",
          value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub budget_tokens: Option<u64>,
    /// Search archival and fix memory with each prompt the user submits (UserPromptSubmit; off by default).
    ///
    /// Also `prompt_search` in the config file's `[hooks]`.
    #[arg(long, env = ev::ASTRA_HOOK_PROMPT_SEARCH, num_args = 0..=1, default_missing_value = "true",
          value_name = "BOOL", value_parser = clap::builder::BoolishValueParser::new())]
    pub prompt_search: Option<bool>,
    /// Milliseconds a context hook (SessionStart, PostToolUse, UserPromptSubmit) may take before it gives
    /// up with exit code 1 and prints nothing (default 10,000). Imports (Stop, SessionEnd) are not limited.
    ///
    /// 1 to 600,000. Also `timeout_ms` in the config file's `[hooks]`.
    #[arg(long, env = ev::ASTRA_HOOK_TIMEOUT_MS, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: Option<u64>,
    /// The project's test command, e.g. `python3 -m pytest -q`: a Bash call that runs it counts as a test
    /// run, besides the known runners (pytest, cargo test, go test, npm/pnpm/yarn test, jest, vitest,
    /// mvn/gradle test). Default: the workspace's, as `serve` finds it (`.astra-mcp.toml`, else detected).
    #[arg(long, env = ev::ASTRA_TEST_COMMAND, value_name = "CMD")]
    pub test_command: Option<String>,
    /// Cosine floor of the fixes a failing test run brings up.
    #[arg(long, env = ev::ASTRA_MIN_SCORE, default_value_t = crate::memory::DEFAULT_MIN_SCORE, value_name = "COSINE",
          allow_negative_numbers = true, value_parser = cosine_floor)]
    pub min_score: f32,
    /// TOML config file (its `[hooks]` table). Default: `$XDG_CONFIG_HOME/astra-mcp/config.toml` when it
    /// exists.
    #[arg(long, env = ev::ASTRA_CONFIG, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// List memories of every project (`--project` does not filter), newest first, per table.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Only this tier: `fixes`, `archival`, `conversation` or `core` (their tables' names
        /// `session_items` and `core_blocks` work too).
        #[arg(long, value_name = "TABLE")]
        table: Option<String>,
        /// Rows per table (at least 1).
        #[arg(long, default_value_t = 20, value_name = "N",
              value_parser = rows_to_list)]
        limit: usize,
        /// Every actor's rows, not only `--actor`'s.
        #[arg(long)]
        all_actors: bool,
        /// JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the actor's archival passages that expired: unused longer than `--expire-after-days`, hidden
    /// from searches and hooks, kept in the store (`memory restore` brings one back).
    ///
    /// Fixes expire only when their lines are gone from the code as well, which their workspace tells:
    /// `astra-mcp ui` started there marks them.
    Expired {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Bring expired memories back into searches: each counts as used now (docs/tools.md, "Expiry").
    Restore {
        #[command(flatten)]
        store: StoreArgs,
        /// Ids of fixes or archival passages: `memory expired` shows expired passages, `astra-mcp ui`
        /// (started in the workspace) expired fixes, `memory list` any.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
    /// Show one memory (any table) as JSON.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        /// The memory's id (`memory list` shows it).
        id: String,
        /// Look among every actor's rows, not only `--actor`'s.
        #[arg(long)]
        all_actors: bool,
    },
    /// Delete memories by id (from their table and its indexes).
    Rm {
        #[command(flatten)]
        store: StoreArgs,
        /// The memories' ids.
        #[arg(required = true, value_name = "ID")]
        ids: Vec<String>,
    },
    /// Write every table (ids, times and vectors included) as JSONL.
    Export {
        #[command(flatten)]
        store: StoreArgs,
        /// Output file (default: stdout).
        #[arg(long, short, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Every actor's rows, not only `--actor`'s.
        #[arg(long)]
        all_actors: bool,
    },
    /// Bulk-load archival passages from JSONL (`{"text": …, "tags": [...]}` per line): embedded in
    /// batches sorted by length, written in large commits, with a progress bar on a terminal. Texts
    /// already stored (same actor, project and normalised text) are skipped and keep their tags; a text
    /// repeated in the file is stored once, with the tags of every line that gives it.
    Ingest {
        #[command(flatten)]
        store: StoreArgs,
        /// The JSONL file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Read an export back (upserting by id; re-embedding when it was made with another model). Rows
    /// keep the actors written in the file.
    Import {
        #[command(flatten)]
        store: StoreArgs,
        /// A file `memory export` wrote.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
    /// Rows, bytes, fragments, indexes, vector index segments and versions of every table.
    Stats {
        #[command(flatten)]
        store: StoreArgs,
        /// JSON instead of a table: an array with one object per table.
        #[arg(long)]
        json: bool,
    },
    /// Re-embed every row with this binary's model (after a model change) and record the model.
    Reindex {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Compact small fragments, fold new rows into the indexes, prune old versions.
    Optimize {
        #[command(flatten)]
        store: StoreArgs,
        /// Keep versions younger than this many seconds (another process may still read them).
        ///
        /// Below 60, the writes of other processes on this machine wait while each table is pruned; on
        /// a bucket run it only while no other machine uses the store (a write it commits meanwhile can
        /// be lost).
        #[arg(long, default_value_t = 60, value_name = "SECS")]
        prune_older_than: u64,
    },
}

#[derive(Debug, Subcommand)]
pub enum CoreCommand {
    /// Print every block (or one) of `--actor` and `--project`.
    Show {
        #[command(flatten)]
        store: StoreArgs,
        /// Only this block, e.g. `project`.
        section: Option<String>,
    },
    /// List every version of a block, oldest first.
    History {
        #[command(flatten)]
        store: StoreArgs,
        /// The block, e.g. `project`.
        section: String,
    },
    /// Make an earlier version of a block current again (as a new version).
    Restore {
        #[command(flatten)]
        store: StoreArgs,
        /// The block, e.g. `project`.
        section: String,
        /// The version to restore, as `core history` lists it.
        version: i64,
    },
}

/// Where memory lives and whose it is.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// LanceDB directory. Default: `<data dir>/astra-mcp/db`, e.g. `~/.local/share/astra-mcp/db`.
    ///
    /// A `file://` URL is taken as its path; `s3://bucket/prefix` is a store in a bucket (docs/storage.md,
    /// "When one machine is not enough: a store in a bucket"), configured by the AWS variables
    /// (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, …).
    ///
    /// Where no store is, a command that writes (`serve`, `sessions import`, `memory import` / `ingest`, a
    /// hook's import) creates an empty one and logs a warning on stderr ("no store was at this path:
    /// created a new, empty one (if you meant an existing store, check --db / ASTRA_DB)"), shown at every
    /// usual `--log` level; a command that only reads (`memory list` / `show` / `export` / `stats`, `core`,
    /// `ui`, `distill`, the hooks' context) refuses it, naming `--db`.
    #[arg(long, env = ev::ASTRA_DB, value_name = "PATH")]
    pub db: Option<String>,
    /// The actor that owns long-term memory. Trusted configuration: tools cannot choose it.
    ///
    /// A command that finds nothing of the actor (`memory list`, `show`, `rm`, `core history`; a hook's
    /// `SessionStart`) names the actors the store holds memories of, so a missing `ASTRA_ACTOR` does not
    /// read as lost memory.
    #[arg(long, env = ev::ASTRA_ACTOR, default_value = "local", value_name = "ID")]
    pub actor: String,
    /// Project label for new memories and of the core blocks `core` reads; `memory list`, `show` and
    /// `export` show every project. Default: the workspace's, as `serve` finds it from the current
    /// folder (`project` in its `.astra-mcp.toml`, else its git remote as `owner/repo`, else its folder's
    /// name); `default` outside a workspace (a hook: the last folder of the session's directory).
    ///
    /// The same default for `serve`, `ui`, a hook and the operator commands (`core`, `sessions import`,
    /// `memory ingest`), so they read and write what the server does (`drive`: its `--workspace`'s label);
    /// the rules: docs/settings.md, "Workspace, project and test command". `core history` and `core show`
    /// name the label they looked in and where it came from when a project block was never written.
    #[arg(long, env = ev::ASTRA_PROJECT, value_name = "NAME")]
    pub project: Option<String>,
    /// Directory with `model.onnx` and the tokenizer files. Default: the ones installed with the binary
    /// (`<prefix>/share/astra-mcp`), else the cache (`ASTRA_CACHE_DIR`; in a source checkout `scripts/setup` fills it).
    ///
    /// Precisely: `<prefix>/share/astra-mcp/models/all-MiniLM-L6-v2-int8` when it holds `model.onnx`, else
    /// `<cache>/models/all-MiniLM-L6-v2-int8`. `<prefix>` is the directory above the one holding the
    /// running `astra-mcp` (symlinks resolved); `<cache>` is `ASTRA_CACHE_DIR`.
    #[arg(long, env = ev::ASTRA_MODEL_DIR, value_name = "DIR", help_heading = ADVANCED, hide_short_help = true)]
    pub model_dir: Option<PathBuf>,
    /// ONNX Runtime library (`libonnxruntime.so.1.31.1`). Default: the one installed with the binary
    /// (`<prefix>/share/astra-mcp`), else the cache (`ASTRA_CACHE_DIR`; in a source checkout `scripts/setup` fills it).
    ///
    /// Precisely: `<prefix>/share/astra-mcp/onnxruntime/libonnxruntime.so.1.31.1` when the installed model
    /// is there (see `--model-dir`), else `<cache>/onnxruntime/libonnxruntime.so.1.31.1`.
    #[arg(long, env = ev::ORT_DYLIB_PATH, value_name = "FILE", help_heading = ADVANCED, hide_short_help = true)]
    pub ort_dylib: Option<PathBuf>,
    /// Core memory blocks beyond `persona`, `human`, `project`, and character limits: `name=limit,...`,
    /// e.g. `project=4000,style=1000` (default limit 2000).
    #[arg(long, env = ev::ASTRA_CORE_BLOCKS, value_name = "SPEC", help_heading = ADVANCED, hide_short_help = true)]
    pub core_blocks: Option<String>,
    /// Days without a use (a search returning it, a hook injecting it) after which an archival passage,
    /// or a fix whose lines are gone from the code, expires: hidden from searches and hooks, restored by
    /// `memory restore`; never deleted. `memory expired` lists expired passages, the browser both. 0:
    /// nothing expires.
    ///
    /// 0 to 36,500. Core blocks and conversation items never expire: docs/tools.md, "Expiry".
    #[arg(long, env = ev::ASTRA_EXPIRE_AFTER_DAYS, default_value_t = crate::memory::uses::DEFAULT_EXPIRE_AFTER_DAYS,
          value_name = "DAYS", value_parser = expire_days, allow_negative_numbers = true, help_heading = ADVANCED,
          hide_short_help = true)]
    pub expire_after_days: u32,
}

#[derive(Debug, Clone, Args)]
#[command(
    after_help = "Limits and tuning flags are left out here: `astra-mcp serve --help` lists every flag.",
    after_long_help = "docs/settings.md describes every setting and its environment variable."
)]
pub struct ServeArgs {
    /// Serve over stdin/stdout (the default).
    #[arg(long, default_value_t = true, help_heading = "Transport")]
    pub stdio: bool,
    /// Serve over HTTP on this address instead: streamable HTTP at `/mcp`, legacy HTTP+SSE at `/sse`
    /// (+ `POST /message`). E.g. `127.0.0.1:8765`; port 0 picks a free port. The URL is printed on stdout.
    ///
    /// An IP address and port; `localhost:PORT` means `127.0.0.1:PORT`. Only on loopback unless
    /// `--allow-remote` is given. What the HTTP server accepts: docs/http.md.
    #[arg(long, env = ev::ASTRA_HTTP, value_name = "ADDR", conflicts_with = "stdio", value_parser = parse_http_addr,
          help_heading = "Transport")]
    pub http: Option<std::net::SocketAddr>,
    /// Let `--http` listen on a non-loopback address, where other machines can connect (configure
    /// bearer tokens in the config file).
    #[arg(long, env = ev::ASTRA_ALLOW_REMOTE, value_parser = clap::builder::BoolishValueParser::new(),
          help_heading = "Transport")]
    pub allow_remote: bool,
    /// TOML config file: bearer tokens (each mapped to an actor), allowed hosts and origins. Default:
    /// `$XDG_CONFIG_HOME/astra-mcp/config.toml` when it exists.
    ///
    /// Its keys: docs/settings.md, "The config file".
    #[arg(long, env = ev::ASTRA_CONFIG, value_name = "FILE", help_heading = "Transport")]
    pub config: Option<PathBuf>,
    /// Seconds that tool calls in flight may still run after SIGINT/SIGTERM before they are abandoned.
    #[arg(long, env = ev::ASTRA_SHUTDOWN_GRACE, default_value_t = 30, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(0..=3_600), help_heading = ADVANCED, hide_short_help = true)]
    pub shutdown_grace: u64,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Workspace root: where `run_tests` runs and what `store_fix_memory` paths are relative to.
    /// Default: the git work tree the server is started in, else its working directory when that has
    /// a test setup or `.astra-mcp.toml`. Without one, `run_tests` and `store_fix_memory` refuse.
    ///
    /// Without one the searches still work. The rules: docs/settings.md, "Workspace, project and test
    /// command".
    #[arg(long, env = ev::ASTRA_WORKSPACE, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Shell command that runs the workspace's tests, e.g. `python3 -m pytest -q`. Default:
    /// `test_command` in the workspace's `.astra-mcp.toml`, else detected (pytest, cargo test, go test,
    /// npm test, make test).
    ///
    /// Else none: `run_tests` says how to set one. Refused at start when there is no workspace to run it
    /// in. The detection: docs/settings.md, "Workspace, project and test command".
    #[arg(long, env = ev::ASTRA_TEST_COMMAND, value_name = "CMD")]
    pub test_command: Option<String>,
    /// Seconds before a test run is killed.
    #[arg(long, env = ev::ASTRA_TEST_TIMEOUT, default_value_t = 600, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86_400), help_heading = ADVANCED)]
    pub test_timeout: u64,
    /// Seconds a tool call other than `run_tests` may take (a memory store that stopped answering) before
    /// it is answered as a failure to retry; 0: no limit.
    ///
    /// A call still running then is answered `isError`, to call again; a read of core memory (a resource,
    /// the prompt), or a request still waiting for the store to open, fails; a memory browser page
    /// answers 503.
    #[arg(long, env = ev::ASTRA_TOOL_TIMEOUT, default_value_t = DEFAULT_TOOL_TIMEOUT_SECS, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(0..=86_400), help_heading = ADVANCED, hide_short_help = true)]
    pub tool_timeout: u64,
    /// Accept outcomes reported by clients that run tests themselves; such fixes are stored `verified: false`.
    ///
    /// What it lets through: docs/tools.md, "The gates".
    #[arg(long, env = ev::ASTRA_TRUST_CLIENT_OUTCOMES, value_parser = clap::builder::BoolishValueParser::new(),
          help_heading = ADVANCED)]
    pub trust_client_outcomes: bool,
    /// Cosine floor: matches below it are dropped unless they also matched by keyword (−1 to 1).
    #[arg(long, env = ev::ASTRA_MIN_SCORE, default_value_t = crate::memory::DEFAULT_MIN_SCORE, value_name = "COSINE",
          allow_negative_numbers = true, value_parser = cosine_floor, help_heading = ADVANCED, hide_short_help = true)]
    pub min_score: f32,
    /// Cosine from which an existing archival passage is listed as a near-duplicate of a new one (0 to 1).
    #[arg(long, env = ev::ASTRA_NEAR_DUPLICATE_COSINE, default_value_t = crate::memory::DEFAULT_NEAR_DUPLICATE_COSINE, value_name = "COSINE",
          help_heading = ADVANCED, hide_short_help = true)]
    pub near_duplicate_cosine: f32,
    // last: the help heading it sets would carry over to the flags after it
    #[command(flatten)]
    pub limits: LimitArgs,
}

/// `astra-mcp ui`: the memory browser on a loopback port, for the store of `--db` and the actor of `--actor`.
#[derive(Debug, Clone, Args)]
pub struct UiArgs {
    /// Port on 127.0.0.1 (0: a free port, printed).
    #[arg(long, default_value_t = 0, value_name = "PORT")]
    pub port: u16,
    /// Print the URL only; do not start a web browser (one is started only where a desktop is).
    #[arg(long)]
    pub no_open: bool,
    /// The config file (bearer tokens the login form accepts, allowed hosts; docs/settings.md, "The config
    /// file").
    #[arg(long, env = ev::ASTRA_CONFIG, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The workspace whose files decide whether a fix of its project is stale. Default: as `serve` finds
    /// it, the git work tree `ui` is started in, else its working directory when that has a test setup
    /// or `.astra-mcp.toml`; elsewhere none (staleness unknown). Its project label (`--project`, else
    /// the workspace's, else `default`) picks the project blocks the Core memory page shows.
    #[arg(long, env = ev::ASTRA_WORKSPACE, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Seconds a page may take (a memory store that stopped answering) before it answers 503; 0: no limit.
    #[arg(long, env = ev::ASTRA_TOOL_TIMEOUT, default_value_t = DEFAULT_TOOL_TIMEOUT_SECS, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(0..=86_400), help_heading = ADVANCED, hide_short_help = true)]
    pub tool_timeout: u64,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// The limits of `serve` (docs/limits.md): HTTP connections, timeouts and sessions, and test runs. Listed
/// under their own heading by `serve --help`, left out of `-h`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Limits (advanced; docs/limits.md)")]
pub struct LimitArgs {
    /// With `--http`: open connections at most; past it the connection idle the longest is closed, and
    /// when all are busy new ones wait (docs/limits.md).
    #[arg(long, env = ev::ASTRA_HTTP_MAX_CONNECTIONS, default_value_t = limits::DEFAULT_MAX_CONNECTIONS,
          value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000), hide_short_help = true)]
    pub http_max_connections: u64,
    /// With `--http`: seconds a new connection may take to send its first request's headers.
    #[arg(long, env = ev::ASTRA_HTTP_HEADER_TIMEOUT, default_value_t = limits::DEFAULT_HEADER_TIMEOUT_SECS,
          value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3_600), hide_short_help = true)]
    pub http_header_timeout: u64,
    /// With `--http`: seconds a request may take to send its body.
    #[arg(long, env = ev::ASTRA_HTTP_BODY_TIMEOUT, default_value_t = limits::DEFAULT_BODY_TIMEOUT_SECS,
          value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=3_600), hide_short_help = true)]
    pub http_body_timeout: u64,
    /// With `--http`: seconds a connection may stay open with no request in progress (keep-alive).
    #[arg(long, env = ev::ASTRA_HTTP_IDLE_TIMEOUT, default_value_t = limits::DEFAULT_IDLE_TIMEOUT_SECS,
          value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400), hide_short_help = true)]
    pub http_idle_timeout: u64,
    /// With `--http`: live MCP sessions at most; past it `initialize` gets 503 with `Retry-After`.
    #[arg(long, env = ev::ASTRA_HTTP_MAX_SESSIONS, default_value_t = limits::DEFAULT_MAX_SESSIONS,
          value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000), hide_short_help = true)]
    pub http_max_sessions: u64,
    /// With `--http`: live MCP sessions at most per actor (bearer token identity).
    #[arg(long, env = ev::ASTRA_HTTP_MAX_SESSIONS_PER_ACTOR, default_value_t = limits::DEFAULT_MAX_SESSIONS_PER_ACTOR,
          value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000), hide_short_help = true)]
    pub http_max_sessions_per_actor: u64,
    /// With `--http`: seconds after which a session with no request ends.
    #[arg(long, env = ev::ASTRA_HTTP_SESSION_IDLE, default_value_t = limits::DEFAULT_SESSION_IDLE_SECS,
          value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400), hide_short_help = true)]
    pub http_session_idle: u64,
    /// Test runs at most at once in this server; `run_tests` past it is refused with a tool error.
    #[arg(long, env = ev::ASTRA_MAX_TEST_RUNS, default_value_t = DEFAULT_MAX_TEST_RUNS, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000), hide_short_help = true)]
    pub max_test_runs: u64,
    /// Test runs at most at once in one workspace.
    #[arg(long, env = ev::ASTRA_MAX_TEST_RUNS_PER_WORKSPACE, default_value_t = DEFAULT_MAX_TEST_RUNS_PER_WORKSPACE, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=1_000), hide_short_help = true)]
    pub max_test_runs_per_workspace: u64,
}

impl Default for LimitArgs {
    /// The flags' defaults (for commands that build a server without parsing `serve`'s flags).
    fn default() -> Self {
        Self {
            http_max_connections: limits::DEFAULT_MAX_CONNECTIONS,
            http_header_timeout: limits::DEFAULT_HEADER_TIMEOUT_SECS,
            http_body_timeout: limits::DEFAULT_BODY_TIMEOUT_SECS,
            http_idle_timeout: limits::DEFAULT_IDLE_TIMEOUT_SECS,
            http_max_sessions: limits::DEFAULT_MAX_SESSIONS,
            http_max_sessions_per_actor: limits::DEFAULT_MAX_SESSIONS_PER_ACTOR,
            http_session_idle: limits::DEFAULT_SESSION_IDLE_SECS,
            max_test_runs: DEFAULT_MAX_TEST_RUNS,
            max_test_runs_per_workspace: DEFAULT_MAX_TEST_RUNS_PER_WORKSPACE,
        }
    }
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

/// `astra-mcp setup CLIENT`.
#[derive(Debug, Clone, Args)]
pub struct SetupArgs {
    /// The agent client to wire.
    #[arg(value_enum)]
    pub client: SetupClient,
    /// Print the files it would write and the client commands it would run; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// An agent client `setup` knows how to wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SetupClient {
    /// Claude Code (`claude plugin marketplace add`, `claude plugin install`).
    ClaudeCode,
    /// Codex CLI (`codex plugin marketplace add`, `codex plugin add`).
    Codex,
}

#[derive(Debug, Clone, Args)]
pub struct DriveArgs {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Workspace the model works in: the local tools and `run_tests` are confined to it.
    #[arg(long, env = ev::ASTRA_WORKSPACE, value_name = "DIR")]
    pub workspace: PathBuf,
    /// Shell command that runs the workspace's tests, e.g. `python3 -m pytest -q`.
    #[arg(long, env = ev::ASTRA_TEST_COMMAND, value_name = "CMD")]
    pub test_command: Option<String>,
    /// Seconds before a test run is killed.
    #[arg(long, env = ev::ASTRA_TEST_TIMEOUT, default_value_t = 600, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub test_timeout: u64,
    /// This run's id: its session id, its evidence folder and its ledger key.
    #[arg(long, value_name = "ID")]
    pub run_id: String,
    /// The task (default: fix the workspace's failing tests).
    #[arg(long, conflicts_with = "prompt_file", value_name = "TEXT")]
    pub prompt: Option<String>,
    /// Read the task from this file.
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub tool_loop: LoopArgs,
}

/// The Responses API settings of `drive`, `session-demo` and `distill`: endpoint, prices and budgets.
#[derive(Debug, Clone, Args)]
pub struct ModelArgs {
    /// Allow paid requests. Without it nothing is sent.
    #[arg(long)]
    pub approve_live_cost: bool,
    /// The model the requests ask for.
    #[arg(long, env = ev::ASTRA_DRIVE_MODEL, default_value = "gpt-6-astra", value_name = "MODEL")]
    pub model: String,
    /// Responses API base URL with its version prefix; requests go to `{base_url}/responses`.
    /// Default: `OPENAI_BASE_URL` from the environment or `.env`, else `https://api.openai.com/v1`.
    #[arg(long, env = ev::OPENAI_BASE_URL, value_name = "URL")]
    pub base_url: Option<String>,
    /// `max_output_tokens` of each request.
    #[arg(long, default_value_t = 8192, value_name = "TOKENS")]
    pub max_output_tokens: u32,
    /// `reasoning.effort` (e.g. `low`, `medium`, `high`); default: the model's.
    #[arg(long, value_name = "EFFORT")]
    pub reasoning_effort: Option<String>,
    /// USD per million input tokens.
    #[arg(long, default_value_t = 10.0, value_name = "USD")]
    pub input_usd_per_million: f64,
    /// USD per million output tokens.
    #[arg(long, default_value_t = 50.0, value_name = "USD")]
    pub output_usd_per_million: f64,
    /// Budget of this run, USD (checked before every request).
    #[arg(long, default_value_t = 2.0, value_name = "USD")]
    pub run_budget_usd: f64,
    /// Budget across runs, summed from the ledger, USD: of the project for `drive`, of the actor's
    /// runs for `distill`.
    #[arg(long, default_value_t = 20.0, value_name = "USD")]
    pub project_budget_usd: f64,
    /// Cost ledger (JSON Lines). Default: `<data dir>/astra-mcp/ledger.jsonl`.
    #[arg(long, value_name = "FILE")]
    pub ledger: Option<PathBuf>,
    /// Seconds before a request to the Responses API is abandoned (1–86,400).
    #[arg(long, default_value_t = 300, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub request_timeout: u64,
}

/// The tool loop's settings of `drive` and `session-demo`: limits, evidence, context.
#[derive(Debug, Clone, Args)]
pub struct LoopArgs {
    /// Most requests in the run.
    #[arg(long, default_value_t = 30, value_name = "N")]
    pub max_turns: usize,
    /// Most tool calls in the run.
    #[arg(long, default_value_t = 80, value_name = "N")]
    pub max_tool_calls: usize,
    /// `text.verbosity` (`low`, `medium`, `high`); default: the model's.
    #[arg(long, value_name = "LEVEL")]
    pub verbosity: Option<String>,
    /// Where each run's `transcript.jsonl` and `events.jsonl` go. Default: `<data dir>/astra-mcp/runs`.
    #[arg(long, value_name = "DIR")]
    pub runs_dir: Option<PathBuf>,
    /// Input tokens of a response past which the chain is summarised and a new one started (the
    /// evicted turns stay searchable with conversation_search).
    #[arg(long, default_value_t = 120_000, value_name = "TOKENS")]
    pub context_budget_tokens: u64,
}

/// `astra-mcp distill`: a run for one actor, or `distill status`.
#[derive(Debug, Clone, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct DistillArgs {
    #[command(subcommand)]
    pub command: Option<DistillCommand>,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Read only items said at or after this time (RFC 3339, or a date `YYYY-MM-DD`). Default: every
    /// item no earlier run of the actor has read.
    #[arg(long, value_name = "TIME", value_parser = parse_time_flag)]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Extra extraction instructions, e.g. "only build and deployment facts".
    #[arg(long, value_name = "TEXT")]
    pub instructions: Option<String>,
    /// Read at most N pending items, the oldest first (bounds a run's cost; the rest stay pending).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_items: Option<u64>,
    #[command(flatten)]
    pub model: ModelArgs,
}

#[derive(Debug, Clone, Subcommand)]
pub enum DistillCommand {
    /// List distill runs, oldest first: state (RUNNING, SUCCEEDED, FAILED), counts, cost, error.
    Status {
        /// LanceDB directory. Default: `<data dir>/astra-mcp/db`.
        #[arg(long, env = ev::ASTRA_DB, value_name = "PATH")]
        db: Option<String>,
        /// Only this actor's runs (default: every actor's).
        #[arg(long, value_name = "ID")]
        actor: Option<String>,
        /// One JSON object per run, one per line.
        #[arg(long)]
        json: bool,
    },
}

/// Parses RFC 3339 or a date (`YYYY-MM-DD`, its start, UTC).
pub fn parse_time_flag(value: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let value = value.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(value) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDate::parse_from_str(value, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
        .ok_or_else(|| {
            format!("`{value}` is not a time: give RFC 3339 (`2026-11-30T09:00:00Z`) or a date (`2026-11-30`)")
        })
}

/// `--expire-after-days`: whole days, 0 to 36,500.
fn expire_days(text: &str) -> Result<u32, String> {
    match text.trim().parse::<u32>() {
        Ok(days) if days <= 36_500 => Ok(days),
        _ => Err(format!("`{text}` is not a number of days: give a whole number from 0 (nothing expires) to 36500")),
    }
}

/// `error` with a tip naming the environment variable its bad value came from, when it came from one:
/// clap names only the flag, which a user who never typed it looks for in vain. `args` is the command
/// line as given (the flag typed there wins over the variable, so then the tip is left out).
pub fn name_the_variable(mut error: clap::Error, args: &[String]) -> clap::Error {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if !matches!(error.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
        return error;
    }
    let Some(ContextValue::String(arg)) = error.get(ContextKind::InvalidArg) else { return error };
    let Some(long) = arg.split_whitespace().next().and_then(|a| a.strip_prefix("--")).map(str::to_string) else {
        return error;
    };
    let typed =
        args.iter().any(|a| a.strip_prefix("--").is_some_and(|a| a == long || a.starts_with(&format!("{long}="))));
    let Some(var) = env_of(&Cli::command(), &long) else { return error };
    if typed || std::env::var_os(&var).is_none() {
        return error;
    }
    let tip = format!("the value came from the environment variable {var}: correct it, or unset it for the default");
    error.insert(ContextKind::Suggested, ContextValue::StyledStrs(vec![tip.into()]));
    error
}

/// The environment variable of the flag `--long` in `command` or any of its subcommands.
fn env_of(command: &clap::Command, long: &str) -> Option<String> {
    let own = command.get_arguments().find(|a| a.get_long() == Some(long)).and_then(|a| a.get_env());
    own.map(|v| v.to_string_lossy().into_owned()).or_else(|| command.get_subcommands().find_map(|c| env_of(c, long)))
}

/// `--min-score`: a cosine, −1 to 1 (negative values need no `=`: `--min-score -0.5`).
fn cosine_floor(text: &str) -> Result<f32, String> {
    match text.trim().parse::<f32>() {
        Ok(cosine) if (-1.0..=1.0).contains(&cosine) => Ok(cosine),
        _ => Err(format!("`{text}` is not a cosine: give a number from -1 to 1, e.g. 0.3 (0 keeps every match)")),
    }
}

/// `--http`: an IP address and port; `localhost:PORT` means `127.0.0.1:PORT`.
fn parse_http_addr(text: &str) -> Result<std::net::SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    match text.strip_prefix("localhost:").map(str::parse::<u16>) {
        Some(Ok(port)) => Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port))),
        _ => Err(format!("`{text}` is not an IP address and port: use e.g. 127.0.0.1:8765 (or localhost:8765)")),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// `help` of subcommand `name`: `-h` (short) or `--help` (long).
    fn help(name: &str, long: bool) -> String {
        let mut cli = super::Cli::command();
        cli.build();
        let cmd = cli.find_subcommand_mut(name).unwrap();
        if long { cmd.render_long_help() } else { cmd.render_help() }.to_string()
    }

    /// docs/limits.md and docs/hooks.md explain some flags in tables of their own (what happens at the
    /// limit; the hook's config keys): each row's environment variable and default are the flag's own,
    /// so those pages cannot drift from the definitions docs/settings.md is generated from.
    #[test]
    fn the_flag_tables_of_limits_and_hooks_docs_match_the_definitions() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut cli = super::Cli::command();
        cli.build();
        let serve = cli.find_subcommand("serve").unwrap().clone();
        let hook = cli.find_subcommand("hook").unwrap().find_subcommand("claude-code").unwrap().clone();
        let mut checked = 0;
        for (page, cmd, default_column) in [("docs/limits.md", &serve, 3), ("docs/hooks.md", &hook, 4)] {
            let text = std::fs::read_to_string(root.join(page)).unwrap();
            for row in text.lines().filter(|l| l.starts_with("| `--")) {
                let cells: Vec<&str> = row.split('|').map(str::trim).collect();
                let long = cells[1].trim_matches('`').split(' ').next().unwrap().trim_start_matches("--");
                let arg = cmd
                    .get_arguments()
                    .find(|a| a.get_long() == Some(long))
                    .unwrap_or_else(|| panic!("{page}: `{} {long}` is no flag", cmd.get_name()));
                let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
                assert_eq!(cells[2].trim_matches('`'), env, "{page}: the environment variable of --{long}");
                let written = cells[default_column];
                let default = arg.get_default_values().first().and_then(|d| d.to_str()).unwrap_or("false");
                match (written.parse::<f64>(), default.parse::<f64>()) {
                    (Ok(w), Ok(d)) => assert_eq!(w, d, "{page}: the default of --{long}"),
                    _ if written == "off" => assert_eq!(default, "false", "{page}: the default of --{long}"),
                    _ => continue, // a default in words (derived at run time)
                }
                checked += 1;
            }
        }
        assert!(checked >= 12, "only {checked} rows checked: did the tables change shape?");
    }

    /// `serve -h` leads with the flags a newcomer sets and leaves tuning to `--help`; `ui` lists no
    /// flag it does not have.
    #[test]
    fn help_leads_with_what_a_newcomer_sets() {
        let short = help("serve", false);
        let at = |flag: &str| short.find(flag).unwrap_or_else(|| panic!("{flag} missing from serve -h:\n{short}"));
        for flag in ["--db", "--actor", "--project", "--workspace", "--test-command"] {
            assert!(at(flag) < at("--http <ADDR>"), "{flag} comes before the transport flags:\n{short}");
        }
        for advanced in ["--lance-io", "--store-cache-mib", "--http-max-connections", "--max-test-runs", "--min-score"]
        {
            assert!(!short.contains(advanced), "{advanced} is for --help only:\n{short}");
            assert!(help("serve", true).contains(advanced), "--help lists {advanced}");
        }
        assert!(short.lines().count() < 80, "serve -h is {} lines:\n{short}", short.lines().count());
        let ui = help("ui", true);
        for absent in ["--max-test-runs", "--http-max-connections", "--test-command", "With `--http`"] {
            assert!(!ui.contains(absent), "ui --help lists {absent}, which ui does not have:\n{ui}");
        }
    }

    /// Every environment variable a flag reads is declared in `env_vars.rs` (so it is in `env_vars::ALL`),
    /// none typed into an `env = "…"` by hand: that module is the one list of the variables astra-mcp
    /// reads. The settings page would not notice such a name (it shows each flag's variable in the flag's
    /// row), and it takes the variables without a flag from `ALL`, with their doc comments.
    #[test]
    fn every_environment_variable_a_flag_reads_is_declared_in_env_vars() {
        fn walk(cmd: &clap::Command, path: &str, undeclared: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                if let Some(env) = arg.get_env().and_then(|e| e.to_str())
                    && !crate::env_vars::ALL.iter().any(|(name, _)| *name == env)
                {
                    undeclared.push(format!("{path} --{}: {env}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), undeclared);
            }
        }
        let mut undeclared = Vec::new();
        walk(&super::Cli::command(), "astra-mcp", &mut undeclared);
        assert!(undeclared.is_empty(), "read by a flag but not declared in env_vars.rs: {undeclared:#?}");
        // `ALL` carries each variable's doc comment, the description the settings page shows
        assert!(crate::env_vars::ALL.iter().any(|(name, doc)| *name == "ASTRA_DB" && doc.contains("`--db`")));
    }

    #[test]
    fn a_bare_debug_level_is_astra_mcps_alone_unless_a_crate_is_named() {
        assert_eq!(super::log_filter("debug"), "info,astra_mcp=debug");
        assert_eq!(super::log_filter("warn,TRACE"), "warn,astra_mcp=trace");
        assert_eq!(super::log_filter("debug,rmcp=debug"), "info,rmcp=debug,astra_mcp=debug");
        assert_eq!(super::log_filter("trace,astra_mcp=info"), "info,astra_mcp=info");
        assert_eq!(super::log_filter("trace,astra_mcp::search=info"), "info,astra_mcp::search=info,astra_mcp=trace");
        // numeric levels, and span directives without a target
        assert_eq!(super::log_filter("5"), "info,astra_mcp=trace");
        assert_eq!(super::log_filter("warn,4"), "warn,astra_mcp=debug");
        assert_eq!(super::log_filter("[serve_inner]=debug"), "astra_mcp[serve_inner]=debug");
        assert_eq!(super::log_filter("debug,[serve_inner]"), "info,astra_mcp[serve_inner],astra_mcp=debug");
        assert_eq!(super::log_filter("3"), "3");
        // no bare debug or trace: as given
        assert_eq!(super::log_filter("astra_mcp=debug"), "astra_mcp=debug");
        assert_eq!(super::log_filter("info,lance=debug"), "info,lance=debug");
        assert_eq!(super::log_filter(super::DEFAULT_LOG), super::DEFAULT_LOG);
        assert_eq!(super::log_filter("off"), "off");
    }

    /// `--min-score` takes a negative cosine as a value, not as a flag, and refuses what is no cosine.
    #[test]
    fn a_negative_min_score_is_a_value_and_an_out_of_range_one_is_refused() {
        use clap::Parser;
        let hook = |score: &str| super::Cli::try_parse_from(["astra-mcp", "serve", "--stdio", "--min-score", score]);
        let parsed = hook("-0.5").unwrap();
        let super::Command::Serve(serve) = parsed.command else { panic!("not serve") };
        assert_eq!(serve.min_score, -0.5);
        for bad in ["1.5", "-2", "high"] {
            let err = hook(bad).unwrap_err().to_string();
            assert!(err.contains("is not a cosine: give a number from -1 to 1"), "{bad}: {err}");
        }
    }

    /// `memory list --limit 0` is refused: it would list nothing and say the store holds no memories.
    #[test]
    fn memory_list_refuses_a_limit_of_0() {
        use clap::Parser;
        let err = super::Cli::try_parse_from(["astra-mcp", "memory", "list", "--limit", "0"]).unwrap_err();
        assert!(err.to_string().contains("'0' for '--limit <N>': list at least 1 row per table"), "{err}");
        assert!(super::Cli::try_parse_from(["astra-mcp", "memory", "list", "--limit", "1"]).is_ok());
    }
}
