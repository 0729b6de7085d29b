//! The agent board: tasks handed to external agents that pull them.
//!
//! [`Board`] is the one service behind every interface (REST, MCP, the CLI): it turns
//! each call into a decision of the task or agent aggregate, appended with the stream
//! version it was made on, and keeps an in-memory [`view::BoardView`] of every task and
//! agent, fed by its own appends and by the log's tail (so tasks queued by workflow
//! workers or other servers are seen too).
//!
//! Dispatch. An agent's `wait_for_prompt` either finds its best queued task at once or
//! waits as a *waiter*. When a task becomes QUEUED (sent, requeued, sent back from
//! review), it is offered to the best waiter (`matching`): the waiter is woken with
//! that task, which is marked *reserving* in this process so no other local waiter
//! takes it, and reserves it by appending ASSIGNED and PENDING_ACK in one append.
//! Across processes, the stream version decides: of two servers reserving one task,
//! one append conflicts and its waiter looks again. No sleep loop is involved: waiters
//! are woken by the append (same process) or by the log's notification (others).
//!
//! Time comes from an injected clock; [`Board::sweep`] requeues tasks whose ack
//! deadline passed and tasks held by agents that stopped calling in, so tests drive
//! both by moving the clock.

mod error;
pub mod matching;
mod view;
pub mod wire;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use cqrs_es::Aggregate;
use futures_util::StreamExt;
use tokio::sync::{oneshot, watch};
use uuid::Uuid;

use crate::clock::Clock;
use crate::domain::Decide;
use crate::domain::agent::{Agent, AgentCommand};
use crate::domain::ids::{AgentId, QuestionId, RunId, TaskId};
use crate::domain::task::{CompletedBy, RequeueReason, Task, TaskCommand, TaskEvent, TaskStatus};
use crate::domain::workspace::{Capabilities, Workspace};
use crate::log::{EventFilter, Metadata, StreamRef, StreamType};
use crate::store::{EventStore, StoreError, domain_io};

pub use error::BoardError;
use matching::{AgentProfile, best_agent_for, best_task_for};
use view::{Applied, BoardView};
use wire::*;

/// How many times a decision is retried when another writer got there first.
const ATTEMPTS: usize = 8;

/// How often an agent's calls are written to the shared presence table.
const PRESENCE_EVERY: Duration = Duration::seconds(10);

/// Names a task sent with an `Idempotency-Key` (UUID v5 of the sender and the key).
const IDEMPOTENCY_NAMESPACE: Uuid = Uuid::from_u128(0x6a0c_5f2e_9d1b_4c7a_8e3f_2b6d_1a4c_9e70);

/// The board's timings.
#[derive(Debug, Clone)]
pub struct BoardConfig {
    /// How long an agent has to ack a delivered task before it is requeued.
    pub ack_timeout: Duration,
    /// A task whose agent has not called in for this long is requeued.
    pub lost_after: Duration,
    /// How long a task hinted at one agent is kept for it.
    pub hint_grace: Duration,
    /// The longest `wait_for_prompt` the server allows.
    pub max_wait: StdDuration,
    /// The wait when the caller names none.
    pub default_wait: StdDuration,
}

impl Default for BoardConfig {
    fn default() -> Self {
        Self {
            ack_timeout: Duration::seconds(30),
            lost_after: Duration::minutes(5),
            hint_grace: Duration::seconds(30),
            max_wait: StdDuration::from_secs(60),
            default_wait: StdDuration::from_secs(30),
        }
    }
}

/// The agent board service. Cheap to clone.
#[derive(Clone)]
pub struct Board {
    inner: Arc<Inner>,
}

struct Inner {
    store: EventStore,
    clock: Clock,
    config: BoardConfig,
    state: Mutex<State>,
    /// Set when the board closes: waits end with no task.
    closed: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    view: BoardView,
    waiters: Vec<Waiter>,
    reserving: HashSet<TaskId>,
    next_waiter: u64,
    /// When each agent last called this process (heartbeats are not events).
    last_seen: HashMap<AgentId, DateTime<Utc>>,
    /// When this process last wrote each agent's row of the presence table.
    presence_written: HashMap<AgentId, DateTime<Utc>>,
    /// The log position the view has followed to.
    position: i64,
}

struct Waiter {
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

/// Who is calling: an agent (acting on its own tasks) or a person / awl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Agent(AgentId),
    User(String),
}

impl Caller {
    /// The actor recorded in event metadata.
    pub fn actor(&self) -> String {
        match self {
            Self::Agent(a) => format!("agent:{a}"),
            Self::User(u) => u.clone(),
        }
    }
}

/// Filters of a task listing.
#[derive(Debug, Clone, Default)]
pub struct TaskQuery {
    pub statuses: Vec<TaskStatus>,
    pub assignee: Option<AgentId>,
    pub run_id: Option<RunId>,
    pub after: Option<String>,
    pub limit: usize,
}

impl Board {
    /// Open the board: fold every task and agent stream of the log into the view.
    pub async fn open(
        store: EventStore,
        clock: Clock,
        config: BoardConfig,
    ) -> Result<Self, BoardError> {
        let mut view = BoardView::default();
        let filter = board_filter();
        let mut after = 0;
        loop {
            let (events, scanned) = store.read_page(after, 5_000, &filter).await?;
            for event in &events {
                // A snapshot read in position order cannot skip a version of a stream.
                view.apply(event)?;
            }
            if scanned == after {
                break;
            }
            after = scanned;
        }
        let (closed, _) = watch::channel(false);
        let state = State {
            view,
            position: after,
            ..State::default()
        };
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                clock,
                config,
                state: Mutex::new(state),
                closed,
            }),
        })
    }

    pub fn config(&self) -> &BoardConfig {
        &self.inner.config
    }

    pub fn store(&self) -> &EventStore {
        &self.inner.store
    }

    fn now(&self) -> DateTime<Utc> {
        (self.inner.clock)()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves a consistent view (every update is
        // one assignment), so a poisoned lock is still usable.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes to `true` when the board closes (the server is stopping): long-lived
    /// responses such as event streams end then.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.inner.closed.subscribe()
    }

    /// End every wait (with no task) and refuse new ones: the server is stopping.
    pub fn close(&self) {
        let _ = self.inner.closed.send(true);
        self.state().waiters.clear();
    }

    /// Follow the log from where the snapshot ended until `stop`, applying task and
    /// agent events written by anyone and offering newly queued tasks to waiters.
    pub async fn follow(&self, mut stop: watch::Receiver<bool>) -> Result<(), BoardError> {
        let after = self.state().position;
        let tail = self.inner.store.tail(after, board_filter());
        tokio::pin!(tail);
        loop {
            let event = tokio::select! {
                _ = stop.changed() => return Ok(()),
                e = tail.next() => match e {
                    Some(e) => e?,
                    None => return Ok(()),
                },
            };
            let applied = {
                let mut st = self.state();
                st.position = event.position;
                st.view.apply(&event)?
            };
            match applied {
                Applied::Task(id) => self.offer(id),
                Applied::Gap(stream) if stream.kind == StreamType::Task => {
                    if let Ok(id) = stream.id.parse::<TaskId>() {
                        self.reload_task(id).await?;
                    }
                }
                Applied::Gap(stream) => {
                    if let Ok(id) = AgentId::try_from(stream.id.as_str()) {
                        self.reload_agent(&id).await?;
                    }
                }
                Applied::Nothing | Applied::Agent(_) => {}
            }
        }
    }

    // ---- agents -------------------------------------------------------------------

    /// Note that `agent` called in (any call counts). The shared presence table is
    /// written at most every [`PRESENCE_EVERY`] per agent, in the background.
    pub fn touch(&self, agent: &AgentId) {
        let now = self.now();
        let write = {
            let mut st = self.state();
            st.last_seen.insert(agent.clone(), now);
            let due = st
                .presence_written
                .get(agent)
                .is_none_or(|at| *at + PRESENCE_EVERY <= now || *at > now);
            if due {
                st.presence_written.insert(agent.clone(), now);
            }
            due
        };
        if write && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let store = self.inner.store.clone();
            let agent = agent.to_string();
            runtime.spawn(async move {
                if let Err(e) = store.record_presence(&agent, now).await {
                    tracing::warn!(error = %e, agent, "could not record the agent's presence");
                }
            });
        }
    }

    /// Register an agent or update its capabilities and workspace.
    pub async fn register(
        &self,
        agent_id: AgentId,
        capabilities: Capabilities,
        workspace: Option<Workspace>,
        by: &Caller,
    ) -> Result<AgentView, BoardError> {
        if let Some(w) = &workspace
            && w.repository.trim().is_empty()
        {
            return Err(BoardError::Invalid(
                "workspace.repository must not be empty".into(),
            ));
        }
        self.touch(&agent_id);
        let stream = StreamRef::new(StreamType::Agent, agent_id.to_string());
        for _ in 0..ATTEMPTS {
            let (mut agent, version) = domain_io::load::<Agent>(&self.inner.store, &stream).await?;
            let events = agent.decide(AgentCommand::Register {
                agent_id: agent_id.clone(),
                capabilities: capabilities.clone(),
                workspace: workspace.clone(),
                at: self.now(),
            })?;
            let new_version = version + events.len() as i64;
            if !events.is_empty() {
                let request = domain_io::append_request(
                    &stream,
                    version,
                    &events,
                    &Metadata::actor(by.actor()),
                )?;
                match self.inner.store.append(request).await {
                    Ok(_) => {}
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
                for e in events {
                    agent.apply(e);
                }
            }
            let mut st = self.state();
            st.view
                .put_agent(agent_id.clone(), agent.clone(), new_version);
            let seen = st.last_seen.get(&agent_id).copied();
            return Ok(AgentView::of(&agent, new_version, seen));
        }
        Err(BoardError::Busy(stream.to_string()))
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

    // ---- sending and waiting ----------------------------------------------------------

    /// Put a task on the board. With an idempotency key, sending the same request again
    /// returns the task sent first (`false`: not created now).
    pub async fn send(
        &self,
        request: SendTaskRequest,
        by: &Caller,
        idempotency_key: Option<&str>,
    ) -> Result<(TaskView, bool), BoardError> {
        let agent_hint = request
            .agent_hint
            .as_deref()
            .map(AgentId::try_from)
            .transpose()?;
        if let Some(w) = &request.workspace
            && w.repository.trim().is_empty()
        {
            return Err(BoardError::Invalid(
                "workspace.repository must not be empty".into(),
            ));
        }
        let task_id = match idempotency_key {
            Some(key) => TaskId::from_uuid(Uuid::new_v5(
                &IDEMPOTENCY_NAMESPACE,
                format!("{}\n{key}", by.actor()).as_bytes(),
            )),
            None => TaskId::new(),
        };
        let capabilities = Capabilities::new(&request.capabilities);
        let workspace = request.workspace.clone().map(Workspace::from);
        let events = Task::default().decide(TaskCommand::Queue {
            task_id,
            prompt: request.prompt.clone(),
            required_capabilities: capabilities.clone(),
            workspace: workspace.clone(),
            agent_hint,
            priority: request.priority,
            review_required: request.review_required,
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
        let mut new =
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
                new.push(domain_io::encode(&stream, e, &actor)?);
            }
        }
        let version = new.len() as i64;
        let append = crate::log::AppendRequest::new(
            stream.clone(),
            crate::log::ExpectedVersion::NoStream,
            new,
        );
        match self.inner.store.append(append).await {
            Ok(_) => {
                let view = TaskView::of(&task, version);
                self.observe(task_id, task, version);
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
                let same = task.prompt() == request.prompt
                    && *task.required_capabilities() == capabilities
                    && task.workspace() == workspace.as_ref();
                if !same {
                    return Err(BoardError::IdempotencyMismatch {
                        key: idempotency_key.unwrap_or_default().to_string(),
                        task: task_id,
                    });
                }
                Ok((TaskView::of(&task, version), false))
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
                let best = best_task_for(
                    &profile,
                    state
                        .view
                        .queued()
                        .filter(|t| !state.reserving.contains(&t.task_id)),
                    now,
                    self.inner.config.hint_grace,
                )
                .map(|t| t.task_id);
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
            // The mark is cleared when `mark` drops, even if this future is dropped
            // while the append is in flight.
            let reserved = self.reserve(mark.task, agent).await;
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
        let result = self
            .act(task, &Caller::Agent(agent.clone()), |t, now| {
                reservation(t, agent, now, ack_timeout)
            })
            .await;
        match result {
            Ok(view) => Ok(Some(view)),
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
    fn offer(&self, task: TaskId) {
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

    // ---- the lifecycle --------------------------------------------------------------

    /// The agent confirms it has the task and starts working.
    pub async fn ack(&self, task: TaskId, agent: &AgentId) -> Result<TaskView, BoardError> {
        self.touch(agent);
        self.command(task, &Caller::Agent(agent.clone()), |now| {
            TaskCommand::Ack {
                agent: agent.clone(),
                at: now,
            }
        })
        .await
    }

    pub async fn progress(
        &self,
        task: TaskId,
        agent: &AgentId,
        message: String,
        percent: Option<u8>,
    ) -> Result<TaskView, BoardError> {
        self.touch(agent);
        self.command(task, &Caller::Agent(agent.clone()), |now| {
            TaskCommand::ReportProgress {
                agent: agent.clone(),
                message: message.clone(),
                percent,
                at: now,
            }
        })
        .await
    }

    pub async fn tool_call(
        &self,
        task: TaskId,
        agent: &AgentId,
        call: ToolCallRequest,
    ) -> Result<TaskView, BoardError> {
        self.touch(agent);
        self.command(task, &Caller::Agent(agent.clone()), |now| {
            TaskCommand::ReportToolCall {
                agent: agent.clone(),
                name: call.name.clone(),
                parameters: call.parameters.clone(),
                duration_ms: call.duration_ms,
                success: call.success,
                at: now,
            }
        })
        .await
    }

    /// The agent blocks on a question; returns the task with its open question.
    pub async fn ask(
        &self,
        task: TaskId,
        agent: &AgentId,
        question: String,
    ) -> Result<TaskView, BoardError> {
        self.touch(agent);
        let question_id = QuestionId::new();
        self.command(task, &Caller::Agent(agent.clone()), |now| {
            TaskCommand::AskQuestion {
                agent: agent.clone(),
                question_id,
                question: question.clone(),
                at: now,
            }
        })
        .await
    }

    /// Answer the task's open question (`question_id` defaults to it).
    pub async fn answer(
        &self,
        task: TaskId,
        question_id: Option<QuestionId>,
        answer: String,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        self.act(task, by, |t, now| {
            let question_id = question_id
                .or_else(|| t.open_question().map(|q| q.question_id))
                .unwrap_or_default();
            Ok(t.decide(TaskCommand::Answer {
                question_id,
                answer: answer.clone(),
                by: by_name.clone(),
                at: now,
            })?)
        })
        .await
    }

    pub async fn submit(
        &self,
        task: TaskId,
        agent: &AgentId,
        branch: Option<String>,
        commit: Option<String>,
        summary: String,
    ) -> Result<TaskView, BoardError> {
        self.touch(agent);
        self.command(task, &Caller::Agent(agent.clone()), |now| {
            TaskCommand::SubmitForReview {
                agent: agent.clone(),
                branch: branch.clone(),
                commit: commit.clone(),
                summary: summary.clone(),
                at: now,
            }
        })
        .await
    }

    pub async fn approve(&self, task: TaskId, by: &Caller) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        self.command(task, by, |now| TaskCommand::Approve {
            by: by_name.clone(),
            at: now,
        })
        .await
    }

    /// Send the work back to the queue; the feedback goes to the next agent.
    pub async fn request_changes(
        &self,
        task: TaskId,
        feedback: String,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        self.command(task, by, |now| TaskCommand::RequestChanges {
            by: by_name.clone(),
            feedback: feedback.clone(),
            at: now,
        })
        .await
    }

    /// Complete a task: by its agent, or by a person (`Caller::User`).
    pub async fn complete(
        &self,
        task: TaskId,
        result: serde_json::Value,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let completed_by = match by {
            Caller::Agent(agent) => {
                self.touch(agent);
                CompletedBy::Agent(agent.clone())
            }
            Caller::User(user) => CompletedBy::User(user.clone()),
        };
        self.command(task, by, |now| TaskCommand::Complete {
            by: completed_by.clone(),
            result: result.clone(),
            at: now,
        })
        .await
    }

    /// Fail a task for good. An agent may fail only a task it holds.
    pub async fn fail(
        &self,
        task: TaskId,
        reason: String,
        error_class: Option<String>,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        let agent = match by {
            Caller::Agent(agent) => {
                self.touch(agent);
                Some(agent.clone())
            }
            Caller::User(_) => None,
        };
        self.act(task, by, |t, now| {
            if let Some(agent) = &agent
                && t.assignee() != Some(agent)
            {
                return Err(BoardError::Forbidden(format!(
                    "task {task} is not held by agent {agent}: an agent may fail only its own task"
                )));
            }
            Ok(t.decide(TaskCommand::Fail {
                by: by_name.clone(),
                reason: reason.clone(),
                error_class: error_class.clone(),
                at: now,
            })?)
        })
        .await
    }

    pub async fn cancel(
        &self,
        task: TaskId,
        reason: String,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        self.command(task, by, |now| TaskCommand::Cancel {
            by: by_name.clone(),
            reason: reason.clone(),
            at: now,
        })
        .await
    }

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
                .act(id, &Caller::User("awl".into()), |t, _| {
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

    // ---- reading ----------------------------------------------------------------------

    /// A task as this server knows it (from the store if the view has not seen it yet).
    pub async fn task(&self, id: TaskId) -> Result<TaskView, BoardError> {
        if let Some(view) = {
            let st = self.state();
            st.view.task(&id).map(|e| TaskView::of(&e.state, e.version))
        } {
            return Ok(view);
        }
        let (task, version) = self.load_task(id).await?;
        Ok(TaskView::of(&task, version))
    }

    /// Tasks, oldest first, filtered and paged (`after`: the `next` of the previous page).
    pub fn tasks(&self, query: &TaskQuery) -> Result<TaskPage, BoardError> {
        let after = query.after.as_deref().map(parse_cursor).transpose()?;
        let limit = query.limit.clamp(1, 1_000);
        let st = self.state();
        let mut rows: Vec<(DateTime<Utc>, Uuid, TaskView)> = st
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
                let key = (
                    e.state.queued_at().unwrap_or_default(),
                    e.state.id().unwrap_or_default().as_uuid(),
                );
                (key.0, key.1, e)
            })
            .filter(|(at, id, _)| after.is_none_or(|a| (*at, *id) > a))
            .map(|(at, id, e)| (at, id, TaskView::of(&e.state, e.version)))
            .collect();
        rows.sort_by_key(|r| (r.0, r.1));
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = if more {
            rows.last()
                .and_then(|(at, id, _)| Some(format!("{}.{id}", at.timestamp_nanos_opt()?)))
        } else {
            None
        };
        Ok(TaskPage {
            tasks: rows.into_iter().map(|(_, _, v)| v).collect(),
            next,
        })
    }

    /// Every event of a task, oldest first: its history.
    pub async fn history(&self, id: TaskId) -> Result<Vec<HistoryEntry>, BoardError> {
        let events = self.inner.store.read_stream(&task_stream(id)).await?;
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

    // ---- deciding and appending ------------------------------------------------------

    /// One command, decided on the task's state at `now`.
    async fn command<F>(&self, task: TaskId, by: &Caller, make: F) -> Result<TaskView, BoardError>
    where
        F: Fn(DateTime<Utc>) -> TaskCommand,
    {
        self.act(task, by, |t, now| Ok(t.decide(make(now))?)).await
    }

    /// Decide on the task's state (the view's, or the store's after a conflict), append
    /// with that version, and wake the run waiting for the task when it ends.
    async fn act<F>(&self, id: TaskId, by: &Caller, decide: F) -> Result<TaskView, BoardError>
    where
        F: Fn(&Task, DateTime<Utc>) -> Result<Vec<TaskEvent>, BoardError>,
    {
        let stream = task_stream(id);
        let mut cached = {
            let st = self.state();
            st.view.task(&id).map(|e| (e.state.clone(), e.version))
        };
        for _ in 0..ATTEMPTS {
            let (from_cache, (mut task, version)) = match cached.take() {
                Some(known) => (true, known),
                None => (false, self.load_task(id).await?),
            };
            let now = self.now();
            let events = match decide(&task, now) {
                Ok(events) => events,
                // The view may be behind another server's write: refuse only on the
                // stream as stored.
                Err(_) if from_cache => continue,
                Err(e) => return Err(e),
            };
            if events.is_empty() {
                return Ok(TaskView::of(&task, version));
            }
            for e in &events {
                task.apply(e.clone());
            }
            let request =
                domain_io::append_request(&stream, version, &events, &Metadata::actor(by.actor()))?;
            let wake = task
                .is_terminal()
                .then(|| task.run_step().map(|r| r.run_id))
                .flatten();
            match self.commit(request, wake, now).await {
                Ok(()) => {}
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
            let new_version = version + events.len() as i64;
            let view = TaskView::of(&task, new_version);
            self.observe(id, task, new_version);
            return Ok(view);
        }
        Err(BoardError::Busy(stream.to_string()))
    }

    async fn commit(
        &self,
        request: crate::log::AppendRequest,
        wake: Option<RunId>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let Some(run_id) = wake else {
            return self.inner.store.append(request).await.map(|_| ());
        };
        let mut tx = self.inner.store.begin().await?;
        tx.wake_run(&run_id.to_string(), now).await?;
        if let Err(e) = tx.append(&[request]).await {
            tx.rollback().await?;
            return Err(e);
        }
        tx.commit().await
    }

    /// Record a task's new state in the view and offer it if it is queued.
    fn observe(&self, id: TaskId, task: Task, version: i64) {
        let queued = task.status() == Some(TaskStatus::Queued);
        self.state().view.put_task(id, task, version);
        if queued {
            self.offer(id);
        }
    }

    async fn load_task(&self, id: TaskId) -> Result<(Task, i64), BoardError> {
        let (task, version) = domain_io::load::<Task>(&self.inner.store, &task_stream(id)).await?;
        if version == 0 {
            return Err(BoardError::TaskNotFound(id));
        }
        Ok((task, version))
    }

    async fn reload_task(&self, id: TaskId) -> Result<(), BoardError> {
        let (task, version) = self.load_task(id).await?;
        self.observe(id, task, version);
        Ok(())
    }

    async fn reload_agent(&self, id: &AgentId) -> Result<(), BoardError> {
        let stream = StreamRef::new(StreamType::Agent, id.to_string());
        let (agent, version) = domain_io::load::<Agent>(&self.inner.store, &stream).await?;
        self.state().view.put_agent(id.clone(), agent, version);
        Ok(())
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

fn task_stream(id: TaskId) -> StreamRef {
    StreamRef::new(StreamType::Task, id.to_string())
}

fn board_filter() -> EventFilter {
    EventFilter {
        stream_types: vec![StreamType::Task, StreamType::Agent],
        ..EventFilter::default()
    }
}

fn parse_cursor(cursor: &str) -> Result<(DateTime<Utc>, Uuid), BoardError> {
    let bad = || {
        BoardError::Invalid(format!(
            "`after` {cursor:?} is not a cursor this server gave"
        ))
    };
    let (nanos, id) = cursor.split_once('.').ok_or_else(bad)?;
    let nanos: i64 = nanos.parse().map_err(|_| bad())?;
    let at = DateTime::from_timestamp_nanos(nanos);
    let id = id.parse().map_err(|_| bad())?;
    Ok((at, id))
}
