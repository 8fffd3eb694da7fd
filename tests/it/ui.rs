//! The memory browser over raw HTTP against the real binary (docs/ui.md): who sees what, escaping of
//! stored text, CSRF and origin checks on every change, forgetting that reaches the MCP search, core
//! block edits and restores, and `astra-mcp ui`'s one-time URL. The same flows in a real browser are in
//! `browser.rs`.

use std::path::Path;

use serde_json::{Value, json};

use crate::http::{ALICE, BOB, call, config_with_tokens, open_session, post};
use crate::support::HttpServer as Server;

/// A client that shows redirects instead of following them.
fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// An `application/x-www-form-urlencoded` body, as a browser sends a form.
fn form(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
    pairs.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
}

/// The `astra_session=…` pair of a response's `Set-Cookie`.
fn session_cookie(response: &reqwest::Response) -> String {
    let set = response
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|v| v.starts_with("astra_session="))
        .unwrap_or_else(|| panic!("no session cookie in {:?}", response.headers()));
    assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict"), "{set}");
    set.split(';').next().unwrap().to_string()
}

/// Logs in with a bearer token through the form; returns the cookie.
async fn log_in(base: &str, token: &str) -> String {
    let response = client()
        .post(format!("{base}/login"))
        .header("origin", base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", token)]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303, "a token logs in and goes to the overview");
    session_cookie(&response)
}

async fn get(base: &str, path: &str, cookie: &str) -> (u16, String) {
    let response = client().get(format!("{base}{path}")).header("cookie", cookie).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The CSRF token of the first form of a page.
fn csrf(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a form with a CSRF token") + "name=\"csrf\" value=\"".len();
    page[at..].split('"').next().unwrap().to_string()
}

/// Inserts a passage over MCP as the token's actor; returns its id.
async fn insert(url: &str, token: &str, text: &str) -> String {
    let bearer = format!("Bearer {token}");
    let session = open_session(url, &[("authorization", &bearer)]).await;
    let (status, _, body) = post(
        url,
        &[("authorization", &bearer)],
        Some(&session),
        call(1, "archival_memory_insert", json!({"text": text, "tags": ["ui-test"]})),
    )
    .await;
    assert_eq!(status, 200, "{body:?}");
    body[0]["result"]["structuredContent"]["id"].as_str().expect("an id").to_string()
}

async fn mcp_search(url: &str, token: &str, query: &str) -> Vec<Value> {
    let bearer = format!("Bearer {token}");
    let session = open_session(url, &[("authorization", &bearer)]).await;
    let args = json!({"query": query, "tags": null, "top_k": 10, "start": null, "end": null});
    let (_, _, body) =
        post(url, &[("authorization", &bearer)], Some(&session), call(2, "archival_memory_search", args)).await;
    body[0]["result"]["structuredContent"]["results"].as_array().cloned().unwrap_or_default()
}

fn start_with_tokens(dir: &Path) -> Server {
    let config = config_with_tokens(dir);
    Server::start(&dir.join("db"), &["--config", config.to_str().unwrap()])
}

#[tokio::test]
async fn each_actor_sees_only_its_own_memories_and_stored_html_is_inert() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_tokens(dir.path());
    let base = server.base().to_string();
    let script =
        insert(&server.url, ALICE, "<script>alert('pwned')</script> the retry loop needs a jittered backoff").await;
    let bobs = insert(&server.url, BOB, "bob's private note about the staging database password rotation").await;

    // no session: every page sends the browser to the login form
    let response = client().get(format!("{base}/archival")).send().await.unwrap();
    assert_eq!(response.status(), 303);
    assert_eq!(response.headers()["location"], "/login");
    let response = client()
        .post(format!("{base}/login"))
        .header("origin", &base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("token", "not-a-token")]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401, "a wrong token does not log in");

    let alice = log_in(&base, ALICE).await;
    let (status, page) = get(&base, "/archival", &alice).await;
    assert_eq!(status, 200);
    assert!(page.contains("&lt;script&gt;alert("), "stored HTML is shown as text: {page}");
    assert!(!page.contains("<script>"), "no stored markup reaches the page");
    assert!(page.contains(&script) && !page.contains(&bobs), "alice lists her passage, not bob's");
    let (status, _) = get(&base, &format!("/archival/{bobs}"), &alice).await;
    assert_eq!(status, 404, "another actor's passage is not found, also by direct URL");
    let (status, _) = get(&base, &format!("/forget/{bobs}"), &alice).await;
    assert_eq!(status, 404);
    let (status, page) = get(&base, &format!("/archival/{script}"), &alice).await;
    assert_eq!(status, 200);
    assert!(page.contains("jittered backoff") && page.contains("ui-test"), "the passage with its tags: {page}");

    let response = client().get(format!("{base}/")).header("cookie", &alice).send().await.unwrap();
    let csp = response.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("default-src 'none'") && !csp.contains("script-src"), "no script may run: {csp}");

    let bob = log_in(&base, BOB).await;
    let (_, page) = get(&base, "/search?q=staging+database+password&table=archival", &bob).await;
    assert!(page.contains(&bobs), "bob's search finds his passage: {page}");
    assert!(page.contains("cosine") && page.contains("BM25"), "a hit shows both rankings: {page}");
    let (_, page) = get(&base, "/search?q=jittered+backoff+retry&table=all", &bob).await;
    assert!(!page.contains(&script), "bob's search never finds alice's passage");
}

/// The browser shows how a passage was used, marks an expired one, and its Restore (CSRF-checked) brings
/// it back into the MCP search.
#[tokio::test]
async fn a_used_passage_shows_its_uses_and_an_expired_one_is_restored() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_tokens(dir.path());
    let base = server.base().to_string();
    let used = insert(&server.url, ALICE, "the nightly export job writes to the reports bucket").await;
    assert_eq!(mcp_search(&server.url, ALICE, "nightly export job reports bucket").await[0]["id"], used.as_str());
    let old = "the legacy billing cron restarts the ledger service on Sundays";
    let expired = crate::uses::old_passage_of(&dir.path().join("db"), "alice", "web", old, 200).await.to_string();
    assert!(
        mcp_search(&server.url, ALICE, "legacy billing cron ledger").await.iter().all(|r| r["id"] != expired.as_str())
    );

    let alice = log_in(&base, ALICE).await;
    // the use is written off the search's path: the page shows it once it is committed
    let mut page = String::new();
    for _ in 0..50 {
        page = get(&base, &format!("/archival/{used}"), &alice).await.1;
        if page.contains("<dd>used ") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // returned by the first search, and by the second when its cosine passed the floor
    assert!(page.contains("<dt>Used</dt><dd>used ") && page.contains(", last <time>"), "{page}");
    assert!(!page.contains("/restore/"), "not expired: no restore");
    let (_, list) = get(&base, "/archival", &alice).await;
    assert_eq!(list.matches(">expired</span>").count(), 1, "only the old passage is marked: {list}");
    let (_, page) = get(&base, &format!("/archival/{expired}"), &alice).await;
    assert!(page.contains("Expired:") && page.contains("never used"), "{page}");
    let restore = |csrf: String| {
        client()
            .post(format!("{base}/restore/{expired}"))
            .header("cookie", &alice)
            .header("origin", &base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("csrf", csrf.as_str())]))
            .send()
    };
    assert_eq!(restore("forged".into()).await.unwrap().status(), 403, "a wrong CSRF token restores nothing");
    let done = restore(csrf(&page)).await.unwrap();
    assert_eq!(done.status(), 303);
    assert_eq!(done.headers()["location"], format!("/archival/{expired}"));
    assert!(
        mcp_search(&server.url, ALICE, "legacy billing cron ledger").await.iter().any(|r| r["id"] == expired.as_str())
    );
    let (_, page) = get(&base, &format!("/archival/{expired}"), &alice).await;
    assert!(!page.contains("Expired:"), "{page}");
}

#[tokio::test]
async fn forgetting_needs_csrf_and_the_own_origin_then_the_mcp_search_loses_it() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_with_tokens(dir.path());
    let base = server.base().to_string();
    let id = insert(&server.url, ALICE, "the flaky upload test times out because the S3 mock is slow").await;
    let alice = log_in(&base, ALICE).await;
    let (status, page) = get(&base, &format!("/forget/{id}"), &alice).await;
    assert_eq!(status, 200, "a confirmation page comes first");
    let token = csrf(&page);

    let forget = |origin: &str, csrf: &str| {
        client()
            .post(format!("{base}/forget/{id}"))
            .header("cookie", &alice)
            .header("origin", origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("csrf", csrf)]))
            .send()
    };
    assert_eq!(forget(&base, "forged").await.unwrap().status(), 403, "a wrong CSRF token is refused");
    assert_eq!(
        forget("http://127.0.0.1:9", &token).await.unwrap().status(),
        403,
        "another origin, even on loopback, is refused"
    );
    assert_eq!(forget("http://evil.example", &token).await.unwrap().status(), 403, "a foreign origin is refused");
    let no_cookie = client()
        .post(format!("{base}/forget/{id}"))
        .header("origin", &base)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form(&[("csrf", token.as_str())]))
        .send()
        .await
        .unwrap();
    assert_eq!(no_cookie.status(), 401, "without a session nothing is forgotten, and the page says so");
    let page = no_cookie.text().await.unwrap();
    assert!(page.contains("so nothing was changed") && page.contains("repeat the change"), "{page}");
    assert_eq!(mcp_search(&server.url, ALICE, "flaky upload test S3 mock").await.len(), 1, "still stored");

    let done = forget(&base, &token).await.unwrap();
    assert_eq!(done.status(), 303);
    assert_eq!(done.headers()["location"], format!("/archival?forgot={id}"));
    let found = mcp_search(&server.url, ALICE, "flaky upload test S3 mock").await;
    assert!(found.iter().all(|r| r["id"] != id.as_str()), "forgotten from the MCP search too: {found:?}");
    let (status, _) = get(&base, &format!("/archival/{id}"), &alice).await;
    assert_eq!(status, 404);
    // the same form sent again (a second tab): nothing to forget, and it says why
    let again = forget(&base, &token).await.unwrap();
    assert_eq!(again.status(), 404);
    let page = again.text().await.unwrap();
    assert!(page.contains("it may be forgotten already") && !page.contains("is not yours"), "{page}");
}

#[tokio::test]
async fn a_core_block_is_edited_within_its_limit_and_an_old_version_restored() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // loopback without tokens: the page acts for the server's actor without a login
    let server = Server::start(&db, &["--actor", "carol", "--project", "web", "--core-blocks", "style=40"]);
    let base = server.base().to_string();
    let first = client().get(format!("{base}/core/style")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let cookie = session_cookie(&first);
    let page = first.text().await.unwrap();
    assert!(page.contains("actor <strong>carol</strong>"), "{page}");
    let token = csrf(&page);
    let edit = |value: &str, version: &str| {
        client()
            .post(format!("{base}/core/style"))
            .header("cookie", &cookie)
            .header("origin", &base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("csrf", token.as_str()), ("value", value), ("version", version)]))
            .send()
    };
    let saved = edit("tabs, not spaces", "0").await.unwrap();
    assert_eq!(saved.status(), 303);
    assert_eq!(saved.headers()["location"], "/core/style?saved=1");
    assert_eq!(edit("two spaces", "1").await.unwrap().status(), 303);
    let stale = edit("written on an old page", "1").await.unwrap();
    assert_eq!(stale.status(), 409, "an edit of a version that is not the current one is refused");
    let page = stale.text().await.unwrap();
    assert!(page.contains(">\nwritten on an old page</textarea>"), "the refused text stays in the form: {page}");
    assert!(page.contains("name=\"version\" value=\"2\""), "saving it again goes over version 2: {page}");
    let long = edit(&"x".repeat(41), "2").await.unwrap();
    assert_eq!(long.status(), 409);
    let page = long.text().await.unwrap();
    assert!(page.contains("over its limit of 40") && page.contains("Shorten the text."), "{page}");
    assert!(!page.contains("core_memory_replace"), "a person is not told to call a tool: {page}");
    assert!(page.contains(&format!(">\n{}</textarea>", "x".repeat(41))), "{page}");

    let restore = |current: &str| {
        client()
            .post(format!("{base}/core/style/restore"))
            .header("cookie", &cookie)
            .header("origin", &base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("csrf", token.as_str()), ("version", "1"), ("current", current)]))
            .send()
    };
    // a page that showed version 1 would restore over version 2, which it never saw: refused
    let stale = restore("1").await.unwrap();
    assert_eq!(stale.status(), 409);
    assert!(stale.text().await.unwrap().contains("changed since you opened it"));
    assert_eq!(restore("2").await.unwrap().status(), 303);
    let (_, page) = get(&base, "/core/style?from=2&to=3", &cookie).await;
    assert!(page.contains(">\ntabs, not spaces</textarea>"), "version 1's value is current again: {page}");
    assert!(page.contains("<span class=\"del\">- two spaces</span>"), "the diff shows the change: {page}");
    // a value that starts with a line break keeps it: HTML drops one line break after <textarea>, so the
    // page writes one more
    assert_eq!(edit("\nafter a blank line", "3").await.unwrap().status(), 303);
    let (_, page) = get(&base, "/core/style", &cookie).await;
    assert!(page.contains(">\n\nafter a blank line</textarea>"), "{page}");
    assert_eq!(restore("4").await.unwrap().status(), 303, "version 1 again, for the check below");
    drop(server);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"))
        .args(["core", "show", "--actor", "carol", "--project", "web", "--core-blocks", "style=40", "--db"])
        .arg(&db)
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(shown.contains("tabs, not spaces") && !shown.contains("two spaces"), "{shown}");
}

/// An old version of a core block is purged from its history after a confirmation page: no page or export
/// shows its text again; the current version is refused (a new version comes first), and so is a version
/// purged already.
#[tokio::test]
async fn an_old_core_block_version_is_purged_from_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &["--actor", "carol", "--project", "web"]);
    let base = server.base().to_string();
    let first = client().get(format!("{base}/core/project")).send().await.unwrap();
    let cookie = session_cookie(&first);
    let token = csrf(&first.text().await.unwrap());
    let post = |path: &str, pairs: &[(&str, &str)]| {
        client()
            .post(format!("{base}{path}"))
            .header("cookie", &cookie)
            .header("origin", &base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(pairs))
            .send()
    };
    let t = token.as_str();
    for (value, version) in [("the staging door code is 4921", "0"), ("deploys go through staging", "1")] {
        let saved = post("/core/project", &[("csrf", t), ("value", value), ("version", version)]).await.unwrap();
        assert_eq!(saved.status(), 303);
    }
    let (_, page) = get(&base, "/core/project", &cookie).await;
    assert!(page.contains("href=\"/core/project/purge?version=1\""), "an old version offers a purge: {page}");
    assert!(!page.contains("purge?version=2"), "the current one does not: {page}");
    let (status, confirm) = get(&base, "/core/project/purge?version=1", &cookie).await;
    assert_eq!(status, 200);
    assert!(confirm.contains("the staging door code is 4921") && confirm.contains("Purge version 1"), "{confirm}");

    let current = post("/core/project/purge", &[("csrf", t), ("version", "2")]).await.unwrap();
    assert_eq!(current.status(), 409);
    assert!(current.text().await.unwrap().contains("is the current value of block `project`"));
    let forged = post("/core/project/purge", &[("csrf", "not-the-token"), ("version", "1")]).await.unwrap();
    assert_eq!(forged.status(), 403, "a purge needs the page's CSRF token");
    let by_hand = post("/core/project/purge", &[("version", "1")]).await.unwrap();
    assert_eq!(by_hand.status(), 400, "a form without its fields is the browser's own page, not a 422");
    let page = by_hand.text().await.unwrap();
    assert!(page.contains("missing field `csrf`") && page.contains("Send the form from its page."), "{page}");

    let purged = post("/core/project/purge", &[("csrf", t), ("version", "1")]).await.unwrap();
    assert_eq!(purged.status(), 303);
    assert_eq!(purged.headers()["location"], "/core/project?purged=1");
    let (_, page) = get(&base, "/core/project?purged=1", &cookie).await;
    assert!(page.contains("Version 1 is purged from the history"), "{page}");
    assert!(!page.contains("4921") && page.contains("deploys go through staging"), "{page}");
    // version 2's diff is against the version before it that is left: none
    assert!(page.contains("?from=0&amp;to=2\">Diff</a>"), "{page}");
    assert!(page.contains("<span class=\"ins\">+ deploys go through staging</span>"), "{page}");
    let (_, page) = get(&base, "/core/project?from=1&to=2", &cookie).await;
    assert!(page.contains("Version 1 is not in this block&#x27;s history (purged, or never written)"), "{page}");
    let (_, export) = get(&base, "/export", &cookie).await;
    assert!(!export.contains("4921") && export.contains("deploys go through staging"), "{export}");
    let again = post("/core/project/purge", &[("csrf", t), ("version", "1")]).await.unwrap();
    assert_eq!(again.status(), 409);
    assert!(again.text().await.unwrap().contains("has no version 1 (purged already?); its versions are 2"));
    let (status, _) = get(&base, "/core/project/purge?version=1", &cookie).await;
    assert_eq!(status, 404);
}

/// An edit sent after its session ended (here the server restarted: sessions live in its memory) saves
/// nothing and loses nothing: an open listener shows the block's page again in a new session with the
/// text in the form, and saving that form works; behind a login the text is quoted to copy (401).
#[tokio::test]
async fn an_edit_after_a_restart_keeps_its_text() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let flags = ["--actor", "carol", "--project", "web"];
    let before = Server::start(&db, &flags);
    let first = client().get(format!("{}/core/project", before.base())).send().await.unwrap();
    let (old_cookie, old_token) = (session_cookie(&first), csrf(&first.text().await.unwrap()));
    drop(before);
    let server = Server::start(&db, &flags);
    let base = server.base().to_string();
    let edit = |cookie: &str, token: &str, value: &str| {
        client()
            .post(format!("{base}/core/project"))
            .header("cookie", cookie)
            .header("origin", &base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("csrf", token), ("value", value), ("version", "0")]))
            .send()
    };
    let typed = "typed before the restart <b>kept</b>";
    let lost = edit(&old_cookie, &old_token, typed).await.unwrap();
    assert_eq!(lost.status(), 409);
    let cookie = session_cookie(&lost);
    let page = lost.text().await.unwrap();
    assert!(page.contains("Your session had ended") && page.contains("nothing was changed"), "{page}");
    assert!(page.contains(">\ntyped before the restart &lt;b&gt;kept&lt;&#x2f;b&gt;</textarea>"), "{page}");
    let token = csrf(&page);
    assert_ne!(token, old_token);
    let (_, shown) = get(&base, "/core/project", &cookie).await;
    assert!(shown.contains("Never written."), "nothing was saved: {shown}");
    assert_eq!(edit(&cookie, &token, typed).await.unwrap().status(), 303, "the form of that page saves");
    let (_, shown) = get(&base, "/core/project", &cookie).await;
    assert!(shown.contains("typed before the restart &lt;b&gt;kept"), "{shown}");
    drop(server);

    // behind a login
    let server = start_with_tokens(dir.path());
    let base = server.base().to_string();
    let draft_from = |origin: &str| {
        client()
            .post(format!("{base}/core/project"))
            .header("cookie", &cookie)
            .header("origin", origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form(&[("csrf", token.as_str()), ("value", "a second draft"), ("version", "1")]))
            .send()
    };
    let response = draft_from(&base).await.unwrap();
    assert_eq!(response.status(), 401);
    let page = response.text().await.unwrap();
    assert!(page.contains("log in again") && page.contains(">a second draft</pre>"), "{page}");
    // from another origin the same post is refused before anything is shown
    let response = draft_from("http://evil.example").await.unwrap();
    assert_eq!(response.status(), 403);
    assert!(!response.text().await.unwrap().contains("a second draft"));
}

#[tokio::test]
async fn ui_prints_a_url_that_logs_in_once_and_serves_no_mcp() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    // a mistyped --db is refused, not opened as a new, empty store
    let missing = std::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"))
        .args(["ui", "--no-open", "--actor", "dave", "--db"])
        .arg(dir.path().join("db"))
        .env("ASTRA_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no memory store at"), "{missing:?}");
    assert!(!dir.path().join("db").exists(), "nothing created");
    astra_mcp::store::lance::LanceStore::open(dir.path().join("db").to_str().unwrap()).await.unwrap();
    /// The `ui` process, killed when the test ends, also by a failed assertion (it holds the harness's
    /// stderr open).
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_astra-mcp"))
            .args(["ui", "--no-open", "--actor", "dave", "--db"])
            .arg(dir.path().join("db"))
            .env("ASTRA_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    std::io::BufReader::new(child.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().to_string();
    let base = url.split("/login").next().unwrap().to_string();
    assert!(url.starts_with("http://127.0.0.1:") && url.contains("/login?code="), "{url}");

    let response = client().get(format!("{base}/")).send().await.unwrap();
    assert_eq!(response.status(), 303, "without the code nobody is logged in");
    // a link preview's HEAD does not use the code up
    let preview = client().head(&url).send().await.unwrap();
    assert_eq!(preview.status(), 200);
    assert!(preview.headers().get("set-cookie").is_none());
    let response = client().get(&url).send().await.unwrap();
    assert_eq!(response.status(), 303);
    let cookie = session_cookie(&response);
    let (status, page) = get(&base, "/", &cookie).await;
    assert_eq!(status, 200);
    assert!(page.contains("actor <strong>dave</strong>"));
    let again = client().get(&url).send().await.unwrap();
    assert_eq!(again.status(), 401, "the code works once");
    let mcp = client().post(format!("{base}/mcp")).body("{}").send().await.unwrap();
    assert_eq!(mcp.status(), 404, "`ui` serves the browser alone");

    // bad addresses get the browser's own pages that say what is wrong
    for path in ["/archival?page=-1", "/core/human?from=abc", "/search?q=a&q=b"] {
        let (status, page) = get(&base, path, &cookie).await;
        assert_eq!(status, 400, "{path}");
        assert!(page.contains("<title>") && page.contains("Fix the address"), "{path}: {page}");
    }
    let (status, page) = get(&base, "/search?q=cache&table=bogus", &cookie).await;
    assert_eq!(status, 200);
    assert!(page.contains("no table `bogus`"), "{page}");
}

#[tokio::test]
async fn pages_of_a_listing_are_newest_first_and_count_the_whole_listing() {
    use astra_mcp::memory::GateState;

    use crate::support::{call as tool, config, host};
    let dir = tempfile::tempdir().unwrap();
    let host = host(&dir.path().join("db"), config("erin", "web", None, None)).await;
    let other = crate::support::host(&dir.path().join("db"), config("frank", "web", None, None)).await;
    let session = GateState::new("s-1");
    for n in 0..30 {
        let text = format!("note {n:02}: the cache key of report {n} includes the tenant id");
        let tags = if n % 10 == 0 { json!(["tenth"]) } else { json!([]) };
        tool(&host, &session, "archival_memory_insert", json!({"text": text, "tags": tags})).await;
    }
    tool(&other, &GateState::new("s-2"), "archival_memory_insert", json!({"text": "frank's note", "tags": ["tenth"]}))
        .await;
    let browse = &host.memories().browse;
    let first = browse.passage_page("erin", None, 0, 25).await.unwrap();
    let second = browse.passage_page("erin", None, 25, 25).await.unwrap();
    assert_eq!((first.total, first.rows.len(), second.total, second.rows.len()), (30, 25, 30, 5));
    assert!(first.rows[0].text.starts_with("note 29"), "newest first: {}", first.rows[0].text);
    assert!(second.rows[4].text.starts_with("note 00"), "oldest last: {}", second.rows[4].text);
    let tagged = browse.passage_page("erin", Some("tenth"), 0, 25).await.unwrap();
    let texts: Vec<&str> = tagged.rows.iter().map(|p| &p.text[..7]).collect();
    assert_eq!(texts, ["note 20", "note 10", "note 00"], "only the tag's passages, only erin's");

    // the recorded tool calls are one thread of 30 items (plus frank's, not erin's)
    host.flush().await;
    let sessions = browse.session_page("erin", 0, 25).await.unwrap();
    assert_eq!(sessions.total, 1);
    assert_eq!((sessions.rows[0].session_id.as_str(), sessions.rows[0].items), ("s-1", 30));
    let items = browse.session_items_page("erin", "s-1", 25, 25).await.unwrap();
    assert_eq!((items.total, items.rows.len()), (30, 5));
    assert_eq!(items.rows.iter().map(|i| i.turn).collect::<Vec<_>>(), [25, 26, 27, 28, 29], "turn order");
    assert_eq!(browse.session_items_page("frank", "s-1", 0, 25).await.unwrap().total, 0, "not frank's session");

    let census = browse.census("erin", 3).await.unwrap();
    assert!(census.per_project.contains(&("archival", "web".to_string(), 30)), "{:?}", census.per_project);
    assert_eq!(census.per_day.iter().map(|d| d.1).sum::<usize>(), 60, "30 passages and 30 items, every day");
    assert_eq!(census.latest.len(), 3);
}
