//! Search: the tools' hybrid search over one table or all, each hit with its rank and score in each
//! ranking and the fused score that ordered it.

use axum::extract::State;
use axum::response::Response;
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;
use serde_json::{Value, json};

use super::site::{Params, Ui, failed, one_line, page, urlencode, visit};
use crate::memory::{ConversationSearch, GateState, PassageSearch};
use crate::tools::{citation, conversation_citation, to_match};

/// What `table=` may name.
const TABLES: [&str; 4] = ["all", "fixes", "archival", "conversation"];

/// Results per table of a search.
pub const SEARCH_TOP_K: usize = 10;

#[derive(Debug, Deserialize, Default)]
pub struct SearchQuery {
    q: Option<String>,
    table: Option<String>,
}

/// `/search`: the tools' hybrid search over one table or all, with each hit's rankings.
pub async fn search(State(ui): State<Ui>, jar: CookieJar, Params(q): Params<SearchQuery>) -> Response {
    let v = match visit(&ui, jar).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let query = q.q.as_deref().map(str::trim).unwrap_or("").to_string();
    let table = q.table.as_deref().unwrap_or("all").to_string();
    let wants = |t: &str| table == "all" || table == t;
    let mut context = json!({"q": query, "table": table, "searched": !query.is_empty()});
    if !TABLES.contains(&table.as_str()) {
        context["searched"] = json!(false);
        context["error"] = json!(format!("there is no table `{table}` to search: choose one of {}", TABLES.join(", ")));
    } else if query.chars().count() > crate::tools::MAX_SEARCH_QUERY_CHARS {
        context["error"] = json!(format!(
            "the query has {} characters; the limit is {}",
            query.chars().count(),
            crate::tools::MAX_SEARCH_QUERY_CHARS
        ));
    } else if !query.is_empty() {
        let m = &v.memories;
        if wants("fixes") {
            match m.fixes.search(&GateState::random(), &query, None, SEARCH_TOP_K).await {
                Ok(hits) => {
                    let rows: Vec<Value> = hits
                        .iter()
                        .enumerate()
                        .map(|(i, h)| {
                            let mut row = serde_json::to_value(to_match(i + 1, h)).unwrap_or_default();
                            row["code"] = json!(h.code.state.words());
                            row["preview"] = json!(one_line(&h.record.fix_description, 200));
                            row
                        })
                        .collect();
                    context["fixes"] = json!(rows);
                }
                Err(e) => return failed(&ui, &e),
            }
        }
        if wants("archival") {
            let request = PassageSearch {
                query: query.clone(),
                tags_any: Vec::new(),
                top_k: SEARCH_TOP_K,
                start: None,
                end: None,
                include_superseded: false,
            };
            match m.archival.search(&request).await {
                Ok(hits) => {
                    let rows: Vec<Value> = hits
                        .iter()
                        .enumerate()
                        .map(|(i, h)| serde_json::to_value(citation(i + 1, h)).unwrap_or_default())
                        .collect();
                    context["archival"] = json!(rows);
                }
                Err(e) => return failed(&ui, &e),
            }
        }
        if wants("conversation") {
            let request = ConversationSearch {
                query: query.clone(),
                roles: Vec::new(),
                top_k: SEARCH_TOP_K,
                start: None,
                end: None,
                session_ids: None,
            };
            match m.conversation.search(&v.viewer.scope.actor_id, &request).await {
                Ok(hits) => {
                    let rows: Vec<Value> = hits
                        .iter()
                        .enumerate()
                        .map(|(i, h)| {
                            let mut row = serde_json::to_value(conversation_citation(i + 1, h)).unwrap_or_default();
                            row["href"] = json!(urlencode(&h.row.session_id));
                            row
                        })
                        .collect();
                    context["conversation"] = json!(rows);
                }
                Err(e) => return failed(&ui, &e),
            }
        }
    }
    page(&ui, v, "search.html", "/search", "Search", context)
}
