//! MCP wiring only: [`server::McpServer`] adapts the transport-free tool registry to rmcp's
//! `ServerHandler`; [`stdio`] serves it over stdin/stdout. No memory rules live here.

pub mod server;
pub mod stdio;

pub use server::{McpServer, render_core_memory};
