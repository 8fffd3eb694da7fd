//! MCP over HTTP on one axum router (docs/http.md):
//!
//! - `/mcp`: streamable HTTP (MCP 2025-03-26 and later, SSE streams included), rmcp's
//!   `StreamableHttpService`. Clients that `initialize` get an `Mcp-Session-Id` session with its own gate
//!   state; requests of the stateless 2026-07-28 protocol share the gate state of their actor, project
//!   and workspace (docs/tools.md, "The gates").
//! - `GET /sse` + `POST /message?sessionId=…`: the legacy HTTP+SSE transport (MCP 2024-11-05), in
//!   `super::sse`.
//! - `/` and the rest: the memory browser ([`crate::ui`]), which logs browsers in by its own session
//!   cookie.
//!
//! Every route passes the same [`Guard`] first: `Host` and `Origin` are checked against DNS rebinding
//! (403, nothing runs), then, on the MCP routes, the bearer token when tokens are configured (401). The
//! identity the token maps to travels in the request's extensions as a [`Scope`].
//!
//! The listener keeps to [`HttpLimits`] (docs/limits.md): connections ([`super::limits`]), live sessions
//! (past a cap, `initialize` gets 503 with `Retry-After`), and the time a request may take to send its
//! body. A request reusing the id of one still in flight in its session gets a JSON-RPC error
//! ([`InFlightIds`]). A tool call ends (and its test run is killed) when its HTTP request goes away: the
//! client disconnected, or deleted the session ([`RequestGone`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::tower::StreamableHttpService;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::limits::{ConnHandle, Connections, HttpLimits, LimitedListener, keep_until_sent, track};
use super::shutdown::{Shutdown, drain_after, signal_received};
use super::stdio::InFlightIds;
use super::{McpServer, json_error};
use crate::domain::Scope;
use crate::tools::Hosts;

/// Largest request body, in bytes (rmcp's own default for `/mcp`).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// One bearer token and the identity it maps to (from the config file's `[[tokens]]`).
#[derive(Clone)]
pub struct TokenIdentity {
    /// SHA-256 of the token: the token itself is not kept, and comparing digests takes the same time
    /// whatever prefix of a guess is right.
    pub digest: [u8; 32],
    pub scope: Scope,
}

impl std::fmt::Debug for TokenIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIdentity").field("scope", &self.scope).finish_non_exhaustive()
    }
}

impl TokenIdentity {
    pub fn new(token: &str, scope: Scope) -> Self {
        Self { digest: Sha256::digest(token.as_bytes()).into(), scope }
    }
}

/// What `serve --http` was configured with.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// Bearer tokens; empty means no authentication (every request acts for the server's `--actor`).
    pub tokens: Vec<TokenIdentity>,
    /// `Host` values accepted besides the loopback names and the bound address: `name` (any port) or
    /// `name:port`.
    pub allowed_hosts: Vec<String>,
    /// Browser origins accepted besides loopback ones: `scheme://host[:port]`, or `scheme://host:*`.
    pub allowed_origins: Vec<String>,
    /// How long calls in flight may run after SIGINT/SIGTERM.
    pub grace: Duration,
    /// Connections, sessions and timeouts (docs/limits.md).
    pub limits: HttpLimits,
    /// Serve MCP (`/mcp`, `/sse`, `/message`); `astra-mcp ui` serves the memory browser alone.
    pub mcp: bool,
    /// The one-time code of the URL `astra-mcp ui` prints (docs/ui.md); `None` for `serve --http`.
    pub login_code: Option<String>,
}

/// Cancelled when the HTTP request that carries a tool call goes away: its client disconnected before
/// the answer was sent, or deleted its session. In the request's extensions, where
/// [`McpServer`](super::McpServer) finds it.
#[derive(Debug, Clone)]
pub struct RequestGone(pub CancellationToken);

/// A live streamable HTTP session, as the guard knows it.
#[derive(Debug)]
struct LiveSession {
    /// The identity that opened it.
    scope: Scope,
    last_seen: std::time::Instant,
    /// Its requests not answered yet.
    ids: Arc<InFlightIds>,
    /// Cancelled when the session is deleted: its calls in flight end.
    ended: CancellationToken,
}

/// Host/Origin validation and authentication, shared by every route.
#[derive(Debug)]
pub struct Guard {
    bound: SocketAddr,
    default_scope: Scope,
    tokens: Vec<TokenIdentity>,
    allowed_hosts: Vec<String>,
    allowed_origins: Vec<String>,
    limits: HttpLimits,
    /// Each streamable HTTP session (by `Mcp-Session-Id`): who opened it, its requests in flight.
    sessions: Mutex<HashMap<String, LiveSession>>,
    /// rmcp's sessions, closed here when they outlive [`HttpLimits::session_idle`] (set by [`router`]).
    manager: std::sync::OnceLock<Arc<LocalSessionManager>>,
}

const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

impl Guard {
    pub fn new(options: &HttpOptions, bound: SocketAddr, default_scope: Scope) -> Self {
        let lower = |v: &Vec<String>| v.iter().map(|s| s.trim().trim_end_matches('/').to_ascii_lowercase()).collect();
        Self {
            bound,
            default_scope,
            tokens: options.tokens.clone(),
            allowed_hosts: lower(&options.allowed_hosts),
            allowed_origins: lower(&options.allowed_origins),
            limits: options.limits.clone(),
            sessions: Mutex::default(),
            manager: std::sync::OnceLock::new(),
        }
    }

    /// `Err` with the seconds until a session may end by itself (for `Retry-After`) when `scope` may not
    /// open another session now: [`HttpLimits::max_sessions`] live in all, or
    /// [`HttpLimits::max_sessions_per_actor`] of its actor. Forgets sessions idle past their expiry.
    fn room_for_session(&self, scope: &Scope) -> Result<(), (u64, String)> {
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let idle = self.limits.session_idle;
        // A session without a request for `idle` has ended in rmcp too (its keep-alive is the same), or
        // is ended now (a session kept open by server events alone), so it never outlives its owner here.
        // A session with a call in flight (a long test run) is not idle.
        let stale: Vec<String> = sessions
            .iter()
            .filter(|(_, s)| s.last_seen.elapsed() >= idle && s.ids.is_empty())
            .map(|(id, _)| id.clone())
            .collect();
        for id in &stale {
            if let Some(live) = sessions.remove(id) {
                live.ended.cancel();
            }
        }
        if !stale.is_empty()
            && let Some(manager) = self.manager.get().cloned()
        {
            tokio::spawn(async move {
                use rmcp::transport::streamable_http_server::session::SessionManager;
                for id in stale {
                    let _ = manager.close_session(&Arc::from(id.as_str())).await;
                }
            });
        }
        // seconds until the session idle the longest among `seen` expires
        let retry = |seen: Vec<std::time::Instant>| {
            seen.into_iter().min().map_or(1, |seen| idle.saturating_sub(seen.elapsed()).as_secs().max(1))
        };
        if sessions.len() >= self.limits.max_sessions {
            let after = retry(sessions.values().map(|s| s.last_seen).collect());
            return Err((
                after,
                format!(
                    "this server has {} live MCP sessions, its limit (--http-max-sessions): end a session \
(DELETE it) or retry in {after} s",
                    sessions.len()
                ),
            ));
        }
        let actor = &scope.actor_id;
        let mine = sessions.values().filter(|s| &s.scope.actor_id == actor).count();
        if mine >= self.limits.max_sessions_per_actor {
            let after = retry(sessions.values().filter(|s| &s.scope.actor_id == actor).map(|s| s.last_seen).collect());
            return Err((
                after,
                format!(
                    "actor `{actor}` has {mine} live MCP sessions, the limit per actor \
(--http-max-sessions-per-actor): end a session (DELETE it) or retry in {after} s"
                ),
            ));
        }
        Ok(())
    }

    /// Checks the host a request names (required: its `Host` header, or in HTTP/2 its `:authority`,
    /// RFC 9113 §8.3.1) and `Origin` (when present) against DNS rebinding.
    ///
    /// # Errors
    /// The reason, for a 403 response.
    pub fn check_host_and_origin(&self, request: &Request) -> Result<(), String> {
        let headers = request.headers();
        let mut hosts = headers.get_all(header::HOST).iter();
        let (host, another) = (hosts.next(), hosts.next());
        if another.is_some() {
            return Err("the request has more than one Host header (RFC 9112 §3.2): send one".into());
        }
        let host = host.map(|h| h.to_str().unwrap_or_default());
        let host = match (host, request.uri().authority().map(|a| a.as_str())) {
            // two names of the host that disagree: which one a proxy or the check reads is a guess
            (Some(host), Some(authority)) if !host.eq_ignore_ascii_case(authority) => {
                return Err(format!(
                    "the request names two hosts, `{host}` in Host and `{authority}` in its URI (RFC 9113 \
§8.3.1): send one"
                ));
            }
            (Some(host), _) | (None, Some(host)) => host,
            (None, None) => return Err("the request has no Host header".into()),
        }
        .to_ascii_lowercase();
        let (name, port) = split_authority(&host);
        let bound_ip = (!self.bound.ip().is_unspecified()).then(|| self.bound.ip().to_string());
        let host_ok = LOOPBACK_NAMES.contains(&name)
            || bound_ip.as_deref() == Some(name)
            || self.allowed_hosts.iter().any(|allowed| match split_authority(allowed) {
                (n, None) => n == name,
                (n, Some(p)) => n == name && port == Some(p),
            });
        if !host_ok {
            return Err(if self.bound.ip().is_loopback() {
                format!(
                    "Host `{host}` is not allowed (DNS rebinding protection): use http://127.0.0.1:{}/ or add the \
name to `allowed_hosts` in the config file",
                    self.bound.port()
                )
            } else {
                format!(
                    "Host `{host}` is not allowed (DNS rebinding protection): add `{host}` (or its name without \
the port) to `allowed_hosts` in the server's config file"
                )
            });
        }
        let Some(origin) = headers.get(header::ORIGIN) else { return Ok(()) };
        let origin = origin.to_str().unwrap_or("").trim_end_matches('/').to_ascii_lowercase();
        if self.origin_allowed(&origin) {
            Ok(())
        } else {
            Err(format!(
                "Origin `{origin}` is not allowed (DNS rebinding protection): only loopback origins and those \
in `allowed_origins` of the config file may call this server"
            ))
        }
    }

    fn origin_allowed(&self, origin: &str) -> bool {
        let Some((scheme, authority)) = origin.split_once("://") else { return false };
        if scheme != "http" && scheme != "https" {
            return false;
        }
        let (name, _) = split_authority(authority);
        if LOOPBACK_NAMES.contains(&name) {
            return true;
        }
        self.allowed_origins.iter().any(|allowed| match allowed.strip_suffix(":*") {
            // `scheme://host:*`: that scheme and host, any port.
            Some(prefix) => {
                origin == prefix
                    || origin
                        .strip_prefix(prefix)
                        .and_then(|rest| rest.strip_prefix(':'))
                        .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            }
            None => allowed == origin,
        })
    }

    /// The identity of a request: the token's, or the server's default when no tokens are configured.
    ///
    /// # Errors
    /// The reason, for a 401 response.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Scope, &'static str> {
        if self.tokens.is_empty() {
            return Ok(self.default_scope.clone());
        }
        if headers.get_all(header::AUTHORIZATION).iter().nth(1).is_some() {
            return Err("the request has more than one Authorization header: send one, `Bearer <token>`");
        }
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer")) // RFC 7235: case-insensitive
            .map(|(_, token)| token.trim())
            .ok_or("this server requires `Authorization: Bearer <token>` with a token from its config file")?;
        token_scope(&self.tokens, token).ok_or("the bearer token is not one of this server's tokens")
    }
}

/// The identity `token` maps to among `tokens`.
fn token_scope(tokens: &[TokenIdentity], token: &str) -> Option<Scope> {
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    tokens.iter().find(|t| t.digest == digest).map(|t| t.scope.clone())
}

/// The paths of MCP; every other path is the memory browser's, which authenticates by its own session
/// cookie ([`crate::ui::access`]) after the same `Host`/`Origin` check.
fn is_mcp_path(path: &str) -> bool {
    matches!(path, "/mcp" | "/sse" | "/message")
}

/// `name[:port]` with IPv6 brackets removed; the port only when it is all digits.
fn split_authority(authority: &str) -> (&str, Option<&str>) {
    if let Some(rest) = authority.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((name, tail)) => (name, tail.strip_prefix(':')),
            None => (rest, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => (name, Some(port)),
        _ => (authority, None),
    }
}

/// What the guard needs to know of a POSTed message.
#[derive(Debug, Default)]
struct Posted {
    /// The id of a request.
    request: Option<rmcp::model::RequestId>,
    /// Is it `initialize` (opens a session)?
    initialize: bool,
    /// The id a `notifications/cancelled` names.
    cancels: Option<rmcp::model::RequestId>,
}

impl Posted {
    fn of(message: &ClientJsonRpcMessage) -> Self {
        match message {
            JsonRpcMessage::Request(r) => Self {
                request: Some(r.id.clone()),
                initialize: matches!(r.request, ClientRequest::InitializeRequest(_)),
                cancels: None,
            },
            JsonRpcMessage::Notification(n) => match &n.notification {
                rmcp::model::ClientNotification::CancelledNotification(c) => {
                    Self { cancels: c.params.request_id.clone(), ..Self::default() }
                }
                _ => Self::default(),
            },
            _ => Self::default(),
        }
    }
}

/// A POST whose body is not JSON gets a JSON-RPC parse error (`-32700`, HTTP 400) here; rmcp would answer
/// it with a plain-text 415. A body over [`MAX_BODY_BYTES`] gets 413, one not received within
/// `body_timeout` 408. Other requests pass unchanged.
async fn parse_error(request: Request, body_timeout: Duration) -> Result<(Request, Posted), Response> {
    if request.method() != axum::http::Method::POST {
        return Ok((request, Posted::default()));
    }
    let (parts, body) = request.into_parts();
    let Ok(read) = tokio::time::timeout(body_timeout, axum::body::to_bytes(body, MAX_BODY_BYTES)).await else {
        return Err(json_error(
            StatusCode::REQUEST_TIMEOUT,
            &format!("the request body did not arrive within {} s (--http-body-timeout)", body_timeout.as_secs_f64()),
        ));
    };
    let Ok(bytes) = read else {
        return Err(json_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("request body over {MAX_BODY_BYTES} bytes: send smaller JSON-RPC messages"),
        ));
    };
    let refuse = |code: i64, id: serde_json::Value, message: String| {
        let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
        (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
    };
    // The common case parses once here (rmcp parses again); only a refused body is looked at twice.
    let message = serde_json::from_slice::<ClientJsonRpcMessage>(&bytes);
    if let Err(e) = &message {
        let value = match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(value) => value,
            Err(e) => {
                let message = format!("parse error: {e}; the body must be one JSON-RPC 2.0 message");
                return Err(refuse(-32700, json!(null), message));
            }
        };
        let id =
            value.get("id").filter(|id| id.is_string() || id.is_i64() || id.is_u64()).cloned().unwrap_or(json!(null));
        let message = if value.is_array() {
            "invalid request: JSON-RPC batches are not supported by MCP (since 2025-06-18); send one message"
                .to_string()
        } else {
            format!(
                "invalid request: {e}; a message needs \"jsonrpc\": \"2.0\", a \"method\" and, for a request, an \"id\""
            )
        };
        return Err(refuse(-32600, id, message));
    }
    let posted = message.as_ref().map(Posted::of).unwrap_or_default();
    Ok((Request::from_parts(parts, axum::body::Body::from(bytes)), posted))
}

/// Request headers a browser may send cross-origin, and response headers it may read (CORS).
const CORS_ALLOW_HEADERS: &str =
    "authorization, content-type, accept, last-event-id, mcp-session-id, mcp-protocol-version, mcp-method, mcp-name";
const CORS_EXPOSE_HEADERS: &str = "mcp-session-id, mcp-protocol-version, www-authenticate";

async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if let Err(reason) = guard.check_host_and_origin(&request) {
        tracing::warn!(%reason, "request refused");
        return json_error(StatusCode::FORBIDDEN, &reason);
    }
    // From here on any Origin header is an allowed one: answer CORS for it.
    let origin = request.headers().get(header::ORIGIN).cloned();
    let mcp = is_mcp_path(request.uri().path());
    let mut response = if !mcp {
        // the memory browser: same-origin pages, no CORS
        return next.run(request).await;
    } else if request.method() == axum::http::Method::OPTIONS {
        cors_preflight()
    } else {
        authenticated(&guard, request, next).await
    };
    if let Some(origin) = origin {
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, HeaderValue::from_static(CORS_EXPOSE_HEADERS));
        headers.insert(header::VARY, HeaderValue::from_static("origin"));
    }
    response
}

/// The `Host`/`Origin` check alone, for a listener that serves no MCP (`astra-mcp ui`).
async fn host_guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    if let Err(reason) = guard.check_host_and_origin(&request) {
        tracing::warn!(%reason, "request refused");
        return json_error(StatusCode::FORBIDDEN, &reason);
    }
    next.run(request).await
}

fn cors_preflight() -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, POST, DELETE"));
    headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static(CORS_ALLOW_HEADERS));
    headers.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    response
}

/// Authentication, then the session's owner, then the body's shape, then the route.
async fn authenticated(guard: &Guard, request: Request, next: Next) -> Response {
    let scope = match guard.authenticate(request.headers()) {
        Ok(scope) => scope,
        Err(reason) => {
            let mut response = json_error(StatusCode::UNAUTHORIZED, reason);
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"astra-mcp\""));
            return response;
        }
    };
    // A streamable HTTP session belongs to the identity that opened it, for every method (POST, the
    // GET stream, DELETE).
    let session = request.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
    let delete = request.method() == axum::http::Method::DELETE;
    // the session's calls in flight and the token that ends them, when the guard knows the session
    let mut calls = None;
    if let Some(id) = &session {
        let mut sessions = guard.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = sessions.get_mut(id) {
            if live.scope != scope {
                return json_error(StatusCode::FORBIDDEN, "this MCP session was opened with another bearer token");
            }
            live.last_seen = std::time::Instant::now();
            calls = Some((live.ids.clone(), live.ended.clone()));
            if delete {
                // its calls in flight end now (killing their test runs), not when rmcp's drain times out
                live.ended.cancel();
                sessions.remove(id);
            }
        }
    }
    let (mut request, posted) = match parse_error(request, guard.limits.body_timeout).await {
        Ok(parsed) => parsed,
        Err(response) => return response,
    };
    if session.is_none()
        && posted.initialize
        && let Err((retry_after, message)) = guard.room_for_session(&scope)
    {
        // the client gets the reason; a log line per refusal would let a client flood the log
        tracing::debug!(actor = %scope.actor_id, "{message}");
        let mut response = json_error(StatusCode::SERVICE_UNAVAILABLE, &message);
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        return response;
    }
    // Ended when this request's answer has been sent, or its client went away first.
    let gone = match &calls {
        Some((_, ended)) => ended.child_token(),
        None => CancellationToken::new(),
    };
    let mut in_flight = None;
    if let Some((ids, _)) = &calls {
        if let Some(id) = &posted.cancels {
            ids.end(id);
        }
        if let Some(id) = &posted.request {
            if !ids.begin(id) {
                let body = json!({"jsonrpc": "2.0", "id": id.clone().into_json_value(), "error": {
                    "code": -32600, "message": super::stdio::duplicate_id_message(id)}});
                return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "application/json")], body.to_string())
                    .into_response();
            }
            in_flight = Some(Answered { ids: ids.clone(), id: id.clone() });
        }
    }
    request.extensions_mut().insert(scope.clone());
    request.extensions_mut().insert(RequestGone(gone.clone()));
    let on_drop = (gone.drop_guard(), in_flight);
    let mut response = next.run(request).await;
    if let Some(new) = response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok())
        && session.is_none()
    {
        let live = LiveSession {
            scope,
            last_seen: std::time::Instant::now(),
            ids: Arc::default(),
            ended: CancellationToken::new(),
        };
        guard.sessions.lock().unwrap_or_else(|p| p.into_inner()).insert(new.to_string(), live);
    }
    // an ended session (expired after rmcp's idle timeout: 404) has no owner any more
    if response.status() == StatusCode::NOT_FOUND
        && let Some(id) = &session
    {
        guard.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
    if delete {
        // rmcp answers a session DELETE with 202; clients (the Python SDK) expect 200 or 204.
        if response.status() == StatusCode::ACCEPTED {
            *response.status_mut() = StatusCode::NO_CONTENT;
        }
    }
    keep_until_sent(response, on_drop)
}

/// Frees a request's id in its session once dropped (its answer was sent, or its client went away).
struct Answered {
    ids: Arc<InFlightIds>,
    id: rmcp::model::RequestId,
}

impl Drop for Answered {
    fn drop(&mut self) {
        self.ids.end(&self.id);
    }
}

/// The router of every HTTP route, behind the [`Guard`]: MCP when `options.mcp`, and the memory browser.
pub fn router(
    hosts: Arc<Hosts>,
    guard: Guard,
    options: &HttpOptions,
    shutdown: Arc<Shutdown>,
    stop: CancellationToken,
) -> Router {
    let ui = {
        let tokens = options.tokens.clone();
        let lookup: Option<Box<crate::ui::access::TokenLookup>> =
            (!tokens.is_empty()).then(|| Box::new(move |token: &str| token_scope(&tokens, token)) as Box<_>);
        let open = options.tokens.is_empty() && options.login_code.is_none();
        let access = crate::ui::Access::new(hosts.default_scope().clone(), open, options.login_code.clone(), lookup);
        crate::ui::router(crate::ui::Ui::new(hosts.clone(), access))
    };
    if !options.mcp {
        return ui
            .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
            .layer(middleware::from_fn_with_state(Arc::new(guard), host_guard))
            .layer(middleware::from_fn(track));
    }
    let session_idle = guard.limits.session_idle;
    let mcp = {
        let hosts = hosts.clone();
        let shutdown = shutdown.clone();
        // Host/Origin are checked by our guard, the same way for every route.
        let config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_cancellation_token(stop)
            .with_max_request_body_bytes(MAX_BODY_BYTES);
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(session_idle);
        let sessions = Arc::new(sessions);
        let _ = guard.manager.set(sessions.clone());
        StreamableHttpService::new(
            move || Ok(McpServer::streamable_http(hosts.clone()).with_shutdown(shutdown.clone())),
            sessions,
            config,
        )
    };
    Router::new()
        .route_service("/mcp", mcp)
        .merge(super::sse::routes(hosts, shutdown))
        .merge(ui)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(Arc::new(guard), self::guard))
        .layer(middleware::from_fn(track))
}

/// Binds `options.addr` and serves until SIGINT/SIGTERM, then drains: calls in flight get up to
/// `options.grace` to finish, streams close, and the function returns. `on_bound` receives the bound
/// address (port 0 picks a free port).
///
/// # Errors
/// When the address cannot be bound or the server fails.
pub async fn serve(
    hosts: Arc<Hosts>,
    options: HttpOptions,
    shutdown: Arc<Shutdown>,
    on_bound: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(options.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", options.addr))?;
    let bound = listener.local_addr()?;
    let connections = Connections::new(options.limits.clone());
    let listener = LimitedListener::new(listener, connections);
    let guard = Guard::new(&options, bound, hosts.default_scope().clone());
    let stop = CancellationToken::new();
    let app = router(hosts, guard, &options, shutdown.clone(), stop.clone());
    // A wildcard bind is reached under other names: say so, and print a URL that works here.
    let shown = if bound.ip().is_unspecified() {
        if options.allowed_hosts.is_empty() {
            tracing::warn!(
                "listening on all interfaces: clients on other machines send the name or address they use as \
`Host`; list those in `allowed_hosts` of the config file, or they get 403"
            );
        }
        let loopback: std::net::IpAddr =
            if bound.is_ipv4() { std::net::Ipv4Addr::LOCALHOST.into() } else { std::net::Ipv6Addr::LOCALHOST.into() };
        SocketAddr::new(loopback, bound.port())
    } else {
        bound
    };
    // before the URL is announced: a signal right after it drains like any other
    let signal = signal_received();
    on_bound(shown);
    let tokens = match options.tokens.len() {
        0 => "no bearer tokens".to_string(),
        1 => "1 bearer token".to_string(),
        n => format!("{n} bearer tokens"),
    };
    if options.mcp {
        tracing::info!(
            "serving MCP over HTTP: streamable HTTP at http://{bound}/mcp, legacy SSE at http://{bound}/sse, the \
memory browser at http://{bound}/ ({tokens})"
        );
    } else {
        tracing::info!("serving the memory browser at http://{bound}/ ({tokens})");
    }
    let draining = {
        let shutdown = shutdown.clone();
        async move {
            drain_after(signal, &shutdown, options.grace).await;
            stop.cancel(); // ends rmcp's sessions and streams; legacy SSE streams end at Abandoned
        }
    };
    axum::serve(listener, app.into_make_service_with_connect_info::<ConnHandle>())
        .with_graceful_shutdown(draining)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests;
