//! MCP wiring only: [`server::McpServer`] adapts the transport-free tool registry to rmcp's
//! `ServerHandler`; [`stdio`] serves it over stdin/stdout and [`http`] over streamable HTTP and legacy
//! HTTP+SSE (`sse`), within [`limits`]; [`shutdown`] drains all of them on a signal. No memory rules live here.

pub mod http;
pub mod limits;
pub mod server;
pub mod shutdown;
mod sse;
pub mod stdio;

pub use server::McpServer;
pub use shutdown::{Shutdown, signal_received};

/// An HTTP refusal with a JSON-RPC error body (`-32600`, id `null`): how the HTTP guard, the
/// streamable HTTP route and the legacy SSE routes refuse a request a client can correct.
pub(crate) fn json_error(status: axum::http::StatusCode, message: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": message}});
    (
        status,
        [(axum::http::header::CONTENT_TYPE, axum::http::HeaderValue::from_static("application/json"))],
        body.to_string(),
    )
        .into_response()
}
