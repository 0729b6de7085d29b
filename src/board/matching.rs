//! Which queued task an agent gets, and which waiting agent a task goes to: pure rules.
//!
//! A task can go to an agent whose capabilities cover the task's required ones, and
//! of the kind the task allows (awl's own agents, external ones, or either). A task
//! hinted at one agent is kept for that agent for a grace period after it was queued
//! (if the agent is not around by then, anyone able may take it). Among the tasks an
//! agent may take, the order is: hinted at this agent, same repository and branch,
//! same repository, higher priority, then older. Among waiting agents a task may go
//! to, the order is: the hinted agent, the best workspace match, then the agent that
//! has waited longest. Both orders are total, so the choice is deterministic.

use std::cmp::Reverse;

use chrono::{DateTime, Duration, Utc};

use crate::domain::ids::{AgentId, TaskId};
use crate::domain::task::Runner;
use crate::domain::workspace::{Capabilities, Workspace};

pub mod queue;

/// What matching needs to know of a queued task.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedTask {
    pub task_id: TaskId,
    pub required: Capabilities,
    pub workspace: Option<Workspace>,
    pub agent_hint: Option<AgentId>,
    pub priority: i32,
    /// When it (last) entered the queue.
    pub queued_at: DateTime<Utc>,
    /// Who may take it: awl's own agents, external ones, or either.
    pub runner: Runner,
}

/// What matching needs to know of an agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentProfile {
    pub agent_id: AgentId,
    pub capabilities: Capabilities,
    pub workspace: Option<Workspace>,
    /// One of awl's own agents.
    pub builtin: bool,
}

/// How well an agent's workspace fits a task's: higher is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WorkspaceFit {
    Elsewhere,
    /// The task names no workspace: any agent fits equally.
    Anywhere,
    SameRepository,
    SameBranch,
}

pub fn workspace_fit(task: Option<&Workspace>, agent: Option<&Workspace>) -> WorkspaceFit {
    match (task, agent) {
        (None, _) => WorkspaceFit::Anywhere,
        (Some(_), None) => WorkspaceFit::Elsewhere,
        (Some(t), Some(a)) if !t.same_repository(a) => WorkspaceFit::Elsewhere,
        (Some(t), Some(a)) if t.branch.is_some() && t.branch == a.branch => {
            WorkspaceFit::SameBranch
        }
        (Some(_), Some(_)) => WorkspaceFit::SameRepository,
    }
}

/// May `agent` take `task` at `now`? Its capabilities must cover the task's, and a task
/// hinted at another agent is that agent's until `hint_grace` after it was queued.
pub fn may_take(
    task: &QueuedTask,
    agent: &AgentProfile,
    now: DateTime<Utc>,
    hint_grace: Duration,
) -> bool {
    if !agent.capabilities.covers(&task.required) || !task.runner.allows(agent.builtin) {
        return false;
    }
    match &task.agent_hint {
        Some(hint) if *hint != agent.agent_id => now >= task.queued_at + hint_grace,
        _ => true,
    }
}

/// The best task for `agent` among `queued`, if it may take any.
pub fn best_task_for<'a>(
    agent: &AgentProfile,
    queued: impl IntoIterator<Item = &'a QueuedTask>,
    now: DateTime<Utc>,
    hint_grace: Duration,
) -> Option<&'a QueuedTask> {
    queued
        .into_iter()
        .filter(|t| may_take(t, agent, now, hint_grace))
        .min_by_key(|t| {
            (
                Reverse(t.agent_hint.as_ref() == Some(&agent.agent_id)),
                Reverse(workspace_fit(
                    t.workspace.as_ref(),
                    agent.workspace.as_ref(),
                )),
                Reverse(t.priority),
                t.queued_at,
                t.task_id.as_uuid(),
            )
        })
}

/// The index of the best agent for `task` among `waiting` (in the order they started
/// waiting), if any may take it.
pub fn best_agent_for(
    task: &QueuedTask,
    waiting: &[&AgentProfile],
    now: DateTime<Utc>,
    hint_grace: Duration,
) -> Option<usize> {
    waiting
        .iter()
        .enumerate()
        .filter(|(_, a)| may_take(task, a, now, hint_grace))
        .min_by_key(|(i, a)| {
            (
                Reverse(task.agent_hint.as_ref() == Some(&a.agent_id)),
                Reverse(workspace_fit(task.workspace.as_ref(), a.workspace.as_ref())),
                *i,
            )
        })
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests;
