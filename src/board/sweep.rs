//! The board's timers: delivered tasks not acked by their deadline, and tasks held by
//! agents that stopped calling, go back to the queue; hinted tasks whose grace ended
//! are offered to any capable agent. Everything is decided at a `now` passed in (the
//! injected clock), so tests drive the timers by moving the clock.

use std::collections::{HashMap, HashSet};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::domain::Decide;
use crate::domain::ids::TaskId;
use crate::domain::task::{RequeueReason, TaskCommand, TaskStatus};

use super::{Board, BoardError, Caller};

impl Board {
    /// Requeue what is overdue at `now`: delivered tasks not acked by their deadline, and
    /// tasks held by agents not seen for `lost_after`. Also offers hinted tasks whose
    /// grace ended to waiting agents. Returns what was requeued.
    pub async fn sweep(
        &self,
        now: DateTime<Utc>,
    ) -> Result<Vec<(TaskId, RequeueReason)>, BoardError> {
        let (due, hinted) = {
            let st = self.state();
            let lost_after = self.inner.config.lost_after;
            let mut due = Vec::new();
            for entry in st.view.held() {
                let task = &entry.state;
                let Some(id) = task.id() else { continue };
                if task.status() == Some(TaskStatus::PendingAck)
                    && task.ack_deadline().is_some_and(|d| d <= now)
                {
                    due.push((id, RequeueReason::AckTimeout));
                    continue;
                }
                let seen = task
                    .assignee()
                    .and_then(|a| st.last_seen.get(a).copied())
                    .into_iter()
                    .chain(task.updated_at())
                    .max();
                if seen.is_some_and(|s| s + lost_after <= now) {
                    due.push((id, RequeueReason::AgentLost));
                }
            }
            let grace = self.inner.config.hint_grace;
            let hinted: Vec<TaskId> = st
                .view
                .queued()
                .filter(|t| t.agent_hint.is_some() && t.queued_at + grace <= now)
                .map(|t| t.task_id)
                .collect();
            (due, hinted)
        };
        let due = self.still_lost(due, now).await?;
        let mut requeued = Vec::new();
        for (id, reason) in due {
            let result = self
                .act(id, &Caller::User("awl".into()), "task requeue", |t, _| {
                    Ok(t.decide(TaskCommand::Requeue { reason, at: now })?)
                })
                .await;
            match result {
                Ok(_) => requeued.push((id, reason)),
                // Acked, finished or requeued by someone else meanwhile.
                Err(BoardError::Task(_)) | Err(BoardError::Busy(_)) => {}
                Err(e) => return Err(e),
            }
        }
        for id in hinted {
            self.offer(id);
        }
        Ok(requeued)
    }

    /// Drop from `due` the agent-lost requeues of agents that called another server
    /// recently (the shared presence table).
    async fn still_lost(
        &self,
        due: Vec<(TaskId, RequeueReason)>,
        now: DateTime<Utc>,
    ) -> Result<Vec<(TaskId, RequeueReason)>, BoardError> {
        let holders: HashMap<TaskId, String> = {
            let st = self.state();
            due.iter()
                .filter(|(_, r)| *r == RequeueReason::AgentLost)
                .filter_map(|(id, _)| {
                    let agent = st.view.task(id)?.state.assignee()?.to_string();
                    Some((*id, agent))
                })
                .collect()
        };
        if holders.is_empty() {
            return Ok(due);
        }
        let agents: Vec<String> = holders
            .values()
            .cloned()
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        let seen = self.inner.store.presence(&agents).await?;
        let lost_after = self.inner.config.lost_after;
        Ok(due
            .into_iter()
            .filter(|(id, reason)| {
                *reason != RequeueReason::AgentLost
                    || holders
                        .get(id)
                        .and_then(|a| seen.get(a))
                        .is_none_or(|at| *at + lost_after <= now)
            })
            .collect())
    }

    /// Run [`Board::sweep`] every `every` with the board's clock until `stop`.
    pub async fn sweep_every(&self, every: StdDuration, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(every) => {}
            }
            if let Err(e) = self.sweep(self.now()).await {
                tracing::warn!(error = %e, "board sweep failed");
            }
        }
    }
}
