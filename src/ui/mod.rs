//! The memory browser (docs/ui.md): server-rendered pages to see, search, judge and correct what agents
//! stored, served at `/` by the HTTP listener (`serve --http`) and by `astra-mcp ui`. Each page acts for
//! one actor, as the tools do ([`access`]); it reads through the same memory tiers and hybrid search the
//! tools use, and forgets through the same store call as `memory_forget`.
//!
//! Templates (minijinja, HTML auto-escaped: stored text always renders as text) and the style sheet are
//! compiled into the binary ([`Assets`]); the pages run no script, so the Content-Security-Policy allows
//! none. Lists are paginated: a page reads only its own rows ([`crate::store::BrowseStore`]).
//!
//! One file per view: `overview`, `memories` (fixes, archival passages, conversations, forget, export),
//! `blocks` (core memory), `search`, `login`; `site` holds what they share (state, layout, errors, pages).

pub mod access;
mod blocks;
mod login;
mod memories;
mod overview;
mod search;
mod site;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

pub use access::Access;
pub use site::{Assets, Ui};

/// What every page's response carries: no script, no framing, no outside resource.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Every route of the browser. The caller puts it behind the listener's `Host`/`Origin` guard.
pub fn router(ui: Ui) -> Router {
    Router::new()
        .route("/", get(overview::overview))
        .route("/fixes", get(memories::fixes))
        .route("/fixes/{id}", get(memories::fix))
        .route("/archival", get(memories::archival))
        .route("/archival/{id}", get(memories::passage))
        .route("/conversations", get(memories::conversations))
        .route("/conversations/{session}", get(memories::conversation))
        .route("/core", get(blocks::core))
        .route("/core/{section}", get(blocks::block).post(blocks::edit_block))
        .route("/core/{section}/restore", post(blocks::restore_block))
        .route("/core/{section}/purge", get(blocks::confirm_purge).post(blocks::purge_version))
        .route("/search", get(search::search))
        .route("/forget/{id}", get(memories::confirm_forget).post(memories::forget))
        .route("/restore/{id}", post(memories::restore))
        .route("/export", get(memories::export))
        .route("/login", get(login::login_page).post(login::login))
        .route("/logout", post(login::logout))
        .route("/static/{file}", get(asset))
        .layer(axum::middleware::from_fn_with_state(ui.clone(), within_timeout))
        .with_state(ui)
        .layer(axum::middleware::map_response(secure_headers))
}

/// Every page within `--tool-timeout`, as a tool call ([`crate::tools::bounded`]): a store that stopped
/// answering (a frozen object store) fails the page with 503 instead of holding the browser. A change
/// cut off there may or may not be written, as a timed-out tool call's: the page says to reload and see.
async fn within_timeout(
    axum::extract::State(ui): axum::extract::State<Ui>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let change = request.method() == axum::http::Method::POST;
    match crate::tools::bounded(ui.hosts.timeout(), next.run(request)).await {
        Ok(response) => response,
        Err(limit) => {
            let secs = limit.as_secs();
            tracing::error!("a memory browser page had no answer within {secs} s (--tool-timeout)");
            let then = if change {
                "Your change may or may not be made: reload its page in a moment to see."
            } else {
                "Reload the page in a moment."
            };
            site::message(
                &ui,
                StatusCode::SERVICE_UNAVAILABLE,
                "No answer",
                &format!("The memory store did not answer within {secs} s. {then}"),
            )
        }
    }
}

/// The security headers of every page.
async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    // not `no-referrer`: under it a browser sends `Origin: null` with a form's POST, which the origin
    // check must refuse; `same-origin` keeps the page's URLs from other sites and the Origin intact
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn asset(axum::extract::Path(file): axum::extract::Path<String>) -> Response {
    let Some(found) = Assets::get(&format!("static/{file}")) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    let mime = match file.rsplit('.').next() {
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    };
    ([(header::CONTENT_TYPE, mime), (header::CACHE_CONTROL, "max-age=3600")], found.data.into_owned()).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_template_parses_and_escapes_html() {
        let mut env = minijinja::Environment::new();
        let mut names = Vec::new();
        for name in super::Assets::iter().filter(|n| n.starts_with("templates/")) {
            let source = String::from_utf8(super::Assets::get(&name).unwrap().data.into_owned()).unwrap();
            env.add_template_owned(name.trim_start_matches("templates/").to_string(), source)
                .unwrap_or_else(|e| panic!("{name}: {e:#}"));
            names.push(name.to_string());
        }
        assert!(names.iter().any(|n| n.ends_with("base.html")), "templates are embedded: {names:?}");
        let html = env
            .get_template("message.html")
            .unwrap()
            .render(minijinja::context! { title => "t", message => "<script>alert(1)</script>", actor => "a" })
            .unwrap();
        assert!(html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
    }
}
