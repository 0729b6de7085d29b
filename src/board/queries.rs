//! Reading the board as this server knows it: agents, tasks (filtered and paged with
//! the shared [`Cursor`]) and a task's history from its stream.
//!
//! These answer from the in-memory view, which dispatch keeps anyway; the board
//! projection (`projections::queries::board`) answers the same questions from the
//! database for the dashboard and other servers' clients.

use crate::domain::ids::{AgentId, RunId, TaskId};
use crate::domain::task::TaskStatus;
use crate::page::Cursor;

use std::collections::{BTreeMap, HashSet};

use crate::domain::task::Task;
use crate::projections::queries as read_models;

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

/// What the board holds in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InMemory {
    /// Tasks not ended.
    pub live_tasks: usize,
    /// Tasks that ended lately (at most 10,000).
    pub ended_tasks: usize,
    pub agents: usize,
}

impl Board {
    /// What the board holds in memory: it grows with the work in flight, not with
    /// the history.
    pub fn in_memory(&self) -> InMemory {
        let st = self.state();
        InMemory {
            live_tasks: st.view.tasks().count(),
            ended_tasks: st.view.ended().count(),
            agents: st.view.agents().count(),
        }
    }

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

    /// How many tasks are in each column, every status listed (zero included): live
    /// columns from memory, ended ones from the board projection (lately ended tasks
    /// it has not applied yet are not counted).
    pub async fn column_counts(&self) -> Result<Vec<(TaskStatus, usize)>, BoardError> {
        let stored = read_models::column_counts(self.store()).await?;
        let st = self.state();
        let mut counts: Vec<(TaskStatus, usize)> =
            TaskStatus::ALL.iter().map(|s| (*s, 0)).collect();
        for (status, count) in &mut counts {
            if status.is_terminal() {
                *count = stored
                    .iter()
                    .find(|(s, _)| s == status.as_str())
                    .map_or(0, |(_, n)| usize::try_from(*n).unwrap_or(0));
            }
        }
        for entry in st.view.tasks() {
            if let Some(status) = entry.state.status()
                && let Some(slot) = counts.iter_mut().find(|(s, _)| *s == status)
            {
                slot.1 += 1;
            }
        }
        Ok(counts)
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
    ///
    /// Live and lately ended tasks come from memory; ended ones from the board
    /// projection too (at most a page of them), merged in, memory's copy first.
    pub async fn tasks(&self, query: &TaskQuery) -> Result<TaskPage, BoardError> {
        let limit = query.limit.clamp(1, 1_000);
        let ended: Vec<TaskStatus> = TaskStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .filter(|s| query.statuses.is_empty() || query.statuses.contains(s))
            .collect();
        let stored = if ended.is_empty() {
            Vec::new()
        } else {
            let filter = read_models::EndedFilter {
                statuses: ended.iter().map(|s| s.as_str().to_string()).collect(),
                assignee: query.assignee.as_ref().map(|a| a.to_string()),
                run_id: query.run_id.map(|r| r.to_string()),
                after: query.after.clone(),
                limit: limit + 1,
            };
            read_models::ended_tasks(self.store(), &filter).await?
        };
        let st = self.state();
        let mut rows: BTreeMap<Cursor, TaskView> = BTreeMap::new();
        let mut seen: HashSet<TaskId> = HashSet::new();
        let in_memory = st.view.tasks().chain(st.view.ended());
        for e in in_memory {
            if let Some(id) = e.state.id() {
                seen.insert(id);
            }
            if matches(&e.state, query) {
                rows.insert(cursor_of(&e.state), TaskView::of(&e.state, e.version));
            }
        }
        for (task, version) in &stored {
            if task.id().is_some_and(|id| !seen.contains(&id)) && matches(task, query) {
                rows.insert(cursor_of(task), TaskView::of(task, *version));
            }
        }
        let past = |key: &Cursor| query.after.as_ref().is_none_or(|a| key > a);
        let mut page: Vec<(Cursor, TaskView)> =
            rows.into_iter().filter(|(key, _)| past(key)).collect();
        let more = page.len() > limit;
        page.truncate(limit);
        let next = more
            .then(|| page.last().map(|(key, _)| key.to_string()))
            .flatten();
        Ok(TaskPage {
            tasks: page.into_iter().map(|(_, v)| v).collect(),
            next,
        })
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

/// Whether `task` passes the query's filters (the cursor aside).
fn matches(task: &Task, query: &TaskQuery) -> bool {
    (query.statuses.is_empty() || task.status().is_some_and(|s| query.statuses.contains(&s)))
        && (query.assignee.is_none() || task.assignee() == query.assignee.as_ref())
        && (query.run_id.is_none() || task.run_step().map(|r| r.run_id) == query.run_id)
}

/// Where a task sorts in a listing: queued time, then id.
fn cursor_of(task: &Task) -> Cursor {
    let at = task.queued_at().unwrap_or_default().timestamp_micros();
    Cursor::new(at, task.id().unwrap_or_default().to_string())
}
