//! Sending to Slack and Discord: post a notice, edit it in place, answer a click
//! privately, open a form. Over their HTTP APIs (Slack's Web API and incoming
//! webhooks, Discord's REST API and webhooks), with the credentials read from the
//! environment when used. A 429 is waited out for as long as the service asks
//! (`Retry-After`, or Discord's `retry_after`) up to a cap; a 5xx or a network error is
//! tried again with back-off; every failure says its class (`rate_limit`,
//! `dependency`, `authentication`, `validation`, `configuration`).

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::domain::chat::{MessageRef, Platform};

use super::config::{ChannelSpec, ChatConfig};
use super::notice::Notice;

/// The longest one wait before a retry may be; a service asking for more fails now.
const MAX_WAIT: Duration = Duration::from_secs(30);
/// Attempts at one request, the first included.
const ATTEMPTS: u32 = 4;
/// The limit on one attempt.
const TIMEOUT: Duration = Duration::from_secs(15);
/// The most of a reply read.
const MAX_BODY: usize = 1024 * 1024;

/// Why a delivery failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{class}: {message}")]
pub struct SendError {
    pub class: &'static str,
    pub message: String,
}

impl SendError {
    fn new(class: &'static str, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
        }
    }
}

/// Posts to the channels of one chat configuration. Cheap to clone.
#[derive(Clone)]
pub struct Sender {
    http: reqwest::Client,
    config: Arc<ChatConfig>,
}

/// An answer read in full.
struct Reply {
    body: Vec<u8>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn text(&self) -> String {
        crate::text::clip(&String::from_utf8_lossy(&self.body), 300)
    }
}

impl Sender {
    pub fn new(config: Arc<ChatConfig>) -> Result<Self, SendError> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .user_agent(concat!("awl/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| SendError::new("configuration", format!("no HTTP client: {e}")))?;
        Ok(Self { http, config })
    }

    pub fn config(&self) -> &ChatConfig {
        &self.config
    }

    fn spec(&self, channel: &str) -> Result<&ChannelSpec, SendError> {
        self.config.channel(channel).ok_or_else(|| {
            SendError::new(
                "configuration",
                format!("no chat channel named `{channel}` in the chat file"),
            )
        })
    }

    /// Post `notice` to `channel`; where the message is.
    pub async fn post(&self, channel: &str, notice: &Notice) -> Result<MessageRef, SendError> {
        let slack =
            json!({"text": notice.plain(), "blocks": notice.slack_blocks(), "unfurl_links": false});
        self.post_parts(channel, slack, notice.discord_message())
            .await
    }

    /// Post plain `text` to `channel` (a `notify` step's message); mentions are not
    /// expanded by Discord.
    pub async fn post_text(&self, channel: &str, text: &str) -> Result<MessageRef, SendError> {
        let text = crate::text::clip(text, 1_900);
        let slack = json!({"text": text, "unfurl_links": false});
        let discord = json!({"content": text, "allowed_mentions": {"parse": []}});
        self.post_parts(channel, slack, discord).await
    }

    /// Post to `channel`: `slack` (a `chat.postMessage` or webhook body, without the
    /// channel) or `discord` (a message body), whichever service the channel is on.
    async fn post_parts(
        &self,
        channel: &str,
        slack: Value,
        discord: Value,
    ) -> Result<MessageRef, SendError> {
        let spec = self.spec(channel)?;
        if let Some(id) = &spec.slack {
            let mut body = slack;
            body["channel"] = json!(id);
            let reply = self.slack_api("chat.postMessage", body).await?;
            return Ok(MessageRef {
                platform: Platform::Slack,
                channel_id: reply["channel"].as_str().unwrap_or(id).to_string(),
                message_id: reply["ts"].as_str().map(str::to_string),
            });
        }
        if let Some(var) = &spec.slack_webhook_env {
            let url = env(var)?;
            self.send(Platform::Slack, Method::POST, &url, None, &slack)
                .await?;
            return Ok(MessageRef {
                platform: Platform::Slack,
                channel_id: "webhook".into(),
                message_id: None,
            });
        }
        if let Some(id) = &spec.discord {
            let url = format!("{}/channels/{id}/messages", self.config.discord_api());
            let message = self.discord_bot(Method::POST, &url, &discord).await?;
            return discord_ref(&message, id);
        }
        if let Some(var) = &spec.discord_webhook_env {
            let url = format!("{}?wait=true", env(var)?);
            let reply = self
                .send(Platform::Discord, Method::POST, &url, None, &discord)
                .await?;
            return discord_ref(&reply.json(), "webhook");
        }
        Err(SendError::new(
            "configuration",
            format!("chat channel `{channel}` names no place"),
        ))
    }

    /// Make `message` (in `channel`) say `notice`: edited in place, or, for a Slack
    /// webhook's message (which cannot be edited), the notice posted after it.
    pub async fn update(
        &self,
        channel: &str,
        message: &MessageRef,
        notice: &Notice,
    ) -> Result<(), SendError> {
        let spec = self.spec(channel)?;
        let Some(id) = &message.message_id else {
            self.post(channel, notice).await?;
            return Ok(());
        };
        match message.platform {
            Platform::Slack => {
                self.slack_api(
                    "chat.update",
                    json!({"channel": message.channel_id, "ts": id, "text": notice.plain(), "blocks": notice.slack_blocks()}),
                )
                .await?;
            }
            Platform::Discord => {
                let url = match &spec.discord_webhook_env {
                    Some(var) => format!("{}/messages/{id}", env(var)?),
                    None => format!(
                        "{}/channels/{}/messages/{id}",
                        self.config.discord_api(),
                        message.channel_id
                    ),
                };
                if spec.discord_webhook_env.is_some() {
                    self.send(
                        Platform::Discord,
                        Method::PATCH,
                        &url,
                        None,
                        &notice.discord_message(),
                    )
                    .await?;
                } else {
                    self.discord_bot(Method::PATCH, &url, &notice.discord_message())
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// A message only `user` sees in Slack channel `channel_id`.
    pub async fn slack_ephemeral(
        &self,
        channel_id: &str,
        user: &str,
        text: &str,
    ) -> Result<(), SendError> {
        self.slack_api(
            "chat.postEphemeral",
            json!({"channel": channel_id, "user": user, "text": text}),
        )
        .await
        .map(|_| ())
    }

    /// A Slack form asking for the text `action` needs (its answer comes back as a
    /// `view_submission` with the action's id as `callback_id`).
    pub async fn slack_form(
        &self,
        trigger_id: &str,
        action_id: &str,
        label: &str,
        context: &str,
    ) -> Result<(), SendError> {
        let view = json!({
            "type": "modal",
            "callback_id": action_id,
            "private_metadata": context,
            "title": {"type": "plain_text", "text": "awl"},
            "submit": {"type": "plain_text", "text": "Send"},
            "blocks": [{
                "type": "input",
                "block_id": "text",
                "label": {"type": "plain_text", "text": label},
                "element": {"type": "plain_text_input", "action_id": "text", "multiline": true},
            }],
        });
        self.slack_api(
            "views.open",
            json!({"trigger_id": trigger_id, "view": view}),
        )
        .await
        .map(|_| ())
    }

    /// Post a line to a thread (Slack: `thread_ts`; Discord: a reply).
    pub async fn reply_in_thread(&self, message: &MessageRef, text: &str) -> Result<(), SendError> {
        let Some(id) = &message.message_id else {
            return Ok(());
        };
        match message.platform {
            Platform::Slack => self
                .slack_api(
                    "chat.postMessage",
                    json!({"channel": message.channel_id, "thread_ts": id, "text": text}),
                )
                .await
                .map(|_| ()),
            Platform::Discord => {
                let url = format!(
                    "{}/channels/{}/messages",
                    self.config.discord_api(),
                    message.channel_id
                );
                self.discord_bot(
                    Method::POST,
                    &url,
                    &json!({"content": text, "message_reference": {"message_id": id}, "allowed_mentions": {"parse": []}}),
                )
                .await
                .map(|_| ())
            }
        }
    }

    /// The messages of Discord channel `channel_id` after message `after`, oldest
    /// first (Get Channel Messages: what an HTTP-only bot reads replies with).
    pub async fn discord_messages_after(
        &self,
        channel_id: &str,
        after: &str,
    ) -> Result<Vec<Value>, SendError> {
        let url = format!(
            "{}/channels/{channel_id}/messages?after={after}&limit=100",
            self.config.discord_api()
        );
        let listed = self.discord_bot(Method::GET, &url, &Value::Null).await?;
        let mut messages = listed.as_array().cloned().unwrap_or_default();
        messages.sort_by_key(|m| {
            m["id"]
                .as_str()
                .and_then(|id| id.parse::<u128>().ok())
                .unwrap_or(0)
        });
        Ok(messages)
    }

    /// A Slack Web API method; its answer when `ok`.
    async fn slack_api(&self, method: &str, body: Value) -> Result<Value, SendError> {
        let var = self
            .config
            .file
            .slack
            .as_ref()
            .and_then(|s| s.bot_token_env.as_deref())
            .ok_or_else(|| {
                SendError::new("configuration", "no `slack.bot_token_env` in the chat file")
            })?;
        let token = env(var)?;
        let url = format!("{}/{method}", self.config.slack_api());
        let auth = format!("Bearer {token}");
        let reply = self
            .send(Platform::Slack, Method::POST, &url, Some(&auth), &body)
            .await?;
        let answer = reply.json();
        if answer["ok"] == true {
            return Ok(answer);
        }
        let error = answer["error"].as_str().unwrap_or("no_error_given");
        let class = match error {
            "invalid_auth"
            | "not_authed"
            | "account_inactive"
            | "token_revoked"
            | "token_expired"
            | "missing_scope"
            | "not_allowed_token_type" => "authentication",
            "ratelimited" => "rate_limit",
            "internal_error" | "fatal_error" | "service_unavailable" | "request_timeout" => {
                "dependency"
            }
            _ => "validation",
        };
        Err(SendError::new(class, format!("Slack {method}: {error}")))
    }

    /// A Discord REST call as the bot; the message it answers with.
    async fn discord_bot(
        &self,
        method: Method,
        url: &str,
        body: &Value,
    ) -> Result<Value, SendError> {
        let var = self
            .config
            .file
            .discord
            .as_ref()
            .and_then(|d| d.bot_token_env.as_deref())
            .ok_or_else(|| {
                SendError::new(
                    "configuration",
                    "no `discord.bot_token_env` in the chat file",
                )
            })?;
        let auth = format!("Bot {}", env(var)?);
        let reply = self
            .send(Platform::Discord, method, url, Some(&auth), body)
            .await?;
        Ok(reply.json())
    }

    /// One request, tried again on 429 (after the time asked), 5xx and network errors.
    async fn send(
        &self,
        platform: Platform,
        method: Method,
        url: &str,
        auth: Option<&str>,
        body: &Value,
    ) -> Result<Reply, SendError> {
        let name = match platform {
            Platform::Slack => "Slack",
            Platform::Discord => "Discord",
        };
        let mut last = SendError::new("dependency", format!("{name}: no attempt made"));
        for attempt in 1..=ATTEMPTS {
            let mut request = self.http.request(method.clone(), url);
            if method != Method::GET {
                request = request.json(body);
            }
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            let wait = match request.send().await {
                Err(e) => {
                    last = SendError::new(
                        if e.is_timeout() { "timeout" } else { "network" },
                        format!("{name}: {}", crate::text::error_chain(&e)),
                    );
                    backoff(attempt)
                }
                Ok(response) => {
                    let status = response.status();
                    let headers = response.headers().clone();
                    let body = read(response).await;
                    let reply = Reply { body };
                    if status == StatusCode::TOO_MANY_REQUESTS {
                        let wait = retry_after(&headers, &reply.json());
                        last = SendError::new(
                            "rate_limit",
                            format!("{name} asked to wait {:.1} s (429)", wait.as_secs_f64()),
                        );
                        if wait > MAX_WAIT {
                            return Err(last);
                        }
                        wait
                    } else if status.is_server_error() {
                        last = SendError::new(
                            "dependency",
                            format!("{name} answered {status}: {}", reply.text()),
                        );
                        backoff(attempt)
                    } else if status.is_success() {
                        return Ok(reply);
                    } else {
                        let class = match status {
                            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => "authentication",
                            _ => "validation",
                        };
                        return Err(SendError::new(
                            class,
                            format!("{name} answered {status}: {}", reply.text()),
                        ));
                    }
                }
            };
            if attempt < ATTEMPTS {
                tracing::debug!(
                    platform = name,
                    attempt,
                    wait_ms = wait.as_millis() as u64,
                    "chat request tried again"
                );
                tokio::time::sleep(wait).await;
            }
        }
        Err(last)
    }
}

/// How long a 429 asks to wait: Discord's `retry_after` (seconds, fractional) or the
/// `Retry-After` header (seconds).
fn retry_after(headers: &HeaderMap, body: &Value) -> Duration {
    if let Some(s) = body["retry_after"]
        .as_f64()
        .filter(|s| s.is_finite() && *s >= 0.0)
    {
        return Duration::from_secs_f64(s);
    }
    headers
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(Duration::from_secs(1))
}

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(250 * 2u64.pow(attempt.min(6)))
}

async fn read(mut response: reqwest::Response) -> Vec<u8> {
    let mut out = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        if out.len() + chunk.len() > MAX_BODY {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    out
}

/// `notify` steps' `chat:` channels, through this sender.
impl crate::runners::ChatPoster for Sender {
    fn post<'a>(
        &'a self,
        channel: &'a str,
        text: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<Value, crate::runners::StepFailure>> {
        Box::pin(async move {
            match self.post_text(channel, text).await {
                Ok(m) => Ok(json!({
                    "platform": m.platform.as_str(),
                    "channel_id": m.channel_id,
                    "message_id": m.message_id,
                })),
                Err(e) => {
                    let class = match e.class {
                        "configuration" => crate::domain::run::ErrorClass::Validation,
                        other => other
                            .parse()
                            .unwrap_or(crate::domain::run::ErrorClass::Dependency),
                    };
                    Err(crate::runners::StepFailure::new(
                        class,
                        format!("chat channel `{channel}`: {}", e.message),
                    ))
                }
            }
        })
    }
}

fn env(var: &str) -> Result<String, SendError> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| {
            SendError::new(
                "configuration",
                format!("the environment variable {var} is not set"),
            )
        })
}

fn discord_ref(message: &Value, channel: &str) -> Result<MessageRef, SendError> {
    let id = message["id"]
        .as_str()
        .ok_or_else(|| SendError::new("dependency", "Discord answered without a message id"))?;
    Ok(MessageRef {
        platform: Platform::Discord,
        channel_id: message["channel_id"]
            .as_str()
            .unwrap_or(channel)
            .to_string(),
        message_id: Some(id.to_string()),
    })
}
