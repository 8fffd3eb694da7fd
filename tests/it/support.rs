//! Shared fixtures: the embedding model (loaded once per test binary), stores in temp dirs, workspaces
//! copied from the demo projects, and a tool host wired like `serve` wires it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use astra_mcp::domain::Scope;
use astra_mcp::embed::{Embedder, LazyEmbedder, ModelPaths, OnnxEmbedder, Workload};
use astra_mcp::memory::FixMemoryConfig;
use astra_mcp::memory::GateState;
use astra_mcp::memory::core::parse_block_specs;
use astra_mcp::memory::project::TestCommand;
use astra_mcp::memory::workspace::Workspace;
use astra_mcp::store::lance::LanceStore;
use astra_mcp::tools::{JsonObject, ToolHost, ToolOutput};
use serde_json::Value;

/// The repository root. Read at run time (cargo sets it for test runs): the compile-time value can name
/// another checkout when a shared target dir reuses this binary.
pub fn repo() -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()))
}

/// The developers' binary, `astra-mcp-dev` (bench, eval, session-demo, schemas, settings): the workspace's other
/// package, built beside `astra-mcp` by scripts/test (`cargo build --release -p astra-mcp-dev`).
pub fn dev_binary() -> PathBuf {
    let path = std::path::Path::new(env!("CARGO_BIN_EXE_astra-mcp")).with_file_name("astra-mcp-dev");
    assert!(path.is_file(), "{} is missing: run scripts/test, which builds it", path.display());
    path
}

/// The cache `scripts/setup` fills (honours ASTRA_CACHE_DIR like the binary does).
pub fn cache_dir() -> PathBuf {
    ModelPaths::default_cache_dir()
}

/// The real model, loaded once for the whole test binary.
pub fn embedder() -> LazyEmbedder {
    static MODEL: OnceLock<Arc<dyn Embedder>> = OnceLock::new();
    let model = MODEL.get_or_init(|| {
        let paths = ModelPaths::in_cache(&cache_dir());
        Arc::new(
            OnnxEmbedder::load(&paths, Workload::Interactive)
                .unwrap_or_else(|e| panic!("{e} (run scripts/setup before the tests)")),
        )
    });
    LazyEmbedder::ready(model.clone())
}

/// Python of the tooling venv (pytest, the MCP SDK).
pub fn venv_python() -> PathBuf {
    let python = cache_dir().join("venv/bin/python");
    assert!(python.exists(), "{} is missing: run scripts/setup", python.display());
    python
}

/// The test command the demo uses: pytest from the tooling venv, without a cache dir.
pub fn pytest_command() -> String {
    format!("{} -m pytest -q -p no:cacheprovider", venv_python().display())
}

/// A fresh copy of `demo_projects/<name>` in a temp dir; returns (guard, path of the copy).
pub fn scenario(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join(name);
    copy_tree(&repo().join("demo_projects").join(name), &dest);
    (dir, dest)
}

/// Copies the reference fix of `name` over the workspace (stands in for an agent's edit).
pub fn apply_reference_fix(name: &str, workspace: &Path) -> Vec<String> {
    let source = repo().join("scripts/reference_fixes").join(name);
    let mut changed = Vec::new();
    for entry in walk(&source) {
        let rel = entry.strip_prefix(&source).unwrap();
        std::fs::copy(&entry, workspace.join(rel)).unwrap();
        changed.push(rel.to_string_lossy().into_owned());
    }
    changed
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
    }
    out.sort();
    out
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

/// Settings like `serve` resolves them.
pub fn config(actor: &str, project: &str, workspace: Option<&Path>, test_command: Option<&str>) -> FixMemoryConfig {
    FixMemoryConfig {
        scope: Scope { actor_id: actor.into(), project: project.into() },
        workspace: workspace.map(|w| Workspace::open(w).unwrap()),
        test_command: test_command.map(TestCommand::given),
        test_timeout: Duration::from_secs(120),
        trust_client_outcomes: false,
        min_score: 0.10,
    }
}

/// A tool host over a store at `db` with the real model, wired like `serve` (default core blocks,
/// near-duplicate cosine 0.95).
pub async fn host(db: &Path, config: FixMemoryConfig) -> ToolHost {
    host_with_blocks(db, config, None).await
}

/// [`host`] with extra core blocks (`--core-blocks` syntax).
pub async fn host_with_blocks(db: &Path, config: FixMemoryConfig, blocks: Option<&str>) -> ToolHost {
    let store = LanceStore::open(db.to_str().unwrap()).await.unwrap();
    let blocks = parse_block_specs(blocks).unwrap();
    ToolHost::new(astra_mcp::app::memories(
        std::sync::Arc::new(store),
        embedder(),
        config,
        blocks,
        0.95,
        astra_mcp::memory::uses::Expiry::days(astra_mcp::memory::uses::DEFAULT_EXPIRE_AFTER_DAYS),
    ))
}

/// `json!({...})` as tool arguments.
pub fn args(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("arguments must be an object, got {other}"),
    }
}

/// Calls `tool` with `arguments` as the MCP dispatcher does; panics only on a dispatch failure.
pub async fn call(host: &ToolHost, session: &GateState, tool: &str, arguments: Value) -> ToolOutput {
    host.call(session, tool, args(arguments)).await.unwrap()
}

/// The `structuredContent` of a successful tool result, as `T`.
pub fn structured<T: serde::de::DeserializeOwned>(out: &ToolOutput) -> T {
    assert!(!out.is_error, "tool error: {}", out.text);
    serde_json::from_value(out.structured.clone().expect("structuredContent")).unwrap()
}

/// A shell test command for a workspace holding `app.txt`: passes when the file says `fixed`, else
/// fails like pytest with one failing test.
pub const SHELL_TESTS: &str = "if grep -q fixed app.txt; then echo '1 passed in 0.01s'; else \
echo 'FAILED tests/test_app.py::test_app_is_fixed - AssertionError: app.txt says broken'; \
echo '1 failed in 0.01s'; exit 1; fi";

/// A workspace with a broken `app.txt` and `notes.txt`.
pub fn shell_workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("app.txt"), "broken\n").unwrap();
    std::fs::write(dir.path().join("notes.txt"), "notes\n").unwrap();
    dir
}

/// A running `astra-mcp serve --http 127.0.0.1:0 …` (the binary under test); killed on drop.
pub struct HttpServer {
    pub child: std::process::Child,
    /// The streamable HTTP endpoint, `http://127.0.0.1:PORT/mcp` (the first line the server prints).
    pub url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl HttpServer {
    /// Starts the server on a free port over the store at `db`, with `extra` flags.
    pub fn start(db: &Path, extra: &[&str]) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"))
            .args(["serve", "--http", "127.0.0.1:0", "--db"])
            .arg(db)
            .args(extra)
            .env("ASTRA_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let url = line.trim().to_string();
        assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/mcp"), "first stdout line: {line:?}");
        Self { child, url }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> &str {
        self.url.strip_suffix("/mcp").unwrap()
    }

    /// The legacy SSE endpoint.
    pub fn sse_url(&self) -> String {
        format!("{}/sse", self.base())
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }
}

/// Runs an interop client script and returns the JSON object of its last stdout line, failing with its
/// output when it exits non-zero or reports `ok: false`.
pub fn run_client(command: &mut std::process::Command) -> Value {
    let output = command.output().unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{command:?} failed\nstdout: {stdout}\nstderr: {stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    let seen: Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {stdout}"));
    assert_eq!(seen["ok"], true, "{seen}\nstderr: {stderr}");
    // the counts and timings, for `--nocapture` (BENCHMARKS.md cites some of them)
    eprintln!("{last}");
    seen
}

/// One answer of the mock model, built from the request it answers.
pub type ModelStep = Box<dyn Fn(&Value) -> wiremock::ResponseTemplate + Send + Sync>;

/// A local mock of the Responses API (wiremock on `POST /v1/responses`): it plays `steps` in order, one
/// per request (a 400 once they run out), and records every request body so tests can assert them.
pub struct MockModel {
    pub server: wiremock::MockServer,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    authorizations: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

struct Script {
    steps: Vec<ModelStep>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    authorizations: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl wiremock::Respond for Script {
    fn respond(&self, request: &wiremock::Request) -> wiremock::ResponseTemplate {
        let body: Value = serde_json::from_slice(&request.body).expect("requests are JSON");
        let authorization = request.headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
        self.authorizations.lock().unwrap().push(authorization.to_string());
        let mut seen = self.seen.lock().unwrap();
        let step = seen.len();
        seen.push(body.clone());
        match self.steps.get(step) {
            Some(play) => play(&body),
            // a client error, which the client does not retry
            None => wiremock::ResponseTemplate::new(400)
                .set_body_json(serde_json::json!({"error": {"message": "script exhausted"}})),
        }
    }
}

impl MockModel {
    pub async fn start(steps: Vec<ModelStep>) -> Self {
        use wiremock::matchers::{method, path};
        let server = wiremock::MockServer::start().await;
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let authorizations = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        wiremock::Mock::given(method("POST"))
            .and(path("/v1/responses"))
            .respond_with(Script { steps, seen: seen.clone(), authorizations: authorizations.clone() })
            .mount(&server)
            .await;
        Self { server, seen, authorizations }
    }

    /// The `Authorization` header of every request, in order.
    pub fn authorizations(&self) -> Vec<String> {
        self.authorizations.lock().unwrap().clone()
    }

    /// Every request body received so far, in order.
    pub fn requests(&self) -> Vec<Value> {
        self.seen.lock().unwrap().clone()
    }

    /// The base URL to configure (`…/v1`).
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.server.uri())
    }
}

/// Does a live (not zombie) process of process group `pgid` still exist? Reads /proc (Linux).
pub fn group_alive(pgid: i32) -> bool {
    std::fs::read_dir("/proc").unwrap().filter_map(Result::ok).any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
        // fields after the parenthesised command: state ppid pgrp ...
        let Some((_, rest)) = stat.rsplit_once(") ") else { return false };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
    })
}

/// The model API settings of a test run against the mock at `base_url`: approved, a key, ledger in `dir`.
pub fn client_settings(base_url: String, dir: &Path) -> astra_mcp::llm::ClientSettings {
    astra_mcp::llm::ClientSettings {
        base_url,
        api_key: Some("sk-test-key".into()),
        approve_live_cost: true,
        model: "gpt-6-astra".into(),
        pricing: astra_mcp::llm::Pricing { input_per_million_usd: 10.0, output_per_million_usd: 50.0 },
        ledger: dir.join("ledger.jsonl"),
        timeout_secs: 30,
    }
}

/// A running S3-compatible server on loopback (`tests/s3-server`: s3s-fs with atomic conditional
/// writes), over its own temp dir, with one bucket `BUCKET`; killed on drop. `scripts/test` builds it
/// and names it in `ASTRA_S3_TEST_SERVER`.
pub struct S3Server {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    pub root: tempfile::TempDir,
    ignore_conditional_writes: bool,
}

impl S3Server {
    /// The one bucket every test server has.
    pub const BUCKET: &'static str = "astra";
    /// The one account's access key id and secret (requests are signed, as on AWS).
    pub const ACCESS_KEY: &'static str = "astra-test";
    pub const SECRET_KEY: &'static str = "astra-test-secret";

    /// Starts a server that honours conditional writes.
    pub fn start() -> Self {
        Self::spawn(tempfile::tempdir().unwrap(), "127.0.0.1:0", false)
    }

    /// Starts a server that accepts a conditional write and ignores its condition.
    pub fn start_ignoring_conditional_writes() -> Self {
        Self::spawn(tempfile::tempdir().unwrap(), "127.0.0.1:0", true)
    }

    fn spawn(root: tempfile::TempDir, listen: &str, ignore_conditional_writes: bool) -> Self {
        std::fs::create_dir_all(root.path().join(Self::BUCKET)).unwrap();
        let (child, endpoint) = Self::spawn_child(root.path(), listen, ignore_conditional_writes);
        Self { child, endpoint, root, ignore_conditional_writes }
    }

    fn spawn_child(root: &Path, listen: &str, ignore_conditional_writes: bool) -> (std::process::Child, String) {
        use std::io::BufRead;
        let binary = std::env::var_os("ASTRA_S3_TEST_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| cache_dir().join("s3-server-target/release/astra-s3-test-server"));
        assert!(binary.exists(), "{} is missing: run scripts/test (it builds tests/s3-server)", binary.display());
        let mut command = std::process::Command::new(binary);
        command.arg("--listen").arg(listen).arg(root);
        if ignore_conditional_writes {
            command.arg("--ignore-conditional-writes");
        } else {
            command.args(["--access-key", Self::ACCESS_KEY, "--secret-key", Self::SECRET_KEY]);
        }
        let mut child = command.stdout(std::process::Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let endpoint = line.trim().strip_prefix("listening on ").unwrap_or_else(|| panic!("{line:?}")).to_string();
        (child, endpoint)
    }

    /// Kills the server (SIGKILL) and starts it again on the same port over the same files.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let listen = self.endpoint.strip_prefix("http://").unwrap().to_string();
        // the port may take a moment to be free again
        for _ in 0..50 {
            if std::net::TcpListener::bind(&listen).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let (child, endpoint) = Self::spawn_child(self.root.path(), &listen, self.ignore_conditional_writes);
        assert_eq!(endpoint, self.endpoint);
        self.child = child;
    }

    /// Stops the server (SIGSTOP): the kernel still accepts connections, nothing answers them, as
    /// with an object store that froze. [`Self::resume`] lets it go on.
    pub fn pause(&self) {
        // SAFETY: kill(2) on our own child's pid, with a valid signal number
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGSTOP) }, 0);
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        // SAFETY: as in `pause`
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGCONT) }, 0);
    }

    /// A store URI in the bucket: `s3://astra/<name>`.
    pub fn uri(&self, name: &str) -> String {
        format!("s3://{}/{name}", Self::BUCKET)
    }

    /// The environment a client of this server needs: the AWS SDK's standard variables, with the
    /// endpoint override and plain HTTP allowed; unsigned requests for a server that ignores
    /// conditional writes (a signature would cover the headers it drops).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", Self::ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", Self::SECRET_KEY.into()),
        ];
        if self.ignore_conditional_writes {
            env.push(("AWS_SKIP_SIGNATURE", "true".into()));
        }
        env
    }

    /// An object_store client of the bucket, the library Lance commits through.
    pub fn client(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(Self::BUCKET)
            .with_access_key_id(Self::ACCESS_KEY)
            .with_secret_access_key(Self::SECRET_KEY)
            .with_skip_signature(self.ignore_conditional_writes)
            .build()
            .unwrap()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Installs the wheel `scripts/test` built (`$ASTRA_TEST_WHEEL`, from `scripts/wheel`) the way the README
/// tells users to, `uv tool install <wheel>` (uv pinned in the tooling venv), into the fresh home `home`,
/// offline. Returns the directory uv links the tool's executables into (`<home>/.local/bin`), which
/// holds `astra-mcp`.
pub fn install_wheel(home: &Path) -> PathBuf {
    let wheel = std::env::var_os("ASTRA_TEST_WHEEL")
        .map(PathBuf::from)
        .expect("ASTRA_TEST_WHEEL is not set: run the tests with scripts/test, which builds the wheel (scripts/wheel)");
    assert!(wheel.is_file(), "ASTRA_TEST_WHEEL={} is not a file: run scripts/test", wheel.display());
    let uv = cache_dir().join("venv/bin/uv");
    let mut command = std::process::Command::new(&uv);
    let output = in_fresh_home(&mut command, home)
        .args(["tool", "install", "--offline", "--no-config"])
        .arg(&wheel)
        // the interpreter of the tool's venv: the one this machine's tooling venv is made from
        .env("UV_PYTHON", venv_python().canonicalize().unwrap())
        // one uv cache for every install of this run (scripts/test empties it first): the wheel is
        // unpacked once, not once per test, which would load the machine while other tests time calls
        .env("UV_CACHE_DIR", std::env::var_os("ASTRA_TEST_UV_CACHE").map_or(home.join(".cache/uv"), PathBuf::from))
        .env("UV_PYTHON_DOWNLOADS", "never")
        .env_remove("VIRTUAL_ENV")
        .output()
        .unwrap_or_else(|e| panic!("{} did not start ({e}): run scripts/setup", uv.display()));
    assert!(
        output.status.success(),
        "uv tool install {} failed\nstdout: {}\nstderr: {}",
        wheel.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let bin = home.join(".local/bin");
    assert!(bin.join("astra-mcp").exists(), "uv installed no astra-mcp into {}", bin.display());
    bin
}

/// `command` as a new user with the home `home` runs it: `HOME`, the XDG directories and uv's cache under
/// it, and none of the variables that point the binary at this machine's provisioned files or store
/// (`ASTRA_CACHE_DIR`, `ASTRA_MODEL_DIR`, `ORT_DYLIB_PATH`, `ASTRA_DB`, `ASTRA_ACTOR`, …), so a test cannot
/// pass by finding them.
pub fn in_fresh_home<'a>(command: &'a mut std::process::Command, home: &Path) -> &'a mut std::process::Command {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("ASTRA_") || key.starts_with("ORT_") || key.starts_with("XDG_") || key.starts_with("UV_") {
            command.env_remove(&*key);
        }
    }
    command
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("UV_CACHE_DIR", home.join(".cache/uv"))
}
