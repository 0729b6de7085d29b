//! The events of a `run` stream: a permanent wire format.
//!
//! Each variant's serde tag is its dotted event type (`run.step_started`), which the
//! store keeps as the row's event type while the inner object becomes the payload.
//! Renaming a tag or reshaping a payload therefore needs a new schema version and an
//! upcaster.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::ids::{GateId, RunId, StepId, WorkflowName};

use super::types::{
    DerivedKind, ErrorClass, Flow, ParentRef, RecoveryAction, Rules, RunOrigin, StepCall, StepError,
};

/// Something that happened in one workflow run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RunEvent {
    /// The run began: the workflow version it runs, its inputs and its limits.
    #[serde(rename = "run.started")]
    Started {
        run_id: RunId,
        workflow: WorkflowName,
        workflow_version: String,
        inputs: Value,
        budget_usd: Option<f64>,
        timeout_at: Option<DateTime<Utc>>,
        /// The step of another run this run is a sub-workflow of.
        parent: Option<ParentRef>,
        /// The run this one reruns or forks, and the step it starts again at.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<RunOrigin>,
        /// Its priority and the concurrency slots it must hold before any step
        /// (absent: priority 0, no limit).
        #[serde(default, skip_serializing_if = "Flow::is_default")]
        flow: Flow,
        /// The rules its steps are recorded by (absent: the first).
        #[serde(default, skip_serializing_if = "Rules::is_first")]
        rules: Rules,
        at: DateTime<Utc>,
    },
    /// The run could not take a slot of `scope` (all `limit` are held): it waits
    /// for one. Recorded when it starts waiting on a scope, not at every retry.
    #[serde(rename = "run.queued")]
    Queued {
        scope: String,
        limit: u32,
        at: DateTime<Utc>,
    },
    /// The run holds every concurrency slot it needs: its steps may start.
    #[serde(rename = "run.admitted")]
    Admitted { at: DateTime<Utc> },
    /// A step of the origin run kept as it ended there (a rerun or fork starts after
    /// it): its output (`None`: it was skipped). It is not performed again.
    #[serde(rename = "run.step_carried")]
    StepCarried {
        step_id: StepId,
        from_run: RunId,
        output: Option<Value>,
        at: DateTime<Utc>,
    },
    /// A rerun or fork was made from this run (recorded on finished runs too).
    #[serde(rename = "run.derived")]
    Derived {
        run_id: RunId,
        kind: DerivedKind,
        from_step: StepId,
        by: String,
        at: DateTime<Utc>,
    },
    /// A step was queued for its first attempt, to start at `due_at`.
    #[serde(rename = "run.step_scheduled")]
    StepScheduled {
        step_id: StepId,
        attempt: u32,
        due_at: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// A worker began an attempt. The same attempt may be started again with the same
    /// idempotency key when its worker died before recording an outcome (at-least-once).
    #[serde(rename = "run.step_started")]
    StepStarted {
        step_id: StepId,
        attempt: u32,
        idempotency_key: String,
        timeout_at: Option<DateTime<Utc>>,
        /// What the attempt calls, for a step that reaches outside awl (absent for
        /// the others, for events recorded before it existed, and for an attempt
        /// started again after a wait).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call: Option<StepCall>,
        at: DateTime<Utc>,
    },
    /// An attempt succeeded; `output` is what later steps read, on replay too.
    #[serde(rename = "run.step_succeeded")]
    StepSucceeded {
        step_id: StepId,
        attempt: u32,
        output: Arc<Value>,
        /// What this attempt reported; the run's total moves with `run.cost_charged`.
        cost_usd: Option<f64>,
        tokens: Option<u64>,
        at: DateTime<Utc>,
    },
    /// An attempt failed, with its classified error.
    #[serde(rename = "run.step_failed")]
    StepFailed {
        step_id: StepId,
        attempt: u32,
        error: StepError,
        at: DateTime<Utc>,
    },
    /// A running attempt waits for its rate limit: its token is reserved for `until`,
    /// when the same attempt starts again (not a failure; nothing was performed).
    #[serde(rename = "run.step_throttled")]
    StepThrottled {
        step_id: StepId,
        attempt: u32,
        /// The rate limit's bucket (`rate:NAME`, `rate:NAME:key:VALUE`).
        limit: String,
        until: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// A failed step was queued again for `next_attempt` after a back-off.
    #[serde(rename = "run.step_retried")]
    StepRetried {
        step_id: StepId,
        next_attempt: u32,
        due_at: DateTime<Utc>,
        backoff_ms: u64,
        at: DateTime<Utc>,
    },
    /// A scheduled step will not run, or a failed one is given up without failing the run.
    #[serde(rename = "run.step_skipped")]
    StepSkipped {
        step_id: StepId,
        reason: String,
        at: DateTime<Utc>,
    },
    /// The error handler chose what to do about a failed attempt.
    #[serde(rename = "run.recovery_applied")]
    RecoveryApplied {
        step_id: StepId,
        error_class: ErrorClass,
        action: RecoveryAction,
        at: DateTime<Utc>,
    },
    /// A person must approve before the step goes on.
    #[serde(rename = "run.gate_opened")]
    GateOpened {
        gate_id: GateId,
        step_id: StepId,
        /// Who may decide; empty means anyone allowed to decide gates.
        approvers: Vec<String>,
        message: String,
        expires_at: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    },
    #[serde(rename = "run.gate_approved")]
    GateApproved {
        gate_id: GateId,
        by: String,
        comment: Option<String>,
        at: DateTime<Utc>,
    },
    #[serde(rename = "run.gate_rejected")]
    GateRejected {
        gate_id: GateId,
        by: String,
        comment: String,
        at: DateTime<Utc>,
    },
    /// Nobody decided before the gate's expiry.
    #[serde(rename = "run.gate_expired")]
    GateExpired { gate_id: GateId, at: DateTime<Utc> },
    /// Money or tokens were spent; `total_usd` is the run's total after this charge.
    #[serde(rename = "run.cost_charged")]
    CostCharged {
        step_id: Option<StepId>,
        usd: f64,
        tokens: u64,
        total_usd: f64,
        at: DateTime<Utc>,
    },
    /// The run's total went over its budget (recorded once, by the charge that did it).
    #[serde(rename = "run.budget_exceeded")]
    BudgetExceeded {
        budget_usd: f64,
        total_usd: f64,
        at: DateTime<Utc>,
    },
    /// The run is failing: the compensations of `steps` run next, in this order.
    #[serde(rename = "run.compensation_started")]
    CompensationStarted {
        reason: String,
        /// The class of the failure the run fails with (absent in events written
        /// before it was recorded).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error_class: Option<ErrorClass>,
        steps: Vec<StepId>,
        at: DateTime<Utc>,
    },
    /// The compensation of one step ran.
    #[serde(rename = "run.compensation_step_ran")]
    CompensationStepRan {
        step_id: StepId,
        succeeded: bool,
        error: Option<String>,
        at: DateTime<Utc>,
    },
    /// The run finished successfully with these outputs.
    #[serde(rename = "run.completed")]
    Completed { outputs: Value, at: DateTime<Utc> },
    /// The run failed for good.
    #[serde(rename = "run.failed")]
    Failed {
        reason: String,
        error_class: Option<ErrorClass>,
        at: DateTime<Utc>,
    },
    /// Someone paused the run: no step starts until it is resumed; steps already in
    /// flight finish and their outcomes are recorded.
    #[serde(rename = "run.paused")]
    Paused {
        by: String,
        reason: String,
        at: DateTime<Utc>,
        /// Paused because the whole workflow was paused (a workflow resume lifts it).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        workflow: bool,
    },
    /// Someone resumed a paused run.
    #[serde(rename = "run.resumed")]
    Resumed { by: String, at: DateTime<Utc> },
    /// Someone stopped the run.
    #[serde(rename = "run.cancelled")]
    Cancelled {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// The run's history grew past its limit and continues as new from here: the
    /// whole state as folded up to this event (as the log holds it: sealed values
    /// sealed, old attempts compacted), so a reader of the run's state starts here
    /// instead of at `run.started`. The events before it stay in the log as history.
    #[serde(rename = "run.continued")]
    Continued {
        state: Box<super::Run>,
        at: DateTime<Utc>,
    },
}

/// A field of an event that carries values from outside the definition (inputs,
/// outputs, error messages, free text): what masking and sealing may rewrite. Ids,
/// times and classes are never among them.
pub enum Payload<'a> {
    Text(&'a mut String),
    Value(&'a mut Value),
}

impl RunEvent {
    /// The fields of this event that carry values (see [`Payload`]).
    pub fn payloads_mut(&mut self) -> Vec<Payload<'_>> {
        match self {
            Self::Started { inputs, .. } => vec![Payload::Value(inputs)],
            Self::StepSucceeded { output, .. } => vec![Payload::Value(Arc::make_mut(output))],
            Self::StepStarted { call, .. } => call
                .iter_mut()
                .map(|c| Payload::Value(&mut c.inputs))
                .collect(),
            Self::StepCarried { output, .. } => output.iter_mut().map(Payload::Value).collect(),
            Self::StepFailed { error, .. } => vec![Payload::Text(&mut error.message)],
            Self::StepSkipped { reason, .. }
            | Self::CompensationStarted { reason, .. }
            | Self::Failed { reason, .. }
            | Self::Paused { reason, .. }
            | Self::Cancelled { reason, .. } => vec![Payload::Text(reason)],
            Self::GateOpened { message, .. } => vec![Payload::Text(message)],
            Self::GateApproved { comment, .. } => comment.iter_mut().map(Payload::Text).collect(),
            Self::GateRejected { comment, .. } => vec![Payload::Text(comment)],
            Self::CompensationStepRan { error, .. } => {
                error.iter_mut().map(Payload::Text).collect()
            }
            Self::Completed { outputs, .. } => vec![Payload::Value(outputs)],
            Self::StepScheduled { .. }
            | Self::StepRetried { .. }
            | Self::StepThrottled { .. }
            | Self::RecoveryApplied { .. }
            | Self::GateExpired { .. }
            | Self::CostCharged { .. }
            | Self::BudgetExceeded { .. }
            | Self::Resumed { .. }
            | Self::Queued { .. }
            | Self::Admitted { .. }
            | Self::Derived { .. }
            | Self::Continued { .. } => Vec::new(),
        }
    }

    /// When the event happened (the time carried by the command that caused it).
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::Started { at, .. }
            | Self::StepScheduled { at, .. }
            | Self::StepStarted { at, .. }
            | Self::StepSucceeded { at, .. }
            | Self::StepFailed { at, .. }
            | Self::StepRetried { at, .. }
            | Self::StepThrottled { at, .. }
            | Self::StepSkipped { at, .. }
            | Self::RecoveryApplied { at, .. }
            | Self::GateOpened { at, .. }
            | Self::GateApproved { at, .. }
            | Self::GateRejected { at, .. }
            | Self::GateExpired { at, .. }
            | Self::CostCharged { at, .. }
            | Self::BudgetExceeded { at, .. }
            | Self::CompensationStarted { at, .. }
            | Self::CompensationStepRan { at, .. }
            | Self::Completed { at, .. }
            | Self::Failed { at, .. }
            | Self::Paused { at, .. }
            | Self::Resumed { at, .. }
            | Self::Queued { at, .. }
            | Self::Admitted { at }
            | Self::StepCarried { at, .. }
            | Self::Derived { at, .. }
            | Self::Continued { at, .. }
            | Self::Cancelled { at, .. } => *at,
        }
    }
}

/// The types of the events that end a run (`run.completed`, `run.failed`,
/// `run.cancelled`): after one, a run takes no event but `run.derived`, so the
/// store can tell a finished run from its stream alone (a run partition is archived
/// whole once every run in it has one).
pub const FINISHED_EVENT_TYPES: [&str; 3] = ["run.completed", "run.failed", "run.cancelled"];

impl DomainEvent for RunEvent {
    fn event_type(&self) -> String {
        match self {
            Self::Started { .. } => "run.started",
            Self::StepScheduled { .. } => "run.step_scheduled",
            Self::StepStarted { .. } => "run.step_started",
            Self::StepSucceeded { .. } => "run.step_succeeded",
            Self::StepFailed { .. } => "run.step_failed",
            Self::StepRetried { .. } => "run.step_retried",
            Self::StepThrottled { .. } => "run.step_throttled",
            Self::StepSkipped { .. } => "run.step_skipped",
            Self::RecoveryApplied { .. } => "run.recovery_applied",
            Self::GateOpened { .. } => "run.gate_opened",
            Self::GateApproved { .. } => "run.gate_approved",
            Self::GateRejected { .. } => "run.gate_rejected",
            Self::GateExpired { .. } => "run.gate_expired",
            Self::CostCharged { .. } => "run.cost_charged",
            Self::BudgetExceeded { .. } => "run.budget_exceeded",
            Self::CompensationStarted { .. } => "run.compensation_started",
            Self::CompensationStepRan { .. } => "run.compensation_step_ran",
            Self::Completed { .. } => "run.completed",
            Self::Failed { .. } => "run.failed",
            Self::StepCarried { .. } => "run.step_carried",
            Self::Derived { .. } => "run.derived",
            Self::Paused { .. } => "run.paused",
            Self::Resumed { .. } => "run.resumed",
            Self::Queued { .. } => "run.queued",
            Self::Admitted { .. } => "run.admitted",
            Self::Cancelled { .. } => "run.cancelled",
            Self::Continued { .. } => crate::log::CONTINUED_EVENT_TYPE,
        }
        .to_string()
    }

    fn event_version(&self) -> String {
        "1".to_string()
    }
}
