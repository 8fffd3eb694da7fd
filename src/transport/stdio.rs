//! Serving one MCP session over stdin/stdout: newline-delimited JSON-RPC 2.0 (MCP "stdio" transport).
//! stdout carries only JSON-RPC; logs go to stderr.
//!
//! Frames are read here rather than by rmcp's codec so that no input goes unanswered (issue 4): a line
//! that is not JSON gets a `-32700` parse error, a JSON value that is not an MCP message gets `-32600`
//! (with the request's `id` when it has one), and a line over [`MAX_FRAME_BYTES`] is skipped and answered
//! with `-32700`. A malformed notification is only logged: JSON-RPC 2.0 §4.1 forbids replying to one.
//! Every well-formed message goes to rmcp, which answers unknown methods with `-32601`, except a request
//! whose id is still in flight in this session ([`InFlightIds`]): it gets `-32600` at once.
//!
//! Shutdown: when stdin reaches EOF, the calls already received (in flight, or read but not yet started,
//! as when a script pipes a whole session in) get [`EOF_GRACE`] to finish and answer; then whatever still
//! runs is abandoned (which kills its test process group, `memory::testrun`). The grace is shorter than
//! the 2 s the Python SDK waits after closing stdin before it terminates the server, so the server kills
//! its test runs itself. On SIGINT/SIGTERM the server drains ([`Shutdown`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc;
use futures::{FutureExt, SinkExt, StreamExt};
use rmcp::ServiceExt;
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, JsonRpcMessage, RequestId, ServerJsonRpcMessage};
use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::McpServer;
use super::shutdown::{Shutdown, drain_after, signal_received};

/// Largest JSON-RPC frame read from stdin, in bytes (the limit rmcp's HTTP server applies to a body).
pub const MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;

/// How long calls already received may still run after stdin reaches EOF, before they are abandoned.
pub const EOF_GRACE: Duration = Duration::from_secs(1);

/// JSON-RPC 2.0 error codes (JSON-RPC 2.0 specification §5.1).
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;

/// Serves `server` on this process's stdin/stdout until the client disconnects, a signal arrives, or
/// `stop` resolves (the caller's fatal error, such as a store that could not be opened). On a signal or
/// `stop` after the handshake, calls in flight get up to `grace` to finish and their answers are
/// written; before it, the session ends at once.
///
/// # Errors
/// When the MCP handshake fails or the transport breaks.
pub async fn serve(
    server: McpServer,
    shutdown: Arc<Shutdown>,
    grace: Duration,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    // installed before the handshake: a signal right after `initialize` drains like any other
    let stop = futures::future::select(Box::pin(signal_received()), Box::pin(stop)).map(|_| ()).boxed().shared();
    let (lines_tx, mut lines_rx) = mpsc::channel::<String>(64);
    // One writer owns stdout, so rmcp's messages and our error replies never interleave within a line.
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(mut line) = lines_rx.next().await {
            line.push('\n');
            if stdout.write_all(line.as_bytes()).await.is_err() || stdout.flush().await.is_err() {
                break; // the client closed its end
            }
        }
    });
    let (messages_tx, messages_rx) = mpsc::channel::<ClientJsonRpcMessage>(64);
    let ids = Arc::new(InFlightIds::default());
    let input = Input { messages: messages_tx, replies: lines_tx.clone(), ids: ids.clone() };
    let reader = tokio::spawn(read_frames(BufReader::new(tokio::io::stdin()), input, {
        let shutdown = shutdown.clone();
        // Not `drain`: that would refuse the calls rmcp has yet to start. No call arrives after EOF anyway.
        move || {
            tracing::debug!(in_flight = shutdown.in_flight(), "stdin closed: calls already received get {EOF_GRACE:?}");
            tokio::spawn(async move {
                tokio::time::sleep(EOF_GRACE).await;
                shutdown.abandon();
            });
        }
    }));
    let sink = lines_tx.with(move |message: ServerJsonRpcMessage| {
        ids.answered(&message);
        futures::future::ready(Ok::<_, mpsc::SendError>(
            serde_json::to_string(&message).expect("JSON-RPC messages serialize"),
        ))
    });
    let running = tokio::select! {
        running = server.with_shutdown(shutdown.clone()).serve((Box::pin(sink), messages_rx)) => running?,
        () = stop.clone() => {
            // no session yet, so nothing to drain (the handshake's future, and its sink, are dropped)
            tracing::info!("stopping before the MCP handshake completed");
            reader.abort();
            let _ = writer.await;
            return Ok(());
        }
    };
    tracing::info!("serving MCP over stdio");
    let service = running.cancellation_token();
    let on_signal = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            drain_after(stop, &shutdown, grace).await;
            service.cancel();
        }
    });
    // rmcp returns once the input has ended and every call it started has answered, or on a cancel
    let result = running.waiting().await;
    shutdown.abandon();
    on_signal.abort();
    reader.abort();
    let _ = writer.await;
    result?;
    Ok(())
}

/// The ids of this session's requests that have not been answered yet.
///
/// rmcp keeps a session's calls by request id: a second request under an id still in flight replaces
/// the first one's entry, and one of the two answers is then dropped (the client waits forever). MCP
/// forbids reusing an id within a session (specification 2025-06-18, "Basic": "The request ID MUST NOT
/// have been previously used by the requestor within the same session"); such a request is refused here
/// with `-32600` while the first is in flight. An id whose request was answered (or cancelled) is
/// accepted again: clients that reuse ids one request at a time keep working, and the set stays as
/// small as the number of calls in flight.
#[derive(Debug, Default)]
pub(crate) struct InFlightIds(Mutex<HashSet<RequestId>>);

impl InFlightIds {
    /// Records `id` as in flight; `false` when it already is (the request must be refused).
    pub(crate) fn begin(&self, id: &RequestId) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone())
    }

    /// No request in flight?
    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
    }

    /// Forgets `id` (its request was answered or cancelled).
    pub(crate) fn end(&self, id: &RequestId) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }

    /// Forgets the id that `message` answers, if it is a response or an error.
    fn answered(&self, message: &ServerJsonRpcMessage) {
        match message {
            JsonRpcMessage::Response(response) => self.end(&response.id),
            JsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    self.end(id);
                }
            }
            _ => {}
        }
    }

    /// Admits a client message: `Err` with the error reply for a request whose id is in flight. A
    /// cancellation frees the id it names (rmcp sends no answer for a cancelled request).
    pub(crate) fn admit(&self, message: &ClientJsonRpcMessage) -> Result<(), String> {
        match message {
            JsonRpcMessage::Request(request) if !self.begin(&request.id) => Err(error_reply(
                request.id.clone().into_json_value(),
                INVALID_REQUEST,
                duplicate_id_message(&request.id),
            )),
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) = &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.end(id);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// What a request reusing the in-flight id `id` is told.
pub(crate) fn duplicate_id_message(id: &RequestId) -> String {
    format!(
        "invalid request: id {id} is already used by a request of this session that has not been answered yet; \
give every request its own id (MCP: a request id is never reused within a session)"
    )
}

/// Where [`read_frames`] sends what it reads.
struct Input {
    /// MCP messages, to rmcp.
    messages: mpsc::Sender<ClientJsonRpcMessage>,
    /// Error replies, to stdout.
    replies: mpsc::Sender<String>,
    ids: Arc<InFlightIds>,
}

/// Reads newline-delimited frames until EOF: forwards MCP messages to `messages`, answers malformed
/// frames and requests reusing an id in flight on `replies`, and calls `on_eof` at the end of input.
async fn read_frames<R: AsyncBufRead + Unpin>(mut input: R, sinks: Input, on_eof: impl FnOnce()) {
    let Input { mut messages, mut replies, ids } = sinks;
    let mut frame = Vec::new();
    loop {
        frame.clear();
        let oversized = match read_frame(&mut input, &mut frame).await {
            Ok(Frame::Eof) | Err(_) => break,
            Ok(Frame::Complete) => false,
            Ok(Frame::Oversized) => true,
        };
        let reply = if oversized {
            tracing::warn!("stdin frame over {MAX_FRAME_BYTES} bytes skipped");
            Some(error_reply(
                Value::Null,
                PARSE_ERROR,
                format!(
                    "message over {MAX_FRAME_BYTES} bytes: send smaller JSON-RPC messages (shorten long arguments)"
                ),
            ))
        } else {
            match classify(&frame) {
                Classified::Message(message) => match ids.admit(&message) {
                    Ok(()) => {
                        if messages.send(*message).await.is_err() {
                            break; // the service has ended
                        }
                        None
                    }
                    Err(reply) => Some(reply),
                },
                Classified::Blank => None,
                Classified::Reply(reply) => Some(reply),
            }
        };
        if let Some(reply) = reply
            && replies.send(reply).await.is_err()
        {
            break;
        }
    }
    on_eof();
}

enum Frame {
    Complete,
    Oversized,
    Eof,
}

/// Reads one line into `frame` (without its `\n`), keeping at most [`MAX_FRAME_BYTES`]; the rest of a
/// longer line is read and dropped.
async fn read_frame<R: AsyncBufRead + Unpin>(input: &mut R, frame: &mut Vec<u8>) -> std::io::Result<Frame> {
    let mut oversized = false;
    let mut any = false;
    loop {
        let buf = input.fill_buf().await?;
        if buf.is_empty() {
            return Ok(if !any {
                Frame::Eof
            } else if oversized {
                Frame::Oversized
            } else {
                Frame::Complete
            });
        }
        any = true;
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !oversized && frame.len() + chunk.len() <= MAX_FRAME_BYTES {
            frame.extend_from_slice(chunk);
        } else {
            oversized = true;
            frame.clear();
        }
        let used = done.unwrap_or(buf.len());
        input.consume(used);
        if done.is_some() {
            return Ok(if oversized { Frame::Oversized } else { Frame::Complete });
        }
    }
}

enum Classified {
    Message(Box<ClientJsonRpcMessage>),
    Blank,
    /// The error response to write back.
    Reply(String),
}

/// Decides what a frame is: an MCP message, nothing (blank or an unanswerable malformed notification or
/// response), or an error to answer with.
fn classify(frame: &[u8]) -> Classified {
    let Ok(text) = std::str::from_utf8(frame) else {
        return Classified::Reply(error_reply(
            Value::Null,
            PARSE_ERROR,
            "message is not UTF-8: send JSON-RPC 2.0 as UTF-8 JSON, one message per line".into(),
        ));
    };
    let text = text.trim();
    if text.is_empty() {
        return Classified::Blank;
    }
    // Well-formed messages parse once; only a refused frame is parsed again, to classify it.
    match serde_json::from_str::<ClientJsonRpcMessage>(text) {
        Ok(message) => Classified::Message(Box::new(message)),
        Err(e) => {
            let value: Value = match serde_json::from_str(text) {
                Ok(value) => value,
                Err(e) => {
                    return Classified::Reply(error_reply(
                        Value::Null,
                        PARSE_ERROR,
                        format!("parse error: {e}; send one JSON-RPC 2.0 message per line"),
                    ));
                }
            };
            let Some(object) = value.as_object() else {
                return Classified::Reply(error_reply(Value::Null, INVALID_REQUEST, invalid_message(&value, &e)));
            };
            if object.contains_key("result") || object.contains_key("error") {
                tracing::warn!("malformed JSON-RPC response from the client ignored: {e}");
                return Classified::Blank;
            }
            match object.get("id").filter(|id| id.is_string() || id.is_i64() || id.is_u64()) {
                Some(id) => Classified::Reply(error_reply(id.clone(), INVALID_REQUEST, invalid_message(&value, &e))),
                // A notification (JSON-RPC 2.0 §4.1): never answered, even when malformed.
                None if object.contains_key("method") && !object.contains_key("id") => {
                    tracing::warn!("malformed notification ignored: {e}");
                    Classified::Blank
                }
                None => Classified::Reply(error_reply(Value::Null, INVALID_REQUEST, invalid_message(&value, &e))),
            }
        }
    }
}

fn invalid_message(value: &Value, error: &serde_json::Error) -> String {
    if value.is_array() {
        "invalid request: JSON-RPC batches are not supported by MCP (since 2025-06-18); send one message per line"
            .to_string()
    } else {
        format!(
            "invalid request: {error}; a request needs \"jsonrpc\": \"2.0\", an \"id\" (string or integer), a \
\"method\" and, where the method takes them, \"params\" of the right shape"
        )
    }
}

fn error_reply(id: Value, code: i64, message: String) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(frame: &str) -> Value {
        match classify(frame.as_bytes()) {
            Classified::Reply(text) => serde_json::from_str(&text).unwrap(),
            Classified::Message(m) => panic!("{frame} was accepted as {m:?}"),
            Classified::Blank => panic!("{frame} got no reply"),
        }
    }

    #[test]
    fn malformed_frames_get_json_rpc_errors() {
        let r = reply("{not json");
        assert_eq!((r["error"]["code"].as_i64(), &r["id"]), (Some(PARSE_ERROR), &Value::Null));
        let r = reply(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":5}"#);
        assert_eq!((r["error"]["code"].as_i64(), r["id"].as_i64()), (Some(INVALID_REQUEST), Some(7)));
        let r = reply(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#);
        assert_eq!(r["error"]["code"].as_i64(), Some(INVALID_REQUEST));
        assert!(r["error"]["message"].as_str().unwrap().contains("batches"), "{r}");
        let r = reply("42");
        assert_eq!(r["error"]["code"].as_i64(), Some(INVALID_REQUEST));
        let r = reply(r#"{"jsonrpc":"1.0","id":"a","method":"ping"}"#);
        assert_eq!((r["error"]["code"].as_i64(), r["id"].as_str()), (Some(INVALID_REQUEST), Some("a")));
        assert!(matches!(classify(b"\xff\xfe"), Classified::Reply(_)));
    }

    #[test]
    fn well_formed_messages_and_blank_lines_pass() {
        assert!(matches!(classify(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Classified::Message(_)));
        assert!(matches!(classify(br#"{"jsonrpc":"2.0","id":2,"method":"no/such/method"}"#), Classified::Message(_)));
        assert!(matches!(classify(b"   \r"), Classified::Blank));
    }

    #[test]
    fn an_id_is_refused_while_in_flight_and_accepted_again_once_answered_or_cancelled() {
        let ids = InFlightIds::default();
        let message = |frame: &str| match classify(frame.as_bytes()) {
            Classified::Message(m) => *m,
            _ => panic!("{frame} is a message"),
        };
        let ping = message(r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#);
        assert!(ids.admit(&ping).is_ok());
        let refused: Value = serde_json::from_str(&ids.admit(&ping).unwrap_err()).unwrap();
        assert_eq!((refused["id"].as_i64(), refused["error"]["code"].as_i64()), (Some(4), Some(INVALID_REQUEST)));
        assert!(ids.admit(&message(r#"{"jsonrpc":"2.0","id":"4","method":"ping"}"#)).is_ok(), "\"4\" is not 4");
        let answer: ServerJsonRpcMessage = serde_json::from_str(r#"{"jsonrpc":"2.0","id":4,"result":{}}"#).unwrap();
        ids.answered(&answer);
        assert!(ids.admit(&ping).is_ok(), "answered: the id may be used again");
        ids.admit(&message(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}"#))
            .unwrap();
        assert!(ids.admit(&ping).is_ok(), "cancelled: the id may be used again");
    }

    #[tokio::test]
    async fn an_oversized_line_is_skipped_and_the_next_one_read() {
        let mut input = vec![b'x'; MAX_FRAME_BYTES + 10];
        input.extend_from_slice(b"\n{\"a\":1}\n");
        let mut reader = BufReader::with_capacity(1024, input.as_slice());
        let mut frame = Vec::new();
        assert!(matches!(read_frame(&mut reader, &mut frame).await.unwrap(), Frame::Oversized));
        frame.clear();
        assert!(matches!(read_frame(&mut reader, &mut frame).await.unwrap(), Frame::Complete));
        assert_eq!(frame, b"{\"a\":1}");
        frame.clear();
        assert!(matches!(read_frame(&mut reader, &mut frame).await.unwrap(), Frame::Eof));
    }
}
