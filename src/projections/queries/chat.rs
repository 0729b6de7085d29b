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
