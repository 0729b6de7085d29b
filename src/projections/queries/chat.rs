//! The chat projection: the notice a posted message tells.

use serde_json::Value;

use crate::store::EventStore;
use crate::store::rows::Param;

use super::QueryError;

/// The notice (`question:TASK:QUESTION`, `gate:ID`...) of message `message_id` in the
/// service's channel `channel_id`, if awl posted it.
pub async fn chat_notice(
    store: &EventStore,
    platform: &str,
    channel_id: &str,
    message_id: &str,
) -> Result<Option<String>, QueryError> {
    let rows = store
        .query_rows(
            "SELECT notice FROM chat_messages WHERE platform = ? AND channel_id = ? AND message_id = ?",
            &[
                Param::from(platform),
                Param::from(channel_id),
                Param::from(message_id),
            ],
        )
        .await?;
    Ok(rows
        .first()
        .and_then(|r| r.get("notice"))
        .and_then(Value::as_str)
        .map(str::to_string))
}

/// A message awl posted whose notice is still open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenChatMessage {
    /// The chat file's channel name.
    pub channel: String,
    pub channel_id: String,
    pub message_id: String,
    pub notice: String,
}

/// The open question notices posted to `platform`, oldest first.
pub async fn open_questions(
    store: &EventStore,
    platform: &str,
) -> Result<Vec<OpenChatMessage>, QueryError> {
    let rows = store
        .query_rows(
            "SELECT channel, channel_id, message_id, notice FROM chat_messages \
             WHERE open = 1 AND platform = ? AND message_id IS NOT NULL \
             AND notice LIKE 'question:%' ORDER BY posted_at LIMIT 500",
            &[Param::from(platform)],
        )
        .await?;
    let text = |r: &serde_json::Map<String, Value>, k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    Ok(rows
        .iter()
        .map(|r| OpenChatMessage {
            channel: text(r, "channel"),
            channel_id: text(r, "channel_id"),
            message_id: text(r, "message_id"),
            notice: text(r, "notice"),
        })
        .collect())
}
