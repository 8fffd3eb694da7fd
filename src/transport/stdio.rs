//! Serving one MCP session over stdin/stdout. stdout carries only JSON-RPC; logs go to stderr.
//!
//! Shutdown: when stdin reaches EOF (the client closed the pipe) or SIGINT/SIGTERM arrives, in-flight
//! tool calls are abandoned at once, which kills their test process groups (`memory::testrun`), before
//! clients that kill the server after a short grace period (the Python SDK waits 2 s) get to do so.

use std::pin::Pin;
use std::task::{Context, Poll};

use rmcp::ServiceExt;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::watch;

use super::McpServer;

/// Serves `server` on this process's stdin/stdout until the client disconnects or a signal arrives.
///
/// # Errors
/// When the MCP handshake fails or the transport breaks.
pub async fn serve(server: McpServer) -> anyhow::Result<()> {
    let (shutdown, watcher) = watch::channel(false);
    let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
    let stdin = EofSignal { inner: stdin, on_eof: Some(shutdown.clone()) };
    let running = server.with_shutdown(watcher).serve((stdin, stdout)).await?;
    tracing::info!("serving MCP over stdio");
    let service = running.cancellation_token();
    tokio::spawn(async move {
        signal_received().await;
        tracing::info!("signal received, shutting down");
        let _ = shutdown.send(true);
        service.cancel();
    });
    running.waiting().await?;
    Ok(())
}

async fn signal_received() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// Passes reads through and flips the shutdown flag at EOF.
struct EofSignal<R> {
    inner: R,
    on_eof: Option<watch::Sender<bool>>,
}

impl<R: AsyncRead + Unpin> AsyncRead for EofSignal<R> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(())))
            && buf.filled().len() == before
            && buf.remaining() > 0
            && let Some(tx) = self.on_eof.take()
        {
            tracing::debug!("stdin closed");
            let _ = tx.send(true);
        }
        poll
    }
}
