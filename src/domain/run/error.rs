//! Why a command on a run was refused. Each message names the run, what was attempted
//! and why it cannot be done, so it can be shown to a person or logged as is.

use chrono::{DateTime, Utc};

use crate::domain::ids::{GateId, RunId, StepId};

use super::commands::RunAction;
use super::state::{GateDecision, RunStatus, StepPhase, StepSituation};
use super::types::RecoveryAction;

/// A refused run command.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    #[error("the run does not exist: cannot {action} (a run must be started first)")]
    NotStarted { action: RunAction },

    #[error("run {run} already exists (it is {status}): cannot start it again")]
    AlreadyStarted { run: RunId, status: RunStatus },

    #[error("run {run} is finished ({status}): cannot {action}, a finished run never changes")]
    Finished {
        run: RunId,
        status: RunStatus,
        action: RunAction,
    },

    #[error(
        "run {run} is {status}: cannot {action} ({action} is only allowed in {})",
        list_statuses(.allowed)
    )]
    InvalidStatus {
        run: RunId,
        status: RunStatus,
        action: RunAction,
        allowed: &'static [RunStatus],
    },

    #[error("run {run}: cannot {action} with an empty {field}")]
    Empty {
        run: RunId,
        action: RunAction,
        field: &'static str,
    },

    #[error("run {run}: cannot {action}: {field} {value} is not a finite amount of zero or more")]
    InvalidAmount {
        run: RunId,
        action: RunAction,
        field: &'static str,
        value: f64,
    },

    #[error("run {run}: cannot {action} with {field} {deadline}, which is not after {at}")]
    DeadlineNotAfter {
        run: RunId,
        action: RunAction,
        field: &'static str,
        deadline: DateTime<Utc>,
        at: DateTime<Utc>,
    },

    #[error(
        "run {run}: cannot carry step `{step}`: {reason} (steps are carried only into a \
         rerun or fork, before any step of its own)"
    )]
    CannotCarry {
        run: RunId,
        step: StepId,
        reason: &'static str,
    },

    #[error("run {run}: cannot {} step `{step}`: it was never scheduled", .action.verb())]
    UnknownStep {
        run: RunId,
        step: StepId,
        action: RunAction,
    },

    #[error(
        "run {run}: step `{step}` was already scheduled ({now}): a step is scheduled once, \
         later attempts come from retries"
    )]
    StepAlreadyScheduled {
        run: RunId,
        step: StepId,
        now: StepSituation,
    },

    #[error(
        "run {run}: cannot {} step `{step}`: it already succeeded on attempt {attempt}, and \
         completed steps are never re-executed",
        .action.verb()
    )]
    StepAlreadySucceeded {
        run: RunId,
        step: StepId,
        attempt: u32,
        action: RunAction,
    },

    #[error(
        "run {run}: step `{step}` attempt {attempt} is not {} ({})",
        .expected.as_str(),
        describe_attempt(*.attempt, .now)
    )]
    AttemptNotIn {
        run: RunId,
        step: StepId,
        attempt: u32,
        expected: StepPhase,
        now: StepSituation,
    },

    #[error(
        "run {run}: cannot {} step `{step}`: {now} (only allowed when the step {})",
        .action.verb(),
        list_phases(.allowed)
    )]
    StepNotIn {
        run: RunId,
        step: StepId,
        action: RunAction,
        now: StepSituation,
        allowed: &'static [StepPhase],
    },

    #[error(
        "run {run}: cannot {} step `{step}`: the failure of attempt {attempt} is final",
        .action.verb()
    )]
    FailureIsFinal {
        run: RunId,
        step: StepId,
        attempt: u32,
        action: RunAction,
    },

    #[error(
        "run {run}: step `{step}` attempt {attempt} was started with idempotency key \
         {recorded:?}: it may only be started again with that key, not {given:?}"
    )]
    IdempotencyKeyMismatch {
        run: RunId,
        step: StepId,
        attempt: u32,
        recorded: String,
        given: String,
    },

    #[error(
        "run {run}: step `{step}` attempt {attempt} is due at {due_at}: cannot start it at {at}"
    )]
    NotDue {
        run: RunId,
        step: StepId,
        attempt: u32,
        due_at: DateTime<Utc>,
        at: DateTime<Utc>,
    },

    #[error(
        "run {run}: cannot retry step `{step}` after {backoff_ms} ms: the next attempt would be \
         due beyond the supported date range"
    )]
    BackoffOutOfRange {
        run: RunId,
        step: StepId,
        backoff_ms: u64,
    },

    #[error(
        "run {run}: the failure of step `{step}` attempt {attempt} was already handled \
         ({applied}): one recovery per failed attempt"
    )]
    RecoveryAlreadyApplied {
        run: RunId,
        step: StepId,
        attempt: u32,
        applied: RecoveryAction,
    },

    #[error(
        "run {run}: cannot apply increase_timeout to step `{step}`: a timeout of 0 s is no \
         increase"
    )]
    ZeroTimeout { run: RunId, step: StepId },

    #[error("run {run}: gate {gate} already exists ({}): gate ids are never reused", describe_gate(.decision))]
    GateExists {
        run: RunId,
        gate: GateId,
        decision: Option<GateDecision>,
    },

    #[error("run {run}: cannot {} gate {gate}: the run has no such gate", .action.verb())]
    UnknownGate {
        run: RunId,
        gate: GateId,
        action: RunAction,
    },

    #[error("run {run}: cannot {} gate {gate}: it is no longer open (it was {decision})", .action.verb())]
    GateClosed {
        run: RunId,
        gate: GateId,
        action: RunAction,
        decision: GateDecision,
    },

    #[error(
        "run {run}: {by} may not {} gate {gate}: only {} may decide it",
        .action.verb(),
        .approvers.join(", ")
    )]
    NotAnApprover {
        run: RunId,
        gate: GateId,
        action: RunAction,
        by: String,
        approvers: Vec<String>,
    },

    #[error("run {run}: cannot {} gate {gate} at {at}: it expired at {expires_at}", .action.verb())]
    GateHasExpired {
        run: RunId,
        gate: GateId,
        action: RunAction,
        expires_at: DateTime<Utc>,
        at: DateTime<Utc>,
    },

    #[error("run {run}: cannot expire gate {gate} at {at}: it is open until {expires_at}")]
    GateNotDue {
        run: RunId,
        gate: GateId,
        expires_at: DateTime<Utc>,
        at: DateTime<Utc>,
    },

    #[error("run {run}: cannot expire gate {gate}: it has no expiry")]
    GateNeverExpires { run: RunId, gate: GateId },

    #[error(
        "run {run} cannot complete yet: {}",
        describe_unfinished(.running, .scheduled, .open_gates, .failed)
    )]
    Unfinished {
        run: RunId,
        running: Vec<StepId>,
        scheduled: Vec<StepId>,
        open_gates: Vec<GateId>,
        /// Failed steps still in play: no recovery chosen yet, or a retry (or an
        /// approved escalation) that has not queued its next attempt.
        failed: Vec<StepId>,
    },

    #[error(
        "run {run}: cannot start compensation, nothing failed (no step failed, no gate was \
         rejected or expired, the budget was not exceeded and the run's deadline has not passed)"
    )]
    NothingFailed { run: RunId },

    #[error(
        "run {run}: cannot compensate step `{step}`: {} (only a succeeded step is compensated)",
        describe_step(.now)
    )]
    NotCompensable {
        run: RunId,
        step: StepId,
        now: Option<StepSituation>,
    },

    #[error("run {run}: step `{step}` is listed twice for compensation")]
    DuplicateCompensation { run: RunId, step: StepId },

    #[error(
        "run {run}: cannot compensate step `{first}` before step `{second}`: `{first}` \
         succeeded first, and compensations run in reverse order of success"
    )]
    CompensationOutOfOrder {
        run: RunId,
        first: StepId,
        second: StepId,
    },

    #[error(
        "run {run}: cannot record the compensation of step `{step}`: {}",
        describe_expected_compensation(.expected)
    )]
    UnexpectedCompensation {
        run: RunId,
        step: StepId,
        expected: Option<StepId>,
    },

    #[error(
        "run {run}: the compensation of step `{step}` {}",
        if *.succeeded { "succeeded but carries an error" } else { "failed without an error message" }
    )]
    InconsistentCompensation {
        run: RunId,
        step: StepId,
        succeeded: bool,
    },

    #[error(
        "run {run} cannot fail yet: the compensation of {} has not run",
        list_steps(.remaining)
    )]
    CompensationUnfinished { run: RunId, remaining: Vec<StepId> },
}

/// `RUNNING`, `RUNNING or WAITING`, `RUNNING, WAITING or COMPENSATING`.
fn list_statuses(statuses: &[RunStatus]) -> String {
    or_list(statuses.iter().map(ToString::to_string).collect())
}

/// `is scheduled or has failed`.
fn list_phases(phases: &[StepPhase]) -> String {
    or_list(
        phases
            .iter()
            .map(|phase| {
                match phase {
                    StepPhase::Scheduled => "is scheduled",
                    StepPhase::Running => "is running",
                    StepPhase::Succeeded => "has succeeded",
                    StepPhase::Failed => "has failed",
                    StepPhase::Skipped => "was skipped",
                }
                .to_string()
            })
            .collect(),
    )
}

fn or_list(items: Vec<String>) -> String {
    match items.as_slice() {
        [] => "no state".to_string(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// "`a`, `b`".
fn list_steps(steps: &[StepId]) -> String {
    let names: Vec<String> = steps.iter().map(|s| format!("`{s}`")).collect();
    names.join(", ")
}

/// "it is scheduled" when the step is on the attempt in question, else "attempt 3 is
/// scheduled".
fn describe_attempt(attempt: u32, now: &StepSituation) -> String {
    if now.attempt == attempt {
        let what = match now.phase {
            StepPhase::Scheduled => "is scheduled",
            StepPhase::Running => "is running",
            StepPhase::Succeeded => "succeeded",
            StepPhase::Failed => "failed",
            StepPhase::Skipped => "was skipped",
        };
        format!("it {what}")
    } else {
        now.to_string()
    }
}

fn describe_step(now: &Option<StepSituation>) -> String {
    match now {
        Some(now) => now.to_string(),
        None => "it never ran".to_string(),
    }
}

fn describe_gate(decision: &Option<GateDecision>) -> String {
    match decision {
        Some(decision) => format!("it was {decision}"),
        None => "it is open".to_string(),
    }
}

fn describe_expected_compensation(expected: &Option<StepId>) -> String {
    match expected {
        Some(expected) => format!("the next compensation is of step `{expected}`"),
        None => "every compensation already ran".to_string(),
    }
}

fn describe_unfinished(
    running: &[StepId],
    scheduled: &[StepId],
    gates: &[GateId],
    failed: &[StepId],
) -> String {
    let mut parts = Vec::new();
    if !running.is_empty() {
        parts.push(format!("{} still running", list_steps(running)));
    }
    if !scheduled.is_empty() {
        parts.push(format!("{} still scheduled", list_steps(scheduled)));
    }
    if !gates.is_empty() {
        let gates: Vec<String> = gates.iter().map(ToString::to_string).collect();
        parts.push(format!("gate {} still open", gates.join(", ")));
    }
    if !failed.is_empty() {
        parts.push(format!(
            "{} failed and {} not settled (a retry or a recovery is still to come)",
            list_steps(failed),
            if failed.len() == 1 { "was" } else { "were" }
        ));
    }
    parts.join("; ")
}
