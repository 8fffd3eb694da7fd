//! Logging in and out: the token form, the one-time code of `astra-mcp ui`'s URL, and logging out.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum_extra::extract::cookie::CookieJar;
use serde::Deserialize;
use serde_json::json;

use super::memories::CsrfForm;
use super::site::{Posted, Ui, denied};

#[derive(Debug, Deserialize, Default)]
pub struct LoginQuery {
    code: Option<String>,
}

fn login_form(ui: &Ui, status: StatusCode, error: Option<&str>) -> Response {
    let mut response = ui.render(
        "login.html",
        minijinja::Value::from_serialize(
            json!({"title": "Log in", "nav": [], "tokens": ui.access.takes_tokens(), "error": error}),
        ),
    );
    *response.status_mut() = status;
    response
}

/// `/login`: the token form, or the one-time code of `astra-mcp ui`'s URL. A `HEAD` (a link preview, a
/// scanner) never uses the code up: only the `GET` a browser sends does.
pub async fn login_page(
    State(ui): State<Ui>,
    method: axum::http::Method,
    jar: CookieJar,
    Query(q): Query<LoginQuery>,
) -> Response {
    if method == axum::http::Method::HEAD && q.code.is_some() {
        return StatusCode::OK.into_response();
    }
    if let Some(code) = q.code {
        return match ui.access.log_in_with_code(&code, jar) {
            Some(jar) => (jar, Redirect::to("/")).into_response(),
            None => login_form(
                &ui,
                StatusCode::UNAUTHORIZED,
                Some("This link was used already, or is not this server's: run `astra-mcp ui` again for a new one."),
            ),
        };
    }
    match ui.access.viewer(jar) {
        Ok((_, jar)) => (jar, Redirect::to("/")).into_response(),
        Err(_) => login_form(&ui, StatusCode::OK, None),
    }
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
}

/// `POST /login`: a bearer token of the server, once, for a session cookie.
pub async fn login(
    State(ui): State<Ui>,
    jar: CookieJar,
    headers: HeaderMap,
    Posted(form): Posted<LoginForm>,
) -> Response {
    match ui.access.log_in_with_token(&form.token, &headers, jar) {
        Ok(Some(jar)) => (jar, Redirect::to("/")).into_response(),
        Ok(None) => login_form(&ui, StatusCode::UNAUTHORIZED, Some("That is not one of this server's bearer tokens.")),
        Err(d) => denied(&ui, d),
    }
}

/// `POST /logout`.
pub async fn logout(
    State(ui): State<Ui>,
    jar: CookieJar,
    headers: HeaderMap,
    Posted(form): Posted<CsrfForm>,
) -> Response {
    match ui.access.log_out(jar, &headers, &form.csrf) {
        Ok(jar) => (jar, Redirect::to("/login")).into_response(),
        Err(d) => denied(&ui, d),
    }
}
