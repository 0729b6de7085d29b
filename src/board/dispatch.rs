//! Dispatch: putting tasks on the board and handing each to exactly one waiting agent.
//!
//! A waiting agent is a parked oneshot ([`Waiter`]). Whoever makes a task QUEUED offers
//! it: a send picks the best waiter *before* appending and appends `task.queued`,
//! `task.assigned` and `task.delivered` together (one commit from send to
//! reservation); a requeue, a review sent back, or a task queued by another process
//! wakes the best waiter with the task id, marked as *being reserved* in this process
//! ([`Reservation`]), and the waiter appends the reservation with the stream version it
//! decided on. Across processes the version decides: the loser's append conflicts and
//! its agent looks again; while that happens, this process's waiters pick at random
//! among the best few queued tasks instead of all reaching for the oldest.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use cqrs_es::Aggregate;
use tokio::sync::oneshot;
use uuid::Uuid;

use crate::domain::Decide;
use crate::domain::ids::{AgentId, IdempotencyKey, TaskId};
use crate::domain::task::{Task, TaskCommand, TaskEvent};
use crate::log::{AppendRequest, ExpectedVersion, Metadata};
use crate::store::{StoreError, domain_io};
use crate::telemetry;

use super::matching::{AgentProfile, best_agent_for};
use super::views::TaskView;
use super::{Board, BoardError, Caller, NewTask, task_stream, view};

/// Names a task sent with an idempotency key (UUID v5 of the sender and the key).
const IDEMPOTENCY_NAMESPACE: Uuid = Uuid::from_u128(0x6a0c_5f2e_9d1b_4c7a_8e3f_2b6d_1a4c_9e70);

/// How many tasks, as good as the best but for their age, a waiter picks among while
/// this process's reservations lose to other processes' (see [`spread_pick`]).
const SPREAD_AMONG: usize = 32;

/// How long after a lost reservation waiters keep spreading their picks.
const CONTENDED_FOR: Duration = Duration::seconds(10);

/// A waiter's pick among `n` candidates while other processes take from the same
/// queue: at random. Every process's view of the queue is alike, so waiters of
/// different servers reaching for a task at the same moment would all reach for the
/// oldest, and all but one reservation would conflict (an append, a read of the
/// stream and a decision wasted each: about two a task with four busy servers, whose
/// reservations take milliseconds to reach each other's views while a dozen agents
/// come to wait). Spread over the best 32 they mostly miss each other (BENCHMARKS.md,
/// "Servers at saturation": 0.7 conflicts a lifecycle instead of 2.1); the price is
/// that tasks of one priority start only roughly in age order, as across servers
/// they already did. A process whose commands never find a task moved on by another
/// writer (one server alone) never spreads.
fn spread_pick(n: usize) -> usize {
    use std::hash::BuildHasher;
    if n < 2 {
        return 0;
    }
    // A fresh `RandomState` is keyed anew each time: a random number without a
    // generator.
    (std::collections::hash_map::RandomState::new().hash_one(n) % n as u64) as usize
}

/// An agent waiting for a task.
pub(super) struct Waiter {
    id: u64,
    profile: AgentProfile,
    reply: oneshot::Sender<Offer>,
}

/// What a waiting agent is woken with.
enum Offer {
    /// A queued task it may take: it reserves it itself.
    Look(Reservation),
    /// A task already reserved for it, in the same append that queued it.
    Reserved(Box<TaskView>),
}

/// A task marked as being reserved by one waiter of this process (so no other local
/// waiter takes it). Dropping it clears the mark and offers the task again if it is
/// still queued, so a waiter that goes away (a client that disconnects mid-request,
/// an offer never read) cannot leave the mark behind.
struct Reservation {
    board: Board,
    task: TaskId,
    armed: bool,
}

impl Reservation {
    /// Forget the mark without offering the task (the caller clears it itself).
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.armed {
            self.board.unreserve(self.task);
        }
    }
}

impl Board {
    /// Put a task on the board. With an idempotency key, sending the same request again
    /// returns the task sent first (`false`: not created now).
    pub async fn send(
        &self,
        new: NewTask,
        by: &Caller,
        idempotency_key: Option<&IdempotencyKey>,
    ) -> Result<(TaskView, bool), BoardError> {
        if let Some(w) = &new.workspace
            && w.repository.trim().is_empty()
        {
            return Err(BoardError::Invalid(
                "workspace.repository must not be empty".into(),
            ));
        }
        let task_id = match idempotency_key {
            Some(key) => TaskId::from_uuid(key.derive(&IDEMPOTENCY_NAMESPACE, &by.actor())),
            None => TaskId::new(),
        };
        let events = Task::default().decide(TaskCommand::Queue {
            task_id,
            prompt: new.prompt.clone(),
            required_capabilities: new.capabilities.clone(),
            workspace: new.workspace.clone(),
            agent_hint: new.agent_hint.clone(),
            priority: new.priority,
            review_required: new.review_required,
            runner: new.runner,
            run_step: None,
            at: self.now(),
        })?;
        let stream = task_stream(task_id);
        let mut task = Task::default();
        for e in events.clone() {
            task.apply(e);
        }
        // A waiting agent that may take the task gets it in the same append: one
        // commit from send to reservation.
        let waiter = self.take_waiter(&task);
        let mut appended =
            domain_io::append_request(&stream, 0, &events, &Metadata::actor(by.actor()))?.events;
        if let Some(w) = &waiter {
            let reserve = reservation(
                &task,
                &w.profile.agent_id,
                events[0].at(),
                self.inner.config.ack_timeout,
            )?;
            for e in &reserve {
                task.apply(e.clone());
            }
            let actor = Metadata::actor(Caller::Agent(w.profile.agent_id.clone()).actor());
            for e in &reserve {
                appended.push(domain_io::encode(&stream, e, &actor)?);
            }
        }
        let version = appended.len() as i64;
        let append = AppendRequest::new(stream.clone(), ExpectedVersion::NoStream, appended);
        let recorded = task.prompt().to_string();
        match self.inner.store.append(append).await {
            Ok(_) => {
                let view = self.observe(task_id, task, version);
                let view = self.opened(view, &recorded).await?;
                if waiter.is_some() {
                    // Reserved in the append that queued it.
                    telemetry::task_dispatched(0.0);
                }
                if let Some(w) = waiter {
                    // A waiter that left meanwhile leaves the task PENDING_ACK: the ack
                    // timeout gives it back to the queue.
                    let _ = w.reply.send(Offer::Reserved(Box::new(view.clone())));
                }
                Ok((view, true))
            }
            Err(StoreError::Conflict { .. }) if idempotency_key.is_some() => {
                self.return_waiter(waiter);
                let (task, version) = self.load_task(task_id).await?;
                let same = task.prompt() == new.prompt
                    && *task.required_capabilities() == new.capabilities
                    && task.workspace() == new.workspace.as_ref();
                if !same {
                    return Err(BoardError::IdempotencyMismatch {
                        key: idempotency_key.map(|k| k.to_string()).unwrap_or_default(),
                        task: task_id,
                    });
                }
                let view = TaskView::of(&task, version);
                Ok((self.opened(view, task.prompt()).await?, false))
            }
            Err(e) => {
                self.return_waiter(waiter);
                Err(e.into())
            }
        }
    }

    /// The best waiting agent for a new task, taken out of the waiters.
    fn take_waiter(&self, task: &Task) -> Option<Waiter> {
        let id = task.id()?;
        let queued = view::queued_task(id, task);
        let now = self.now();
        let mut st = self.state();
        st.waiters.retain(|w| !w.reply.is_closed());
        let profiles: Vec<&AgentProfile> = st.waiters.iter().map(|w| &w.profile).collect();
        let i = best_agent_for(&queued, &profiles, now, self.inner.config.hint_grace)?;
        Some(st.waiters.remove(i))
    }

    /// Put a waiter back in its place in line (the append that would have given it a
    /// task failed).
    fn return_waiter(&self, waiter: Option<Waiter>) {
        if let Some(w) = waiter {
            let mut st = self.state();
            let at = st
                .waiters
                .iter()
                .position(|o| o.id > w.id)
                .unwrap_or(st.waiters.len());
            st.waiters.insert(at, w);
        }
    }

    /// Wait up to `timeout` (capped by the server) for a task for `agent`: the task comes
    /// back reserved for it (PENDING_ACK, to be acked before its deadline).
    pub async fn wait_for_prompt(
        &self,
        agent: &AgentId,
        timeout: Option<StdDuration>,
    ) -> Result<Option<TaskView>, BoardError> {
        let timeout = timeout
            .unwrap_or(self.inner.config.default_wait)
            .min(self.inner.config.max_wait);
        let deadline = tokio::time::Instant::now() + timeout;
        let mut closed = self.inner.closed.subscribe();
        self.touch(agent);
        // No span of its own: the long poll is the request (REST) or tool call (MCP)
        // that carries it, already a span.
        self.wait_loop(agent, deadline, &mut closed).await
    }

    async fn wait_loop(
        &self,
        agent: &AgentId,
        deadline: tokio::time::Instant,
        closed: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Result<Option<TaskView>, BoardError> {
        loop {
            if *closed.borrow() {
                return Ok(None);
            }
            let (found, mut rx, waiter) = {
                let mut st = self.state();
                let Some(profile) = st.view.profile(agent) else {
                    return Err(match st.view.agent(agent) {
                        Some(_) => BoardError::AgentRetired(agent.clone()),
                        None => BoardError::AgentNotFound(agent.clone()),
                    });
                };
                let now = self.now();
                let state = &*st;
                let queue = state.view.queue();
                let grace = self.inner.config.hint_grace;
                let skip = |t: &TaskId| state.reserving.contains(t);
                let contended = state
                    .contended_at
                    .is_some_and(|at| now - at < CONTENDED_FOR);
                let best = if contended {
                    let few = queue.best_few_for(&profile, now, grace, skip, SPREAD_AMONG);
                    few.get(spread_pick(few.len())).map(|t| t.task_id)
                } else {
                    queue
                        .best_for(&profile, now, grace, skip)
                        .map(|t| t.task_id)
                };
                if let Some(task) = best {
                    st.reserving.insert(task);
                    let mark = Reservation {
                        board: self.clone(),
                        task,
                        armed: true,
                    };
                    (Some(mark), None, 0)
                } else {
                    let (reply, rx) = oneshot::channel();
                    st.next_waiter += 1;
                    let id = st.next_waiter;
                    st.waiters.push(Waiter { id, profile, reply });
                    (None, Some(rx), id)
                }
            };
            let offer = match (found, rx.as_mut()) {
                (Some(mark), _) => Offer::Look(mark),
                (None, Some(rx)) => {
                    tokio::select! {
                        got = &mut *rx => match got {
                            Ok(offer) => offer,
                            Err(_) => return Ok(None),
                        },
                        _ = tokio::time::sleep_until(deadline) => {
                            if self.forget_waiter(waiter) {
                                return Ok(None);
                            }
                            // Offered a task just as the time ran out: take it.
                            match rx.await {
                                Ok(offer) => offer,
                                Err(_) => return Ok(None),
                            }
                        }
                        _ = closed.changed() => {
                            self.forget_waiter(waiter);
                            match rx.try_recv() {
                                Ok(Offer::Look(mark)) => drop(mark),
                                Ok(Offer::Reserved(view)) => return Ok(Some(*view)),
                                Err(_) => {}
                            }
                            return Ok(None);
                        }
                    }
                }
                (None, None) => return Ok(None),
            };
            let mark = match offer {
                Offer::Reserved(view) => return Ok(Some(*view)),
                Offer::Look(mark) => mark,
            };
            // Offered by the log's tail as the task was queued, it may have been
            // reserved by the same commit (another server's send with an agent
            // waiting there), applied since: then there is nothing to try, and no
            // reason to read the stream to be refused again. (A view behind the log
            // cannot show a reservation that is not there.)
            let queued = self.state().view.queue().get(&mark.task).is_some();
            // The mark is cleared when `mark` drops, even if this future is dropped
            // while the append is in flight.
            let reserved = if queued {
                self.reserve(mark.task, agent).await
            } else {
                Ok(None)
            };
            drop(mark);
            if let Some(view) = reserved? {
                return Ok(Some(view));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
        }
    }

    /// Remove a waiter; false if it was already woken with a task.
    fn forget_waiter(&self, id: u64) -> bool {
        let mut st = self.state();
        let before = st.waiters.len();
        st.waiters.retain(|w| w.id != id);
        st.waiters.len() != before
    }

    /// Reserve `task` for `agent` (ASSIGNED then PENDING_ACK, one append). `None` when
    /// the task is no longer queued (another agent or server took it).
    async fn reserve(&self, task: TaskId, agent: &AgentId) -> Result<Option<TaskView>, BoardError> {
        let ack_timeout = self.inner.config.ack_timeout;
        // When the task entered QUEUED (its last event), as decided on.
        let queued_since = AtomicI64::new(i64::MIN);
        let result = self
            .act(
                task,
                &Caller::Agent(agent.clone()),
                "task reserve",
                |t, now| {
                    if let Some(since) = t.updated_at() {
                        queued_since.store(since.timestamp_micros(), Ordering::Relaxed);
                    }
                    reservation(t, agent, now, ack_timeout)
                },
            )
            .await;
        match result {
            Ok(view) => {
                let since = queued_since.load(Ordering::Relaxed);
                if since != i64::MIN {
                    let waited = self.now().timestamp_micros() - since;
                    telemetry::task_dispatched(waited as f64 / 1e6);
                }
                Ok(Some(view))
            }
            Err(BoardError::Task(_))
            | Err(BoardError::TaskNotFound(_))
            | Err(BoardError::Busy(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Clear the local reservation mark; a task still queued is offered again.
    fn unreserve(&self, task: TaskId) {
        self.state().reserving.remove(&task);
        self.offer(task);
    }

    /// Offer a queued task to the best waiting agent, if any may take it.
    pub(super) fn offer(&self, task: TaskId) {
        let now = self.now();
        let grace = self.inner.config.hint_grace;
        let mut st = self.state();
        if st.reserving.contains(&task) {
            return;
        }
        let Some(queued) = st.view.queued_task(&task) else {
            return;
        };
        loop {
            let profiles: Vec<&AgentProfile> = st.waiters.iter().map(|w| &w.profile).collect();
            let Some(i) = best_agent_for(&queued, &profiles, now, grace) else {
                return;
            };
            let waiter = st.waiters.remove(i);
            st.reserving.insert(task);
            let mark = Reservation {
                board: self.clone(),
                task,
                armed: true,
            };
            match waiter.reply.send(Offer::Look(mark)) {
                Ok(()) => return,
                Err(Offer::Look(mark)) => {
                    // That waiter is gone: clear the mark here (the lock is held) and
                    // try the next one.
                    mark.disarm();
                    st.reserving.remove(&task);
                }
                Err(Offer::Reserved(_)) => {}
            }
        }
    }
}

/// The events that reserve a queued task for `agent`: ASSIGNED, then PENDING_ACK with
/// its ack deadline.
fn reservation(
    task: &Task,
    agent: &AgentId,
    now: DateTime<Utc>,
    ack_timeout: Duration,
) -> Result<Vec<TaskEvent>, BoardError> {
    let mut scratch = task.clone();
    let assign = scratch.decide(TaskCommand::Assign {
        agent: agent.clone(),
        at: now,
    })?;
    for e in assign.clone() {
        scratch.apply(e);
    }
    let deliver = scratch.decide(TaskCommand::Deliver {
        agent: agent.clone(),
        ack_deadline: now + ack_timeout,
        at: now,
    })?;
    Ok(assign.into_iter().chain(deliver).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_spread_over_the_candidates() {
        assert_eq!(spread_pick(0), 0);
        assert_eq!(spread_pick(1), 0);
        let mut seen = [0u32; SPREAD_AMONG];
        for _ in 0..100 * SPREAD_AMONG {
            seen[spread_pick(SPREAD_AMONG)] += 1;
        }
        // Uniform would be 100 each: every one picked, none four times as often.
        assert!(seen.iter().all(|&n| n > 0 && n < 400), "{seen:?}");
    }
}
