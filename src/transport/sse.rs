//! The legacy HTTP+SSE transport of MCP 2024-11-05 (docs/http.md), built here because rmcp 3.11 has no
//! server for it: `GET /sse` opens a session whose stream first sends an `endpoint` event with the URI to
//! POST to, then every server message as a `message` event; each `POST /message?sessionId=…` is answered
//! `202 Accepted` and its response arrives on the stream. A session belongs to the identity that opened
//! it. Both routes sit behind the listener's guard ([`super::http`]), which puts that identity in the
//! request's extensions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::channel::mpsc;
use futures::{SinkExt, Stream, StreamExt};
use rmcp::ServiceExt;
use rmcp::model::ClientJsonRpcMessage;
use serde::Deserialize;
use serde_json::json;

use super::McpServer;
use super::json_error;
use super::shutdown::{Phase, Shutdown};
use crate::domain::Scope;
use crate::tools::Hosts;

/// `GET /sse` and `POST /message` over the tool hosts.
pub(super) fn routes(hosts: Arc<Hosts>, shutdown: Arc<Shutdown>) -> Router {
    Router::new().route("/sse", get(sse_open)).route("/message", post(sse_message)).with_state(SseState {
        hosts,
        shutdown,
        sessions: Arc::default(),
    })
}

/// The open legacy SSE sessions: where each one's POSTed messages go, and whose it is.
#[derive(Default)]
struct SseSessions {
    open: Mutex<HashMap<String, SseSession>>,
}

struct SseSession {
    inbound: mpsc::Sender<ClientJsonRpcMessage>,
    scope: Scope,
}

#[derive(Clone)]
struct SseState {
    hosts: Arc<Hosts>,
    shutdown: Arc<Shutdown>,
    sessions: Arc<SseSessions>,
}

/// Removes its session when the SSE stream is dropped (the client went away or the server stops), which
/// ends the session's MCP service.
struct SessionGuard {
    id: String,
    sessions: Arc<SseSessions>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.sessions.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
        tracing::debug!(session = %self.id, "legacy SSE session closed");
    }
}

async fn sse_open(
    State(state): State<SseState>,
    axum::Extension(scope): axum::Extension<Scope>,
) -> Sse<impl Stream<Item = Result<Event, std::convert::Infallible>>> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (inbound_tx, inbound_rx) = mpsc::channel::<ClientJsonRpcMessage>(64);
    let (outbound_tx, outbound_rx) = mpsc::channel(64);
    state
        .sessions
        .open
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id.clone(), SseSession { inbound: inbound_tx, scope: scope.clone() });
    let server = McpServer::connection(state.hosts.clone(), scope).with_shutdown(state.shutdown.clone());
    let session = id.clone();
    tokio::spawn(async move {
        match server.serve((outbound_tx, inbound_rx)).await {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => tracing::info!(%session, "legacy SSE session ended before initialize completed: {e}"),
        }
    });
    tracing::debug!(session = %id, "legacy SSE session opened");
    let endpoint = Event::default().event("endpoint").data(format!("/message?sessionId={id}"));
    let guard = SessionGuard { id, sessions: state.sessions.clone() };
    let messages = outbound_rx.map(move |message: rmcp::model::ServerJsonRpcMessage| {
        let _ = &guard; // lives as long as the stream
        let data = serde_json::to_string(&message).expect("JSON-RPC messages serialize");
        Ok(Event::default().event("message").data(data))
    });
    let shutdown = state.shutdown.clone();
    let stream = futures::stream::once(async move { Ok(endpoint) })
        .chain(messages)
        .take_until(async move { shutdown.reached(Phase::Abandoned).await });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[derive(Deserialize)]
struct MessageQuery {
    #[serde(rename = "sessionId")]
    session_id: Option<String>,
}

async fn sse_message(
    State(state): State<SseState>,
    axum::Extension(scope): axum::Extension<Scope>,
    Query(query): Query<MessageQuery>,
    body: Bytes,
) -> Response {
    let Some(session_id) = query.session_id else {
        return json_error(StatusCode::BAD_REQUEST, "missing `sessionId`: POST to the URI of the `endpoint` event");
    };
    let inbound = {
        let open = state.sessions.open.lock().unwrap_or_else(|p| p.into_inner());
        match open.get(&session_id) {
            None => None,
            Some(session) if session.scope != scope => {
                return json_error(StatusCode::FORBIDDEN, "this session was opened with another bearer token");
            }
            Some(session) => Some(session.inbound.clone()),
        }
    };
    let Some(mut inbound) = inbound else {
        return json_error(StatusCode::NOT_FOUND, "unknown or closed session: open a new one with GET /sse");
    };
    let message: ClientJsonRpcMessage = match serde_json::from_slice(&body) {
        Ok(message) => message,
        Err(e) => {
            let code = if serde_json::from_slice::<serde_json::Value>(&body).is_ok() { -32600 } else { -32700 };
            let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": format!(
                "not a JSON-RPC 2.0 MCP message: {e}"
            )}});
            return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "application/json")], body.to_string())
                .into_response();
        }
    };
    match inbound.send(message).await {
        Ok(()) => (StatusCode::ACCEPTED, "Accepted").into_response(),
        Err(_) => json_error(StatusCode::NOT_FOUND, "the session has ended: open a new one with GET /sse"),
    }
}
