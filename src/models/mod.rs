//! Models: awl's client for OpenAI-compatible Chat Completions APIs.
//!
//! Agent steps that awl runs itself talk to a language model. Nearly every server
//! speaks OpenAI's Chat Completions wire format (OpenAI, gateways such as LiteLLM,
//! vLLM, llama.cpp, Ollama), so awl has one client for it rather than one SDK per
//! vendor. The client does one call's transport and nothing else: awl's own types
//! ([`Message`], [`ToolCall`], [`ChatReply`]) are what runs record in their events,
//! and the wire shapes are converted here, at the edge, so a change of wire format
//! never changes the log.
//!
//! What a caller can rely on:
//!
//! - **Retries are bounded and deterministic.** 429, 500, 502, 503, 504, timeouts
//!   and connection failures are tried again up to [`Endpoint::max_retries`] times,
//!   waiting what `Retry-After` says (seconds or an HTTP date) or else 250 ms, 500
//!   ms, 1 s... up to 8 s. A `Retry-After` longer than [`Endpoint::max_retry_wait`]
//!   fails at once: the caller (the executor, with its own back-off and budget)
//!   decides whether to wait that long, not a client holding a worker. Other 4xx
//!   are never retried: the same request would be refused again.
//! - **Everything is bounded.** Every attempt has [`Endpoint::timeout`] (for a
//!   streamed reply: until the answer starts, then between two pieces of it), a
//!   reply body is read up to 8 MiB and no further, and a streamed reply is cut at
//!   the same size.
//! - **A streamed reply is retried only before its first byte**: once text reached
//!   the caller's `on_delta`, trying again would show it twice.
//! - **Every failure has a class** ([`ModelError::class`]) for the error handlers,
//!   and a message with the server's own words (clipped) and the number of attempts.
//! - **Nothing secret is logged.** A call's span names the model and counts attempts
//!   and tokens; message contents and the API key never reach a log, and [`Endpoint`]'s
//!   `Debug` hides the key.
//!
//! Tool-call arguments are kept as the model wrote them ([`ToolCall::arguments`]):
//! models write broken JSON, and what to do about it is the caller's decision.
//!
//! | module | what |
//! |---|---|
//! | `stream` | server-sent events: lines to chunks, chunks to one reply |
//! | `price` | what a call cost: a dated table of list prices |

mod price;
mod stream;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use reqwest::Url;
use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, HeaderMap, RETRY_AFTER};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tracing::Instrument;
use tracing::field::Empty;

use crate::domain::run::ErrorClass;
use crate::text::{clip, error_chain};

pub use price::{Price, known_price};

/// The most of a reply body (or of a streamed reply) that is read.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;
/// The most of an error response that is read (only its message is wanted).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// How much of a server's error message an error carries.
const MESSAGE_BYTES: usize = 500;
/// The first back-off; each next one doubles, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(8);

/// Where a model is served, and how patiently to call it.
#[derive(Clone)]
pub struct Endpoint {
    /// The API's base, e.g. `http://127.0.0.1:8080/v1`; requests go to
    /// `{base_url}/chat/completions`.
    pub base_url: String,
    /// Sent as `Authorization: Bearer ...` when set.
    pub api_key: Option<String>,
    /// The limit on one HTTP attempt (for a streamed reply: until it starts, and then
    /// between two pieces of it).
    pub timeout: Duration,
    /// How many more attempts after the first (3).
    pub max_retries: u32,
    /// The longest one wait before a retry may be (30 s); a `Retry-After` asking for
    /// more fails at once.
    pub max_retry_wait: Duration,
}

impl Endpoint {
    /// An endpoint with the defaults: 120 s per attempt, 3 retries, waits of 30 s at most.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            timeout: Duration::from_secs(120),
            max_retries: 3,
            max_retry_wait: Duration::from_secs(30),
        }
    }

    /// `{base_url}/chat/completions`, checked.
    fn chat_url(&self) -> Result<Url, ModelError> {
        let raw = format!("{}/chat/completions", self.base_url.trim_end_matches('/'));
        let url = Url::parse(&raw).map_err(|e| ModelError::Setup {
            message: format!("the endpoint's base URL is not a URL: {e}"),
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ModelError::Setup {
                message: format!(
                    "the endpoint's base URL has scheme `{}`: only http and https are allowed",
                    url.scheme()
                ),
            });
        }
        Ok(url)
    }
}

/// The key is never shown.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("max_retry_wait", &self.max_retry_wait)
            .finish()
    }
}

/// One message of a conversation, as awl records it (`{"role": "user", "content":
/// ...}`, tool calls as [`ToolCall`]s); the wire shape is made by the client.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        content: Option<String>,
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

/// A call of a tool the model asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them: JSON text, or not (it is not parsed here).
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// The JSON Schema of the arguments.
    pub parameters: Value,
}

/// One call of the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    /// None: no `tools` are sent.
    pub tools: Vec<ToolSpec>,
    /// Send `"tool_choice": "none"` (with tools only): the model must answer in text.
    pub tool_choice_none: bool,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
}

/// Tokens a call used, as the server counted them (zero when it did not say).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// What the model answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatReply {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// `stop`, `tool_calls`, `length`, ... as the server said.
    pub finish_reason: Option<String>,
    pub usage: Usage,
    /// The model as the server named it (the requested name if it named none).
    pub model: String,
}

/// A reply and what it took to get it.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub reply: ChatReply,
    /// How long the successful attempt took.
    pub latency: Duration,
    /// 1 when the first attempt succeeded.
    pub attempts: u32,
    /// The time slept between attempts.
    pub waited: Duration,
}

/// Why a call failed. Messages carry the server's message (clipped) and, after
/// `(...)`, how many attempts were made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// 429, or a `Retry-After` longer than the endpoint allows.
    #[error("the model server is rate limiting{}: {message}", retry_after_note(*.retry_after))]
    RateLimited {
        retry_after: Option<Duration>,
        message: String,
    },
    /// 5xx.
    #[error("the model server failed with status {status}: {message}")]
    Server { status: u16, message: String },
    /// A 4xx other than 429 (or a redirect: the base URL is wrong).
    #[error("the model server refused the request with status {status}: {message}")]
    Refused { status: u16, message: String },
    /// An attempt took longer than the endpoint's timeout.
    #[error("the model server did not answer within {after:?}")]
    Timeout { after: Duration },
    /// No connection, or the connection broke.
    #[error("the model server could not be reached: {message}")]
    Transport { message: String },
    /// The answer could not be read: not JSON, no choices, a broken stream, too big.
    #[error("the model server's answer could not be read: {message}")]
    Malformed { message: String },
    /// The client or the endpoint is wrong (a bad URL, no TLS setup).
    #[error("the model client could not be set up: {message}")]
    Setup { message: String },
}

fn retry_after_note(retry_after: Option<Duration>) -> String {
    retry_after
        .map(|wait| format!(" (Retry-After: {}s)", wait.as_secs()))
        .unwrap_or_default()
}

impl ModelError {
    /// The class of the failure, for the error handlers.
    pub fn class(&self) -> ErrorClass {
        match self {
            Self::RateLimited { .. } => ErrorClass::RateLimit,
            Self::Refused {
                status: 401 | 403, ..
            } => ErrorClass::Authentication,
            Self::Refused { .. } => ErrorClass::Validation,
            Self::Timeout { .. } => ErrorClass::Timeout,
            Self::Transport { .. } => ErrorClass::Network,
            Self::Server { .. } | Self::Malformed { .. } | Self::Setup { .. } => {
                ErrorClass::Dependency
            }
        }
    }

    /// Whether the same request may succeed if sent again (after a wait).
    pub fn retryable(&self) -> bool {
        match self {
            Self::RateLimited { .. } | Self::Timeout { .. } | Self::Transport { .. } => true,
            Self::Server { status, .. } => matches!(status, 500 | 502 | 503 | 504),
            Self::Refused { .. } | Self::Malformed { .. } | Self::Setup { .. } => false,
        }
    }

    fn malformed(message: impl Into<String>) -> Self {
        Self::Malformed {
            message: message.into(),
        }
    }

    /// The error, its message saying how many attempts were made.
    fn after_attempts(mut self, attempts: u32) -> Self {
        let note = match attempts {
            1 => " (1 attempt)".to_string(),
            n => format!(" ({n} attempts)"),
        };
        match &mut self {
            Self::RateLimited { message, .. }
            | Self::Server { message, .. }
            | Self::Refused { message, .. }
            | Self::Transport { message }
            | Self::Malformed { message }
            | Self::Setup { message } => message.push_str(&note),
            Self::Timeout { .. } => {}
        }
        self
    }
}

/// A failed attempt: the error, the wait the server asked for, and whether a
/// streamed reply had started (then it is not tried again).
#[derive(Debug)]
struct Failure {
    error: ModelError,
    retry_after: Option<Duration>,
    started: bool,
}

impl From<ModelError> for Failure {
    fn from(error: ModelError) -> Self {
        Self {
            error,
            retry_after: None,
            started: false,
        }
    }
}

/// The client. Cheap to clone; clones share one connection pool.
#[derive(Debug, Clone)]
pub struct ModelClient {
    http: reqwest::Client,
}

impl ModelClient {
    /// A client with awl's TLS setup (rustls with the ring provider).
    pub fn new() -> Result<Self, ModelError> {
        // reqwest is built without a default crypto provider; awl uses ring. Installing
        // twice is refused, which is fine: one is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("awl/", env!("CARGO_PKG_VERSION")))
            // An API does not redirect: a redirect means a wrong base URL, and following
            // it would turn the POST into a GET.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ModelError::Setup {
                message: error_chain(&e),
            })?;
        Ok(Self { http })
    }

    /// Call the model and wait for the whole reply.
    pub async fn chat(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
    ) -> Result<Completion, ModelError> {
        self.complete(endpoint, request, None).await
    }

    /// Call the model with `"stream": true`: `on_delta` gets each piece of text as it
    /// arrives; the reply is returned whole (tool calls assembled from their pieces).
    pub async fn chat_stream(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<Completion, ModelError> {
        self.complete(endpoint, request, Some(on_delta)).await
    }

    async fn complete(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
        on_delta: Option<&mut (dyn FnMut(&str) + Send)>,
    ) -> Result<Completion, ModelError> {
        let span = tracing::info_span!(
            "model.chat",
            otel.kind = "client",
            model = %request.model,
            stream = on_delta.is_some(),
            attempts = Empty,
            prompt_tokens = Empty,
            completion_tokens = Empty,
            error.class = Empty,
        );
        let result = self
            .with_retries(endpoint, request, on_delta, &span)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(done) => {
                span.record("prompt_tokens", done.reply.usage.prompt_tokens);
                span.record("completion_tokens", done.reply.usage.completion_tokens);
            }
            Err(e) => {
                span.record("error.class", e.class().as_str());
            }
        }
        result
    }

    /// Attempts until one succeeds, one fails for good, or the retries run out.
    async fn with_retries(
        &self,
        endpoint: &Endpoint,
        request: &ChatRequest,
        mut on_delta: Option<&mut (dyn FnMut(&str) + Send)>,
        span: &tracing::Span,
    ) -> Result<Completion, ModelError> {
        let url = endpoint.chat_url()?;
        let body = request_body(request, on_delta.is_some());
        let mut waited = Duration::ZERO;
        let mut attempt = 0;
        loop {
            attempt += 1;
            span.record("attempts", attempt);
            let started = Instant::now();
            let result = match on_delta.as_deref_mut() {
                Some(on_delta) => self.streamed(&url, endpoint, &body, on_delta).await,
                None => self.whole(&url, endpoint, &body).await,
            };
            let failure = match result {
                Ok(mut reply) => {
                    if reply.model.is_empty() {
                        reply.model.clone_from(&request.model);
                    }
                    return Ok(Completion {
                        reply,
                        latency: started.elapsed(),
                        attempts: attempt,
                        waited,
                    });
                }
                Err(failure) => failure,
            };
            let Some(wait) = wait_before_retry(&failure, attempt, endpoint) else {
                return Err(failure.error.after_attempts(attempt));
            };
            tracing::info!(
                attempt,
                wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                error.class = failure.error.class().as_str(),
                "the model call failed; trying again"
            );
            tokio::time::sleep(wait).await;
            waited += wait;
        }
    }

    /// One attempt of a plain call, all of it under the endpoint's timeout.
    async fn whole(
        &self,
        url: &Url,
        endpoint: &Endpoint,
        body: &Value,
    ) -> Result<ChatReply, Failure> {
        let exchange = async {
            let response = self.send(url, endpoint, body, false).await?;
            let mut response = check_status(response).await?;
            let (bytes, complete) = read_up_to(&mut response, MAX_BODY_BYTES)
                .await
                .map_err(transport)?;
            if !complete {
                return Err(too_big().into());
            }
            parse_reply(&bytes).map_err(Failure::from)
        };
        tokio::time::timeout(endpoint.timeout, exchange)
            .await
            .map_err(|_| timed_out(endpoint, false))?
    }

    /// One attempt of a streamed call: the endpoint's timeout until the answer
    /// starts, then between two pieces of it.
    async fn streamed(
        &self,
        url: &Url,
        endpoint: &Endpoint,
        body: &Value,
        on_delta: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ChatReply, Failure> {
        let head = async {
            let response = self.send(url, endpoint, body, true).await?;
            check_status(response).await
        };
        let mut response = tokio::time::timeout(endpoint.timeout, head)
            .await
            .map_err(|_| timed_out(endpoint, false))??;
        if is_event_stream(response.headers()) {
            return read_events(&mut response, endpoint, on_delta).await;
        }
        // A server that ignores `stream` answers in one piece: take it as it is.
        let (bytes, complete) =
            tokio::time::timeout(endpoint.timeout, read_up_to(&mut response, MAX_BODY_BYTES))
                .await
                .map_err(|_| timed_out(endpoint, true))?
                .map_err(transport)
                .map_err(|error| Failure {
                    started: true,
                    ..Failure::from(error)
                })?;
        if !complete {
            return Err(too_big().into());
        }
        let reply = parse_reply(&bytes)?;
        if let Some(text) = reply.content.as_deref().filter(|t| !t.is_empty()) {
            on_delta(text);
        }
        Ok(reply)
    }

    async fn send(
        &self,
        url: &Url,
        endpoint: &Endpoint,
        body: &Value,
        stream: bool,
    ) -> Result<reqwest::Response, Failure> {
        let accept = if stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut builder = self
            .http
            .post(url.clone())
            .header(ACCEPT, accept)
            .json(body);
        if let Some(key) = &endpoint.api_key {
            builder = builder.bearer_auth(key);
        }
        builder.send().await.map_err(|e| transport(e).into())
    }
}

/// The wait before the attempt after `attempt`, or `None`: the failure is final.
fn wait_before_retry(failure: &Failure, attempt: u32, endpoint: &Endpoint) -> Option<Duration> {
    if failure.started || !failure.error.retryable() || attempt > endpoint.max_retries {
        return None;
    }
    match failure.retry_after {
        Some(wait) if wait > endpoint.max_retry_wait => None,
        Some(wait) => Some(wait),
        None => Some(backoff(attempt - 1).min(endpoint.max_retry_wait)),
    }
}

/// The wait before retry number `retry + 1` when the server named none: 250 ms,
/// doubling, at most 8 s.
fn backoff(retry: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(2u32.saturating_pow(retry))
        .min(MAX_BACKOFF)
}

/// The response if its status is a success; otherwise the failure it means, with
/// the server's message.
async fn check_status(mut response: reqwest::Response) -> Result<reqwest::Response, Failure> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let retry_after = response
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, Utc::now()));
    // Only the message is wanted; a body that breaks off still has its start.
    let body = read_up_to(&mut response, MAX_ERROR_BODY_BYTES)
        .await
        .map(|(bytes, _)| bytes)
        .unwrap_or_default();
    let message = server_message(&body, status.canonical_reason().unwrap_or("no message"));
    let status = status.as_u16();
    let error = match status {
        429 => ModelError::RateLimited {
            retry_after,
            message,
        },
        500..=599 => ModelError::Server { status, message },
        _ => ModelError::Refused { status, message },
    };
    Err(Failure {
        error,
        retry_after,
        started: false,
    })
}

/// A `Retry-After` value: delta-seconds or an HTTP date (a date past is no wait).
fn parse_retry_after(value: &str, now: DateTime<Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    // IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) is an RFC 2822 date.
    let at = DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (at.with_timezone(&Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// The body up to `cap` bytes, and whether that was all of it.
async fn read_up_to(
    response: &mut reqwest::Response,
    cap: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let announced = response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if announced.is_some_and(|n| n > cap as u64) {
        return Ok((Vec::new(), false));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = cap - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, false));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, true))
}

/// Read a `text/event-stream` reply to its end, passing text on as it comes.
async fn read_events(
    response: &mut reqwest::Response,
    endpoint: &Endpoint,
    on_delta: &mut (dyn FnMut(&str) + Send),
) -> Result<ChatReply, Failure> {
    let mut assembler = stream::Assembler::default();
    let mut started = false;
    loop {
        let chunk = match tokio::time::timeout(endpoint.timeout, response.chunk()).await {
            Err(_) => return Err(timed_out(endpoint, started)),
            Ok(Err(e)) => {
                return Err(Failure {
                    started,
                    ..transport(e).into()
                });
            }
            Ok(Ok(None)) => break,
            Ok(Ok(Some(chunk))) => chunk,
        };
        started = true;
        if assembler.push(&chunk, on_delta)? {
            break;
        }
    }
    Ok(assembler.finish(on_delta)?)
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

fn timed_out(endpoint: &Endpoint, started: bool) -> Failure {
    Failure {
        started,
        ..ModelError::Timeout {
            after: endpoint.timeout,
        }
        .into()
    }
}

fn too_big() -> ModelError {
    ModelError::malformed(format!(
        "the reply is larger than {} MiB",
        MAX_BODY_BYTES / 1024 / 1024
    ))
}

/// A failure to exchange anything: no connection, a broken one.
fn transport(e: reqwest::Error) -> ModelError {
    let e = e.without_url();
    if e.is_builder() {
        return ModelError::Setup {
            message: error_chain(&e),
        };
    }
    let what = if e.is_connect() {
        "could not connect"
    } else {
        "the connection failed"
    };
    ModelError::Transport {
        message: format!("{what}: {}", error_chain(&e)),
    }
}

/// What an error body says: OpenAI's `{"error": {"message": ...}}`, else the text
/// itself, else `fallback`; clipped.
fn server_message(body: &[u8], fallback: &str) -> String {
    let parsed = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").map(error_message));
    let text = match parsed {
        Some(message) => message,
        None => String::from_utf8_lossy(body).trim().to_string(),
    };
    if text.is_empty() {
        return fallback.to_string();
    }
    clip(&text, MESSAGE_BYTES)
}

/// The message of an OpenAI `error` value (an object with `message`, or a string).
fn error_message(error: &Value) -> String {
    match error {
        Value::String(text) => text.clone(),
        Value::Object(o) => match o.get("message").and_then(Value::as_str) {
            Some(text) => text.to_string(),
            None => error.to_string(),
        },
        other => other.to_string(),
    }
}

// ---------------------------------------------------------------- the wire format

/// The request as the Chat Completions API takes it.
fn request_body(request: &ChatRequest, stream: bool) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let messages = request.messages.iter().map(wire_message).collect();
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(wire_tool).collect();
        body.insert("tools".into(), Value::Array(tools));
        // Said either way: OpenAI takes a missing `tool_choice` for "auto", but
        // llama.cpp's Python server takes it for "none" and never offers the tools.
        let choice = if request.tool_choice_none {
            "none"
        } else {
            "auto"
        };
        body.insert("tool_choice".into(), json!(choice));
    }
    if let Some(max_tokens) = request.max_tokens {
        body.insert("max_tokens".into(), json!(max_tokens));
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({ "include_usage": true }));
    }
    Value::Object(body)
}

fn wire_message(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({ "role": "system", "content": content }),
        Message::User { content } => json!({ "role": "user", "content": content }),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let mut m = Map::new();
            m.insert("role".into(), json!("assistant"));
            // "" rather than null beside tool calls: OpenAI takes both, llama.cpp's
            // Python server refuses null (and a missing content) with a 500.
            m.insert("content".into(), json!(content.clone().unwrap_or_default()));
            // Some servers refuse an empty list.
            if !tool_calls.is_empty() {
                let calls = tool_calls.iter().map(wire_tool_call).collect();
                m.insert("tool_calls".into(), Value::Array(calls));
            }
            Value::Object(m)
        }
        Message::Tool {
            tool_call_id,
            content,
        } => json!({ "role": "tool", "tool_call_id": tool_call_id, "content": content }),
    }
}

fn wire_tool_call(call: &ToolCall) -> Value {
    json!({
        "id": call.id,
        "type": "function",
        "function": { "name": call.name, "arguments": call.arguments },
    })
}

fn wire_tool(tool: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    })
}

/// A whole (not streamed) reply.
#[derive(Deserialize)]
struct WireReply {
    model: Option<String>,
    choices: Option<Vec<WireChoice>>,
    usage: Option<Usage>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: Option<WireMessage>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireMessage {
    content: Option<Value>,
    tool_calls: Option<Vec<WireToolCall>>,
}

#[derive(Deserialize)]
struct WireToolCall {
    id: Option<String>,
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// A whole reply: the first choice, its tool calls, the usage.
fn parse_reply(body: &[u8]) -> Result<ChatReply, ModelError> {
    let reply: WireReply = serde_json::from_slice(body).map_err(|e| {
        ModelError::malformed(format!(
            "the reply is not a chat completion ({e}): {}",
            clip(String::from_utf8_lossy(body).trim(), 200)
        ))
    })?;
    let Some(choice) = reply.choices.and_then(|c| c.into_iter().next()) else {
        let why = match &reply.error {
            Some(error) => clip(&error_message(error), MESSAGE_BYTES),
            None => "the reply has no choices".to_string(),
        };
        return Err(ModelError::malformed(why));
    };
    let (content, calls) = match choice.message {
        Some(m) => (m.content, m.tool_calls.unwrap_or_default()),
        None => (None, Vec::new()),
    };
    let tool_calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, call)| ToolCall {
            id: call.id.unwrap_or_else(|| format!("call_{i}")),
            name: call.function.name,
            arguments: arguments_text(call.function.arguments),
        })
        .collect();
    Ok(ChatReply {
        content: content.and_then(content_text),
        tool_calls,
        finish_reason: choice.finish_reason,
        usage: reply.usage.unwrap_or_default(),
        model: reply.model.unwrap_or_default(),
    })
}

/// A message's content: a string, or (from some servers) a list of text parts.
fn content_text(content: Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect(),
        ),
        _ => None,
    }
}

/// Arguments as text: the string the model wrote (some servers send an object).
fn arguments_text(arguments: Value) -> String {
    match arguments {
        Value::String(text) => text,
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
