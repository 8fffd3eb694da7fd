//! What keeps the HTTP listener up under a hostile or broken client (docs/limits.md): a cap on open
//! connections, a deadline for a connection's first request and one for a connection idle between
//! requests, and the bookkeeping of which connection is busy. Sessions and test runs have their own caps
//! ([`crate::transport::http`], [`crate::memory::testrun`]).
//!
//! axum's `serve` takes any [`Listener`]: [`LimitedListener`] accepts a connection only when there is
//! room for it, and wraps it in a [`LimitedIo`] that fails its reads once the connection has been idle
//! past its deadline, or once it was closed to make room. hyper then drops the connection (hyper's own
//! `header_read_timeout` needs a hyper-util server builder, which axum's `serve` does not expose). The
//! [`track`] middleware counts a connection busy from a request's headers to the end of its response body
//! (an SSE stream included), so a long tool call or an open event stream is never "idle".

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody};
use axum::extract::Request;
use axum::extract::connect_info::{ConnectInfo, Connected};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use axum::serve::{IncomingStream, Listener};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// The limits of one HTTP server (flags `--http-*`, docs/limits.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// Open connections at most. Past it the connection idle the longest is closed to make room; when
    /// every connection is busy, new ones wait in the kernel's accept queue.
    pub max_connections: usize,
    /// How long a new connection may take to send its first request's headers.
    pub header_timeout: Duration,
    /// How long a request may take to send its body (at most 4 MiB).
    pub body_timeout: Duration,
    /// How long a connection may stay open between two requests (HTTP keep-alive), and how long it may
    /// take to send the headers of a request after the first.
    pub idle_timeout: Duration,
    /// Live streamable HTTP sessions at most, in all.
    pub max_sessions: usize,
    /// Live streamable HTTP sessions at most per actor (bearer token identity).
    pub max_sessions_per_actor: usize,
    /// A session with no request for this long ends (rmcp's session keep-alive).
    pub session_idle: Duration,
}

/// Default of [`HttpLimits::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: u64 = 1024;
/// Default of [`HttpLimits::header_timeout`], in seconds.
pub const DEFAULT_HEADER_TIMEOUT_SECS: u64 = 10;
/// Default of [`HttpLimits::body_timeout`], in seconds.
pub const DEFAULT_BODY_TIMEOUT_SECS: u64 = 30;
/// Default of [`HttpLimits::idle_timeout`], in seconds.
pub const DEFAULT_IDLE_TIMEOUT_SECS: u64 = 120;
/// Default of [`HttpLimits::max_sessions`].
pub const DEFAULT_MAX_SESSIONS: u64 = 256;
/// Default of [`HttpLimits::max_sessions_per_actor`].
pub const DEFAULT_MAX_SESSIONS_PER_ACTOR: u64 = 32;
/// Default of [`HttpLimits::session_idle`], in seconds (rmcp's own default session keep-alive).
pub const DEFAULT_SESSION_IDLE_SECS: u64 = 300;

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS as usize,
            header_timeout: Duration::from_secs(DEFAULT_HEADER_TIMEOUT_SECS),
            body_timeout: Duration::from_secs(DEFAULT_BODY_TIMEOUT_SECS),
            idle_timeout: Duration::from_secs(DEFAULT_IDLE_TIMEOUT_SECS),
            max_sessions: DEFAULT_MAX_SESSIONS as usize,
            max_sessions_per_actor: DEFAULT_MAX_SESSIONS_PER_ACTOR as usize,
            session_idle: Duration::from_secs(DEFAULT_SESSION_IDLE_SECS),
        }
    }
}

/// The open connections of one server.
#[derive(Debug)]
pub struct Connections {
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    /// Signalled when a connection closes (the accept loop may be waiting for room).
    freed: tokio::sync::Notify,
    limits: HttpLimits,
}

/// One open connection: whether a request is in progress on it, and since when it is idle.
#[derive(Debug)]
pub struct Conn {
    /// Requests whose headers were read and whose response body has not ended.
    busy: AtomicUsize,
    /// Has a response been sent on it (the idle deadline applies, not the first-header one)?
    served: AtomicBool,
    idle_since: Mutex<Instant>,
    /// Cancelled to close the connection (to make room for a new one).
    close: CancellationToken,
}

impl Conn {
    /// When this connection, idle now, is closed; `None` while a request is in progress.
    fn deadline(&self, limits: &HttpLimits) -> Option<Instant> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        let since = *self.idle_since.lock().unwrap_or_else(|p| p.into_inner());
        Some(since + if self.served.load(Ordering::Acquire) { limits.idle_timeout } else { limits.header_timeout })
    }

    fn idle_since(&self) -> Instant {
        *self.idle_since.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Connections {
    pub fn new(limits: HttpLimits) -> Arc<Self> {
        Arc::new(Self {
            open: Mutex::default(),
            next_id: AtomicU64::new(0),
            freed: tokio::sync::Notify::new(),
            limits: HttpLimits { max_connections: limits.max_connections.max(1), ..limits },
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Returns once a new connection may be accepted: at once under the cap; at the cap, once the
    /// connection idle the longest has been closed to make room; when every connection is busy, once one
    /// closes. A connection counts until its socket is dropped, so the descriptors held never exceed the
    /// cap (plus the one being accepted), however slowly the closed connections' tasks run.
    async fn make_room(&self) {
        let mut warned = false;
        loop {
            let freed = self.freed.notified();
            {
                let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
                if open.len() < self.limits.max_connections {
                    return;
                }
                let closing = open.values().any(|c| c.close.is_cancelled());
                let idlest = open
                    .values()
                    .filter(|c| c.busy.load(Ordering::Acquire) == 0 && !c.close.is_cancelled())
                    .min_by_key(|c| c.idle_since());
                if let Some(conn) = idlest {
                    conn.close.cancel();
                    tracing::debug!(
                        max = self.limits.max_connections,
                        "connection cap reached: closing the idlest one"
                    );
                } else if !closing && !warned {
                    tracing::warn!(
                        max = self.limits.max_connections,
                        "every connection is busy: new connections wait (--http-max-connections)"
                    );
                    warned = true;
                }
            }
            freed.await;
        }
    }

    fn register(self: &Arc<Self>) -> (u64, Arc<Conn>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
            close: CancellationToken::new(),
        });
        self.open.lock().unwrap_or_else(|p| p.into_inner()).insert(id, conn.clone());
        (id, conn)
    }

    fn release(&self, id: u64) {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        self.freed.notify_one();
    }
}

/// A TCP listener that keeps to [`HttpLimits::max_connections`] and hands out [`LimitedIo`]s.
pub struct LimitedListener {
    inner: TcpListener,
    connections: Arc<Connections>,
}

impl LimitedListener {
    pub fn new(inner: TcpListener, connections: Arc<Connections>) -> Self {
        Self { inner, connections }
    }
}

impl Listener for LimitedListener {
    type Io = LimitedIo;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            self.connections.make_room().await;
            match self.inner.accept().await {
                Ok((stream, remote)) => {
                    let _ = stream.set_nodelay(true);
                    let (id, conn) = self.connections.register();
                    let closed = Box::pin(conn.close.clone().cancelled_owned());
                    let io = LimitedIo {
                        stream,
                        id,
                        conn,
                        connections: self.connections.clone(),
                        closed,
                        timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
                    };
                    return (io, remote);
                }
                Err(e) => {
                    // EMFILE/ENFILE (out of descriptors) or a connection reset before it was accepted:
                    // the listener goes on; a pause keeps an exhausted process from spinning
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// An accepted connection: reads fail once it is idle past its deadline or closed to make room.
pub struct LimitedIo {
    stream: TcpStream,
    id: u64,
    conn: Arc<Conn>,
    connections: Arc<Connections>,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    timer: Pin<Box<tokio::time::Sleep>>,
}

impl Drop for LimitedIo {
    fn drop(&mut self) {
        self.connections.release(self.id);
    }
}

impl AsyncRead for LimitedIo {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.closed.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed to make room for a new connection",
            )));
        }
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Pending => {
                // nothing to read now: is the connection idle past its deadline?
                if let Some(deadline) = this.conn.deadline(&this.connections.limits) {
                    let deadline = tokio::time::Instant::from_std(deadline);
                    if this.timer.deadline() != deadline {
                        this.timer.as_mut().reset(deadline);
                    }
                    if this.timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "no complete request within the connection's deadline",
                        )));
                    }
                }
                Poll::Pending
            }
            ready => ready,
        }
    }
}

impl AsyncWrite for LimitedIo {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The connection a request came on, as axum's `ConnectInfo` (see [`track`]).
#[derive(Debug, Clone)]
pub struct ConnHandle(Arc<Conn>);

impl Connected<IncomingStream<'_, LimitedListener>> for ConnHandle {
    fn connect_info(stream: IncomingStream<'_, LimitedListener>) -> Self {
        Self(stream.io().conn.clone())
    }
}

/// Counts its connection busy until dropped.
struct Busy(Arc<Conn>);

impl Busy {
    fn new(conn: Arc<Conn>) -> Self {
        conn.busy.fetch_add(1, Ordering::AcqRel);
        Self(conn)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.served.store(true, Ordering::Release);
        *self.0.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.0.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Middleware: the request's connection is busy from here until its response body has been sent or
/// dropped. Requests without a [`ConnHandle`] (a router served another way) pass unchanged.
pub async fn track(request: Request, next: Next) -> Response {
    let Some(ConnectInfo(ConnHandle(conn))) = request.extensions().get::<ConnectInfo<ConnHandle>>().cloned() else {
        return next.run(request).await;
    };
    let busy = Busy::new(conn);
    let response = next.run(request).await;
    keep_until_sent(response, busy)
}

/// `response` with `guard` kept alive until its body has been sent, or dropped because the client went
/// away. A body of known length (a whole JSON answer) is already complete: the guard is dropped now.
pub fn keep_until_sent<G: Send + 'static>(response: Response, guard: G) -> Response {
    if response.body().size_hint().exact().is_some() {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    let stream = body.into_data_stream().map(move |chunk| {
        let _ = &guard; // lives as long as the stream
        chunk
    });
    Response::from_parts(parts, Body::from_stream(stream))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_connections: usize) -> HttpLimits {
        HttpLimits { max_connections, header_timeout: Duration::from_millis(200), ..HttpLimits::default() }
    }

    #[tokio::test]
    async fn at_the_cap_the_idlest_connection_is_closed_and_a_busy_one_never() {
        let connections = Connections::new(limits(2));
        let (_, first) = connections.register();
        let (second_id, second) = connections.register();
        let busy = Busy::new(first.clone());
        let room = tokio::spawn({
            let connections = connections.clone();
            async move { connections.make_room().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(second.close.is_cancelled(), "the idle connection is closed to make room");
        assert!(!first.close.is_cancelled(), "a busy connection is never closed");
        assert!(!room.is_finished(), "a closed connection counts until its socket is dropped");
        connections.release(second_id); // what dropping its socket does
        tokio::time::timeout(Duration::from_secs(1), room).await.expect("room once the socket is gone").unwrap();
        assert_eq!(connections.open(), 1);
        let (_, third) = connections.register();
        let waiting = tokio::time::timeout(Duration::from_millis(100), {
            let busy_third = Busy::new(third.clone());
            let connections = connections.clone();
            async move {
                connections.make_room().await;
                drop(busy_third);
            }
        })
        .await;
        assert!(waiting.is_err(), "with every connection busy, a new one waits");
        drop(busy);
    }

    #[test]
    fn an_idle_connection_has_a_deadline_and_a_busy_one_none() {
        let l = limits(2);
        let conn = Arc::new(Conn {
            busy: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
            close: CancellationToken::new(),
        });
        let first = conn.deadline(&l).unwrap();
        assert!(first <= Instant::now() + l.header_timeout);
        let busy = Busy::new(conn.clone());
        assert_eq!(conn.deadline(&l), None);
        drop(busy);
        let next = conn.deadline(&l).unwrap();
        assert!(next > Instant::now() + l.idle_timeout - Duration::from_secs(1), "after a response: the idle timeout");
    }
}
