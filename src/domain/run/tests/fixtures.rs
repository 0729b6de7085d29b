//! One helper per event and per command (each command helper takes the arguments of the
//! event helper of the same name, so a case reads `schedule(..)` -> `step_scheduled(..)`),
//! the streams that reach each run status, and the shared table runner.

use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::domain::ids::{GateId, RunId, StepId, WorkflowName};
use crate::domain::run::RunStatus::*;
use crate::domain::run::*;
use crate::domain::testing::Stream;
pub(super) use crate::domain::testing::{case, check, fold, t, then};

impl Stream for RunEvent {
    type Of = Run;
    const VARIANTS: usize = 27;

    fn variant(&self) -> usize {
        match self {
            RunEvent::Started { .. } => 0,
            RunEvent::StepScheduled { .. } => 1,
            RunEvent::StepStarted { .. } => 2,
            RunEvent::StepSucceeded { .. } => 3,
            RunEvent::StepFailed { .. } => 4,
            RunEvent::StepRetried { .. } => 5,
            RunEvent::StepSkipped { .. } => 6,
            RunEvent::RecoveryApplied { .. } => 7,
            RunEvent::GateOpened { .. } => 8,
            RunEvent::GateApproved { .. } => 9,
            RunEvent::GateRejected { .. } => 10,
            RunEvent::GateExpired { .. } => 11,
            RunEvent::CostCharged { .. } => 12,
            RunEvent::BudgetExceeded { .. } => 13,
            RunEvent::CompensationStarted { .. } => 14,
            RunEvent::CompensationStepRan { .. } => 15,
            RunEvent::Completed { .. } => 16,
            RunEvent::Failed { .. } => 17,
            RunEvent::Cancelled { .. } => 18,
            RunEvent::Paused { .. } => 19,
            RunEvent::Resumed { .. } => 20,
            RunEvent::StepCarried { .. } => 21,
            RunEvent::Derived { .. } => 22,
            RunEvent::Continued { .. } => 23,
            RunEvent::Queued { .. } => 24,
            RunEvent::Admitted { .. } => 25,
            RunEvent::StepThrottled { .. } => 26,
        }
    }

    fn time(&self) -> DateTime<Utc> {
        self.at()
    }
}

pub(super) type Then = crate::domain::testing::Then<RunEvent>;
pub(super) type Case = crate::domain::testing::Case<RunEvent>;

// ---- time and ids ------------------------------------------------------------------

/// `ms` milliseconds after `at`.
pub(super) fn plus_ms(at: DateTime<Utc>, ms: i64) -> DateTime<Utc> {
    at + Duration::milliseconds(ms)
}

/// When the tables issue their commands: after every event of every path.
pub(super) const LATE: i64 = 100;
/// The budget of the runs built by `started`.
pub(super) const BUDGET: f64 = 10.0;
/// The run's own deadline, far after `LATE`.
pub(super) const RUN_DEADLINE: i64 = 10_000;
/// When `verify` is due in the paths (before `LATE`).
pub(super) const VERIFY_DUE: i64 = 90;
/// When gate g2 of the paths expires (before `LATE`).
pub(super) const G2_EXPIRY: i64 = 50;
/// What `fetch` costs in the paths.
pub(super) const FETCH_USD: f64 = 2.0;
pub(super) const FETCH_TOKENS: u64 = 100;

pub(super) fn run_id() -> RunId {
    RunId::from_uuid(Uuid::from_u128(1))
}
pub(super) fn parent() -> ParentRef {
    ParentRef {
        run_id: RunId::from_uuid(Uuid::from_u128(0x99)),
        step_id: step("spawn"),
    }
}
pub(super) fn workflow() -> WorkflowName {
    WorkflowName::try_from("release").unwrap()
}
pub(super) fn inputs() -> Value {
    json!({"branch": "main"})
}
pub(super) fn step(name: &str) -> StepId {
    StepId::try_from(name).unwrap()
}
pub(super) fn fetch() -> StepId {
    step("fetch")
}
pub(super) fn build() -> StepId {
    step("build")
}
pub(super) fn verify() -> StepId {
    step("verify")
}
pub(super) fn deploy() -> StepId {
    step("deploy")
}
pub(super) fn notify() -> StepId {
    step("notify")
}
pub(super) fn g1() -> GateId {
    GateId::from_uuid(Uuid::from_u128(0x11))
}
pub(super) fn g2() -> GateId {
    GateId::from_uuid(Uuid::from_u128(0x12))
}
pub(super) fn g3() -> GateId {
    GateId::from_uuid(Uuid::from_u128(0x13))
}
/// The output every step of these tables produces: it names the step.
pub(super) fn output_of(step_id: &StepId) -> Value {
    json!({"step": step_id.as_str(), "artifact": format!("{step_id}.tar")})
}
pub(super) fn step_error(class: ErrorClass) -> StepError {
    StepError {
        class,
        message: format!("{class} trouble"),
    }
}
pub(super) fn run_outputs() -> Value {
    json!({"released": true})
}
pub(super) fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(ToString::to_string).collect()
}

// ---- events (one helper per event, named after it) --------------------------------

/// A run with the standard budget and deadline, and no parent.
pub(super) fn started(at: DateTime<Utc>) -> RunEvent {
    started_with(Some(BUDGET), Some(t(RUN_DEADLINE)), None, at)
}
pub(super) fn started_with(
    budget_usd: Option<f64>,
    timeout_at: Option<DateTime<Utc>>,
    parent: Option<ParentRef>,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::Started {
        run_id: run_id(),
        workflow: workflow(),
        workflow_version: "3".into(),
        inputs: inputs(),
        budget_usd,
        timeout_at,
        parent,
        origin: None,
        flow: Flow::default(),
        rules: Rules::FIRST,
        at,
    }
}
/// A `run.started` event under `rules` (the paths are recorded under the first
/// rules, every step scheduled before it starts; a start command records the current
/// ones).
pub(super) fn under(rules: Rules, mut event: RunEvent) -> RunEvent {
    if let RunEvent::Started { rules: r, .. } = &mut event {
        *r = rules;
    }
    event
}
/// The concurrency scope the queued fixtures wait on.
pub(super) const SCOPE: &str = "workflow:deploy";
/// The flow of a run that needs a slot of `SCOPE` (limit 2) and of its key's scope.
pub(super) fn limited() -> Flow {
    Flow {
        priority: 5,
        slots: vec![
            FlowSlot {
                scope: SCOPE.into(),
                limit: 2,
            },
            FlowSlot {
                scope: format!("{SCOPE}:key:acme"),
                limit: 1,
            },
        ],
    }
}
/// `started(at)` with the slots of `limited()` to take: QUEUED.
pub(super) fn started_queued(at: DateTime<Utc>) -> RunEvent {
    let mut event = started(at);
    if let RunEvent::Started { flow, .. } = &mut event {
        *flow = limited();
    }
    event
}
pub(super) fn queued(scope: &str, at: DateTime<Utc>) -> RunEvent {
    RunEvent::Queued {
        scope: scope.into(),
        limit: 2,
        at,
    }
}
pub(super) fn admitted(at: DateTime<Utc>) -> RunEvent {
    RunEvent::Admitted { at }
}
pub(super) fn step_scheduled(
    step_id: StepId,
    due_at: DateTime<Utc>,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::StepScheduled {
        step_id,
        attempt: 1,
        due_at,
        at,
    }
}
pub(super) fn step_started(
    step_id: StepId,
    attempt: u32,
    key: &str,
    timeout_at: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::StepStarted {
        step_id,
        attempt,
        idempotency_key: key.into(),
        timeout_at,
        call: None,
        at,
    }
}
pub(super) fn step_succeeded(
    step_id: StepId,
    attempt: u32,
    cost_usd: Option<f64>,
    tokens: Option<u64>,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::StepSucceeded {
        output: output_of(&step_id).into(),
        step_id,
        attempt,
        cost_usd,
        tokens,
        at,
    }
}
pub(super) fn step_failed(
    step_id: StepId,
    attempt: u32,
    class: ErrorClass,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::StepFailed {
        step_id,
        attempt,
        error: step_error(class),
        at,
    }
}
/// Due `backoff_ms` after `at`.
pub(super) fn step_retried(
    step_id: StepId,
    next_attempt: u32,
    backoff_ms: u64,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::StepRetried {
        step_id,
        next_attempt,
        due_at: plus_ms(at, i64::try_from(backoff_ms).unwrap()),
        backoff_ms,
        at,
    }
}
/// The rate limit the throttle helpers name.
pub(super) const LIMIT: &str = "rate:github";
/// Its token reserved `wait_ms` after `at`.
pub(super) fn step_throttled(
    step_id: StepId,
    attempt: u32,
    wait_ms: i64,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::StepThrottled {
        step_id,
        attempt,
        limit: LIMIT.into(),
        until: plus_ms(at, wait_ms),
        at,
    }
}
pub(super) fn step_skipped(step_id: StepId, reason: &str, at: DateTime<Utc>) -> RunEvent {
    RunEvent::StepSkipped {
        step_id,
        reason: reason.into(),
        at,
    }
}
pub(super) fn recovery_applied(
    step_id: StepId,
    error_class: ErrorClass,
    action: RecoveryAction,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::RecoveryApplied {
        step_id,
        error_class,
        action,
        at,
    }
}
pub(super) fn gate_opened(
    gate_id: GateId,
    step_id: StepId,
    approvers: &[&str],
    expires_at: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::GateOpened {
        gate_id,
        step_id,
        approvers: strings(approvers),
        message: "ship it?".into(),
        expires_at,
        at,
    }
}
pub(super) fn gate_approved(
    gate_id: GateId,
    by: &str,
    comment: Option<&str>,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::GateApproved {
        gate_id,
        by: by.into(),
        comment: comment.map(Into::into),
        at,
    }
}
pub(super) fn gate_rejected(
    gate_id: GateId,
    by: &str,
    comment: &str,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::GateRejected {
        gate_id,
        by: by.into(),
        comment: comment.into(),
        at,
    }
}
pub(super) fn gate_expired(gate_id: GateId, at: DateTime<Utc>) -> RunEvent {
    RunEvent::GateExpired { gate_id, at }
}
pub(super) fn cost_charged(
    step_id: Option<StepId>,
    usd: f64,
    tokens: u64,
    total_usd: f64,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::CostCharged {
        step_id,
        usd,
        tokens,
        total_usd,
        at,
    }
}
pub(super) fn budget_exceeded(budget_usd: f64, total_usd: f64, at: DateTime<Utc>) -> RunEvent {
    RunEvent::BudgetExceeded {
        budget_usd,
        total_usd,
        at,
    }
}
pub(super) fn compensation_started(
    reason: &str,
    steps: Vec<StepId>,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::CompensationStarted {
        reason: reason.into(),
        error_class: None,
        steps,
        at,
    }
}
/// Succeeded when `error` is `None`.
pub(super) fn compensation_step_ran(
    step_id: StepId,
    error: Option<&str>,
    at: DateTime<Utc>,
) -> RunEvent {
    RunEvent::CompensationStepRan {
        step_id,
        succeeded: error.is_none(),
        error: error.map(Into::into),
        at,
    }
}
pub(super) fn completed(at: DateTime<Utc>) -> RunEvent {
    RunEvent::Completed {
        outputs: run_outputs(),
        at,
    }
}
pub(super) fn failed(reason: &str, error_class: Option<ErrorClass>, at: DateTime<Utc>) -> RunEvent {
    RunEvent::Failed {
        reason: reason.into(),
        error_class,
        at,
    }
}
pub(super) fn cancelled(by: &str, at: DateTime<Utc>) -> RunEvent {
    RunEvent::Cancelled {
        by: by.into(),
        reason: "not needed any more".into(),
        at,
    }
}

pub(super) fn paused(by: &str, at: DateTime<Utc>) -> RunEvent {
    RunEvent::Paused {
        by: by.into(),
        reason: "maintenance".into(),
        at,
        workflow: false,
    }
}

/// The continuation of the run `path(status)` folds to.
pub(super) fn continued(status: RunStatus, at: DateTime<Utc>) -> RunEvent {
    RunEvent::Continued {
        state: Box::new(fold(path(status)).compacted()),
        at,
    }
}

pub(super) fn resumed(by: &str, at: DateTime<Utc>) -> RunEvent {
    RunEvent::Resumed { by: by.into(), at }
}

/// The run other runs are made from in the fixtures.
pub(super) fn origin_run() -> RunId {
    RunId::from_uuid(Uuid::from_u128(0x0123))
}

pub(super) fn step_carried(step_id: StepId, at: DateTime<Utc>) -> RunEvent {
    RunEvent::StepCarried {
        step_id,
        from_run: origin_run(),
        output: Some(json!({"kept": true})),
        at,
    }
}

pub(super) fn derived(by: &str, at: DateTime<Utc>) -> RunEvent {
    RunEvent::Derived {
        run_id: origin_run(),
        kind: DerivedKind::Rerun,
        from_step: build(),
        by: by.into(),
        at,
    }
}

// ---- commands (one helper per command) ---------------------------------------------

/// Yields `under(Rules::CURRENT, started(at))`.
pub(super) fn start(at: DateTime<Utc>) -> RunCommand {
    start_with("3", Some(BUDGET), Some(t(RUN_DEADLINE)), None, at)
}
pub(super) fn start_with(
    workflow_version: &str,
    budget_usd: Option<f64>,
    timeout_at: Option<DateTime<Utc>>,
    parent: Option<ParentRef>,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::Start {
        run_id: run_id(),
        workflow: workflow(),
        workflow_version: workflow_version.into(),
        inputs: inputs(),
        budget_usd,
        timeout_at,
        parent,
        origin: None,
        flow: Flow::default(),
        at,
    }
}
/// Yields `queued(scope, at)`.
pub(super) fn queue(scope: &str, at: DateTime<Utc>) -> RunCommand {
    RunCommand::Queue {
        scope: scope.into(),
        limit: 2,
        at,
    }
}
/// Yields `admitted(at)`.
pub(super) fn admit(at: DateTime<Utc>) -> RunCommand {
    RunCommand::Admit { at }
}
pub(super) fn schedule(step_id: StepId, due_at: DateTime<Utc>, at: DateTime<Utc>) -> RunCommand {
    RunCommand::ScheduleStep {
        step_id,
        due_at,
        at,
    }
}
pub(super) fn start_step(
    step_id: StepId,
    attempt: u32,
    key: &str,
    timeout_at: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::StartStep {
        step_id,
        attempt,
        idempotency_key: key.into(),
        timeout_at,
        call: None,
        at,
    }
}
/// With the output `output_of(step_id)`.
pub(super) fn succeed(
    step_id: StepId,
    attempt: u32,
    cost_usd: Option<f64>,
    tokens: Option<u64>,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::SucceedStep {
        output: output_of(&step_id).into(),
        step_id,
        attempt,
        cost_usd,
        tokens,
        at,
    }
}
pub(super) fn fail_step(
    step_id: StepId,
    attempt: u32,
    class: ErrorClass,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::FailStep {
        step_id,
        attempt,
        error: step_error(class),
        at,
    }
}
pub(super) fn retry(step_id: StepId, backoff_ms: u64, at: DateTime<Utc>) -> RunCommand {
    RunCommand::RetryStep {
        step_id,
        backoff_ms,
        at,
    }
}
/// Yields `step_throttled(step_id, attempt, wait_ms, at)`.
pub(super) fn throttle(
    step_id: StepId,
    attempt: u32,
    wait_ms: i64,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::ThrottleStep {
        step_id,
        attempt,
        limit: LIMIT.into(),
        until: plus_ms(at, wait_ms),
        at,
    }
}
pub(super) fn skip(step_id: StepId, reason: &str, at: DateTime<Utc>) -> RunCommand {
    RunCommand::SkipStep {
        step_id,
        reason: reason.into(),
        at,
    }
}
pub(super) fn apply_recovery(
    step_id: StepId,
    action: RecoveryAction,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::ApplyRecovery {
        step_id,
        action,
        at,
    }
}
pub(super) fn open_gate(
    gate_id: GateId,
    step_id: StepId,
    approvers: &[&str],
    expires_at: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::OpenGate {
        gate_id,
        step_id,
        approvers: strings(approvers),
        message: "ship it?".into(),
        expires_at,
        at,
    }
}
pub(super) fn approve(
    gate_id: GateId,
    by: &str,
    comment: Option<&str>,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::ApproveGate {
        gate_id,
        by: by.into(),
        comment: comment.map(Into::into),
        at,
    }
}
pub(super) fn reject(gate_id: GateId, by: &str, comment: &str, at: DateTime<Utc>) -> RunCommand {
    RunCommand::RejectGate {
        gate_id,
        by: by.into(),
        comment: comment.into(),
        at,
    }
}
pub(super) fn expire(gate_id: GateId, at: DateTime<Utc>) -> RunCommand {
    RunCommand::ExpireGate { gate_id, at }
}
pub(super) fn charge(
    step_id: Option<StepId>,
    usd: f64,
    tokens: u64,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::ChargeCost {
        step_id,
        usd,
        tokens,
        at,
    }
}
pub(super) fn start_compensation(
    reason: &str,
    steps: Vec<StepId>,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::StartCompensation {
        reason: reason.into(),
        error_class: None,
        steps,
        at,
    }
}
pub(super) fn record_compensation(
    step_id: StepId,
    succeeded: bool,
    error: Option<&str>,
    at: DateTime<Utc>,
) -> RunCommand {
    RunCommand::RecordCompensationStep {
        step_id,
        succeeded,
        error: error.map(Into::into),
        at,
    }
}
pub(super) fn complete(at: DateTime<Utc>) -> RunCommand {
    RunCommand::Complete {
        outputs: run_outputs(),
        at,
    }
}
pub(super) fn fail(reason: &str, error_class: Option<ErrorClass>, at: DateTime<Utc>) -> RunCommand {
    RunCommand::Fail {
        reason: reason.into(),
        error_class,
        at,
    }
}
pub(super) fn cancel(by: &str, at: DateTime<Utc>) -> RunCommand {
    RunCommand::Cancel {
        by: by.into(),
        reason: "not needed any more".into(),
        at,
    }
}

pub(super) fn pause(by: &str, at: DateTime<Utc>) -> RunCommand {
    RunCommand::Pause {
        by: by.into(),
        reason: "maintenance".into(),
        at,
        workflow: false,
    }
}

pub(super) fn resume(by: &str, at: DateTime<Utc>) -> RunCommand {
    RunCommand::Resume { by: by.into(), at }
}

pub(super) fn carry_step(step_id: StepId, at: DateTime<Utc>) -> RunCommand {
    RunCommand::CarryStep {
        step_id,
        from_run: origin_run(),
        output: Some(json!({"kept": true})),
        at,
    }
}

pub(super) fn note_derived(by: &str, at: DateTime<Utc>) -> RunCommand {
    RunCommand::NoteDerived {
        run_id: origin_run(),
        kind: DerivedKind::Rerun,
        from_step: build(),
        by: by.into(),
        at,
    }
}

// ---- paths to every status -----------------------------------------------------------

/// A run started at t(0) whose `fetch` succeeded (and was charged) at t(3): nothing is
/// scheduled, running or waiting.
pub(super) fn settled() -> Vec<RunEvent> {
    vec![
        started(t(0)),
        step_scheduled(fetch(), t(1), t(1)),
        step_started(fetch(), 1, "fetch-1", None, t(2)),
        step_succeeded(fetch(), 1, Some(FETCH_USD), Some(FETCH_TOKENS), t(3)),
        cost_charged(Some(fetch()), FETCH_USD, FETCH_TOKENS, FETCH_USD, t(3)),
    ]
}

/// `settled`, then: `build` failed on attempt 1 (network, no recovery chosen yet),
/// `verify` scheduled (due at `VERIFY_DUE`), gate g1 open on `verify` for alice or bob
/// without expiry, gate g2 open on `verify` for anyone until `G2_EXPIRY`, and `deploy`
/// scheduled. The run is WAITING: gates are open and nothing runs.
pub(super) fn waiting() -> Vec<RunEvent> {
    then(
        settled(),
        [
            step_scheduled(build(), t(4), t(4)),
            step_started(build(), 1, "build-1", None, t(5)),
            step_failed(build(), 1, ErrorClass::Network, t(6)),
            step_scheduled(verify(), t(VERIFY_DUE), t(7)),
            gate_opened(g1(), verify(), &["alice", "bob"], None, t(8)),
            gate_opened(g2(), verify(), &[], Some(t(G2_EXPIRY)), t(9)),
            step_scheduled(deploy(), t(10), t(10)),
        ],
    )
}

/// `waiting`, then `deploy` attempt 1 started with key `deploy-1` at t(11): RUNNING.
pub(super) fn running() -> Vec<RunEvent> {
    then(
        waiting(),
        [step_started(deploy(), 1, "deploy-1", None, t(11))],
    )
}

/// Events that bring a run to `status`:
///
/// - RUNNING: `running()`; WAITING: `waiting()`;
/// - COMPENSATING: `running()`, then compensation of `fetch` started at t(20) (the
///   failed `build` allows it), not run yet;
/// - SUCCEEDED: `settled()` completed at t(20);
/// - FAILED: the COMPENSATING path, `fetch` compensated at t(21), failed at t(22);
/// - CANCELLED: `running()` cancelled by alice at t(20).
pub(super) fn path(status: RunStatus) -> Vec<RunEvent> {
    match status {
        Queued => vec![started_queued(t(0)), queued(SCOPE, t(1))],
        Running => running(),
        Paused => then(running(), [paused("ops", t(20))]),
        Waiting => waiting(),
        Compensating => then(
            running(),
            [compensation_started("build failed", vec![fetch()], t(20))],
        ),
        Succeeded => then(settled(), [completed(t(20))]),
        Failed => then(
            path(Compensating),
            [
                compensation_step_ran(fetch(), None, t(21)),
                failed("build failed", Some(ErrorClass::Network), t(22)),
            ],
        ),
        Cancelled => then(running(), [cancelled("alice", t(20))]),
    }
}

/// `path(status)` followed by `more`.
pub(super) fn after(status: RunStatus, more: impl IntoIterator<Item = RunEvent>) -> Vec<RunEvent> {
    then(path(status), more)
}

// ---- the errors, with this run's id filled in ---------------------------------------

pub(super) fn invalid_status(
    status: RunStatus,
    action: RunAction,
    allowed: &'static [RunStatus],
) -> RunError {
    RunError::InvalidStatus {
        run: run_id(),
        status,
        action,
        allowed,
    }
}
pub(super) fn finished(status: RunStatus, action: RunAction) -> RunError {
    RunError::Finished {
        run: run_id(),
        status,
        action,
    }
}
pub(super) fn empty(action: RunAction, field: &'static str) -> RunError {
    RunError::Empty {
        run: run_id(),
        action,
        field,
    }
}
pub(super) fn invalid_amount(action: RunAction, field: &'static str, value: f64) -> RunError {
    RunError::InvalidAmount {
        run: run_id(),
        action,
        field,
        value,
    }
}
pub(super) fn not_after(
    action: RunAction,
    field: &'static str,
    deadline: DateTime<Utc>,
    at: DateTime<Utc>,
) -> RunError {
    RunError::DeadlineNotAfter {
        run: run_id(),
        action,
        field,
        deadline,
        at,
    }
}
pub(super) fn unknown_step(step: StepId, action: RunAction) -> RunError {
    RunError::UnknownStep {
        run: run_id(),
        step,
        action,
    }
}
pub(super) fn already_succeeded(step: StepId, attempt: u32, action: RunAction) -> RunError {
    RunError::StepAlreadySucceeded {
        run: run_id(),
        step,
        attempt,
        action,
    }
}
pub(super) fn situation(phase: StepPhase, attempt: u32) -> StepSituation {
    StepSituation { phase, attempt }
}
pub(super) fn attempt_not_in(
    step: StepId,
    attempt: u32,
    expected: StepPhase,
    now: StepSituation,
) -> RunError {
    RunError::AttemptNotIn {
        run: run_id(),
        step,
        attempt,
        expected,
        now,
    }
}
pub(super) fn step_not_in(
    step: StepId,
    action: RunAction,
    now: StepSituation,
    allowed: &'static [StepPhase],
) -> RunError {
    RunError::StepNotIn {
        run: run_id(),
        step,
        action,
        now,
        allowed,
    }
}
pub(super) fn failure_is_final(step: StepId, attempt: u32, action: RunAction) -> RunError {
    RunError::FailureIsFinal {
        run: run_id(),
        step,
        attempt,
        action,
    }
}
pub(super) fn gate_exists(gate: GateId, decision: Option<GateDecision>) -> RunError {
    RunError::GateExists {
        run: run_id(),
        gate,
        decision,
    }
}
pub(super) fn unknown_gate(gate: GateId, action: RunAction) -> RunError {
    RunError::UnknownGate {
        run: run_id(),
        gate,
        action,
    }
}
pub(super) fn gate_closed(gate: GateId, action: RunAction, decision: GateDecision) -> RunError {
    RunError::GateClosed {
        run: run_id(),
        gate,
        action,
        decision,
    }
}
pub(super) fn unfinished(
    running: Vec<StepId>,
    scheduled: Vec<StepId>,
    open_gates: Vec<GateId>,
    failed: Vec<StepId>,
) -> RunError {
    RunError::Unfinished {
        run: run_id(),
        running,
        scheduled,
        open_gates,
        failed,
    }
}
