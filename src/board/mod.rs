//! The agent board: tasks handed to external agents that pull them.
//!
//! [`Board`] is the one service behind every interface (REST, MCP, the CLI): it turns
//! each call into a decision of the task or agent aggregate, appended with the stream
//! version it was made on, and keeps an in-memory view (`view.rs`) of every task and
//! agent, fed by its own appends and by the log's tail (so tasks queued by workflow
//! workers or other servers are seen too).
//!
//! Dispatch (`dispatch.rs`). An agent's `wait_for_prompt` either finds its best queued
//! task at once or waits as a *waiter*. When a task becomes QUEUED (sent, requeued,
//! sent back from review), it is offered to the best waiter (`matching`): the waiter
//! is woken with that task, which is marked *reserving* in this process so no other
//! local waiter takes it, and reserves it by appending ASSIGNED and PENDING_ACK in one
//! append. Across processes, the stream version decides: of two servers reserving one
//! task, one append conflicts and its waiter looks again. No sleep loop is involved:
//! waiters are woken by the append (same process) or by the log's notification
//! (others).
//!
//! The rest, one concern a file: `lifecycle.rs` every transition after dispatch (ack
//! to completion), each one [`Command`](crate::store::command::Command) on the task's
//! stream; `sweep.rs` the timers (ack deadlines, lost agents), on the injected clock so
//! tests move time by hand; `queries.rs` reading tasks, agents and histories;
//! `views.rs` the shapes the board returns.

mod dispatch;
mod error;
mod lifecycle;
pub mod matching;
mod queries;
mod sweep;
mod view;
pub mod views;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::domain::agent::Agent;
use crate::domain::ids::{AgentId, TaskId};
use crate::domain::task::{Task, TaskStatus};
use crate::domain::workspace::{Capabilities, Workspace};
use crate::log::{EventFilter, StreamRef, StreamType};
use crate::projections::queries as read_models;
use crate::store::{EventStore, domain_io};

pub use error::BoardError;
pub use queries::{InMemory, TaskQuery};
use view::{Applied, BoardView};
use views::TaskView;

/// How often an agent's calls are written to the shared presence table.
const PRESENCE_EVERY: Duration = Duration::seconds(10);

/// The board's timings.
#[derive(Debug, Clone)]
pub struct BoardConfig {
    /// How long an agent has to ack a delivered task before it is requeued.
    pub ack_timeout: Duration,
    /// A task whose agent has not called in for this long is requeued.
    pub lost_after: Duration,
    /// How long a task hinted at one agent is kept for it.
    pub hint_grace: Duration,
    /// The longest `wait_for_prompt` the server allows: below the 60 s after which
    /// common clients (the MCP TypeScript SDK among them) give up on a request.
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
            max_wait: StdDuration::from_secs(50),
            default_wait: StdDuration::from_secs(30),
        }
    }
}

/// A task to put on the board, as the board takes it (interfaces parse their own
/// request shapes into this).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewTask {
    /// What the agent is asked to do.
    pub prompt: String,
    /// Capabilities an agent must have to take the task.
    pub capabilities: Capabilities,
    /// Where the work happens; agents already there are preferred.
    pub workspace: Option<Workspace>,
    /// An agent the task is kept for first (others may take it after a grace period).
    pub agent_hint: Option<AgentId>,
    /// Higher goes first.
    pub priority: i32,
    /// The work must be approved by a reviewer before the task completes.
    pub review_required: bool,
    /// Who may take it: awl's own agents, external ones, or either.
    pub runner: crate::domain::task::Runner,
}

/// One tool call an agent reports having made on a task.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    pub parameters: Value,
    /// What the tool returned, if the agent says.
    pub output: Option<Value>,
    pub duration_ms: u64,
    pub success: bool,
    /// Whose history the call belongs to (the reporting token's scope).
    pub scope: Option<String>,
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
    waiters: Vec<dispatch::Waiter>,
    reserving: HashSet<TaskId>,
    /// When a reservation of this process last lost to another process's append
    /// (its command found the view stale): while that is recent, waiters spread
    /// their picks (see `dispatch`).
    contended_at: Option<DateTime<Utc>>,
    next_waiter: u64,
    /// When each agent last called this process (heartbeats are not events).
    last_seen: HashMap<AgentId, DateTime<Utc>>,
    /// When this process last wrote each agent's row of the presence table.
    presence_written: HashMap<AgentId, DateTime<Utc>>,
    /// The log position the view has followed to.
    position: i64,
}

impl Board {
    /// Open the board: start from the board and agents projections' live rows at
    /// their checkpoints (or, when they are missing or outdated, from nothing) and
    /// fold the task and agent events after them, up to the head.
    pub async fn open(
        store: EventStore,
        clock: Clock,
        config: BoardConfig,
    ) -> Result<Self, BoardError> {
        let mut view = BoardView::default();
        let (tasks_at, agents_at) = match read_models::board_snapshot(&store).await {
            Ok(Some(snapshot)) => start_from(&store, &mut view, snapshot).await?,
            Ok(None) => (0, 0),
            Err(e) => {
                tracing::warn!(error = %e, "the board projection cannot be read; folding the log instead");
                (0, 0)
            }
        };
        let filter = board_filter();
        let mut after = tasks_at.min(agents_at);
        loop {
            let (events, scanned) = store.read_page(after, 5_000, &filter).await?;
            for event in &events {
                let known = match event.stream.kind {
                    StreamType::Task => tasks_at,
                    _ => agents_at,
                };
                if event.position <= known {
                    continue;
                }
                // Read in position order from a consistent start, the next event of a
                // stream is the next version: no gap to reload.
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

    /// How many `wait_for_prompt` calls are parked waiting for a task now.
    pub fn waiting(&self) -> usize {
        self.state().waiters.len()
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
    /// When the database goes away (a restart, a cut connection) it waits and
    /// follows again from the last event it applied, so the view never skips one.
    pub async fn follow(&self, mut stop: watch::Receiver<bool>) -> Result<(), BoardError> {
        let mut backoff = StdDuration::from_millis(100);
        loop {
            match self.follow_once(&mut stop).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "the board lost the log; following again");
                    tokio::select! {
                        _ = stop.changed() => return Ok(()),
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(StdDuration::from_secs(5));
                }
            }
        }
    }

    async fn follow_once(&self, stop: &mut watch::Receiver<bool>) -> Result<(), BoardError> {
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
            // Applying is idempotent by stream version, so an event whose handling
            // failed is applied again when following resumes from before it.
            let applied = self.state().view.apply(&event)?;
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
            self.state().position = event.position;
        }
    }

    /// Note that `agent` called in (any call counts). The shared presence table is
    /// written at most every `PRESENCE_EVERY` per agent, in the background.
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

    /// `view` as a person or agent sees it: personal data sealed in the task's
    /// `recorded` prompt (an agent step of a run with personal inputs) opened with its
    /// subject's key, or `[erased]` once `awl forget` destroyed it. The view keeps the
    /// prompt sealed, so a forgotten subject reads erased at once.
    pub(crate) async fn opened(
        &self,
        mut view: TaskView,
        recorded: &str,
    ) -> Result<TaskView, BoardError> {
        if !crate::vault::is_sealed(recorded) {
            return Ok(view);
        }
        let mut ids = std::collections::BTreeSet::new();
        crate::vault::key_ids(&Value::String(recorded.to_string()), &mut ids);
        let keys = self.inner.store.subject_keys(&ids).await?;
        let mut prompt = recorded.to_string();
        crate::vault::reveal_string(&mut prompt, &keys, crate::vault::Reveal::View);
        view.prompt = prompt;
        Ok(view)
    }

    /// Record a task's new state in the view and offer it if it is queued.
    fn observe(&self, id: TaskId, task: Task, version: i64) -> TaskView {
        let view = TaskView::of(&task, version);
        let queued = task.status() == Some(TaskStatus::Queued);
        self.state().view.put_task(id, task, version);
        if queued {
            self.offer(id);
        }
        view
    }

    /// Record a task's state as read from the log in the view, if it is newer than the
    /// view's, and offer it if it is queued.
    fn refresh(&self, id: TaskId, task: Task, version: i64, contended: bool) {
        let queued = task.status() == Some(TaskStatus::Queued);
        let now = self.now();
        let newer = {
            let mut st = self.state();
            if contended {
                st.contended_at = Some(now);
            }
            st.view.put_task(id, task, version)
        };
        if newer && queued {
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
        let (agent, version) =
            domain_io::load::<Agent>(&self.inner.store, &agent_stream(id)).await?;
        self.state().view.put_agent(id.clone(), agent, version);
        Ok(())
    }
}

/// Put the snapshot's tasks and agents in `view` (those whose stored copy hides
/// personal data or secrets folded from their streams instead); returns the
/// checkpoints it was taken at.
async fn start_from(
    store: &EventStore,
    view: &mut BoardView,
    snapshot: read_models::BoardSnapshot,
) -> Result<(i64, i64), BoardError> {
    for stored in snapshot.tasks {
        let id: TaskId = stored.id.parse()?;
        let (task, version) = match stored.state {
            Some(task) => (task, stored.version),
            None => domain_io::load::<Task>(store, &task_stream(id)).await?,
        };
        view.put_task(id, task, version);
    }
    for stored in snapshot.agents {
        let id = AgentId::try_from(stored.id.as_str())?;
        let (agent, version) = match stored.state {
            Some(agent) => (agent, stored.version),
            None => domain_io::load::<Agent>(store, &agent_stream(&id)).await?,
        };
        view.put_agent(id, agent, version);
    }
    Ok((snapshot.tasks_at, snapshot.agents_at))
}

fn task_stream(id: TaskId) -> StreamRef {
    StreamRef::new(StreamType::Task, id.to_string())
}

fn agent_stream(id: &AgentId) -> StreamRef {
    StreamRef::new(StreamType::Agent, id.to_string())
}

fn board_filter() -> EventFilter {
    EventFilter {
        stream_types: vec![StreamType::Task, StreamType::Agent],
        ..EventFilter::default()
    }
}
