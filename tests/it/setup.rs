//! `astra-mcp setup claude-code|codex` through the real, pinned clients (`tests/clients`): a fresh HOME,
//! `astra-mcp` installed into it the way the wheel install puts it there (`support::install_wheel`), the
//! wiring command run exactly as docs/clients.md shows it, then the client itself in a small git project
//! with a failing test, driven by the scripted model (`tests/clients/scripted_model.py`). The project has
//! no settings of its own and the server no flags: what reaches the model comes from the user-wide plugin
//! alone. Checked on what the client sent the model: the SessionStart context in the first request, the
//! fix a failing test run brings up in the request after the run, and a `search_codebase_memory` result
//! in the request after the search.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::hooks::{ALPHA_FIX, ScriptedModel, claude_binary, conversation_items, store_with_fix_and_core_memory_of};
use crate::support::{install_wheel, pytest_command, repo, scenario};

/// The fenced block right after `<!-- test: NAME -->` in `docs/FILE`: the tests run what the docs show.
fn documented_block(file: &str, name: &str) -> String {
    let text = std::fs::read_to_string(repo().join("docs").join(file)).unwrap();
    let marker = format!("<!-- test: {name} -->");
    let after = &text[text.find(&marker).unwrap_or_else(|| panic!("docs/{file} has no {marker}")) + marker.len()..];
    let body = &after[after.find("```").unwrap()..];
    let body = &body[body.find('\n').unwrap() + 1..];
    body[..body.find("```").unwrap()].to_string()
}

/// A user's fresh HOME with astra-mcp installed in it, and the `PATH` of their shell: the install's bin
/// directory, then a directory holding the pinned `claude` and `codex`, then the system's.
struct Home {
    dir: tempfile::TempDir,
    path: String,
}

impl Home {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let bin = install_wheel(&home);
        let clients = dir.path().join("clients-bin");
        std::fs::create_dir_all(&clients).unwrap();
        let codex = repo().join("tests/clients/node_modules/.bin/codex");
        assert!(codex.exists(), "{} is missing: run scripts/setup", codex.display());
        std::os::unix::fs::symlink(claude_binary(), clients.join("claude")).unwrap();
        std::os::unix::fs::symlink(codex, clients.join("codex")).unwrap();
        let path = format!("{}:{}:{}", bin.display(), clients.display(), std::env::var("PATH").unwrap_or_default());
        Self { dir, path }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    /// The default store, where every command run in this HOME without `--db` looks.
    fn db(&self) -> PathBuf {
        self.home().join(".local/share/astra-mcp/db")
    }

    /// Where `setup` writes the plugin marketplace.
    fn marketplace(&self) -> PathBuf {
        self.home().join(".local/share/astra-mcp/marketplace")
    }

    /// `program` as the user would run it: this HOME and PATH, none of the developer's client or astra-mcp
    /// settings, no nonessential traffic.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        for (key, _) in std::env::vars() {
            if ["ANTHROPIC_", "CLAUDE", "CODEX", "OPENAI_", "ASTRA_", "XDG_"].iter().any(|p| key.starts_with(p)) {
                cmd.env_remove(key);
            }
        }
        cmd.env("HOME", self.home())
            .env("PATH", &self.path)
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .current_dir(self.home())
            .stdin(std::process::Stdio::null());
        cmd
    }

    /// Runs `line` with `sh -c`; returns its stdout, failing with its output unless it exits 0.
    fn sh(&self, line: &str) -> String {
        let out = self.command("sh").arg("-c").arg(line).output().unwrap();
        assert!(out.status.success(), "`{line}` exited {:?}\n{}", out.status.code(), text(&out));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs every command line of the block marked `name` in docs/clients.md; returns their stdout.
    fn run_documented(&self, name: &str) -> String {
        let block = documented_block("clients.md", name);
        let lines: Vec<&str> = block.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
        assert!(!lines.is_empty(), "the block {name} has no command");
        lines.iter().map(|line| self.sh(line)).collect()
    }
}

fn text(out: &Output) -> String {
    format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// A copy of scenario_alpha (its tests fail) committed to a fresh git repository.
fn git_project() -> (tempfile::TempDir, PathBuf) {
    let (guard, workspace) = scenario("scenario_alpha");
    let commit = ["-c", "user.name=Test", "-c", "user.email=test@example.com", "commit", "-qm", "start"];
    for args in [&["init", "-q"][..], &["add", "-A"], &commit] {
        let status = Command::new("git").args(args).current_dir(&workspace).status().unwrap();
        assert!(status.success(), "git {args:?}");
    }
    (guard, workspace)
}

/// The tool result a request carries for the call `id`: a Messages API `tool_result` block or a Responses
/// API `*_call_output` item, as JSON text.
fn tool_result(request: &Value, id: &str) -> Option<String> {
    match request {
        Value::Object(map) => {
            let kind = map.get("type").and_then(Value::as_str).unwrap_or_default();
            let answers = (kind == "tool_result" && map.get("tool_use_id") == Some(&json!(id)))
                || (kind.ends_with("_call_output") && map.get("call_id") == Some(&json!(id)));
            if answers {
                return Some(map.get("content").or(map.get("output")).map(Value::to_string).unwrap_or_default());
            }
            map.values().find_map(|v| tool_result(v, id))
        }
        Value::Array(items) => items.iter().find_map(|v| tool_result(v, id)),
        _ => None,
    }
}

/// The client `name` (its output `out`) played `model`'s four moves (a failing test run, the tool search,
/// `search_codebase_memory`, an answer), and its requests held what the plugin delivers: the SessionStart
/// context (the core block, the recent fix) in the first, the fix the failing run brought up in the
/// second, the search's match in the one after the search.
fn assert_memory_delivered(name: &str, out: &Output, model: &ScriptedModel) {
    assert!(out.status.success(), "{name} exited {:?}: {}", out.status.code(), text(out));
    let records = model.main_records();
    assert_eq!(records.len(), 4, "one request per move: {name}: {}", text(out));
    let first = records[0]["body"].to_string();
    assert!(first.contains("astra-mcp memory for this session"), "SessionStart context in the first request");
    assert!(first.contains("Ann wants every fix verified"), "the core block in the first request");
    assert!(first.contains("Recent fix 1") && first.contains(ALPHA_FIX), "the recent fix in the first request");
    assert!(!first.contains("Match 1 (fused_score="), "no test has run yet");
    let second = records[1]["body"].to_string();
    assert!(second.contains("verified fixes from memory that match the failing tests"), "{second}");
    assert!(second.contains("Match 1 (fused_score=") && second.contains(ALPHA_FIX), "the fix after the failing run");
    let call = records[2]["call_id"].as_str().expect("the search move made a call");
    let found = tool_result(&records[3]["body"], call).expect("the search result came back to the model");
    assert!(found.contains("fix_description") && found.contains(ALPHA_FIX), "our match in the result: {found}");
}

/// The query the scripted model searches with: the symptom, in other words than the fix's.
const SEARCH: &str = "the second allowed CORS origin is rejected: comma-separated ALLOWED_ORIGINS keep a leading space";

/// `astra-mcp setup claude-code`, as docs/clients.md shows it, in a fresh HOME: `--dry-run` changes nothing,
/// a second run changes nothing, and the next Claude Code session in any project gets the SessionStart
/// context, the fix after its failing test run, and our server's search result; the Stop and SessionEnd
/// hooks import the session. Everything at its default: the store, the actor (`local`), the server's flags.
#[tokio::test]
async fn setup_claude_code_wires_the_server_and_the_hooks_for_every_project() {
    let home = Home::new();
    let settings = home.home().join(".claude/settings.json");
    let dry = home.sh("astra-mcp setup claude-code --dry-run");
    let marketplace = home.marketplace();
    assert!(dry.contains(&format!("would run: claude plugin marketplace add {}", marketplace.display())), "{dry}");
    assert!(dry.contains("would run: claude plugin install astra-mcp@astra-mcp"), "{dry}");
    assert!(
        dry.contains(&format!("would write {} (new)", marketplace.join(".claude-plugin/marketplace.json").display()))
    );
    assert!(!marketplace.exists() && !settings.exists(), "--dry-run wrote nothing");

    home.run_documented("setup-claude-code");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    assert_eq!(written["enabledPlugins"]["astra-mcp@astra-mcp"], json!(true), "{written}");
    assert_eq!(
        written["extraKnownMarketplaces"]["astra-mcp"]["source"],
        json!({"source": "directory", "path": marketplace}),
        "{written}"
    );
    // Claude Code rewrites its settings on each `plugin` command, its keys in an order of its own: the
    // same settings are the same JSON object, not the same bytes
    let read_settings = || serde_json::from_str::<Value>(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    let before = read_settings();
    let again = home.run_documented("setup-claude-code");
    assert!(again.contains("(0 of 8 files written)"), "{again}");
    assert_eq!(read_settings(), before, "a second run changes nothing");
    assert!(home.sh("astra-mcp setup claude-code --dry-run").contains("(unchanged)"));

    // memory from an earlier session, in the default store of the default actor
    let _stored = store_with_fix_and_core_memory_of(&home.db(), "local").await;
    let (_project, workspace) = git_project();
    let work = tempfile::tempdir().unwrap();
    let tool = "mcp__plugin_astra-mcp_astra__search_codebase_memory";
    let model = ScriptedModel::start(
        work.path(),
        "anthropic",
        &json!([
            {"tool": "Bash", "args": {"command": pytest_command(), "description": "Run the tests"}},
            {"tool": "ToolSearch", "args": {"query": format!("select:{tool}")}},
            {"tool": tool, "args": {"query": SEARCH, "error_type": null, "top_k": 3}},
            {"text": "Memory has a verified fix for this failure."}
        ]),
    );
    let out = home
        .command("claude")
        .args([
            "-p",
            "Run the tests.",
            "--output-format",
            "json",
            "--allowedTools",
            "Bash",
            "mcp__plugin_astra-mcp_astra",
        ])
        .current_dir(&workspace)
        .env("ANTHROPIC_BASE_URL", &model.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-api03-scriptedFAKEkey0123456789abcdefABCDEF")
        .output()
        .unwrap();
    assert_memory_delivered("claude -p", &out, &model);
    let items = conversation_items(&home.db(), "local");
    assert!(items.contains("Run the tests.") && items.contains("Memory has a verified fix"), "imported: {items}");

    // the documented undo leaves no trace of the plugin in Claude Code's settings
    home.run_documented("undo-claude-code");
    let undone = std::fs::read_to_string(&settings).unwrap();
    assert!(!undone.contains("astra-mcp"), "{undone}");
}

/// `astra-mcp setup codex`, as docs/clients.md shows it, in a fresh HOME whose `~/.codex/config.toml`
/// already holds the user's model settings: setup keeps them, a second run changes nothing, and the next
/// `codex exec` in any project gets the SessionStart context, the fix after its failing test run, and our
/// server's search result; the Stop hook imports the session. The actor is set the way a user sets it,
/// `ASTRA_ACTOR` in the shell: the hooks inherit it and the plugin forwards it to the server (Codex starts
/// servers with a reduced environment). Codex runs hooks only once trusted (`/hooks` in its TUI); a test has
/// no TUI, so it passes `--dangerously-bypass-hook-trust`, which Codex offers for automation.
#[tokio::test]
async fn setup_codex_wires_the_server_and_the_hooks_for_every_project() {
    let home = Home::new();
    let work = tempfile::tempdir().unwrap();
    let model = ScriptedModel::start(
        work.path(),
        "openai",
        &json!([
            {"tool": "exec_command", "args": {"cmd": pytest_command(), "yield_time_ms": 30000}},
            {"tool": "tool_search", "args": {"query": "astra fix memory search", "limit": 20}},
            {"tool": "search_codebase_memory", "namespace": "mcp__astra",
             "args": {"query": SEARCH, "error_type": null, "top_k": 3}},
            {"text": "Memory has a verified fix for this failure."}
        ]),
    );
    let config = home.home().join(".codex/config.toml");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let user_config = format!(
        "model = \"gpt-5.5\"\nmodel_provider = \"scripted\"\napproval_policy = \"never\"\n\
         sandbox_mode = \"danger-full-access\"\n\n[model_providers.scripted]\nname = \"scripted\"\n\
         base_url = \"{}/v1\"\nwire_api = \"responses\"\nenv_key = \"OPENAI_API_KEY\"\n",
        model.url
    );
    std::fs::write(&config, &user_config).unwrap();

    home.run_documented("setup-codex");
    let written: toml::Table = toml::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let user: toml::Table = toml::from_str(&user_config).unwrap();
    for (key, value) in &user {
        assert_eq!(written.get(key), Some(value), "setup kept the user's `{key}`");
    }
    assert_eq!(written["plugins"]["astra-mcp@astra-mcp"]["enabled"].as_bool(), Some(true), "{written}");
    assert_eq!(
        written["marketplaces"]["astra-mcp"]["source"].as_str(),
        Some(home.marketplace().to_str().unwrap()),
        "{written}"
    );
    let before = std::fs::read(&config).unwrap();
    let again = home.run_documented("setup-codex");
    assert!(again.contains("(0 of 8 files written)"), "{again}");
    assert_eq!(std::fs::read(&config).unwrap(), before, "a second run changes nothing");

    let _stored = store_with_fix_and_core_memory_of(&home.db(), "ann").await;
    let (_project, workspace) = git_project();
    let out = home
        .command("codex")
        .args(["exec", "--dangerously-bypass-hook-trust", "Run the tests."])
        .current_dir(&workspace)
        .env("OPENAI_API_KEY", "sk-proj-scriptedFAKEkey0123456789abcdefABCDEF")
        .env("ASTRA_ACTOR", "ann")
        .output()
        .unwrap();
    assert_memory_delivered("codex exec", &out, &model);
    let items = conversation_items(&home.db(), "ann");
    assert!(items.contains("Run the tests.") && items.contains("Memory has a verified fix"), "imported: {items}");

    // the documented undo gives back the user's config and removes Codex's copy of the plugin
    home.run_documented("undo-codex");
    let undone = std::fs::read_to_string(&config).unwrap();
    assert!(!undone.contains("astra-mcp"), "{undone}");
    let undone: toml::Table = toml::from_str(&undone).unwrap();
    for (key, value) in &user {
        assert_eq!(undone.get(key), Some(value), "the user's `{key}` is left");
    }
    assert!(!home.home().join(".codex/plugins/cache/astra-mcp/astra-mcp").exists());
}

/// Without `astra-mcp` on PATH the plugin could not start it: `setup` says so and changes nothing.
#[test]
fn setup_refuses_when_astra_mcp_is_not_on_path() {
    let home = Home::new();
    let out = home
        .command(env!("CARGO_BIN_EXE_astra-mcp"))
        .args(["setup", "claude-code"])
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`astra-mcp` is not on PATH") && stderr.contains("uv tool install astra-mcp"), "{stderr}");
    assert!(!home.marketplace().exists() && !home.home().join(".claude").exists());
}

/// The plugin in this repository (the marketplace `setup` writes and a clone can add directly) carries the
/// hook blocks docs/hooks.md documents, starts the server without per-project flags, has this crate's
/// version, and passes Claude Code's own validation.
#[test]
fn the_plugin_carries_the_documented_hooks_and_this_version() {
    let plugin = repo().join("plugins/astra-mcp");
    let json = |path: &Path| -> Value { serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap() };
    let block = |name: &str| -> Value { serde_json::from_str(&documented_block("hooks.md", name)).unwrap() };
    assert_eq!(json(&plugin.join("hooks/hooks.json")), block("claude-code-hooks"));
    assert_eq!(json(&plugin.join("hooks/codex.json")), block("codex-hooks"));
    for manifest in [".claude-plugin/plugin.json", ".codex-plugin/plugin.json"] {
        assert_eq!(json(&plugin.join(manifest))["version"], json!(env!("CARGO_PKG_VERSION")), "{manifest}");
    }
    for servers in [".mcp.json", "codex.mcp.json"] {
        let astra = &json(&plugin.join(servers))["mcpServers"]["astra"];
        assert_eq!(
            (&astra["command"], &astra["args"]),
            (&json!("astra-mcp"), &json!(["serve", "--stdio"])),
            "{servers}"
        );
    }
    let home = Home::new();
    for target in [repo(), plugin] {
        let out = home.command("claude").args(["plugin", "validate"]).arg(&target).output().unwrap();
        assert!(out.status.success(), "claude plugin validate {}: {}", target.display(), text(&out));
    }
}

/// Without the client's command on PATH (an empty directory besides `astra-mcp`'s), `setup` says so
/// before anything else: `--dry-run` in its first line, exiting 1; the real run fails before it writes a
/// file.
#[test]
fn setup_refuses_when_the_client_is_not_on_path() {
    let dir = tempfile::tempdir().unwrap();
    let (home, bin, empty) = (dir.path().join("home"), dir.path().join("bin"), dir.path().join("empty"));
    for d in [&home, &bin, &empty] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_astra-mcp"), bin.join("astra-mcp")).unwrap();
    let setup = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_astra-mcp"));
        crate::support::in_fresh_home(&mut cmd, &home)
            .arg("setup")
            .args(args)
            .env("PATH", format!("{}:{}", bin.display(), empty.display()))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    for (client, program) in [("claude-code", "claude"), ("codex", "codex")] {
        let dry = setup(&[client, "--dry-run"]);
        assert_eq!(dry.status.code(), Some(1), "{}", text(&dry));
        let stdout = String::from_utf8_lossy(&dry.stdout);
        let first = stdout.lines().next().unwrap_or_default();
        assert!(first.starts_with(&format!("would fail: `{program}` is not on PATH: install ")), "{stdout}");
        assert!(stdout.contains(&format!("would run: {program} plugin marketplace add ")), "the plan still: {stdout}");

        let real = setup(&[client]);
        assert_eq!(real.status.code(), Some(1), "{}", text(&real));
        let stderr = String::from_utf8_lossy(&real.stderr);
        assert!(stderr.contains(&format!("`{program}` is not on PATH")), "{stderr}");
        assert!(!String::from_utf8_lossy(&real.stdout).contains("marketplace:"), "{}", text(&real));
        assert!(!home.join(".local/share/astra-mcp").exists(), "{client}: nothing written");
    }
}
