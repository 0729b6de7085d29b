//! The board: one row per task, in the column of its status.

use async_trait::async_trait;

use crate::domain::task::Task;
use crate::log::{RecordedEvent, StreamType};
use crate::store::rows::Param;

use super::fold::{fold, state_json};
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
        1
    }
    fn ddl(&self) -> &'static str {
        include_str!("../../projections/board.sql")
    }
    fn tables(&self) -> &'static [&'static str] {
        &["board_tasks"]
    }
    fn stream_types(&self) -> Vec<StreamType> {
        vec![StreamType::Task]
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        let folded = fold::<Task>(
            w,
            "board",
            "{board_tasks}",
            "task_id",
            StreamType::Task,
            events,
        )
        .await?;
        // Tasks whose column changed in this batch get a new `status_since`; the others
        // keep the stored one (a second statement that leaves the column out).
        let (mut moved, mut stayed) = (Vec::new(), Vec::new());
        for f in folded {
            let since = events
                .iter()
                .filter(|e| e.stream.id == f.id && changes_status(&e.event_type))
                .map(|e| e.recorded_at)
                .next_back();
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
