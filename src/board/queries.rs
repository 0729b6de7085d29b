//! Reading the board as this server knows it: agents, tasks (filtered and paged with
//! the shared [`Cursor`]) and a task's history from its stream.
//!
//! These answer from the in-memory view, which dispatch keeps anyway; the board
//! projection (`projections::queries::board`) answers the same questions from the
//! database for the dashboard and other servers' clients.

use crate::domain::ids::{AgentId, RunId, TaskId};
use crate::domain::task::TaskStatus;
use crate::page::Cursor;

use super::views::{AgentView, HistoryEntry, TaskPage, TaskView};
use super::{Board, BoardError, task_stream};

/// Filters of a task listing.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery {
    pub statuses: Vec<TaskStatus>,
    pub assignee: Option<AgentId>,
    pub run_id: Option<RunId>,
    /// The `next` of the previous page.
    pub after: Option<Cursor>,
    pub limit: usize,
}

impl Board {
    pub fn agent(&self, id: &AgentId) -> Option<AgentView> {
        let st = self.state();
        let entry = st.view.agent(id)?;
        Some(AgentView::of(
            &entry.state,
            entry.version,
            st.last_seen.get(id).copied(),
        ))
    }

    pub fn agents(&self) -> Vec<AgentView> {
        let st = self.state();
        let mut agents: Vec<AgentView> = st
            .view
            .agents()
            .map(|e| {
                let seen = e.state.id().and_then(|id| st.last_seen.get(id).copied());
                AgentView::of(&e.state, e.version, seen)
            })
            .collect();
        agents.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
        agents
    }

    /// How many tasks are in each column, every status listed (zero included).
    pub fn column_counts(&self) -> Vec<(TaskStatus, usize)> {
        let st = self.state();
        let mut counts: Vec<(TaskStatus, usize)> =
            TaskStatus::ALL.iter().map(|s| (*s, 0)).collect();
        for entry in st.view.tasks() {
            if let Some(status) = entry.state.status()
                && let Some(slot) = counts.iter_mut().find(|(s, _)| *s == status)
            {
                slot.1 += 1;
            }
        }
        counts
    }

    /// A task as this server knows it (from the store if the view has not seen it yet).
    pub async fn task(&self, id: TaskId) -> Result<TaskView, BoardError> {
        if let Some((view, recorded)) = {
            let st = self.state();
            st.view.task(&id).map(|e| {
                (
                    TaskView::of(&e.state, e.version),
                    e.state.prompt().to_string(),
                )
            })
        } {
            return self.opened(view, &recorded).await;
        }
        let (task, version) = self.load_task(id).await?;
        self.opened(TaskView::of(&task, version), task.prompt())
            .await
    }

    /// Tasks, oldest first (queued time, then id), filtered and paged. A prompt with
    /// personal data reads `[personal]` here; the task itself (`task`) opens it.
    pub fn tasks(&self, query: &TaskQuery) -> TaskPage {
        let limit = query.limit.clamp(1, 1_000);
        let st = self.state();
        let mut rows: Vec<(Cursor, TaskView)> = st
            .view
            .tasks()
            .filter(|e| {
                let t = &e.state;
                (query.statuses.is_empty()
                    || t.status().is_some_and(|s| query.statuses.contains(&s)))
                    && (query.assignee.is_none() || t.assignee() == query.assignee.as_ref())
                    && (query.run_id.is_none() || t.run_step().map(|r| r.run_id) == query.run_id)
            })
            .map(|e| {
                let at = e.state.queued_at().unwrap_or_default().timestamp_micros();
                let id = e.state.id().unwrap_or_default().to_string();
                (Cursor::new(at, id), e)
            })
            .filter(|(key, _)| query.after.as_ref().is_none_or(|a| key > a))
            .map(|(key, e)| (key, TaskView::of(&e.state, e.version)))
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = more
            .then(|| rows.last().map(|(key, _)| key.to_string()))
            .flatten();
        TaskPage {
            tasks: rows.into_iter().map(|(_, v)| v).collect(),
            next,
        }
    }

    /// Every event of a task, oldest first: its history.
    pub async fn history(&self, id: TaskId) -> Result<Vec<HistoryEntry>, BoardError> {
        let mut events = self.inner.store.read_stream(&task_stream(id)).await?;
        self.inner
            .store
            .reveal_events(&mut events, crate::vault::Reveal::View)
            .await?;
        if events.is_empty() {
            return Err(BoardError::TaskNotFound(id));
        }
        Ok(events
            .into_iter()
            .map(|e| HistoryEntry {
                position: e.position,
                version: e.version,
                event_type: e.event_type,
                actor: e.metadata.actor,
                recorded_at: e.recorded_at,
                payload: e.payload,
            })
            .collect())
    }
}
