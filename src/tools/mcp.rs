//! Tools discovered from external MCP servers, called with rmcp's client.
//!
//! A server is declared in a tools file's `mcp_servers:` list: a process speaking MCP
//! on its stdin and stdout (`command`), or a streamable HTTP endpoint (`url`). Each
//! has one session, started when the registry is discovered (and again if it ended),
//! kept open and shared by every clone of the registry; a stdio server's process dies
//! with the session, so with the last clone.
//!
//! - **names**: tool `T` of server `S` is `S__T` (OpenAI function names allow no dots);
//!   characters a function name may not hold become `_`, and a tool whose name is
//!   still not one (longer than 64) or clashes is left out and logged;
//! - **listing**: `tools/list` (every page) gives each tool's description and input
//!   schema; it is kept for the server's `refresh_seconds`, then asked for again by
//!   the next call (one request at a time per server); a listing that cannot be had
//!   again keeps the last one;
//! - **credentials** come only from awl's own environment: a stdio server gets an
//!   empty environment but `PATH`, `HOME` and the variables its `env_from` names; an
//!   HTTP server gets the value of `bearer_token_env` as its bearer token. Nothing of
//!   a caller's is passed on;
//! - **calls**: `tools/call` with the arguments checked against the listed schema,
//!   under the server's `timeout_seconds` (a call past it is cancelled; starting a
//!   session may take that long too, and at least 30 seconds). A result
//!   with `isError` fails with class `unknown` (`validation` when the server says
//!   the arguments are invalid); a JSON-RPC error with class `validation` (invalid
//!   parameters) or `dependency`; a broken connection with `network` (HTTP) or
//!   `dependency` (the process ended); HTTP 401/403 with `authentication`, 429 with
//!   `rate_limit`. A result becomes `{"content": [...], "structured": ...}`, with
//!   `json` beside them when the one text item is JSON.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex as SyncMutex, RwLock};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ErrorCode, Implementation,
};
use rmcp::service::{ClientInitializeError, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, HttpStatusError, InsufficientScopeError,
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{DynamicTransportError, StreamableHttpClientTransport};
use rmcp::{ClientCacheConfig, Peer, RoleClient, ServiceExt};
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Mutex;

use crate::domain::run::ErrorClass;
use crate::runners::{StepFailure, StepSuccess};
use crate::workflow::model::McpServerSpec;

use super::{Tool, schema};

/// Between a server's name and its tool's in a registered name: `S__T`.
pub const SEPARATOR: &str = "__";

/// The longest function name a model accepts.
const MAX_NAME: usize = 64;

/// The least time a server is given to start and to list its tools.
const MIN_START: Duration = Duration::from_secs(30);

/// How much of a stdio server's stderr is kept for messages.
const STDERR_TAIL: usize = 2_000;

/// A server that could not be started or listed, and why.
#[derive(Debug, Clone, thiserror::Error)]
#[error("MCP server `{server}` (declared in {}): {message}", file.display())]
pub struct McpStartError {
    pub server: String,
    pub file: PathBuf,
    pub message: String,
}

/// How fresh a listing must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    /// Younger than the server's `refresh_seconds`.
    Fresh,
    /// Asked for now.
    Now,
}

/// The tools one server listed, as the registry keeps them, by registered name.
pub(super) struct Listing {
    pub(super) tools: BTreeMap<String, Tool>,
    fetched: Instant,
}

/// Every declared server, by name. Clones share the servers.
#[derive(Clone, Default)]
pub(super) struct Servers(Arc<BTreeMap<String, Arc<Server>>>);

impl std::fmt::Debug for Servers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl Servers {
    pub(super) fn new(declared: impl IntoIterator<Item = (PathBuf, McpServerSpec)>) -> Self {
        let servers = declared
            .into_iter()
            .map(|(file, spec)| {
                let server = Server {
                    spec,
                    file,
                    session: Mutex::new(None),
                    listing: RwLock::new(None),
                    listing_one: Mutex::new(()),
                };
                (server.spec.name.clone(), Arc::new(server))
            })
            .collect();
        Self(Arc::new(servers))
    }

    pub(super) fn names(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }

    pub(super) fn get(&self, name: &str) -> Option<&Arc<Server>> {
        self.0.get(name)
    }

    /// Every server's listing, side by side, by server name.
    pub(super) async fn listings(
        &self,
        want: Want,
    ) -> Vec<(String, Result<Arc<Listing>, McpStartError>)> {
        join_all(self.0.values().map(|server| async move {
            let listed = server.listing(want).await.map_err(|message| McpStartError {
                server: server.spec.name.clone(),
                file: server.file.clone(),
                message,
            });
            (server.spec.name.clone(), listed)
        }))
        .await
    }

    pub(super) fn last_listing(&self, server: &str) -> Option<Arc<Listing>> {
        self.0.get(server).and_then(|s| s.last_listing())
    }

    /// The server a tool name belongs to, among those listed already (a tool the
    /// server offers since this registry's snapshot was made).
    pub(super) fn listed_server_of(&self, tool: &str) -> Option<&Arc<Server>> {
        self.server_of(tool, |s| s.last_listing().is_some())
    }

    /// The declared server a tool name belongs to (`SERVER__TOOL`, the longest
    /// server name that fits), whether it was listed yet or not: a workflow step's
    /// call starts its server's session when it is not running.
    pub(super) fn declared_server_of(&self, tool: &str) -> Option<&Arc<Server>> {
        self.server_of(tool, |_| true)
    }

    fn server_of(&self, tool: &str, also: impl Fn(&Server) -> bool) -> Option<&Arc<Server>> {
        self.0
            .values()
            .filter(|s| {
                tool.strip_prefix(s.spec.name.as_str())
                    .is_some_and(|rest| rest.starts_with(SEPARATOR))
                    && also(s)
            })
            .max_by_key(|s| s.spec.name.len())
    }
}

/// One declared server: its session and its last listing.
pub(super) struct Server {
    spec: McpServerSpec,
    /// The tools file that declares it (a stdio server runs in its directory).
    file: PathBuf,
    session: Mutex<Option<Session>>,
    listing: RwLock<Option<Arc<Listing>>>,
    /// Held while the tools are listed: one `tools/list` at a time.
    listing_one: Mutex<()>,
}

struct Session {
    service: RunningService<RoleClient, ClientConfig>,
    /// A stdio server's process (killed when dropped) and the end of its stderr.
    process: Option<(tokio::process::Child, Arc<SyncMutex<String>>)>,
}

impl Session {
    fn alive(&mut self) -> bool {
        let exited = match &mut self.process {
            Some((child, _)) => !matches!(child.try_wait(), Ok(None)),
            None => false,
        };
        !exited && !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }
}

impl Server {
    pub(super) fn name(&self) -> &str {
        &self.spec.name
    }

    /// How long starting a session and listing the tools may take: the call
    /// timeout, but at least [`MIN_START`] (an interpreter's start-up is no call).
    fn limit(&self) -> Duration {
        Duration::from_secs(self.spec.timeout_seconds).max(MIN_START)
    }

    fn refresh_after(&self) -> Duration {
        Duration::from_secs(self.spec.refresh_seconds)
    }

    fn last_listing(&self) -> Option<Arc<Listing>> {
        self.listing
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn fresh_listing(&self, since: Option<Instant>) -> Option<Arc<Listing>> {
        self.last_listing().filter(|l| match since {
            Some(asked) => l.fetched >= asked,
            None => l.fetched.elapsed() < self.refresh_after(),
        })
    }

    /// The listing, asked for again unless it is as fresh as `want` says.
    async fn listing(&self, want: Want) -> Result<Arc<Listing>, String> {
        let asked = Instant::now();
        let fresh_enough = |server: &Self| match want {
            Want::Fresh => server.fresh_listing(None),
            Want::Now => server.fresh_listing(Some(asked)),
        };
        if let Some(listing) = fresh_enough(self) {
            return Ok(listing);
        }
        let _one = self.listing_one.lock().await;
        // Listed by another caller while this one waited.
        if let Some(listing) = fresh_enough(self) {
            return Ok(listing);
        }
        let listing = Arc::new(self.list().await?);
        *self.listing.write().unwrap_or_else(|p| p.into_inner()) = Some(listing.clone());
        Ok(listing)
    }

    /// One of its tools by registered name for a workflow step's call, as
    /// [`Server::tool`] finds it; a server that cannot be listed and never was fails
    /// like a broken connection (`dependency` for a process, `network` over HTTP:
    /// handlers may retry), a tool it does not offer with class `validation`.
    pub(super) async fn tool_for_step(&self, name: &str) -> Result<Tool, StepFailure> {
        let listing = match self.listing(Want::Fresh).await {
            Ok(listing) => listing,
            Err(e) => self.last_listing().ok_or_else(|| {
                StepFailure::new(
                    self.connection_class(),
                    format!("tool `{name}`: MCP server `{}`: {e}", self.spec.name),
                )
            })?,
        };
        listing.tools.get(name).cloned().ok_or_else(|| {
            StepFailure::validation(format!(
                "MCP server `{}` offers no tool `{name}` (it offers: {})",
                self.spec.name,
                listing
                    .tools
                    .keys()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }

    /// One of its tools by registered name, from a listing asked for again when it
    /// is older than `refresh_seconds` (or the last one, when that fails).
    pub(super) async fn tool(&self, name: &str) -> Option<Tool> {
        let listing = match self.listing(Want::Fresh).await {
            Ok(listing) => Some(listing),
            Err(e) => {
                tracing::warn!(
                    server = %self.spec.name,
                    error = %e,
                    "an MCP server's tools could not be listed again; its last listing is used"
                );
                self.last_listing()
            }
        };
        listing.and_then(|l| l.tools.get(name).cloned())
    }

    async fn list(&self) -> Result<Listing, String> {
        let peer = self.peer().await?;
        let listed = tokio::time::timeout(self.limit(), peer.list_all_tools())
            .await
            .map_err(|_| format!("no answer to tools/list within {:?}", self.limit()))?
            .map_err(|e| format!("tools/list failed: {}", chain(&e)))?;
        let mut tools = BTreeMap::new();
        for listed in listed {
            let Some(name) = registered_name(&self.spec.name, &listed.name) else {
                tracing::warn!(
                    server = %self.spec.name,
                    tool = %listed.name,
                    "an MCP tool is left out: `SERVER__TOOL` would be longer than {MAX_NAME} characters"
                );
                continue;
            };
            if tools.contains_key(&name) {
                tracing::warn!(
                    server = %self.spec.name,
                    tool = %listed.name,
                    "an MCP tool is left out: another of the server's tools has the name `{name}`"
                );
                continue;
            }
            match schema::mcp(&self.spec, name.clone(), &listed) {
                Ok(tool) => {
                    tools.insert(name, tool);
                }
                Err(e) => tracing::warn!(
                    server = %self.spec.name,
                    tool = %listed.name,
                    "an MCP tool is left out: {e}"
                ),
            }
        }
        Ok(Listing {
            tools,
            fetched: Instant::now(),
        })
    }

    /// The session's peer, the session started (again) first if it is not running.
    async fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let mut session = self.session.lock().await;
        if let Some(running) = session.as_mut()
            && running.alive()
        {
            return Ok(running.service.peer().clone());
        }
        // The old one is dropped first: its process is killed.
        *session = None;
        let started = self.connect().await?;
        let peer = started.service.peer().clone();
        *session = Some(started);
        Ok(peer)
    }

    async fn connect(&self) -> Result<Session, String> {
        let started = if let Some(url) = &self.spec.url {
            self.connect_http(url).await?
        } else {
            self.connect_stdio().await?
        };
        // awl keeps the listing itself, for `refresh_seconds`.
        started
            .service
            .peer()
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        Ok(started)
    }

    async fn connect_stdio(&self) -> Result<Session, String> {
        let Some((program, args)) = self.spec.command.split_first() else {
            return Err("it has neither `command` nor `url`".into());
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for name in ["PATH", "HOME"] {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        for name in &self.spec.env_from {
            let value = std::env::var_os(name).ok_or_else(|| {
                format!("the environment variable `{name}` (in its `env_from`) is not set")
            })?;
            command.env(name, value);
        }
        if let Some(dir) = self.file.parent().filter(|d| !d.as_os_str().is_empty()) {
            command.current_dir(dir);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start `{program}`: {e}"))?;
        let tail = Arc::new(SyncMutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(forward_stderr(
                self.spec.name.clone(),
                stderr,
                Arc::clone(&tail),
            ));
        }
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err("its process has no stdin or stdout".into());
        };
        let started = tokio::time::timeout(self.limit(), client().serve((stdout, stdin))).await;
        let service = match started {
            Ok(Ok(service)) => service,
            Ok(Err(e)) => {
                // Its last words explain more than a closed pipe does.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(format!(
                    "`{program}` did not start an MCP session: {}{}",
                    chain(&e),
                    stderr_of(&tail)
                ));
            }
            Err(_) => {
                return Err(format!(
                    "`{program}` did not answer `initialize` within {:?}{}",
                    self.limit(),
                    stderr_of(&tail)
                ));
            }
        };
        Ok(Session {
            service,
            process: Some((child, tail)),
        })
    }

    async fn connect_http(&self, url: &str) -> Result<Session, String> {
        let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_string());
        if let Some(name) = &self.spec.bearer_token_env {
            let token = std::env::var(name).map_err(|_| {
                format!("the environment variable `{name}` (its `bearer_token_env`) is not set")
            })?;
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::with_client(http_client()?, config);
        let service = tokio::time::timeout(self.limit(), client().serve(transport))
            .await
            .map_err(|_| {
                format!(
                    "{url} did not answer `initialize` within {:?}",
                    self.limit()
                )
            })?
            .map_err(|e| {
                let why = if e.is_authorization_required() {
                    " (authorization required: check its bearer token)"
                } else {
                    ""
                };
                format!("cannot start an MCP session with {url}{why}: {}", chain(&e))
            })?;
        Ok(Session {
            service,
            process: None,
        })
    }

    /// Call `tool` (one of this server's, arguments checked) with `arguments`.
    pub(super) async fn call(
        &self,
        tool: &Tool,
        arguments: Map<String, Value>,
    ) -> Result<StepSuccess, StepFailure> {
        let limit = tool.timeout;
        let timed_out = || {
            StepFailure::new(
                ErrorClass::Timeout,
                format!(
                    "tool `{}` timed out after {limit:?} (MCP server `{}`)",
                    tool.name, self.spec.name
                ),
            )
        };
        // A session that ended is started again first, within its own limit.
        let peer = self.peer().await.map_err(|e| {
            StepFailure::new(
                self.connection_class(),
                format!("tool `{}`: MCP server `{}`: {e}", tool.name, self.spec.name),
            )
        })?;
        let remote = tool
            .remote_name
            .clone()
            .unwrap_or_else(|| tool.name.clone());
        let params = CallToolRequestParams::new(remote).with_arguments(arguments);
        // Dropping the request past the limit sends `notifications/cancelled`.
        let mut answer = tokio::time::timeout(limit, peer.call_tool_once(params.clone())).await;
        // A session found closed only by this call (its process died just before, and
        // the session did not know yet): started again, and the call made once more
        // (tools are at least once, like steps).
        if matches!(answer, Ok(Err(ServiceError::TransportClosed))) {
            let peer = self.peer().await.map_err(|e| {
                StepFailure::new(
                    self.connection_class(),
                    format!("tool `{}`: MCP server `{}`: {e}", tool.name, self.spec.name),
                )
            })?;
            answer = tokio::time::timeout(limit, peer.call_tool_once(params)).await;
        }
        match answer {
            Err(_) => Err(timed_out()),
            Ok(Err(e)) => Err(self.service_failure(&tool.name, &e)),
            Ok(Ok(CallToolResponse::Complete(result))) => {
                outcome(&tool.name, &self.spec.name, result)
            }
            Ok(Ok(_)) => Err(StepFailure::new(
                ErrorClass::Dependency,
                format!(
                    "tool `{}`: MCP server `{}` asked for input or started a task, which awl \
                     does not answer",
                    tool.name, self.spec.name
                ),
            )),
        }
    }

    /// A broken connection: the network's fault over HTTP, the process's over stdio.
    fn connection_class(&self) -> ErrorClass {
        if self.spec.url.is_some() {
            ErrorClass::Network
        } else {
            ErrorClass::Dependency
        }
    }

    fn service_failure(&self, tool: &str, error: &ServiceError) -> StepFailure {
        let server = &self.spec.name;
        let (class, what) = match error {
            ServiceError::McpError(data) if data.code == ErrorCode::INVALID_PARAMS => (
                ErrorClass::Validation,
                format!("refused the arguments: {}", data.message),
            ),
            ServiceError::McpError(data) if data.code == ErrorCode::METHOD_NOT_FOUND => (
                ErrorClass::Validation,
                format!("does not know the tool: {}", data.message),
            ),
            ServiceError::McpError(data) => (
                ErrorClass::Dependency,
                format!("answered with error {}: {}", data.code.0, data.message),
            ),
            ServiceError::Timeout { .. } => (ErrorClass::Timeout, chain(error)),
            ServiceError::TransportClosed => (
                self.connection_class(),
                if self.spec.url.is_some() {
                    "the connection closed".to_string()
                } else {
                    "its process ended".to_string()
                },
            ),
            ServiceError::TransportSend(e) => (transport_class(e, self), chain(error)),
            _ => (ErrorClass::Dependency, chain(error)),
        };
        StepFailure::new(
            class,
            format!("tool `{tool}`: MCP server `{server}` {what}"),
        )
    }
}

/// The class of a failed send: what HTTP said, when it said something.
fn transport_class(error: &DynamicTransportError, server: &Server) -> ErrorClass {
    let mut source: Option<&(dyn Error + 'static)> = Some(error.error.as_ref());
    while let Some(current) = source {
        if current.is::<AuthRequiredError>() || current.is::<InsufficientScopeError>() {
            return ErrorClass::Authentication;
        }
        let status = current
            .downcast_ref::<HttpStatusError>()
            .map(|e| e.status)
            .or_else(|| {
                current
                    .downcast_ref::<reqwest::Error>()
                    .and_then(|e| e.status())
                    .map(|s| s.as_u16())
            });
        match status {
            Some(401 | 403) => return ErrorClass::Authentication,
            Some(429) => return ErrorClass::RateLimit,
            // 5xx, or another answer no MCP server should give.
            Some(_) => return ErrorClass::Dependency,
            None => {}
        }
        source = cause_of(current);
    }
    server.connection_class()
}

/// A finished `tools/call` as a step's outcome.
fn outcome(tool: &str, server: &str, result: CallToolResult) -> Result<StepSuccess, StepFailure> {
    let content: Vec<Value> = result
        .content
        .iter()
        .map(|block| content_item(serde_json::to_value(block).unwrap_or(Value::Null)))
        .collect();
    let texts: Vec<&str> = content
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|item| item.get("text").and_then(Value::as_str))
        .collect();
    if result.is_error == Some(true) {
        let said = if texts.is_empty() {
            "the tool reported an error".to_string()
        } else {
            texts.join("\n")
        };
        let class = if says_invalid_arguments(&said) {
            ErrorClass::Validation
        } else {
            ErrorClass::Unknown
        };
        let mut output = Map::new();
        output.insert("content".into(), Value::Array(content.clone()));
        return Err(StepFailure::new(
            class,
            format!("tool `{tool}` (MCP server `{server}`) failed: {said}"),
        )
        .with_output(Value::Object(output)));
    }
    let json = match texts.as_slice() {
        [one] => serde_json::from_str::<Value>(one).ok(),
        _ => None,
    };
    let mut output = Map::new();
    output.insert("content".into(), Value::Array(content));
    if let Some(structured) = result.structured_content {
        output.insert("structured".into(), structured);
    }
    if let Some(json) = json {
        output.insert("json".into(), json);
    }
    Ok(StepSuccess::output(Value::Object(output)))
}

/// One content item as the output keeps it: as the server sent it, but binary data
/// (an image's, audio's or a resource's base64) replaced by its length, which is all
/// a model reading JSON can use of it.
fn content_item(mut item: Value) -> Value {
    fn shrink(map: &mut Map<String, Value>) {
        for key in ["data", "blob"] {
            if let Some(Value::String(data)) = map.get(key) {
                let length = data.len();
                map.remove(key);
                map.insert(format!("{key}_base64_length"), Value::from(length));
            }
        }
    }
    if let Value::Object(map) = &mut item {
        shrink(map);
        if let Some(Value::Object(resource)) = map.get_mut("resource") {
            shrink(resource);
        }
    }
    item
}

/// Whether an error a tool reported says its arguments were wrong.
fn says_invalid_arguments(message: &str) -> bool {
    let lower = message.to_lowercase();
    [
        "invalid argument",
        "invalid params",
        "invalid parameter",
        "invalid input",
        "validation error",
        "unknown tool",
    ]
    .iter()
    .any(|phrase| lower.contains(phrase))
}

/// Tool `tool` of server `server` as a function name a model accepts: `S__T`, every
/// character of `T` but letters, digits, `_` and `-` made `_`.
fn registered_name(server: &str, tool: &str) -> Option<String> {
    let tool: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = format!("{server}{SEPARATOR}{tool}");
    (!tool.is_empty() && name.len() <= MAX_NAME).then_some(name)
}

/// How awl introduces itself to a server.
fn client() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("awl", env!("CARGO_PKG_VERSION")),
    )
}

fn http_client() -> Result<reqwest::Client, String> {
    // reqwest is built without a default crypto provider; awl uses ring. Installing
    // twice is refused, which is fine: one is installed either way.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("awl/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {}", chain(&e)))
}

/// A stdio server's stderr: logged line by line, its end kept for messages.
async fn forward_stderr(
    server: String,
    stderr: tokio::process::ChildStderr,
    tail: Arc<SyncMutex<String>>,
) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(server = %server, "{line}");
        let mut kept = tail.lock().unwrap_or_else(|p| p.into_inner());
        kept.push_str(&line);
        kept.push('\n');
        if kept.len() > STDERR_TAIL {
            let mut cut = kept.len() - STDERR_TAIL;
            while !kept.is_char_boundary(cut) {
                cut += 1;
            }
            kept.drain(..cut);
        }
    }
}

fn stderr_of(tail: &SyncMutex<String>) -> String {
    let kept = tail.lock().unwrap_or_else(|p| p.into_inner());
    let kept = kept.trim();
    if kept.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with:\n{kept}")
    }
}

/// The HTTP transport's error, with the reqwest client.
type HttpError = StreamableHttpError<reqwest::Error>;

/// The next cause of `error`, reaching into a transport's error, the HTTP client's
/// own error and an HTTP status, which rmcp does not give as sources.
fn cause_of<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a (dyn Error + 'static)> {
    if let Some(ClientInitializeError::TransportError { error, .. }) = error.downcast_ref() {
        return Some(error);
    }
    if let Some(ServiceError::TransportSend(inner)) = error.downcast_ref() {
        return Some(inner);
    }
    match error.downcast_ref::<HttpError>() {
        Some(HttpError::Client(inner)) => Some(inner),
        Some(HttpError::HttpStatus(inner)) => Some(inner),
        _ => error.source(),
    }
}

/// An error and its causes, each said once, without rmcp's wrappers (which name
/// transport types and repeat their cause).
fn chain(error: &(dyn Error + 'static)) -> String {
    let wrapper = |e: &(dyn Error + 'static)| {
        e.is::<DynamicTransportError>()
            || matches!(
                e.downcast_ref::<ClientInitializeError>(),
                Some(ClientInitializeError::TransportError { .. })
            )
            || matches!(
                e.downcast_ref::<ServiceError>(),
                Some(ServiceError::TransportSend(_))
            )
            || matches!(e.downcast_ref::<HttpError>(), Some(HttpError::Client(_)))
    };
    let mut said: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        let text = e.to_string();
        if !wrapper(e) && !said.iter().any(|s| s.contains(&text)) {
            said.push(text);
        }
        current = cause_of(e);
    }
    if said.is_empty() {
        error.to_string()
    } else {
        said.join(": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_function_names() {
        assert_eq!(
            registered_name("gh", "search").as_deref(),
            Some("gh__search")
        );
        assert_eq!(
            registered_name("files", "fs.read file").as_deref(),
            Some("files__fs_read_file")
        );
        assert_eq!(registered_name("a", &"x".repeat(62)), None);
        assert_eq!(registered_name("a", ""), None);
    }

    #[test]
    fn binary_content_is_replaced_by_its_length() {
        let item = content_item(serde_json::json!({
            "type": "image", "mimeType": "image/png", "data": "aGVsbG8=",
        }));
        assert_eq!(
            item,
            serde_json::json!({"type": "image", "mimeType": "image/png", "data_base64_length": 8})
        );
        let text = serde_json::json!({"type": "text", "text": "hi"});
        assert_eq!(content_item(text.clone()), text);
    }

    #[test]
    fn transport_errors_are_said_without_rmcp_wrappers_and_classed_by_what_http_said() {
        let wrapped = |error: HttpError| {
            DynamicTransportError::from_parts(
                "streamable-http",
                std::any::TypeId::of::<()>(),
                Box::new(error),
            )
        };
        let status = |code| wrapped(HttpError::HttpStatus(HttpStatusError::new(code, None)));
        let starting = ClientInitializeError::TransportError {
            error: status(503),
            context: "send initialize request".into(),
        };
        assert_eq!(chain(&starting), "HTTP 503");
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset by peer");
        assert_eq!(
            chain(&ServiceError::TransportSend(wrapped(HttpError::Io(reset)))),
            "Io error: reset by peer"
        );

        let spec: McpServerSpec = serde_json::from_value(serde_json::json!({
            "name": "remote", "url": "https://mcp.example.com/mcp",
        }))
        .unwrap();
        let servers = Servers::new([(PathBuf::from("t.yaml"), spec)]);
        let server = servers.get("remote").unwrap();
        assert_eq!(
            transport_class(&status(401), server),
            ErrorClass::Authentication
        );
        assert_eq!(transport_class(&status(429), server), ErrorClass::RateLimit);
        assert_eq!(
            transport_class(&status(502), server),
            ErrorClass::Dependency
        );
        let auth = HttpError::AuthRequired(AuthRequiredError::new("Bearer".into()));
        assert_eq!(
            transport_class(&wrapped(auth), server),
            ErrorClass::Authentication
        );
        let gone = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(
            transport_class(&wrapped(HttpError::Io(gone)), server),
            ErrorClass::Network
        );
    }

    #[test]
    fn invalid_arguments_are_recognised() {
        assert!(says_invalid_arguments(
            "1 validation error for addArguments\nb\n  Field required"
        ));
        assert!(says_invalid_arguments("Invalid arguments for tool add"));
        assert!(!says_invalid_arguments("boom"));
    }
}
