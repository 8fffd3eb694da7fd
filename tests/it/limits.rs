//! The HTTP listener under a hostile or broken client (docs/limits.md), on the real binary over loopback:
//! slow and idle connections, session openings past the caps, and test runs whose client went away.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::http::{ALICE, BOB, call, config_with_tokens, initialize, open_session, post};
use crate::support::{HttpServer as Server, group_alive};

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (at most 65,536); returns the soft limit.
/// The server started afterwards inherits it.
fn raise_fd_limit() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit write or read only the struct passed.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
        limit.rlim_cur = limit.rlim_max.min(65_536);
        libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit);
    }
    limit.rlim_cur as usize
}

/// File descriptors process `pid` holds now (Linux /proc).
fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Up to 5,000 connections (as many as the descriptor limit allows) that never finish a request: half
/// connect and say nothing, half trickle one header line every 200 ms (slowloris). Meanwhile the server
/// keeps its descriptors under its connection cap, and a client that sends a whole request is answered
/// within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_connections_neither_keep_a_client_out_nor_exhaust_descriptors() {
    const CAP: usize = 256;
    let fd_limit = raise_fd_limit();
    // the test holds one descriptor per connection, and needs some of its own
    let attackers = 5_000.min(fd_limit.saturating_sub(1_024));
    assert!(attackers >= 4 * CAP, "RLIMIT_NOFILE {fd_limit} is too low for this test");
    let dir = tempfile::tempdir().unwrap();
    let cap = CAP.to_string();
    let mut server =
        Server::start(&dir.path().join("db"), &["--http-max-connections", &cap, "--http-header-timeout", "3"]);
    let addr = server.base().strip_prefix("http://").unwrap().to_string();
    let mut attack = tokio::task::JoinSet::new();
    for i in 0..attackers {
        let addr = addr.clone();
        attack.spawn(async move {
            let connect = tokio::net::TcpStream::connect(&addr);
            let Ok(Ok(mut stream)) = tokio::time::timeout(Duration::from_secs(5), connect).await else { return };
            if i % 2 == 0 {
                let mut buf = [0u8; 64];
                let _ = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf)).await;
                return;
            }
            if stream.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.is_err() {
                return;
            }
            for _ in 0..100 {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if stream.write_all(b"X-Slow: 1\r\n").await.is_err() {
                    return;
                }
            }
        });
    }
    // the server's descriptors while the connections pour in
    let mut most = 0;
    for _ in 0..20 {
        most = most.max(open_fds(server.pid()));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let started = Instant::now();
    let answered = tokio::time::timeout(Duration::from_secs(10), post(&server.url, &[], None, initialize())).await;
    let took = started.elapsed();
    let (status, _, messages) = answered.expect("a well-behaved client is answered");
    most = most.max(open_fds(server.pid()));
    assert_eq!(status, 200, "{messages:?}");
    assert_eq!(messages[0]["result"]["serverInfo"]["name"], "astra-mcp");
    assert!(took < Duration::from_secs(1), "a whole request waited {took:?} behind {attackers} slow connections");
    // the cap, the store's files, the runtime's and the model's descriptors
    assert!(most < CAP + 128, "the server held {most} descriptors with --http-max-connections {CAP}");
    assert!(server.child.try_wait().unwrap().is_none(), "the server is still up");
    attack.abort_all();
}

/// An `initialize` POST with `token`; returns the status, `Retry-After` and the body.
async fn raw_initialize(url: &str, token: &str) -> (u16, Option<u64>, String) {
    let response = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("authorization", format!("Bearer {token}"))
        .body(initialize().to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let retry = response.headers().get("retry-after").map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    (status, retry, response.text().await.unwrap())
}

/// Resident memory of process `pid`, in KiB (Linux /proc).
fn rss_kib(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Past the cap per actor, and past the cap in all, `initialize` gets 503 with `Retry-After` and the
/// limit's flag; 2,000 more openings leave the server's memory where it was (a session holds about 240 KB);
/// deleting a session makes room.
#[tokio::test]
async fn session_openings_past_the_caps_get_503_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    let config = config_with_tokens(dir.path());
    let server = Server::start(
        &dir.path().join("db"),
        &["--config", config.to_str().unwrap(), "--http-max-sessions", "5", "--http-max-sessions-per-actor", "3"],
    );
    let (alice, bob) = (format!("Bearer {ALICE}"), format!("Bearer {BOB}"));
    let alice = [("authorization", alice.as_str())];
    let bob = [("authorization", bob.as_str())];
    let mut alices = Vec::new();
    for _ in 0..3 {
        alices.push(open_session(&server.url, &alice).await);
    }
    let (status, retry, body) = raw_initialize(&server.url, ALICE).await;
    assert_eq!(status, 503, "{body}");
    assert!(retry.is_some_and(|s| (1..=300).contains(&s)), "Retry-After: {retry:?}");
    assert!(body.contains("--http-max-sessions-per-actor"), "{body}");
    open_session(&server.url, &bob).await;
    open_session(&server.url, &bob).await;
    let (status, retry, body) = raw_initialize(&server.url, BOB).await;
    assert_eq!(status, 503, "{body}");
    assert!(retry.is_some(), "{body}");
    assert!(body.contains("--http-max-sessions)"), "the cap in all: {body}");
    // the model loads in the background after start: a search waits for it, and 100 refused openings
    // warm the allocator, so what follows measures the refusals alone
    let (_, _, searched) = post(
        &server.url,
        &alice,
        Some(&alices[0]),
        call(2, "search_codebase_memory", json!({"query": "origins", "error_type": null, "top_k": 1})),
    )
    .await;
    assert_eq!(searched[0]["result"]["isError"], false, "{searched:?}");
    for _ in 0..100 {
        assert_eq!(raw_initialize(&server.url, BOB).await.0, 503);
    }
    let before = rss_kib(server.pid());
    for _ in 0..2000 {
        assert_eq!(raw_initialize(&server.url, BOB).await.0, 503);
    }
    let grown = rss_kib(server.pid()).saturating_sub(before);
    assert!(grown < 20 * 1024, "2,000 refused openings grew the server by {grown} KiB");
    let deleted = reqwest::Client::new()
        .delete(&server.url)
        .header("authorization", alice[0].1)
        .header("mcp-session-id", &alices[0])
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status().as_u16(), 204);
    open_session(&server.url, &alice).await;
}

/// `run_tests` over HTTP on a command that sleeps: the test's process group is gone within a second of
/// its client disconnecting, and of its client deleting the session; a second run in the workspace past
/// `--max-test-runs-per-workspace` is refused with a tool error that names the limit.
#[tokio::test]
async fn a_test_run_ends_when_its_client_disconnects_or_deletes_its_session() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("ws");
    std::fs::create_dir(&workspace).unwrap();
    let pid_file = dir.path().join("group.pid");
    let command = format!("echo $$ > {}; sleep 300", pid_file.display());
    let server = Server::start(
        &dir.path().join("db"),
        &["--workspace", workspace.to_str().unwrap(), "--test-command", &command, "--max-test-runs-per-workspace", "1"],
    );
    for how in ["disconnect", "delete"] {
        let _ = std::fs::remove_file(&pid_file);
        let session = open_session(&server.url, &[]).await;
        let request = tokio::spawn({
            let (url, session) = (server.url.clone(), session.clone());
            async move { post(&url, &[], Some(&session), call(1, "run_tests", json!({}))).await }
        });
        let started = Instant::now();
        while std::fs::read_to_string(&pid_file).map(|s| s.trim().is_empty()).unwrap_or(true) {
            assert!(started.elapsed() < Duration::from_secs(20), "the test command never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pgid: i32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        assert!(group_alive(pgid));
        if how == "disconnect" {
            let other = open_session(&server.url, &[]).await;
            let (_, _, refused) = post(&server.url, &[], Some(&other), call(1, "run_tests", json!({}))).await;
            let result: &Value = &refused[0]["result"];
            assert_eq!(result["isError"], true, "{refused:?}");
            assert!(result["content"][0]["text"].as_str().unwrap().contains("--max-test-runs-per-workspace 1"));
        }
        let gone = Instant::now();
        if how == "disconnect" {
            request.abort(); // drops the client, and its connection
        } else {
            let deleted = reqwest::Client::new().delete(&server.url).header("mcp-session-id", &session).send().await;
            assert_eq!(deleted.unwrap().status().as_u16(), 204);
        }
        while group_alive(pgid) {
            assert!(gone.elapsed() < Duration::from_secs(1), "the test run outlived its client ({how}) by 1 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        request.abort();
    }
}
