//! The engine: what a run does next, as a pure function of its definition, its
//! events and the time.
//!
//! Workers are stateless. A worker that picks a run up folds the run's stream into a
//! [`Run`] and calls [`tick`], which walks the workflow's steps against that state and
//! returns the run events to append (already checked by the run aggregate's `decide`)
//! and the [`Effect`]s to carry out: processes to run, HTTP calls to make, tasks to
//! queue, child runs to start. Outcomes of effects come back in the next call as
//! [`StepOutcome`]s and become events there. Nothing here does I/O or reads a clock,
//! so every rule of execution (order, guards, conditionals, parallel branches, gates,
//! retries with back-off, error handlers, budgets, timeouts, compensation, hooks) is
//! tested without a database, and replaying a run from its log gives the same
//! decisions.
//!
//! Determinism on replay: ids the engine invents (idempotency keys, gate ids, task ids,
//! child run ids) are derived from the run id, step id and attempt (`keys.rs`); jitter is
//! a hash of the same; a conditional records which branch it took as its output, so the
//! branch never changes even if the inputs of its condition could.

pub mod flow;
mod keys;
pub mod protect;
mod recovery;
mod render;
#[cfg(test)]
mod tests;
pub mod verify;
mod walk;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use crate::domain::ids::{RunId, StepId, TaskId};
use crate::domain::run::{ErrorClass, ParentRef, Run, RunError};
use crate::workflow::model::{DatabaseStep, HttpStep, NotifyStep, ShellStep, Workflow};

pub use keys::{child_run_id, gate_id, idempotency_key, step_idempotency_key, task_id};
pub use recovery::backoff_ms;
pub use render::declared_tool;

/// What one attempt of a step produced, as the worker reports it back.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOutcome {
    pub step_id: StepId,
    pub attempt: u32,
    pub result: Result<Done, Failure>,
}

/// A successful attempt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Done {
    /// Shared with the event that records it and the run's state (see
    /// [`StepState::Succeeded`](crate::domain::run::StepState)).
    pub output: std::sync::Arc<Value>,
    pub cost_usd: Option<f64>,
    pub tokens: Option<u64>,
}

/// A failed attempt, classified.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub class: ErrorClass,
    pub message: String,
}

/// How the compensation of a succeeded step went.
#[derive(Debug, Clone, PartialEq)]
pub struct CompensationOutcome {
    pub step_id: StepId,
    pub error: Option<String>,
}

/// Everything a tick reads besides the run's state.
#[derive(Debug, Clone, Default)]
pub struct TickInput {
    pub now: DateTime<Utc>,
    /// Outcomes of attempts since the last tick.
    pub outcomes: Vec<StepOutcome>,
    pub compensations: Vec<CompensationOutcome>,
    /// Idempotency keys this worker is executing right now: a running attempt whose
    /// key is not here was lost (its worker died) and is started again.
    pub in_flight: BTreeSet<String>,
    /// The environment variables expressions may read (`env.NAME`).
    pub env: BTreeMap<String, String>,
    /// What to mask and seal in the events decided (`protect::protection`).
    pub protection: std::sync::Arc<crate::vault::Protection>,
}

/// Work for the worker to carry out.
// A tick yields a handful of effects that are consumed at once: boxing the large
// variants would buy nothing but indirection.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Perform one attempt of a step; report a [`StepOutcome`].
    Perform {
        key: String,
        step_id: StepId,
        attempt: u32,
        work: Work,
        /// Run this first (a `refresh_auth` recovery).
        before: Option<Work>,
        timeout_ms: Option<u64>,
        /// What one call of the declared tool the step calls costs (its `cost_usd`),
        /// charged when the attempt reports no cost of its own.
        cost_usd: Option<f64>,
        /// The rate buckets to take a token of first (sorted by scope): when one has
        /// none now, the worker records `run.step_throttled` with the time it
        /// reserved instead of performing. Empty when the attempt holds its token.
        rate: Vec<crate::domain::rate::RateBucket>,
    },
    /// Run the compensation of a succeeded step; report a [`CompensationOutcome`].
    Compensate {
        key: String,
        step_id: StepId,
        work: Work,
        timeout_ms: Option<u64>,
    },
    /// Queue a task on the board for an `agent` step (append `task.queued` with this
    /// id, in the same transaction as the step's start). The step ends when the task
    /// does.
    QueueTask {
        task_id: TaskId,
        step_id: StepId,
        attempt: u32,
        prompt: String,
        capabilities: Vec<String>,
        repository: Option<String>,
        branch: Option<String>,
        agent_hint: Option<String>,
        priority: i32,
        review_required: bool,
        /// Who may take the task.
        runner: crate::workflow::model::Runner,
    },
    /// Start a child run for a `workflow` step (in the same transaction). The step
    /// ends when the child does.
    StartChild {
        run_id: RunId,
        step_id: StepId,
        attempt: u32,
        /// As written in the step: a registered name, or a file next to the parent.
        workflow: String,
        inputs: Map<String, Value>,
    },
    /// The run ended and is a child: wake its parent.
    WakeParent(ParentRef),
}

impl Effect {
    /// What kind of effect this is (as `awl replay` lists what comes next).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Perform { .. } => "Perform",
            Self::Compensate { .. } => "Compensate",
            Self::QueueTask { .. } => "QueueTask",
            Self::StartChild { .. } => "StartChild",
            Self::WakeParent(_) => "WakeParent",
        }
    }
}

/// One piece of I/O, its templates rendered.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    Shell(ShellStep),
    Http(HttpStep),
    Database(DatabaseStep),
    Notify(NotifyStep),
    Builtin {
        tool: String,
        inputs: Map<String, Value>,
    },
    /// A tool of the registry the worker is given, called through it (an MCP
    /// server's tool): neither a built-in nor declared in the definition.
    External {
        tool: String,
        inputs: Map<String, Value>,
    },
}

/// What a tick decided.
#[derive(Debug, Clone)]
pub struct Tick {
    /// Events to append to the run's stream, in order (checked by `decide`).
    pub events: Vec<crate::domain::run::RunEvent>,
    pub effects: Vec<Effect>,
    /// When the run must be looked at again even if nothing happens (a retry's due
    /// time, a timeout, a gate's expiry). `None`: only an outcome or an outside event
    /// (a gate decision, a task or child run ending) moves it.
    pub wake_at: Option<DateTime<Utc>>,
    /// The state after the events.
    pub state: Run,
}

impl Tick {
    pub fn is_finished(&self) -> bool {
        self.state.is_terminal()
    }
}

/// The definition and the run disagree, or the engine asked for something the run
/// aggregate refuses: a bug, or a run started from another definition.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EngineError {
    #[error("the run has not started")]
    NotStarted,
    #[error("the engine's decision was refused by the run: {0}")]
    Refused(#[from] RunError),
    #[error("step `{step}` changed state too often in one tick (a bug in the engine)")]
    Stuck { step: StepId },
    #[error("step `{step}` ({kind}) was started the wrong way (a bug in the engine)")]
    Misrouted { step: StepId, kind: &'static str },
}

/// Decide what `run` does next.
pub fn tick(definition: &Workflow, run: &Run, input: &TickInput) -> Result<Tick, EngineError> {
    tick_owned(definition, run.clone(), input)
}

/// [`tick`] on a run the caller gives up: the tick's state is `run` moved on, not a
/// copy of it (a worker deciding for hundreds of runs a round copies none).
pub fn tick_owned(definition: &Workflow, run: Run, input: &TickInput) -> Result<Tick, EngineError> {
    if run.status().is_none() {
        return Err(EngineError::NotStarted);
    }
    let mut walker = walk::Walker::new(definition, run, input);
    walker.run()?;
    Ok(walker.finish())
}

/// The command that starts a run of `definition` (its budget and deadline come from
/// the definition).
pub fn start_command(
    definition: &Workflow,
    version: &str,
    run_id: RunId,
    inputs: Map<String, Value>,
    parent: Option<ParentRef>,
    now: DateTime<Utc>,
) -> Result<crate::domain::run::RunCommand, crate::domain::ids::IdError> {
    Ok(crate::domain::run::RunCommand::Start {
        run_id,
        workflow: crate::domain::ids::WorkflowName::try_from(definition.name.as_str())?,
        workflow_version: version.to_string(),
        inputs: Value::Object(inputs),
        budget_usd: definition.cost_budget_usd,
        timeout_at: definition
            .timeout_seconds
            .map(|s| now + chrono::Duration::seconds(s as i64)),
        parent,
        origin: None,
        flow: crate::domain::run::Flow::default(),
        at: now,
    })
}

/// The step of `definition` with id `id`, wherever it is (nested, hook), not counting
/// compensations.
pub fn find_step<'a>(
    definition: &'a Workflow,
    id: &str,
) -> Option<&'a crate::workflow::model::Step> {
    use crate::workflow::model::{Step, StepKind};
    fn search<'s>(steps: &'s [Step], id: &str) -> Option<&'s Step> {
        steps.iter().find_map(|step| {
            if step.id() == id {
                return Some(step);
            }
            match &step.kind {
                StepKind::Conditional(c) => {
                    search(&c.if_true, id).or_else(|| search(&c.if_false, id))
                }
                StepKind::Parallel(p) => p.branches.iter().find_map(|b| search(&b.steps, id)),
                _ => None,
            }
        })
    }
    search(&definition.steps, id)
        .or_else(|| search(&definition.on_success, id))
        .or_else(|| search(&definition.on_failure, id))
}
