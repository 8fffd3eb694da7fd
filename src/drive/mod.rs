//! `astra-mcp drive`: the OpenAI Responses API tool loop on the server's own tools (docs/drive.md).
//!
//! Each run starts a new response chain (its first request has no `previous_response_id`), then chains
//! every request to the previous response. Every `function_call` item is dispatched — memory tools and
//! `run_tests` through the same [`ToolHost`] the MCP server uses, the local coding tools of
//! [`local_tools`] in the workspace — and its result goes back as a `function_call_output` item with the
//! same `call_id`. Tool failures are outputs the model reads; what stops the run is a [`DriveError`]:
//! transport, authentication or API failures, the budget (the cost guard fails closed), limits, a response
//! that did not complete or cannot be counted, and the memory gate.
//!
//! The gates' order is enforced in the loop too: a final answer (a response without function calls)
//! before a memory search result was delivered is [`DriveError::MemoryGate`]; stores go through the
//! server's gates; `apply_edit` voids the confirmed outcome.
//!
//! MemGPT's main context: the actor's and project's core memory blocks are rendered into the
//! `instructions` of every request, so a `core_memory_*` edit takes effect on the next turn. When a
//! chain's input passes `context_budget_tokens`, the runner asks the model for a summary (`tool_choice:
//! "none"`), then starts a new chain seeded with that summary (core memory stays in the instructions);
//! the evicted turns were written to the conversation table as they happened, so `conversation_search` finds
//! them (MemGPT's eviction to recall storage).

pub mod demo;
mod functions;
mod local_tools;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

pub use functions::{function_definition, strict_parameters};
pub use local_tools::{LocalOutput, local_tools};

use crate::cli::{LoopArgs, ModelArgs};
use crate::domain::Role;
use crate::llm::responses::output_text;
use crate::llm::{Account, Client, ClientSettings, LlmError, check_usd};
use crate::memory::workspace::Workspace;
use crate::memory::{GateState, ImportTarget, NewItem};
use crate::tools::ToolHost;
use crate::tools::{INSTRUCTIONS, render_core_memory};

/// Everything one run needs besides the tool host.
#[derive(Debug, Clone)]
pub struct DriveConfig {
    /// The model API: URL, key, approval, model, prices, ledger, request timeout.
    pub client: ClientSettings,
    /// The run's id: its session id, its transcript folder, its ledger key.
    pub run_id: String,
    pub prompt: String,
    pub max_turns: usize,
    pub max_tool_calls: usize,
    /// `max_output_tokens` of every request.
    pub max_output_tokens: u32,
    /// `reasoning.effort`, passed through (`minimal`, `low`, `medium`, `high`, …).
    pub reasoning_effort: Option<String>,
    /// `text.verbosity`, passed through (`low`, `medium`, `high`).
    pub verbosity: Option<String>,
    /// Budget of this run, USD.
    pub run_budget_usd: f64,
    /// Budget of the project across runs (summed from the ledger), USD.
    pub project_budget_usd: f64,
    /// Where `<run_id>/transcript.jsonl` and `<run_id>/events.jsonl` are written.
    pub runs_dir: PathBuf,
    /// Input tokens of one response past which the chain is summarised and a new one started.
    pub context_budget_tokens: u64,
}

impl DriveConfig {
    /// The settings of run `run_id` from the command line's model and tool-loop flags, the key from the
    /// environment or `.env` ([`crate::config::client_settings`]); runs under `<data dir>/astra-mcp/runs`
    /// unless `--runs-dir` says otherwise.
    pub fn from_args(args: &ModelArgs, tool_loop: &LoopArgs, run_id: &str, prompt: String) -> Self {
        DriveConfig {
            client: crate::config::client_settings(args),
            run_id: run_id.to_string(),
            prompt,
            max_turns: tool_loop.max_turns,
            max_tool_calls: tool_loop.max_tool_calls,
            max_output_tokens: args.max_output_tokens,
            reasoning_effort: args.reasoning_effort.clone(),
            verbosity: tool_loop.verbosity.clone(),
            run_budget_usd: args.run_budget_usd,
            project_budget_usd: args.project_budget_usd,
            runs_dir: tool_loop.runs_dir.clone().unwrap_or_else(|| crate::config::data_dir().join("runs")),
            context_budget_tokens: tool_loop.context_budget_tokens,
        }
    }
}

/// What the runner asks for when a chain is full.
pub const SUMMARY_REQUEST: &str = "The conversation is about to be cut to free context. Summarise the work so far \
for yourself: the task, what you found (files, errors, memory results), what you changed, the latest test \
result and confirmed_outcome if any, and what remains. Plain text, at most 300 words; call no tools.";

/// What a finished run reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DriveReport {
    pub final_text: String,
    pub requests: usize,
    /// Local and memory tool calls dispatched.
    pub tool_calls: usize,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// Every response's id, in order.
    pub response_ids: Vec<String>,
    /// Response chains: 1, plus one per eviction.
    pub chains: usize,
}

/// Why a run stopped before the model's final answer.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    /// Approval, key, budget, transport, API or protocol failures of a request (the cost guard's client).
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error("limit reached: {0}")]
    Limit(String),
    #[error(
        "memory gate: the model finished before any search_codebase_memory result was delivered; the run is \
not accepted (prompt it to search memory first)"
    )]
    MemoryGate,
    /// `--run-id` names a session of another actor.
    #[error("{0}")]
    Permission(String),
    #[error("cannot write the run's evidence under {path}: {message}")]
    Evidence { path: String, message: String },
    #[error("invalid settings: {0}")]
    Settings(String),
}

/// Checks what the flags cannot: a run id usable as a folder name, finite non-negative money.
///
/// # Errors
/// [`DriveError::Settings`] naming the setting.
pub fn validate(config: &DriveConfig) -> Result<(), DriveError> {
    let id = &config.run_id;
    let ok_id = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok_id {
        return Err(DriveError::Settings(format!(
            "--run-id `{id}`: use letters, digits, `.`, `_`, `-` (at most 128, not starting with `.`)"
        )));
    }
    check_usd(&[
        ("--input-usd-per-million", config.client.pricing.input_per_million_usd),
        ("--output-usd-per-million", config.client.pricing.output_per_million_usd),
        ("--run-budget-usd", config.run_budget_usd),
        ("--project-budget-usd", config.project_budget_usd),
    ])
    .map_err(DriveError::Settings)?;
    if config.max_output_tokens == 0 {
        return Err(DriveError::Settings("--max-output-tokens must be at least 1".into()));
    }
    Ok(())
}

/// The instructions of every request: the server's instructions, then core memory (re-read each turn).
async fn instructions(host: &ToolHost) -> String {
    let blocks = host.memories().core.read_all().await.unwrap_or_default();
    format!(
        "{INSTRUCTIONS}\n\nThe workspace tools list_files, read_file and apply_edit work on the project; \
run_tests runs its tests.\n\n{}",
        render_core_memory(&blocks)
    )
}

/// Every function the model is offered: the registry's tools, then the local coding tools.
pub fn function_tools() -> Vec<Value> {
    let mut tools: Vec<Value> = crate::tools::specs().iter().map(functions::from_spec).collect();
    tools.extend(local_tools().iter().map(|t| function_definition(t.name, t.description, &t.input_schema)));
    tools
}

/// Appends JSON lines to the run's evidence files.
struct Evidence {
    transcript: std::fs::File,
    events: std::fs::File,
}

impl Evidence {
    /// Opens the run's files for appending, readable by the owner only on Unix (mode 0600: they quote
    /// tool outputs). Windows has no mode bits: there the files get the access list of their folder.
    fn open(dir: &std::path::Path) -> Result<Self, DriveError> {
        let fail = |e: std::io::Error| DriveError::Evidence { path: dir.display().to_string(), message: e.to_string() };
        std::fs::create_dir_all(dir).map_err(fail)?;
        let append = |name: &str| {
            let mut options = std::fs::OpenOptions::new();
            options.create(true).append(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            options.open(dir.join(name))
        };
        Ok(Self {
            transcript: append("transcript.jsonl").map_err(fail)?,
            events: append("events.jsonl").map_err(fail)?,
        })
    }

    /// One JSON line, secrets redacted (a tool may print a key; docs/storage.md's redaction applies here too).
    fn write(file: &mut std::fs::File, value: &Value) {
        use std::io::Write;
        let line = value.to_string();
        if let Err(e) = writeln!(file, "{}", crate::memory::redact::redact(&line)) {
            tracing::warn!("cannot write run evidence: {e}");
        }
    }

    fn exchange(&mut self, request: &Value, response: &Value) {
        Self::write(&mut self.transcript, &json!({"request": request, "response": response}));
    }

    fn event(&mut self, kind: &str, detail: Value) {
        Self::write(
            &mut self.events,
            &json!({"time": chrono::Utc::now().to_rfc3339(), "event": kind, "detail": detail}),
        );
    }
}

/// A `function_call` output item.
struct FunctionCall {
    call_id: String,
    name: String,
    arguments: String,
}

/// Runs the loop to the model's final answer.
///
/// # Errors
/// [`DriveError`]: missing approval or key (before any request), budget, limits, the memory gate, and
/// transport or API failures.
pub async fn run(host: &ToolHost, workspace: &Workspace, config: &DriveConfig) -> Result<DriveReport, DriveError> {
    validate(config)?;
    let client = Client::new(&config.client)?;
    let scope = host.memories().scope.clone();
    // A run id names a session: one that belongs to another actor is refused before anything is sent.
    host.memories().conversation.check_owner(&scope.actor_id, &config.run_id).await.map_err(|e| match e {
        crate::memory::MemoryError::Refused(message) => DriveError::Permission(message),
        other => LlmError::Protocol(format!("cannot check the session's owner: {other}")).into(),
    })?;
    let requests = Requests { client, config, project: scope.project.clone(), tools: function_tools() };
    let mut evidence = Evidence::open(&config.runs_dir.join(&config.run_id))?;
    evidence.event(
        "start",
        json!({"model": config.client.model, "base_url": config.client.base_url, "prompt": config.prompt}),
    );
    let result = run_loop(host, workspace, config, requests, &mut evidence, &scope).await;
    match &result {
        Ok(report) => evidence.event(
            "finished",
            json!({"requests": report.requests, "tool_calls": report.tool_calls,
            "cost_usd": report.cost_usd}),
        ),
        Err(e) => evidence.event("stopped", json!({"error": e.to_string()})),
    }
    result
}

async fn run_loop(
    host: &ToolHost,
    workspace: &Workspace,
    config: &DriveConfig,
    requests: Requests<'_>,
    evidence: &mut Evidence,
    scope: &crate::domain::Scope,
) -> Result<DriveReport, DriveError> {
    // A run id used before continues its session: new turns are numbered after the stored ones.
    let first_turn = match host.memories().conversation.next_turn(&scope.actor_id, &config.run_id).await {
        Ok(turn) => turn,
        Err(e) => {
            tracing::warn!("cannot read the session's last turn, numbering from 0: {e}");
            0
        }
    };
    let session = Arc::new(GateState::starting_at(config.run_id.clone(), first_turn));
    let target = ImportTarget {
        actor_id: scope.actor_id.clone(),
        project: scope.project.clone(),
        session_id: config.run_id.clone(),
        source: "drive".into(),
    };
    let mut report = DriveReport {
        final_text: String::new(),
        requests: 0,
        tool_calls: 0,
        input_tokens: 0,
        output_tokens: 0,
        cost_usd: 0.0,
        response_ids: Vec::new(),
        chains: 1,
    };
    record_turn(host, &session, &target, Role::User, &config.prompt).await;
    let mut input = vec![json!({"role": "user", "content": config.prompt})];
    let mut previous: Option<String> = None;
    let mut responses_in_chain = 0usize;
    for _turn in 0..config.max_turns {
        let (response, input_tokens) =
            requests.send(host, &input, previous.as_deref(), false, &mut report, evidence).await?;
        let id = report.response_ids.last().cloned().unwrap_or_default();
        let calls = function_calls(&response)?;
        if calls.is_empty() {
            report.final_text = output_text(&response);
            if report.final_text.trim().is_empty() {
                return Err(
                    LlmError::Protocol("the model answered with neither text nor a function call".into()).into()
                );
            }
            evidence.event("final", json!({"text": report.final_text}));
            record_turn(host, &session, &target, Role::Assistant, &report.final_text).await;
            if !session.has_searched() {
                return Err(DriveError::MemoryGate);
            }
            return Ok(report);
        }
        let said = output_text(&response);
        if !said.is_empty() {
            record_turn(host, &session, &target, Role::Assistant, &said).await;
        }
        input = Vec::new();
        let mut answered = std::collections::HashSet::new();
        for call in calls {
            if !answered.insert(call.call_id.clone()) {
                return Err(
                    LlmError::Protocol(format!("call_id `{}` appears twice in one response", call.call_id)).into()
                );
            }
            report.tool_calls += 1;
            if report.tool_calls > config.max_tool_calls {
                return Err(DriveError::Limit(format!(
                    "more than {} tool calls (--max-tool-calls)",
                    config.max_tool_calls
                )));
            }
            let Dispatched { text, is_error, structured, local } = dispatch(host, workspace, &session, &call).await;
            if local {
                let first = text.lines().next().unwrap_or_default();
                let shown: String =
                    format!("tool call {}({}): {first}", call.name, call.arguments).chars().take(1_000).collect();
                record_turn(host, &session, &target, Role::Tool, &shown).await;
            }
            evidence.event(
                "tool_call",
                json!({"call_id": call.call_id, "name": call.name, "arguments": call.arguments,
                "is_error": is_error, "output": text, "structured": structured}),
            );
            input.push(json!({"type": "function_call_output", "call_id": call.call_id, "output": text}));
        }
        previous = Some(id);
        responses_in_chain += 1;
        // A new chain that is over the budget at once (its seed alone is too big) is not summarised again.
        if input_tokens > config.context_budget_tokens && responses_in_chain > 1 {
            responses_in_chain = 0;
            // Eviction: deliver the outputs with a request for a summary, then start a new chain from it.
            input.push(json!({"role": "user", "content": SUMMARY_REQUEST}));
            let (response, _) = requests.send(host, &input, previous.as_deref(), true, &mut report, evidence).await?;
            let summary = output_text(&response);
            evidence.event("evicted", json!({"input_tokens": input_tokens, "summary": summary}));
            record_turn(host, &session, &target, Role::Assistant, &format!("Summary of the work so far: {summary}"))
                .await;
            report.chains += 1;
            previous = None;
            input = vec![json!({"role": "user", "content": format!(
                "{}\n\nSummary of your work on it so far (the earlier turns were evicted from this conversation; \
            conversation_search finds them):\n{summary}\n\nContinue.",
                config.prompt
            )})];
        }
    }
    Err(DriveError::Limit(format!("no final answer within {} requests (--max-turns)", config.max_turns)))
}

/// Sends the run's requests: the budget is checked first; the exchange, its tokens, cost and response id
/// then go to the report, the ledger and the evidence.
struct Requests<'a> {
    client: Client,
    config: &'a DriveConfig,
    project: String,
    tools: Vec<Value>,
}

impl Requests<'_> {
    /// One request continuing `previous` (a new chain when `None`); `summary` forbids tool calls.
    /// Returns the response and its input tokens.
    async fn send(
        &self,
        host: &ToolHost,
        input: &[Value],
        previous: Option<&str>,
        summary: bool,
        report: &mut DriveReport,
        evidence: &mut Evidence,
    ) -> Result<(Value, u64), DriveError> {
        let config = self.config;
        let mut body = json!({
            "model": config.client.model,
            "instructions": instructions(host).await,
            "input": input,
            "tools": self.tools,
            "max_output_tokens": config.max_output_tokens,
        });
        if let Some(id) = previous {
            body["previous_response_id"] = json!(id);
        }
        if summary {
            body["tool_choice"] = json!("none");
        }
        if let Some(effort) = &config.reasoning_effort {
            body["reasoning"] = json!({"effort": effort});
        }
        if let Some(verbosity) = &config.verbosity {
            body["text"] = json!({"verbosity": verbosity});
        }
        let account = Account {
            run_id: &config.run_id,
            project: &self.project,
            run_budget_usd: config.run_budget_usd,
            project_budget_usd: config.project_budget_usd,
        };
        // a chained request also pays for the chain's earlier tokens, which the body does not hold
        let context_tokens = if previous.is_some() { report.input_tokens + report.output_tokens } else { 0 };
        // without a usable `usage` the guard charges the most it could cost and the run stops
        let (response, charge) = match self.client.send(&body, &account, context_tokens).await {
            Ok(answered) => answered,
            Err(failure) => {
                if failure.sent {
                    report.requests += 1;
                    evidence.exchange(&body, &json!({"error": failure.error.to_string(), "answer": failure.answer}));
                }
                if let Some(charged) = failure.charged {
                    report.input_tokens += charged.input_tokens;
                    report.output_tokens += charged.output_tokens;
                    report.cost_usd += charged.usd;
                }
                return Err(failure.error.into());
            }
        };
        report.requests += 1;
        evidence.exchange(&body, &response);
        report.input_tokens += charge.input_tokens;
        report.output_tokens += charge.output_tokens;
        report.cost_usd += charge.usd;
        crate::llm::responses::check_completed(&response)?;
        let id = response["id"].as_str().ok_or_else(|| LlmError::Protocol("a response without `id`".into()))?;
        report.response_ids.push(id.to_string());
        Ok((response, charge.input_tokens))
    }
}

/// What one function call produced.
struct Dispatched {
    /// The `function_call_output` text.
    text: String,
    is_error: bool,
    /// A registry tool's `structuredContent` (for the evidence).
    structured: Option<Value>,
    /// It was one of the local coding tools.
    local: bool,
}

/// Runs one function call: a local coding tool, else a registry tool.
async fn dispatch(host: &ToolHost, workspace: &Workspace, session: &GateState, call: &FunctionCall) -> Dispatched {
    let failed = |text: String| Dispatched { text, is_error: true, structured: None, local: false };
    let arguments = match serde_json::from_str(&call.arguments) {
        Ok(Value::Object(map)) => Value::Object(map),
        Ok(_) | Err(_) => {
            return failed(format!(
                "{}: the arguments are not a JSON object; call it again with valid JSON",
                call.name
            ));
        }
    };
    if let Some(output) = local_tools::call(workspace, &call.name, &arguments) {
        if output.edited {
            session.revoke_confirmed();
        }
        return Dispatched { text: output.text, is_error: output.is_error, structured: None, local: true };
    }
    let Value::Object(arguments) = arguments else { unreachable!("an object, checked above") };
    match host.call(session, &call.name, arguments).await {
        Ok(output) => {
            Dispatched { text: output.text, is_error: output.is_error, structured: output.structured, local: false }
        }
        Err(unknown) => failed(format!("unknown function `{}`: call one of the functions offered", unknown.0)),
    }
}

/// Writes one turn of the run into the conversation table (so `conversation_search` finds it later).
async fn record_turn(host: &ToolHost, session: &GateState, target: &ImportTarget, role: Role, text: &str) {
    let turn = session.next_turn();
    let item = NewItem {
        source_key: format!("drive:{turn}"),
        turn,
        role,
        speaker: None,
        text: text.to_string(),
        timestamp: Some(chrono::Utc::now()),
        date_label: None,
    };
    if let Err(e) = host.memories().conversation.import(target, &[item]).await {
        tracing::warn!("cannot record the run's turn in conversation memory: {e}");
    }
}

fn function_calls(response: &Value) -> Result<Vec<FunctionCall>, DriveError> {
    let items =
        response["output"].as_array().ok_or_else(|| LlmError::Protocol("a response without `output`".into()))?;
    items
        .iter()
        .filter(|item| item["type"] == "function_call")
        .map(|item| {
            let field = |k: &str| {
                item[k]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| LlmError::Protocol(format!("a function_call without `{k}`")))
            };
            Ok(FunctionCall { call_id: field("call_id")?, name: field("name")?, arguments: field("arguments")? })
        })
        .collect()
}
