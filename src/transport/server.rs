//! The rmcp `ServerHandler` of astra-mcp: `initialize` (with the server instructions), `tools/list` from
//! the registry's strict schemas, `tools/call` dispatched to [`ToolHost`] with this connection's session
//! state, core memory blocks as resources (`memory://core/<section>`) with update notifications, and
//! the `core_memory` prompt. One `McpServer` value serves exactly one MCP session.
//!
//! Resource updates reach a client through the mechanism its protocol version has: `resources/subscribe`
//! (2024-11-05 … 2025-11-25) or a `subscriptions/listen` stream (2026-07-28). Either way, only changes
//! made through this server process are announced.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::Extensions;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, Prompt, PromptMessage, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, Resource, ResourceContents, ResourceUpdatedNotificationParam, Role, ServerCapabilities,
    ServerConfig, SubscribeRequestParams, SubscriptionFilter, Tool, ToolAnnotations, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use tokio::sync::broadcast;

use super::shutdown::{Phase, Shutdown};
use crate::domain::Scope;
use crate::memory::core::{BlockChanged, block_uri, section_of_uri};
use crate::memory::{Block, GateState};
use crate::tools::{self, Hosts, INSTRUCTIONS, ToolHost, ToolSpec, render_core_memory};

/// Name of the prompt that renders every core memory block.
pub const CORE_MEMORY_PROMPT: &str = "core_memory";

/// Whose memory a server's requests use, and where its gate state lives.
#[derive(Debug, Clone)]
enum Binding {
    /// The connection is the MCP session and has one identity: stdio (the server's `--actor`) and a
    /// legacy SSE stream (the identity its `GET /sse` authenticated as).
    Connection(Scope),
    /// Streamable HTTP: each request carries the identity its bearer token maps to (an [`http`
    /// extension](crate::transport::http) set before rmcp sees the request; the HTTP guard also keeps a session
    /// to the identity that opened it). After `initialize` the session keeps its own gate state; without
    /// `initialize` (protocol 2026-07-28, no sessions) the gate state is the host's sessionless one, per
    /// actor, project and workspace (docs/tools.md, "The gates").
    StreamableHttp,
}

/// The MCP server of one session (or, under the stateless protocol, of one HTTP request).
#[derive(Clone)]
pub struct McpServer {
    hosts: Arc<Hosts>,
    binding: Binding,
    /// Gate state of this session.
    session: Arc<GateState>,
    /// `initialize` was handled here: this value serves a session, not a single stateless request.
    initialized: Arc<AtomicBool>,
    tools: Arc<Vec<Tool>>,
    shutdown: Arc<Shutdown>,
    /// URIs this session subscribed to with `resources/subscribe`, and whether the forwarder runs.
    subscriptions: Arc<Mutex<(HashSet<String>, bool)>>,
}

impl McpServer {
    /// A server for a new session over `host` alone (a fresh random session id).
    pub fn new(host: ToolHost) -> Self {
        Self::with_session(host, Arc::new(GateState::random()))
    }

    /// A server over `host` alone, bound to an existing session state.
    pub fn with_session(host: ToolHost, session: Arc<GateState>) -> Self {
        let scope = host.memories().scope.clone();
        Self::build(Arc::new(Hosts::single(host)), Binding::Connection(scope), session)
    }

    /// A server whose connection is one session acting for `scope` (stdio, legacy SSE).
    pub fn connection(hosts: Arc<Hosts>, scope: Scope) -> Self {
        Self::build(hosts, Binding::Connection(scope), Arc::new(GateState::random()))
    }

    /// A server for rmcp's streamable HTTP service: the identity comes with each request.
    pub fn streamable_http(hosts: Arc<Hosts>) -> Self {
        Self::build(hosts, Binding::StreamableHttp, Arc::new(GateState::random()))
    }

    fn build(hosts: Arc<Hosts>, binding: Binding, session: Arc<GateState>) -> Self {
        let tools = tools::specs().iter().map(to_mcp_tool).collect();
        Self {
            hosts,
            binding,
            session,
            initialized: Arc::default(),
            tools: Arc::new(tools),
            shutdown: Shutdown::new(),
            subscriptions: Arc::default(),
        }
    }

    /// Follows `shutdown`: no new tool call starts once it drains, and calls still running when it
    /// abandons are dropped (killing their test runs).
    pub fn with_shutdown(mut self, shutdown: Arc<Shutdown>) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// The tool host and gate state a request with these `extensions` uses.
    async fn resolve(&self, extensions: &Extensions) -> Result<(ToolHost, Arc<GateState>), McpError> {
        match &self.binding {
            Binding::Connection(scope) => Ok((self.hosts.host(scope).await.map_err(internal)?, self.session.clone())),
            Binding::StreamableHttp => {
                let scope = extensions
                    .get::<axum::http::request::Parts>()
                    .and_then(|parts| parts.extensions.get::<Scope>())
                    .cloned()
                    .ok_or_else(|| internal("the HTTP request carries no identity"))?;
                let host = self.hosts.host(&scope).await.map_err(internal)?;
                let session =
                    if self.initialized.load(Ordering::Acquire) { self.session.clone() } else { host.sessionless() };
                Ok((host, session))
            }
        }
    }

    /// The tool host of a request (see [`Self::resolve`]).
    async fn host(&self, extensions: &Extensions) -> Result<ToolHost, McpError> {
        self.resolve(extensions).await.map(|(host, _)| host)
    }
}

fn internal(e: impl std::fmt::Display) -> McpError {
    McpError::internal_error(e.to_string(), None)
}

/// A read of core memory for a resource or a prompt, bounded by the host's `--tool-timeout` as a tool
/// call is ([`ToolHost::bounded`]).
async fn within<T, E: std::fmt::Display>(
    host: &ToolHost,
    read: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, McpError> {
    host.bounded(read)
        .await
        .map_err(|limit| {
            internal(format!(
                "the memory store did not answer within {} s (--tool-timeout): read it again in a moment",
                limit.as_secs()
            ))
        })?
        .map_err(internal)
}

fn block_resource(block: &Block) -> Resource {
    Resource::new(block.uri(), block.spec.name.clone())
        .with_title(format!("Core memory: {}", block.spec.name))
        .with_description(format!(
            "{} {} of {} characters, version {}.",
            block.spec.description(),
            block.chars(),
            block.spec.limit,
            block.version
        ))
        .with_mime_type("text/plain")
        .with_size(block.value.len() as u64)
}

fn to_mcp_tool(spec: &ToolSpec) -> Tool {
    let a = spec.annotations;
    Tool::new(spec.name, spec.description, Arc::new(spec.input_schema.clone()))
        .with_title(spec.title)
        .with_raw_output_schema(Arc::new(spec.output_schema.clone()))
        .with_annotations(
            ToolAnnotations::with_title(spec.title)
                .read_only(a.read_only)
                .destructive(a.destructive)
                .idempotent(a.idempotent)
                .open_world(a.open_world),
        )
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_prompts()
                .build(),
        )
        .with_server_info(
            Implementation::new("astra-mcp", env!("CARGO_PKG_VERSION"))
                .with_title("astra-mcp verified memory")
                .with_description("Verified fix memory for coding agents"),
        )
        .with_instructions(INSTRUCTIONS)
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        // From here on this value serves a session (the HTTP guard keeps it to the identity of `initialize`).
        self.initialized.store(true, Ordering::Release);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools.as_ref().clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(_in_flight) = self.shutdown.begin_call() else {
            return Err(McpError::internal_error("server shutting down: call the tool again once it is back", None));
        };
        let arguments = request.arguments.unwrap_or_default();
        // Counted in flight from here, the wait for the store (a first call right after launch) included.
        let call = async {
            let (host, session) = self.resolve(&context.extensions).await?;
            host.call(&session, &request.name, arguments)
                .await
                .map_err(|unknown| McpError::invalid_params(unknown.to_string(), None))
        };
        // Over HTTP: the request that carries the call, gone when its client disconnected or deleted the
        // session (nobody is left to read the answer).
        let gone = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<crate::transport::http::RequestGone>())
            .map(|gone| gone.0.clone());
        let gone = async move {
            match gone {
                Some(token) => token.cancelled_owned().await,
                None => std::future::pending().await,
            }
        };
        // A cancelled request, a client gone, or an abandoning shutdown drops the call, and with it any
        // test run it started.
        let output = tokio::select! {
            output = call => output?,
            _ = context.ct.cancelled() => {
                tracing::info!(tool = %request.name, "request cancelled by the client");
                return Err(McpError::internal_error("request cancelled", None));
            }
            () = gone => {
                tracing::info!(tool = %request.name, "the HTTP request of the call went away: call dropped");
                return Err(McpError::internal_error("the HTTP request of the call went away", None));
            }
            _ = self.shutdown.reached(Phase::Abandoned) => {
                return Err(McpError::internal_error(
                    "server shut down before the call finished; a write it had begun may still have been stored \
        (storing the same text again deduplicates)",
                    None,
                ));
            }
        };
        let mut result = if output.is_error {
            CallToolResult::error(vec![ContentBlock::text(output.text)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(output.text)])
        };
        result.structured_content = output.structured;
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let host = self.host(&context.extensions).await?;
        let blocks = within(&host, host.memories().core.read_all()).await?;
        Ok(ListResourcesResult::with_all_items(blocks.iter().map(block_resource).collect()))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let host = self.host(&context.extensions).await?;
        let core = &host.memories().core;
        let section = section_of_uri(&request.uri)
            .filter(|s| core.blocks().iter().any(|b| b.name == *s))
            .ok_or_else(|| unknown_resource(&request.uri, core))?;
        let block = within(&host, core.read(section)).await?;
        Ok(ReadResourceResult::new(vec![ResourceContents::text(block.value, request.uri)]).into())
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let core = self.host(&context.extensions).await?.memories().core.clone();
        if section_of_uri(&request.uri).is_none_or(|s| !core.blocks().iter().any(|b| b.name == s)) {
            return Err(unknown_resource(&request.uri, &core));
        }
        let start_forwarder = {
            let mut subs = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
            subs.0.insert(request.uri.clone());
            !std::mem::replace(&mut subs.1, true)
        };
        if start_forwarder {
            let mut changes = core.subscribe();
            let subscriptions = self.subscriptions.clone();
            let peer = context.peer.clone();
            let shutdown = self.shutdown.clone();
            tokio::spawn(async move {
                loop {
                    let changed = tokio::select! {
                        changed = changes.recv() => changed,
                        _ = shutdown.reached(Phase::Abandoned) => return,
                    };
                    let uri = match changed {
                        Ok(BlockChanged { section }) => block_uri(&section),
                        Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => return,
                    };
                    let subscribed = subscriptions.lock().unwrap_or_else(|p| p.into_inner()).0.contains(&uri);
                    if subscribed
                        && peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)).await.is_err()
                    {
                        return; // the client is gone
                    }
                }
            });
        }
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.subscriptions.lock().unwrap_or_else(|p| p.into_inner()).0.remove(&request.uri);
        Ok(())
    }

    fn accepted_subscription_filter(&self, requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        // Block names and limits are the server's configuration, the same for every identity.
        let ours: HashSet<String> = self.hosts.block_specs().iter().map(|b| block_uri(&b.name)).collect();
        let uris: Vec<String> =
            requested.resource_subscriptions.iter().flatten().filter(|u| ours.contains(*u)).cloned().collect();
        Some(SubscriptionFilter::builder().resource_subscriptions(uris).build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        let mut changes = self.host(&context.request_context().extensions).await?.memories().core.subscribe();
        let accepted: HashSet<String> = context.accepted().resource_subscriptions.iter().flatten().cloned().collect();
        loop {
            let changed = tokio::select! {
                _ = context.cancelled() => return Ok(()),
                _ = self.shutdown.reached(Phase::Abandoned) => return Ok(()),
                changed = changes.recv() => changed,
            };
            let uri = match changed {
                Ok(BlockChanged { section }) => block_uri(&section),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return Ok(()),
            };
            if accepted.contains(&uri) && context.sink().notify_resource_updated(uri).await.is_err() {
                return Ok(());
            }
        }
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let prompt = Prompt::new(
            CORE_MEMORY_PROMPT,
            Some("Every core memory block (persona, human, project, …) rendered for pinning into the context."),
            None,
        );
        Ok(ListPromptsResult::with_all_items(vec![prompt]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        if request.name != CORE_MEMORY_PROMPT {
            return Err(McpError::invalid_params(
                format!("unknown prompt `{}`: this server has the prompt `{CORE_MEMORY_PROMPT}`", request.name),
                None,
            ));
        }
        let host = self.host(&context.extensions).await?;
        let blocks = within(&host, host.memories().core.read_all()).await?;
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, render_core_memory(&blocks))])
            .with_description("Core memory blocks of this user and project")
            .into())
    }
}

fn unknown_resource(uri: &str, core: &crate::memory::CoreMemory) -> McpError {
    McpError::resource_not_found(
        format!(
            "no resource `{uri}`: this server has {}",
            core.blocks().iter().map(|b| block_uri(&b.name)).collect::<Vec<_>>().join(", ")
        ),
        None,
    )
}
