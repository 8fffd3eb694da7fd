//! Every environment variable astra-mcp reads, in one place. Each one equals a flag (named in its doc line);
//! the precedence is flag > environment variable > default, as clap resolves it (see `cli.rs`).
//!
//! Each variable is a `pub const` whose value is its name, declared through `env_vars!` so that [`ALL`]
//! lists every one with its doc comment: docs/settings.md (`astra-mcp-dev settings`) takes the
//! variables without a flag, and their descriptions, from that table.

/// Declares each variable as a `pub const NAME: &str = "NAME"` with its doc comment, and [`ALL`] from the
/// same list, so the table cannot miss a variable or describe one differently from its rustdoc.
macro_rules! env_vars {
    ($($(#[doc = $doc:literal])+ $name:ident;)+) => {
        $($(#[doc = $doc])+ pub const $name: &str = stringify!($name);)+

        /// Every variable above: its name and its doc comment as written (one line per `///` line, each
        /// with its leading space), in declaration order.
        pub const ALL: &[(&str, &str)] = &[$((stringify!($name), concat!($($doc, "\n"),+))),+];
    };
}

env_vars! {
    /// Path of the LanceDB directory; equals `--db`.
    ASTRA_DB;
    /// Workspace root that `run_tests` runs in and `store_fix_memory` checks paths against; equals `--workspace`.
    ASTRA_WORKSPACE;
    /// Shell command that runs the workspace's tests; equals `--test-command`.
    ASTRA_TEST_COMMAND;
    /// Test run timeout in seconds; equals `--test-timeout`.
    ASTRA_TEST_TIMEOUT;
    /// Seconds a tool call other than `run_tests` may take before it is answered as a failure; equals
    /// `--tool-timeout`.
    ASTRA_TOOL_TIMEOUT;
    /// The actor that owns long-term memory (trusted configuration, never a tool argument); equals `--actor`.
    ASTRA_ACTOR;
    /// The project label of new memories; equals `--project` (default: the workspace's, from its
    /// `.astra-mcp.toml`, git remote or folder name).
    ASTRA_PROJECT;
    /// Accept client-reported test outcomes (rows are stored `verified: false`); equals `--trust-client-outcomes`.
    ASTRA_TRUST_CLIENT_OUTCOMES;
    /// Cosine floor of search results that have no keyword hit; equals `--min-score`.
    ASTRA_MIN_SCORE;
    /// Directory holding `model.onnx` and the four tokenizer files; equals `--model-dir`.
    ASTRA_MODEL_DIR;
    /// Path of the ONNX Runtime shared library (the name `ort` itself uses); equals `--ort-dylib`.
    ORT_DYLIB_PATH;
    /// Root of the cache `scripts/setup` fills (model, runtime, tooling, the scripts' build directory);
    /// default `${XDG_CACHE_HOME:-$HOME/.cache}/astra-mcp`. No flag: only the defaults of `--model-dir` and
    /// `--ort-dylib` derive from it.
    ASTRA_CACHE_DIR;
    /// Log filter in `tracing_subscriber::EnvFilter` syntax (e.g. `astra_mcp=debug`); equals `--log`.
    ASTRA_LOG;
    /// How the store reads its files (`auto`, `uring`, `blocking`); equals `--lance-io`.
    ASTRA_LANCE_IO;
    /// Rows per searchable table the search's row cache holds (0: off); equals `--row-cache-rows`.
    ASTRA_ROW_CACHE_ROWS;
    /// MiB the store's caches (Lance's index and metadata caches, on a bucket its files read) hold in all (at least
    /// 16); equals `--store-cache-mib`.
    ASTRA_STORE_CACHE_MIB;
    /// Milliseconds a read may lag other processes' commits; equals `--read-consistency-ms`.
    ASTRA_READ_CONSISTENCY_MS;
    /// Opens an object store that ignores conditional writes; equals `--unsafe-single-writer`.
    ASTRA_UNSAFE_SINGLE_WRITER;
    /// Extra core memory blocks and limits, `name=limit,...`; equals `--core-blocks`.
    ASTRA_CORE_BLOCKS;
    /// Cosine from which an archival passage counts as a near-duplicate; equals `--near-duplicate-cosine`.
    ASTRA_NEAR_DUPLICATE_COSINE;
    /// Days without a use after which a passage, or a fix gone from the code, is hidden from searches (0:
    /// never); equals `--expire-after-days`.
    ASTRA_EXPIRE_AFTER_DAYS;
    /// Address to serve MCP over HTTP on (instead of stdio); equals `--http`.
    ASTRA_HTTP;
    /// Allow a non-loopback `--http` address; equals `--allow-remote`.
    ASTRA_ALLOW_REMOTE;
    /// Path of the TOML config file (tokens, allowed hosts and origins); equals `--config`.
    ASTRA_CONFIG;
    /// Seconds calls in flight may run after SIGINT/SIGTERM; equals `--shutdown-grace`.
    ASTRA_SHUTDOWN_GRACE;
    /// Open HTTP connections at most; equals `--http-max-connections`.
    ASTRA_HTTP_MAX_CONNECTIONS;
    /// Seconds a new HTTP connection may take to send its first request's headers; equals `--http-header-timeout`.
    ASTRA_HTTP_HEADER_TIMEOUT;
    /// Seconds an HTTP request may take to send its body; equals `--http-body-timeout`.
    ASTRA_HTTP_BODY_TIMEOUT;
    /// Seconds an HTTP connection may stay open with no request in progress; equals `--http-idle-timeout`.
    ASTRA_HTTP_IDLE_TIMEOUT;
    /// Live MCP sessions at most over HTTP; equals `--http-max-sessions`.
    ASTRA_HTTP_MAX_SESSIONS;
    /// Live MCP sessions at most per actor over HTTP; equals `--http-max-sessions-per-actor`.
    ASTRA_HTTP_MAX_SESSIONS_PER_ACTOR;
    /// Seconds after which an HTTP session with no request ends; equals `--http-session-idle`.
    ASTRA_HTTP_SESSION_IDLE;
    /// Test runs at most at once in a server; equals `--max-test-runs`.
    ASTRA_MAX_TEST_RUNS;
    /// Test runs at most at once in one workspace; equals `--max-test-runs-per-workspace`.
    ASTRA_MAX_TEST_RUNS_PER_WORKSPACE;
    /// Most tokens one hook adds to an agent's context; equals `hook claude-code --budget-tokens`.
    ASTRA_HOOK_BUDGET_TOKENS;
    /// Search memory with each submitted prompt (`true`/`false`); equals `hook claude-code --prompt-search`.
    ASTRA_HOOK_PROMPT_SEARCH;
    /// Milliseconds a context hook may take; equals `hook claude-code --timeout-ms`.
    ASTRA_HOOK_TIMEOUT_MS;
    /// Kill switch of every hook: `off` (or `0`, `false`, `no`) makes `astra-mcp hook …` exit 0 at once,
    /// printing and storing nothing. No flag: it is meant for the environment a client starts hooks in.
    ASTRA_HOOKS;
    /// The model `drive` asks; equals `drive --model`.
    ASTRA_DRIVE_MODEL;
    /// Responses API base URL (the name the OpenAI SDKs use); equals `drive --base-url`.
    OPENAI_BASE_URL;
    /// The Responses API key of `drive` and `distill` (read from the environment or `.env` in the working
    /// directory; no flag, so it never shows in a process list).
    OPENAI_API_KEY;
}
