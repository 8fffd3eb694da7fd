//! Core memory: every block against its limit; one block's value in an edit form, its history, the diff
//! between two versions, restore, and the purge of an old version.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;
use serde_json::{Value, json};

use super::access::Denied;
use super::site::{
    Params, Posted, SESSION_ENDED, Ui, Visit, change, denied, failed, kept_text, memories_of, not_found, page, time,
    urlencode, visit,
};
use crate::memory::{Block, MemoryError};

/// `/core`: every core memory block with its size against its limit.
pub async fn core(State(ui): State<Ui>, jar: CookieJar) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let blocks = match v.memories.core.read_all().await {
        Ok(b) => b,
        Err(e) => return failed(&ui, &e),
    };
    let rows: Vec<Value> = blocks
        .iter()
        .map(|b| {
            json!({"name": b.spec.name, "chars": b.chars(), "limit": b.spec.limit, "version": b.version,
                   "updated_at": b.updated_at.map(time), "value": b.value, "over": b.chars() > b.spec.limit})
        })
        .collect();
    page(&ui, v, "core.html", "/core", "Core memory", json!({"blocks": rows}))
}

#[derive(Debug, Deserialize, Default)]
pub struct BlockQuery {
    from: Option<i64>,
    to: Option<i64>,
    saved: Option<i64>,
    purged: Option<i64>,
}

/// A refused change, shown above the block's page again.
struct Refusal {
    why: String,
    /// The text of a refused edit, put back in the form so that nothing typed is lost.
    draft: Option<String>,
}

/// The page of one block: its value in an edit form, its history, and a diff between two versions.
/// With a refusal: status 409, the reason on top, and the refused edit's text in the form, over the
/// current version (saving it again then replaces what the page now shows).
async fn block_page(ui: &Ui, v: Visit, section: &str, q: &BlockQuery, refusal: Option<Refusal>) -> Response {
    if !v.memories.core.blocks().iter().any(|b| b.name == section) {
        return not_found(ui, "That core memory block");
    }
    let (block, history) = match (v.memories.core.read(section).await, v.memories.core.history(section).await) {
        (Ok(b), Ok(h)) => (b, h),
        (Err(e), _) | (_, Err(e)) => return failed(ui, &e),
    };
    // the version before `version` in the history (0: none); purged versions leave gaps in the numbers
    let before = |version: i64| history.iter().map(|h| h.version).filter(|v| *v < version).max().unwrap_or(0);
    let versions: Vec<Value> = history
        .iter()
        .rev()
        .map(|h| {
            json!({"version": h.version, "before": before(h.version), "operation": h.operation,
                   "created_at": time(h.created_at), "chars": h.value.chars().count(), "session_id": h.session_id,
                   "current": h.version == block.version})
        })
        .collect();
    let to = q.to.unwrap_or(block.version);
    let from = q.from.unwrap_or_else(|| before(to));
    let value_of = |version: i64| history.iter().find(|h| h.version == version).map(|h| h.value.as_str());
    let diff = match (value_of(from).or((from == 0).then_some("")), value_of(to)) {
        (Some(old), Some(new)) if to > 0 => {
            // a last line without its newline is still the same line
            let (old, new) = (format!("{}\n", old.trim_end_matches('\n')), format!("{}\n", new.trim_end_matches('\n')));
            let lines: Vec<Value> = similar::TextDiff::from_lines(&old, &new)
                .iter_all_changes()
                .map(|c| {
                    let (sign, kind) = match c.tag() {
                        similar::ChangeTag::Delete => ("-", "del"),
                        similar::ChangeTag::Insert => ("+", "ins"),
                        similar::ChangeTag::Equal => (" ", "same"),
                    };
                    json!({"sign": sign, "kind": kind, "text": c.value().trim_end_matches('\n')})
                })
                .collect();
            Some(json!({"from": from, "to": to, "lines": lines}))
        }
        _ => None,
    };
    // a diff asked for by the address (an old link, a bookmark) between versions that are not there
    let no_diff =
        [q.from.filter(|v| *v != 0), q.to].into_iter().flatten().find(|v| value_of(*v).is_none()).map(|v| {
            format!("Version {v} is not in this block's history (purged, or never written): no diff to show.")
        });
    let (status, error, draft) = match refusal {
        Some(r) => (StatusCode::CONFLICT, Some(r.why), r.draft),
        None => (StatusCode::OK, None, None),
    };
    let context = json!({
        "block": {"name": block.spec.name, "value": block.value, "version": block.version, "chars": block.chars(),
                  "limit": block.spec.limit, "updated_at": block.updated_at.map(time)},
        "versions": versions,
        "diff": diff,
        "no_diff": no_diff,
        "error": error,
        "draft": draft,
        "saved": q.saved,
        "purged": q.purged,
    });
    let mut response = page(ui, v, "block.html", "/core", &format!("Core memory: {section}"), context);
    *response.status_mut() = status;
    response
}

/// `/core/{section}`.
pub async fn block(
    State(ui): State<Ui>,
    jar: CookieJar,
    Path(section): Path<String>,
    Params(q): Params<BlockQuery>,
) -> Response {
    match visit(&ui, jar).await {
        Ok(v) => block_page(&ui, v, &section, &q, None).await,
        Err(r) => r,
    }
}

#[derive(Debug, Deserialize)]
pub struct EditForm {
    csrf: String,
    value: String,
    version: i64,
}

/// The answer to a change of `section`: back to its page with the new version, or the page again with
/// the refusal (409) and `draft`, the text of a refused edit.
async fn changed(
    ui: &Ui,
    v: Visit,
    section: &str,
    result: Result<Block, MemoryError>,
    draft: Option<String>,
) -> Response {
    match result {
        Ok(block) => Redirect::to(&format!("/core/{}?saved={}", urlencode(section), block.version)).into_response(),
        Err(MemoryError::Refused(why)) => {
            block_page(ui, v, section, &BlockQuery::default(), Some(Refusal { why, draft })).await
        }
        Err(e) => failed(ui, &e),
    }
}

/// `POST /core/{section}`: writes the edited value as a new version, within the block's limit.
pub async fn edit_block(
    State(ui): State<Ui>,
    jar: CookieJar,
    headers: HeaderMap,
    Path(section): Path<String>,
    Posted(form): Posted<EditForm>,
) -> Response {
    // browsers send a textarea's line ends as CRLF (HTML, "form submission")
    let value = form.value.replace("\r\n", "\n");
    let viewer = match ui.access.mutation(&jar, &headers, &form.csrf) {
        Ok(viewer) => viewer,
        Err(Denied::LogIn) => return session_ended(&ui, jar, &section, value).await,
        Err(d) => return denied(&ui, d),
    };
    let memories = match memories_of(&ui, &viewer).await {
        Ok(m) => m,
        Err(r) => return r,
    };
    let result = memories.core.set(&section, &value, form.version).await;
    changed(&ui, Visit { viewer, memories, jar }, &section, result, Some(value)).await
}

/// An edit whose session is gone (the server restarted, or the session sat unused too long; the origin
/// was checked): nothing is saved and the typed text is not lost. On an open listener the block's page
/// comes back in a new session with the text in its form, to save again; behind a login, a page quotes
/// the text to copy before logging in again (401).
async fn session_ended(ui: &Ui, jar: CookieJar, section: &str, draft: String) -> Response {
    let why = SESSION_ENDED;
    match ui.access.viewer(jar) {
        Ok((viewer, jar)) => {
            let memories = match memories_of(ui, &viewer).await {
                Ok(m) => m,
                Err(r) => return r,
            };
            let refusal =
                Refusal { why: format!("{why} Your text is in the form: save it again."), draft: Some(draft) };
            block_page(ui, Visit { viewer, memories, jar }, section, &BlockQuery::default(), Some(refusal)).await
        }
        Err(_) => {
            let text = format!("{why} Copy your text below, log in again, and save it on the block's page.");
            kept_text(ui, StatusCode::UNAUTHORIZED, "Session ended", &text, &draft)
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct RestoreForm {
    csrf: String,
    version: i64,
    /// The block's version when the page was shown: a restore over a newer change is refused.
    current: i64,
}

/// `POST /core/{section}/restore`: writes an earlier version's value as the next version.
pub async fn restore_block(
    State(ui): State<Ui>,
    jar: CookieJar,
    headers: HeaderMap,
    Path(section): Path<String>,
    Posted(form): Posted<RestoreForm>,
) -> Response {
    let (viewer, memories) = match change(&ui, &jar, &headers, &form.csrf).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let result = memories.core.restore(&section, form.version, Some(form.current)).await;
    changed(&ui, Visit { viewer, memories, jar }, &section, result, None).await
}

#[derive(Debug, Deserialize)]
pub struct VersionQuery {
    version: i64,
}

/// `/core/{section}/purge?version=N`: the version's value and the button that purges it.
pub async fn confirm_purge(
    State(ui): State<Ui>,
    jar: CookieJar,
    Path(section): Path<String>,
    Params(q): Params<VersionQuery>,
) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    if !v.memories.core.blocks().iter().any(|b| b.name == section) {
        return not_found(&ui, "That core memory block");
    }
    let history = match v.memories.core.history(&section).await {
        Ok(h) => h,
        Err(e) => return failed(&ui, &e),
    };
    let Some(old) = history.iter().find(|h| h.version == q.version) else {
        return not_found(&ui, &format!("Version {} of block `{section}`", q.version));
    };
    let current = history.last().is_some_and(|h| h.version == old.version);
    let context = json!({"section": section, "version": old.version, "value": old.value,
                         "created_at": time(old.created_at), "current": current});
    page(&ui, v, "purge.html", "/core", &format!("Purge version {} of {section}", old.version), context)
}

#[derive(Debug, Deserialize)]
pub struct PurgeForm {
    csrf: String,
    version: i64,
}

/// `POST /core/{section}/purge`: deletes one old version from the block's history (never the current one).
pub async fn purge_version(
    State(ui): State<Ui>,
    jar: CookieJar,
    headers: HeaderMap,
    Path(section): Path<String>,
    Posted(form): Posted<PurgeForm>,
) -> Response {
    let (viewer, memories) = match change(&ui, &jar, &headers, &form.csrf).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let visit = Visit { viewer, memories, jar };
    match visit.memories.core.purge(&section, form.version).await {
        Ok(()) => Redirect::to(&format!("/core/{}?purged={}", urlencode(&section), form.version)).into_response(),
        Err(MemoryError::Refused(why)) => {
            block_page(&ui, visit, &section, &BlockQuery::default(), Some(Refusal { why, draft: None })).await
        }
        Err(e) => failed(&ui, &e),
    }
}
