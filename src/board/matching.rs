//! Which queued task an agent gets, and which waiting agent a task goes to: pure rules.
//!
//! A task can go to an agent whose capabilities cover the task's required ones. A task
//! hinted at one agent is kept for that agent for a grace period after it was queued
//! (if the agent is not around by then, anyone able may take it). Among the tasks an
//! agent may take, the order is: hinted at this agent, same repository and branch,
//! same repository, higher priority, then older. Among waiting agents a task may go
//! to, the order is: the hinted agent, the best workspace match, then the agent that
//! has waited longest. Both orders are total, so the choice is deterministic.

use std::cmp::Reverse;

use chrono::{DateTime, Duration, Utc};

use crate::domain::ids::{AgentId, TaskId};
use crate::domain::workspace::{Capabilities, Workspace};

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
}

/// What matching needs to know of an agent.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentProfile {
    pub agent_id: AgentId,
    pub capabilities: Capabilities,
    pub workspace: Option<Workspace>,
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
    if !agent.capabilities.covers(&task.required) {
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
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap()
    }

    fn task(n: u128, caps: &[&str]) -> QueuedTask {
        QueuedTask {
            task_id: TaskId::from_uuid(uuid::Uuid::from_u128(n)),
            required: Capabilities::new(caps),
            workspace: None,
            agent_hint: None,
            priority: 0,
            queued_at: t0() + Duration::seconds(n as i64),
        }
    }

    fn agent(name: &str, caps: &[&str]) -> AgentProfile {
        AgentProfile {
            agent_id: AgentId::try_from(name).unwrap(),
            capabilities: Capabilities::new(caps),
            workspace: None,
        }
    }

    fn ws(repo: &str, branch: Option<&str>) -> Option<Workspace> {
        Some(Workspace {
            repository: repo.into(),
            branch: branch.map(Into::into),
        })
    }

    const GRACE: Duration = Duration::seconds(30);

    fn pick(a: &AgentProfile, tasks: &[QueuedTask], now: DateTime<Utc>) -> Option<u128> {
        best_task_for(a, tasks, now, GRACE).map(|t| t.task_id.as_uuid().as_u128())
    }

    #[test]
    fn capabilities_must_be_covered() {
        let tasks = [task(1, &["rust", "db"]), task(2, &["python"])];
        assert_eq!(pick(&agent("a", &["rust"]), &tasks, t0()), None);
        assert_eq!(
            pick(&agent("a", &["rust", "db", "x"]), &tasks, t0()),
            Some(1)
        );
        assert_eq!(pick(&agent("a", &["Python "]), &tasks, t0()), Some(2));
        // A task that needs nothing suits anyone.
        assert_eq!(pick(&agent("a", &[]), &[task(3, &[])], t0()), Some(3));
    }

    #[test]
    fn older_first_then_priority_beats_age() {
        let mut tasks = vec![task(2, &[]), task(1, &[])];
        assert_eq!(pick(&agent("a", &[]), &tasks, t0()), Some(1));
        tasks[0].priority = 5;
        assert_eq!(pick(&agent("a", &[]), &tasks, t0()), Some(2));
    }

    #[test]
    fn same_workspace_beats_priority_and_branch_beats_repository() {
        let mut a = agent("a", &[]);
        a.workspace = ws("org/app", Some("main"));
        let mut other = task(1, &[]);
        other.priority = 9;
        other.workspace = ws("org/other", None);
        let mut repo = task(2, &[]);
        repo.workspace = ws("org/app", Some("dev"));
        let mut branch = task(3, &[]);
        branch.workspace = ws("org/app", Some("main"));
        assert_eq!(
            pick(&a, &[other.clone(), repo.clone(), branch], t0()),
            Some(3)
        );
        assert_eq!(pick(&a, &[other.clone(), repo], t0()), Some(2));
        // Another repository is still taken when nothing better is there.
        assert_eq!(pick(&a, &[other], t0()), Some(1));
    }

    #[test]
    fn a_hinted_task_waits_for_its_agent_until_the_grace_ends() {
        let mut hinted = task(1, &[]);
        hinted.agent_hint = Some(AgentId::try_from("b").unwrap());
        let tasks = [hinted.clone(), task(5, &[])];
        let a = agent("a", &[]);
        let b = agent("b", &[]);
        let queued = hinted.queued_at;
        assert_eq!(pick(&a, &tasks, queued), Some(5));
        assert_eq!(pick(&b, &tasks, queued), Some(1), "the hint comes first");
        assert_eq!(
            pick(
                &a,
                &[hinted.clone()],
                queued + GRACE - Duration::milliseconds(1)
            ),
            None
        );
        assert_eq!(pick(&a, &[hinted], queued + GRACE), Some(1));
    }

    #[test]
    fn a_task_goes_to_the_hinted_then_best_placed_then_longest_waiting_agent() {
        let mut t = task(1, &["rust"]);
        t.workspace = ws("org/app", None);
        let slow = agent("slow", &["go"]);
        let first = agent("first", &["rust"]);
        let mut placed = agent("placed", &["rust"]);
        placed.workspace = ws("org/app", None);
        let mut hinted = agent("hinted", &["rust"]);
        hinted.workspace = ws("org/zzz", None);
        assert_eq!(best_agent_for(&t, &[&slow], t0(), GRACE), None);
        assert_eq!(best_agent_for(&t, &[&slow, &first], t0(), GRACE), Some(1));
        assert_eq!(best_agent_for(&t, &[&first, &placed], t0(), GRACE), Some(1));
        t.agent_hint = Some(hinted.agent_id.clone());
        assert_eq!(
            best_agent_for(&t, &[&first, &placed, &hinted], t.queued_at, GRACE),
            Some(2)
        );
        assert_eq!(
            best_agent_for(&t, &[&first, &placed], t.queued_at, GRACE),
            None
        );
    }

    #[test]
    fn ties_break_on_the_task_id_so_the_choice_is_deterministic() {
        let a = task(7, &[]);
        let mut b = task(3, &[]);
        b.queued_at = a.queued_at;
        assert_eq!(
            pick(&agent("x", &[]), &[a.clone(), b.clone()], t0()),
            Some(3)
        );
        assert_eq!(pick(&agent("x", &[]), &[b, a], t0()), Some(3));
    }
}
