//! Chat messages: which notice each message awl posted tells (by the service's
//! channel and message id), so a reply in a message's thread finds the task question
//! it answers.

use async_trait::async_trait;

use crate::domain::chat::{ChatEvent, ChatMessage};
use crate::log::{RecordedEvent, StreamType};
use crate::store::domain_io;
use crate::store::rows::Param;

use super::{Projection, ProjectionError, Writer, micros};

pub struct Chat;

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
        let mut rows = Vec::new();
        for e in events.iter().filter(|e| e.event_type == "chat.posted") {
            if let ChatEvent::Posted {
                notice,
                channel,
                message,
                at,
                ..
            } = domain_io::decode::<ChatMessage>(e)?
                && let Some(id) = message.message_id
            {
                rows.push(vec![
                    Param::from(message.platform.as_str()),
                    Param::from(message.channel_id),
                    Param::from(id),
                    Param::from(notice),
                    Param::from(channel),
                    Param::from(micros(at)),
                ]);
            }
        }
        w.upsert(
            "{chat_messages}",
            &[
                "platform",
                "channel_id",
                "message_id",
                "notice",
                "channel",
                "posted_at",
            ],
            &["platform", "channel_id", "message_id"],
            rows,
        )
        .await
    }
}
