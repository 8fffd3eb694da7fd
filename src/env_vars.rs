//! Every environment variable astra-mcp reads, in one place. Each one equals a flag (named in its doc line);
//! the precedence is flag > environment variable > default, as clap resolves it (see `cli.rs`).

/// Path of the LanceDB directory; equals `--db`.
pub const ASTRA_DB: &str = "ASTRA_DB";
/// Workspace root that `run_tests` runs in and `store_fix_memory` checks paths against; equals `--workspace`.
pub const ASTRA_WORKSPACE: &str = "ASTRA_WORKSPACE";
/// Shell command that runs the workspace's tests; equals `--test-command`.
pub const ASTRA_TEST_COMMAND: &str = "ASTRA_TEST_COMMAND";
/// Test run timeout in seconds; equals `--test-timeout`.
pub const ASTRA_TEST_TIMEOUT: &str = "ASTRA_TEST_TIMEOUT";
/// Seconds a tool call other than `run_tests` may take before it is answered as a failure; equals
/// `--tool-timeout`.
pub const ASTRA_TOOL_TIMEOUT: &str = "ASTRA_TOOL_TIMEOUT";
/// The actor that owns long-term memory (trusted configuration, never a tool argument); equals `--actor`.
pub const ASTRA_ACTOR: &str = "ASTRA_ACTOR";
/// The project label of new memories; equals `--project` (default: the workspace's, from its
/// `.astra-mcp.toml`, git remote or folder name).
pub const ASTRA_PROJECT: &str = "ASTRA_PROJECT";
/// Accept client-reported test outcomes (rows are stored `verified: false`); equals `--trust-client-outcomes`.
pub const ASTRA_TRUST_CLIENT_OUTCOMES: &str = "ASTRA_TRUST_CLIENT_OUTCOMES";
/// Cosine floor of search results that have no keyword hit; equals `--min-score`.
pub const ASTRA_MIN_SCORE: &str = "ASTRA_MIN_SCORE";
/// Directory holding `model.onnx` and the four tokenizer files; equals `--model-dir`.
pub const ASTRA_MODEL_DIR: &str = "ASTRA_MODEL_DIR";
/// Path of the ONNX Runtime shared library (the name `ort` itself uses); equals `--ort-dylib`.
pub const ORT_DYLIB_PATH: &str = "ORT_DYLIB_PATH";
/// Root of the cache `scripts/setup` fills (model, runtime, tooling); default
/// `${XDG_CACHE_HOME:-$HOME/.cache}/astra-mcp`. No flag: only the defaults of `--model-dir` and `--ort-dylib`
/// derive from it.
pub const ASTRA_CACHE_DIR: &str = "ASTRA_CACHE_DIR";
/// Log filter in `tracing_subscriber::EnvFilter` syntax (e.g. `astra_mcp=debug`); equals `--log`.
pub const ASTRA_LOG: &str = "ASTRA_LOG";
/// How the store reads its files (`auto`, `uring`, `blocking`); equals `--lance-io`.
pub const ASTRA_LANCE_IO: &str = "ASTRA_LANCE_IO";
/// Rows per searchable table the search's row cache holds (0: off); equals `--row-cache-rows`.
pub const ASTRA_ROW_CACHE_ROWS: &str = "ASTRA_ROW_CACHE_ROWS";
/// MiB the store's caches (Lance's index and metadata caches, on a bucket its files read) hold in all (at least
/// 16); equals `--store-cache-mib`.
pub const ASTRA_STORE_CACHE_MIB: &str = "ASTRA_STORE_CACHE_MIB";
/// Milliseconds a read may lag other processes' commits; equals `--read-consistency-ms`.
pub const ASTRA_READ_CONSISTENCY_MS: &str = "ASTRA_READ_CONSISTENCY_MS";
/// Opens an object store that ignores conditional writes; equals `--unsafe-single-writer`.
pub const ASTRA_UNSAFE_SINGLE_WRITER: &str = "ASTRA_UNSAFE_SINGLE_WRITER";
/// Extra core memory blocks and limits, `name=limit,...`; equals `--core-blocks`.
pub const ASTRA_CORE_BLOCKS: &str = "ASTRA_CORE_BLOCKS";
/// Cosine from which an archival passage counts as a near-duplicate; equals `--near-duplicate-cosine`.
pub const ASTRA_NEAR_DUPLICATE_COSINE: &str = "ASTRA_NEAR_DUPLICATE_COSINE";
/// Address to serve MCP over HTTP on (instead of stdio); equals `--http`.
pub const ASTRA_HTTP: &str = "ASTRA_HTTP";
/// Allow a non-loopback `--http` address; equals `--allow-remote`.
pub const ASTRA_ALLOW_REMOTE: &str = "ASTRA_ALLOW_REMOTE";
/// Path of the TOML config file (tokens, allowed hosts and origins); equals `--config`.
pub const ASTRA_CONFIG: &str = "ASTRA_CONFIG";
/// Seconds calls in flight may run after SIGINT/SIGTERM; equals `--shutdown-grace`.
pub const ASTRA_SHUTDOWN_GRACE: &str = "ASTRA_SHUTDOWN_GRACE";
/// Open HTTP connections at most; equals `--http-max-connections`.
pub const ASTRA_HTTP_MAX_CONNECTIONS: &str = "ASTRA_HTTP_MAX_CONNECTIONS";
/// Seconds a new HTTP connection may take to send its first request's headers; equals `--http-header-timeout`.
pub const ASTRA_HTTP_HEADER_TIMEOUT: &str = "ASTRA_HTTP_HEADER_TIMEOUT";
/// Seconds an HTTP request may take to send its body; equals `--http-body-timeout`.
pub const ASTRA_HTTP_BODY_TIMEOUT: &str = "ASTRA_HTTP_BODY_TIMEOUT";
/// Seconds an HTTP connection may stay open with no request in progress; equals `--http-idle-timeout`.
pub const ASTRA_HTTP_IDLE_TIMEOUT: &str = "ASTRA_HTTP_IDLE_TIMEOUT";
/// Live MCP sessions at most over HTTP; equals `--http-max-sessions`.
pub const ASTRA_HTTP_MAX_SESSIONS: &str = "ASTRA_HTTP_MAX_SESSIONS";
/// Live MCP sessions at most per actor over HTTP; equals `--http-max-sessions-per-actor`.
pub const ASTRA_HTTP_MAX_SESSIONS_PER_ACTOR: &str = "ASTRA_HTTP_MAX_SESSIONS_PER_ACTOR";
/// Seconds after which an HTTP session with no request ends; equals `--http-session-idle`.
pub const ASTRA_HTTP_SESSION_IDLE: &str = "ASTRA_HTTP_SESSION_IDLE";
/// Test runs at most at once in a server; equals `--max-test-runs`.
pub const ASTRA_MAX_TEST_RUNS: &str = "ASTRA_MAX_TEST_RUNS";
/// Test runs at most at once in one workspace; equals `--max-test-runs-per-workspace`.
pub const ASTRA_MAX_TEST_RUNS_PER_WORKSPACE: &str = "ASTRA_MAX_TEST_RUNS_PER_WORKSPACE";
/// Most tokens one hook adds to an agent's context; equals `hook claude-code --budget-tokens`.
pub const ASTRA_HOOK_BUDGET_TOKENS: &str = "ASTRA_HOOK_BUDGET_TOKENS";
/// Search memory with each submitted prompt (`true`/`false`); equals `hook claude-code --prompt-search`.
pub const ASTRA_HOOK_PROMPT_SEARCH: &str = "ASTRA_HOOK_PROMPT_SEARCH";
/// Milliseconds a context hook may take; equals `hook claude-code --timeout-ms`.
pub const ASTRA_HOOK_TIMEOUT_MS: &str = "ASTRA_HOOK_TIMEOUT_MS";
/// Kill switch of every hook: `off` (or `0`, `false`) makes `astra-mcp hook …` exit 0 at once, printing
/// and storing nothing. No flag: it is meant for the environment a client starts hooks in.
pub const ASTRA_HOOKS: &str = "ASTRA_HOOKS";
/// The model `drive` asks; equals `drive --model`.
pub const ASTRA_DRIVE_MODEL: &str = "ASTRA_DRIVE_MODEL";
/// Responses API base URL (the name the OpenAI SDKs use); equals `drive --base-url`.
pub const OPENAI_BASE_URL: &str = "OPENAI_BASE_URL";
/// The Responses API key (read from the environment or `.env` in the working directory; no flag, so it
/// never shows in a process list).
pub const OPENAI_API_KEY: &str = "OPENAI_API_KEY";
