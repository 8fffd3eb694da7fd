//! What every page of the memory browser shares: its state ([`Ui`]: the tool hosts, who is logged in, the
//! templates compiled into the binary), the visit of one request (viewer and memory), the layout every
//! page renders in, the answers for refusals and failures, and the pagination of lists.

use std::sync::Arc;

use axum::extract::{Form, FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::CookieJar;
use chrono::{DateTime, Utc};
use minijinja::Environment;
use rust_embed::RustEmbed;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::access::{Access, Denied, Viewer};
use crate::memory::MemoryError;
use crate::store::StoreError;
use crate::tools::{Hosts, Memories};

/// Templates (`templates/*.html`) and static files (`static/*`), compiled into the binary.
#[derive(RustEmbed)]
#[folder = "src/ui/assets/"]
pub struct Assets;

/// The browser's state: the tool hosts (one per actor), who is logged in, and the templates.
#[derive(Clone)]
pub struct Ui {
    pub(super) hosts: Arc<Hosts>,
    pub(super) access: Arc<Access>,
    templates: Arc<Environment<'static>>,
}

impl Ui {
    /// # Panics
    /// When an embedded template does not parse (a build defect the unit tests catch).
    pub fn new(hosts: Arc<Hosts>, access: Access) -> Self {
        let mut env = Environment::new();
        for name in Assets::iter().filter(|n| n.starts_with("templates/")) {
            let file = Assets::get(&name).expect("listed asset");
            let source = String::from_utf8(file.data.into_owned()).expect("templates are UTF-8");
            let short = name.trim_start_matches("templates/").to_string();
            env.add_template_owned(short, source).expect("embedded templates parse");
        }
        Self { hosts, access: Arc::new(access), templates: Arc::new(env) }
    }

    /// Renders `template` with `context` (HTML-escaped).
    pub(super) fn render(&self, template: &str, context: minijinja::Value) -> Response {
        match self.templates.get_template(template).and_then(|t| t.render(context)) {
            Ok(html) => Html(html).into_response(),
            Err(e) => {
                tracing::error!(template, error = %format!("{e:#}"), "rendering a page failed");
                (StatusCode::INTERNAL_SERVER_ERROR, "the page could not be rendered; see the server's log")
                    .into_response()
            }
        }
    }
}

/// A request that may read the viewer's memory.
pub(super) struct Visit {
    pub(super) viewer: Viewer,
    pub(super) memories: Memories,
    pub(super) jar: CookieJar,
}

pub(super) fn time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

pub(super) fn one_line(text: &str, max: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= max { line } else { format!("{}…", line.chars().take(max - 1).collect::<String>()) }
}

/// `text` percent-encoded for a URL's path segment or query value.
pub(super) fn urlencode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

pub(super) fn message(ui: &Ui, status: StatusCode, title: &str, text: &str) -> Response {
    kept_text(ui, status, title, text, "")
}

/// [`message`] with `kept` quoted below it: text a person typed that was not saved, to copy.
pub(super) fn kept_text(ui: &Ui, status: StatusCode, title: &str, text: &str, kept: &str) -> Response {
    let mut response = ui.render(
        "message.html",
        minijinja::Value::from_serialize(json!({
            "title": title, "message": text, "kept": kept, "nav": [],
        })),
    );
    *response.status_mut() = status;
    response
}

pub(super) fn denied(ui: &Ui, why: Denied) -> Response {
    match why {
        Denied::LogIn => Redirect::to("/login").into_response(),
        Denied::Forbidden(reason) => message(ui, StatusCode::FORBIDDEN, "Refused", reason),
    }
}

/// A page whose read or change failed: see [`failure`].
pub(super) fn failed(ui: &Ui, e: &(dyn std::error::Error + 'static)) -> Response {
    tracing::warn!(error = %e, "a memory browser page failed");
    let (status, title, text) = failure(e);
    message(ui, status, title, &text)
}

/// How a failure reads in the browser: a store that did not complete the operation (out of reach, or
/// other sessions' commits first) as such, with the cause left to the log, as the tools tell the model
/// (`tools::failure_output`); anything else with its message.
fn failure(e: &(dyn std::error::Error + 'static)) -> (StatusCode, &'static str, String) {
    let store = e.downcast_ref::<StoreError>().or_else(|| match e.downcast_ref::<MemoryError>() {
        Some(MemoryError::Store(s)) => Some(s),
        _ => None,
    });
    match store {
        Some(s) if s.is_contention() => (
            StatusCode::SERVICE_UNAVAILABLE,
            "Busy",
            "Other sessions changed the same memory at the same moment, more often than a change retries; nothing \
             was changed. Go back and try again."
                .into(),
        ),
        Some(StoreError::Backend(_) | StoreError::Engine { .. }) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "Memory unavailable",
            "The memory store did not complete the operation: it may be out of reach for a moment. Reload the page \
             in a moment to see where things stand; if it keeps failing, the log of `astra-mcp ui` has the cause."
                .into(),
        ),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "Something failed", e.to_string()),
    }
}

pub(super) fn not_found(ui: &Ui, what: &str) -> Response {
    message(ui, StatusCode::NOT_FOUND, "Not found", &format!("{what} does not exist, or is not yours."))
}

pub(super) async fn memories_of(ui: &Ui, viewer: &Viewer) -> Result<Memories, Response> {
    match ui.hosts.host(&viewer.scope).await {
        Ok(host) => Ok(host.memories().clone()),
        Err(e) => Err(message(ui, StatusCode::SERVICE_UNAVAILABLE, "Memory unavailable", &format!("{e}"))),
    }
}

pub(super) async fn visit(ui: &Ui, jar: CookieJar) -> Result<Visit, Response> {
    let (viewer, jar) = ui.access.viewer(jar).map_err(|d| denied(ui, d))?;
    let memories = memories_of(ui, &viewer).await?;
    Ok(Visit { viewer, memories, jar })
}

/// Why a change sent without a live session did nothing.
pub(super) const SESSION_ENDED: &str =
    "Your session had ended (the memory browser restarted, or sat unused for 12 hours), so nothing was changed.";

/// A mutation's viewer and memory, after its checks. Without a live session the answer is a page that
/// says nothing was changed (401), not the login form a page visit gets: a forget or a purge sent from a
/// page opened before a restart must not look done.
pub(super) async fn change(
    ui: &Ui,
    jar: &CookieJar,
    headers: &HeaderMap,
    csrf: &str,
) -> Result<(Viewer, Memories), Response> {
    let viewer = ui.access.mutation(jar, headers, csrf).map_err(|d| match d {
        Denied::LogIn => message(
            ui,
            StatusCode::UNAUTHORIZED,
            "Session ended",
            &format!("{SESSION_ENDED} Open the page again (logging in first, if asked) and repeat the change."),
        ),
        d => denied(ui, d),
    })?;
    let memories = memories_of(ui, &viewer).await?;
    Ok((viewer, memories))
}

pub(super) const NAV: [(&str, &str); 6] = [
    ("/", "Overview"),
    ("/fixes", "Fixes"),
    ("/archival", "Archival"),
    ("/conversations", "Conversations"),
    ("/core", "Core memory"),
    ("/search", "Search"),
];

/// Renders `template` for `visit` with `context` and the layout's own values.
pub(super) fn page(ui: &Ui, visit: Visit, template: &str, current: &str, title: &str, mut context: Value) -> Response {
    let nav: Vec<Value> =
        NAV.iter().map(|(href, label)| json!({"href": href, "label": label, "current": *href == current})).collect();
    if let Value::Object(map) = &mut context {
        map.insert("title".into(), json!(title));
        map.insert("nav".into(), Value::Array(nav));
        map.insert("actor".into(), json!(visit.viewer.scope.actor_id));
        map.insert("project".into(), json!(visit.viewer.scope.project));
        map.insert("csrf".into(), json!(visit.viewer.csrf));
    }
    (visit.jar, ui.render(template, minijinja::Value::from_serialize(&context))).into_response()
}

/// A page's query string as `T`. A malformed one (`page=-1`, `from=abc`, a parameter given twice) gets
/// the browser's own 400 page naming the parameter, not the framework's plain text.
pub struct Params<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequestParts<Ui> for Params<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, ui: &Ui) -> Result<Self, Response> {
        match Query::<T>::from_request_parts(parts, ui).await {
            Ok(Query(params)) => Ok(Self(params)),
            Err(rejection) => Err(message(
                ui,
                StatusCode::BAD_REQUEST,
                "Bad address",
                &format!("{}. Fix the address, or follow a link from the page before.", rejection.body_text()),
            )),
        }
    }
}

/// A form's body as `T`. A malformed or incomplete one (a POST made by hand) gets the browser's own 400
/// page naming what is wrong, not the framework's plain-text 422.
pub struct Posted<T>(pub T);

impl<T: DeserializeOwned + Send> FromRequest<Ui> for Posted<T> {
    type Rejection = Response;

    async fn from_request(request: Request, ui: &Ui) -> Result<Self, Response> {
        match Form::<T>::from_request(request, ui).await {
            Ok(Form(form)) => Ok(Self(form)),
            Err(rejection) => Err(message(
                ui,
                StatusCode::BAD_REQUEST,
                "Bad form",
                &format!("{}. Send the form from its page.", rejection.body_text()),
            )),
        }
    }
}

#[derive(Debug, Deserialize, Default)]
pub struct ListQuery {
    page: Option<usize>,
    pub(super) tag: Option<String>,
    pub(super) forgot: Option<String>,
}

impl ListQuery {
    pub(super) fn offset(&self, size: usize) -> usize {
        self.page.unwrap_or(1).max(1).saturating_sub(1).saturating_mul(size)
    }
}

/// Page links of a list of `total` rows at `query`'s page; `base` is the list's URL with its filters.
pub(super) fn pager(query: &ListQuery, total: usize, size: usize, base: &str) -> Value {
    let page = query.page.unwrap_or(1).max(1);
    let pages = total.div_ceil(size).max(1);
    let sep = if base.contains('?') { '&' } else { '?' };
    let link = |p: usize| format!("{base}{sep}page={p}");
    json!({
        "page": page, "pages": pages, "total": total,
        // from past the end (an old link), back to the last page
        "prev": (page > 1).then(|| link((page - 1).min(pages))),
        "next": (page < pages).then(|| link(page + 1)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_past_the_end_links_back_to_the_last_page() {
        let query = |page| ListQuery { page: Some(page), ..ListQuery::default() };
        let past = pager(&query(99), 30, 25, "/archival");
        assert_eq!((past["pages"].as_u64(), past["prev"].as_str()), (Some(2), Some("/archival?page=2")));
        assert!(past["next"].is_null());
        let second = pager(&query(2), 30, 25, "/archival?tag=x");
        assert_eq!(second["prev"].as_str(), Some("/archival?tag=x&page=1"));
        assert!(pager(&query(1), 30, 25, "/archival")["prev"].is_null());
    }

    /// An object store out of reach reads as a store to retry, without Lance's error text; a commit
    /// lost to other writers as busy; a corrupt row with its message.
    #[test]
    fn a_store_failure_reads_as_unavailable_without_its_cause() {
        let cause =
            "lance error: LanceError(IO): Generic S3 error: error sending request for url (http://127.0.0.1:9/b)";
        let outage = MemoryError::Store(StoreError::Backend(cause.into()));
        let (status, title, text) = failure(&outage);
        assert_eq!((status, title), (StatusCode::SERVICE_UNAVAILABLE, "Memory unavailable"));
        assert!(text.starts_with("The memory store did not complete the operation") && !text.contains("S3"), "{text}");
        let (status, title, _) = failure(&StoreError::Backend(cause.into()));
        assert_eq!((status, title), (StatusCode::SERVICE_UNAVAILABLE, "Memory unavailable"), "a bare store error too");
        let conflict = StoreError::Engine {
            kind: crate::store::EngineFailure::Conflict,
            source: std::sync::Arc::new(std::io::Error::other("Retryable commit conflict for version 41")),
        };
        assert_eq!(failure(&conflict).1, "Busy");
        let engine_outage = StoreError::Engine {
            kind: crate::store::EngineFailure::Other,
            source: std::sync::Arc::new(std::io::Error::other(cause)),
        };
        assert_eq!(failure(&engine_outage).1, "Memory unavailable");
        let corrupt = StoreError::Corrupt { table: "archival", column: "tags", message: "not a list".into() };
        let (status, title, text) = failure(&corrupt);
        assert_eq!((status, title), (StatusCode::INTERNAL_SERVER_ERROR, "Something failed"));
        assert!(text.contains("archival.tags"), "{text}");
    }
}
