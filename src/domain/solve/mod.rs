//! A solve: one question worked by awl's own agent, plan, execute, solve, as a stream
//! of its own (`solve`, id a [`SolveId`]).
//!
//! The runner (`agents::runner`) does the I/O: it calls the model, runs tools, and
//! records each result here as it arrives. This aggregate says what comes next
//! ([`Solve::next`]) from what is recorded, so a runner that crashed and starts again
//! folds the stream and carries on: a model reply already recorded is never asked for
//! again, a tool call already recorded is never run again (a call that was running
//! when the process died is run again: tools are at least once, like steps).
//!
//! The loop, as the stream records it:
//!
//! 1. `solve.started`: the agent, its model, system prompt, tools, limits, the prompt.
//! 2. `solve.model_replied` (phase `plan`): the model, offered the tools, either
//!    answers (that reply is the answer) or asks for tool calls.
//! 3. `solve.tool_finished`, one per call asked for (independent calls run side by
//!    side; each is recorded when it ends, with its output or error).
//! 4. Back to 2 until the iteration limit; past it the model is asked once more with
//!    the tools withheld (phase `solve`): it must answer. A model that still asks for
//!    tools then fails the solve.
//! 5. `solve.finished` (the answer, the plan, the timings and what it cost) or
//!    `solve.failed` (budget, iteration limit, a model that cannot be reached...).
//!
//! Budgets are the runner's to check *before* each call (it knows the price table);
//! this aggregate keeps what was spent, so the check after a restart counts the calls
//! made before it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::Decide;
use crate::domain::ids::{RunId, SolveId, TaskId};
use crate::domain::run::{ErrorClass, StepError};

#[cfg(test)]
mod tests;

/// Which part of the loop a model call was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The model was offered the tools: it chooses calls or answers.
    Plan,
    /// The tools were withheld (the iteration limit was reached): it must answer.
    Solve,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Solve => "solve",
        }
    }
}

/// A tool call the model asked for, as it wrote it (the arguments may not even be
/// JSON: the runner reports that back to the model as the call's error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedCall {
    pub id: String,
    pub tool: String,
    pub arguments: String,
}

/// What one model call asked for and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelReply {
    pub iteration: u32,
    pub phase: Phase,
    /// The model as the server named it.
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<PlannedCall>,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    /// The successful HTTP attempt's time, retries and back-off excluded.
    pub latency_ms: u64,
    /// HTTP attempts it took (1 without retries).
    pub attempts: u32,
}

/// How one tool call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub iteration: u32,
    pub call_id: String,
    pub tool: String,
    /// `Ok` output or the error, classified like a step's.
    #[serde(flatten)]
    pub outcome: ToolOutcome,
    pub duration_ms: u64,
    #[serde(default)]
    pub cost_usd: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolOutcome {
    Output(Value),
    Error(StepError),
}

impl ToolOutcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, Self::Output(_))
    }
}

/// What the agent was set up with when the solve started: a solve replays from its
/// own stream, whatever the agent's file says today.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    pub agent: String,
    /// The model as configured (the name sent to the server).
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The tools offered to the model.
    pub tools: Vec<String>,
    /// Plan phases at most; then one solve phase.
    pub max_iterations: u32,
    /// What the solve may spend on model and tool calls, in USD; none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
}

/// What a solve works for: a board task (and the run step behind it), when it works
/// one, so model use is counted per workflow. Absent for a question asked directly.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Origin {
    /// The board task this solve works.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// The run whose agent step queued that task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<RunId>,
    /// That run's workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
}

impl Origin {
    /// A solve that works board task `task_id`.
    pub fn task(task_id: TaskId) -> Self {
        Self {
            task_id: Some(task_id),
            ..Self::default()
        }
    }
}

/// Where the time of a finished solve went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timings {
    /// Model calls that chose tools.
    pub plan_ms: u64,
    /// Tool calls: the longest call of each iteration (they run side by side).
    pub execute_ms: u64,
    /// The model call that answered.
    pub solve_ms: u64,
    /// From the start to the answer, as recorded (includes the runner's own time).
    pub total_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum SolveEvent {
    #[serde(rename = "solve.started")]
    Started {
        #[serde(flatten)]
        setup: Setup,
        prompt: String,
        /// What the solve works for (a board task, a run's step), when it does.
        #[serde(flatten)]
        origin: Origin,
        by: String,
        at: DateTime<Utc>,
    },
    #[serde(rename = "solve.model_replied")]
    ModelReplied {
        #[serde(flatten)]
        reply: ModelReply,
        at: DateTime<Utc>,
    },
    #[serde(rename = "solve.tool_finished")]
    ToolFinished {
        #[serde(flatten)]
        result: ToolResult,
        at: DateTime<Utc>,
    },
    #[serde(rename = "solve.finished")]
    Finished {
        message: String,
        timings: Timings,
        tokens_in: u64,
        tokens_out: u64,
        cost_usd: f64,
        at: DateTime<Utc>,
    },
    #[serde(rename = "solve.failed")]
    Failed {
        class: ErrorClass,
        reason: String,
        at: DateTime<Utc>,
    },
}

impl SolveEvent {
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::Started { at, .. }
            | Self::ModelReplied { at, .. }
            | Self::ToolFinished { at, .. }
            | Self::Finished { at, .. }
            | Self::Failed { at, .. } => *at,
        }
    }
}

impl SolveEvent {
    /// The command whose decision records this event (what `awl check` decides again
    /// to see that the event was a legal step).
    pub fn command(self) -> SolveCommand {
        match self {
            Self::Started {
                setup,
                prompt,
                origin,
                by,
                at,
            } => SolveCommand::Start {
                setup,
                prompt,
                origin,
                by,
                at,
            },
            Self::ModelReplied { reply, at } => SolveCommand::RecordReply { reply, at },
            Self::ToolFinished { result, at } => SolveCommand::RecordTool { result, at },
            Self::Finished { at, .. } => SolveCommand::Finish { at },
            Self::Failed { class, reason, at } => SolveCommand::Fail { class, reason, at },
        }
    }
}

impl cqrs_es::DomainEvent for SolveEvent {
    fn event_type(&self) -> String {
        match self {
            Self::Started { .. } => "solve.started",
            Self::ModelReplied { .. } => "solve.model_replied",
            Self::ToolFinished { .. } => "solve.tool_finished",
            Self::Finished { .. } => "solve.finished",
            Self::Failed { .. } => "solve.failed",
        }
        .to_string()
    }

    fn event_version(&self) -> String {
        "1".to_string()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum SolveCommand {
    Start {
        setup: Setup,
        prompt: String,
        origin: Origin,
        by: String,
        at: DateTime<Utc>,
    },
    RecordReply {
        reply: ModelReply,
        at: DateTime<Utc>,
    },
    RecordTool {
        result: ToolResult,
        at: DateTime<Utc>,
    },
    /// Record the answer the last reply holds, with the timings of the whole solve.
    Finish { at: DateTime<Utc> },
    Fail {
        class: ErrorClass,
        reason: String,
        at: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SolveError {
    #[error("the solve has already started")]
    AlreadyStarted,
    #[error("the solve has not started")]
    NotStarted,
    #[error("the solve has ended ({0})")]
    Ended(&'static str),
    #[error("expected {expected}, not {got}")]
    OutOfTurn { expected: String, got: String },
    #[error("the model did not ask for call `{0}` in this iteration")]
    UnknownCall(String),
    #[error("call `{0}` is already recorded")]
    AlreadyRecorded(String),
    #[error("an agent needs a model name")]
    NoModel,
    #[error("the budget must be a finite amount of 0 or more, not {0}")]
    BadBudget(f64),
}

/// What the runner does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Call the model (offering the tools in phase `plan`).
    CallModel { iteration: u32, phase: Phase },
    /// Run these calls of the last reply (those not yet recorded).
    RunTools {
        iteration: u32,
        calls: Vec<PlannedCall>,
    },
    /// The last reply answered: record it.
    Finish,
    /// The model asked for tools when told to answer: the solve fails.
    GiveUp { reason: String },
    /// Finished or failed; nothing to do.
    Done,
}

/// How a solve stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    #[default]
    New,
    Running,
    Finished,
    Failed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Failed => "failed",
        }
    }
}

/// One model call and the tool calls it asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub reply: ModelReply,
    /// In the order the model asked for them, as far as recorded.
    pub results: Vec<ToolResult>,
}

impl Turn {
    fn pending(&self) -> Vec<PlannedCall> {
        self.reply
            .tool_calls
            .iter()
            .filter(|c| !self.results.iter().any(|r| r.call_id == c.id))
            .cloned()
            .collect()
    }
}

/// The solve as its stream tells it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Solve {
    pub setup: Option<Setup>,
    pub prompt: String,
    pub origin: Origin,
    pub by: String,
    pub started_at: Option<DateTime<Utc>>,
    pub turns: Vec<Turn>,
    pub status: Status,
    /// The answer, once finished.
    pub message: Option<String>,
    pub timings: Option<Timings>,
    /// Why it failed.
    pub failure: Option<StepError>,
    pub ended_at: Option<DateTime<Utc>>,
}

impl Solve {
    /// What was spent on model and tool calls so far, in USD.
    pub fn spent_usd(&self) -> f64 {
        self.turns
            .iter()
            .map(|t| t.reply.cost_usd + t.results.iter().map(|r| r.cost_usd).sum::<f64>())
            .sum()
    }

    /// What is left of the budget; none: no budget.
    pub fn remaining_usd(&self) -> Option<f64> {
        let budget = self.setup.as_ref()?.budget_usd?;
        Some((budget - self.spent_usd()).max(0.0))
    }

    pub fn tokens(&self) -> (u64, u64) {
        self.turns.iter().fold((0, 0), |(i, o), t| {
            (i + t.reply.tokens_in, o + t.reply.tokens_out)
        })
    }

    /// What the runner does next (see the module docs for the loop).
    pub fn next(&self) -> Next {
        let Some(setup) = &self.setup else {
            return Next::Done;
        };
        if matches!(self.status, Status::Finished | Status::Failed) {
            return Next::Done;
        }
        let Some(last) = self.turns.last() else {
            return Next::CallModel {
                iteration: 1,
                phase: phase_of(1, setup.max_iterations),
            };
        };
        let iteration = last.reply.iteration;
        if last.reply.tool_calls.is_empty() {
            return Next::Finish;
        }
        if last.reply.phase == Phase::Solve {
            return Next::GiveUp {
                reason: format!(
                    "the model still asked for tools after {} iterations, when told to answer",
                    setup.max_iterations
                ),
            };
        }
        let pending = last.pending();
        if !pending.is_empty() {
            return Next::RunTools {
                iteration,
                calls: pending,
            };
        }
        Next::CallModel {
            iteration: iteration + 1,
            phase: phase_of(iteration + 1, setup.max_iterations),
        }
    }

    /// Where the time went, from what is recorded; `total_ms` up to `at`.
    pub fn timings_at(&self, at: DateTime<Utc>) -> Timings {
        let mut timings = Timings::default();
        let answering = self.turns.len().checked_sub(1);
        for (i, turn) in self.turns.iter().enumerate() {
            if Some(i) == answering && turn.reply.tool_calls.is_empty() {
                timings.solve_ms += turn.reply.latency_ms;
            } else {
                timings.plan_ms += turn.reply.latency_ms;
            }
            timings.execute_ms += turn
                .results
                .iter()
                .map(|r| r.duration_ms)
                .max()
                .unwrap_or(0);
        }
        timings.total_ms = self
            .started_at
            .map(|s| u64::try_from((at - s).num_milliseconds()).unwrap_or(0))
            .unwrap_or(0);
        timings
    }

    /// The tools the solve used, in the order first called.
    pub fn tools_used(&self) -> Vec<String> {
        let mut used: Vec<String> = Vec::new();
        for result in self.turns.iter().flat_map(|t| &t.results) {
            if !used.contains(&result.tool) {
                used.push(result.tool.clone());
            }
        }
        used
    }

    fn apply_event(&mut self, event: SolveEvent) {
        match event {
            SolveEvent::Started {
                setup,
                prompt,
                origin,
                by,
                at,
            } => {
                self.setup = Some(setup);
                self.prompt = prompt;
                self.origin = origin;
                self.by = by;
                self.started_at = Some(at);
                self.status = Status::Running;
            }
            SolveEvent::ModelReplied { reply, .. } => self.turns.push(Turn {
                reply,
                results: Vec::new(),
            }),
            SolveEvent::ToolFinished { result, .. } => {
                if let Some(turn) = self.turns.last_mut() {
                    turn.results.push(result);
                }
            }
            SolveEvent::Finished {
                message,
                timings,
                at,
                ..
            } => {
                self.message = Some(message);
                self.timings = Some(timings);
                self.status = Status::Finished;
                self.ended_at = Some(at);
            }
            SolveEvent::Failed { class, reason, at } => {
                self.failure = Some(StepError {
                    class,
                    message: reason,
                });
                self.status = Status::Failed;
                self.ended_at = Some(at);
            }
        }
    }

    fn running(&self) -> Result<&Setup, SolveError> {
        match self.status {
            Status::New => Err(SolveError::NotStarted),
            Status::Finished => Err(SolveError::Ended("finished")),
            Status::Failed => Err(SolveError::Ended("failed")),
            Status::Running => self.setup.as_ref().ok_or(SolveError::NotStarted),
        }
    }
}

fn phase_of(iteration: u32, max_iterations: u32) -> Phase {
    if iteration <= max_iterations {
        Phase::Plan
    } else {
        Phase::Solve
    }
}

fn describe(next: &Next) -> String {
    match next {
        Next::CallModel { iteration, phase } => {
            format!(
                "a model reply of iteration {iteration} ({})",
                phase.as_str()
            )
        }
        Next::RunTools { iteration, calls } => format!(
            "the results of iteration {iteration}'s calls ({})",
            calls
                .iter()
                .map(|c| c.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Next::Finish => "the answer".into(),
        Next::GiveUp { .. } => "the solve to fail".into(),
        Next::Done => "nothing".into(),
    }
}

impl Decide for Solve {
    fn decide(&self, command: SolveCommand) -> Result<Vec<SolveEvent>, SolveError> {
        match command {
            SolveCommand::Start {
                setup,
                prompt,
                origin,
                by,
                at,
            } => {
                if self.status != Status::New {
                    return Err(SolveError::AlreadyStarted);
                }
                if setup.model.trim().is_empty() {
                    return Err(SolveError::NoModel);
                }
                if let Some(b) = setup.budget_usd
                    && (!b.is_finite() || b < 0.0)
                {
                    return Err(SolveError::BadBudget(b));
                }
                Ok(vec![SolveEvent::Started {
                    setup,
                    prompt,
                    origin,
                    by,
                    at,
                }])
            }
            SolveCommand::RecordReply { reply, at } => {
                self.running()?;
                let next = self.next();
                match next {
                    Next::CallModel { iteration, phase }
                        if iteration == reply.iteration && phase == reply.phase =>
                    {
                        Ok(vec![SolveEvent::ModelReplied { reply, at }])
                    }
                    other => Err(SolveError::OutOfTurn {
                        expected: describe(&other),
                        got: format!(
                            "a model reply of iteration {} ({})",
                            reply.iteration,
                            reply.phase.as_str()
                        ),
                    }),
                }
            }
            SolveCommand::RecordTool { result, at } => {
                self.running()?;
                let Some(last) = self.turns.last() else {
                    return Err(SolveError::UnknownCall(result.call_id));
                };
                if last.reply.iteration != result.iteration
                    || !last.reply.tool_calls.iter().any(|c| c.id == result.call_id)
                {
                    return Err(SolveError::UnknownCall(result.call_id));
                }
                if last.results.iter().any(|r| r.call_id == result.call_id) {
                    return Err(SolveError::AlreadyRecorded(result.call_id));
                }
                Ok(vec![SolveEvent::ToolFinished { result, at }])
            }
            SolveCommand::Finish { at } => {
                self.running()?;
                match self.next() {
                    Next::Finish => {
                        let message = self
                            .turns
                            .last()
                            .and_then(|t| t.reply.content.clone())
                            .unwrap_or_default();
                        let (tokens_in, tokens_out) = self.tokens();
                        Ok(vec![SolveEvent::Finished {
                            message,
                            timings: self.timings_at(at),
                            tokens_in,
                            tokens_out,
                            cost_usd: self.spent_usd(),
                            at,
                        }])
                    }
                    other => Err(SolveError::OutOfTurn {
                        expected: describe(&other),
                        got: "the answer".into(),
                    }),
                }
            }
            SolveCommand::Fail { class, reason, at } => {
                self.running()?;
                Ok(vec![SolveEvent::Failed { class, reason, at }])
            }
        }
    }
}

crate::domain::impl_aggregate!(Solve, "solve", SolveCommand, SolveEvent, SolveError);

/// The stream of a solve.
pub fn stream_id(id: SolveId) -> String {
    id.to_string()
}
