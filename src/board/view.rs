//! The board as this process knows it: every live task (not ended) and every agent,
//! folded from the log, with indexes of the tasks that are queued and the tasks agents
//! hold, and the tasks that ended lately. Older ended tasks are not kept: memory
//! grows with the work in flight, not with history (listings read those from the
//! board projection).
//!
//! It is a cache, never the truth: decisions are appended with the stream version the
//! view had, so a stale view costs a conflict and a reload, never a wrong transition.
//! Events are applied by stream version, so applying one twice changes nothing, and a
//! version that skips ahead is reported as a gap for the caller to reload the stream.

use std::collections::{HashMap, HashSet, VecDeque};

use cqrs_es::Aggregate;

use crate::domain::agent::Agent;
use crate::domain::ids::{AgentId, TaskId};
use crate::domain::task::{Task, TaskStatus};
use crate::log::{RecordedEvent, StreamRef, StreamType};
use crate::store::{StoreError, domain_io};

use super::matching::queue::Queue;
use super::matching::{AgentProfile, QueuedTask};

/// One stream's state and the version it was folded up to.
#[derive(Debug, Clone, Default)]
pub struct Entry<T> {
    pub state: T,
    pub version: i64,
}

/// What applying one event did.
#[derive(Debug, Clone, PartialEq)]
pub enum Applied {
    /// Already applied, or not a board stream.
    Nothing,
    Task(TaskId),
    Agent(AgentId),
    /// The event is ahead of what the view has: reload this stream.
    Gap(StreamRef),
}

/// How many lately ended tasks the view keeps.
const ENDED_KEPT: usize = 10_000;

#[derive(Debug, Default)]
pub struct BoardView {
    /// Live tasks.
    tasks: HashMap<TaskId, Entry<Task>>,
    ended: Ended,
    agents: HashMap<AgentId, Entry<Agent>>,
    /// The queued tasks as matching sees them, kept up to date on every change and
    /// indexed in matching's order.
    queued: Queue,
    held: HashSet<TaskId>,
}

impl BoardView {
    /// Fold one recorded event in, if it is the next of its stream.
    pub fn apply(&mut self, event: &RecordedEvent) -> Result<Applied, StoreError> {
        match event.stream.kind {
            StreamType::Task => {
                let Ok(id) = event.stream.id.parse::<TaskId>() else {
                    return Ok(Applied::Nothing);
                };
                let known = self.task_version(&id);
                if event.version <= known {
                    return Ok(Applied::Nothing);
                }
                if event.version != known + 1 {
                    return Ok(Applied::Gap(event.stream.clone()));
                }
                let mut state = match self.tasks.remove(&id) {
                    Some(live) => live.state,
                    None => self.task(&id).map(|e| e.state.clone()).unwrap_or_default(),
                };
                state.apply(domain_io::decode::<Task>(event)?);
                self.store_task(id, state, event.version);
                Ok(Applied::Task(id))
            }
            StreamType::Agent => {
                let Ok(id) = AgentId::try_from(event.stream.id.as_str()) else {
                    return Ok(Applied::Nothing);
                };
                let entry = self.agents.entry(id.clone()).or_default();
                if event.version <= entry.version {
                    return Ok(Applied::Nothing);
                }
                if event.version != entry.version + 1 {
                    return Ok(Applied::Gap(event.stream.clone()));
                }
                entry.state.apply(domain_io::decode::<Agent>(event)?);
                entry.version = event.version;
                Ok(Applied::Agent(id))
            }
            _ => Ok(Applied::Nothing),
        }
    }

    /// Replace a task's state if `version` is newer than the view's. True if it was.
    pub fn put_task(&mut self, id: TaskId, task: Task, version: i64) -> bool {
        if version <= self.task_version(&id) {
            return false;
        }
        self.store_task(id, task, version);
        true
    }

    /// The version of the task the view has (0: none, or ended long ago).
    fn task_version(&self, id: &TaskId) -> i64 {
        self.task(id).map_or(0, |e| e.version)
    }

    /// Keep a task's new state: with the live ones, or with the lately ended.
    fn store_task(&mut self, id: TaskId, state: Task, version: i64) {
        let entry = Entry { state, version };
        if entry.state.is_terminal() {
            self.tasks.remove(&id);
            self.ended.put(id, entry);
        } else {
            self.ended.remove(&id);
            self.tasks.insert(id, entry);
        }
        self.reindex(id);
    }

    /// Replace an agent's state if `version` is newer than the view's.
    pub fn put_agent(&mut self, id: AgentId, agent: Agent, version: i64) -> bool {
        let entry = self.agents.entry(id).or_default();
        if version <= entry.version {
            return false;
        }
        *entry = Entry {
            state: agent,
            version,
        };
        true
    }

    fn reindex(&mut self, id: TaskId) {
        let status = self.tasks.get(&id).and_then(|e| e.state.status());
        match self.tasks.get(&id) {
            Some(e) if status == Some(TaskStatus::Queued) => {
                self.queued.insert(queued_task(id, &e.state));
            }
            _ => {
                self.queued.remove(&id);
            }
        }
        if matches!(
            status,
            Some(
                TaskStatus::Assigned
                    | TaskStatus::PendingAck
                    | TaskStatus::InProgress
                    | TaskStatus::Blocked
            )
        ) {
            self.held.insert(id);
        } else {
            self.held.remove(&id);
        }
    }

    /// A live or lately ended task.
    pub fn task(&self, id: &TaskId) -> Option<&Entry<Task>> {
        self.tasks
            .get(id)
            .or_else(|| self.ended.entries.get(id))
            .filter(|e| e.version > 0)
    }

    /// Live tasks.
    pub fn tasks(&self) -> impl Iterator<Item = &Entry<Task>> {
        self.tasks.values().filter(|e| e.version > 0)
    }

    /// Lately ended tasks (the last [`ENDED_KEPT`]).
    pub fn ended(&self) -> impl Iterator<Item = &Entry<Task>> {
        self.ended.entries.values()
    }

    pub fn agent(&self, id: &AgentId) -> Option<&Entry<Agent>> {
        self.agents.get(id).filter(|e| e.version > 0)
    }

    pub fn agents(&self) -> impl Iterator<Item = &Entry<Agent>> {
        self.agents.values().filter(|e| e.version > 0)
    }

    /// The tasks agents hold (ASSIGNED to BLOCKED).
    pub fn held(&self) -> impl Iterator<Item = &Entry<Task>> {
        self.held.iter().filter_map(|id| self.tasks.get(id))
    }

    /// A task as matching sees it, if it is queued.
    pub fn queued_task(&self, id: &TaskId) -> Option<QueuedTask> {
        self.queued.get(id).cloned()
    }

    /// Every queued task, as matching sees it.
    pub fn queued(&self) -> impl Iterator<Item = &QueuedTask> {
        self.queued.iter()
    }

    /// The queued tasks, indexed for finding an agent's best one.
    pub fn queue(&self) -> &Queue {
        &self.queued
    }

    /// An active agent as matching sees it.
    pub fn profile(&self, id: &AgentId) -> Option<AgentProfile> {
        let agent = &self.agent(id)?.state;
        agent.is_active().then(|| AgentProfile {
            agent_id: id.clone(),
            capabilities: agent.capabilities().clone(),
            workspace: agent.workspace().cloned(),
            builtin: agent.is_builtin(),
        })
    }
}

/// Tasks that ended lately, the newest [`ENDED_KEPT`]: a stale copy of one (an
/// append's result observed after the log's tail already ended it) is known for
/// stale, and listings see an end before the board projection does.
#[derive(Debug, Default)]
struct Ended {
    entries: HashMap<TaskId, Entry<Task>>,
    /// Oldest first.
    order: VecDeque<TaskId>,
}

impl Ended {
    fn put(&mut self, id: TaskId, entry: Entry<Task>) {
        if self.entries.insert(id, entry).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > ENDED_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.entries.remove(&old);
            }
        }
    }

    fn remove(&mut self, id: &TaskId) {
        if self.entries.remove(id).is_some() {
            self.order.retain(|o| o != id);
        }
    }
}

pub(super) fn queued_task(id: TaskId, task: &Task) -> QueuedTask {
    QueuedTask {
        task_id: id,
        required: task.required_capabilities().clone(),
        workspace: task.workspace().cloned(),
        agent_hint: task.agent_hint().cloned(),
        priority: task.priority(),
        queued_at: task.queued_at().unwrap_or_default(),
        runner: task.runner(),
    }
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::domain::task::TaskEvent;

    fn queued(id: TaskId) -> Task {
        let mut task = Task::default();
        task.apply(TaskEvent::Queued {
            task_id: id,
            prompt: "p".into(),
            required_capabilities: Default::default(),
            workspace: None,
            agent_hint: None,
            priority: 0,
            review_required: false,
            runner: Default::default(),
            run_step: None,
            at: Utc::now(),
        });
        task
    }

    fn cancelled(id: TaskId) -> Task {
        let mut task = queued(id);
        task.apply(TaskEvent::Cancelled {
            by: "ops".into(),
            reason: "no".into(),
            at: Utc::now(),
        });
        task
    }

    #[test]
    fn an_ended_task_leaves_the_live_ones_and_a_stale_copy_does_not_bring_it_back() {
        let mut view = BoardView::default();
        let id = TaskId::new();
        assert!(view.put_task(id, queued(id), 1));
        assert_eq!(view.queued().count(), 1);
        assert!(view.put_task(id, cancelled(id), 2));
        assert_eq!(view.tasks().count(), 0);
        assert_eq!(view.ended().count(), 1);
        assert_eq!(view.queued().count(), 0);
        // The append that queued it, observed late.
        assert!(!view.put_task(id, queued(id), 1));
        assert_eq!(view.tasks().count(), 0);
        assert_eq!(view.task(&id).map(|e| e.version), Some(2));
    }

    #[test]
    fn only_the_latest_ended_tasks_are_kept() {
        let mut view = BoardView::default();
        let ids: Vec<TaskId> = (0..ENDED_KEPT + 5).map(|_| TaskId::new()).collect();
        for id in &ids {
            view.put_task(*id, cancelled(*id), 2);
        }
        assert_eq!(view.ended().count(), ENDED_KEPT);
        assert!(view.task(&ids[0]).is_none());
        assert!(view.task(&ids[ENDED_KEPT + 4]).is_some());
    }
}
