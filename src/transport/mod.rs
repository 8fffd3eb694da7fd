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
