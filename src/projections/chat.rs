//! Chat messages: which notice each message awl posted tells (by the service's
//! channel and message id), and whether it is still open (its buttons not yet gone):
//! a reply in a message's thread finds the task question it answers, and the Discord
//! reply reader knows which questions to look under.

use async_trait::async_trait;

use crate::domain::chat::{ChatEvent, ChatMessage};
use crate::log::{RecordedEvent, StreamType};
use crate::store::domain_io;
use crate::store::rows::Param;

use super::{Projection, ProjectionError, Writer, micros};

pub struct Chat;

/// Whether a message's content (a notice) is still open: not yet decided.
fn open(content: &serde_json::Value) -> i64 {
    i64::from(
        content
            .get("outcome")
            .is_none_or(serde_json::Value::is_null),
    )
}

#[async_trait]
impl Projection for Chat {
    fn name(&self) -> &'static str {
        "chat"
    }
    fn version(&self) -> i32 {
        1
    }
    fn ddl(&self) -> &'static str {
        include_str!("../../projections/chat.sql")
    }
    fn tables(&self) -> &'static [&'static str] {
        &["chat_messages"]
    }
    fn stream_types(&self) -> Vec<StreamType> {
        vec![StreamType::Chat]
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        for e in events.iter().filter(|e| e.stream.kind == StreamType::Chat) {
            match domain_io::decode::<ChatMessage>(e)? {
                ChatEvent::Posted {
                    notice,
                    channel,
                    message,
                    content,
                    at,
                    ..
                } => {
                    w.upsert(
                        "{chat_messages}",
                        &[
                            "stream_id",
                            "platform",
                            "channel_id",
                            "message_id",
                            "notice",
                            "channel",
                            "open",
                            "posted_at",
                            "updated_at",
                        ],
                        &["stream_id"],
                        vec![vec![
                            Param::from(e.stream.id.clone()),
                            Param::from(message.platform.as_str()),
                            Param::from(message.channel_id),
                            Param::from(message.message_id),
                            Param::from(notice),
                            Param::from(channel),
                            Param::from(open(&content)),
                            Param::from(micros(at)),
                            Param::from(micros(at)),
                        ]],
                    )
                    .await?;
                }
                ChatEvent::Updated { content, at, .. } => {
                    w.execute(
                        "UPDATE {chat_messages} SET open = ?, updated_at = ? WHERE stream_id = ?",
                        &[
                            Param::from(open(&content)),
                            Param::from(micros(at)),
                            Param::from(e.stream.id.clone()),
                        ],
                    )
                    .await?;
                }
                ChatEvent::DeliveryFailed { .. } => {}
            }
        }
        Ok(())
    }
}
