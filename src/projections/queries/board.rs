//! The board projection: tasks by column, oldest first.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::page::{Cursor, Page};
use crate::store::EventStore;
use crate::store::rows::Param;

use super::{QueryError, Where, micros, rows};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BoardRow {
    pub task_id: String,
    pub status: String,
    pub prompt: String,
    /// JSON array of capability names.
    pub capabilities: String,
    pub repository: Option<String>,
    pub branch: Option<String>,
    pub agent_hint: Option<String>,
    pub priority: i64,
    pub review_required: i64,
    pub assignee: Option<String>,
    /// The open question of a BLOCKED task.
    pub question: Option<String>,
    pub run_id: Option<String>,
    pub step_id: Option<String>,
    pub attempts: i64,
    pub review_rounds: i64,
    pub ending: Option<String>,
    pub queued_at: Option<DateTime<Utc>>,
    /// When it entered its current column.
    pub status_since: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

/// Which tasks, and which page of them.
#[derive(Debug, Clone, Default)]
pub struct BoardFilter {
    /// Upper-case statuses; empty: all.
    pub statuses: Vec<String>,
    pub agent: Option<String>,
    /// Tasks of these runs; empty: any.
    pub runs: Vec<String>,
    /// Queued at or after.
    pub since: Option<DateTime<Utc>>,
    /// Queued before.
    pub until: Option<DateTime<Utc>>,
    pub after: Option<Cursor>,
    pub limit: usize,
}

const COLUMNS: &str = "task_id, status, prompt, capabilities, repository, branch, agent_hint, priority, \
    review_required, assignee, question, run_id, step_id, attempts, review_rounds, ending, queued_at, \
    status_since, updated_at";

/// Tasks oldest first (queued time, then id).
pub async fn board(store: &EventStore, f: &BoardFilter) -> Result<Page<BoardRow>, QueryError> {
    let mut w = Where::default();
    w.any_of("status", &f.statuses);
    w.any_of("run_id", &f.runs);
    if let Some(agent) = &f.agent {
        w.add("assignee = ?", [Param::from(agent.clone())]);
    }
    if let Some(since) = f.since {
        w.add("queued_at >= ?", [Param::from(micros(since))]);
    }
    if let Some(until) = f.until {
        w.add("queued_at < ?", [Param::from(micros(until))]);
    }
    if let Some(c) = &f.after {
        w.add(
            "(queued_at > ? OR (queued_at = ? AND task_id > ?))",
            [
                Param::from(c.key),
                Param::from(c.key),
                Param::from(c.id.clone()),
            ],
        );
    }
    let sql = format!(
        "SELECT {COLUMNS} FROM board_tasks{} ORDER BY queued_at, task_id LIMIT {}",
        w.sql(),
        f.limit + 1
    );
    let found: Vec<BoardRow> = rows(store, "board", &sql, &w.params).await?;
    Ok(Page::cut(found, f.limit, |r| {
        Cursor::new(r.queued_at.map(micros).unwrap_or(0), r.task_id.clone())
    }))
}
