//! A chat message awl keeps in step with what it tells: one notice (a gate waiting, a
//! run that failed, a task's question, work in review) in one chat channel, as a
//! stream of its own (`chat`, id [`stream_id`] of the notice and the channel).
//!
//! The notifier (`chat::notifier`) follows the log and, for each notice a route sends
//! to a channel, decides here what to do: post it (once), update it in place when
//! what it says changed (a gate decided: the buttons go), or nothing (the same
//! content again: a notifier that crashed and reads the same events again sends
//! nothing twice). A delivery that failed is recorded too, so an outage is visible
//! in the log; it never holds up the run or the task it tells about.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::Decide;

#[cfg(test)]
mod tests;

/// Names the streams of chat messages.
const NAMESPACE: Uuid = Uuid::from_u128(0x6a1e_0c3b_52d4_4f0e_8b7a_93c1_d2e4_f506);

/// The stream of `notice` in chat channel `channel`: the same on every server.
pub fn stream_id(notice: &str, channel: &str) -> String {
    Uuid::new_v5(&NAMESPACE, format!("{notice}\u{0}{channel}").as_bytes()).to_string()
}

/// Which chat service a message went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Platform {
    Slack,
    Discord,
}

impl Platform {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Slack => "slack",
            Self::Discord => "discord",
        }
    }
}

/// Where a posted message is, as its service names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageRef {
    pub platform: Platform,
    /// The service's channel id (a Slack webhook's messages: `webhook`).
    pub channel_id: String,
    /// Slack's `ts`, Discord's message id; none for a Slack incoming webhook, whose
    /// messages cannot be changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ChatEvent {
    /// The notice was posted.
    #[serde(rename = "chat.posted")]
    Posted {
        notice: String,
        channel: String,
        message: MessageRef,
        /// What the message says, as sent (platform-neutral JSON), and its digest.
        content: serde_json::Value,
        digest: String,
        at: DateTime<Utc>,
    },
    /// What the message says changed: it was edited in place (or, where it cannot
    /// be edited, the change was posted after it).
    #[serde(rename = "chat.updated")]
    Updated {
        content: serde_json::Value,
        digest: String,
        at: DateTime<Utc>,
    },
    /// A delivery could not be made (after the retries the service allowed).
    #[serde(rename = "chat.delivery_failed")]
    DeliveryFailed {
        digest: String,
        class: String,
        reason: String,
        at: DateTime<Utc>,
    },
}

impl ChatEvent {
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::Posted { at, .. }
            | Self::Updated { at, .. }
            | Self::DeliveryFailed { at, .. } => *at,
        }
    }
}

impl cqrs_es::DomainEvent for ChatEvent {
    fn event_type(&self) -> String {
        match self {
            Self::Posted { .. } => "chat.posted",
            Self::Updated { .. } => "chat.updated",
            Self::DeliveryFailed { .. } => "chat.delivery_failed",
        }
        .to_string()
    }

    fn event_version(&self) -> String {
        "1".to_string()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ChatCommand {
    Post {
        notice: String,
        channel: String,
        message: MessageRef,
        content: serde_json::Value,
        digest: String,
        at: DateTime<Utc>,
    },
    Update {
        content: serde_json::Value,
        digest: String,
        at: DateTime<Utc>,
    },
    RecordFailure {
        digest: String,
        class: String,
        reason: String,
        at: DateTime<Utc>,
    },
}

impl ChatEvent {
    /// The command whose decision records this event.
    pub fn command(self) -> ChatCommand {
        match self {
            Self::Posted {
                notice,
                channel,
                message,
                content,
                digest,
                at,
            } => ChatCommand::Post {
                notice,
                channel,
                message,
                content,
                digest,
                at,
            },
            Self::Updated {
                content,
                digest,
                at,
            } => ChatCommand::Update {
                content,
                digest,
                at,
            },
            Self::DeliveryFailed {
                digest,
                class,
                reason,
                at,
            } => ChatCommand::RecordFailure {
                digest,
                class,
                reason,
                at,
            },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChatError {
    #[error("the notice was already posted to this channel")]
    AlreadyPosted,
    #[error("the notice was never posted to this channel")]
    NotPosted,
    #[error("the message already says this")]
    Unchanged,
}

/// What the next delivery of a notice with `digest` is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Never posted: post it.
    Post,
    /// Posted, saying something else: edit the message (or, where it cannot be
    /// edited, post the change).
    Update(MessageRef),
    /// It says this already.
    Nothing,
}

/// A notice's message in one channel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub notice: Option<String>,
    pub channel: Option<String>,
    pub message: Option<MessageRef>,
    /// What it says now.
    pub content: Option<serde_json::Value>,
    pub digest: Option<String>,
    /// Deliveries that failed since the last one that was made.
    pub failures: u32,
    pub updated_at: Option<DateTime<Utc>>,
}

impl ChatMessage {
    /// What delivering content with `digest` takes.
    pub fn delivery(&self, digest: &str) -> Delivery {
        match (&self.message, &self.digest) {
            (None, _) => Delivery::Post,
            (Some(_), Some(d)) if d == digest => Delivery::Nothing,
            (Some(m), _) => Delivery::Update(m.clone()),
        }
    }

    fn apply_event(&mut self, event: ChatEvent) {
        match event {
            ChatEvent::Posted {
                notice,
                channel,
                message,
                content,
                digest,
                at,
            } => {
                self.notice = Some(notice);
                self.channel = Some(channel);
                self.message = Some(message);
                self.content = Some(content);
                self.digest = Some(digest);
                self.failures = 0;
                self.updated_at = Some(at);
            }
            ChatEvent::Updated {
                content,
                digest,
                at,
            } => {
                self.content = Some(content);
                self.digest = Some(digest);
                self.failures = 0;
                self.updated_at = Some(at);
            }
            ChatEvent::DeliveryFailed { at, .. } => {
                self.failures += 1;
                self.updated_at = Some(at);
            }
        }
    }
}

impl Decide for ChatMessage {
    fn decide(&self, command: ChatCommand) -> Result<Vec<ChatEvent>, ChatError> {
        match command {
            ChatCommand::Post {
                notice,
                channel,
                message,
                content,
                digest,
                at,
            } => {
                if self.message.is_some() {
                    return Err(ChatError::AlreadyPosted);
                }
                Ok(vec![ChatEvent::Posted {
                    notice,
                    channel,
                    message,
                    content,
                    digest,
                    at,
                }])
            }
            ChatCommand::Update {
                content,
                digest,
                at,
            } => match self.delivery(&digest) {
                Delivery::Post => Err(ChatError::NotPosted),
                Delivery::Nothing => Err(ChatError::Unchanged),
                Delivery::Update(_) => Ok(vec![ChatEvent::Updated {
                    content,
                    digest,
                    at,
                }]),
            },
            ChatCommand::RecordFailure {
                digest,
                class,
                reason,
                at,
            } => Ok(vec![ChatEvent::DeliveryFailed {
                digest,
                class,
                reason,
                at,
            }]),
        }
    }
}

crate::domain::impl_aggregate!(ChatMessage, "chat", ChatCommand, ChatEvent, ChatError);
