//! The lists and pages of stored memories: fixes (with their receipts and code check), archival passages
//! (tags, provenance, superseded chains), conversations as threads; forgetting one, and the export.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::site::{
    ListQuery, Params, Posted, Ui, change, failed, message, not_found, one_line, page, pager, time, urlencode, visit,
};
use std::collections::HashMap;

use crate::domain::{ConversationItem, FixRecord, Passage, Usage};
use crate::memory::injection::instruction_flags;
use crate::memory::uses::Expiry;
use crate::tools::Memories;

/// Rows per page of a list.
pub const PAGE_SIZE: usize = 25;

/// Items per page of a conversation.
pub const THREAD_PAGE_SIZE: usize = 50;

/// The most steps of a superseded chain shown.
const MAX_CHAIN: usize = 20;

/// How each of `ids` was used ([`crate::memory::UseLog::usage`]); empty (logged) when the read fails:
/// a page still shows its memories.
async fn usage_of(memories: &Memories, ids: &[Uuid]) -> HashMap<Uuid, Usage> {
    memories.uses.usage(ids).await.unwrap_or_else(|e| {
        tracing::warn!("could not read the uses of {} memories: {e}", ids.len());
        HashMap::new()
    })
}

/// A memory's use as the pages show it (`macros.html`, `used`), and whether it expired (docs/tools.md,
/// "Expiry").
fn usage_view(usage: Option<&Usage>, expired: bool) -> Value {
    let u = usage.cloned().unwrap_or_default();
    json!({"uses": u.uses, "last_used_at": u.last_used_at.map(time), "helped": u.helped, "expired": expired})
}

fn fix_view(memories: &Memories, r: &FixRecord, usage: Option<&Usage>) -> Value {
    let code = memories.fixes.code(r);
    let expired = memories.uses.expiry().fix_expired(r, &code, usage, chrono::Utc::now());
    let flags = instruction_flags(&format!("{}\n{}\n{}", r.fix_description, r.error_type, r.outcome));
    json!({
        "id": r.memory_id.to_string(),
        "created_at": time(r.created_at),
        "project": r.project,
        "session_id": r.session_id,
        "fix_description": r.fix_description,
        "preview": crate::domain::text::escape_controls(&one_line(&r.fix_description, 140)),
        "error_type": r.error_type,
        "file_paths": r.file_paths,
        "outcome": r.outcome,
        "verified": r.verified,
        "code": code.state.words(),
        "code_why": code.why,
        "last_verified_at": r.receipt.as_ref().map(|rc| time(rc.last_verified_at())),
        "receipt": r.receipt.as_ref().map(|rc| json!({
            "command": rc.command, "exit_code": rc.exit_code, "summary": rc.summary,
            "duration_ms": rc.duration_ms, "finished_at": time(rc.finished_at),
            "git_head": rc.git_head, "workspace_root": rc.workspace_root,
            "files": rc.file_hashes.keys().collect::<Vec<_>>(),
            "last_verified": rc.last_verified.as_ref().map(|v| json!({
                "command": v.command, "summary": v.summary, "finished_at": time(v.finished_at), "git_head": v.git_head,
            })),
            "failed_attempts": rc.failed_attempts.iter().map(|a| json!({
                "what": a.what, "command": a.command, "summary": a.summary, "finished_at": time(a.finished_at),
            })).collect::<Vec<_>>(),
        })),
        "instruction_flags": flags,
        "usage": usage_view(usage, expired),
    })
}

fn passage_view(p: &Passage, usage: Option<&Usage>, expiry: Expiry) -> Value {
    let expired = expiry.passage_expired(p, usage, chrono::Utc::now());
    json!({
        "id": p.id.to_string(),
        "created_at": time(p.created_at),
        "updated_at": time(p.updated_at),
        "project": p.project,
        "session_id": p.session_id,
        "turn": p.turn,
        "source": p.source,
        "tags": p.tags,
        "text": p.text,
        "preview": crate::domain::text::escape_controls(&one_line(&p.text, 160)),
        "superseded_by": p.superseded_by.map(|id| id.to_string()),
        "instruction_flags": instruction_flags(&p.text),
        "usage": usage_view(usage, expired),
    })
}

fn item_view(i: &ConversationItem) -> Value {
    json!({
        "id": i.id.to_string(),
        "created_at": time(i.created_at),
        "project": i.project,
        "session_id": i.session_id,
        "turn": i.turn,
        "role": i.role.as_str(),
        "source": i.source,
        "text": i.text,
        "preview": crate::domain::text::escape_controls(&one_line(&i.text, 160)),
        "instruction_flags": instruction_flags(&i.text),
    })
}

fn forgot_note(query: &ListQuery) -> Option<String> {
    query.forgot.as_ref().map(|id| format!("Forgot {id}: it no longer appears in any search."))
}

/// `/fixes`: the actor's fixes, newest first.
pub async fn fixes(State(ui): State<Ui>, jar: CookieJar, Params(q): Params<ListQuery>) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let listed = match v.memories.browse.fix_page(&v.viewer.scope.actor_id, q.offset(PAGE_SIZE), PAGE_SIZE).await {
        Ok(p) => p,
        Err(e) => return failed(&ui, &e),
    };
    let ids: Vec<Uuid> = listed.rows.iter().map(|r| r.memory_id).collect();
    let usage = usage_of(&v.memories, &ids).await;
    let rows: Vec<Value> = listed.rows.iter().map(|r| fix_view(&v.memories, r, usage.get(&r.memory_id))).collect();
    let context = json!({"rows": rows, "pager": pager(&q, listed.total, PAGE_SIZE, "/fixes"), "note": forgot_note(&q)});
    page(&ui, v, "fixes.html", "/fixes", "Fixes", context)
}

/// `/fixes/{id}`: one fix with its receipt and whether its files moved since.
pub async fn fix(State(ui): State<Ui>, jar: CookieJar, Path(id): Path<String>) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Ok(uuid) = Uuid::parse_str(&id) else { return not_found(&ui, "That fix") };
    match v.memories.browse.fix(&v.viewer.scope.actor_id, uuid).await {
        Ok(Some(r)) => {
            let usage = usage_of(&v.memories, &[r.memory_id]).await;
            let context = json!({"fix": fix_view(&v.memories, &r, usage.get(&r.memory_id))});
            page(&ui, v, "fix.html", "/fixes", "Fix", context)
        }
        Ok(None) => not_found(&ui, "That fix"),
        Err(e) => failed(&ui, &e),
    }
}

/// `/archival`: the actor's passages, newest first, optionally of one tag.
pub async fn archival(State(ui): State<Ui>, jar: CookieJar, Params(q): Params<ListQuery>) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let tag = q.tag.as_deref().map(str::trim).filter(|t| !t.is_empty());
    let listed =
        match v.memories.browse.passage_page(&v.viewer.scope.actor_id, tag, q.offset(PAGE_SIZE), PAGE_SIZE).await {
            Ok(p) => p,
            Err(e) => return failed(&ui, &e),
        };
    let base = match tag {
        Some(t) => format!("/archival?tag={}", urlencode(t)),
        None => "/archival".to_string(),
    };
    let ids: Vec<Uuid> = listed.rows.iter().map(|p| p.id).collect();
    let usage = usage_of(&v.memories, &ids).await;
    let expiry = v.memories.uses.expiry();
    let rows: Vec<Value> = listed.rows.iter().map(|p| passage_view(p, usage.get(&p.id), expiry)).collect();
    let context =
        json!({"rows": rows, "tag": tag, "pager": pager(&q, listed.total, PAGE_SIZE, &base), "note": forgot_note(&q)});
    page(&ui, v, "archival.html", "/archival", "Archival memory", context)
}

/// `/archival/{id}`: one passage, its provenance, and its superseded chain (older → newer).
pub async fn passage(State(ui): State<Ui>, jar: CookieJar, Path(id): Path<String>) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Ok(uuid) = Uuid::parse_str(&id) else { return not_found(&ui, "That passage") };
    let actor = v.viewer.scope.actor_id.clone();
    let browse = v.memories.browse.clone();
    let p = match browse.passage(&actor, uuid).await {
        Ok(Some(p)) => p,
        Ok(None) => return not_found(&ui, "That passage"),
        Err(e) => return failed(&ui, &e),
    };
    // newer: the passages that replaced it, one after the other
    let mut newer = Vec::new();
    let mut next = p.superseded_by;
    while let Some(id) = next
        && newer.len() < MAX_CHAIN
    {
        match browse.passage(&actor, id).await {
            Ok(Some(n)) => {
                next = n.superseded_by;
                newer.push(passage_view(&n, None, Expiry(None)));
            }
            Ok(None) => {
                newer.push(json!({"id": id.to_string(), "missing": true}));
                break;
            }
            Err(e) => return failed(&ui, &e),
        }
    }
    let older = match browse.superseded_by(&actor, uuid).await {
        Ok(rows) => rows.iter().map(|p| passage_view(p, None, Expiry(None))).collect::<Vec<_>>(),
        Err(e) => return failed(&ui, &e),
    };
    let usage = usage_of(&v.memories, &[p.id]).await;
    let expiry = v.memories.uses.expiry();
    let context = json!({"passage": passage_view(&p, usage.get(&p.id), expiry), "newer": newer, "older": older});
    page(&ui, v, "passage.html", "/archival", "Passage", context)
}

/// `/conversations`: the actor's sessions as threads, the most recently active first.
pub async fn conversations(State(ui): State<Ui>, jar: CookieJar, Params(q): Params<ListQuery>) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let listed = match v.memories.browse.session_page(&v.viewer.scope.actor_id, q.offset(PAGE_SIZE), PAGE_SIZE).await {
        Ok(p) => p,
        Err(e) => return failed(&ui, &e),
    };
    let rows: Vec<Value> = listed
        .rows
        .iter()
        .map(|s| {
            json!({"session_id": s.session_id, "href": urlencode(&s.session_id), "project": s.project,
                   "items": s.items, "first_at": time(s.first_at), "last_at": time(s.last_at)})
        })
        .collect();
    let context =
        json!({"rows": rows, "pager": pager(&q, listed.total, PAGE_SIZE, "/conversations"), "note": forgot_note(&q)});
    page(&ui, v, "conversations.html", "/conversations", "Conversations", context)
}

/// `/conversations/{session}`: one session's items in turn order.
pub async fn conversation(
    State(ui): State<Ui>,
    jar: CookieJar,
    Path(session): Path<String>,
    Params(q): Params<ListQuery>,
) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let listed = match v
        .memories
        .browse
        .session_items_page(&v.viewer.scope.actor_id, &session, q.offset(THREAD_PAGE_SIZE), THREAD_PAGE_SIZE)
        .await
    {
        Ok(p) => p,
        Err(e) => return failed(&ui, &e),
    };
    if listed.total == 0 {
        return not_found(&ui, "That conversation");
    }
    let rows: Vec<Value> = listed.rows.iter().map(item_view).collect();
    let base = format!("/conversations/{}", urlencode(&session));
    let context =
        json!({"session_id": session, "rows": rows, "pager": pager(&q, listed.total, THREAD_PAGE_SIZE, &base)});
    page(&ui, v, "conversation.html", "/conversations", "Conversation", context)
}

/// The table and a view of the actor's memory `id`, from whichever table holds it.
async fn find_memory(
    memories: &Memories,
    actor: &str,
    id: Uuid,
) -> Result<Option<(&'static str, Value)>, crate::store::StoreError> {
    let browse = &memories.browse;
    if let Some(r) = browse.fix(actor, id).await? {
        return Ok(Some(("fixes", fix_view(memories, &r, None))));
    }
    if let Some(p) = browse.passage(actor, id).await? {
        return Ok(Some(("archival", passage_view(&p, None, Expiry(None)))));
    }
    if let Some(i) = browse.item(actor, id).await? {
        return Ok(Some(("conversations", item_view(&i))));
    }
    Ok(None)
}

/// `/forget/{id}`: asks before forgetting.
pub async fn confirm_forget(State(ui): State<Ui>, jar: CookieJar, Path(id): Path<String>) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Ok(uuid) = Uuid::parse_str(&id) else { return not_found(&ui, "That memory") };
    match find_memory(&v.memories, &v.viewer.scope.actor_id, uuid).await {
        Ok(Some((table, memory))) => {
            let context = json!({"id": id, "table": table, "memory": memory});
            page(&ui, v, "forget.html", "", "Forget a memory", context)
        }
        Ok(None) => nothing_to_forget(&ui),
        Err(e) => failed(&ui, &e),
    }
}

#[derive(Debug, Deserialize)]
pub struct CsrfForm {
    pub(super) csrf: String,
}

/// `POST /forget/{id}`: deletes the memory from its table and that table's indexes, as `memory_forget`.
pub async fn forget(
    State(ui): State<Ui>,
    jar: CookieJar,
    headers: HeaderMap,
    Path(id): Path<String>,
    Posted(form): Posted<CsrfForm>,
) -> Response {
    let (viewer, memories) = match change(&ui, &jar, &headers, &form.csrf).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let Ok(uuid) = Uuid::parse_str(&id) else { return not_found(&ui, "That memory") };
    match memories.forget.forget(&viewer.scope.actor_id, uuid).await {
        Ok(Some(table)) => {
            let list = match table {
                "fixes" => "/fixes",
                "archival" => "/archival",
                _ => "/conversations",
            };
            tracing::info!(actor = %viewer.scope.actor_id, %id, table, "forgotten from the memory browser");
            Redirect::to(&format!("{list}?forgot={uuid}")).into_response()
        }
        Ok(None) => nothing_to_forget(&ui),
        Err(e) => failed(&ui, &e),
    }
}

/// `POST /restore/{id}`: brings an expired fix or passage back into searches, as `memory restore` does
/// (it counts as used now), then shows it again.
pub async fn restore(
    State(ui): State<Ui>,
    jar: CookieJar,
    headers: HeaderMap,
    Path(id): Path<String>,
    Posted(form): Posted<CsrfForm>,
) -> Response {
    let (viewer, memories) = match change(&ui, &jar, &headers, &form.csrf).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let Ok(uuid) = Uuid::parse_str(&id) else { return not_found(&ui, "That memory") };
    let actor = &viewer.scope.actor_id;
    let page = match (memories.browse.fix(actor, uuid).await, memories.browse.passage(actor, uuid).await) {
        (Ok(Some(_)), _) => "fixes",
        (_, Ok(Some(_))) => "archival",
        (Err(e), _) | (_, Err(e)) => return failed(&ui, &e),
        _ => return not_found(&ui, "That memory"),
    };
    if let Err(e) = memories.uses.keep("browser", &[uuid]).await {
        return failed(&ui, &e);
    }
    tracing::info!(actor = %actor, %id, "restored from the memory browser");
    Redirect::to(&format!("/{page}/{uuid}")).into_response()
}

/// A forget of a memory the viewer does not have: most often one forgotten already.
fn nothing_to_forget(ui: &Ui) -> Response {
    message(
        ui,
        StatusCode::NOT_FOUND,
        "Nothing to forget",
        "That memory is not in your memory: it may be forgotten already (in another tab, or by an agent's \
         memory_forget), or the link is wrong. Nothing was changed.",
    )
}

/// `/export`: the actor's memories as the JSON lines of `memory export`.
pub async fn export(State(ui): State<Ui>, jar: CookieJar) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    match v.memories.browse.export_actor(&v.viewer.scope.actor_id).await {
        Ok(body) => {
            let name = format!(
                "attachment; filename=\"astra-mcp-{}.jsonl\"",
                v.viewer.scope.actor_id.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_', "_")
            );
            (
                v.jar,
                [(header::CONTENT_TYPE, "application/x-ndjson".to_string()), (header::CONTENT_DISPOSITION, name)],
                body,
            )
                .into_response()
        }
        Err(e) => failed(&ui, &e),
    }
}
