//! The chat tables: follower checkpoints (where a log follower has read to: the chat
//! notifier, and the scheduler's syncs of workflow files) and chat users mapped to
//! awl principals. Portable SQL, bound parameters only.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::rows::Param;
use super::{EventStore, StoreError};

/// A chat user mapped to an awl principal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatUser {
    /// `slack` or `discord`.
    pub platform: String,
    /// The service's user id (Slack `U...`, Discord's snowflake).
    pub user_id: String,
    /// Who the user acts as in awl (recorded as `by` on what they decide).
    pub principal: String,
    /// `admin`, `operator`, `agent` or `viewer`, as for tokens.
    pub role: String,
    pub created_at: DateTime<Utc>,
}

impl EventStore {
    /// Where follower `name` has read to (`None`: never started).
    pub async fn follower_checkpoint(&self, name: &str) -> Result<Option<i64>, StoreError> {
        let rows = self
            .query_rows(
                "SELECT position FROM follower_checkpoints WHERE name = ?",
                &[Param::from(name)],
            )
            .await?;
        Ok(rows
            .first()
            .and_then(|r| r.get("position"))
            .and_then(Value::as_i64))
    }

    /// Take or renew follower `name`'s lease for `owner` until `until` (the row made,
    /// at `start`, if there is none): whether `owner` holds it. Held by another until
    /// its lease ends.
    pub async fn claim_follower(
        &self,
        name: &str,
        owner: &str,
        now: DateTime<Utc>,
        until: DateTime<Utc>,
        start: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        tx.execute(
            "INSERT INTO follower_checkpoints (name, position) VALUES (?, ?) \
             ON CONFLICT (name) DO NOTHING",
            &[Param::from(name), Param::from(start)],
        )
        .await?;
        let held = tx
            .execute(
                "UPDATE follower_checkpoints SET owner = ?, lease_until = ? WHERE name = ? \
                 AND (owner IS NULL OR owner = ? OR lease_until IS NULL OR lease_until < ?)",
                &[
                    Param::from(owner),
                    Param::from(until.timestamp_micros()),
                    Param::from(name),
                    Param::from(owner),
                    Param::from(now.timestamp_micros()),
                ],
            )
            .await?;
        tx.commit().await?;
        Ok(held == 1)
    }

    /// Who holds follower `name`'s lease, and until when (`None`: nobody has it, or
    /// has had it since it was given up).
    pub async fn follower_lease(
        &self,
        name: &str,
    ) -> Result<Option<(String, DateTime<Utc>)>, StoreError> {
        let rows = self
            .query_rows(
                "SELECT owner, lease_until FROM follower_checkpoints WHERE name = ?",
                &[Param::from(name)],
            )
            .await?;
        Ok(rows.first().and_then(|r| {
            let owner = r.get("owner")?.as_str()?.to_string();
            let until = DateTime::from_timestamp_micros(r.get("lease_until")?.as_i64()?)?;
            Some((owner, until))
        }))
    }

    /// Give up follower `name`'s lease if `owner` holds it (a server stopping), so
    /// another takes over at once rather than when the lease would have lapsed.
    pub async fn release_follower(&self, name: &str, owner: &str) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        tx.execute(
            "UPDATE follower_checkpoints SET owner = NULL, lease_until = NULL \
             WHERE name = ? AND owner = ?",
            &[Param::from(name), Param::from(owner)],
        )
        .await?;
        tx.commit().await
    }

    /// Record that follower `name` has read to `position`.
    pub async fn set_follower_checkpoint(
        &self,
        name: &str,
        position: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        tx.execute(
            "INSERT INTO follower_checkpoints (name, position) VALUES (?, ?) \
             ON CONFLICT (name) DO UPDATE SET position = excluded.position",
            &[Param::from(name), Param::from(position)],
        )
        .await?;
        tx.commit().await
    }

    /// Map `user_id` of `platform` to `principal` with `role` (replacing a mapping).
    pub async fn map_chat_user(&self, user: &ChatUser) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        tx.execute(
            "INSERT INTO chat_users (platform, user_id, principal, role, created_at) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (platform, user_id) DO UPDATE SET \
             principal = excluded.principal, role = excluded.role, created_at = excluded.created_at",
            &[
                Param::from(user.platform.clone()),
                Param::from(user.user_id.clone()),
                Param::from(user.principal.clone()),
                Param::from(user.role.clone()),
                Param::from(user.created_at.timestamp_micros()),
            ],
        )
        .await?;
        tx.commit().await
    }

    /// Remove a mapping; whether there was one.
    pub async fn unmap_chat_user(&self, platform: &str, user_id: &str) -> Result<bool, StoreError> {
        let mut tx = self.begin().await?;
        let n = tx
            .execute(
                "DELETE FROM chat_users WHERE platform = ? AND user_id = ?",
                &[Param::from(platform), Param::from(user_id)],
            )
            .await?;
        tx.commit().await?;
        Ok(n > 0)
    }

    /// The principal `user_id` of `platform` acts as, if mapped.
    pub async fn chat_user(
        &self,
        platform: &str,
        user_id: &str,
    ) -> Result<Option<ChatUser>, StoreError> {
        let rows = self
            .query_rows(
                "SELECT * FROM chat_users WHERE platform = ? AND user_id = ?",
                &[Param::from(platform), Param::from(user_id)],
            )
            .await?;
        Ok(rows.first().map(chat_user))
    }

    /// Every mapping, by platform and user.
    pub async fn chat_users(&self) -> Result<Vec<ChatUser>, StoreError> {
        let rows = self
            .query_rows("SELECT * FROM chat_users ORDER BY platform, user_id", &[])
            .await?;
        Ok(rows.iter().map(chat_user).collect())
    }
}

fn chat_user(r: &serde_json::Map<String, Value>) -> ChatUser {
    let text = |k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    ChatUser {
        platform: text("platform"),
        user_id: text("user_id"),
        principal: text("principal"),
        role: text("role"),
        created_at: r
            .get("created_at")
            .and_then(Value::as_i64)
            .and_then(DateTime::from_timestamp_micros)
            .unwrap_or_default(),
    }
}
