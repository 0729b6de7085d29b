//! The board: one row per task, in the column of its status.

use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::domain::task::Task;
use crate::log::{RecordedEvent, StreamType};
use crate::store::rows::Param;

use super::fold::{Folded, fold_with, state_json};
use super::{Projection, ProjectionError, Writer, micros};

pub struct Board;

/// Every column but `status_since`, in the order of [`row`].
const COLUMNS: &[&str] = &[
    "task_id",
    "status",
    "prompt",
    "capabilities",
    "repository",
    "branch",
    "agent_hint",
    "priority",
    "review_required",
    "assignee",
    "question",
    "run_id",
    "step_id",
    "attempts",
    "review_rounds",
    "ending",
    "queued_at",
    "updated_at",
    "state",
    "version",
];

#[async_trait]
impl Projection for Board {
    fn name(&self) -> &'static str {
        "board"
    }
    fn version(&self) -> i32 {
        // 2: agent_stats and agent_columns.
        2
    }
    fn ddl(&self) -> &'static str {
        include_str!("../../projections/board.sql")
    }
    fn tables(&self) -> &'static [&'static str] {
        &["board_tasks", "agent_stats", "agent_columns"]
    }
    fn stream_types(&self) -> Vec<StreamType> {
        vec![StreamType::Task]
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        // Every change of column, for the time agents spend in each.
        let mut changes: Vec<Change> = Vec::new();
        let folded = fold_with::<Task, _>(
            w,
            "board",
            "{board_tasks}",
            "task_id",
            StreamType::Task,
            events,
            |id, before, after, e| {
                if before.status() != after.status() || e.event_type == "task.changes_requested" {
                    changes.push(Change {
                        task: id.to_string(),
                        from: before.status().map(|s| s.as_str()),
                        holder: before.assignee().map(|a| a.to_string()),
                        sent_back: e.event_type == "task.changes_requested",
                        at: micros(e.recorded_at),
                    });
                }
            },
        )
        .await?;
        agent_counters(w, &folded, &changes).await?;
        // Tasks whose column changed in this batch get a new `status_since`; the others
        // keep the stored one (a second statement that leaves the column out).
        let mut last_change: HashMap<&str, DateTime<Utc>> = HashMap::new();
        for e in events.iter().filter(|e| changes_status(&e.event_type)) {
            last_change.insert(e.stream.id.as_str(), e.recorded_at);
        }
        let (mut moved, mut stayed) = (Vec::new(), Vec::new());
        for f in folded {
            let since = last_change.get(f.id.as_str()).copied();
            let mut row = row(&f.id, &f.state, f.version)?;
            match since {
                Some(at) => {
                    row.push(Param::from(micros(at)));
                    moved.push(row);
                }
                None => stayed.push(row),
            }
        }
        let mut with_since = COLUMNS.to_vec();
        with_since.push("status_since");
        w.upsert("{board_tasks}", &with_since, &["task_id"], moved)
            .await?;
        w.upsert("{board_tasks}", COLUMNS, &["task_id"], stayed)
            .await
    }
}

/// A task leaving a column (or sent back from review).
struct Change {
    task: String,
    from: Option<&'static str>,
    holder: Option<String>,
    sent_back: bool,
    at: i64,
}

/// Per agent: tasks done and failed, review round trips, time to finish, and time
/// spent in each column while holding a task.
async fn agent_counters(
    w: &mut Writer<'_>,
    folded: &[Folded<Task>],
    changes: &[Change],
) -> Result<(), ProjectionError> {
    // agent -> [done, failed, round_trips, total_task_ms, timed]
    let mut stats: BTreeMap<String, [i64; 5]> = BTreeMap::new();
    let mut columns: BTreeMap<(String, String), i64> = BTreeMap::new();
    let mut since: BTreeMap<&str, i64> = folded
        .iter()
        .filter_map(|f| {
            let stored = f
                .row
                .as_ref()
                .and_then(|r| r.get("status_since"))
                .and_then(|v| v.as_i64());
            stored.map(|at| (f.id.as_str(), at))
        })
        .collect();
    for c in changes {
        let start = since.insert(c.task.as_str(), c.at);
        if let (Some(from), Some(holder), Some(start)) = (c.from, &c.holder, start) {
            *columns
                .entry((holder.clone(), from.to_string()))
                .or_default() += ((c.at - start) / 1000).max(0);
        }
        if c.sent_back
            && let Some(holder) = &c.holder
        {
            stats.entry(holder.clone()).or_insert([0; 5])[2] += 1;
        }
    }
    for f in folded {
        let t = &f.state;
        if f.before.is_terminal() || !t.is_terminal() {
            continue;
        }
        let Some(agent) = t.assignee() else { continue };
        let s = stats.entry(agent.to_string()).or_insert([0; 5]);
        match t.status() {
            Some(crate::domain::task::TaskStatus::Completed) => {
                s[0] += 1;
                if let Some(ms) = t
                    .queued_at()
                    .zip(t.updated_at())
                    .map(|(q, e)| (e - q).num_milliseconds())
                {
                    s[3] += ms;
                    s[4] += 1;
                }
            }
            Some(crate::domain::task::TaskStatus::Failed) => s[1] += 1,
            _ => {}
        }
    }
    let rows = stats
        .into_iter()
        .map(|(agent, s)| {
            vec![
                Param::from(agent),
                Param::from(s[0]),
                Param::from(s[1]),
                Param::from(s[2]),
                Param::from(s[3]),
                Param::from(s[4]),
            ]
        })
        .collect();
    w.add(
        "{agent_stats}",
        &["agent_id"],
        &["done", "failed", "round_trips", "total_task_ms", "timed"],
        &[],
        rows,
    )
    .await?;
    let rows = columns
        .into_iter()
        .map(|((agent, status), ms)| vec![Param::from(agent), Param::from(status), Param::from(ms)])
        .collect();
    w.add(
        "{agent_columns}",
        &["agent_id", "status"],
        &["ms"],
        &[],
        rows,
    )
    .await
}

/// A task's row, without `status_since`.
fn row(id: &str, t: &Task, version: i64) -> Result<Vec<Param>, ProjectionError> {
    Ok(vec![
        Param::from(id),
        Param::from(t.status().map(|s| s.as_str()).unwrap_or("NONE")),
        Param::from(t.prompt()),
        Param::from(serde_json::to_string(&t.required_capabilities()).unwrap_or_default()),
        Param::from(t.workspace().map(|w| w.repository.clone())),
        Param::from(t.workspace().and_then(|w| w.branch.clone())),
        Param::from(t.agent_hint().map(|a| a.to_string())),
        Param::from(i64::from(t.priority())),
        Param::from(i64::from(t.review_required())),
        Param::from(t.assignee().map(|a| a.to_string())),
        Param::from(t.open_question().map(|q| q.question.clone())),
        Param::from(t.run_step().map(|r| r.run_id.to_string())),
        Param::from(t.run_step().map(|r| r.step_id.to_string())),
        Param::from(i64::from(t.attempts())),
        Param::from(i64::from(t.review_rounds())),
        Param::from(t.ending().map(|e| e.to_string())),
        Param::from(t.queued_at().map(micros)),
        Param::from(t.updated_at().map(micros)),
        Param::from(state_json("board", t)?),
        Param::from(version),
    ])
}

/// Whether an event moves a task to another column.
fn changes_status(event_type: &str) -> bool {
    !matches!(
        event_type,
        "task.progress_reported" | "task.tool_call_reported"
    )
}
