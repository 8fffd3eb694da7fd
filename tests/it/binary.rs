//! The real `astra-mcp` binary: MCP over its stdio pipes (rmcp's child-process client), answers before
//! the model is loaded, a clear error when the model is missing, persistence across processes (the
//! smoke check), and the schema drift check as a command.

use assert_cmd::Command;
use predicates::prelude::PredicateBooleanExt;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::json;

use crate::support::{args, group_alive};

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

#[tokio::test]
async fn serves_tools_before_the_model_loads_and_names_the_fix_when_it_is_missing() {
    let db = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap(); // no model here
    let transport = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|cmd| {
        cmd.args(["serve", "--stdio", "--db"])
            .arg(db.path())
            .arg("--model-dir")
            .arg(empty.path())
            .env("ASTRA_LOG", "warn");
    }))
    .unwrap();
    let client = ().serve(transport).await.expect("initialize answers without the model");
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), astra_mcp::tools::specs().len());
    let result = client
        .call_tool(
            CallToolRequestParams::new("search_codebase_memory")
                .with_arguments(args(json!({"query": "x", "error_type": null, "top_k": 1}))),
        )
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    let text = result.content[0].as_text().unwrap().text.clone();
    assert!(text.contains("model.onnx") && text.contains("scripts/setup"), "{text}");
    client.cancel().await.unwrap();
}

#[test]
fn smoke_store_then_verify_in_separate_processes() {
    let db = tempfile::tempdir().unwrap();
    let stored =
        Command::new(BIN).args(["smoke", "store", "--db"]).arg(db.path()).env("ASTRA_LOG", "warn").assert().success();
    let id = String::from_utf8(stored.get_output().stdout.clone()).unwrap().trim().to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "smoke store prints the memory_id: {id:?}");
    Command::new(BIN)
        .args(["smoke", "verify", "--db"])
        .arg(db.path())
        .args(["--memory-id", &id])
        .assert()
        .success()
        .stdout(predicates::str::contains(format!("ok: {id} persisted")));
    // verify deleted it: a second verify fails and says why
    Command::new(BIN)
        .args(["smoke", "verify", "--db"])
        .arg(db.path())
        .args(["--memory-id", &id])
        .assert()
        .failure()
        .stderr(predicates::str::contains("astra-mcp: smoke fix").and(predicates::str::contains("did not persist")));
}

#[test]
fn schema_files_are_current_and_the_check_command_agrees() {
    let dev = crate::support::dev_binary();
    Command::new(&dev)
        .args(["schemas", "--check", "--out"])
        .arg(crate::support::repo().join("schemas"))
        .assert()
        .success();
    let empty = tempfile::tempdir().unwrap();
    Command::new(&dev)
        .args(["schemas", "--check", "--out"])
        .arg(empty.path())
        .assert()
        .failure()
        .stderr(predicates::str::contains("run `astra-mcp-dev schemas`"));
}

/// docs/settings.md is what `astra-mcp-dev settings` writes from the flags' definitions, the environment
/// variables and the page's template; a page edited by hand (or left behind by a changed flag) fails the
/// check, which names the command that regenerates it.
#[test]
fn the_settings_page_is_current_and_the_check_command_agrees() {
    let dev = crate::support::dev_binary();
    let page = crate::support::repo().join("docs/settings.md");
    Command::new(&dev).args(["settings", "--check", "--out"]).arg(&page).assert().success();
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join("settings.md");
    Command::new(&dev).args(["settings", "--out"]).arg(&written).assert().success();
    let text = std::fs::read_to_string(&page).unwrap();
    assert!(std::fs::read_to_string(&written).unwrap() == text, "`settings` writes the page `--check` accepts");
    let edited = text.replacen("| `--db PATH` |", "| `--db DIR` |", 1);
    assert_ne!(edited, text, "the page lists `--db PATH`");
    std::fs::write(&written, edited).unwrap();
    Command::new(&dev)
        .args(["settings", "--check", "--out"])
        .arg(&written)
        .assert()
        .failure()
        .stderr(predicates::str::contains("run `astra-mcp-dev settings`"));
}

/// The product binary carries no developers' command: each is an unknown subcommand there, and
/// `--help` does not list it.
#[test]
fn the_product_binary_has_no_developer_commands() {
    let help = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    assert!(help.contains("serve") && help.contains("memory"), "{help}");
    for dev in ["bench", "eval", "session-demo", "schemas", "settings"] {
        assert!(!help.lines().any(|l| l.trim_start().starts_with(&format!("{dev} "))), "`{dev}` listed: {help}");
        Command::new(BIN)
            .arg(dev)
            .assert()
            .code(2)
            .stderr(predicates::str::contains(format!("unrecognized subcommand '{dev}'")));
    }
}

#[test]
fn bad_configuration_is_one_clear_line_and_exit_1() {
    let missing = tempfile::tempdir().unwrap().path().join("nope");
    Command::new(BIN).args(["serve", "--workspace"]).arg(&missing).assert().code(1).stderr(
        predicates::str::starts_with("astra-mcp: --workspace (ASTRA_WORKSPACE) must name an existing directory"),
    );
}

/// A bad value from an environment variable is named by its variable, which the user may never have
/// typed as a flag; a bad value typed on the command line is not; a hook says both on one line, exit 1.
#[test]
fn a_bad_value_from_the_environment_names_its_variable() {
    let db = tempfile::tempdir().unwrap();
    let expired = || {
        let mut cmd = Command::new(BIN);
        cmd.args(["memory", "expired", "--db"]).arg(db.path());
        cmd
    };
    let from_env = expired().env("ASTRA_EXPIRE_AFTER_DAYS", "abc").output().unwrap();
    let said = String::from_utf8_lossy(&from_env.stderr);
    assert_eq!(from_env.status.code(), Some(2), "{said}");
    assert!(said.contains("`abc` is not a number of days: give a whole number from 0 (nothing expires) to 36500"));
    assert!(said.contains("tip: the value came from the environment variable ASTRA_EXPIRE_AFTER_DAYS"), "{said}");
    // typed (a negative number is a value, not an unknown flag), with the variable set too: no tip
    let typed = expired().args(["--expire-after-days", "-1"]).env("ASTRA_EXPIRE_AFTER_DAYS", "abc").output().unwrap();
    let said = String::from_utf8_lossy(&typed.stderr);
    assert_eq!(typed.status.code(), Some(2), "{said}");
    assert!(said.contains("`-1` is not a number of days") && !said.contains("environment variable"), "{said}");
    // a hook: one line, exit 1 (exit 2 would block the agent's action)
    let hook = Command::new(BIN)
        .args(["hook", "claude-code", "--db"])
        .arg(db.path())
        .env("ASTRA_EXPIRE_AFTER_DAYS", "abc")
        .write_stdin("{}")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&hook.stderr);
    assert_eq!(hook.status.code(), Some(1), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(
        said.contains("is not a number of days")
            && said.contains("; the value came from the environment variable ASTRA_EXPIRE_AFTER_DAYS"),
        "{said}"
    );
}

/// A report whose reader closed the pipe (`astra-mcp memory stats | head -0`) ends with status 0 and
/// nothing on stderr: no panic message about the failed print.
#[tokio::test]
async fn a_report_into_a_closed_pipe_ends_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    drop(astra_mcp::store::lance::LanceStore::open(db.to_str().unwrap()).await.unwrap());
    let mut child = std::process::Command::new(BIN)
        .args(["memory", "stats", "--db"])
        .arg(&db)
        .env("ASTRA_CACHE_DIR", crate::support::cache_dir())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // the reader goes away before the store is open, so the whole report meets a closed pipe
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked") && !stderr.contains("Broken pipe"), "{stderr}");
}

#[test]
fn a_store_that_cannot_be_opened_ends_the_stdio_server_with_its_error() {
    // The store opens beside the first messages (`initialize` does not wait for it); failing, it still
    // ends the process with exit 1 and the store's error, whether or not stdin reached EOF first.
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("db");
    std::fs::write(&not_a_dir, "a file where the store should be").unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    for stdin in [format!("{init}\n"), String::new()] {
        Command::new(BIN)
            .args(["serve", "--stdio", "--db"])
            .arg(&not_a_dir)
            .env("ASTRA_LOG", "warn")
            .write_stdin(stdin)
            .assert()
            .code(1)
            .stderr(predicates::str::contains(format!("cannot open the memory store at {}", not_a_dir.display())))
            .stderr(predicates::str::contains("that is a file: --db (ASTRA_DB) names a store directory"));
    }
}

/// Spawns `serve --stdio --db db` plus `args` on the real binary with `ASTRA_LOG=log`, stdin, stdout
/// and stderr piped, killed when dropped.
fn spawn_stdio_server(db: &std::path::Path, args: &[&str], log: &str) -> tokio::process::Child {
    tokio::process::Command::new(BIN)
        .args(["serve", "--stdio", "--db"])
        .arg(db)
        .args(args)
        .env("ASTRA_LOG", log)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// Sends SIGTERM to `server` and asserts that it exits 0 within 10 s, stdin still open.
async fn assert_sigterm_exits_gracefully(server: &mut tokio::process::Child) {
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(server.id().unwrap() as i32, libc::SIGTERM) }, 0);
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), server.wait()).await;
    let status = status.expect("the server exits after SIGTERM although stdin is still open").unwrap();
    assert_eq!(status.code(), Some(0), "a graceful exit");
}

/// Starts `serve --stdio --db db` plus `args` on the real binary (stdin and stdout piped, stdout's
/// further lines discarded) and completes `initialize`; returns the process and its stdin.
async fn initialized_stdio_server(
    db: &std::path::Path,
    args: &[&str],
) -> (tokio::process::Child, tokio::process::ChildStdin) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut server = spawn_stdio_server(db, args, "warn");
    // its logs stay visible in the test's output
    let mut stderr = server.stderr.take().unwrap();
    tokio::spawn(async move { tokio::io::copy(&mut stderr, &mut tokio::io::stderr()).await });
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    stdin.write_all(format!("{init}\n").as_bytes()).await.unwrap();
    let reply: serde_json::Value = serde_json::from_str(&stdout.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(reply["id"], json!(1), "{reply}");
    // keep reading, so the server never blocks on a full pipe
    tokio::spawn(async move { while let Ok(Some(_)) = stdout.next_line().await {} });
    (server, stdin)
}

/// Speaks raw JSON-RPC over the real binary's pipes: starts `run_tests` on a command that sleeps,
/// then closes stdin as MCP clients do on shutdown (the Python SDK terminates the server 2 s later,
/// and does not reach the test's own process group).
#[tokio::test]
async fn closing_stdin_kills_a_running_test_within_the_eof_grace() {
    let (db, ws, marker) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut server, stdin, pgid) = server_running_a_test(db.path(), ws.path(), marker.path(), &[]).await;
    drop(stdin);
    let deadline = astra_mcp::transport::stdio::EOF_GRACE + std::time::Duration::from_millis(900);
    assert_group_gone_within(pgid, deadline, "the closed connection").await;
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), server.wait()).await;
    assert!(status.is_ok(), "the server exits after stdin closes");
}

/// Starts `run_tests` (request id 2) on a command that records its process group and sleeps, through a
/// raw stdio server started with `extra` flags; returns the server, its stdin and the test's group.
async fn server_running_a_test(
    db: &std::path::Path,
    ws: &std::path::Path,
    marker: &std::path::Path,
    extra: &[&str],
) -> (tokio::process::Child, tokio::process::ChildStdin, i32) {
    use tokio::io::AsyncWriteExt;
    let pid_file = marker.join("group.pid");
    let command = format!("echo $$ > {}; sleep 300", pid_file.display());
    let mut args = vec!["--workspace", ws.to_str().unwrap(), "--test-command", &command];
    args.extend_from_slice(extra);
    let (server, mut stdin) = initialized_stdio_server(db, &args).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let call =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "run_tests", "arguments": {}}});
    stdin.write_all(format!("{initialized}\n{call}\n").as_bytes()).await.unwrap();
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&pid_file).map(|s| s.trim().is_empty()).unwrap_or(true) {
        assert!(started.elapsed() < std::time::Duration::from_secs(20), "the test command never started");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let pgid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    assert!(group_alive(pgid));
    (server, stdin, pgid)
}

/// Waits until process group `pgid` is gone, failing after `within`.
async fn assert_group_gone_within(pgid: i32, within: std::time::Duration, what: &str) {
    let since = std::time::Instant::now();
    while group_alive(pgid) {
        assert!(since.elapsed() < within, "the test process group {pgid} outlived {what}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn signal(server: &tokio::process::Child, signal: i32) {
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(server.id().unwrap() as i32, signal) }, 0);
}

#[tokio::test]
async fn a_cancelled_run_tests_request_kills_its_test_run() {
    use tokio::io::AsyncWriteExt;
    let (db, ws, marker) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (_server, mut stdin, pgid) = server_running_a_test(db.path(), ws.path(), marker.path(), &[]).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "the user pressed Esc"}});
    stdin.write_all(format!("{cancel}\n").as_bytes()).await.unwrap();
    assert_group_gone_within(pgid, std::time::Duration::from_secs(1), "its cancelled request").await;
}

#[tokio::test]
async fn a_run_still_going_when_the_shutdown_grace_runs_out_is_killed() {
    let (db, ws, marker) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut server, _stdin, pgid) =
        server_running_a_test(db.path(), ws.path(), marker.path(), &["--shutdown-grace", "1"]).await;
    signal(&server, libc::SIGTERM);
    assert_group_gone_within(pgid, std::time::Duration::from_secs(3), "the 1 s shutdown grace").await;
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), server.wait()).await;
    assert_eq!(status.expect("the server exits after its grace").unwrap().code(), Some(0));
}

#[tokio::test]
async fn a_second_signal_exits_130_at_once_and_takes_the_test_run_with_it() {
    let (db, ws, marker) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut server, _stdin, pgid) =
        server_running_a_test(db.path(), ws.path(), marker.path(), &["--shutdown-grace", "60"]).await;
    signal(&server, libc::SIGTERM);
    // the first signal starts a drain that would wait up to 60 s for the run
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(group_alive(pgid), "the drain lets the run go on");
    signal(&server, libc::SIGINT);
    let status = tokio::time::timeout(std::time::Duration::from_secs(3), server.wait()).await;
    assert_eq!(status.expect("a second signal exits at once").unwrap().code(), Some(130));
    assert_group_gone_within(pgid, std::time::Duration::from_secs(1), "the server's exit on a second signal").await;
}

/// Pipes a whole session into a fresh `serve --stdio` and closes stdin at once (a script's
/// `printf ... | astra-mcp serve --stdio`); returns every JSON line the server writes before it exits.
fn piped_session(db: &std::path::Path, calls: &[serde_json::Value]) -> Vec<serde_json::Value> {
    use std::io::{Read, Write};
    let mut child = std::process::Command::new(BIN)
        .args(["serve", "--stdio", "--db"])
        .arg(db)
        .env("ASTRA_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "script", "version": "0"}}});
    let mut input = format!("{init}\n{}\n", json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    for call in calls {
        input.push_str(&format!("{call}\n"));
    }
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).unwrap();
        out
    });
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("the server did not exit within 30 s of EOF");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "the server exits cleanly at EOF: {status:?}");
    reader.join().unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `ASTRA_LOG=debug` logs astra-mcp's debug lines without the tool arguments: not rmcp's messages (an
/// insert's text) nor Lance's query plans (a search's words); naming rmcp (`debug,rmcp=debug`) still
/// gets them.
#[test]
fn a_debug_log_holds_no_tool_argument_unless_a_crate_is_asked_for() {
    let db = tempfile::tempdir().unwrap();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "script", "version": "0"}}});
    let call = |id: i64, name: &str, arguments: serde_json::Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    let insert =
        call(1, "archival_memory_insert", json!({"text": "The staging login is kept in vault path kv/st4g1ng."}));
    let search = call(2, "archival_memory_search", json!({"query": "where is qu3ryw0rd kept"}));
    let stderr = |log: &str| {
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let out = Command::new(BIN)
            .args(["serve", "--stdio", "--db"])
            .arg(db.path())
            .env("ASTRA_CACHE_DIR", crate::support::cache_dir())
            .env("ASTRA_LOG", log)
            .write_stdin(format!("{init}\n{initialized}\n{insert}\n{search}\n"))
            .assert()
            .success()
            .get_output()
            .clone();
        let answers = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(answers.contains("\"id\":1") && answers.contains("\"id\":2"), "both calls answered: {answers}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    for log in ["debug", "5"] {
        let debug = stderr(log);
        let own = debug.lines().any(|l| l.contains(" DEBUG ") && l.contains(" astra_mcp::"));
        assert!(own, "{log}: astra-mcp's debug lines are written: {debug}");
        assert!(!debug.contains("st4g1ng") && !debug.contains("qu3ryw0rd"), "{log}: no tool argument: {debug}");
    }
    let named = stderr("debug,rmcp=debug");
    assert!(named.contains("st4g1ng") && named.contains("qu3ryw0rd"), "named, rmcp logs the messages");
}

/// A client that writes its requests and closes stdin before reading gets them answered: calls read
/// just before EOF run (for up to `EOF_GRACE`) instead of being refused as "server shutting down".
#[test]
fn calls_piped_in_before_stdin_closes_are_answered() {
    let db = tempfile::tempdir().unwrap();
    let call = |id: i64, name: &str, arguments: serde_json::Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    let reply = |replies: &[serde_json::Value], id: i64| {
        replies.iter().find(|r| r["id"] == json!(id)).cloned().unwrap_or_else(|| panic!("no reply {id}: {replies:?}"))
    };
    let first = piped_session(
        db.path(),
        &[call(1, "core_memory_append", json!({"section": "human", "text": "Prefers pnpm over npm."}))],
    );
    let appended = reply(&first, 1);
    assert_eq!(appended["result"]["isError"], json!(false), "{appended}");
    assert!(appended["result"]["structuredContent"].to_string().contains("Prefers pnpm over npm."), "{appended}");
    // a second piped session sees the first one's write, and can change it
    let second = piped_session(
        db.path(),
        &[call(
            2,
            "core_memory_replace",
            json!({"section": "human", "old_text": "Prefers pnpm over npm.", "new_text": "Prefers bun."}),
        )],
    );
    let replaced = reply(&second, 2);
    assert_eq!(replaced["result"]["isError"], json!(false), "{replaced}");
    assert!(replaced["result"]["structuredContent"].to_string().contains("Prefers bun."), "{replaced}");
}

/// SIGTERM while the client keeps stdin open (a client that signals instead of closing the pipe): the
/// server drains and exits 0 within its grace period, rather than waiting for a stdin read that only
/// the client's EOF would end.
#[tokio::test]
async fn sigterm_with_stdin_still_open_exits() {
    let db = tempfile::tempdir().unwrap();
    let (mut server, stdin) = initialized_stdio_server(db.path(), &["--shutdown-grace", "1"]).await;
    assert_sigterm_exits_gracefully(&mut server).await;
    drop(stdin);
}

#[tokio::test]
async fn sigterm_before_initialize_exits() {
    // the store opens (then the model loads) in the background from launch: a supervisor's SIGTERM
    // before any message still ends the process, gracefully
    use tokio::io::AsyncBufReadExt;
    let db = tempfile::tempdir().unwrap();
    let mut server = spawn_stdio_server(db.path(), &[], "warn,astra_mcp=info");
    let stdin = server.stdin.take().unwrap();
    // "ready" is logged once the store is open, by then the signal handlers are installed
    let mut stderr = tokio::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let ready = async {
        while let Some(line) = stderr.next_line().await.unwrap() {
            if line.contains("astra-mcp ready") {
                return;
            }
        }
        panic!("the server ended before it was ready");
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), ready).await.expect("the store opens");
    tokio::spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });
    assert_sigterm_exits_gracefully(&mut server).await;
    drop(stdin);
}

#[tokio::test]
async fn a_store_failing_after_initialize_answers_the_waiting_call_with_its_error_and_exits_1() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
    // A file where one table's directory should be: the store fails at its last table, well after
    // `initialize` was answered, while a tool call waits for it with stdin still open.
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    std::fs::create_dir(&db).unwrap();
    std::fs::write(db.join("distill_runs.lance"), "not a table").unwrap();
    let mut server = spawn_stdio_server(&db, &[], "warn");
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = BufReader::new(server.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    stdin.write_all(format!("{init}\n").as_bytes()).await.unwrap();
    let reply: serde_json::Value = serde_json::from_str(&stdout.next_line().await.unwrap().unwrap()).unwrap();
    assert_eq!(reply["id"], json!(1), "initialize is answered before the store is open: {reply}");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "archival_memory_search", "arguments": {"query": "deploy"}}});
    stdin.write_all(format!("{initialized}\n{call}\n").as_bytes()).await.unwrap();
    let line = tokio::time::timeout(std::time::Duration::from_secs(30), stdout.next_line()).await;
    let reply: serde_json::Value =
        serde_json::from_str(&line.expect("the call is answered").unwrap().unwrap()).unwrap();
    assert_eq!(reply["id"], json!(2), "{reply}");
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("cannot open the memory store at {}", db.display())), "{reply}");
    let status = tokio::time::timeout(std::time::Duration::from_secs(10), server.wait()).await;
    let status = status.expect("the server exits although stdin is still open").unwrap();
    assert_eq!(status.code(), Some(1));
    let mut stderr = String::new();
    server.stderr.take().unwrap().read_to_string(&mut stderr).await.unwrap();
    assert!(stderr.contains(&format!("astra-mcp: cannot open the memory store at {}", db.display())), "{stderr}");
    drop(stdin);
}

/// Sends `frames` (one per line) to a fresh `serve --stdio` and returns the first `n` JSON lines it
/// writes back, failing after 20 s (a hang).
fn stdio_replies(frames: &[&[u8]], n: usize) -> Vec<serde_json::Value> {
    stdio_replies_with(&[], frames, n)
}

/// [`stdio_replies`] from a server started with the further flags `args`.
fn stdio_replies_with(args: &[&str], frames: &[&[u8]], n: usize) -> Vec<serde_json::Value> {
    use std::io::{BufRead, Write};
    let db = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(BIN)
        .args(["serve", "--stdio", "--db"])
        .arg(db.path())
        .args(args)
        .env("ASTRA_LOG", "error")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for frame in frames {
        stdin.write_all(frame).unwrap();
        stdin.write_all(b"\n").unwrap();
    }
    stdin.flush().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut replies = Vec::new();
    while replies.len() < n {
        let line = rx.recv_timeout(std::time::Duration::from_secs(20)).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("no reply within 20 s after {replies:?}")
        });
        replies.push(serde_json::from_str(&line).unwrap_or_else(|e| panic!("stdout is not JSON-RPC ({e}): {line}")));
    }
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "the server exits cleanly at EOF: {status:?}");
    replies
}

#[test]
fn malformed_json_rpc_frames_get_error_responses_and_the_session_goes_on() {
    let init = br#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let mut huge = b"{\"jsonrpc\":\"2.0\",\"id\":99,\"method\":\"ping\",\"params\":{\"pad\":\"".to_vec();
    huge.extend(std::iter::repeat_n(b'x', astra_mcp::transport::stdio::MAX_FRAME_BYTES));
    huge.extend_from_slice(b"\"}}");
    let frames: Vec<&[u8]> = vec![
        init,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        b"{this is not json",
        br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":"oops"}"#,
        br#"[{"jsonrpc":"2.0","id":6,"method":"ping"}]"#,
        b"\xff\xfe\xfd",
        br#"{"jsonrpc":"2.0","id":7,"method":"no/such/method"}"#,
        &huge,
        br#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}"#,
        br#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#,
    ];
    let replies = stdio_replies(&frames, 9);
    let code = |r: &serde_json::Value| r["error"]["code"].as_i64();
    // Errors for malformed frames are written as they are read, so replies are not in request order.
    let by_id = |id: serde_json::Value| replies.iter().find(|r| r["id"] == id).cloned();
    assert_eq!(by_id(json!("init")).unwrap()["result"]["serverInfo"]["name"], "astra-mcp");
    let nulls: Vec<&serde_json::Value> = replies.iter().filter(|r| r["id"].is_null()).collect();
    // not JSON, a batch, not UTF-8, and the oversized frame: four errors without an id
    assert_eq!(
        nulls.iter().map(|r| code(r)).collect::<Vec<_>>(),
        [Some(-32700), Some(-32600), Some(-32700), Some(-32700)]
    );
    assert!(nulls[3]["error"]["message"].as_str().unwrap().contains("bytes"), "{:?}", nulls[3]);
    assert_eq!(code(&by_id(json!(5)).unwrap()), Some(-32600), "bad params of a known method keep their id");
    assert_eq!(code(&by_id(json!(7)).unwrap()), Some(-32601), "an unknown method");
    assert_eq!(code(&by_id(json!(8)).unwrap()), Some(-32602), "an unknown tool");
    assert_eq!(by_id(json!(9)).unwrap()["result"], json!({}), "the session still answers after all that");
    assert!(by_id(json!(99)).is_none(), "the oversized request was not run");
}

/// A request reusing the id of one still running is answered at once with `-32600`, and the first one
/// still gets its own answer (rmcp keys calls by id: the second used to replace the first, whose answer
/// was then dropped and its client waited forever).
#[test]
fn a_request_reusing_an_id_in_flight_gets_an_error_and_both_are_answered() {
    let ws = tempfile::tempdir().unwrap();
    let args = ["--workspace", ws.path().to_str().unwrap(), "--test-command", "sleep 1; echo '1 passed in 1.00s'"];
    let init = br#"{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;
    let frames: Vec<&[u8]> = vec![
        init,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        br#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_tests","arguments":{}}}"#,
        br#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
        br#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#,
    ];
    let replies = stdio_replies_with(&args, &frames, 4);
    let twos: Vec<&serde_json::Value> = replies.iter().filter(|r| r["id"] == json!(2)).collect();
    assert_eq!(twos.len(), 2, "both requests with id 2 are answered: {replies:?}");
    let error = twos.iter().find(|r| r.get("error").is_some()).unwrap_or_else(|| panic!("{replies:?}"));
    assert_eq!(error["error"]["code"], json!(-32600), "{error}");
    assert!(error["error"]["message"].as_str().unwrap().contains("id 2 is already used"), "{error}");
    let result = twos.iter().find(|r| r.get("result").is_some()).unwrap_or_else(|| panic!("{replies:?}"));
    assert_eq!(result["result"]["structuredContent"]["passed"], json!(true), "the run_tests call itself: {result}");
    assert!(replies.iter().any(|r| r["id"] == json!(3) && r["result"] == json!({})), "{replies:?}");
}

/// A `--db` where no store is (a typo) is created by `serve`, which writes, with a warning that names
/// `--db`: shown at the quietest usual log level, so memory does not seem to vanish without a word.
/// The next start on the same store says nothing of it.
#[test]
fn a_new_store_is_announced_with_a_warning_that_names_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("dbtypo");
    let serve = || {
        let out = Command::new(BIN)
            .args(["serve", "--stdio", "--db"])
            .arg(&typo)
            .env("ASTRA_LOG", "warn")
            .write_stdin("")
            .output()
            .unwrap();
        // no client came (stdin closed at once): the server ends after opening the store
        String::from_utf8(out.stderr).unwrap()
    };
    let first = serve();
    assert!(first.contains("no store was at this path: created a new, empty one"), "{first}");
    assert!(first.contains("check --db / ASTRA_DB") && first.contains("dbtypo"), "{first}");
    let second = serve();
    assert!(!second.contains("created a new"), "{second}");
}

/// `astra-mcp ready` is logged only once the HTTP listener is bound: a port in use fails without it.
#[test]
fn a_port_in_use_fails_without_saying_ready() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let db = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["serve", "--http", &addr, "--db"])
        .arg(db.path())
        .env("ASTRA_LOG", "info")
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("cannot listen on {addr}")), "{stderr}");
    assert!(!stderr.contains("astra-mcp ready"), "ready before the listener was bound: {stderr}");
    drop(taken);
}
