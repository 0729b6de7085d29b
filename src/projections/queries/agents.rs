//! The agents projection, with each agent's current task and counts from the board's.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::store::EventStore;

use super::{QueryError, rows};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AgentRow {
    pub agent_id: String,
    pub status: String,
    pub capabilities: String,
    pub repository: Option<String>,
    pub branch: Option<String>,
    pub registered_at: Option<DateTime<Utc>>,
    pub current_task: Option<String>,
    pub tasks_done: i64,
    pub tasks_failed: i64,
    pub last_seen_at: Option<DateTime<Utc>>,
}

/// Agents by name, with their current task, tasks done and last call (from the
/// shared presence table).
pub async fn agents(store: &EventStore) -> Result<Vec<AgentRow>, QueryError> {
    let sql = "SELECT a.agent_id, a.status, a.capabilities, a.repository, a.branch, a.registered_at, \
        (SELECT t.task_id FROM board_tasks t WHERE t.assignee = a.agent_id \
            AND t.status IN ('ASSIGNED', 'PENDING_ACK', 'IN_PROGRESS', 'BLOCKED') ORDER BY t.updated_at DESC LIMIT 1) AS current_task, \
        (SELECT count(*) FROM board_tasks t WHERE t.assignee = a.agent_id AND t.status = 'COMPLETED') AS tasks_done, \
        (SELECT count(*) FROM board_tasks t WHERE t.assignee = a.agent_id AND t.status = 'FAILED') AS tasks_failed, \
        NULL AS last_seen_at \
        FROM agents a ORDER BY a.agent_id";
    let mut found: Vec<AgentRow> = rows(store, "agents", sql, &[]).await?;
    let ids: Vec<String> = found.iter().map(|a| a.agent_id.clone()).collect();
    let seen = store.presence(&ids).await?;
    for a in &mut found {
        a.last_seen_at = seen.get(&a.agent_id).copied();
    }
    Ok(found)
}
