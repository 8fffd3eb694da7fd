//! A user-wide server with no per-project flags, as Claude Code and Codex start it: the real binary over
//! stdio (rmcp's child-process client) started in a project directory. The workspace is the git work
//! tree around it, the project label comes from the git remote (one label for every clone and
//! worktree, an existing store keeps its folder label), the test command from `.astra-mcp.toml` or
//! detection, and `run_tests` says which command it chose and why. The hooks find the same project.

use std::path::{Path, PathBuf};

use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::{Value, json};

use crate::support::{SHELL_TESTS, args, venv_python};

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

/// Settings of the developer's environment that would stand in for the ones found here.
const LEAKY_ENV: &[&str] = &["ASTRA_WORKSPACE", "ASTRA_TEST_COMMAND", "ASTRA_PROJECT", "ASTRA_CONFIG", "ASTRA_ACTOR"];

fn git(dir: &Path, args: &[&str]) {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A git repository `parent/name` with remote `origin` at `remote` (none when `None`): a broken
/// `app.txt`, its tests in `check.sh` (pytest-like output) and a Makefile whose `test` target runs them.
fn project(parent: &Path, name: &str, remote: Option<&str>) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(dir.join("app.txt"), "broken\n").unwrap();
    std::fs::write(dir.join("src/notes.txt"), "notes\n").unwrap();
    std::fs::write(dir.join("check.sh"), SHELL_TESTS).unwrap();
    std::fs::write(dir.join("Makefile"), "test:\n\t@sh check.sh\n").unwrap();
    git(&dir, &["init", "-q"]);
    if let Some(remote) = remote {
        git(&dir, &["remote", "add", "origin", remote]);
    }
    dir
}

/// `serve --stdio --db db` plus `extra`, started in `cwd` with no other setting, as a client starts a
/// user-wide server; `env` is added to its environment.
async fn serve_in(cwd: &Path, db: &Path, extra: &[&str], env: &[(&str, String)]) -> RunningService<RoleClient, ()> {
    let command = server_command(cwd, db, extra, env);
    let transport = TokioChildProcess::new(command).unwrap();
    ().serve(transport).await.expect("the server answers initialize")
}

fn server_command(cwd: &Path, db: &Path, extra: &[&str], env: &[(&str, String)]) -> tokio::process::Command {
    tokio::process::Command::new(BIN).configure(|cmd| {
        cmd.args(["serve", "--stdio", "--db"]).arg(db).args(extra).current_dir(cwd).env("ASTRA_LOG", "warn");
        for var in LEAKY_ENV {
            cmd.env_remove(var);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
    })
}

async fn call(client: &RunningService<RoleClient, ()>, tool: &str, arguments: Value) -> CallToolResult {
    client.call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(args(arguments))).await.unwrap()
}

fn text(result: &CallToolResult) -> String {
    result.content[0].as_text().unwrap().text.clone()
}

/// The structured content of a successful call.
fn ok(result: &CallToolResult) -> Value {
    assert_ne!(result.is_error, Some(true), "tool error: {}", text(result));
    result.structured_content.clone().expect("structuredContent")
}

/// The project label a server started in `cwd` files memories under (an archival passage says).
async fn label_in(cwd: &Path, db: &Path, extra: &[&str]) -> String {
    let client = serve_in(cwd, db, extra, &[]).await;
    let passage = format!("label probe {}", uuid::Uuid::new_v4());
    let out = ok(&call(&client, "archival_memory_insert", json!({"text": passage})).await);
    client.cancel().await.unwrap();
    out["project"].as_str().unwrap().to_string()
}

/// search, failing run, the edit, passing run, store: the loop an agent goes through.
async fn store_a_fix(client: &RunningService<RoleClient, ()>, workspace: &Path) -> Value {
    ok(&call(
        client,
        "search_codebase_memory",
        json!({"query": "app.txt says broken", "error_type": null, "top_k": 3}),
    )
    .await);
    let failing = call(client, "run_tests", json!({})).await;
    assert_eq!(ok(&failing)["passed"], json!(false), "{}", text(&failing));
    std::fs::write(workspace.join("app.txt"), "fixed\n").unwrap();
    let passing = ok(&call(client, "run_tests", json!({})).await);
    assert_eq!(passing["passed"], json!(true), "{passing}");
    let stored = call(
        client,
        "store_fix_memory",
        json!({"fix_description": "app.txt must say fixed, not broken", "error_type": "AssertionError",
               "file_paths": ["app.txt"], "outcome": passing["confirmed_outcome"]}),
    )
    .await;
    ok(&stored)
}

#[tokio::test]
async fn a_flagless_server_in_a_clone_files_its_fix_under_the_remote_label_shared_by_every_clone() {
    let (dir, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let web = project(dir.path(), "Web", Some("git@github.com:Acme/Web.git"));
    // started in a subfolder: the workspace is the work tree's top level
    let client = serve_in(&web.join("src"), db.path(), &[], &[]).await;
    let first = call(&client, "run_tests", json!({})).await;
    let out = ok(&first);
    assert_eq!(out["test_command"], json!("make test"), "{out}");
    assert_eq!(out["test_command_source"], json!("detected: Makefile has a `test` target"));
    assert!(
        text(&first).contains("\nTest command: `make test` (detected: Makefile has a `test` target)\n"),
        "{}",
        text(&first)
    );
    let stored = store_a_fix(&client, &web).await;
    assert_eq!(stored["project"], json!("acme/web"), "{stored}");
    assert_eq!(stored["receipt"]["command"], json!("make test"), "the receipt records the command as before");
    assert_eq!(stored["receipt"]["workspace_root"], json!(web.canonicalize().unwrap().to_str().unwrap()));
    client.cancel().await.unwrap();

    // another clone, in a folder of another name, through another form of the remote's URL
    let other = project(dir.path(), "web-copy", Some("https://github.com/acme/web"));
    assert_eq!(label_in(&other, db.path(), &[]).await, "acme/web");
    let client = serve_in(&other, db.path(), &[], &[]).await;
    let found = ok(&call(
        &client,
        "search_codebase_memory",
        json!({"query": "AssertionError: app.txt says broken", "error_type": null, "top_k": 3}),
    )
    .await);
    assert_eq!(found["matches"][0]["project"], json!("acme/web"), "{found}");
    assert_eq!(found["matches"][0]["stale"], Value::Null, "another checkout: staleness unknown");
    client.cancel().await.unwrap();

    // a linked worktree of the first clone (its `.git` is a file)
    git(&web, &["add", "."]);
    git(&web, &["commit", "-q", "-m", "start"]);
    let worktree = dir.path().join("web-feature");
    git(&web, &["worktree", "add", "-q", worktree.to_str().unwrap()]);
    assert!(worktree.join(".git").is_file());
    assert_eq!(label_in(&worktree, db.path(), &[]).await, "acme/web");
    // `--project` still wins
    assert_eq!(label_in(&worktree, db.path(), &["--project", "mine"]).await, "mine");
}

#[tokio::test]
async fn an_existing_store_keeps_the_folder_label_it_holds_memories_under() {
    let (dir, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let repo = project(dir.path(), "shop-api", Some("git@github.com:acme/shop.git"));
    // what earlier versions filed under the workspace folder's name
    assert_eq!(label_in(&repo, db.path(), &["--project", "shop-api"]).await, "shop-api");
    // ann's memories stay under it; bob, with none, gets the remote's label
    assert_eq!(label_in(&repo, db.path(), &[]).await, "shop-api");
    assert_eq!(label_in(&repo, db.path(), &["--actor", "bob"]).await, "acme/shop");
    // the kept label is said at info on stderr
    let log = dir.path().join("serve.log");
    let command = server_command(&repo, db.path(), &[], &[("ASTRA_LOG", "info".to_string())]);
    let (transport, _) =
        TokioChildProcess::builder(command).stderr(std::fs::File::create(&log).unwrap()).spawn().unwrap();
    let client = ().serve(transport).await.unwrap();
    let out = ok(&call(&client, "archival_memory_insert", json!({"text": "the label is said"})).await);
    assert_eq!(out["project"], json!("shop-api"));
    client.cancel().await.unwrap();
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains("project label `shop-api` kept for actor `local`") && stderr.contains("`acme/shop`"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_project_file_wins_over_detection_and_sets_the_label() {
    let (dir, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let repo = project(dir.path(), "tools", None);
    std::fs::write(repo.join(".astra-mcp.toml"), "test_command = \"sh check.sh\"\nproject = \"acme/tools\"\n").unwrap();
    let client = serve_in(&repo, db.path(), &[], &[]).await;
    let run = call(&client, "run_tests", json!({})).await;
    assert_eq!(ok(&run)["test_command"], json!("sh check.sh"));
    assert!(
        text(&run).contains("Test command: `sh check.sh` (from .astra-mcp.toml at the workspace root)"),
        "{}",
        text(&run)
    );
    client.cancel().await.unwrap();
    assert_eq!(label_in(&repo, db.path(), &[]).await, "acme/tools");

    // a key the file does not take: the server refuses to start, naming the file
    std::fs::write(repo.join(".astra-mcp.toml"), "tests = \"sh check.sh\"\n").unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--stdio", "--db"])
        .arg(db.path())
        .current_dir(&repo)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(".astra-mcp.toml") && stderr.contains("unknown field `tests`"), "{stderr}");
}

#[tokio::test]
async fn detected_pytest_and_npm_run_and_say_why() {
    let db = tempfile::tempdir().unwrap();
    // pytest from PATH (the tooling venv first on it), in a folder that is no git work tree
    let py = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(py.path().join("tests")).unwrap();
    std::fs::write(py.path().join("tests/test_app.py"), "def test_app():\n    assert 1 + 1 == 2\n").unwrap();
    let venv_bin = venv_python().parent().unwrap().to_path_buf();
    let path = format!("{}:{}", venv_bin.display(), std::env::var("PATH").unwrap_or_default());
    let client = serve_in(py.path(), db.path(), &[], &[("PATH", path)]).await;
    let run = call(&client, "run_tests", json!({})).await;
    let out = ok(&run);
    assert_eq!(out["passed"], json!(true), "{}", text(&run));
    assert_eq!(out["test_command"], json!("pytest -q"));
    assert_eq!(out["test_command_source"], json!("detected: test_*.py files in tests/; `pytest` is on PATH"));
    client.cancel().await.unwrap();

    // npm test through package.json's scripts.test
    let js = tempfile::tempdir().unwrap();
    std::fs::write(
        js.path().join("package.json"),
        r#"{"name": "js", "scripts": {"test": "echo '1 passed in 0.01s'"}}"#,
    )
    .unwrap();
    let client = serve_in(js.path(), db.path(), &[], &[]).await;
    let run = call(&client, "run_tests", json!({})).await;
    let out = ok(&run);
    assert_eq!(
        (out["passed"].clone(), out["test_command"].clone()),
        (json!(true), json!("npm test")),
        "{}",
        text(&run)
    );
    assert!(text(&run).contains("(detected: package.json has a `scripts.test`)"), "{}", text(&run));
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn without_a_workspace_or_a_command_run_tests_says_how_to_set_one() {
    let db = tempfile::tempdir().unwrap();
    // a plain folder: no workspace
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("notes.txt"), "x").unwrap();
    let client = serve_in(plain.path(), db.path(), &[], &[]).await;
    let refused = call(&client, "run_tests", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    let message = text(&refused);
    assert!(message.contains("--workspace") && message.contains(".astra-mcp.toml"), "{message}");
    assert_eq!(label_in(plain.path(), db.path(), &[]).await, "default");
    client.cancel().await.unwrap();

    // a git work tree with nothing to detect: a workspace without a command
    let bare = tempfile::tempdir().unwrap();
    git(bare.path(), &["init", "-q"]);
    let client = serve_in(bare.path(), db.path(), &[], &[]).await;
    let refused = call(&client, "run_tests", json!({})).await;
    assert_eq!(refused.is_error, Some(true));
    let message = text(&refused);
    assert!(
        message.contains("no test command") && message.contains("test_command") && message.contains("--test-command"),
        "{message}"
    );
    client.cancel().await.unwrap();
}

#[test]
fn a_test_command_with_no_workspace_found_is_refused_at_start() {
    let (plain, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["serve", "--stdio", "--test-command", "make test", "--db"]).arg(db.path()).current_dir(plain.path());
    for var in LEAKY_ENV {
        cmd.env_remove(var);
    }
    let out = cmd.stdin(std::process::Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("astra-mcp: --test-command (ASTRA_TEST_COMMAND) is set but there is no workspace")
            && stderr.contains("Pass --workspace DIR"),
        "{stderr}"
    );
}

/// The hook of a session in a clone finds the label and the test command the server found: its
/// SessionStart lists the fix filed under the remote's label, and a failing `make test` (no known
/// runner: detected from the Makefile) brings the fix up.
#[tokio::test]
async fn the_hooks_find_the_same_project_and_test_command_as_the_server() {
    let (dir, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let web = project(dir.path(), "web", Some("git@github.com:acme/web.git"));
    let client = serve_in(&web, db.path(), &[], &[]).await;
    store_a_fix(&client, &web).await;
    client.cancel().await.unwrap();

    let clone = project(dir.path(), "web-two", Some("https://github.com/Acme/web.git"));
    let hook = |payload: Value| {
        let mut cmd = assert_cmd::Command::new(BIN);
        cmd.args(["hook", "claude-code", "--db"]).arg(db.path());
        for var in LEAKY_ENV.iter().chain(&["ASTRA_HOOKS", "ASTRA_LOG", "ASTRA_MIN_SCORE"]) {
            cmd.env_remove(var);
        }
        cmd.env("XDG_CONFIG_HOME", dir.path().join("no-config"));
        let out = cmd.write_stdin(payload.to_string()).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let json: Value = serde_json::from_slice(&out.stdout).expect("context printed");
        json["hookSpecificOutput"]["additionalContext"].as_str().unwrap().to_string()
    };
    let start = hook(json!({"session_id": "s1", "cwd": clone.join("src"), "hook_event_name": "SessionStart",
                            "transcript_path": clone.join("t.jsonl"), "source": "startup"}));
    assert!(start.contains("Recent verified fixes in project acme/web"), "{start}");
    assert!(start.contains("app.txt must say fixed, not broken"), "{start}");

    let (code, output) = {
        let out = std::process::Command::new("make").arg("test").current_dir(&clone).output().unwrap();
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        (out.status.code().unwrap(), text)
    };
    assert_eq!(code, 2, "{output}");
    let failing = hook(json!({"session_id": "s1", "cwd": clone, "hook_event_name": "PostToolUseFailure",
                              "transcript_path": clone.join("t.jsonl"), "tool_name": "Bash",
                              "tool_input": {"command": "make test"}, "error": format!("Exit code 2\n{output}")}));
    assert!(failing.contains("Fix: app.txt must say fixed, not broken"), "{failing}");
}

/// The operator commands run in a clone use the label a server started there uses (the git remote's,
/// not the folder's name): `core history` and `core show` read the block the server wrote, `memory
/// ingest` files passages under it, and a block never written names the label and where it came from.
#[tokio::test]
async fn operator_commands_in_a_clone_use_the_servers_project_label() {
    let (dir, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let repo = project(dir.path(), "projA", Some("git@github.com:newuser/projA.git"));
    let client = serve_in(&repo, db.path(), &[], &[]).await;
    let appended = call(&client, "core_memory_append", json!({"section": "project", "text": "dates are UTC"})).await;
    assert_ne!(appended.is_error, Some(true), "{}", text(&appended));
    client.cancel().await.unwrap();

    let cli = |args: &[&str]| {
        let mut cmd = std::process::Command::new(BIN);
        cmd.args(args).arg("--db").arg(db.path()).current_dir(repo.join("src")).env("ASTRA_LOG", "warn");
        for var in LEAKY_ENV {
            cmd.env_remove(var);
        }
        let out = cmd.output().unwrap();
        let (stdout, stderr) = (String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap());
        assert!(out.status.success(), "{args:?}: {stderr}");
        (stdout, stderr)
    };
    let (history, _) = cli(&["core", "history", "project"]);
    assert!(history.contains("version 1") && history.contains("    dates are UTC"), "{history}");
    let (shown, said) = cli(&["core", "show", "project"]);
    assert!(shown.contains("<project chars=\"13/2000\">\ndates are UTC\n</project>"), "{shown}");
    assert!(!said.contains("never been written"), "{said}");

    // a block never written: the label looked in, and where it came from
    let (history, _) = cli(&["core", "history", "style", "--core-blocks", "style"]);
    assert!(
        history.contains(
            "block `style` of actor `local` in project `newuser/proja` (the git remote `origin`; pass --project NAME \
             for another) has never been written"
        ),
        "{history}"
    );
    let (_, said) = cli(&["core", "show", "style", "--core-blocks", "style"]);
    assert!(
        said.contains("`style` of actor `local` in project `newuser/proja` (the git remote `origin`;"),
        "core show names the label it read: {said}"
    );

    let passages = dir.path().join("passages.jsonl");
    std::fs::write(&passages, "{\"text\": \"Deploys go through the staging cluster first.\"}\n").unwrap();
    cli(&["memory", "ingest", passages.to_str().unwrap()]);
    let (listed, _) = cli(&["memory", "list", "--table", "archival", "--json"]);
    let row: Value = serde_json::from_str(listed.lines().next().expect("one passage")).unwrap();
    assert_eq!(row["project"], json!("newuser/proja"), "{listed}");
}
