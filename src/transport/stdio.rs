//! Serving one MCP session over stdin/stdout. stdout carries only JSON-RPC; logs go to stderr.

use rmcp::ServiceExt;

use super::McpServer;

/// Serves `server` on this process's stdin/stdout until the client disconnects.
///
/// # Errors
/// When the MCP handshake fails or the transport breaks.
pub async fn serve(server: McpServer) -> anyhow::Result<()> {
    let running = server.serve(rmcp::transport::io::stdio_pipes()).await?;
    tracing::info!("serving MCP over stdio");
    running.waiting().await?;
    Ok(())
}
