//! A scripted OpenAI-compatible model for a test: an axum server on 127.0.0.1:0
//! answering `POST /v1/chat/completions` with the replies the test queued, in order.
//!
//! A text or tool-call reply is sent the way the API sends it: a whole chat
//! completion, or, when the request asks for `"stream": true`, server-sent events
//! (the text in several pieces, each tool call's arguments in several fragments, a
//! last chunk with the usage, `data: [DONE]`), a few milliseconds apart so they
//! arrive as separate pieces. Token counts are deterministic ([`prompt_tokens`],
//! [`completion_tokens`]); tool calls get ids `call_1`, `call_2`... in the order the
//! server made them. Every request body is recorded, and with [`ScriptedServer::
//! with_api_key`] a request without that bearer token gets OpenAI's 401.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awl::models::Endpoint;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};

/// One reply of the script.
#[derive(Debug, Clone)]
pub enum Scripted {
    /// The assistant says this (`finish_reason: stop`).
    Text(String),
    /// The assistant calls these tools: `(name, arguments as JSON text)`.
    ToolCalls(Vec<(String, String)>),
    /// This status, `Retry-After` and body (as JSON), whatever was asked.
    Status {
        status: u16,
        retry_after: Option<String>,
        body: String,
    },
    /// No answer for this long (then a text reply nobody should be waiting for).
    Hang(Duration),
    /// A `text/event-stream` body exactly as given (a broken stream).
    Sse(String),
}

impl Scripted {
    pub fn text(text: &str) -> Self {
        Self::Text(text.to_string())
    }

    pub fn tool_calls(calls: &[(&str, &str)]) -> Self {
        Self::ToolCalls(
            calls
                .iter()
                .map(|(name, arguments)| (name.to_string(), arguments.to_string()))
                .collect(),
        )
    }

    /// `status` with an OpenAI error body saying `message`.
    pub fn error(status: u16, retry_after: Option<&str>, message: &str) -> Self {
        Self::Status {
            status,
            retry_after: retry_after.map(str::to_string),
            body: error_body(message, "server_error").to_string(),
        }
    }
}

#[derive(Default)]
struct Script {
    queue: VecDeque<Scripted>,
    /// Given when the queue is empty.
    always: Option<Scripted>,
    requests: Vec<Value>,
    api_key: Option<String>,
    calls_made: u64,
}

type Shared = Arc<Mutex<Script>>;

/// The running server; it stops when dropped.
pub struct ScriptedServer {
    base_url: String,
    script: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedServer {
    /// A server that gives `replies` in order, then answers 500.
    pub async fn start(replies: impl IntoIterator<Item = Scripted>) -> Self {
        let script = Script {
            queue: replies.into_iter().collect(),
            ..Script::default()
        };
        Self::serve(script).await
    }

    /// A server that gives `reply` to every request (after any pushed ones): a model
    /// that never stops calling tools, say.
    pub async fn always(reply: Scripted) -> Self {
        let script = Script {
            always: Some(reply),
            ..Script::default()
        };
        Self::serve(script).await
    }

    async fn serve(script: Script) -> Self {
        let script: Shared = Arc::new(Mutex::new(script));
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app.into_make_service()).await;
        });
        Self {
            base_url: format!("http://{addr}/v1"),
            script,
            task,
        }
    }

    /// Refuse requests without `Authorization: Bearer {key}`.
    pub fn with_api_key(self, key: &str) -> Self {
        self.lock().api_key = Some(key.to_string());
        self
    }

    /// Queue one more reply.
    pub fn push(&self, reply: Scripted) {
        self.lock().queue.push_back(reply);
    }

    /// `http://127.0.0.1:PORT/v1`
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// An endpoint for this server, with its API key if it wants one.
    pub fn endpoint(&self) -> Endpoint {
        let mut endpoint = Endpoint::new(self.base_url.clone());
        endpoint.api_key = self.lock().api_key.clone();
        endpoint
    }

    /// Every request body received, in order (`null` for one that was not JSON).
    pub fn requests(&self) -> Vec<Value> {
        self.lock().requests.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().expect("the script")
    }
}

/// The prompt's tokens as the server counts them: the bytes of every message's
/// `content`, / 4, + 1.
pub fn prompt_tokens(request: &Value) -> u64 {
    let bytes: usize = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .map(str::len)
        .sum();
    bytes as u64 / 4 + 1
}

/// The reply's tokens as the server counts them: its bytes (the text, or every
/// tool call's name and arguments), / 4, + 1.
pub fn completion_tokens(reply: &str) -> u64 {
    reply.len() as u64 / 4 + 1
}

/// What one request is answered with, decided under the lock.
enum Answer {
    Reply(Scripted, Value, u64),
    Refuse(Response),
}

async fn chat(State(script): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let answer = decide(&script, &headers, &body);
    let (reply, request, first_call) = match answer {
        Answer::Refuse(response) => return response,
        Answer::Reply(reply, request, first_call) => (reply, request, first_call),
    };
    match reply {
        Scripted::Hang(duration) => {
            tokio::time::sleep(duration).await;
            completion(&request, Some("too late"), &[]).into_response()
        }
        Scripted::Status {
            status,
            retry_after,
            body,
        } => status_response(status, retry_after, body),
        Scripted::Sse(body) => event_stream(vec![body]),
        Scripted::Text(text) => answer_with(&request, Some(&text), &[]),
        Scripted::ToolCalls(calls) => {
            let calls: Vec<(String, String, String)> = (first_call..)
                .zip(calls)
                .map(|(n, (name, arguments))| (format!("call_{n}"), name, arguments))
                .collect();
            answer_with(&request, None, &calls)
        }
    }
}

/// Record the request, check the key, take the next reply.
fn decide(script: &Shared, headers: &HeaderMap, body: &[u8]) -> Answer {
    let request = serde_json::from_slice::<Value>(body).ok();
    let mut s = script.lock().expect("the script");
    s.requests.push(request.clone().unwrap_or(Value::Null));
    if let Some(key) = &s.api_key {
        let expected = format!("Bearer {key}");
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        if given != Some(expected.as_str()) {
            let body = error_body("Incorrect API key provided.", "invalid_request_error");
            return Answer::Refuse((StatusCode::UNAUTHORIZED, axum::Json(body)).into_response());
        }
    }
    let Some(request) = request else {
        let body = error_body("The body is not JSON.", "invalid_request_error");
        return Answer::Refuse((StatusCode::BAD_REQUEST, axum::Json(body)).into_response());
    };
    let Some(reply) = s.queue.pop_front().or_else(|| s.always.clone()) else {
        let body = error_body("The script has no reply left.", "server_error");
        return Answer::Refuse(
            (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(body)).into_response(),
        );
    };
    let first_call = s.calls_made + 1;
    if let Scripted::ToolCalls(calls) = &reply {
        s.calls_made += calls.len() as u64;
    }
    Answer::Reply(reply, request, first_call)
}

fn error_body(message: &str, kind: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}

fn status_response(status: u16, retry_after: Option<String>, body: String) -> Response {
    let status = StatusCode::from_u16(status).expect("a status code");
    let mut response = (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    if let Some(value) = retry_after {
        let value = value.parse().expect("a header value");
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// A reply as the request asked for it: whole, or streamed.
fn answer_with(
    request: &Value,
    text: Option<&str>,
    calls: &[(String, String, String)],
) -> Response {
    if request["stream"] == json!(true) {
        event_stream(stream_events(request, text, calls))
    } else {
        completion(request, text, calls).into_response()
    }
}

fn usage(request: &Value, text: Option<&str>, calls: &[(String, String, String)]) -> Value {
    let reply: String = match text {
        Some(text) => text.to_string(),
        None => calls
            .iter()
            .map(|(_, name, args)| format!("{name}{args}"))
            .collect(),
    };
    let prompt = prompt_tokens(request);
    let completion = completion_tokens(&reply);
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

fn completion(
    request: &Value,
    text: Option<&str>,
    calls: &[(String, String, String)],
) -> axum::Json<Value> {
    let mut message = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|(id, name, arguments)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
            })
            .collect();
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    axum::Json(json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": request["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage(request, text, calls),
    }))
}

/// The events of a streamed reply, each `data: ...\n\n`.
fn stream_events(
    request: &Value,
    text: Option<&str>,
    calls: &[(String, String, String)],
) -> Vec<String> {
    let chunk = |choices: Value| {
        json!({"id": "chatcmpl-scripted", "object": "chat.completion.chunk", "created": 0,
               "model": request["model"], "choices": choices})
    };
    let delta = |delta: Value| chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}]));
    let mut chunks = vec![delta(
        json!({"role": "assistant", "content": text.map(|_| "")}),
    )];
    for piece in pieces(text.unwrap_or_default(), 3) {
        chunks.push(delta(json!({"content": piece})));
    }
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        chunks.push(delta(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]}),
        ));
        for piece in pieces(arguments, 3) {
            chunks.push(delta(json!({"tool_calls": [{"index": index,
                "function": {"arguments": piece}}]})));
        }
    }
    let finish = if calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    chunks.push(chunk(
        json!([{"index": 0, "delta": {}, "finish_reason": finish}]),
    ));
    let mut last = chunk(json!([]));
    last["usage"] = usage(request, text, calls);
    chunks.push(last);
    let mut events: Vec<String> = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    events.push("data: [DONE]\n\n".to_string());
    events
}

/// `text` in `n` pieces or fewer, cut between characters.
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// A `text/event-stream` response sending `events` a few milliseconds apart.
fn event_stream(events: Vec<String>) -> Response {
    let stream = futures_util::stream::unfold(events.into_iter(), |mut events| async move {
        let event = events.next()?;
        tokio::time::sleep(Duration::from_millis(5)).await;
        Some((Ok::<_, Infallible>(event), events))
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(stream),
    )
        .into_response()
}
