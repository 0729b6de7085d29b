//! The board as this process knows it: every task and agent folded from the log,
//! with indexes of the tasks that are queued and the tasks agents hold.
//!
//! It is a cache, never the truth: decisions are appended with the stream version the
//! view had, so a stale view costs a conflict and a reload, never a wrong transition.
//! Events are applied by stream version, so applying one twice changes nothing, and a
//! version that skips ahead is reported as a gap for the caller to reload the stream.

use std::collections::{BTreeMap, HashMap, HashSet};

use cqrs_es::Aggregate;

use crate::domain::agent::Agent;
use crate::domain::ids::{AgentId, TaskId};
use crate::domain::task::{Task, TaskStatus};
use crate::log::{RecordedEvent, StreamRef, StreamType};
use crate::store::{StoreError, domain_io};

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

#[derive(Debug, Default)]
pub struct BoardView {
    tasks: HashMap<TaskId, Entry<Task>>,
    agents: HashMap<AgentId, Entry<Agent>>,
    /// The queued tasks as matching sees them, kept up to date on every change.
    queued: BTreeMap<TaskId, QueuedTask>,
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
                let entry = self.tasks.entry(id).or_default();
                if event.version <= entry.version {
                    return Ok(Applied::Nothing);
                }
                if event.version != entry.version + 1 {
                    return Ok(Applied::Gap(event.stream.clone()));
                }
                entry.state.apply(domain_io::decode::<Task>(event)?);
                entry.version = event.version;
                self.reindex(id);
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
        let entry = self.tasks.entry(id).or_default();
        if version <= entry.version {
            return false;
        }
        *entry = Entry {
            state: task,
            version,
        };
        self.reindex(id);
        true
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
                self.queued.insert(id, queued_task(id, &e.state));
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

    pub fn task(&self, id: &TaskId) -> Option<&Entry<Task>> {
        self.tasks.get(id).filter(|e| e.version > 0)
    }

    pub fn tasks(&self) -> impl Iterator<Item = &Entry<Task>> {
        self.tasks.values().filter(|e| e.version > 0)
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

    /// Every queued task, as matching sees it (no copies: waits scan this often).
    pub fn queued(&self) -> impl Iterator<Item = &QueuedTask> {
        self.queued.values()
    }

    /// An active agent as matching sees it.
    pub fn profile(&self, id: &AgentId) -> Option<AgentProfile> {
        let agent = &self.agent(id)?.state;
        agent.is_active().then(|| AgentProfile {
            agent_id: id.clone(),
            capabilities: agent.capabilities().clone(),
            workspace: agent.workspace().cloned(),
        })
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
    }
}
