//! When agents last called in: one row per agent, shared by every server process.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::backend::Backend;
use super::{EventStore, StoreError};

impl EventStore {
    /// Record that `agent` called at `at` (a later time wins).
    pub async fn record_presence(&self, agent: &str, at: DateTime<Utc>) -> Result<(), StoreError> {
        let what = format!("recording that agent {agent} called in");
        match self.backend() {
            Backend::Postgres(b) => sqlx::query(
                "INSERT INTO agent_presence (agent_id, last_seen) VALUES ($1, $2) \
                 ON CONFLICT (agent_id) DO UPDATE SET last_seen = GREATEST(agent_presence.last_seen, EXCLUDED.last_seen)",
            )
            .bind(agent)
            .bind(at)
            .execute(b.pool())
            .await
            .map(|_| ()),
            Backend::Sqlite(b) => sqlx::query(
                "INSERT INTO agent_presence (agent_id, last_seen) VALUES (?1, ?2) \
                 ON CONFLICT (agent_id) DO UPDATE SET last_seen = MAX(agent_presence.last_seen, excluded.last_seen)",
            )
            .bind(agent)
            .bind(at.timestamp_micros())
            .execute(b.writer())
            .await
            .map(|_| ()),
        }
        .map_err(StoreError::db(what))
    }

    /// When each of `agents` last called in, for those with a record.
    pub async fn presence(
        &self,
        agents: &[String],
    ) -> Result<HashMap<String, DateTime<Utc>>, StoreError> {
        let what = "reading agent presence";
        let mut out = HashMap::new();
        if agents.is_empty() {
            return Ok(out);
        }
        match self.backend() {
            Backend::Postgres(b) => {
                let rows = sqlx::query(
                    "SELECT agent_id, last_seen FROM agent_presence WHERE agent_id = ANY($1)",
                )
                .bind(agents)
                .fetch_all(b.pool())
                .await
                .map_err(StoreError::db(what))?;
                for r in rows {
                    let id: String = r.try_get("agent_id").map_err(StoreError::db(what))?;
                    let at: DateTime<Utc> = r.try_get("last_seen").map_err(StoreError::db(what))?;
                    out.insert(id, at);
                }
            }
            Backend::Sqlite(b) => {
                for agent in agents {
                    let row: Option<i64> = sqlx::query_scalar(
                        "SELECT last_seen FROM agent_presence WHERE agent_id = ?1",
                    )
                    .bind(agent)
                    .fetch_optional(b.writer())
                    .await
                    .map_err(StoreError::db(what))?;
                    if let Some(at) = row.and_then(DateTime::from_timestamp_micros) {
                        out.insert(agent.clone(), at);
                    }
                }
            }
        }
        Ok(out)
    }
}
