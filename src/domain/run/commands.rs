//! What can be asked of a run. The executor issues most commands; people approve,
//! reject and cancel. Every command carries the time it was issued (`at`), and the
//! actor (`by`) where the event records who acted. Ids and idempotency keys come in
//! commands too: deciding never invents anything.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::ids::{GateId, RunId, StepId, WorkflowName};

use super::types::{
    DerivedKind, ErrorClass, Flow, ParentRef, RecoveryAction, RunOrigin, StepCall, StepError,
};

/// A request to change one run.
#[derive(Debug, Clone, PartialEq)]
pub enum RunCommand {
    /// Begin a run of one workflow version.
    Start {
        run_id: RunId,
        workflow: WorkflowName,
        workflow_version: String,
        inputs: Value,
        budget_usd: Option<f64>,
        timeout_at: Option<DateTime<Utc>>,
        parent: Option<ParentRef>,
        origin: Option<RunOrigin>,
        flow: Flow,
        at: DateTime<Utc>,
    },
    /// Record that a queued run waits for a slot of `scope` (nothing when it already
    /// waits on that scope).
    Queue {
        scope: String,
        limit: u32,
        at: DateTime<Utc>,
    },
    /// Let a queued run start its steps: it took every slot it needs.
    Admit { at: DateTime<Utc> },
    /// Keep a step of the origin run as it ended there (a rerun's or fork's first
    /// events, before any step of its own).
    CarryStep {
        step_id: StepId,
        from_run: RunId,
        output: Option<Value>,
        at: DateTime<Utc>,
    },
    /// Note on the origin run that a rerun or fork was made from it.
    NoteDerived {
        run_id: RunId,
        kind: DerivedKind,
        from_step: StepId,
        by: String,
        at: DateTime<Utc>,
    },
    /// Queue a step for its first attempt.
    ScheduleStep {
        step_id: StepId,
        due_at: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// Begin (or, after a crash, begin again) the step's current attempt.
    StartStep {
        step_id: StepId,
        attempt: u32,
        idempotency_key: String,
        timeout_at: Option<DateTime<Utc>>,
        /// What it calls (see [`StepCall`]).
        call: Option<StepCall>,
        at: DateTime<Utc>,
    },
    /// Record the output of a running attempt. A reported cost is charged to the run
    /// in the same decision (`run.cost_charged`, and `run.budget_exceeded` if it goes over).
    SucceedStep {
        step_id: StepId,
        attempt: u32,
        output: Arc<Value>,
        cost_usd: Option<f64>,
        tokens: Option<u64>,
        at: DateTime<Utc>,
    },
    /// Record the classified failure of a running attempt.
    FailStep {
        step_id: StepId,
        attempt: u32,
        error: StepError,
        at: DateTime<Utc>,
    },
    /// A running attempt could not take its rate limit's token now: it reserved the
    /// token for `until` and starts again then (not a failure).
    ThrottleStep {
        step_id: StepId,
        attempt: u32,
        /// The rate limit's bucket (`rate:NAME`, `rate:NAME:key:VALUE`).
        limit: String,
        until: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// Queue the next attempt of a failed step, `backoff_ms` after `at`.
    RetryStep {
        step_id: StepId,
        backoff_ms: u64,
        at: DateTime<Utc>,
    },
    /// Give up a scheduled step, or a failed one whose `on_error` is `skip`.
    SkipStep {
        step_id: StepId,
        reason: String,
        at: DateTime<Utc>,
    },
    /// Record what the error handler does about the step's failed attempt; the error
    /// class is the one that attempt failed with.
    ApplyRecovery {
        step_id: StepId,
        action: RecoveryAction,
        at: DateTime<Utc>,
    },
    OpenGate {
        gate_id: GateId,
        step_id: StepId,
        approvers: Vec<String>,
        message: String,
        expires_at: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    },
    ApproveGate {
        gate_id: GateId,
        by: String,
        comment: Option<String>,
        at: DateTime<Utc>,
    },
    RejectGate {
        gate_id: GateId,
        by: String,
        comment: String,
        at: DateTime<Utc>,
    },
    /// Close a gate nobody decided, once its expiry has passed.
    ExpireGate { gate_id: GateId, at: DateTime<Utc> },
    /// Charge money and tokens to the run, for a step or for the run itself.
    ChargeCost {
        step_id: Option<StepId>,
        usd: f64,
        tokens: u64,
        at: DateTime<Utc>,
    },
    /// Start failing the run: `steps` are the succeeded steps that have a
    /// compensation, most recently succeeded first.
    StartCompensation {
        reason: String,
        /// The class of the failure; the run fails with it once compensated.
        error_class: Option<ErrorClass>,
        steps: Vec<StepId>,
        at: DateTime<Utc>,
    },
    /// Record that the next compensation ran.
    RecordCompensationStep {
        step_id: StepId,
        succeeded: bool,
        error: Option<String>,
        at: DateTime<Utc>,
    },
    /// End the run successfully: no step may be running or scheduled, no gate open, and
    /// a failed step only when its recovery was `continue`.
    Complete { outputs: Value, at: DateTime<Utc> },
    Fail {
        reason: String,
        error_class: Option<ErrorClass>,
        at: DateTime<Utc>,
    },
    /// Stop starting steps until resumed (steps in flight finish).
    Pause {
        by: String,
        reason: String,
        at: DateTime<Utc>,
        /// For pausing the whole workflow (recorded, so a workflow resume lifts it).
        workflow: bool,
    },
    /// Let a paused run start steps again.
    Resume { by: String, at: DateTime<Utc> },
    Cancel {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// Continue as new: record the whole state (compacted) so replay starts here.
    Continue { at: DateTime<Utc> },
}

impl RunCommand {
    /// What the command attempts, for error messages.
    pub fn action(&self) -> RunAction {
        match self {
            Self::Start { .. } => RunAction::Start,
            Self::ScheduleStep { .. } => RunAction::ScheduleStep,
            Self::StartStep { .. } => RunAction::StartStep,
            Self::SucceedStep { .. } => RunAction::SucceedStep,
            Self::FailStep { .. } => RunAction::FailStep,
            Self::RetryStep { .. } => RunAction::RetryStep,
            Self::ThrottleStep { .. } => RunAction::ThrottleStep,
            Self::SkipStep { .. } => RunAction::SkipStep,
            Self::ApplyRecovery { .. } => RunAction::ApplyRecovery,
            Self::OpenGate { .. } => RunAction::OpenGate,
            Self::ApproveGate { .. } => RunAction::ApproveGate,
            Self::RejectGate { .. } => RunAction::RejectGate,
            Self::ExpireGate { .. } => RunAction::ExpireGate,
            Self::ChargeCost { .. } => RunAction::ChargeCost,
            Self::StartCompensation { .. } => RunAction::StartCompensation,
            Self::RecordCompensationStep { .. } => RunAction::RecordCompensationStep,
            Self::Complete { .. } => RunAction::Complete,
            Self::Fail { .. } => RunAction::Fail,
            Self::CarryStep { .. } => RunAction::CarryStep,
            Self::NoteDerived { .. } => RunAction::NoteDerived,
            Self::Pause { .. } => RunAction::Pause,
            Self::Resume { .. } => RunAction::Resume,
            Self::Cancel { .. } => RunAction::Cancel,
            Self::Continue { .. } => RunAction::Continue,
            Self::Queue { .. } => RunAction::Queue,
            Self::Admit { .. } => RunAction::Admit,
        }
    }
}

/// The kind of a [`RunCommand`], without its data: what an error says was attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunAction {
    Start,
    ScheduleStep,
    StartStep,
    SucceedStep,
    FailStep,
    RetryStep,
    SkipStep,
    ApplyRecovery,
    OpenGate,
    ApproveGate,
    RejectGate,
    ExpireGate,
    ChargeCost,
    StartCompensation,
    RecordCompensationStep,
    Complete,
    Fail,
    Pause,
    Resume,
    Cancel,
    CarryStep,
    NoteDerived,
    Continue,
    Queue,
    Admit,
    ThrottleStep,
}

impl RunAction {
    /// The verb alone, for "cannot start step `build`".
    pub fn verb(self) -> &'static str {
        match self {
            Self::Start | Self::StartStep => "start",
            Self::ScheduleStep => "schedule",
            Self::SucceedStep => "succeed",
            Self::FailStep | Self::Fail => "fail",
            Self::RetryStep => "retry",
            Self::SkipStep => "skip",
            Self::ApplyRecovery => "apply a recovery to",
            Self::OpenGate => "open a gate on",
            Self::ApproveGate => "approve",
            Self::RejectGate => "reject",
            Self::ExpireGate => "expire",
            Self::ChargeCost => "charge cost to",
            Self::StartCompensation => "start compensation",
            Self::RecordCompensationStep => "record the compensation of",
            Self::Complete => "complete",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::CarryStep => "carry",
            Self::NoteDerived => "note a run derived from",
            Self::Cancel => "cancel",
            Self::Continue => "continue",
            Self::Queue => "queue",
            Self::Admit => "admit",
            Self::ThrottleStep => "throttle",
        }
    }
}

impl fmt::Display for RunAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Start => "start the run",
            Self::ScheduleStep => "schedule a step",
            Self::StartStep => "start a step",
            Self::SucceedStep => "succeed a step",
            Self::FailStep => "fail a step",
            Self::RetryStep => "retry a step",
            Self::SkipStep => "skip a step",
            Self::ApplyRecovery => "apply a recovery",
            Self::OpenGate => "open a gate",
            Self::ApproveGate => "approve a gate",
            Self::RejectGate => "reject a gate",
            Self::ExpireGate => "expire a gate",
            Self::ChargeCost => "charge cost",
            Self::StartCompensation => "start compensation",
            Self::RecordCompensationStep => "record a compensation",
            Self::Complete => "complete",
            Self::Fail => "fail",
            Self::Pause => "pause the run",
            Self::Resume => "resume the run",
            Self::CarryStep => "carry a step",
            Self::NoteDerived => "note a derived run",
            Self::Cancel => "cancel",
            Self::Continue => "continue the run as new",
            Self::Queue => "queue the run",
            Self::Admit => "admit the run",
            Self::ThrottleStep => "throttle a step",
        })
    }
}
