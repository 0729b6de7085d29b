//! The pieces of a run's folded state: its status, each step's state and attempts,
//! its gates, its compensation and how it ended. Read-only views for the executor and
//! the projections; only `apply` builds them.

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::ids::{GateId, StepId};

use super::types::{ErrorClass, RecoveryAction, StepError};

/// Where a run is. A run that was never started has no status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunStatus {
    /// Started, waiting for a concurrency slot: no step starts until it holds every
    /// slot it needs.
    Queued,
    /// Steps are scheduled or running.
    Running,
    /// Someone paused it: no step starts until it is resumed.
    Paused,
    /// At least one gate is open and no step is running: a person must act.
    Waiting,
    /// The run is failing and the compensations of its succeeded steps run.
    Compensating,
    Succeeded,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub const ALL: [RunStatus; 8] = [
        Self::Queued,
        Self::Running,
        Self::Paused,
        Self::Waiting,
        Self::Compensating,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];

    /// SUCCEEDED, FAILED or CANCELLED: nothing changes any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// QUEUED, RUNNING, WAITING or PAUSED: the run is on its way (a paused run's
    /// steps in flight still finish; a queued run's start when it gets its slots).
    pub fn is_active(self) -> bool {
        matches!(
            self,
            Self::Queued | Self::Running | Self::Waiting | Self::Paused
        )
    }

    /// The name used on the wire and in messages (`COMPENSATING`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "QUEUED",
            Self::Running => "RUNNING",
            Self::Paused => "PAUSED",
            Self::Waiting => "WAITING",
            Self::Compensating => "COMPENSATING",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of one step, after its latest event.
///
/// On the wire an object tagged by `status`: `{"status": "RUNNING", "attempt": 1, ..}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepState {
    /// Waiting for `due_at` to start `attempt`. `throttled`: the attempt was held
    /// back by this rate limit and its token is reserved for `due_at`.
    Scheduled {
        attempt: u32,
        due_at: DateTime<Utc>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        throttled: Option<String>,
    },
    /// `attempt` was started and has no outcome yet.
    Running {
        attempt: u32,
        idempotency_key: String,
        started_at: DateTime<Utc>,
        timeout_at: Option<DateTime<Utc>>,
    },
    /// Done for good: `output` is used from now on, the step never runs again.
    ///
    /// The output is shared with the event that recorded it (and with the outcome the
    /// worker reported): a step's output is one value, not a copy per holder.
    Succeeded { attempt: u32, output: Arc<Value> },
    /// `attempt` failed. A failure is final once no further attempt can follow: the
    /// handler aborted, or the run stopped.
    Failed {
        attempt: u32,
        error: StepError,
        #[serde(rename = "final")]
        is_final: bool,
    },
    /// The step will not run (any more); `attempt` is the last one it had.
    Skipped { attempt: u32, reason: String },
}

impl StepState {
    /// The step's current (latest) attempt.
    pub fn attempt(&self) -> u32 {
        match self {
            Self::Scheduled { attempt, .. }
            | Self::Running { attempt, .. }
            | Self::Succeeded { attempt, .. }
            | Self::Failed { attempt, .. }
            | Self::Skipped { attempt, .. } => *attempt,
        }
    }

    pub fn phase(&self) -> StepPhase {
        match self {
            Self::Scheduled { .. } => StepPhase::Scheduled,
            Self::Running { .. } => StepPhase::Running,
            Self::Succeeded { .. } => StepPhase::Succeeded,
            Self::Failed { .. } => StepPhase::Failed,
            Self::Skipped { .. } => StepPhase::Skipped,
        }
    }

    /// Succeeded or skipped: the step has nothing left to do.
    pub fn is_done(&self) -> bool {
        matches!(self, Self::Succeeded { .. } | Self::Skipped { .. })
    }
}

/// The kind of a [`StepState`], without its data: what errors and views name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StepPhase {
    Scheduled,
    Running,
    Succeeded,
    Failed,
    Skipped,
}

impl StepPhase {
    /// The word used in messages ("attempt 2 is not running (it is scheduled)").
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }
}

impl fmt::Display for StepPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step's phase and attempt, as an error describes where the step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StepSituation {
    pub phase: StepPhase,
    pub attempt: u32,
}

impl From<&StepState> for StepSituation {
    fn from(state: &StepState) -> Self {
        Self {
            phase: state.phase(),
            attempt: state.attempt(),
        }
    }
}

/// "attempt 2 is scheduled", "attempt 1 failed".
impl fmt::Display for StepSituation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.phase {
            StepPhase::Scheduled => "is scheduled",
            StepPhase::Running => "is running",
            StepPhase::Succeeded => "succeeded",
            StepPhase::Failed => "failed",
            StepPhase::Skipped => "was skipped",
        };
        write!(f, "attempt {} {what}", self.attempt)
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AttemptOutcome {
    Succeeded,
    Failed,
    /// Skipped before it started.
    Skipped,
}

/// One attempt of a step, for timelines: when it was queued, started (and restarted
/// after a crash), ended, and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub attempt: u32,
    /// When it was scheduled (first attempt) or retried.
    pub scheduled_at: DateTime<Utc>,
    pub due_at: DateTime<Utc>,
    /// The back-off before this attempt, for a retry.
    pub backoff_ms: Option<u64>,
    pub started_at: Option<DateTime<Utc>>,
    /// Every later start of the same attempt with the same key (crash recovery).
    pub restarted_at: Vec<DateTime<Utc>>,
    pub idempotency_key: Option<String>,
    pub timeout_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub outcome: Option<AttemptOutcome>,
    pub error: Option<StepError>,
    pub cost_usd: Option<f64>,
    pub tokens: Option<u64>,
    /// What the error handler chose after this attempt failed.
    pub recovery: Option<RecoveryAction>,
}

impl Attempt {
    pub(super) fn scheduled(
        attempt: u32,
        due_at: DateTime<Utc>,
        backoff_ms: Option<u64>,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            attempt,
            scheduled_at: at,
            due_at,
            backoff_ms,
            started_at: None,
            restarted_at: Vec::new(),
            idempotency_key: None,
            timeout_at: None,
            ended_at: None,
            outcome: None,
            error: None,
            cost_usd: None,
            tokens: None,
            recovery: None,
        }
    }

    /// The class of the error this attempt failed with.
    pub fn error_class(&self) -> Option<ErrorClass> {
        self.error.as_ref().map(|e| e.class)
    }
}

/// One approval gate of the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    pub gate_id: GateId,
    pub step_id: StepId,
    /// Who may decide; empty means anyone allowed to decide gates.
    pub approvers: Vec<String>,
    pub message: String,
    pub opened_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    /// `None` while the gate is open.
    pub decision: Option<GateDecision>,
}

impl Gate {
    pub fn is_open(&self) -> bool {
        self.decision.is_none()
    }

    /// Whether `who` may approve or reject this gate.
    pub fn may_decide(&self, who: &str) -> bool {
        self.approvers.is_empty() || self.approvers.iter().any(|a| a == who)
    }
}

/// How a gate was closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GateDecision {
    Approved {
        by: String,
        comment: Option<String>,
        at: DateTime<Utc>,
    },
    Rejected {
        by: String,
        comment: String,
        at: DateTime<Utc>,
    },
    Expired {
        at: DateTime<Utc>,
    },
}

impl fmt::Display for GateDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Approved { by, .. } => write!(f, "approved by {by}"),
            Self::Rejected { by, .. } => write!(f, "rejected by {by}"),
            Self::Expired { at } => write!(f, "expired at {at}"),
        }
    }
}

/// The saga of a failing run: which compensations run, in order, and which ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compensation {
    pub reason: String,
    /// The class of the failure the run fails with.
    #[serde(default)]
    pub error_class: Option<ErrorClass>,
    /// The steps to compensate, in the order their compensations run.
    pub steps: Vec<StepId>,
    pub ran: Vec<CompensationRan>,
    pub started_at: DateTime<Utc>,
}

impl Compensation {
    /// The step whose compensation runs next, if any is left.
    pub fn next_step(&self) -> Option<&StepId> {
        self.steps.get(self.ran.len())
    }

    /// The steps whose compensation has not run yet, in order.
    pub fn remaining(&self) -> &[StepId] {
        self.steps.get(self.ran.len()..).unwrap_or_default()
    }
}

/// The outcome of one compensation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompensationRan {
    pub step_id: StepId,
    pub succeeded: bool,
    pub error: Option<String>,
    pub at: DateTime<Utc>,
}

/// The concurrency slot a queued run waits for, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueuedOn {
    pub scope: String,
    pub limit: u32,
    pub since: DateTime<Utc>,
}

/// Who paused a run, why and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    pub by: String,
    pub reason: String,
    pub at: DateTime<Utc>,
    /// The pause came from pausing the whole workflow: resuming the workflow lifts it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub workflow: bool,
}

/// How a finished run ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RunOutcome {
    Succeeded {
        outputs: Value,
        at: DateTime<Utc>,
    },
    Failed {
        reason: String,
        error_class: Option<ErrorClass>,
        at: DateTime<Utc>,
    },
    Cancelled {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
}

impl RunOutcome {
    /// The terminal status this outcome leaves the run in.
    pub fn status(&self) -> RunStatus {
        match self {
            Self::Succeeded { .. } => RunStatus::Succeeded,
            Self::Failed { .. } => RunStatus::Failed,
            Self::Cancelled { .. } => RunStatus::Cancelled,
        }
    }
}
