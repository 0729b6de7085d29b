//! The board projection: tasks by column, oldest first.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::domain::agent::Agent;
use crate::domain::task::{Task, TaskStatus};
use crate::page::{Cursor, Page};
use crate::projections::Projection as _;
use crate::store::EventStore;
use crate::store::rows::Param;
use crate::vault::REDACTED;
use crate::vault::reveal::PERSONAL;

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

/// Only tasks past `c` in the board's order (queued time, then id).
fn past(w: &mut Where, c: &Cursor) {
    w.add(
        "(queued_at > ? OR (queued_at = ? AND task_id > ?))",
        [
            Param::from(c.key),
            Param::from(c.key),
            Param::from(c.id.clone()),
        ],
    );
}

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
        past(&mut w, c);
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

/// A stream's state as a projection stored it.
#[derive(Debug, Clone)]
pub struct StoredState<A> {
    pub id: String,
    /// `None` when the stored copy hides personal data or secrets (read models never
    /// keep them): whoever needs the real state folds the stream.
    pub state: Option<A>,
    pub version: i64,
}

/// The board's live part as the `board` and `agents` projections hold it: every
/// task not yet ended and every agent, with the checkpoint each was read at. A
/// board view starts from this and follows the log from the checkpoints, instead of
/// folding every task ever sent.
#[derive(Debug, Clone)]
pub struct BoardSnapshot {
    pub tasks: Vec<StoredState<Task>>,
    pub agents: Vec<StoredState<Agent>>,
    /// The `board` projection's checkpoint: task events up to it are in `tasks`.
    pub tasks_at: i64,
    /// The `agents` projection's checkpoint: agent events up to it are in `agents`.
    pub agents_at: i64,
}

/// The board's live part at the projections' checkpoints (read in one transaction
/// that holds their checkpoints still), or `None` if either projection is missing
/// or was built by another version of its code (its rows may not be what this code
/// expects: fold the log instead).
pub async fn board_snapshot(store: &EventStore) -> Result<Option<BoardSnapshot>, QueryError> {
    let mut tx = store.begin().await?;
    let hold = if store.backend_name() == "postgres" {
        " FOR SHARE"
    } else {
        // SQLite transactions here are BEGIN IMMEDIATE: no writer meanwhile.
        ""
    };
    let states = tx
        .query_rows(
            &format!(
                "SELECT name, version, position FROM projection_state WHERE name IN ('board', 'agents'){hold}"
            ),
            &[],
        )
        .await?;
    let checkpoint = |name: &str, version: i32| {
        states
            .iter()
            .find(|r| r.get("name").and_then(Value::as_str) == Some(name))
            .filter(|r| r.get("version").and_then(Value::as_i64) == Some(i64::from(version)))
            .and_then(|r| r.get("position").and_then(Value::as_i64))
    };
    let (Some(tasks_at), Some(agents_at)) = (
        checkpoint("board", crate::projections::board::Board.version()),
        checkpoint("agents", crate::projections::agents::Agents.version()),
    ) else {
        tx.rollback().await?;
        return Ok(None);
    };
    let live: Vec<String> = TaskStatus::ALL
        .iter()
        .filter(|s| !s.is_terminal())
        .map(|s| s.as_str().to_string())
        .collect();
    let mut w = Where::default();
    w.any_of("status", &live);
    let tasks = tx
        .query_rows(
            &format!(
                "SELECT task_id AS id, state, version FROM board_tasks{}",
                w.sql()
            ),
            &w.params,
        )
        .await?;
    let agents = tx
        .query_rows("SELECT agent_id AS id, state, version FROM agents", &[])
        .await?;
    tx.rollback().await?;
    Ok(Some(BoardSnapshot {
        tasks: stored_states("board", tasks)?,
        agents: stored_states("agents", agents)?,
        tasks_at,
        agents_at,
    }))
}

fn stored_states<A: DeserializeOwned>(
    view: &'static str,
    rows: Vec<Map<String, Value>>,
) -> Result<Vec<StoredState<A>>, QueryError> {
    rows.into_iter()
        .map(|row| {
            let text = |k: &str| row.get(k).and_then(Value::as_str).unwrap_or_default();
            let id = text("id").to_string();
            let json = text("state");
            let state = if json.contains(PERSONAL) || json.contains(REDACTED) {
                None
            } else {
                Some(serde_json::from_str(json).map_err(|e| QueryError::Corrupt {
                    view,
                    reason: format!("the stored state of {id}: {e}"),
                })?)
            };
            let version = row.get("version").and_then(Value::as_i64).unwrap_or(0);
            Ok(StoredState { id, state, version })
        })
        .collect()
}

/// Which ended tasks, and which page of them (see [`ended_tasks`]).
#[derive(Debug, Clone, Default)]
pub struct EndedFilter {
    /// Upper-case terminal statuses (not empty).
    pub statuses: Vec<String>,
    pub assignee: Option<String>,
    pub run_id: Option<String>,
    pub after: Option<Cursor>,
    pub limit: usize,
}

/// Ended tasks (COMPLETED, FAILED, CANCELLED) as the board projection stores them,
/// oldest first (queued time, then id), at most `limit`: the board's memory keeps
/// only live tasks and lately ended ones, and lists older ones from here. A stored
/// state hides personal data and secrets, as a listing does anyway.
pub async fn ended_tasks(
    store: &EventStore,
    f: &EndedFilter,
) -> Result<Vec<(Task, i64)>, QueryError> {
    let mut w = Where::default();
    w.any_of("status", &f.statuses);
    if let Some(assignee) = &f.assignee {
        w.add("assignee = ?", [Param::from(assignee.clone())]);
    }
    if let Some(run) = &f.run_id {
        w.add("run_id = ?", [Param::from(run.clone())]);
    }
    if let Some(c) = &f.after {
        past(&mut w, c);
    }
    let sql = format!(
        "SELECT task_id AS id, state, version FROM board_tasks{} ORDER BY queued_at, task_id LIMIT {}",
        w.sql(),
        f.limit
    );
    let rows = store.query_rows(&sql, &w.params).await?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let id = row.get("id").and_then(Value::as_str).unwrap_or_default();
        let json = row.get("state").and_then(Value::as_str).unwrap_or_default();
        let task: Task = serde_json::from_str(json).map_err(|e| QueryError::Corrupt {
            view: "board",
            reason: format!("the stored state of {id}: {e}"),
        })?;
        out.push((
            task,
            row.get("version").and_then(Value::as_i64).unwrap_or(0),
        ));
    }
    Ok(out)
}

/// How many tasks the board projection has in each column (columns with none left
/// out).
pub async fn column_counts(store: &EventStore) -> Result<Vec<(String, i64)>, QueryError> {
    let rows = store
        .query_rows(
            "SELECT status, COUNT(*) AS n FROM board_tasks GROUP BY status",
            &[],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.get("status")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                r.get("n").and_then(Value::as_i64).unwrap_or(0),
            )
        })
        .collect())
}
