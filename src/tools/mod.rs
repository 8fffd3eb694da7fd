//! The tool registry: names, descriptions, strict schemas and annotations of every tool, and dispatch
//! of a call to the memory layer. Transport-free: the MCP server (`transport`) and the export command
//! both read [`specs`]; a call's failure is decided here, once, as either a result the model reads
//! (`is_error: true`) or an unknown tool (a protocol error).

mod fixes;
pub mod schema;

use std::sync::Arc;

use futures::FutureExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

pub use fixes::{
    FixMatch, MAX_ERROR_TYPE_CHARS, MAX_FIX_CHARS, MAX_OUTCOME_CHARS, MAX_PATHS, MAX_QUERY_CHARS, RunTestsOutput,
    RunTestsParams, SearchCodebaseMemoryParams, SearchOutput, StoreFixMemoryParams, StoreFixOutput, TOP_K_MAX,
};
pub use schema::JsonObject;

use crate::memory::{FixMemory, MemoryError, SessionState};

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

/// Every tool of the server, in `tools/list` order.
pub fn specs() -> Vec<ToolSpec> {
    fixes::specs()
}

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

/// Runs tools against the memory layer on behalf of one session at a time.
#[derive(Clone)]
pub struct ToolHost {
    fixes: Arc<FixMemory>,
}

impl ToolHost {
    pub fn new(fixes: Arc<FixMemory>) -> Self {
        Self { fixes }
    }

    /// Calls tool `name` with `arguments` for `session`. Every failure the model can act on, including
    /// arguments that do not fit the schema and internal faults, is an `is_error` output; a panic inside
    /// a tool is caught and reported the same way.
    ///
    /// # Errors
    /// [`UnknownTool`] when no tool has that name.
    pub async fn call(
        &self,
        session: &SessionState,
        name: &str,
        arguments: JsonObject,
    ) -> Result<ToolOutput, UnknownTool> {
        let call = async {
            match name {
                "search_codebase_memory" => fixes::search(&self.fixes, session, arguments).await,
                "run_tests" => fixes::run_tests(&self.fixes, session, arguments).await,
                "store_fix_memory" => fixes::store(&self.fixes, session, arguments).await,
                other => return Err(UnknownTool(other.to_string())),
            }
            .map_or_else(|e| Ok(failure_output(name, e)), Ok)
        };
        match std::panic::AssertUnwindSafe(call).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown panic");
                tracing::error!(tool = name, "tool panicked: {message}");
                Ok(ToolOutput::error(format!(
                    "astra-mcp internal error in {name}: {message}. Nothing was stored by this call; report this to the user."
                )))
            }
        }
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
        ToolError::Memory(e) => {
            tracing::error!(tool, "{e}");
            ToolOutput::error(format!("astra-mcp internal error in {tool}: {e}. Nothing was stored by this call."))
        }
    }
}

/// Deserializes `arguments` into `T` (unknown fields are refused), with a message that says how to fix them.
fn parse<T: DeserializeOwned>(tool: &str, arguments: JsonObject) -> Result<T, ToolError> {
    serde_json::from_value(Value::Object(arguments)).map_err(|e| {
        ToolError::InvalidArguments(format!(
            "invalid arguments for {tool}: {e}. Check the tool's input schema and call it again."
        ))
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
