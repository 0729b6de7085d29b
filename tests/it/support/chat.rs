//! A local stand-in for the parts of the Slack and Discord APIs awl uses, for tests
//! that may not reach the internet: an axum server on 127.0.0.1:0 serving both on one
//! port, with the request and response shapes of the public documentation, the
//! platforms' error shapes and their 429s, every request recorded.
//!
//! Slack (under [`ChatServer::slack_api_base`]): `auth.test`, `chat.postMessage`,
//! `chat.update`, `chat.postEphemeral`, `views.open`, with a bearer token (or a
//! `token` form field), JSON or form bodies, and errors as HTTP 200 `{"ok": false,
//! "error": ...}`; an incoming webhook ([`ChatServer::slack_webhook_url`]) answering
//! `ok` in plain text; response URLs ([`ChatServer::slack_response_url`]) that
//! replace, delete or add to a message.
//!
//! Discord (under [`ChatServer::discord_api_base`], API v10): Create and Edit
//! Message with `Authorization: Bot TOKEN`, Execute Webhook (`?wait=true` or 204),
//! Edit Webhook Message (also `@original` for an interaction token, with the
//! application id [`DISCORD_APPLICATION_ID`]), Create Interaction Response, errors
//! as `{"message": ..., "code": ...}` with Discord's JSON error codes.
//!
//! [`ChatServer::rate_limit_next`] makes the next requests to a platform answer 429
//! the way that platform does. [`ChatServer::messages`] shows every message with its
//! earlier versions; [`ChatServer::requests`] every request with the status it got
//! and when it came.
//!
//! For requests *from* the platforms to awl: [`slack_signature`] and [`DiscordKey`]
//! sign bodies as Slack and Discord do, and the `slack_*` / `discord_*` builders
//! make the documented payloads (block actions, view submissions, slash commands,
//! Events API callbacks; Discord pings, component, modal and command interactions).

// The stand-in is written for awl's chat integration tests; not every helper has a
// caller yet.
#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use ring::signature::{ED25519, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde_json::{Map, Value, json};

/// The bot token the Slack stand-in accepts (`Authorization: Bearer ...`).
pub const SLACK_BOT_TOKEN: &str = "xoxb-0000000000-0000000000000-awlstandinslacktoken";
/// The workspace the Slack stand-in is.
pub const SLACK_TEAM_ID: &str = "T0AWL";
/// The Slack app's id (`api_app_id` in payloads).
pub const SLACK_APP_ID: &str = "A0AWL";
/// The bot user's id (the `user` of the messages the bot posts).
pub const SLACK_BOT_USER_ID: &str = "U0AWLBOT";
/// The bot's id (`bot_id`).
pub const SLACK_BOT_ID: &str = "B0AWL";
/// The deprecated verification token Slack still puts in payloads (`token`).
pub const SLACK_VERIFICATION_TOKEN: &str = "awlVerificationToken0000";
/// The channels the Slack stand-in knows from the start.
pub const SLACK_CHANNELS: [&str; 2] = ["C0AWL0001", "C0AWL0002"];
/// The channel incoming-webhook messages are stored in.
pub const SLACK_WEBHOOK_CHANNEL: &str = "webhook";
/// The path of the one incoming webhook, after `/slack/hooks/`.
pub const SLACK_WEBHOOK_PATH: &str = "T0AWL/B0AWL/XXXXXXXX";

/// The bot token the Discord stand-in accepts (`Authorization: Bot ...`).
pub const DISCORD_BOT_TOKEN: &str = "MzAwMDAwMDAwMDAwMDAwMDAx.AwlStd.awl-standin-discord-bot-token";
/// The application id (also the bot user's id, as for applications made since 2021).
pub const DISCORD_APPLICATION_ID: &str = "400000000000000001";
/// The bot user's id (the author of what the bot posts).
pub const DISCORD_BOT_USER_ID: &str = "400000000000000001";
/// The channels the Discord stand-in knows from the start.
pub const DISCORD_CHANNELS: [&str; 2] = ["100000000000000001", "100000000000000002"];
/// The one channel webhook: its id, its token, and the channel it posts in.
pub const DISCORD_WEBHOOK_ID: &str = "200000000000000001";
pub const DISCORD_WEBHOOK_TOKEN: &str = "hooktoken";
pub const DISCORD_WEBHOOK_CHANNEL: &str = "100000000000000001";
/// The channel of messages answering an interaction that was not registered
/// ([`ChatServer::register_interaction`]), whose channel the stand-in cannot know.
pub const DISCORD_UNKNOWN_INTERACTION_CHANNEL: &str = "interaction";

/// Discord's message flags: `EPHEMERAL` and `LOADING` (a deferred response).
const EPHEMERAL: u64 = 1 << 6;
const LOADING: u64 = 1 << 7;

/// Which API a request went to, or a message lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Platform {
    Slack,
    Discord,
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub platform: Platform,
    /// `POST`, `PATCH`...
    pub method: String,
    /// The whole path: `/slack/api/chat.postMessage`, `/discord/api/v10/channels/1/messages`.
    pub path: String,
    /// The path after the platform's base: `chat.postMessage`, `/channels/1/messages`,
    /// `hooks/T0AWL/B0AWL/XXXXXXXX`.
    pub route: String,
    pub query: Option<String>,
    /// Every header, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body parsed: JSON as sent; a form as an object of strings (Slack's
    /// `blocks`, `view` and `attachments` fields parsed from their JSON text, and a
    /// `payload` field too); `null` when empty; a string when it could not be read.
    pub body: Value,
    /// The body as sent.
    pub raw_body: String,
    /// The HTTP status it was answered with.
    pub status: u16,
    /// When it came.
    pub at: Instant,
    /// When it came, in milliseconds since the server started.
    pub ms: u64,
}

impl ChatRequest {
    /// A header's value (`name` in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Where a message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The bot API: `chat.postMessage` / `chat.postEphemeral`, Create Message.
    Api,
    /// An incoming webhook (Slack) or Execute Webhook (Discord, the channel webhook).
    Webhook,
    /// A Discord interaction: its response, or a follow-up on its token.
    Interaction,
    /// A Slack `response_url`.
    ResponseUrl,
    /// A person's message (Discord: `user` is its author), put there by the test.
    User,
}

/// What a message said at one point.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageVersion {
    pub text: String,
    /// Slack blocks / Discord components (`null` when none were given).
    pub blocks: Value,
    /// Discord embeds (`null` when none were given; always `null` on Slack).
    pub embeds: Value,
}

/// A message as it stands now, with every earlier version.
#[derive(Debug, Clone)]
pub struct ChatMessage {
    pub platform: Platform,
    pub channel: String,
    /// Slack `ts` / Discord message id.
    pub id: String,
    /// Slack `thread_ts` / Discord `message_reference.message_id`.
    pub thread: Option<String>,
    /// Slack `text` / Discord `content`, as it is now.
    pub text: String,
    /// Slack blocks / Discord components as they are now (`null` when none).
    pub blocks: Value,
    /// Discord embeds as they are now (`null` when none; always `null` on Slack).
    pub embeds: Value,
    /// Every earlier version, oldest first (empty for a message never edited).
    pub versions: Vec<MessageVersion>,
    /// Shown to one user only (Slack `chat.postEphemeral` or a non-`in_channel`
    /// response; a Discord message with the `EPHEMERAL` flag).
    pub ephemeral: bool,
    /// The user an ephemeral message is for, when known.
    pub user: Option<String>,
    pub source: Source,
    /// Removed (`delete_original` on a Slack response URL).
    pub deleted: bool,
    /// Discord's message flags.
    pub flags: u64,
    /// The Discord webhook (or application, for an interaction) that posted it.
    pub webhook_id: Option<String>,
    /// ISO 8601, when it was posted and last edited.
    pub timestamp: String,
    pub edited_timestamp: Option<String>,
}

impl ChatMessage {
    /// The message as it is now, as a version.
    pub fn current(&self) -> MessageVersion {
        MessageVersion {
            text: self.text.clone(),
            blocks: self.blocks.clone(),
            embeds: self.embeds.clone(),
        }
    }
}

/// A modal opened: Slack `views.open`, or a Discord `MODAL` interaction response.
#[derive(Debug, Clone)]
pub struct ChatView {
    pub platform: Platform,
    /// The view id answered (Slack), or the modal's `custom_id` (Discord).
    pub id: String,
    /// The Slack `trigger_id`, or the Discord interaction token.
    pub trigger: String,
    /// The view (Slack) or the response's `data` (Discord), as sent.
    pub view: Value,
}

/// A Discord interaction response (`POST /interactions/{id}/{token}/callback`).
#[derive(Debug, Clone)]
pub struct InteractionCallback {
    pub interaction_id: String,
    pub token: String,
    /// The response type: 1 pong, 4 message, 5 deferred message, 6 deferred update,
    /// 7 update, 9 modal...
    pub kind: u64,
    pub data: Value,
    /// The whole body as sent.
    pub body: Value,
}

#[derive(Debug, Clone)]
struct Interaction {
    id: String,
    channel: Option<String>,
    /// The message whose component was used (type 3 interactions).
    message: Option<String>,
    /// The message `@original` names, once there is one.
    original: Option<String>,
    acknowledged: bool,
}

struct Chat {
    started: Instant,
    requests: Vec<ChatRequest>,
    messages: Vec<ChatMessage>,
    views: Vec<ChatView>,
    callbacks: Vec<InteractionCallback>,
    slack_channels: BTreeSet<String>,
    discord_channels: BTreeSet<String>,
    /// Requests still to refuse with a 429, and the wait to ask for.
    limits: HashMap<Platform, (u32, Duration)>,
    /// By interaction token.
    interactions: HashMap<String, Interaction>,
    /// Response URL id → (channel, ts).
    response_urls: HashMap<String, (String, String)>,
    counter: u64,
}

impl Chat {
    fn new() -> Self {
        Self {
            started: Instant::now(),
            requests: Vec::new(),
            messages: Vec::new(),
            views: Vec::new(),
            callbacks: Vec::new(),
            slack_channels: SLACK_CHANNELS.iter().map(|c| c.to_string()).collect(),
            discord_channels: DISCORD_CHANNELS.iter().map(|c| c.to_string()).collect(),
            limits: HashMap::new(),
            interactions: HashMap::new(),
            response_urls: HashMap::new(),
            counter: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.counter += 1;
        self.counter
    }

    /// A Slack `ts`: `1700000000.000100`, `1700000000.000200`... unique and increasing.
    fn next_ts(&mut self) -> String {
        let n = self.next();
        format!("{}.{:06}", 1_700_000_000 + n / 10_000, (n % 10_000) * 100)
    }

    /// A Discord snowflake, unique and increasing (and as long as real ones).
    fn next_snowflake(&mut self) -> String {
        (1_300_000_000_000_000_000u64 + self.next()).to_string()
    }

    fn find(&self, platform: Platform, channel: &str, id: &str) -> Option<usize> {
        self.messages.iter().position(|m| {
            m.platform == platform && m.channel == channel && m.id == id && !m.deleted
        })
    }

    fn find_id(&self, platform: Platform, id: &str) -> Option<usize> {
        self.messages
            .iter()
            .position(|m| m.platform == platform && m.id == id && !m.deleted)
    }

    /// One more refusal to give, if any are left.
    fn take_limit(&mut self, platform: Platform) -> Option<Duration> {
        let (left, wait) = self.limits.get_mut(&platform)?;
        if *left == 0 {
            return None;
        }
        *left -= 1;
        Some(*wait)
    }
}

type Shared = Arc<Mutex<Chat>>;

/// The running server; it stops when dropped.
pub struct ChatServer {
    base_url: String,
    chat: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChatServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ChatServer {
    /// Serve both APIs on a free port of 127.0.0.1, in the calling runtime.
    pub async fn start() -> Self {
        let chat: Shared = Arc::new(Mutex::new(Chat::new()));
        let app = Router::new()
            .route("/slack/{*rest}", any(slack))
            .route("/discord/{*rest}", any(discord))
            .with_state(chat.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app.into_make_service()).await;
        });
        Self {
            base_url: format!("http://{addr}"),
            chat,
            task,
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `http://127.0.0.1:PORT/slack/api`: methods are `POST {base}/chat.postMessage`...
    pub fn slack_api_base(&self) -> String {
        format!("{}/slack/api", self.base_url)
    }

    /// `http://127.0.0.1:PORT/slack/hooks/T0AWL/B0AWL/XXXXXXXX`
    pub fn slack_webhook_url(&self) -> String {
        format!("{}/slack/hooks/{SLACK_WEBHOOK_PATH}", self.base_url)
    }

    /// A new response URL for the message `ts` of `channel`, to put in a block
    /// action or slash command payload: a POST to it with `replace_original: true`
    /// edits that message, with `delete_original: true` deletes it, otherwise posts a
    /// new message in the channel (ephemeral unless `response_type: in_channel`).
    pub fn slack_response_url(&self, channel: &str, ts: &str) -> String {
        let mut chat = self.lock();
        let id = chat.next();
        chat.response_urls
            .insert(id.to_string(), (channel.to_string(), ts.to_string()));
        format!(
            "{}/slack/actions/{SLACK_TEAM_ID}/{id}/awlresponse",
            self.base_url
        )
    }

    /// `http://127.0.0.1:PORT/discord/api/v10`
    pub fn discord_api_base(&self) -> String {
        format!("{}/discord/api/v10", self.base_url)
    }

    /// `{discord_api_base}/webhooks/200000000000000001/hooktoken`
    pub fn discord_webhook_url(&self) -> String {
        format!(
            "{}/webhooks/{DISCORD_WEBHOOK_ID}/{DISCORD_WEBHOOK_TOKEN}",
            self.discord_api_base()
        )
    }

    /// Make `channel` a Slack channel the bot can post in.
    pub fn add_slack_channel(&self, channel: &str) {
        self.lock().slack_channels.insert(channel.to_string());
    }

    /// Make `channel` a Discord channel the bot can post in.
    pub fn add_discord_channel(&self, channel: &str) {
        self.lock().discord_channels.insert(channel.to_string());
    }

    /// Tell the server about an interaction the test sends awl (say from
    /// [`discord_component`]): its channel, and the message whose component was used,
    /// so that an `UPDATE_MESSAGE` response edits that message and a response or
    /// follow-up lands in that channel. An interaction not registered is still
    /// answered, its messages stored in the channel
    /// [`DISCORD_UNKNOWN_INTERACTION_CHANNEL`].
    pub fn register_interaction(
        &self,
        interaction_id: &str,
        token: &str,
        channel_id: &str,
        message_id: Option<&str>,
    ) {
        self.lock().interactions.insert(
            token.to_string(),
            Interaction {
                id: interaction_id.to_string(),
                channel: Some(channel_id.to_string()),
                message: message_id.map(str::to_string),
                original: None,
                acknowledged: false,
            },
        );
    }

    /// Answer the next `n` requests to `platform` with that platform's 429, asking
    /// the client to wait `retry_after` (Slack: `Retry-After` in whole seconds,
    /// rounded up; Discord: `retry_after` in the body in seconds with milliseconds,
    /// `Retry-After` rounded up).
    pub fn rate_limit_next(&self, platform: Platform, n: u32, retry_after: Duration) {
        self.lock().limits.insert(platform, (n, retry_after));
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<ChatRequest> {
        self.lock().requests.clone()
    }

    /// Every request to `platform`, in order.
    pub fn requests_to(&self, platform: Platform) -> Vec<ChatRequest> {
        let chat = self.lock();
        let requests = chat.requests.iter().filter(|r| r.platform == platform);
        requests.cloned().collect()
    }

    /// For each 429 given to `platform` that was followed by another request to it,
    /// how long the client waited before that next request.
    pub fn waits_after_rate_limit(&self, platform: Platform) -> Vec<Duration> {
        let requests = self.requests_to(platform);
        requests
            .windows(2)
            .filter(|pair| pair[0].status == 429)
            .map(|pair| pair[1].at.duration_since(pair[0].at))
            .collect()
    }

    /// Every message, in the order they were posted, as they stand now.
    pub fn messages(&self) -> Vec<ChatMessage> {
        self.lock().messages.clone()
    }

    /// The message with this Slack `ts` or Discord id.
    pub fn message(&self, platform: Platform, id: &str) -> Option<ChatMessage> {
        let chat = self.lock();
        let mut found = chat.messages.iter().filter(|m| m.platform == platform);
        found.find(|m| m.id == id).cloned()
    }

    /// Every modal opened, in order.
    /// A person `user_id` posts `content` in Discord channel `channel`, as a reply to
    /// message `reply_to` (what awl reads back with Get Channel Messages); its id.
    pub fn discord_user_reply(
        &self,
        channel: &str,
        user_id: &str,
        content: &str,
        reply_to: &str,
    ) -> String {
        let mut chat = self.lock();
        let id = chat.next_snowflake();
        chat.messages.push(ChatMessage {
            platform: Platform::Discord,
            channel: channel.to_string(),
            id: id.clone(),
            thread: Some(reply_to.to_string()),
            text: content.to_string(),
            blocks: Value::Null,
            embeds: Value::Null,
            versions: Vec::new(),
            ephemeral: false,
            user: Some(user_id.to_string()),
            source: Source::User,
            deleted: false,
            flags: 0,
            webhook_id: None,
            timestamp: now_iso(),
            edited_timestamp: None,
        });
        id
    }

    pub fn views(&self) -> Vec<ChatView> {
        self.lock().views.clone()
    }

    /// Every Discord interaction response, in order.
    pub fn interaction_callbacks(&self) -> Vec<InteractionCallback> {
        self.lock().callbacks.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Chat> {
        self.chat.lock().expect("the chat stand-in")
    }
}

// ---------------------------------------------------------------------------------
// Answers

enum Payload {
    Json(Value),
    Text(String),
    Empty,
}

/// An answer, made under the lock and recorded before it is sent.
struct Reply {
    status: StatusCode,
    headers: Vec<(&'static str, String)>,
    payload: Payload,
}

impl Reply {
    fn json(status: StatusCode, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            payload: Payload::Json(body),
        }
    }

    fn text(status: StatusCode, body: &str) -> Self {
        Self {
            status,
            headers: Vec::new(),
            payload: Payload::Text(body.to_string()),
        }
    }

    fn empty(status: StatusCode) -> Self {
        Self {
            status,
            headers: Vec::new(),
            payload: Payload::Empty,
        }
    }

    fn with(mut self, name: &'static str, value: impl ToString) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    /// Slack's answer: HTTP 200 whatever happened.
    fn slack(body: Value) -> Self {
        Self::json(StatusCode::OK, body)
    }

    fn slack_error(error: &str) -> Self {
        Self::slack(json!({"ok": false, "error": error}))
    }

    /// Discord's JSON error: `{"message": ..., "code": ...}`.
    fn discord_error(status: StatusCode, message: &str, code: u64) -> Self {
        Self::json(status, json!({"message": message, "code": code}))
    }

    fn into_response(self, platform: Platform) -> Response {
        let mut response = match self.payload {
            Payload::Json(body) => {
                let content_type = match platform {
                    Platform::Slack => "application/json; charset=utf-8",
                    Platform::Discord => "application/json",
                };
                (
                    self.status,
                    [(header::CONTENT_TYPE, content_type)],
                    body.to_string(),
                )
                    .into_response()
            }
            Payload::Text(body) => (
                self.status,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                body,
            )
                .into_response(),
            Payload::Empty => self.status.into_response(),
        };
        for (name, value) in self.headers {
            let value = HeaderValue::from_str(&value).expect("a header value");
            response.headers_mut().insert(name, value);
        }
        response
    }
}

/// What the handlers see of a request.
struct Incoming {
    method: Method,
    route: String,
    query: Option<String>,
    headers: HeaderMap,
    content_type: String,
    raw: String,
}

impl Incoming {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

async fn slack(
    State(chat): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&chat, Platform::Slack, method, uri, headers, body)
}

async fn discord(
    State(chat): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&chat, Platform::Discord, method, uri, headers, body)
}

fn handle(
    chat: &Shared,
    platform: Platform,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let prefix = match platform {
        Platform::Slack => "/slack/",
        Platform::Discord => "/discord/api/v10",
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let incoming = Incoming {
        method,
        route: path.strip_prefix(prefix).unwrap_or(&path).to_string(),
        query: uri.query().map(str::to_string),
        headers,
        content_type,
        raw: String::from_utf8_lossy(&body).into_owned(),
    };
    let mut chat = chat.lock().expect("the chat stand-in");
    let at = Instant::now();
    let (reply, parsed) = match chat.take_limit(platform) {
        Some(wait) => (
            rate_limited(platform, wait),
            recorded_body(platform, &incoming),
        ),
        None => match platform {
            Platform::Slack => slack_route(&mut chat, &incoming),
            Platform::Discord => discord_route(&mut chat, &incoming),
        },
    };
    let request = ChatRequest {
        platform,
        method: incoming.method.to_string(),
        path,
        route: incoming.route.clone(),
        query: incoming.query.clone(),
        headers: incoming
            .headers
            .iter()
            .map(|(n, v)| {
                let value = String::from_utf8_lossy(v.as_bytes()).into_owned();
                (n.as_str().to_string(), value)
            })
            .collect(),
        body: parsed,
        raw_body: incoming.raw.clone(),
        status: reply.status.as_u16(),
        at,
        ms: at.duration_since(chat.started).as_millis() as u64,
    };
    chat.requests.push(request);
    drop(chat);
    reply.into_response(platform)
}

fn rate_limited(platform: Platform, wait: Duration) -> Reply {
    let seconds = (wait.as_secs_f64() * 1000.0).round() / 1000.0;
    let whole = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    match platform {
        Platform::Slack => Reply::json(
            StatusCode::TOO_MANY_REQUESTS,
            json!({"ok": false, "error": "ratelimited"}),
        )
        .with("retry-after", whole),
        Platform::Discord => {
            let reset = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + wait;
            Reply::json(
                StatusCode::TOO_MANY_REQUESTS,
                json!({"message": "You are being rate limited.", "retry_after": seconds, "global": false}),
            )
            .with("retry-after", whole)
            .with("x-ratelimit-limit", 5)
            .with("x-ratelimit-remaining", 0)
            .with("x-ratelimit-reset", format!("{:.3}", reset.as_secs_f64()))
            .with("x-ratelimit-reset-after", format!("{seconds:.3}"))
            .with("x-ratelimit-bucket", "awlstandin")
            .with("x-ratelimit-scope", "user")
        }
    }
}

/// The body of a refused request, parsed for the record as it would have been.
fn recorded_body(platform: Platform, incoming: &Incoming) -> Value {
    match platform {
        Platform::Slack => slack_body(incoming).unwrap_or_else(|_| json!(incoming.raw)),
        Platform::Discord => discord_body(incoming).unwrap_or_else(|_| json!(incoming.raw)),
    }
}

// ---------------------------------------------------------------------------------
// Slack

/// The body as an object: JSON, or a form (also a GET's query) of strings with the
/// JSON-valued fields parsed.
fn slack_body(incoming: &Incoming) -> Result<Value, &'static str> {
    if incoming.content_type.starts_with("application/json") {
        let value: Value = serde_json::from_str(&incoming.raw).map_err(|_| "invalid_json")?;
        if !value.is_object() {
            return Err("json_not_object");
        }
        return Ok(value);
    }
    let text = if incoming.method == Method::GET {
        incoming.query.clone().unwrap_or_default()
    } else {
        incoming.raw.clone()
    };
    if text.is_empty() {
        return Ok(json!({}));
    }
    let mut fields = Map::new();
    for (name, value) in form_decode(&text) {
        let parsed = match name.as_str() {
            "blocks" | "view" | "attachments" | "payload" => {
                serde_json::from_str(&value).unwrap_or(Value::String(value))
            }
            _ => Value::String(value),
        };
        fields.insert(name, parsed);
    }
    Ok(Value::Object(fields))
}

fn slack_route(chat: &mut Chat, incoming: &Incoming) -> (Reply, Value) {
    let route = incoming.route.clone();
    if let Some(hook) = route.strip_prefix("hooks/") {
        return slack_webhook(chat, incoming, hook);
    }
    if let Some(rest) = route.strip_prefix("actions/") {
        return slack_response(chat, incoming, rest);
    }
    let Some(method) = route.strip_prefix("api/") else {
        let body = json!(incoming.raw);
        return (Reply::text(StatusCode::NOT_FOUND, "Not Found"), body);
    };
    let body = match slack_body(incoming) {
        Ok(body) => body,
        Err(error) => return (Reply::slack_error(error), json!(incoming.raw)),
    };
    let reply = slack_method(chat, incoming, method, &body);
    (reply, body)
}

fn slack_method(chat: &mut Chat, incoming: &Incoming, method: &str, body: &Value) -> Reply {
    // A bearer token, or (form bodies, GET queries) a `token` field.
    let authorization = incoming.header("authorization");
    let token = match authorization {
        Some(value) => value.strip_prefix("Bearer ").unwrap_or_default().trim(),
        None => body["token"].as_str().unwrap_or_default(),
    };
    if authorization.is_none() && token.is_empty() {
        return Reply::slack_error("not_authed");
    }
    if token != SLACK_BOT_TOKEN {
        return Reply::slack_error("invalid_auth");
    }
    match method {
        "auth.test" => Reply::slack(json!({
            "ok": true,
            "url": "https://awl-test.slack.com/",
            "team": "awl test",
            "user": "awl",
            "team_id": SLACK_TEAM_ID,
            "user_id": SLACK_BOT_USER_ID,
            "bot_id": SLACK_BOT_ID,
            "is_enterprise_install": false,
        })),
        "chat.postMessage" => slack_post(chat, body),
        "chat.update" => slack_update(chat, body),
        "chat.postEphemeral" => slack_ephemeral(chat, body),
        "views.open" => slack_views_open(chat, body),
        _ => Reply::slack_error("unknown_method"),
    }
}

/// A string field, also when sent as a number (a `ts` can be).
fn field(body: &Value, name: &str) -> Option<String> {
    match &body[name] {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Blocks as given: an array, or (a form field, or a JSON string) their JSON text.
fn slack_blocks(body: &Value) -> Result<Value, &'static str> {
    match &body["blocks"] {
        Value::Null => Ok(Value::Null),
        Value::Array(_) => Ok(body["blocks"].clone()),
        Value::String(text) => match serde_json::from_str::<Value>(text) {
            Ok(blocks @ Value::Array(_)) => Ok(blocks),
            _ => Err("invalid_blocks_format"),
        },
        _ => Err("invalid_blocks_format"),
    }
}

fn has_content(text: &Option<String>, blocks: &Value, attachments: &Value) -> bool {
    let filled = |v: &Value| v.as_array().is_some_and(|a| !a.is_empty());
    text.is_some() || filled(blocks) || filled(attachments)
}

fn slack_message_json(m: &ChatMessage) -> Value {
    let mut message = json!({
        "type": "message",
        "text": m.text,
        "user": SLACK_BOT_USER_ID,
        "bot_id": SLACK_BOT_ID,
        "app_id": SLACK_APP_ID,
        "team": SLACK_TEAM_ID,
        "ts": m.id,
        "bot_profile": {
            "id": SLACK_BOT_ID, "app_id": SLACK_APP_ID, "name": "awl", "deleted": false,
            "team_id": SLACK_TEAM_ID,
        },
    });
    if !m.blocks.is_null() {
        message["blocks"] = m.blocks.clone();
    }
    if let Some(thread) = &m.thread {
        message["thread_ts"] = json!(thread);
    }
    if let Some(edited) = &m.edited_timestamp {
        message["edited"] = json!({"user": SLACK_BOT_USER_ID, "ts": edited});
    }
    message
}

/// Check the channel and content of a post; the channel, text and blocks.
fn slack_content(
    chat: &Chat,
    body: &Value,
) -> Result<(String, Option<String>, Value), &'static str> {
    let channel = field(body, "channel").ok_or("channel_not_found")?;
    if !chat.slack_channels.contains(&channel) {
        return Err("channel_not_found");
    }
    let blocks = slack_blocks(body)?;
    let text = field(body, "text");
    if !has_content(&text, &blocks, &body["attachments"]) {
        return Err("no_text");
    }
    Ok((channel, text, blocks))
}

fn new_slack_message(
    chat: &mut Chat,
    channel: &str,
    text: Option<String>,
    blocks: Value,
    thread: Option<String>,
    source: Source,
) -> usize {
    let ts = chat.next_ts();
    chat.messages.push(ChatMessage {
        platform: Platform::Slack,
        channel: channel.to_string(),
        id: ts,
        thread,
        text: text.unwrap_or_default(),
        blocks,
        embeds: Value::Null,
        versions: Vec::new(),
        ephemeral: false,
        user: None,
        source,
        deleted: false,
        flags: 0,
        webhook_id: None,
        timestamp: now_iso(),
        edited_timestamp: None,
    });
    chat.messages.len() - 1
}

fn slack_post(chat: &mut Chat, body: &Value) -> Reply {
    let (channel, text, blocks) = match slack_content(chat, body) {
        Ok(content) => content,
        Err(error) => return Reply::slack_error(error),
    };
    let thread = field(body, "thread_ts");
    let index = new_slack_message(chat, &channel, text, blocks, thread, Source::Api);
    let message = &chat.messages[index];
    Reply::slack(json!({
        "ok": true,
        "channel": channel,
        "ts": message.id,
        "message": slack_message_json(message),
    }))
}

fn slack_update(chat: &mut Chat, body: &Value) -> Reply {
    let Some(channel) = field(body, "channel").filter(|c| chat.slack_channels.contains(c)) else {
        return Reply::slack_error("channel_not_found");
    };
    let Some(index) = field(body, "ts").and_then(|ts| chat.find(Platform::Slack, &channel, &ts))
    else {
        return Reply::slack_error("message_not_found");
    };
    if chat.messages[index].ephemeral {
        return Reply::slack_error("message_not_found");
    }
    let blocks = match slack_blocks(body) {
        Ok(blocks) => blocks,
        Err(error) => return Reply::slack_error(error),
    };
    let text = field(body, "text");
    if !has_content(&text, &blocks, &body["attachments"]) && blocks.is_null() {
        return Reply::slack_error("no_text");
    }
    let edit_ts = chat.next_ts();
    let message = &mut chat.messages[index];
    message.versions.push(message.current());
    if let Some(text) = text {
        message.text = text;
    }
    // Blocks not given are kept; an empty array removes them.
    if !blocks.is_null() {
        message.blocks = blocks;
    }
    message.edited_timestamp = Some(edit_ts);
    Reply::slack(json!({
        "ok": true,
        "channel": channel,
        "ts": message.id,
        "text": message.text,
        "message": slack_message_json(message),
    }))
}

fn slack_ephemeral(chat: &mut Chat, body: &Value) -> Reply {
    let (channel, text, blocks) = match slack_content(chat, body) {
        Ok(content) => content,
        Err(error) => return Reply::slack_error(error),
    };
    let Some(user) = field(body, "user") else {
        return Reply::slack_error("user_not_in_channel");
    };
    let thread = field(body, "thread_ts");
    let index = new_slack_message(chat, &channel, text, blocks, thread, Source::Api);
    let message = &mut chat.messages[index];
    message.ephemeral = true;
    message.user = Some(user);
    Reply::slack(json!({"ok": true, "message_ts": message.id}))
}

fn slack_views_open(chat: &mut Chat, body: &Value) -> Reply {
    let Some(trigger) = field(body, "trigger_id") else {
        return Reply::slack_error("invalid_trigger_id");
    };
    let view = match &body["view"] {
        Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
        view => view.clone(),
    };
    if !view.is_object() || view["type"] != json!("modal") {
        return Reply::slack_error("invalid_arguments");
    }
    let id = format!("V0AWL{:06}", chat.next());
    let text_or = |name: &str, default: Value| match &view[name] {
        Value::Null => default,
        v => v.clone(),
    };
    let answered = json!({
        "id": id,
        "team_id": SLACK_TEAM_ID,
        "type": "modal",
        "title": view["title"],
        "blocks": text_or("blocks", json!([])),
        "close": view["close"],
        "submit": view["submit"],
        "private_metadata": text_or("private_metadata", json!("")),
        "callback_id": text_or("callback_id", json!("")),
        "external_id": text_or("external_id", json!("")),
        "state": {"values": {}},
        "hash": format!("1700000000.{id}"),
        "clear_on_close": text_or("clear_on_close", json!(false)),
        "notify_on_close": text_or("notify_on_close", json!(false)),
        "root_view_id": id,
        "previous_view_id": null,
        "app_id": SLACK_APP_ID,
        "app_installed_team_id": SLACK_TEAM_ID,
        "bot_id": SLACK_BOT_ID,
    });
    chat.views.push(ChatView {
        platform: Platform::Slack,
        id,
        trigger,
        view,
    });
    Reply::slack(json!({"ok": true, "view": answered}))
}

/// `POST /slack/hooks/T.../B.../...`: `ok`, or Slack's plain-text errors.
fn slack_webhook(chat: &mut Chat, incoming: &Incoming, hook: &str) -> (Reply, Value) {
    let parsed = if incoming
        .content_type
        .starts_with("application/x-www-form-urlencoded")
    {
        // A webhook also takes the JSON in a form field `payload`.
        form_decode(&incoming.raw)
            .into_iter()
            .find(|(name, _)| name == "payload")
            .and_then(|(_, payload)| serde_json::from_str::<Value>(&payload).ok())
    } else {
        serde_json::from_str::<Value>(&incoming.raw).ok()
    };
    let recorded = parsed.clone().unwrap_or_else(|| json!(incoming.raw));
    if hook != SLACK_WEBHOOK_PATH || incoming.method != Method::POST {
        return (Reply::text(StatusCode::NOT_FOUND, "no_service"), recorded);
    }
    let Some(body) = parsed.filter(Value::is_object) else {
        return (
            Reply::text(StatusCode::BAD_REQUEST, "invalid_payload"),
            recorded,
        );
    };
    let Ok(blocks) = slack_blocks(&body) else {
        return (
            Reply::text(StatusCode::BAD_REQUEST, "invalid_blocks"),
            recorded,
        );
    };
    let text = field(&body, "text");
    if !has_content(&text, &blocks, &body["attachments"]) {
        return (Reply::text(StatusCode::BAD_REQUEST, "no_text"), recorded);
    }
    let thread = field(&body, "thread_ts");
    let channel = SLACK_WEBHOOK_CHANNEL;
    new_slack_message(chat, channel, text, blocks, thread, Source::Webhook);
    (Reply::text(StatusCode::OK, "ok"), recorded)
}

/// `POST /slack/actions/T0AWL/{id}/...`: a response URL.
fn slack_response(chat: &mut Chat, incoming: &Incoming, rest: &str) -> (Reply, Value) {
    let parsed = serde_json::from_str::<Value>(&incoming.raw).ok();
    let recorded = parsed.clone().unwrap_or_else(|| json!(incoming.raw));
    let id = rest.split('/').nth(1).unwrap_or_default();
    let Some((channel, ts)) = chat.response_urls.get(id).cloned() else {
        return (Reply::text(StatusCode::NOT_FOUND, "no_service"), recorded);
    };
    let Some(body) = parsed.filter(Value::is_object) else {
        return (
            Reply::text(StatusCode::BAD_REQUEST, "invalid_payload"),
            recorded,
        );
    };
    let ok = Reply::slack(json!({"ok": true}));
    let index = chat.find(Platform::Slack, &channel, &ts);
    if body["delete_original"] == json!(true) || body["delete_original"] == json!("true") {
        let Some(index) = index else {
            return (Reply::slack_error("message_not_found"), recorded);
        };
        chat.messages[index].deleted = true;
        return (ok, recorded);
    }
    let Ok(blocks) = slack_blocks(&body) else {
        return (Reply::slack_error("invalid_blocks"), recorded);
    };
    let text = field(&body, "text");
    if !has_content(&text, &blocks, &body["attachments"]) {
        return (Reply::slack_error("no_text"), recorded);
    }
    if body["replace_original"] == json!(true) || body["replace_original"] == json!("true") {
        let Some(index) = index else {
            return (Reply::slack_error("message_not_found"), recorded);
        };
        let edit_ts = chat.next_ts();
        let message = &mut chat.messages[index];
        message.versions.push(message.current());
        // A replacement is a whole new message: what it does not give is gone.
        message.text = text.unwrap_or_default();
        message.blocks = blocks;
        message.edited_timestamp = Some(edit_ts);
        return (ok, recorded);
    }
    let thread = field(&body, "thread_ts");
    let index = new_slack_message(chat, &channel, text, blocks, thread, Source::ResponseUrl);
    chat.messages[index].ephemeral = body["response_type"] != json!("in_channel");
    (ok, recorded)
}

// ---------------------------------------------------------------------------------
// Discord

fn discord_body(incoming: &Incoming) -> Result<Value, ()> {
    if incoming.raw.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(&incoming.raw).map_err(|_| ())
}

fn discord_route(chat: &mut Chat, incoming: &Incoming) -> (Reply, Value) {
    let body = match discord_body(incoming) {
        Ok(body) => body,
        Err(()) => {
            let reply = Reply::discord_error(
                StatusCode::BAD_REQUEST,
                "The request body contains invalid JSON.",
                50109,
            );
            return (reply, json!(incoming.raw));
        }
    };
    let segments: Vec<&str> = incoming.route.trim_matches('/').split('/').collect();
    let method = &incoming.method;
    let reply = match segments.as_slice() {
        ["channels", channel, "messages"] if method == Method::POST => {
            bot_only(incoming).unwrap_or_else(|| create_message(chat, channel, &body))
        }
        ["channels", channel, "messages"] if method == Method::GET => bot_only(incoming)
            .unwrap_or_else(|| list_messages(chat, channel, incoming.query.as_deref())),
        ["channels", channel, "messages", id] if method == Method::PATCH => {
            bot_only(incoming).unwrap_or_else(|| edit_message(chat, channel, id, &body))
        }
        ["webhooks", id, token] if method == Method::POST => {
            execute_webhook(chat, id, token, incoming.query.as_deref(), &body)
        }
        ["webhooks", id, token, "messages", message] if method == Method::PATCH => {
            edit_webhook_message(chat, id, token, message, &body)
        }
        ["interactions", id, token, "callback"] if method == Method::POST => {
            interaction_callback(chat, id, token, &body)
        }
        ["channels", _, "messages"]
        | ["channels", _, "messages", _]
        | ["webhooks", _, _]
        | ["webhooks", _, _, "messages", _]
        | ["interactions", _, _, "callback"] => {
            Reply::discord_error(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed", 0)
        }
        _ => Reply::discord_error(StatusCode::NOT_FOUND, "404: Not Found", 0),
    };
    (reply, body)
}

/// `None` when the request carries the bot token; else Discord's 401.
fn bot_only(incoming: &Incoming) -> Option<Reply> {
    let expected = format!("Bot {DISCORD_BOT_TOKEN}");
    if incoming.header("authorization") == Some(expected.as_str()) {
        return None;
    }
    Some(Reply::discord_error(
        StatusCode::UNAUTHORIZED,
        "401: Unauthorized",
        0,
    ))
}

/// The usual rate-limit headers of a successful answer.
fn discord_ok(status: StatusCode, body: Option<Value>) -> Reply {
    let reply = match body {
        Some(body) => Reply::json(status, body),
        None => Reply::empty(status),
    };
    let reset = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + Duration::from_secs(1);
    reply
        .with("x-ratelimit-limit", 5)
        .with("x-ratelimit-remaining", 4)
        .with("x-ratelimit-reset", format!("{:.3}", reset.as_secs_f64()))
        .with("x-ratelimit-reset-after", "1.000")
        .with("x-ratelimit-bucket", "awlstandin")
}

fn empty_message() -> Reply {
    Reply::discord_error(
        StatusCode::BAD_REQUEST,
        "Cannot send an empty message",
        50006,
    )
}

fn not_object() -> Reply {
    Reply::json(
        StatusCode::BAD_REQUEST,
        json!({"message": "Invalid Form Body", "code": 50035,
               "errors": {"_errors": [{"code": "DICT_TYPE_CONVERT", "message": "Only dictionaries may be used in a DictType"}]}}),
    )
}

/// A new message's content, embeds and components, or `None` when it says nothing.
fn discord_content(body: &Value) -> Option<(String, Value, Value)> {
    let text = body["content"].as_str().unwrap_or_default().to_string();
    let filled = |v: &Value| v.as_array().is_some_and(|a| !a.is_empty());
    let (embeds, components) = (&body["embeds"], &body["components"]);
    if text.is_empty() && !filled(embeds) && !filled(components) {
        return None;
    }
    Some((text, embeds.clone(), components.clone()))
}

fn new_discord_message(
    chat: &mut Chat,
    channel: &str,
    body: &Value,
    source: Source,
    webhook_id: Option<&str>,
) -> Option<usize> {
    let (text, embeds, components) = discord_content(body)?;
    let id = chat.next_snowflake();
    chat.messages.push(ChatMessage {
        platform: Platform::Discord,
        channel: channel.to_string(),
        id,
        thread: body["message_reference"]["message_id"]
            .as_str()
            .map(str::to_string),
        text,
        blocks: components,
        embeds,
        versions: Vec::new(),
        ephemeral: body["flags"].as_u64().unwrap_or(0) & EPHEMERAL != 0,
        user: None,
        source,
        deleted: false,
        flags: body["flags"].as_u64().unwrap_or(0),
        webhook_id: webhook_id.map(str::to_string),
        timestamp: now_iso(),
        edited_timestamp: None,
    });
    Some(chat.messages.len() - 1)
}

/// Apply an edit: fields given replace (`null` clears), fields left out stay.
fn edit_discord(message: &mut ChatMessage, body: &Value) {
    message.versions.push(message.current());
    if let Some(content) = body.get("content") {
        message.text = content.as_str().unwrap_or_default().to_string();
    }
    if let Some(embeds) = body.get("embeds") {
        message.embeds = embeds.clone();
    }
    if let Some(components) = body.get("components") {
        message.blocks = components.clone();
    }
    if let Some(flags) = body.get("flags").and_then(Value::as_u64) {
        message.flags = (message.flags & EPHEMERAL) | flags;
    }
    message.flags &= !LOADING;
    message.edited_timestamp = Some(now_iso());
}

/// Get Channel Messages: `after` a snowflake, at most `limit` (50 by default, 100 at
/// most), newest first.
fn list_messages(chat: &Chat, channel: &str, query: Option<&str>) -> Reply {
    if !chat.discord_channels.contains(channel) {
        return Reply::discord_error(StatusCode::NOT_FOUND, "Unknown Channel", 10003);
    }
    let params = form_decode(query.unwrap_or_default());
    let param = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let after: u128 = param("after").and_then(|a| a.parse().ok()).unwrap_or(0);
    let limit: usize = param("limit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(50)
        .clamp(1, 100);
    let mut found: Vec<&ChatMessage> = chat
        .messages
        .iter()
        .filter(|m| m.platform == Platform::Discord && m.channel == channel && !m.ephemeral)
        .filter(|m| m.id.parse::<u128>().is_ok_and(|id| id > after))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.id.parse::<u128>().unwrap_or(0)));
    let body: Vec<Value> = found
        .into_iter()
        .take(limit)
        .map(discord_message_json)
        .collect();
    discord_ok(StatusCode::OK, Some(Value::Array(body)))
}

fn discord_message_json(m: &ChatMessage) -> Value {
    let author = match &m.webhook_id {
        _ if m.source == Source::User => {
            let id = m.user.clone().unwrap_or_default();
            json!({"id": id, "username": format!("user-{id}"), "global_name": null,
                   "avatar": null, "discriminator": "0", "public_flags": 0})
        }
        Some(webhook) => json!({"id": webhook, "username": "awl", "avatar": null,
                                "discriminator": "0000", "bot": true}),
        None => json!({"id": DISCORD_BOT_USER_ID, "username": "awl", "global_name": null,
                       "avatar": null, "discriminator": "0000", "public_flags": 0, "bot": true}),
    };
    let or_empty = |v: &Value| if v.is_null() { json!([]) } else { v.clone() };
    let mut message = json!({
        "id": m.id,
        "channel_id": m.channel,
        "type": if m.thread.is_some() { 19 } else { 0 },
        "content": m.text,
        "author": author,
        "embeds": or_empty(&m.embeds),
        "components": or_empty(&m.blocks),
        "attachments": [],
        "mentions": [],
        "mention_roles": [],
        "mention_everyone": false,
        "pinned": false,
        "tts": false,
        "timestamp": m.timestamp,
        "edited_timestamp": m.edited_timestamp,
        "flags": m.flags,
    });
    if let Some(webhook) = &m.webhook_id {
        message["webhook_id"] = json!(webhook);
    }
    if m.source == Source::Interaction {
        message["application_id"] = json!(DISCORD_APPLICATION_ID);
    }
    if let Some(thread) = &m.thread {
        message["message_reference"] =
            json!({"type": 0, "message_id": thread, "channel_id": m.channel});
    }
    message
}

fn unknown_channel() -> Reply {
    Reply::discord_error(StatusCode::NOT_FOUND, "Unknown Channel", 10003)
}

fn unknown_message() -> Reply {
    Reply::discord_error(StatusCode::NOT_FOUND, "Unknown Message", 10008)
}

fn create_message(chat: &mut Chat, channel: &str, body: &Value) -> Reply {
    if !chat.discord_channels.contains(channel) {
        return unknown_channel();
    }
    if !body.is_object() {
        return not_object();
    }
    match new_discord_message(chat, channel, body, Source::Api, None) {
        Some(index) => discord_ok(
            StatusCode::OK,
            Some(discord_message_json(&chat.messages[index])),
        ),
        None => empty_message(),
    }
}

fn edit_message(chat: &mut Chat, channel: &str, id: &str, body: &Value) -> Reply {
    if !chat.discord_channels.contains(channel) {
        return unknown_channel();
    }
    if !body.is_object() {
        return not_object();
    }
    let Some(index) = chat.find(Platform::Discord, channel, id) else {
        return unknown_message();
    };
    let message = &mut chat.messages[index];
    edit_discord(message, body);
    discord_ok(StatusCode::OK, Some(discord_message_json(message)))
}

/// Who a webhook path speaks for.
enum Hook {
    /// The channel webhook.
    Channel,
    /// An interaction's token (with the application id).
    Interaction(String),
}

fn resolve_hook(chat: &Chat, id: &str, token: &str) -> Result<Hook, Reply> {
    if id == DISCORD_WEBHOOK_ID {
        if token == DISCORD_WEBHOOK_TOKEN {
            return Ok(Hook::Channel);
        }
        return Err(Reply::discord_error(
            StatusCode::UNAUTHORIZED,
            "Invalid Webhook Token",
            50027,
        ));
    }
    if id == DISCORD_APPLICATION_ID && chat.interactions.contains_key(token) {
        return Ok(Hook::Interaction(token.to_string()));
    }
    Err(Reply::discord_error(
        StatusCode::NOT_FOUND,
        "Unknown Webhook",
        10015,
    ))
}

fn interaction_channel(chat: &Chat, token: &str) -> String {
    chat.interactions
        .get(token)
        .and_then(|i| i.channel.clone())
        .unwrap_or_else(|| DISCORD_UNKNOWN_INTERACTION_CHANNEL.to_string())
}

fn execute_webhook(
    chat: &mut Chat,
    id: &str,
    token: &str,
    query: Option<&str>,
    body: &Value,
) -> Reply {
    let hook = match resolve_hook(chat, id, token) {
        Ok(hook) => hook,
        Err(reply) => return reply,
    };
    if !body.is_object() {
        return not_object();
    }
    let (channel, source) = match &hook {
        Hook::Channel => (DISCORD_WEBHOOK_CHANNEL.to_string(), Source::Webhook),
        Hook::Interaction(token) => (interaction_channel(chat, token), Source::Interaction),
    };
    let Some(index) = new_discord_message(chat, &channel, body, source, Some(id)) else {
        return empty_message();
    };
    // An interaction's follow-up messages always come back; a webhook's only with
    // `wait=true`.
    let wait = form_decode(query.unwrap_or_default())
        .into_iter()
        .any(|(name, value)| name == "wait" && matches!(value.as_str(), "true" | "True" | "1"));
    if wait || matches!(hook, Hook::Interaction(_)) {
        let message = discord_message_json(&chat.messages[index]);
        discord_ok(StatusCode::OK, Some(message))
    } else {
        discord_ok(StatusCode::NO_CONTENT, None)
    }
}

fn edit_webhook_message(
    chat: &mut Chat,
    id: &str,
    token: &str,
    message: &str,
    body: &Value,
) -> Reply {
    let hook = match resolve_hook(chat, id, token) {
        Ok(hook) => hook,
        Err(reply) => return reply,
    };
    if !body.is_object() {
        return not_object();
    }
    let target = match (&hook, message) {
        (Hook::Interaction(token), "@original") => chat
            .interactions
            .get(token)
            .and_then(|i| i.original.clone()),
        (Hook::Channel, "@original") => None,
        (_, message) => Some(message.to_string()),
    };
    let index = target.and_then(|target| chat.find_id(Platform::Discord, &target));
    let Some(index) = index else {
        return unknown_message();
    };
    // A webhook edits only what it posted; an interaction token, its response, the
    // message it was on, and its follow-ups.
    let allowed = match &hook {
        Hook::Channel => chat.messages[index].webhook_id.as_deref() == Some(DISCORD_WEBHOOK_ID),
        Hook::Interaction(token) => {
            let interaction = &chat.interactions[token];
            let m = &chat.messages[index];
            m.webhook_id.as_deref() == Some(DISCORD_APPLICATION_ID)
                || interaction.message.as_deref() == Some(m.id.as_str())
                || interaction.original.as_deref() == Some(m.id.as_str())
        }
    };
    if !allowed {
        return unknown_message();
    }
    let message = &mut chat.messages[index];
    edit_discord(message, body);
    discord_ok(StatusCode::OK, Some(discord_message_json(message)))
}

fn interaction_callback(chat: &mut Chat, id: &str, token: &str, body: &Value) -> Reply {
    if !body.is_object() {
        return not_object();
    }
    let interaction = chat
        .interactions
        .entry(token.to_string())
        .or_insert_with(|| Interaction {
            id: id.to_string(),
            channel: None,
            message: None,
            original: None,
            acknowledged: false,
        });
    if interaction.id != id {
        return Reply::discord_error(StatusCode::NOT_FOUND, "Unknown interaction", 10062);
    }
    if interaction.acknowledged {
        return Reply::discord_error(
            StatusCode::BAD_REQUEST,
            "Interaction has already been acknowledged.",
            40060,
        );
    }
    let kind = body["type"].as_u64().unwrap_or(0);
    if !matches!(kind, 1 | 4 | 5 | 6 | 7 | 8 | 9 | 12) {
        return Reply::json(
            StatusCode::BAD_REQUEST,
            json!({"message": "Invalid Form Body", "code": 50035,
                   "errors": {"type": {"_errors": [{"code": "BASE_TYPE_CHOICES",
                   "message": "Value must be one of {1, 4, 5, 6, 7, 8, 9, 12}."}]}}}),
        );
    }
    interaction.acknowledged = true;
    let component_message = interaction.message.clone();
    let data = body["data"].clone();
    chat.callbacks.push(InteractionCallback {
        interaction_id: id.to_string(),
        token: token.to_string(),
        kind,
        data: data.clone(),
        body: body.clone(),
    });
    let channel = interaction_channel(chat, token);
    let original = match kind {
        // CHANNEL_MESSAGE_WITH_SOURCE
        4 => {
            let source = Source::Interaction;
            let app = Some(DISCORD_APPLICATION_ID);
            let Some(index) = new_discord_message(chat, &channel, &data, source, app) else {
                chat.interactions.get_mut(token).unwrap().acknowledged = false;
                chat.callbacks.pop();
                return empty_message();
            };
            Some(chat.messages[index].id.clone())
        }
        // DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE: "is thinking...", filled in later.
        5 => {
            let flags = data["flags"].as_u64().unwrap_or(0) & EPHEMERAL;
            let id = chat.next_snowflake();
            chat.messages.push(ChatMessage {
                platform: Platform::Discord,
                channel: channel.clone(),
                id: id.clone(),
                thread: None,
                text: String::new(),
                blocks: Value::Null,
                embeds: Value::Null,
                versions: Vec::new(),
                ephemeral: flags & EPHEMERAL != 0,
                user: None,
                source: Source::Interaction,
                deleted: false,
                flags: flags | LOADING,
                webhook_id: Some(DISCORD_APPLICATION_ID.to_string()),
                timestamp: now_iso(),
                edited_timestamp: None,
            });
            Some(id)
        }
        // DEFERRED_UPDATE_MESSAGE: the component's message, edited later.
        6 => component_message,
        // UPDATE_MESSAGE: edit the component's message now.
        7 => {
            let index = component_message
                .as_deref()
                .and_then(|m| chat.find_id(Platform::Discord, m));
            if let Some(index) = index {
                edit_discord(&mut chat.messages[index], &data);
            }
            component_message
        }
        // MODAL
        9 => {
            chat.views.push(ChatView {
                platform: Platform::Discord,
                id: data["custom_id"].as_str().unwrap_or_default().to_string(),
                trigger: token.to_string(),
                view: data,
            });
            None
        }
        _ => None,
    };
    if original.is_some() {
        chat.interactions.get_mut(token).unwrap().original = original;
    }
    Reply::empty(StatusCode::NO_CONTENT)
}

// ---------------------------------------------------------------------------------
// Signing, as Slack and Discord sign the requests they send

/// Seconds since the Unix epoch, for a signature timestamp Slack's five-minute
/// window accepts.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

/// `v0=` + hex(HMAC-SHA256(signing_secret, "v0:{timestamp}:{body}")): the
/// `X-Slack-Signature` of a request Slack sends ("Verifying requests from Slack").
pub fn slack_signature(signing_secret: &str, timestamp: i64, body: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, signing_secret.as_bytes());
    let tag = ring::hmac::sign(&key, format!("v0:{timestamp}:{body}").as_bytes());
    format!("v0={}", to_hex(tag.as_ref()))
}

/// The two headers Slack signs a request with: `X-Slack-Request-Timestamp` and
/// `X-Slack-Signature`.
pub fn slack_signed_headers(
    signing_secret: &str,
    timestamp: i64,
    body: &str,
) -> [(&'static str, String); 2] {
    [
        ("X-Slack-Request-Timestamp", timestamp.to_string()),
        (
            "X-Slack-Signature",
            slack_signature(signing_secret, timestamp, body),
        ),
    ]
}

/// An application's Ed25519 key pair, as Discord signs interactions with: the
/// public key is what the application is configured with.
pub struct DiscordKey {
    pair: Ed25519KeyPair,
}

impl DiscordKey {
    /// A new random key pair.
    pub fn generate() -> Self {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("an Ed25519 key");
        let pair = Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("the new key");
        Self { pair }
    }

    /// The key pair of this 32-byte seed (the same key every run).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let pair = Ed25519KeyPair::from_seed_unchecked(&seed).expect("an Ed25519 seed");
        Self { pair }
    }

    /// The public key, 64 hex digits (as the developer portal shows it).
    pub fn public_key_hex(&self) -> String {
        to_hex(self.pair.public_key().as_ref())
    }

    /// hex(Ed25519 signature of `timestamp` + `body`): the `X-Signature-Ed25519` of a
    /// request whose `X-Signature-Timestamp` is `timestamp`.
    pub fn sign(&self, timestamp: &str, body: &str) -> String {
        let message = format!("{timestamp}{body}");
        to_hex(self.pair.sign(message.as_bytes()).as_ref())
    }

    /// The two headers Discord signs a request with.
    pub fn signed_headers(&self, timestamp: &str, body: &str) -> [(&'static str, String); 2] {
        [
            ("X-Signature-Ed25519", self.sign(timestamp, body)),
            ("X-Signature-Timestamp", timestamp.to_string()),
        ]
    }
}

/// Whether `signature_hex` is the Ed25519 signature of `timestamp` + `body` under
/// `public_key_hex` (what a Discord application checks).
pub fn discord_verify(
    public_key_hex: &str,
    timestamp: &str,
    body: &str,
    signature_hex: &str,
) -> bool {
    let (Some(key), Some(signature)) = (from_hex(public_key_hex), from_hex(signature_hex)) else {
        return false;
    };
    let message = format!("{timestamp}{body}");
    UnparsedPublicKey::new(&ED25519, key)
        .verify(message.as_bytes(), &signature)
        .is_ok()
}

// ---------------------------------------------------------------------------------
// Payloads Slack sends

fn slack_user(user_id: &str, user_name: &str, team_id: &str) -> Value {
    json!({"id": user_id, "username": user_name, "name": user_name, "team_id": team_id})
}

/// A `ts`-like string for now (`action_ts`, `event_time`...).
fn now_ts() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    format!("{}.{:06}", now.as_secs(), now.subsec_micros())
}

/// A `block_actions` payload: `user_id` pressed the button `action_id` (value
/// `value`, in block `awl`) on the message `message_ts` of `channel_id`. Sent as the
/// form field `payload` ([`slack_form`]).
#[allow(clippy::too_many_arguments)]
pub fn slack_block_action(
    user_id: &str,
    user_name: &str,
    team_id: &str,
    channel_id: &str,
    message_ts: &str,
    action_id: &str,
    value: &str,
    trigger_id: &str,
    response_url: &str,
) -> Value {
    json!({
        "type": "block_actions",
        "user": slack_user(user_id, user_name, team_id),
        "api_app_id": SLACK_APP_ID,
        "token": SLACK_VERIFICATION_TOKEN,
        "container": {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel_id,
            "is_ephemeral": false,
        },
        "trigger_id": trigger_id,
        "team": {"id": team_id, "domain": "awl-test"},
        "enterprise": null,
        "is_enterprise_install": false,
        "channel": {"id": channel_id, "name": "awl"},
        "message": {
            "type": "message",
            "user": SLACK_BOT_USER_ID,
            "bot_id": SLACK_BOT_ID,
            "app_id": SLACK_APP_ID,
            "team": team_id,
            "ts": message_ts,
            "text": "",
            "blocks": [],
        },
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [{
            "action_id": action_id,
            "block_id": "awl",
            "text": {"type": "plain_text", "text": value, "emoji": true},
            "value": value,
            "type": "button",
            "action_ts": now_ts(),
        }],
    })
}

/// A `view_submission` payload: `user_id` submitted the modal `callback_id` whose
/// input `block_id`/`action_id` (a plain-text input) holds `text`.
pub fn slack_view_submission(
    user_id: &str,
    callback_id: &str,
    private_metadata: &str,
    block_id: &str,
    action_id: &str,
    text: &str,
) -> Value {
    let view_id = "V0AWLSUBMIT";
    json!({
        "type": "view_submission",
        "team": {"id": SLACK_TEAM_ID, "domain": "awl-test"},
        "user": slack_user(user_id, user_id, SLACK_TEAM_ID),
        "api_app_id": SLACK_APP_ID,
        "token": SLACK_VERIFICATION_TOKEN,
        "trigger_id": format!("1700000000.0000000000.{}", to_hex(user_id.as_bytes())),
        "view": {
            "id": view_id,
            "team_id": SLACK_TEAM_ID,
            "type": "modal",
            "blocks": [{
                "type": "input",
                "block_id": block_id,
                "label": {"type": "plain_text", "text": "Reason", "emoji": true},
                "optional": false,
                "dispatch_action": false,
                "element": {"type": "plain_text_input", "action_id": action_id, "multiline": true},
            }],
            "private_metadata": private_metadata,
            "callback_id": callback_id,
            "state": {"values": {block_id: {action_id: {"type": "plain_text_input", "value": text}}}},
            "hash": "1700000000.awlstand",
            "title": {"type": "plain_text", "text": "awl", "emoji": true},
            "clear_on_close": false,
            "notify_on_close": false,
            "close": {"type": "plain_text", "text": "Cancel", "emoji": true},
            "submit": {"type": "plain_text", "text": "Submit", "emoji": true},
            "previous_view_id": null,
            "root_view_id": view_id,
            "app_id": SLACK_APP_ID,
            "external_id": "",
            "app_installed_team_id": SLACK_TEAM_ID,
            "bot_id": SLACK_BOT_ID,
        },
        "response_urls": [],
        "is_enterprise_install": false,
        "enterprise": null,
    })
}

/// An interaction payload as Slack posts it: `payload=` + the urlencoded JSON.
pub fn slack_form(payload: &Value) -> String {
    form_encode(&[("payload", &payload.to_string())])
}

/// A slash command's form body, with the fields in the order Slack sends them.
#[allow(clippy::too_many_arguments)]
pub fn slack_slash_command(
    user_id: &str,
    user_name: &str,
    team_id: &str,
    channel_id: &str,
    command: &str,
    text: &str,
    response_url: &str,
    trigger_id: &str,
) -> String {
    form_encode(&[
        ("token", SLACK_VERIFICATION_TOKEN),
        ("team_id", team_id),
        ("team_domain", "awl-test"),
        ("channel_id", channel_id),
        ("channel_name", "awl"),
        ("user_id", user_id),
        ("user_name", user_name),
        ("command", command),
        ("text", text),
        ("api_app_id", SLACK_APP_ID),
        ("is_enterprise_install", "false"),
        ("response_url", response_url),
        ("trigger_id", trigger_id),
    ])
}

/// An Events API `event_callback` carrying a `message` event (a thread reply when
/// `thread_ts` is given).
pub fn slack_message_event(
    user_id: &str,
    channel: &str,
    text: &str,
    ts: &str,
    thread_ts: Option<&str>,
    event_id: &str,
) -> Value {
    let channel_type = match channel.chars().next() {
        Some('D') => "im",
        Some('G') => "group",
        _ => "channel",
    };
    let mut event = json!({
        "type": "message",
        "channel": channel,
        "user": user_id,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "channel_type": channel_type,
        "team": SLACK_TEAM_ID,
    });
    if let Some(thread_ts) = thread_ts {
        event["thread_ts"] = json!(thread_ts);
        event["parent_user_id"] = json!(SLACK_BOT_USER_ID);
    }
    let event_time: i64 = ts
        .split('.')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(unix_now);
    json!({
        "token": SLACK_VERIFICATION_TOKEN,
        "team_id": SLACK_TEAM_ID,
        "context_team_id": SLACK_TEAM_ID,
        "api_app_id": SLACK_APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": event_time,
        "authorizations": [{
            "enterprise_id": null,
            "team_id": SLACK_TEAM_ID,
            "user_id": SLACK_BOT_USER_ID,
            "is_bot": true,
            "is_enterprise_install": false,
        }],
        "is_ext_shared_channel": false,
        "event_context": format!("4-awl-{event_id}"),
    })
}

/// The Events API's `url_verification` handshake (answered with the challenge).
pub fn slack_url_verification(challenge: &str) -> Value {
    json!({"token": SLACK_VERIFICATION_TOKEN, "challenge": challenge, "type": "url_verification"})
}

// ---------------------------------------------------------------------------------
// Interactions Discord sends

/// A `PING` (type 1), which the application answers with `{"type": 1}`.
pub fn discord_ping() -> Value {
    json!({
        "id": "500000000000000001",
        "application_id": DISCORD_APPLICATION_ID,
        "type": 1,
        "token": "awl-ping-token",
        "version": 1,
        "user": discord_user("600000000000000001", "discord"),
    })
}

fn discord_user(user_id: &str, username: &str) -> Value {
    json!({"id": user_id, "username": username, "global_name": username, "discriminator": "0",
           "avatar": null, "public_flags": 0})
}

/// The fields every interaction has: who, where (a guild, with `member.user`; or a
/// DM, with `user`), the token.
#[allow(clippy::too_many_arguments)]
fn discord_interaction(
    kind: u64,
    application_id: &str,
    interaction_id: &str,
    token: &str,
    user_id: &str,
    username: &str,
    channel_id: &str,
    guild_id: Option<&str>,
    data: Value,
) -> Value {
    let user = discord_user(user_id, username);
    let mut interaction = json!({
        "id": interaction_id,
        "application_id": application_id,
        "type": kind,
        "data": data,
        "channel_id": channel_id,
        "token": token,
        "version": 1,
        "app_permissions": "2248473465835073",
        "locale": "en-US",
        "entitlements": [],
    });
    match guild_id {
        Some(guild) => {
            interaction["guild_id"] = json!(guild);
            interaction["guild_locale"] = json!("en-US");
            interaction["channel"] = json!({"id": channel_id, "type": 0, "guild_id": guild});
            interaction["member"] = json!({
                "user": user,
                "roles": [],
                "nick": null,
                "avatar": null,
                "joined_at": "2024-01-01T00:00:00.000000+00:00",
                "premium_since": null,
                "deaf": false,
                "mute": false,
                "flags": 0,
                "pending": false,
                "permissions": "2248473465835073",
                "communication_disabled_until": null,
            });
            interaction["authorizing_integration_owners"] = json!({"0": guild});
            interaction["context"] = json!(0);
        }
        None => {
            interaction["channel"] = json!({"id": channel_id, "type": 1});
            interaction["user"] = user;
            interaction["authorizing_integration_owners"] = json!({"0": "0"});
            interaction["context"] = json!(1);
        }
    }
    interaction
}

/// A `MESSAGE_COMPONENT` interaction (type 3): `user_id` pressed the button
/// `custom_id` on the bot's message `message_id`.
#[allow(clippy::too_many_arguments)]
pub fn discord_component(
    application_id: &str,
    interaction_id: &str,
    token: &str,
    user_id: &str,
    username: &str,
    channel_id: &str,
    message_id: &str,
    custom_id: &str,
    guild_id: Option<&str>,
) -> Value {
    let data = json!({"custom_id": custom_id, "component_type": 2});
    let mut interaction = discord_interaction(
        3,
        application_id,
        interaction_id,
        token,
        user_id,
        username,
        channel_id,
        guild_id,
        data,
    );
    interaction["message"] = json!({
        "id": message_id,
        "channel_id": channel_id,
        "type": 0,
        "content": "",
        "author": {"id": application_id, "username": "awl", "avatar": null,
                   "discriminator": "0000", "public_flags": 0, "bot": true},
        "embeds": [],
        "components": [],
        "attachments": [],
        "mentions": [],
        "mention_roles": [],
        "mention_everyone": false,
        "pinned": false,
        "tts": false,
        "timestamp": "2024-01-01T00:00:00.000000+00:00",
        "edited_timestamp": null,
        "flags": 0,
    });
    interaction
}

/// A `MODAL_SUBMIT` interaction (type 5): the modal `custom_id` submitted with its
/// one text input `input_custom_id` holding `value`.
#[allow(clippy::too_many_arguments)]
pub fn discord_modal_submit(
    application_id: &str,
    interaction_id: &str,
    token: &str,
    user_id: &str,
    username: &str,
    channel_id: &str,
    custom_id: &str,
    input_custom_id: &str,
    value: &str,
    guild_id: Option<&str>,
) -> Value {
    let data = json!({
        "custom_id": custom_id,
        "components": [{
            "type": 1,
            "components": [{"type": 4, "custom_id": input_custom_id, "value": value}],
        }],
    });
    discord_interaction(
        5,
        application_id,
        interaction_id,
        token,
        user_id,
        username,
        channel_id,
        guild_id,
        data,
    )
}

/// An `APPLICATION_COMMAND` interaction (type 2): `/awl {subcommand}` with these
/// options (each typed from its value: string 3, integer 4, boolean 5, number 10).
#[allow(clippy::too_many_arguments)]
pub fn discord_command(
    application_id: &str,
    interaction_id: &str,
    token: &str,
    user_id: &str,
    username: &str,
    channel_id: &str,
    subcommand: &str,
    options: &[(&str, Value)],
    guild_id: Option<&str>,
) -> Value {
    let options: Vec<Value> = options
        .iter()
        .map(|(name, value)| {
            let kind = match value {
                Value::Bool(_) => 5,
                Value::Number(n) if n.is_i64() || n.is_u64() => 4,
                Value::Number(_) => 10,
                _ => 3,
            };
            json!({"name": name, "type": kind, "value": value})
        })
        .collect();
    let data = json!({
        "id": "700000000000000001",
        "name": "awl",
        "type": 1,
        "options": [{"name": subcommand, "type": 1, "options": options}],
    });
    discord_interaction(
        2,
        application_id,
        interaction_id,
        token,
        user_id,
        username,
        channel_id,
        guild_id,
        data,
    )
}

// ---------------------------------------------------------------------------------
// Encodings

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// `application/x-www-form-urlencoded`, as browsers and Slack write it: letters,
/// digits and `*-._` as they are, space as `+`, every other byte `%XX`.
pub fn form_encode(fields: &[(&str, &str)]) -> String {
    let encode = |text: &str| -> String {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                    (b as char).to_string()
                }
                b' ' => "+".to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    fields
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The fields of a urlencoded form, decoded.
pub fn form_decode(text: &str) -> Vec<(String, String)> {
    let decode = |text: &str| -> String {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                    match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                        Some(b) => {
                            out.push(b);
                            i += 2;
                        }
                        None => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect()
}

/// Now, as Discord writes times: `2024-01-01T00:00:00.000000+00:00`.
fn now_iso() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6f+00:00")
        .to_string()
}
