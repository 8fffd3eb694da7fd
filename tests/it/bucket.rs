//! Stores on S3-compatible object storage, against a real S3 server on loopback (`tests/s3-server`,
//! s3s-fs with atomic conditional writes; `support::S3Server`): the server's conditional PUTs, the
//! refusal of a store that ignores them, a store moved from a local directory to the bucket and back,
//! the S3 server killed and restarted under a running astra-mcp, a server that froze, a distill run
//! started twice from two machines, and a passage forgotten on one machine gone from another's
//! searches. Every astra-mcp here is a process of the real binary with its own HOME, sharing nothing
//! with the others but the bucket. The many-writers checks are in `multiprocess`.

use std::path::Path;
use std::process::{Command, Output};

use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde_json::{Value, json};

use crate::support::{S3Server, repo};

const BIN: &str = env!("CARGO_BIN_EXE_astra-mcp");

/// The binary as a process of its own machine: its own HOME and caches (in `home`), the S3 server's
/// endpoint and credentials, the store `db`, actor `ann`.
fn machine(s3: &S3Server, home: &Path, db: &str) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CACHE_HOME", home.join(".cache"))
        // the model files, read-only, as an install would ship them with the binary
        .env("ASTRA_CACHE_DIR", crate::support::cache_dir())
        .env("ASTRA_DB", db)
        .env("ASTRA_ACTOR", "ann")
        .env("ASTRA_PROJECT", "datekit")
        .env("ASTRA_LOG", "warn")
        .envs(s3.env());
    cmd
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn is_refused(e: &object_store::Error) -> bool {
    matches!(e, object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. })
}

/// The test server refuses the second of two conditional PUTs of one key, also when 16 arrive at
/// once (s3s-fs alone checks before it writes, not atomically), and a PUT `If-Match` an ETag the
/// object no longer has; in its ignoring mode it accepts both creates.
#[tokio::test]
async fn the_test_s3_server_refuses_the_second_of_two_conditional_puts_of_one_key() {
    let s3 = S3Server::start();
    let client = std::sync::Arc::new(s3.client());
    let create = || PutOptions { mode: PutMode::Create, ..PutOptions::default() };
    let key = object_store::path::Path::from("probe/one");
    client.put_opts(&key, PutPayload::from_static(b"first"), create()).await.unwrap();
    let second = client.put_opts(&key, PutPayload::from_static(b"second"), create()).await.unwrap_err();
    assert!(is_refused(&second), "{second}");
    assert_eq!(client.get(&key).await.unwrap().bytes().await.unwrap().as_ref(), b"first");

    let race = object_store::path::Path::from("probe/race");
    let attempts = (0..16).map(|i| {
        let (client, race) = (client.clone(), race.clone());
        tokio::spawn(async move { client.put_opts(&race, PutPayload::from(format!("writer {i}")), create()).await })
    });
    let results: Vec<_> = futures::future::join_all(attempts).await.into_iter().map(Result::unwrap).collect();
    let winners: Vec<usize> = (0..16).filter(|&i| results[i].is_ok()).collect();
    assert_eq!(winners.len(), 1, "exactly one of 16 racing creates wins: {results:?}");
    assert!(results.iter().filter_map(|r| r.as_ref().err()).all(is_refused), "{results:?}");
    let stored = client.get(&race).await.unwrap().bytes().await.unwrap();
    assert_eq!(stored.as_ref(), format!("writer {}", winners[0]).as_bytes());

    // If-Match (what a distill run's lease is taken over with): a write conditional on the version
    // read is accepted, and refused once the object has changed since
    let read = client.get(&key).await.unwrap().meta;
    let at = object_store::UpdateVersion { e_tag: read.e_tag, version: read.version };
    let update =
        |at: &object_store::UpdateVersion| PutOptions { mode: PutMode::Update(at.clone()), ..PutOptions::default() };
    client.put_opts(&key, PutPayload::from_static(b"third"), update(&at)).await.unwrap();
    let stale = client.put_opts(&key, PutPayload::from_static(b"fourth"), update(&at)).await.unwrap_err();
    assert!(is_refused(&stale), "{stale}");
    assert_eq!(client.get(&key).await.unwrap().bytes().await.unwrap().as_ref(), b"third");

    let ignoring = S3Server::start_ignoring_conditional_writes();
    let client = ignoring.client();
    client.put_opts(&key, PutPayload::from_static(b"first"), create()).await.unwrap();
    client.put_opts(&key, PutPayload::from_static(b"second"), create()).await.unwrap();
    assert_eq!(client.get(&key).await.unwrap().bytes().await.unwrap().as_ref(), b"second");
}

/// A store on a server that accepts a second conditional write of one key is refused at open, with a
/// message that names the problem and the way out, and nothing is created in it; with
/// `--unsafe-single-writer` it opens. A server that honours conditional writes opens as it is.
#[test]
fn a_store_on_a_server_that_ignores_conditional_writes_is_refused() {
    let home = tempfile::tempdir().unwrap();
    let ignoring = S3Server::start_ignoring_conditional_writes();
    let db = ignoring.uri("team");
    // a command that writes (it creates a store where none is): the import of an export with no rows
    let empty_export = home.path().join("empty.jsonl");
    let header = astra_mcp::app::lance::ExportHeader {
        astra_mcp_export: astra_mcp::app::lance::EXPORT_VERSION,
        format_version: astra_mcp::app::lance::FORMAT_VERSION.into(),
        embedding_model: astra_mcp::embed::MODEL_ID.into(),
        embedding_dimension: astra_mcp::embed::DIMENSION,
        exported_at: "2026-12-05T00:00:00Z".into(),
    };
    std::fs::write(&empty_export, serde_json::to_string(&header).unwrap()).unwrap();
    let out = machine(&ignoring, home.path(), &db).args(["memory", "import"]).arg(&empty_export).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("does not refuse a second conditional write (If-None-Match: *)"), "{stderr}");
    assert!(stderr.contains("--unsafe-single-writer") && stderr.contains(&db), "{stderr}");
    let bucket = ignoring.root.path().join(S3Server::BUCKET);
    let created: Vec<_> = walk(&bucket).into_iter().filter(|p| p.contains(".lance")).collect();
    assert!(created.is_empty(), "a refused store gets no tables: {created:?}");

    let imported = machine(&ignoring, home.path(), &db)
        .args(["memory", "import", "--unsafe-single-writer"])
        .arg(&empty_export)
        .output()
        .unwrap();
    assert_eq!(ok(imported), "imported no rows\n");
    let mut env_one = machine(&ignoring, home.path(), &db);
    let stats = ok(env_one.args(["memory", "stats"]).env("ASTRA_UNSAFE_SINGLE_WRITER", "1").output().unwrap());
    assert!(stats.contains("archival"), "the message's ASTRA_UNSAFE_SINGLE_WRITER=1 is accepted: {stats}");

    let honouring = S3Server::start();
    let db = honouring.uri("team");
    // Endpoints that cannot work end in exit 1 and a message naming the store and the setting: one
    // without a scheme (object_store's client would panic on it), and an https:// one in front of a
    // plain-HTTP server (with SIGPIPE's default action, the closed connection killed the process with
    // status 141 and no message).
    let endpoints = [
        (honouring.endpoint.trim_start_matches("http://").to_string(), "is not an http:// or https:// URL"),
        (honouring.endpoint.replacen("http://", "https://", 1), "cannot write to the object store"),
    ];
    for (endpoint, says) in endpoints {
        let out = machine(&honouring, home.path(), &db)
            .args(["memory", "import"])
            .arg(&empty_export)
            .env("AWS_ENDPOINT_URL", &endpoint)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{endpoint}: {stderr}");
        for part in [says, db.as_str(), "AWS_ENDPOINT_URL"] {
            assert!(stderr.contains(part), "{endpoint}: no `{part}` in {stderr}");
        }
    }
    // plain HTTP without AWS_ALLOW_HTTP, which object_store refuses with only "builder error"
    let out =
        machine(&honouring, home.path(), &db).args(["memory", "stats"]).env_remove("AWS_ALLOW_HTTP").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("is plain http://") && stderr.contains("AWS_ALLOW_HTTP=true"), "{stderr}");
    // no credentials anywhere (no keys, a HOME without ~/.aws, no instance metadata): one plain sentence,
    // not the credential chain's debug dump
    let out = machine(&honouring, home.path(), &db)
        .args(["memory", "stats"])
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no AWS credentials were found: set AWS_ACCESS_KEY_ID"), "{stderr}");
    assert!(!stderr.contains(".cargo/registry"), "{stderr}");
    // the same from a command that only reads, which looks for the store first
    let out = machine(&honouring, home.path(), &db)
        .args(["memory", "stats"])
        .env("AWS_ENDPOINT_URL", honouring.endpoint.replacen("http://", "https://", 1))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot read the object store") && stderr.contains("AWS_ENDPOINT_URL"), "{stderr}");
    ok(machine(&honouring, home.path(), &db).args(["memory", "import"]).arg(&empty_export).output().unwrap());
    let stats = ok(machine(&honouring, home.path(), &db).args(["memory", "stats"]).output().unwrap());
    assert!(stats.contains("archival"), "{stats}");
}

/// Commands that read a store, pointed at a prefix with no store (a typo), fail naming it and write
/// nothing there; a command that writes creates the store, and then they read it.
#[test]
fn reading_commands_refuse_a_prefix_with_no_store_and_leave_it_empty() {
    let s3 = S3Server::start();
    let home = tempfile::tempdir().unwrap();
    let typo = s3.uri("mem-typo");
    let reads: [&[&str]; 3] = [&["memory", "export"], &["memory", "stats"], &["core", "show"]];
    for args in reads {
        let out = machine(&s3, home.path(), &typo).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        let named = format!("no memory store at {typo}: check the bucket and prefix of --db (ASTRA_DB)");
        assert!(stderr.contains(&named), "{args:?}: {stderr}");
    }
    let bucket = s3.root.path().join(S3Server::BUCKET);
    assert_eq!(walk(&bucket.join("mem-typo")), Vec::<String>::new(), "nothing written under the prefix");
    let passages = home.path().join("passages.jsonl");
    std::fs::write(&passages, "{\"text\": \"Staging runs on Kubernetes 1.31.\"}\n").unwrap();
    ok(machine(&s3, home.path(), &typo).args(["memory", "ingest"]).arg(&passages).output().unwrap());
    for args in reads {
        ok(machine(&s3, home.path(), &typo).args(args).output().unwrap());
    }
}

fn walk(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path.to_string_lossy().into_owned());
        }
    }
    out
}

/// Every row of an export but its header (which records when it was made), sorted.
fn rows(export: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(export).unwrap();
    let mut rows: Vec<String> = text.lines().skip(1).map(str::to_string).collect();
    rows.sort();
    rows
}

/// A local store exported, imported into the bucket, exported from there and imported into a new
/// local store: every row of every table (ids, times, texts, vectors) comes back identical.
#[tokio::test]
async fn a_store_moves_from_a_local_directory_to_the_bucket_and_back_unchanged() {
    let s3 = S3Server::start();
    let home = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let local_db = local.path().join("db");
    let transcripts = repo().join("tests/fixtures/transcripts/responses.jsonl");
    ok(machine(&s3, home.path(), local_db.to_str().unwrap())
        .args(["sessions", "import"])
        .arg(&transcripts)
        .output()
        .unwrap());
    {
        use astra_mcp::memory::GateState;
        let host = crate::support::host(&local_db, crate::support::config("ann", "datekit", None, None)).await;
        let s = GateState::new("s");
        for (tool, arguments) in [
            ("core_memory_append", json!({"section": "human", "text": "Ann prefers rebase over merge."})),
            ("archival_memory_insert", json!({"text": "Staging runs on Kubernetes 1.31.", "tags": ["infra"]})),
        ] {
            assert!(!host.call(&s, tool, crate::support::args(arguments)).await.unwrap().is_error);
        }
        host.flush().await;
    }
    let files = tempfile::tempdir().unwrap();
    let [first, second, third] = ["local.jsonl", "bucket.jsonl", "back.jsonl"].map(|f| files.path().join(f));
    let local_db = local_db.to_str().unwrap();
    ok(machine(&s3, home.path(), local_db)
        .args(["memory", "export", "--all-actors", "--out"])
        .arg(&first)
        .output()
        .unwrap());
    let bucket = s3.uri("moved");
    // the first process on a new prefix says it created a store there (a mistyped prefix is not an error)
    let created = machine(&s3, home.path(), &bucket).args(["memory", "import"]).arg(&first).output().unwrap();
    let stderr = String::from_utf8_lossy(&created.stderr).into_owned();
    ok(created);
    assert!(
        stderr.contains("no store was at this address: created a new, empty one") && stderr.contains(&bucket),
        "{stderr}"
    );
    let exported = machine(&s3, home.path(), &bucket)
        .args(["memory", "export", "--all-actors", "--out"])
        .arg(&second)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&exported.stderr).into_owned();
    ok(exported);
    assert!(!stderr.contains("created a new"), "the store exists now: {stderr}");
    let back = local.path().join("back");
    ok(machine(&s3, home.path(), back.to_str().unwrap()).args(["memory", "import"]).arg(&second).output().unwrap());
    ok(machine(&s3, home.path(), back.to_str().unwrap())
        .args(["memory", "export", "--all-actors", "--out"])
        .arg(&third)
        .output()
        .unwrap());
    let original = rows(&first);
    assert!(original.len() >= 4, "the export holds the imported items, a block and a passage: {original:?}");
    assert_eq!(original, rows(&second), "local → bucket");
    assert_eq!(original, rows(&third), "bucket → local");
}

/// Machines that open one new prefix at the same moment each find its tables absent; of two creations
/// of one table Lance commits the later on top of the earlier, as an overwrite, so a row written
/// between them was lost (a `core_memory_append` of 400 in a trial). A table's creation holds a lease
/// in the bucket: in four rounds of four machines each storing a passage on a new prefix at once,
/// every passage is stored.
#[test]
fn machines_that_start_on_a_new_prefix_at_once_keep_every_first_write() {
    let s3 = S3Server::start();
    let dir = tempfile::tempdir().unwrap();
    for round in 0..4 {
        let bucket = s3.uri(&format!("first-day-{round}"));
        let machines: Vec<_> = (0..4)
            .map(|m| {
                let home = dir.path().join(format!("home-{round}-{m}"));
                let passages = dir.path().join(format!("passage-{round}-{m}.jsonl"));
                let text = format!("Machine {m} of round {round}: the release train leaves on Thursdays.");
                std::fs::write(&passages, json!({"text": text}).to_string() + "\n").unwrap();
                machine(&s3, &home, &bucket)
                    .args(["memory", "ingest"])
                    .arg(&passages)
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for m in machines {
            ok(m.wait_with_output().unwrap());
        }
        let home = dir.path().join(format!("home-{round}-check"));
        let listed = ok(machine(&s3, &home, &bucket).args(["memory", "list", "--table", "archival"]).output().unwrap());
        for m in 0..4 {
            assert!(listed.contains(&format!("Machine {m} of round {round}")), "round {round}, machine {m}: {listed}");
        }
    }
}

/// The S3 server is killed and restarted while a running astra-mcp server takes concurrent inserts:
/// every insert acknowledged before, during or after the outage is in the store, none is there twice,
/// and the astra-mcp server goes on writing and searching without a restart of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_the_s3_server_restarting_under_them() {
    use rmcp::model::CallToolRequestParams;

    let mut s3 = S3Server::start();
    let home = tempfile::tempdir().unwrap();
    let db = s3.uri("restart");
    let client = serve(machine(&s3, home.path(), &db)).await;
    let insert = |i: usize| {
        let arguments = json!({"text": format!("Restart note {i}: token rst{i:04}q"), "tags": []});
        CallToolRequestParams::new("archival_memory_insert").with_arguments(crate::support::args(arguments))
    };
    let (tx, mut acks) = tokio::sync::mpsc::unbounded_channel();
    let peer = client.peer().clone();
    let writers: Vec<_> = (0..60)
        .map(|i| {
            let (peer, tx, request) = (peer.clone(), tx.clone(), insert(i));
            tokio::spawn(async move {
                let result = peer.call_tool(request).await;
                let acknowledged = matches!(&result, Ok(r) if r.is_error != Some(true));
                let _ = tx.send((i, acknowledged));
            })
        })
        .collect();
    drop(tx);
    let mut acknowledged = Vec::new();
    let mut answered = 0;
    while let Some((i, ok)) = acks.recv().await {
        answered += 1;
        if ok {
            acknowledged.push(i);
        }
        if answered == 15 {
            tokio::task::block_in_place(|| s3.restart());
        }
    }
    for writer in writers {
        writer.await.unwrap();
    }
    assert_eq!(answered, 60);
    eprintln!("{} of 60 inserts acknowledged across the S3 server's restart", acknowledged.len());
    assert!(acknowledged.len() >= 15, "most inserts are acknowledged: {acknowledged:?}");
    // the same server writes and finds after the outage
    let after = peer.call_tool(insert(999)).await.unwrap();
    assert_ne!(after.is_error, Some(true), "{after:?}");
    acknowledged.push(999);
    let search = CallToolRequestParams::new("archival_memory_search")
        .with_arguments(crate::support::args(json!({"query": "rst0999q"})));
    let found = peer.call_tool(search).await.unwrap();
    assert!(format!("{found:?}").contains("rst0999q"), "{found:?}");
    client.cancel().await.unwrap();

    let listed = ok(machine(&s3, home.path(), &db)
        .args(["memory", "list", "--table", "archival", "--limit", "1000", "--json"])
        .output()
        .unwrap());
    let texts: Vec<String> = listed
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["preview"].as_str().unwrap().to_string())
        .collect();
    for i in &acknowledged {
        let token = format!("rst{i:04}q");
        let copies = texts.iter().filter(|t| t.contains(&token)).count();
        assert_eq!(copies, 1, "acknowledged insert {i} stored once: {copies} copies");
    }
    let distinct: std::collections::BTreeSet<&String> = texts.iter().collect();
    assert_eq!(distinct.len(), texts.len(), "no passage twice");
}

/// Two machines start a distill run of the same actor on one bucket: the second is refused while the
/// first runs (the run's lease is an object created with `If-None-Match: *`), and once the first has
/// finished the lease is gone and a new run starts.
#[tokio::test]
async fn a_distill_run_started_on_two_machines_at_once_runs_once() {
    use crate::support::{MockModel, ModelStep};
    let s3 = S3Server::start();
    let db = s3.uri("distill");
    let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let transcripts = repo().join("tests/fixtures/transcripts/responses.jsonl");
    ok(machine(&s3, homes[0].path(), &db).args(["sessions", "import"]).arg(&transcripts).output().unwrap());
    let empty = |delay: u64| -> ModelStep {
        Box::new(move |_| {
            wiremock::ResponseTemplate::new(200)
                .set_body_json(json!({
                    "id": "resp_1", "object": "response", "status": "completed",
                    "output": [{"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": json!({"memories": []}).to_string()}]}],
                    "usage": {"input_tokens": 2000, "output_tokens": 150, "total_tokens": 2150}}))
                .set_delay(std::time::Duration::from_secs(delay))
        })
    };
    let slow = MockModel::start(vec![empty(4)]).await;
    let distill = |home: &Path, base_url: String| {
        let mut cmd = machine(&s3, home, &db);
        cmd.args(["distill", "--approve-live-cost", "--base-url", &base_url, "--ledger"])
            .arg(home.join("ledger.jsonl"))
            .env("OPENAI_API_KEY", "sk-test-key");
        cmd
    };
    let mut first = distill(homes[0].path(), slow.base_url());
    let first = tokio::task::spawn_blocking(move || first.output().unwrap());
    while slow.requests().is_empty() {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let other = MockModel::start(vec![empty(0)]).await;
    let refused = distill(homes[1].path(), other.base_url()).output().unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("a distill run of actor `ann` is already running"), "{stderr}");
    assert!(other.requests().is_empty(), "the refused run sent nothing");
    let first = ok(first.await.unwrap());
    assert!(first.contains("SUCCEEDED"), "{first}");
    // the lease went with the first run: the second machine runs now (nothing new to read)
    let again = MockModel::start(vec![empty(0)]).await;
    let second = ok(distill(homes[1].path(), again.base_url()).output().unwrap());
    assert!(second.contains("SUCCEEDED"), "{second}");
    let locks = walk(&s3.root.path().join(S3Server::BUCKET));
    assert!(!locks.iter().any(|p| p.contains("_astra-mcp/locks/")), "no lease left: {locks:?}");
}

/// An MCP client of `astra-mcp serve --stdio` started as `machine` builds it.
async fn serve(machine: Command) -> rmcp::service::RunningService<rmcp::RoleClient, ()> {
    use rmcp::ServiceExt;
    use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
    let transport = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|cmd| {
        cmd.env_clear().args(["serve", "--stdio"]);
        for (k, v) in machine.get_envs() {
            if let Some(v) = v {
                cmd.env(k, v);
            }
        }
    }))
    .unwrap();
    ().serve(transport).await.unwrap()
}

/// The text of a tool's answer, after checking it is not an error.
async fn call(peer: &rmcp::Peer<rmcp::RoleClient>, tool: &'static str, arguments: Value) -> String {
    let request = rmcp::model::CallToolRequestParams::new(tool).with_arguments(crate::support::args(arguments));
    let result = peer.call_tool(request).await.unwrap();
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect::<Vec<_>>().join("\n")
}

/// A server on a bucket keeps in memory what it read of the files Lance never rewrites. A passage it
/// found, then forgotten on another machine, is gone from its searches within the read lag all the
/// same (the deletion is a new file and a new manifest, read from the bucket), and a passage inserted
/// there later is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passage_forgotten_on_one_machine_is_gone_from_the_other_s_searches() {
    let s3 = S3Server::start();
    let db = s3.uri("forget");
    let (home_a, home_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = serve(machine(&s3, home_a.path(), &db)).await;
    let b = serve(machine(&s3, home_b.path(), &db)).await;
    let stored =
        call(a.peer(), "archival_memory_insert", json!({"text": "The ledger export runs nightly; token fgt0001q."}))
            .await;
    let id = regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
        .unwrap()
        .find(&stored)
        .unwrap_or_else(|| panic!("no id in {stored}"))
        .as_str()
        .to_string();
    let search = |token: &'static str| call(b.peer(), "archival_memory_search", json!({"query": token}));
    // B reads the passage's files, as a search of the bucket would (more than once: the read lag)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !search("fgt0001q").await.contains(&id) {
        assert!(std::time::Instant::now() < deadline, "B never found A's passage");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(search("fgt0001q").await.contains(&id), "found again, from what B read");

    call(a.peer(), "memory_forget", json!({"id": id})).await;
    call(a.peer(), "archival_memory_insert", json!({"text": "The invoice queue drains hourly; token fgt0002q."})).await;
    let forgotten = std::time::Instant::now();
    loop {
        let (old, new) = (search("fgt0001q").await, search("fgt0002q").await);
        if !old.contains(&id) && new.contains("fgt0002q") {
            break;
        }
        assert!(forgotten.elapsed().as_secs() < 5, "after {:?}: old {old}\nnew {new}", forgotten.elapsed());
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    eprintln!("B saw the forgetting and the new passage {:?} after A's calls", forgotten.elapsed());
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

/// An S3 server that stops answering (SIGSTOP: the kernel accepts connections, nothing answers them)
/// holds no tool call past `--tool-timeout`, when the object-store client alone would retry for
/// minutes: a first call while the store opens is refused, a call on the open store is answered
/// `isError`, both to call again; once the server answers again, the same astra-mcp opens, stores and
/// finds without a restart of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_object_store_holds_no_tool_call_past_the_tool_timeout() {
    use rmcp::model::CallToolRequestParams;
    use std::time::Duration;

    let s3 = S3Server::start();
    let home = tempfile::tempdir().unwrap();
    let mut m = machine(&s3, home.path(), &s3.uri("frozen"));
    m.env("ASTRA_TOOL_TIMEOUT", "3");
    s3.pause();
    // `initialize` is answered while the store opens; the first call waits for the opening
    let client = serve(m).await;
    let peer = client.peer().clone();
    let first = CallToolRequestParams::new("archival_memory_search")
        .with_arguments(crate::support::args(json!({"query": "cron"})));
    let (answer, waited) = while_frozen(&s3, peer.call_tool(first)).await;
    let refused = answer.unwrap_err();
    assert!(refused.to_string().contains("the memory store did not open within 3 s (--tool-timeout)"), "{refused}");
    assert!(waited >= Duration::from_secs(3) && waited < Duration::from_secs(10), "answered after {waited:?}");

    call(
        &peer,
        "archival_memory_insert",
        json!({"text": "Before the freeze: the cron runs at 02:00; token frz0001q."}),
    )
    .await;

    let insert = CallToolRequestParams::new("archival_memory_insert")
        .with_arguments(crate::support::args(json!({"text": "During the freeze: token frz0002q."})));
    let (answer, waited) = while_frozen(&s3, peer.call_tool(insert)).await;
    let result = answer.unwrap();
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let text: String = result.content.iter().filter_map(|c| c.as_text().map(|t| t.text.clone())).collect();
    assert!(
        text.starts_with(
            "archival_memory_insert failed: the memory store did not answer within 3 s. Call it again in a moment \
             (a memory stored twice is kept once)"
        ),
        "{text}"
    );
    assert!(waited >= Duration::from_secs(3) && waited < Duration::from_secs(10), "answered after {waited:?}");

    // a read of core memory (a resource) is bounded the same way, whether it needs the store or not
    let request = rmcp::model::ReadResourceRequestParams::new("memory://core/human");
    let (read, waited) = while_frozen(&s3, peer.read_resource(request)).await;
    match read {
        Ok(_) => {}
        Err(e) => assert!(e.to_string().contains("did not answer within 3 s (--tool-timeout)"), "{e}"),
    }
    assert!(waited < Duration::from_secs(10), "answered after {waited:?}");

    call(&peer, "archival_memory_insert", json!({"text": "After the freeze: token frz0003q."})).await;
    for token in ["frz0001q", "frz0003q"] {
        let found = call(&peer, "archival_memory_search", json!({"query": token})).await;
        assert!(found.contains(token), "{token}: {found}");
    }
    client.cancel().await.unwrap();
}

/// The memory browser is bounded the same way: with the S3 server stopped, a change of a core block
/// answers 503 within `--tool-timeout`, saying the change may or may not be made, and once the server
/// answers again the same astra-mcp serves the page, without a restart of its own; `astra-mcp ui`
/// answers the same within its own `--tool-timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_object_store_holds_no_memory_browser_page_past_the_tool_timeout() {
    use std::io::BufRead;
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    /// The first stdout line of `command`, started (`serve`'s MCP URL, `ui`'s login URL), and the process.
    fn started(mut command: Command) -> (Killed, String) {
        let mut child = Killed(command.stdout(std::process::Stdio::piped()).spawn().unwrap());
        let mut line = String::new();
        std::io::BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
        (child, line.trim().to_string())
    }
    let s3 = S3Server::start();
    let home = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let cookie_of =
        |r: &reqwest::Response| r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();

    let mut m = machine(&s3, home.path(), &s3.uri("frozen-ui"));
    m.args(["serve", "--http", "127.0.0.1:0"]).env("ASTRA_TOOL_TIMEOUT", "3");
    let (server, url) = started(m);
    let base = url.strip_suffix("/mcp").unwrap_or_else(|| panic!("first stdout line: {url:?}")).to_string();
    let first = client.get(format!("{base}/core")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let cookie = cookie_of(&first);
    edit_while_frozen(&s3, &client, &base, &cookie).await;
    let page = client.get(format!("{base}/core/project")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), 200, "the same server serves the page once the store answers");
    drop(server);

    // `astra-mcp ui` takes the same bound
    let mut m = machine(&s3, home.path(), &s3.uri("frozen-ui"));
    m.args(["ui", "--no-open", "--tool-timeout", "3"]);
    let (ui, url) = started(m);
    let login = client.get(&url).send().await.unwrap();
    assert_eq!(login.status(), 303, "the one-time URL logs in: {url}");
    let base = url.split("/login").next().unwrap();
    edit_while_frozen(&s3, &client, base, &cookie_of(&login)).await;
    drop(ui);
}

/// Opens block `project` in the memory browser at `base`, then sends an edit of it with the S3 server
/// stopped: it must answer 503 within the server's 3 s `--tool-timeout`.
async fn edit_while_frozen(s3: &S3Server, client: &reqwest::Client, base: &str, cookie: &str) {
    use std::time::Duration;
    let html = client.get(format!("{base}/core/project")).header("cookie", cookie).send().await.unwrap();
    let html = html.text().await.unwrap();
    let field = |name: &str| {
        let at = html.find(&format!("name=\"{name}\" value=\"")).unwrap_or_else(|| panic!("no {name}: {html}"));
        html[at..].split('"').nth(3).unwrap().to_string()
    };
    let edit = client
        .post(format!("{base}/core/project"))
        .header("cookie", cookie)
        .header("origin", base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={}&value=written+while+frozen&version={}", field("csrf"), field("version")))
        .send();
    let (answer, waited) = while_frozen(s3, edit).await;
    let answer = answer.unwrap();
    assert_eq!(answer.status(), 503);
    let text = answer.text().await.unwrap();
    assert!(text.contains("did not answer within 3 s. Your change may or may not be made"), "{text}");
    assert!(waited >= Duration::from_secs(3) && waited < Duration::from_secs(10), "answered after {waited:?}");
}

/// Awaits `request` with the S3 server stopped (stopping it again is harmless), then lets it go on;
/// the answer, which must come within 60 s (the object-store client alone retries for minutes), and
/// how long it took.
async fn while_frozen<T>(s3: &S3Server, request: impl std::future::Future<Output = T>) -> (T, std::time::Duration) {
    s3.pause();
    let started = std::time::Instant::now();
    let answer = tokio::time::timeout(std::time::Duration::from_secs(60), request).await;
    let waited = started.elapsed();
    s3.resume();
    (answer.expect("an answer long before the object-store client gives up"), waited)
}
