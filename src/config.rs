//! Resolved settings. Precedence is flag > environment variable > config file > default: clap applies
//! the first two (`cli.rs`), this module reads the config file and fills in defaults that depend on the
//! machine (data dir, cache dir, workspace name). `app` opens what the settings name.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::cli::{ServeArgs, StoreArgs};
use crate::domain::Scope;
use crate::embed::{LazyEmbedder, ModelPaths, Workload};
use crate::memory::FixMemoryConfig;
use crate::memory::core::{BlockSpec, parse_block_specs};
use crate::memory::project::{self, ProjectFile, TestCommand};
use crate::memory::uses::Expiry;
use crate::memory::workspace::Workspace;
use crate::store::lance::OpenOptions;
use crate::transport::http::{HttpOptions, TokenIdentity};
use crate::transport::limits::HttpLimits;

/// Project label used when there is neither `--project` nor a workspace.
pub const DEFAULT_PROJECT: &str = "default";

/// The default store location: `<data dir>/astra-mcp/db` (`~/.local/share/astra-mcp/db` on Linux).
pub fn default_db_path() -> PathBuf {
    dirs::data_dir().unwrap_or_else(|| PathBuf::from(".")).join("astra-mcp").join("db")
}

/// Store path, model paths and identity from [`StoreArgs`].
#[derive(Debug, Clone)]
pub struct StoreSettings {
    pub db: String,
    pub actor_id: String,
    pub project: Option<String>,
    pub model: ModelPaths,
    /// Core memory blocks and their character limits.
    pub core_blocks: Vec<BlockSpec>,
    /// How the store is opened (`--lance-io`, `--row-cache-rows`).
    pub open: OpenOptions,
    /// When unused memories expire (`--expire-after-days`).
    pub expiry: Expiry,
}

impl StoreSettings {
    /// # Errors
    /// An empty actor or invalid `--core-blocks`.
    pub fn resolve(args: &StoreArgs, open: OpenOptions) -> anyhow::Result<Self> {
        let actor_id = args.actor.trim().to_string();
        anyhow::ensure!(!actor_id.is_empty(), "--actor (ASTRA_ACTOR) is empty: give an actor id");
        Ok(Self {
            db: args.db.clone().unwrap_or_else(|| default_db_path().to_string_lossy().into_owned()),
            actor_id,
            project: args.project.as_ref().map(|p| p.trim().to_string()).filter(|p| !p.is_empty()),
            model: ModelPaths::resolve(args.model_dir.clone(), args.ort_dylib.clone()),
            core_blocks: parse_block_specs(args.core_blocks.as_deref())
                .map_err(|e| anyhow::anyhow!("--core-blocks (ASTRA_CORE_BLOCKS): {e}"))?,
            open,
            expiry: Expiry::days(args.expire_after_days),
        })
    }

    /// The project label: `--project`, else `fallback` (the workspace folder), else `default`.
    pub fn project_or(&self, fallback: Option<String>) -> String {
        self.project.clone().or(fallback).unwrap_or_else(|| DEFAULT_PROJECT.to_string())
    }

    /// The project label of a command run in `cwd` outside a server (`core`, `sessions import`, `memory
    /// ingest`, …), as `serve` started in `cwd` without `--workspace` chooses it ([`choose_project`] over
    /// the workspace [`project::discover`] finds): `--project`, else `project` of the workspace's
    /// `.astra-mcp.toml`, else its git remote (`owner/repo`), else its folder's name; `default` outside a
    /// workspace. The caller settles [`project::ProjectName::folder_label`] against its store as the
    /// server does ([`crate::app::project_label`]).
    ///
    /// # Errors
    /// The workspace's `.astra-mcp.toml` cannot be used (read only without `--project`).
    pub fn project_in(&self, cwd: Option<&std::path::Path>) -> Result<project::ProjectName, project::ProjectFileError> {
        if self.project.is_some() {
            return Ok(choose_project(self.project.as_deref(), None, None));
        }
        let Some(found) = cwd.and_then(project::discover) else { return Ok(choose_project(None, None, None)) };
        let file = ProjectFile::load(&found.root)?;
        Ok(choose_project(None, Some(found.root.as_path()), file.as_ref()))
    }

    /// The embedder over the configured model files (loaded on first use), its threads set for
    /// `workload`.
    pub fn embedder(&self, workload: Workload) -> LazyEmbedder {
        LazyEmbedder::onnx(self.model.clone(), workload)
    }
}

/// The default config file: `$XDG_CONFIG_HOME/astra-mcp/config.toml` (`~/.config/astra-mcp/config.toml`).
pub fn default_config_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("astra-mcp").join("config.toml"))
}

/// Shortest bearer token accepted, in characters.
pub const MIN_TOKEN_CHARS: usize = 16;

/// The TOML config file (docs/http.md): what does not fit a flag. Example:
///
/// ```toml
/// allowed_hosts = ["memory.internal:8765"]        # Host values besides loopback and the bound address
/// allowed_origins = ["https://app.example.com"]   # browser origins besides loopback; `:*` = any port
///
/// [[tokens]]
/// token = "4f9c…"        # at least 16 characters, e.g. `openssl rand -hex 32`
/// actor_id = "alice"     # whose memory requests with this token use
/// project = "web"        # optional project label (default: the server's)
/// ```
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    #[serde(default)]
    pub tokens: Vec<TokenConfig>,
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    /// Settings of `astra-mcp hook claude-code` (flags and env vars win).
    #[serde(default)]
    pub hooks: HooksConfig,
}

/// The `[hooks]` table of the config file:
///
/// ```toml
/// [hooks]
/// budget_tokens = 1500     # most tokens one hook adds to the context
/// prompt_search = false    # search memory with each submitted prompt
/// timeout_ms = 10000       # a context hook gives up after this long
/// ```
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    pub budget_tokens: Option<u64>,
    pub prompt_search: Option<bool>,
    pub timeout_ms: Option<u64>,
}

/// One `[[tokens]]` entry.
#[derive(Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub token: String,
    pub actor_id: String,
    #[serde(default)]
    pub project: Option<String>,
}

impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConfig").field("actor_id", &self.actor_id).field("project", &self.project).finish()
    }
}

impl ConfigFile {
    /// Reads `explicit` (which must exist), else the default path when it exists, else an empty config.
    ///
    /// # Errors
    /// An unreadable file, invalid TOML, an unknown key, or a token that is short, repeated or has no actor.
    pub fn load(explicit: Option<&std::path::Path>) -> anyhow::Result<Self> {
        let path = match explicit {
            Some(path) => path.to_path_buf(),
            None => match default_config_path().filter(|p| p.is_file()) {
                Some(path) => path,
                None => return Ok(Self::default()),
            },
        };
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the config file {} (--config / ASTRA_CONFIG)", path.display()))?;
        let config: Self =
            toml::from_str(&text).with_context(|| format!("config file {} is not valid", path.display()))?;
        config.validate().with_context(|| format!("config file {}", path.display()))?;
        Ok(config)
    }

    fn validate(&self) -> anyhow::Result<()> {
        let mut seen = std::collections::HashSet::new();
        for (i, t) in self.tokens.iter().enumerate() {
            let n = i + 1;
            anyhow::ensure!(!t.actor_id.trim().is_empty(), "token #{n} has an empty `actor_id`");
            anyhow::ensure!(
                t.token.trim().chars().count() >= MIN_TOKEN_CHARS,
                "token #{n} (actor `{}`) is shorter than {MIN_TOKEN_CHARS} characters: use a random one, e.g. \
`openssl rand -hex 32`",
                t.actor_id
            );
            anyhow::ensure!(
                seen.insert(t.token.trim()),
                "token #{n} (actor `{}`) repeats an earlier token",
                t.actor_id
            );
            anyhow::ensure!(
                !t.token.trim().chars().any(|c| c.is_whitespace() || c.is_control()),
                "token #{n} (actor `{}`) contains whitespace or control characters, which no client can send in a \
header",
                t.actor_id
            );
        }
        for host in &self.allowed_hosts {
            anyhow::ensure!(
                !host.is_empty() && !host.chars().any(|c| c == '*' || c == '/' || c.is_whitespace()),
                "allowed_hosts: `{host}` is not a host name or `name:port` (wildcards are not supported)"
            );
        }
        for origin in &self.allowed_origins {
            let rest = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
            anyhow::ensure!(
                rest.is_some_and(|r| !r.is_empty() && !r.contains(['/', ' ']) && !r.starts_with('*')),
                "allowed_origins: `{origin}` is not `http(s)://host[:port]` (`:*` allows any port; no other wildcard)"
            );
        }
        Ok(())
    }
}

/// Everything `serve` needs, resolved.
#[derive(Debug, Clone)]
pub struct ServeSettings {
    pub store: StoreSettings,
    pub fixes: FixMemoryConfig,
    pub near_duplicate_cosine: f32,
    /// `Some` with `--http`.
    pub http: Option<HttpOptions>,
    /// How long calls in flight may run after SIGINT/SIGTERM.
    pub shutdown_grace: Duration,
    /// How long a tool call other than `run_tests` may take (`--tool-timeout`); `None`: no limit.
    pub tool_timeout: Option<Duration>,
    /// How the workspace, project label and test command were chosen.
    pub choice: ProjectChoice,
}

/// How a server's workspace, project label and test command were chosen (docs/settings.md,
/// "Workspace, project and test command"), for its log and for keeping an existing store's label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectChoice {
    /// Where the workspace came from (`--workspace`, the git work tree around the working directory,
    /// …); `None` without a workspace.
    pub workspace: Option<String>,
    /// Where the project label came from.
    pub project: String,
    /// The workspace folder's name, when the label came from the git remote and differs from it: a
    /// store that holds an actor's memories under this label and none under the remote's keeps it
    /// (`app::existing_label`).
    pub folder_label: Option<String>,
}

impl ServeSettings {
    /// Resolves `args` for a server started in the current working directory.
    ///
    /// # Errors
    /// Invalid settings, an unusable `.astra-mcp.toml`, or a `--test-command` with no workspace to run in.
    pub fn resolve(args: &ServeArgs, open: OpenOptions) -> anyhow::Result<Self> {
        Self::resolve_in(args, open, std::env::current_dir().ok().as_deref())
    }

    /// [`Self::resolve`] for a server whose working directory is `cwd`. Without `--workspace`, the
    /// workspace is the one `cwd` is in ([`project::discover`]); the project label is `--project`, else
    /// the workspace's ([`project::project_name`]), else `default`; the test command is
    /// `--test-command`, else the workspace's ([`project::test_command`]).
    ///
    /// # Errors
    /// As [`Self::resolve`].
    pub fn resolve_in(args: &ServeArgs, open: OpenOptions, cwd: Option<&std::path::Path>) -> anyhow::Result<Self> {
        let store = StoreSettings::resolve(&args.store, open)?;
        let (workspace, workspace_source) = match &args.workspace {
            Some(dir) => (
                Some(Workspace::open(dir).context("--workspace (ASTRA_WORKSPACE) must name an existing directory")?),
                Some("--workspace (ASTRA_WORKSPACE)".to_string()),
            ),
            None => match cwd.and_then(project::discover) {
                Some(found) => {
                    (Some(Workspace::open(&found.root).context("opening the workspace")?), Some(found.how.to_string()))
                }
                None => (None, None),
            },
        };
        let file = workspace.as_ref().map(|w| ProjectFile::load(w.root())).transpose()?.flatten();
        let project::ProjectName { label: project, source: project_source, folder_label } =
            choose_project(store.project.as_deref(), workspace.as_ref().map(|w| w.root()), file.as_ref());
        anyhow::ensure!(
            (0.0..=1.0).contains(&args.near_duplicate_cosine),
            "--near-duplicate-cosine (ASTRA_NEAR_DUPLICATE_COSINE) is a cosine similarity between 0 and 1, got {}",
            args.near_duplicate_cosine
        );
        anyhow::ensure!(
            (-1.0..=1.0).contains(&args.min_score),
            "--min-score (ASTRA_MIN_SCORE) is a cosine similarity between -1 and 1, got {}",
            args.min_score
        );
        let test_command = match args.test_command.as_ref().map(|c| c.trim()).filter(|c| !c.is_empty()) {
            Some(command) => {
                anyhow::ensure!(
                    workspace.is_some(),
                    "--test-command (ASTRA_TEST_COMMAND) is set but there is no workspace to run it in: the working \
directory {} is in no git work tree and has no {} or test setup. Pass --workspace DIR (ASTRA_WORKSPACE), or start \
the server in the project directory",
                    cwd.map_or_else(|| "(unknown)".to_string(), |d| d.display().to_string()),
                    project::PROJECT_FILE
                );
                Some(TestCommand::given(command))
            }
            None => workspace.as_ref().and_then(|w| project::test_command(w.root(), file.as_ref())),
        };
        let shown_command = test_command.as_ref().map(|c| crate::memory::redact::redact(&c.command).into_owned());
        tracing::info!(
            workspace = ?workspace.as_ref().map(|w| w.root().to_path_buf()),
            workspace_source = workspace_source.as_deref().unwrap_or("none found"),
            project = %project,
            project_source = %project_source,
            test_command = shown_command.as_deref().unwrap_or("none"),
            test_command_source = test_command.as_ref().map_or("none found", |c| c.source.as_str()),
            "workspace, project and test command"
        );
        let shutdown_grace = Duration::from_secs(args.shutdown_grace);
        let tool_timeout = (args.tool_timeout > 0).then(|| Duration::from_secs(args.tool_timeout));
        let http = match args.http {
            None => None,
            Some(addr) => {
                let file = ConfigFile::load(args.config.as_deref())?;
                anyhow::ensure!(
                    addr.ip().is_loopback() || args.allow_remote,
                    "refusing to listen on {addr}: it is not a loopback address, so other machines could reach \
this memory. Pass --allow-remote (ASTRA_ALLOW_REMOTE) to mean it, and configure bearer tokens in the config file"
                );
                if !addr.ip().is_loopback() && file.tokens.is_empty() {
                    tracing::warn!(
                        "listening on {addr} without bearer tokens: anyone who can reach it reads and writes actor \
`{}`'s memory; add [[tokens]] to the config file",
                        store.actor_id
                    );
                }
                let tokens = file
                    .tokens
                    .iter()
                    .map(|t| {
                        let scope = Scope {
                            actor_id: t.actor_id.trim().to_string(),
                            project: t
                                .project
                                .as_ref()
                                .map(|p| p.trim().to_string())
                                .filter(|p| !p.is_empty())
                                .unwrap_or_else(|| project.clone()),
                        };
                        TokenIdentity::new(t.token.trim(), scope)
                    })
                    .collect();
                Some(HttpOptions {
                    addr,
                    tokens,
                    allowed_hosts: file.allowed_hosts,
                    allowed_origins: file.allowed_origins,
                    grace: shutdown_grace,
                    limits: HttpLimits {
                        max_connections: args.limits.http_max_connections as usize,
                        header_timeout: Duration::from_secs(args.limits.http_header_timeout),
                        body_timeout: Duration::from_secs(args.limits.http_body_timeout),
                        idle_timeout: Duration::from_secs(args.limits.http_idle_timeout),
                        max_sessions: args.limits.http_max_sessions as usize,
                        max_sessions_per_actor: args.limits.http_max_sessions_per_actor as usize,
                        session_idle: Duration::from_secs(args.limits.http_session_idle),
                    },
                    mcp: true,
                    login_code: None,
                })
            }
        };
        Ok(Self {
            http,
            shutdown_grace,
            tool_timeout,
            fixes: FixMemoryConfig {
                scope: Scope { actor_id: store.actor_id.clone(), project },
                workspace,
                test_command,
                test_timeout: Duration::from_secs(args.test_timeout),
                trust_client_outcomes: args.trust_client_outcomes,
                min_score: args.min_score,
            },
            near_duplicate_cosine: args.near_duplicate_cosine,
            store,
            choice: ProjectChoice { workspace: workspace_source, project: project_source, folder_label },
        })
    }
}

/// The project label and where it came from, as every command that defaults one chooses it (docs/settings.md,
/// "Workspace, project and test command"): `given` (`--project`), else the label of the workspace at
/// `root` with its project file `file` ([`project::project_name`]), else [`DEFAULT_PROJECT`].
pub fn choose_project(
    given: Option<&str>,
    root: Option<&std::path::Path>,
    file: Option<&ProjectFile>,
) -> project::ProjectName {
    match (given, root) {
        (Some(project), _) => project::ProjectName {
            label: project.to_string(),
            source: "--project (ASTRA_PROJECT)".to_string(),
            folder_label: None,
        },
        (None, Some(root)) => project::project_name(root, file),
        (None, None) => project::ProjectName {
            label: DEFAULT_PROJECT.to_string(),
            source: "no workspace, so the default label".to_string(),
            folder_label: None,
        },
    }
}

/// Default of `hook claude-code --budget-tokens`.
pub const DEFAULT_HOOK_BUDGET_TOKENS: usize = 1_500;
/// Default of `hook claude-code --timeout-ms`.
pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 10_000;

/// Everything `hook claude-code` needs, resolved: flag > env (clap) > config file `[hooks]` > default.
#[derive(Debug, Clone)]
pub struct HookSettings {
    pub store: StoreSettings,
    /// Most tokens one hook adds to the context.
    pub budget_tokens: usize,
    /// Search memory with each submitted prompt (UserPromptSubmit).
    pub prompt_search: bool,
    /// How long a context hook may take.
    pub timeout: Duration,
    /// The project's test command, besides the known runners.
    pub test_command: Option<String>,
    /// Cosine floor of the fixes a failing test run brings up.
    pub min_score: f32,
}

impl HookSettings {
    /// # Errors
    /// Invalid store settings, an unreadable or invalid config file, or a `[hooks]` value out of range.
    pub fn resolve(args: &crate::cli::HookArgs, open: OpenOptions) -> anyhow::Result<Self> {
        let store = StoreSettings::resolve(&args.store, open)?;
        let file = ConfigFile::load(args.config.as_deref())?.hooks;
        let budget_tokens =
            args.budget_tokens.or(file.budget_tokens).map_or(DEFAULT_HOOK_BUDGET_TOKENS, |b| b as usize);
        anyhow::ensure!(
            (1..=100_000).contains(&budget_tokens),
            "hooks.budget_tokens is {budget_tokens}: give 1 to 100000 tokens"
        );
        let timeout_ms = args.timeout_ms.or(file.timeout_ms).unwrap_or(DEFAULT_HOOK_TIMEOUT_MS);
        anyhow::ensure!((1..=600_000).contains(&timeout_ms), "hooks.timeout_ms is {timeout_ms}: give 1 to 600000 ms");
        anyhow::ensure!(
            (-1.0..=1.0).contains(&args.min_score),
            "--min-score (ASTRA_MIN_SCORE) is a cosine similarity between -1 and 1, got {}",
            args.min_score
        );
        Ok(Self {
            store,
            budget_tokens,
            prompt_search: args.prompt_search.or(file.prompt_search).unwrap_or(false),
            timeout: Duration::from_millis(timeout_ms),
            test_command: args.test_command.as_ref().map(|c| c.trim().to_string()).filter(|c| !c.is_empty()),
            min_score: args.min_score,
        })
    }
}

/// `name` from the environment, else from `.env` in the working directory.
fn env_or_dotenv(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty()).or_else(|| {
        dotenvy::from_path_iter(".env").ok()?.filter_map(Result::ok).find_map(|(k, v)| (k == name).then_some(v))
    })
}

/// The key comes from the environment, else from `.env` in the working directory (never a flag).
fn openai_api_key() -> Option<String> {
    env_or_dotenv(crate::env_vars::OPENAI_API_KEY)
}

/// `<data dir>/astra-mcp`: the default home of the ledger and the runs' evidence.
pub fn data_dir() -> std::path::PathBuf {
    dirs::data_dir().unwrap_or_else(|| ".".into()).join("astra-mcp")
}

/// The Responses API base URL: flag > environment > `.env` > the OpenAI endpoint (a base URL in `.env`
/// must not be ignored while its key is used).
fn base_url(args: &crate::cli::ModelArgs) -> String {
    args.base_url
        .clone()
        .or_else(|| env_or_dotenv(crate::env_vars::OPENAI_BASE_URL))
        .unwrap_or_else(|| "https://api.openai.com/v1".to_string())
}

/// The model API settings of `args`: base URL, key (environment or `.env`), approval, model, prices,
/// ledger and request timeout.
pub fn client_settings(args: &crate::cli::ModelArgs) -> crate::llm::ClientSettings {
    crate::llm::ClientSettings {
        base_url: base_url(args),
        api_key: openai_api_key(),
        approve_live_cost: args.approve_live_cost,
        model: args.model.clone(),
        pricing: crate::llm::Pricing {
            input_per_million_usd: args.input_usd_per_million,
            output_per_million_usd: args.output_usd_per_million,
        },
        ledger: args.ledger.clone().unwrap_or_else(|| data_dir().join("ledger.jsonl")),
        timeout_secs: args.request_timeout,
    }
}
