//! The tool registry: names, descriptions, strict schemas and annotations of every tool, and dispatch
//! of a call to the memory layer. Transport-free: the MCP server (`transport`) and the export command
//! both read [`specs`]; a call's failure is decided here, once, as either a result the model reads
//! (`is_error: true`) or an unknown tool (a protocol error).

mod explain;
mod fixes;
mod hosts;
pub mod schema;
mod text;
mod tiered;

use std::sync::Arc;

use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use explain::{RankingExplanation, RankingPosition, score_label};
pub use fixes::{
    DEFAULT_TOP_K, FixMatch, MAX_ERROR_TYPE_CHARS, MAX_FIX_CHARS, MAX_OUTCOME_CHARS, MAX_PATH_CHARS, MAX_PATHS,
    MAX_QUERY_CHARS, RunTestsOutput, RunTestsParams, SearchCodebaseMemoryParams, SearchOutput, StoreFixMemoryParams,
    StoreFixOutput, TOP_K_MAX, current_matches, match_header, project_line, receipt_line, render_fix, render_matches,
    to_match,
};
pub use hosts::{HostError, Hosts, MemoriesFactory, UnknownIdentity};
pub use schema::JsonObject;
pub use text::{INSTRUCTIONS, render_core_memory};
pub use tiered::{
    ArchivalInsertOutput, ArchivalSearchOutput, ConversationCitation, ConversationSearchOutput, CoreBlockOutput,
    ForgetOutput, MAX_CORE_TEXT_CHARS, MAX_PASSAGE_CHARS, MAX_SEARCH_QUERY_CHARS, MAX_TAG_CHARS, MAX_TAGS,
    PassageCitation, SEARCH_TOP_K_MAX, check_passage, citation, conversation_citation, current_passages,
    passage_header, render_conversation, render_passage, render_passages, unexpired,
};

use crate::domain::{Role, Scope};
use crate::memory::{
    ArchivalMemory, ConversationMemory, CoreMemory, FixMemory, GateState, ImportTarget, MemoryError, NewItem,
    ToolCallRecorder, UseLog,
};
use crate::store::{BrowseStore, ForgetStore};

/// MCP tool annotations (hints; `destructiveHint` is always set explicitly since it defaults to true).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Annotations {
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

/// One tool as clients see it in `tools/list`.
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub input_schema: JsonObject,
    pub output_schema: JsonObject,
    pub annotations: Annotations,
}

impl ToolSpec {
    /// The checked-in form under `schemas/<name>.json`.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": {
                "readOnlyHint": self.annotations.read_only,
                "destructiveHint": self.annotations.destructive,
                "idempotentHint": self.annotations.idempotent,
                "openWorldHint": self.annotations.open_world,
            },
        })
    }
}

/// Every tool of the server, in `tools/list` order. Each is defined once: its name here, its spec
/// (`fixes::specs`, `tiered::specs`), whether its calls are recorded ([`Tool::recorded`]) and its handler
/// (the exhaustive match in [`ToolHost::call`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    SearchCodebaseMemory,
    RunTests,
    StoreFixMemory,
    CoreMemoryAppend,
    CoreMemoryReplace,
    ArchivalMemoryInsert,
    ArchivalMemorySearch,
    ConversationSearch,
    MemoryForget,
}

impl Tool {
    /// Every tool, in `tools/list` order.
    pub const ALL: [Tool; 9] = [
        Tool::SearchCodebaseMemory,
        Tool::RunTests,
        Tool::StoreFixMemory,
        Tool::CoreMemoryAppend,
        Tool::CoreMemoryReplace,
        Tool::ArchivalMemoryInsert,
        Tool::ArchivalMemorySearch,
        Tool::ConversationSearch,
        Tool::MemoryForget,
    ];

    /// The name clients call it by.
    pub const fn name(self) -> &'static str {
        match self {
            Tool::SearchCodebaseMemory => "search_codebase_memory",
            Tool::RunTests => "run_tests",
            Tool::StoreFixMemory => "store_fix_memory",
            Tool::CoreMemoryAppend => "core_memory_append",
            Tool::CoreMemoryReplace => "core_memory_replace",
            Tool::ArchivalMemoryInsert => "archival_memory_insert",
            Tool::ArchivalMemorySearch => "archival_memory_search",
            Tool::ConversationSearch => "conversation_search",
            Tool::MemoryForget => "memory_forget",
        }
    }

    /// The tool called `name`, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|tool| tool.name() == name)
    }

    /// Whether its calls are recorded as `tool` items of their session. Searches are not: a recorded
    /// query would come back as the best match of the same query later.
    pub const fn recorded(self) -> bool {
        !matches!(self, Tool::SearchCodebaseMemory | Tool::ArchivalMemorySearch | Tool::ConversationSearch)
    }
}

/// Every tool's spec, in `tools/list` order.
pub fn specs() -> Vec<ToolSpec> {
    let mut specs = fixes::specs();
    specs.extend(tiered::specs());
    specs
}

/// Characters of a tool result kept in its recorded item.
const RECORDED_RESULT_CHARS: usize = 1_000;

/// What a tool call produced: text for the model, the same fields as `structuredContent`, and whether
/// it is a tool error the model should act on (`isError`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub text: String,
    pub structured: Option<Value>,
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(text: String, structured: Value) -> Self {
        Self { text, structured: Some(structured), is_error: false }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Self { text: text.into(), structured: None, is_error: true }
    }
}

/// The tool name is not one of [`specs`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown tool `{0}`: call tools/list for the tools this server offers")]
pub struct UnknownTool(pub String);

/// Every memory tier a server offers, for one actor and project (trusted configuration).
#[derive(Clone)]
pub struct Memories {
    pub scope: Scope,
    pub fixes: Arc<FixMemory>,
    pub archival: Arc<ArchivalMemory>,
    pub conversation: Arc<ConversationMemory>,
    pub core: Arc<CoreMemory>,
    pub forget: Arc<dyn ForgetStore>,
    /// Which memories were used, and whether their sessions' tests then passed.
    pub uses: UseLog,
    /// What the memory browser lists and counts (`crate::ui`).
    pub browse: Arc<dyn BrowseStore>,
}

/// Runs tools against the memory layer on behalf of one session at a time.
#[derive(Clone)]
pub struct ToolHost {
    memories: Memories,
    recorder: ToolCallRecorder,
    /// Gate state of requests that have no MCP session (the stateless 2026-07-28 protocol over HTTP):
    /// one per host, that is per actor, project and the server's workspace (docs/tools.md, "The gates").
    sessionless: Arc<GateState>,
    /// How long a call other than `run_tests` may take ([`Self::with_timeout`]).
    timeout: Option<std::time::Duration>,
}

impl ToolHost {
    /// A host over `memories`; starts the recorder of tool calls on the current Tokio runtime.
    pub fn new(memories: Memories) -> Self {
        let recorder = ToolCallRecorder::start(memories.conversation.clone());
        let sessionless = Arc::new(GateState::new(format!("sessionless-{}", uuid::Uuid::new_v4())));
        Self { memories, recorder, sessionless, timeout: None }
    }

    /// Bounds every call but `run_tests` (which has its own `--test-timeout`) by `timeout`: a call still
    /// running then (a memory store that stopped answering: an object store's client retries for
    /// minutes) is answered as a failure to call again, and no longer waited for. It is dropped, as a
    /// client's cancellation drops it, except for an insert's commit, which runs in a task of its own
    /// and may still complete once the store answers. A write either committed or did not, and one
    /// repeated after one that did is kept once (deterministic ids, an append's last line, a
    /// replacement made already). `None`: no bound.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Option<std::time::Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long a call may take ([`Self::with_timeout`]); `None`: no bound.
    pub fn timeout(&self) -> Option<std::time::Duration> {
        self.timeout
    }

    /// Awaits `work` for at most this host's timeout ([`Self::with_timeout`]), for the requests that
    /// read memory outside a tool call (resources, prompts); see [`bounded`].
    ///
    /// # Errors
    /// The timeout, when it passed first.
    pub async fn bounded<T>(&self, work: impl std::future::Future<Output = T>) -> Result<T, std::time::Duration> {
        bounded(self.timeout, work).await
    }

    /// The gate state shared by requests without an MCP session (see the field).
    pub fn sessionless(&self) -> Arc<GateState> {
        self.sessionless.clone()
    }

    pub fn memories(&self) -> &Memories {
        &self.memories
    }

    /// Waits until every recorded tool call is written (call before exiting).
    pub async fn flush(&self) {
        self.recorder.flush().await;
        self.memories.uses.flush().await;
    }

    /// Calls tool `name` with `arguments` for `session`. Every failure the model can act on, including
    /// arguments that do not fit the schema and internal faults, is an `is_error` output; a panic inside
    /// a tool is caught and reported the same way.
    ///
    /// # Errors
    /// [`UnknownTool`] when no tool has that name.
    pub async fn call(
        &self,
        session: &GateState,
        name: &str,
        arguments: JsonObject,
    ) -> Result<ToolOutput, UnknownTool> {
        let Some(tool) = Tool::from_name(name) else {
            return Err(UnknownTool(name.to_string()));
        };
        let m = &self.memories;
        let actor = m.scope.actor_id.as_str();
        let turn = session.next_turn();
        let call = async {
            let result = match tool {
                Tool::SearchCodebaseMemory => fixes::search(m, session, arguments).await,
                Tool::RunTests => fixes::run_tests(m, session, arguments).await,
                Tool::StoreFixMemory => fixes::store(&m.fixes, session, arguments).await,
                Tool::CoreMemoryAppend => tiered::core_append(&m.core, session, arguments).await,
                Tool::CoreMemoryReplace => tiered::core_replace(&m.core, session, arguments).await,
                Tool::ArchivalMemoryInsert => tiered::archival_insert(m, session, arguments).await,
                Tool::ArchivalMemorySearch => tiered::archival_search(m, session, arguments).await,
                Tool::ConversationSearch => tiered::conversation_search(&m.conversation, actor, arguments).await,
                Tool::MemoryForget => tiered::forget(m.forget.as_ref(), actor, arguments).await,
            };
            result.unwrap_or_else(|e| failure_output(name, e))
        };
        let limit = self.timeout.filter(|_| tool != Tool::RunTests);
        let bounded = async { bounded(limit, call).await.unwrap_or_else(|limit| timed_out(tool, limit)) };
        let output = match std::panic::AssertUnwindSafe(bounded).catch_unwind().await {
            Ok(output) => output,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown panic");
                tracing::error!(tool = name, "tool panicked: {message}");
                ToolOutput::error(format!(
                    "astra-mcp internal error in {name}: {message}. Nothing was stored by this call; report this to the user."
                ))
            }
        };
        if tool == Tool::SearchCodebaseMemory && output.is_error {
            // the memory gate stays closed; the store's refusal says why (docs/tools.md, "The gates")
            session.record_failed_search(&output.text);
        }
        self.record(session, turn, tool, &output);
        Ok(output)
    }

    /// Queues the call as a `tool` item of the session: the tool's name and the first line of its result
    /// (for `run_tests`, the start of the whole report). Arguments and the rest of a result are left
    /// out: texts the agent stored live in their own tables (and result texts quote them), and
    /// forgetting them must not leave a copy here. Of a failed call only that it failed is kept: its
    /// message often quotes the argument it refuses, escaped or trimmed, and nothing was stored that
    /// could be forgotten (`run_tests` keeps its report: the tests' output, not the agent's text).
    fn record(&self, session: &GateState, turn: i64, tool: Tool, output: &ToolOutput) {
        if !tool.recorded() {
            return;
        }
        let name = tool.name();
        let shown = match tool {
            Tool::RunTests => output.text.as_str(),
            _ if output.is_error => "",
            _ => output.text.lines().next().unwrap_or(""),
        };
        let result: String = shown.chars().take(RECORDED_RESULT_CHARS).collect();
        let status = call_status(tool, output);
        self.recorder.record(
            ImportTarget {
                actor_id: self.memories.scope.actor_id.clone(),
                project: self.memories.scope.project.clone(),
                session_id: session.session_id().to_string(),
                source: "mcp".to_string(),
            },
            NewItem {
                source_key: format!("call:{turn}"),
                turn,
                role: Role::Tool,
                speaker: None,
                text: if result.is_empty() {
                    format!("tool call {name} ({status})")
                } else {
                    format!("tool call {name} ({status}): {result}")
                },
                timestamp: Some(chrono::Utc::now()),
                date_label: None,
            },
        );
    }
}

/// The status word of a recorded call: `error` for an `isError` result; for `run_tests`, whether the
/// tests `passed` or `failed` (a failing run is a normal result, not a failed call); else `ok`.
fn call_status(tool: Tool, output: &ToolOutput) -> &'static str {
    if output.is_error {
        return "error";
    }
    match (tool, output.structured.as_ref().and_then(|s| s.get("passed")).and_then(Value::as_bool)) {
        (Tool::RunTests, Some(true)) => "passed",
        (Tool::RunTests, _) => "failed",
        _ => "ok",
    }
}

/// A failed call, before it is rendered for the model.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolError {
    /// The arguments do not fit the tool's schema or limits.
    #[error("{0}")]
    InvalidArguments(String),
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// The one place that decides how a failure reads to the model.
fn failure_output(tool: &str, error: ToolError) -> ToolOutput {
    match error {
        ToolError::InvalidArguments(message) => ToolOutput::error(message),
        ToolError::Memory(MemoryError::Refused(message)) => ToolOutput::error(message),
        ToolError::Memory(MemoryError::Embed(e)) => {
            tracing::error!(tool, "{e}");
            ToolOutput::error(format!(
                "{tool} cannot run: {e}. This is a server setup problem the user must fix; nothing was stored."
            ))
        }
        // other writers kept committing to the same rows first (many sessions editing one core block)
        ToolError::Memory(MemoryError::Store(e)) if e.is_contention() => {
            tracing::warn!(tool, "{e}");
            ToolOutput::error(format!(
                "{tool} failed: other sessions changed the same memory at the same moment, more often than this \
                 call retries; nothing of this call was stored. Call it again."
            ))
        }
        // the store did not complete a read or a commit (unreachable, I/O): worth a retry
        ToolError::Memory(MemoryError::Store(
            e @ (crate::store::StoreError::Backend(_) | crate::store::StoreError::Engine { .. }),
        )) => {
            tracing::error!(tool, "{e}");
            let failed = store_failed(tool, "did not complete the operation");
            ToolOutput::error(format!("{failed} Cause: {e}"))
        }
        ToolError::Memory(e) => {
            tracing::error!(tool, "{e}");
            ToolOutput::error(format!("astra-mcp internal error in {tool}: {e}. Nothing was stored by this call."))
        }
    }
}

/// The answer to a call the memory store failed (`what` it did): call again, and why that is safe.
fn store_failed(tool: &str, what: &str) -> String {
    let again = retry_note(Tool::from_name(tool));
    format!(
        "{tool} failed: the memory store {what}. Call it again in a moment{again}; if it keeps failing, tell the \
         user the memory store cannot be reached (the server's log has the cause)."
    )
}

/// After "call it again": why repeating a write whose answer was lost (it may have been applied) is
/// safe all the same; empty for a read.
fn retry_note(tool: Option<Tool>) -> &'static str {
    match tool {
        Some(Tool::MemoryForget) => {
            " (if this call went through after all, the next one says the memory is gone already)"
        }
        Some(Tool::CoreMemoryAppend) => " (an append repeated after one that went through is not written twice)",
        Some(Tool::CoreMemoryReplace) => " (a replacement repeated after one that went through changes nothing)",
        Some(Tool::StoreFixMemory | Tool::ArchivalMemoryInsert) => " (a memory stored twice is kept once)",
        _ => "",
    }
}

/// Awaits `work` for at most `limit` (`None`: as long as it takes). What bounds tool calls, the wait
/// for the store's opening and reads of core memory by `--tool-timeout`: a store that stopped
/// answering (a frozen object store) fails the request instead of holding it.
///
/// # Errors
/// `limit`, when it passed before `work` completed (`work` is then dropped).
pub(crate) async fn bounded<T>(
    limit: Option<std::time::Duration>,
    work: impl std::future::Future<Output = T>,
) -> Result<T, std::time::Duration> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, work).await.map_err(|_| limit),
        None => Ok(work.await),
    }
}

/// The answer to a call still running after the host's timeout ([`ToolHost::with_timeout`]).
fn timed_out(tool: Tool, limit: std::time::Duration) -> ToolOutput {
    let name = tool.name();
    let secs = limit.as_secs();
    tracing::error!(tool = name, "no answer within {secs} s (--tool-timeout): the memory store did not answer");
    ToolOutput::error(store_failed(name, &format!("did not answer within {secs} s")))
}

/// Deserializes `arguments` into `T` (unknown fields are refused), with a message that says how to fix them.
fn parse<T: DeserializeOwned>(tool: &str, arguments: JsonObject) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(arguments)).map_err(|e| {
        ToolError::InvalidArguments(format!(
            "invalid arguments for {tool}: {e}. Check the tool's input schema and call it again."
        ))
    })
}

/// An optional integer argument (`top_k`): a JSON integer, a whole number written as a string (`"3"`:
/// models often quote numbers) or as a float (`3.0`), or null. Anything else is refused with a message
/// that says what to send.
pub(crate) fn optional_int<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    use serde::Deserialize;
    let value = Option::<Value>::deserialize(deserializer)?;
    let whole = |f: f64| (f.fract() == 0.0 && f.abs() < 1e15).then_some(f as i64);
    let parsed = match &value {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_i64().or_else(|| n.as_f64().and_then(whole)),
        Some(Value::String(s)) => {
            let s = s.trim();
            s.parse::<i64>().ok().or_else(|| s.parse::<f64>().ok().and_then(whole))
        }
        Some(_) => None,
    };
    parsed.map(Some).ok_or_else(|| {
        let shown = value.as_ref().map(Value::to_string).unwrap_or_default();
        let number = match &value {
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
            _ => None,
        };
        let what = if number.is_some_and(|f| f.abs() >= 1e15) { "out of range" } else { "not a whole number" };
        serde::de::Error::custom(format!("`{shown}` is {what}: give an integer such as 5, or null for the default"))
    })
}

/// Checks a required string: non-blank and at most `max` characters.
fn check_text(tool: &str, field: &str, value: &str, max: usize) -> Result<(), ToolError> {
    if value.trim().is_empty() {
        return Err(ToolError::InvalidArguments(format!("{tool}: `{field}` is empty; give a non-empty value.")));
    }
    let len = value.chars().count();
    if len > max {
        return Err(ToolError::InvalidArguments(format!(
            "{tool}: `{field}` has {len} characters, the limit is {max}; shorten it."
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_one_spec_in_list_order_and_only_writes_are_recorded() {
        let listed: Vec<&str> = specs().iter().map(|spec| spec.name).collect();
        let tools: Vec<&str> = Tool::ALL.iter().map(|tool| tool.name()).collect();
        assert_eq!(listed, tools);
        for tool in Tool::ALL {
            assert_eq!(Tool::from_name(tool.name()), Some(tool));
            let read_only = specs().into_iter().find(|s| s.name == tool.name()).unwrap().annotations.read_only;
            assert_eq!(tool.recorded(), !read_only, "{}", tool.name());
        }
        assert_eq!(Tool::from_name("search_codebase"), None);
    }

    /// A store that did not complete a read or a commit (a bucket out of reach) is told to the model as
    /// a failure to retry, not as an internal error; the cause comes last.
    #[test]
    fn a_store_failure_reads_as_one_to_retry_with_its_cause_last() {
        let cause = "lance error: LanceError(IO): Generic S3 error: error sending request";
        let failed = MemoryError::Store(crate::store::StoreError::Backend(cause.into()));
        let out = failure_output("archival_memory_insert", ToolError::Memory(failed));
        assert!(out.is_error);
        assert!(
            out.text.starts_with(
                "archival_memory_insert failed: the memory store did not complete the operation. Call it again in \
                 a moment (a memory stored twice is kept once)"
            ),
            "{}",
            out.text
        );
        assert!(out.text.ends_with(&format!("Cause: memory store operation failed: {cause}")), "{}", out.text);
        let failed = MemoryError::Store(crate::store::StoreError::Engine {
            kind: crate::store::EngineFailure::Other,
            source: std::sync::Arc::new(std::io::Error::other(cause)),
        });
        let read = failure_output("archival_memory_search", ToolError::Memory(failed));
        assert!(read.text.contains("Call it again in a moment; if it keeps failing"), "{}", read.text);
        assert!(!out.text.contains("internal error"), "{}", out.text);
        let failed = MemoryError::Store(crate::store::StoreError::Backend(cause.into()));
        let forget = failure_output("memory_forget", ToolError::Memory(failed));
        assert!(
            forget.text.contains("Call it again in a moment (if this call went through after all, the next one says"),
            "a repeated forget stores nothing, so its retry hint is its own: {}",
            forget.text
        );
    }

    /// `top_k` as models send it: an integer, a quoted one, a whole float, null or left out; anything
    /// else is refused in words, not as a Rust type (`expected i64`).
    #[test]
    fn top_k_takes_a_quoted_number_and_refuses_words_in_words() {
        let top_k = |v: Value| {
            let args = serde_json::json!({"query": "q", "top_k": v});
            parse::<SearchCodebaseMemoryParams>("search_codebase_memory", args.as_object().unwrap().clone())
                .map(|p| p.top_k)
        };
        assert_eq!(top_k(serde_json::json!(3)).unwrap(), Some(3));
        assert_eq!(top_k(serde_json::json!("3")).unwrap(), Some(3));
        assert_eq!(top_k(serde_json::json!(" 7 ")).unwrap(), Some(7));
        assert_eq!(top_k(serde_json::json!(4.0)).unwrap(), Some(4));
        assert_eq!(top_k(Value::Null).unwrap(), None);
        let omitted = parse::<SearchCodebaseMemoryParams>(
            "search_codebase_memory",
            serde_json::json!({"query": "q"}).as_object().unwrap().clone(),
        );
        assert_eq!(omitted.unwrap().top_k, Some(fixes::DEFAULT_TOP_K));
        let words = top_k(serde_json::json!("three")).unwrap_err().to_string();
        assert!(words.contains("`\"three\"` is not a whole number: give an integer such as 5"), "{words}");
        assert!(!words.contains("i64"), "{words}");
        assert!(top_k(serde_json::json!(2.5)).is_err());
        for huge in [serde_json::json!(1e30), serde_json::json!(u64::MAX), serde_json::json!("-1e20")] {
            let words = top_k(huge.clone()).unwrap_err().to_string();
            assert!(words.contains(&format!("`{huge}` is out of range: give an integer such as 5")), "{words}");
        }
    }

    /// A recorded `run_tests` says whether the tests passed; an error result is `error` for every tool.
    #[test]
    fn a_recorded_test_run_is_passed_or_failed_not_ok() {
        let run = |passed: bool| ToolOutput::ok("Tests …".into(), serde_json::json!({"passed": passed}));
        assert_eq!(call_status(Tool::RunTests, &run(false)), "failed");
        assert_eq!(call_status(Tool::RunTests, &run(true)), "passed");
        assert_eq!(call_status(Tool::RunTests, &ToolOutput::error("could not run")), "error");
        assert_eq!(call_status(Tool::CoreMemoryAppend, &run(true)), "ok");
    }

    /// A write that lost to other writers' commits more often than the store retries is told as such
    /// (call it again), not as a store out of reach.
    #[test]
    fn a_write_out_of_commit_retries_reads_as_contention() {
        let cause = "lance error: Retryable commit conflict for version 41: This Update transaction was preempted \
                     by concurrent transaction Update at version 41. Please retry.";
        let failed = MemoryError::Store(crate::store::StoreError::Engine {
            kind: crate::store::EngineFailure::Conflict,
            source: std::sync::Arc::new(std::io::Error::other(cause)),
        });
        let out = failure_output("core_memory_append", ToolError::Memory(failed));
        assert!(out.is_error);
        assert_eq!(
            out.text,
            "core_memory_append failed: other sessions changed the same memory at the same moment, more often than \
             this call retries; nothing of this call was stored. Call it again."
        );
    }
}
