//! The MCP endpoint, `/mcp`: the agent board and runs as MCP tools over streamable
//! HTTP (the official Rust SDK, `rmcp`), for agents and assistants that speak MCP
//! rather than REST.
//!
//! It is the server's second adapter beside `rest`, over the same services with its
//! own protocol concerns (sessions, progress notifications, tool errors); the rules
//! stay in [`crate::board`] and [`crate::runs`], and who-may-act-as-whom in
//! `server::caller`, which REST calls too, so the two interfaces cannot drift.
//!
//! - Identity. The auth middleware in front of `/mcp` checks the bearer token (any
//!   valid token may connect) and puts the caller's [`Principal`] in the request's
//!   extensions; rmcp hands every tool call the HTTP request parts that carried it, so
//!   each tool checks the permission it needs against the token of *that* request, not
//!   of the session: agent tools need `Work` and act only as the token's own agent
//!   (the REST rule, `server::caller::acting_agent`); operator tools need `Operate`;
//!   reads need `Read`. With auth off the caller is the local admin.
//! - Errors. Refusals, board errors and arguments of the wrong shape are tool results
//!   with `isError: true` and `{"error": {"code", "message"}}` as text (REST's codes,
//!   `invalid_request` for bad arguments), so the agent's model reads them; an unknown
//!   tool stays a protocol error.
//! - Waiting. `wait_for_prompt` runs the board's long poll in a task of its own (a
//!   client that goes away cannot cut a reservation in half; a task reserved for a
//!   caller that left is requeued when its ack deadline passes) and, when the call
//!   carries a progress token, sends `notifications/progress` at once and then every
//!   [`PROGRESS_EVERY`], so clients with a per-call timeout keep the call open.
//! - Hosts. rmcp checks the `Host` header against DNS rebinding. With auth off the
//!   server listens on loopback only and only loopback names are accepted; with auth
//!   on any host is (a page that rebinds a name to the server has no token).
//!   Before either, `server::origin` refuses (403) any request whose `Origin` is
//!   neither loopback nor listed, with auth on or off, as the specification requires.
//! - Long polls. A token holds at most a few `wait_for_prompt` calls open at once
//!   (`server::waits`, shared with REST), and the longest wait stays below the 60 s
//!   after which common MCP clients give up.
//! - Shutdown. The server's stop cancels rmcp's token, which ends every session and
//!   its open streams, so graceful shutdown is not held up by idle MCP clients.

mod params;
mod tools;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::tool::{IntoCallToolResult, ToolCallContext, ToolRouter};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, tool_handler};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::auth::{Permission, Principal};
use crate::error::Classified;

use super::AppState;
use super::error::ApiError;

/// How often a waiting `wait_for_prompt` reports progress (when asked to).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// The MCP service mounted at `/mcp`.
pub type McpService = StreamableHttpService<AwlMcp, LocalSessionManager>;

/// How the endpoint is set up.
pub struct McpConfig {
    /// The address the server listens on.
    pub bind: SocketAddr,
    pub auth_on: bool,
    /// The largest request body accepted.
    pub body_limit: usize,
    /// Cancelled when the server stops: ends every session.
    pub stop: CancellationToken,
}

/// The endpoint: a tower service for axum's router.
pub fn service(app: AppState, config: McpConfig) -> McpService {
    let mut http = StreamableHttpServerConfig::default()
        .with_cancellation_token(config.stop)
        .with_max_request_body_bytes(config.body_limit);
    http = if config.auth_on {
        http.disable_allowed_hosts()
    } else {
        // Loopback only (auth off refuses any other bind): the default names and
        // the bound address itself (127.0.0.2, ...).
        let mut hosts = http.allowed_hosts.clone();
        let ip = config.bind.ip().to_string();
        if !hosts.contains(&ip) {
            hosts.push(ip);
        }
        http.with_allowed_hosts(hosts)
    };
    let server = AwlMcp::new(app);
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        http,
    )
}

/// The MCP server: the board, runs and gates as tools. Cheap to clone (one per
/// session or stateless request).
#[derive(Clone)]
pub struct AwlMcp {
    app: AppState,
    tool_router: ToolRouter<AwlMcp>,
}

impl AwlMcp {
    pub fn new(app: AppState) -> Self {
        Self {
            app,
            tool_router: Self::tool_router(),
        }
    }
}

#[tool_handler(
    router = self.tool_router,
    name = "awl",
    instructions = "awl's agent board. Agents: register, then loop wait_for_prompt -> ack_task -> \
                    (report_progress, report_tool_call, ask_question) -> submit_for_review or \
                    complete_task / fail_task; read a task's feedback before starting; \
                    suggest_workflow says whether a workflow already does what you are doing. \
                    Operators: send_task, list_tasks, answer_question, approve_task, \
                    request_changes, list_workflows, start_run, run_status, control_run, control_workflow, retire_version, \
                    rerun_run, bulk_action, approve_gate; admins: archive_runs."
)]
impl ServerHandler for AwlMcp {
    /// The router's dispatch. rmcp answers arguments of the wrong shape with an
    /// `isError` result in plain text; they are rewritten here to this endpoint's error
    /// shape (`invalid_request`), so a client reads every tool error the same way.
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A span per tool call (the MCP semantic conventions), under the trace the
        // HTTP request that carried it names.
        let parts = context.extensions.get::<axum::http::request::Parts>();
        let header = |name: &str| {
            parts
                .and_then(|p| p.headers.get(name))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let span = tracing::info_span!(
            "mcp.tool",
            otel.name = %format!("tools/call {}", request.name),
            otel.kind = "server",
            mcp.method.name = "tools/call",
            mcp.session.id = header("mcp-session-id").unwrap_or_default(),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %request.name,
            error.type = tracing::field::Empty,
        );
        crate::telemetry::set_parent(&span, header("traceparent").as_deref());
        let call = ToolCallContext::new(self, request, context);
        let answer = self.tool_router.call(call).instrument(span.clone()).await?;
        if let CallToolResponse::Complete(result) = &answer
            && result.is_error == Some(true)
        {
            span.record("error.type", "tool_error");
        }
        match answer {
            CallToolResponse::Complete(result) if result.is_error == Some(true) => {
                match argument_error(&result) {
                    Some(message) => ToolError(ApiError::invalid(message)).into_call_tool_result(),
                    None => Ok(CallToolResponse::Complete(result)),
                }
            }
            other => Ok(other),
        }
    }
}

/// rmcp's message for arguments that do not deserialise, if `result` is one.
fn argument_error(result: &CallToolResult) -> Option<String> {
    let text = &result.content.first()?.as_text()?.text;
    text.starts_with("failed to deserialize parameters")
        .then(|| text.replacen("failed to deserialize parameters", "invalid arguments", 1))
}

// ---- identity and errors ------------------------------------------------------------

/// A tool's refusal or failure: REST's error, as an `isError` tool result.
#[derive(Debug)]
pub struct ToolError(pub ApiError);

impl From<ApiError> for ToolError {
    fn from(e: ApiError) -> Self {
        Self(e)
    }
}

impl<E: Classified> From<E> for ToolError {
    fn from(e: E) -> Self {
        Self(e.into())
    }
}

impl IntoCallToolResult for ToolError {
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        let ApiError {
            status,
            code,
            message,
        } = self.0;
        if status.is_server_error() {
            tracing::error!(code, %message, "an MCP tool failed");
        }
        let body = json!({ "error": { "code": code, "message": message } });
        Ok(CallToolResult::error(vec![ContentBlock::text(body.to_string())]).into())
    }
}

/// The caller of this tool call, if its token grants `permission`.
fn require(
    ctx: &RequestContext<RoleServer>,
    permission: Permission,
    tool: &str,
) -> Result<Principal, ToolError> {
    let who = ctx
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Principal>())
        .cloned()
        .ok_or_else(|| ApiError::forbidden("the call carries no caller (no token was checked)"))?;
    if !who.may(permission) {
        return Err(ApiError::forbidden(format!(
            "{} token may not call {tool} (it needs {permission:?})",
            who.role.with_article()
        ))
        .into());
    }
    Ok(who)
}
