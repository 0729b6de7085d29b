//! The queued tasks, indexed in the order matching ranks them, so that an agent's best
//! task is found without looking at every queued one.
//!
//! [`best_task_for`](super::best_task_for) ranks an agent's candidates by: hinted at
//! this agent, workspace fit (same branch, same repository, no workspace named,
//! elsewhere), then priority, age and id. Only the first two depend on the agent, and
//! each of their values is a set of tasks that can be kept apart ahead of time: the
//! tasks hinted at each agent, those of each repository and branch, of each
//! repository, those that name no workspace. Within each set the tasks are kept in
//! (priority, age, id) order, so the best task of a tier is the first one the agent
//! may take, and the tiers are looked at best first. A wait costs a few ordered-set
//! lookups when the agent may take the first task it meets, instead of a pass over
//! the whole queue; it degrades to that pass only when most queued tasks are not for
//! this agent (capabilities it lacks, hinted at others).
//!
//! The result is the scan's, always: `tests` checks the two against each other on
//! random queues.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Duration, Utc};
use uuid::Uuid;

use super::{AgentProfile, QueuedTask, best_task_for, may_take};
use crate::domain::ids::{AgentId, TaskId};

/// A task's place within a tier: higher priority first, then older, then by id.
type Rank = (Reverse<i32>, DateTime<Utc>, Uuid);

/// Remove `r` from the tier under `key`, and the tier when it is left empty (so the
/// maps hold only the repositories, branches and hints of tasks still queued).
fn take_out<K: std::hash::Hash + Eq>(tiers: &mut HashMap<K, BTreeSet<Rank>>, key: &K, r: &Rank) {
    if let Some(tier) = tiers.get_mut(key) {
        tier.remove(r);
        if tier.is_empty() {
            tiers.remove(key);
        }
    }
}

fn rank(task: &QueuedTask) -> Rank {
    (
        Reverse(task.priority),
        task.queued_at,
        task.task_id.as_uuid(),
    )
}

/// The queued tasks, with the tiers of matching kept in rank order.
#[derive(Debug, Default)]
pub struct Queue {
    tasks: BTreeMap<TaskId, QueuedTask>,
    /// Every queued task.
    all: BTreeSet<Rank>,
    /// Tasks that name no workspace.
    anywhere: BTreeSet<Rank>,
    /// Tasks by the repository they name (whatever the branch).
    by_repository: HashMap<String, BTreeSet<Rank>>,
    /// Tasks by the repository and branch they name.
    by_branch: HashMap<(String, String), BTreeSet<Rank>>,
    /// Tasks by the agent they are hinted at.
    by_hint: HashMap<AgentId, BTreeSet<Rank>>,
}

impl Queue {
    /// Add a task, or replace the queued task of the same id.
    pub fn insert(&mut self, task: QueuedTask) {
        self.remove(&task.task_id);
        let r = rank(&task);
        self.all.insert(r);
        match &task.workspace {
            None => {
                self.anywhere.insert(r);
            }
            Some(ws) => {
                let repository = self.by_repository.entry(ws.repository.clone());
                repository.or_default().insert(r);
                if let Some(branch) = &ws.branch {
                    let key = (ws.repository.clone(), branch.clone());
                    self.by_branch.entry(key).or_default().insert(r);
                }
            }
        }
        if let Some(hint) = &task.agent_hint {
            self.by_hint.entry(hint.clone()).or_default().insert(r);
        }
        self.tasks.insert(task.task_id, task);
    }

    /// Remove a task, if it is queued.
    pub fn remove(&mut self, id: &TaskId) -> Option<QueuedTask> {
        let task = self.tasks.remove(id)?;
        let r = rank(&task);
        self.all.remove(&r);
        match &task.workspace {
            None => {
                self.anywhere.remove(&r);
            }
            Some(ws) => {
                take_out(&mut self.by_repository, &ws.repository, &r);
                if let Some(branch) = &ws.branch {
                    let key = (ws.repository.clone(), branch.clone());
                    take_out(&mut self.by_branch, &key, &r);
                }
            }
        }
        if let Some(hint) = &task.agent_hint {
            take_out(&mut self.by_hint, hint, &r);
        }
        Some(task)
    }

    pub fn get(&self, id: &TaskId) -> Option<&QueuedTask> {
        self.tasks.get(id)
    }

    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Every queued task, by id.
    pub fn iter(&self) -> impl Iterator<Item = &QueuedTask> {
        self.tasks.values()
    }

    /// The best task for `agent`, leaving out those `skip` names: the same task as
    /// [`best_task_for`] over every queued task `skip` leaves in.
    pub fn best_for(
        &self,
        agent: &AgentProfile,
        now: DateTime<Utc>,
        hint_grace: Duration,
        skip: impl Fn(&TaskId) -> bool,
    ) -> Option<&QueuedTask> {
        let takes = |t: &&QueuedTask| !skip(&t.task_id) && may_take(t, agent, now, hint_grace);
        self.best_hinted(agent, now, hint_grace, &skip).or_else(|| {
            self.tiers(agent)
                .find_map(|tier| self.tasks_of(tier).find(takes))
        })
    }

    /// [`Self::best_for`] and up to `few - 1` more tasks as good but for their age: of
    /// the same tier and priority, next in age. A task hinted at this agent comes
    /// alone (it is meant for this agent, no other will pick it).
    pub fn best_few_for(
        &self,
        agent: &AgentProfile,
        now: DateTime<Utc>,
        hint_grace: Duration,
        skip: impl Fn(&TaskId) -> bool,
        few: usize,
    ) -> Vec<&QueuedTask> {
        if let Some(best) = self.best_hinted(agent, now, hint_grace, &skip) {
            return vec![best];
        }
        let takes = |t: &&QueuedTask| !skip(&t.task_id) && may_take(t, agent, now, hint_grace);
        for tier in self.tiers(agent) {
            let mut takeable = self.tasks_of(tier).filter(takes);
            let Some(best) = takeable.next() else {
                continue;
            };
            let mut found = vec![best];
            found.extend(
                takeable
                    .take_while(|t| t.priority == best.priority)
                    .take(few.saturating_sub(1)),
            );
            return found;
        }
        Vec::new()
    }

    /// The best of the tasks hinted at `agent` (the first tier, and few, so ranked in
    /// full), if it may take one.
    fn best_hinted(
        &self,
        agent: &AgentProfile,
        now: DateTime<Utc>,
        hint_grace: Duration,
        skip: &impl Fn(&TaskId) -> bool,
    ) -> Option<&QueuedTask> {
        let hinted = self.by_hint.get(&agent.agent_id)?;
        let candidates = self.tasks_of(hinted).filter(|t| !skip(&t.task_id));
        best_task_for(agent, candidates, now, hint_grace)
    }

    /// The tiers after the hinted one, best first: the agent's branch, its repository,
    /// no workspace named, every task. Past the hinted tier, every task hinted at this
    /// agent has been found untakeable, so the tiers need not leave them out; within
    /// a tier the first takeable task is its best; and a tier already passed has
    /// nothing takeable left in it, so each later one (a superset, for the repository
    /// and `all`) yields only its own tier's tasks.
    fn tiers<'a>(&'a self, agent: &AgentProfile) -> impl Iterator<Item = &'a BTreeSet<Rank>> {
        let ws = agent.workspace.as_ref();
        let same_branch = ws.and_then(|w| {
            let branch = w.branch.as_ref()?;
            self.by_branch.get(&(w.repository.clone(), branch.clone()))
        });
        let same_repository = ws.and_then(|w| self.by_repository.get(&w.repository));
        [
            same_branch,
            same_repository,
            Some(&self.anywhere),
            Some(&self.all),
        ]
        .into_iter()
        .flatten()
    }

    fn tasks_of<'a>(&'a self, tier: &'a BTreeSet<Rank>) -> impl Iterator<Item = &'a QueuedTask> {
        tier.iter()
            .filter_map(|(_, _, id)| self.tasks.get(&TaskId::from_uuid(*id)))
    }
}

#[cfg(test)]
mod tests;
