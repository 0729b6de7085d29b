//! The values carried inside run events: error classes, step errors, recovery actions
//! and the parent of a sub-workflow run. They are part of the wire format.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::domain::ids::{GateId, RunId, StepId};

/// What kind of failure a step met; it selects the error handler (DESIGN §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    Network,
    RateLimit,
    Authentication,
    Dependency,
    Validation,
    Timeout,
    Budget,
    Unknown,
}

impl ErrorClass {
    pub const ALL: [ErrorClass; 8] = [
        Self::Network,
        Self::RateLimit,
        Self::Authentication,
        Self::Dependency,
        Self::Validation,
        Self::Timeout,
        Self::Budget,
        Self::Unknown,
    ];

    /// The name used on the wire, in workflow files and in messages (`rate_limit`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Network => "network",
            Self::RateLimit => "rate_limit",
            Self::Authentication => "authentication",
            Self::Dependency => "dependency",
            Self::Validation => "validation",
            Self::Timeout => "timeout",
            Self::Budget => "budget",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of the [`ErrorClass`]es.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown error class {0:?} (expected one of network, rate_limit, authentication, \
     dependency, validation, timeout, budget, unknown)"
)]
pub struct UnknownErrorClass(pub String);

impl FromStr for ErrorClass {
    type Err = UnknownErrorClass;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|class| class.as_str() == s)
            .ok_or_else(|| UnknownErrorClass(s.to_string()))
    }
}

/// Why one attempt of a step failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepError {
    pub class: ErrorClass,
    pub message: String,
}

impl fmt::Display for StepError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.class, self.message)
    }
}

/// What an error handler does about a failed attempt (DESIGN §4, self-healing).
///
/// On the wire an object tagged by `kind`: `{"kind": "fallback", "tool": "curl"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RecoveryAction {
    /// Try again at once.
    Retry,
    /// Try again after the step's back-off.
    RetryWithBackoff,
    /// Try again with a longer step timeout.
    IncreaseTimeout { new_timeout_seconds: u64 },
    /// Run the configured authentication hook, then try again.
    RefreshAuth,
    /// Try again with another tool.
    Fallback { tool: String },
    /// Ask a person: the gate `gate_id` is opened for the step.
    Escalate { gate_id: GateId },
    /// Give up on the step: its failure is final. The run fails, unless the step was
    /// in a branch of a `wait_for: any` race that another branch won.
    Abort,
    /// Give up on the step but not on the run: the failure is final and the run goes
    /// on (`on_error: continue`); later steps can test the step's status.
    Continue,
}

impl RecoveryAction {
    /// The `kind` on the wire (`retry_with_backoff`).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Retry => "retry",
            Self::RetryWithBackoff => "retry_with_backoff",
            Self::IncreaseTimeout { .. } => "increase_timeout",
            Self::RefreshAuth => "refresh_auth",
            Self::Fallback { .. } => "fallback",
            Self::Escalate { .. } => "escalate",
            Self::Abort => "abort",
            Self::Continue => "continue",
        }
    }
}

impl fmt::Display for RecoveryAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::IncreaseTimeout {
                new_timeout_seconds,
            } => write!(f, "increase_timeout to {new_timeout_seconds} s"),
            Self::Fallback { tool } => write!(f, "fallback to `{tool}`"),
            Self::Escalate { gate_id } => write!(f, "escalate to gate {gate_id}"),
            other => f.write_str(other.kind()),
        }
    }
}

/// The run a rerun or a fork was made from, and the step it starts again at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOrigin {
    pub run_id: RunId,
    pub from_step: StepId,
    pub kind: DerivedKind,
}

/// How a run was made from another: with the same inputs, or with changed ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DerivedKind {
    Rerun,
    Fork,
}

impl DerivedKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rerun => "rerun",
            Self::Fork => "fork",
        }
    }
}

/// What a step that reaches outside awl was asked to do, as it started: the tool
/// (a declared tool's name, `shell`, `http`, `database`, or `workflow:NAME` for a
/// sub-workflow) and its rendered arguments. Learning reads it back as one tool call
/// (with the attempt's outcome); a person reads it as the step's input. Credentials
/// (HTTP headers, process environment) are not part of it, and the run's secrets are
/// masked in it like in every other value of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepCall {
    pub tool: String,
    pub inputs: serde_json::Value,
}

/// The step of a parent run that started this run as a sub-workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentRef {
    pub run_id: RunId,
    pub step_id: StepId,
}

/// One concurrency slot a run must hold before its first step: at most `limit` runs
/// hold a slot of `scope` at once (`workflow:NAME` for the whole workflow,
/// `workflow:NAME:key:VALUE` for one value of its key expression).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FlowSlot {
    pub scope: String,
    pub limit: u32,
}

/// How a run is scheduled among others: its priority (higher first, among runs due
/// at the same time and for a free slot) and the concurrency slots it needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub priority: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slots: Vec<FlowSlot>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

impl Flow {
    /// No priority and no slots: what a run started before flow control has.
    pub fn is_default(&self) -> bool {
        self == &Flow::default()
    }
}

/// The version of the rules a run was started under: how its steps are recorded.
///
/// A run replays by deciding its events again, so a change to what the engine
/// decides for a history already in the log is recorded on each run that follows it
/// (in `run.started`) and never applied to runs started before it.
///
/// - 1: every step is scheduled (`run.step_scheduled`) before it starts.
/// - 2: a step the engine starts in the tick that reaches it is started directly
///   (`run.step_started` for attempt 1 with no schedule before it); one skipped
///   there is skipped directly. A step is still scheduled when it cannot start at
///   once (its run over budget: it waits for the budget's gate). Two events per
///   performed step instead of three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Rules(pub u32);

impl Rules {
    /// What a run recorded before rules had versions has.
    pub const FIRST: Rules = Rules(1);
    /// What a run started by this build records.
    pub const CURRENT: Rules = Rules(2);

    /// Whether every step is scheduled before it starts (rules 1).
    pub fn schedules_every_step(self) -> bool {
        self < Rules(2)
    }

    pub fn is_first(&self) -> bool {
        *self == Self::FIRST
    }
}

impl Default for Rules {
    /// A run whose start carries no rules was recorded before they had versions.
    fn default() -> Self {
        Self::FIRST
    }
}

impl fmt::Display for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
