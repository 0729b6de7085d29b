//! The rules of a run: which command is allowed in which state.
//!
//! Checks run in a fixed order, so the error names the most basic problem first: the
//! run must exist, must not be finished, must be in a status the command is allowed
//! in; then the step or gate the command is about must be in the right state (and on
//! the right attempt); finally the command's own data must make sense.

use chrono::{DateTime, TimeDelta, Utc};

use crate::domain::Decide;
use crate::domain::ids::{GateId, RunId, StepId};

use super::RunStatus::{self, *};
use super::{
    Gate, GateDecision, RecoveryAction, Rules, Run, RunAction, RunCommand, RunError, RunEvent,
    StepPhase, StepSituation, StepState,
};

/// Where steps and gates move.
const ACTIVE: &[RunStatus] = &[Running, Waiting, Paused];
/// Where a run can still be stopped.
const STOPPABLE: &[RunStatus] = &[Queued, Running, Waiting, Paused, Compensating];
/// Where a run can be paused: on its way or queued, not already paused, not
/// compensating.
const PAUSABLE: &[RunStatus] = &[Queued, Running, Waiting];

impl Decide for Run {
    fn decide(&self, command: RunCommand) -> Result<Vec<RunEvent>, RunError> {
        let action = command.action();
        let (Some(run), Some(status)) = (self.run_id, self.status) else {
            return match command {
                RunCommand::Start {
                    run_id,
                    workflow,
                    workflow_version,
                    inputs,
                    budget_usd,
                    timeout_at,
                    parent,
                    origin,
                    flow,
                    at,
                } => {
                    let check = Check {
                        state: self,
                        run: run_id,
                        status: Running,
                        action,
                    };
                    check.not_empty("workflow version", &workflow_version)?;
                    if let Some(budget) = budget_usd {
                        check.amount("budget_usd", budget)?;
                    }
                    check.after("timeout_at", timeout_at, at)?;
                    for slot in &flow.slots {
                        check.not_empty("flow slot scope", &slot.scope)?;
                    }
                    Ok(vec![RunEvent::Started {
                        run_id,
                        workflow,
                        workflow_version,
                        inputs,
                        budget_usd,
                        timeout_at,
                        parent,
                        origin,
                        flow,
                        rules: Rules::CURRENT,
                        at,
                    }])
                }
                _ => Err(RunError::NotStarted { action }),
            };
        };
        // A finished run never changes, except to note the runs made from it.
        if status.is_terminal() && !matches!(command, RunCommand::NoteDerived { .. }) {
            return Err(RunError::Finished {
                run,
                status,
                action,
            });
        }
        let check = Check {
            state: self,
            run,
            status,
            action,
        };

        match command {
            RunCommand::Start { .. } => Err(RunError::AlreadyStarted { run, status }),

            RunCommand::ScheduleStep {
                step_id,
                due_at,
                at,
            } => {
                check.status_in(ACTIVE)?;
                if let Some(state) = self.steps.get(&step_id) {
                    return Err(RunError::StepAlreadyScheduled {
                        run,
                        step: step_id,
                        now: state.into(),
                    });
                }
                Ok(vec![RunEvent::StepScheduled {
                    step_id,
                    attempt: 1,
                    due_at,
                    at,
                }])
            }

            RunCommand::StartStep {
                step_id,
                attempt,
                idempotency_key,
                timeout_at,
                call,
                at,
            } => {
                check.status_in(ACTIVE)?;
                // A first attempt under rules 2 may start with no schedule; every
                // other start follows its schedule (or restarts its attempt).
                if self.starts_unscheduled(&step_id, attempt) {
                    check.not_empty("idempotency key", &idempotency_key)?;
                } else {
                    match check.step(&step_id)? {
                        StepState::Scheduled {
                            attempt: current,
                            due_at,
                            ..
                        } if *current == attempt => {
                            check.not_empty("idempotency key", &idempotency_key)?;
                            if at < *due_at {
                                return Err(RunError::NotDue {
                                    run,
                                    step: step_id,
                                    attempt,
                                    due_at: *due_at,
                                    at,
                                });
                            }
                        }
                        StepState::Running {
                            attempt: current,
                            idempotency_key: recorded,
                            ..
                        } if *current == attempt => {
                            check.not_empty("idempotency key", &idempotency_key)?;
                            if recorded != &idempotency_key {
                                return Err(RunError::IdempotencyKeyMismatch {
                                    run,
                                    step: step_id,
                                    attempt,
                                    recorded: recorded.clone(),
                                    given: idempotency_key,
                                });
                            }
                        }
                        other => {
                            return Err(check.attempt_not_in(
                                &step_id,
                                attempt,
                                StepPhase::Scheduled,
                                other,
                            ));
                        }
                    }
                }
                check.after("timeout_at", timeout_at, at)?;
                Ok(vec![RunEvent::StepStarted {
                    step_id,
                    attempt,
                    idempotency_key,
                    timeout_at,
                    call,
                    at,
                }])
            }

            RunCommand::SucceedStep {
                step_id,
                attempt,
                output,
                cost_usd,
                tokens,
                at,
            } => {
                check.status_in(ACTIVE)?;
                check.running_attempt(&step_id, attempt)?;
                if let Some(usd) = cost_usd {
                    check.amount("cost_usd", usd)?;
                }
                let mut events = vec![RunEvent::StepSucceeded {
                    step_id: step_id.clone(),
                    attempt,
                    output,
                    cost_usd,
                    tokens,
                    at,
                }];
                if cost_usd.is_some() || tokens.is_some() {
                    events.extend(self.charge(
                        Some(step_id),
                        cost_usd.unwrap_or(0.0),
                        tokens.unwrap_or(0),
                        at,
                    ));
                }
                Ok(events)
            }

            RunCommand::FailStep {
                step_id,
                attempt,
                error,
                at,
            } => {
                check.status_in(ACTIVE)?;
                check.running_attempt(&step_id, attempt)?;
                Ok(vec![RunEvent::StepFailed {
                    step_id,
                    attempt,
                    error,
                    at,
                }])
            }

            RunCommand::ThrottleStep {
                step_id,
                attempt,
                limit,
                until,
                at,
            } => {
                check.status_in(ACTIVE)?;
                check.running_attempt(&step_id, attempt)?;
                check.not_empty("limit", &limit)?;
                check.after("until", Some(until), at)?;
                Ok(vec![RunEvent::StepThrottled {
                    step_id,
                    attempt,
                    limit,
                    until,
                    at,
                }])
            }

            RunCommand::RetryStep {
                step_id,
                backoff_ms,
                at,
            } => {
                check.status_in(ACTIVE)?;
                let attempt = check.failed_not_final(&step_id)?;
                let due_at = i64::try_from(backoff_ms)
                    .ok()
                    .and_then(TimeDelta::try_milliseconds)
                    .and_then(|backoff| at.checked_add_signed(backoff))
                    .ok_or_else(|| RunError::BackoffOutOfRange {
                        run,
                        step: step_id.clone(),
                        backoff_ms,
                    })?;
                Ok(vec![RunEvent::StepRetried {
                    step_id,
                    next_attempt: attempt.saturating_add(1),
                    due_at,
                    backoff_ms,
                    at,
                }])
            }

            RunCommand::SkipStep {
                step_id,
                reason,
                at,
            } => {
                check.status_in(ACTIVE)?;
                if !self.starts_unscheduled(&step_id, 1) {
                    let state = check.step(&step_id)?;
                    if !matches!(state, StepState::Scheduled { .. }) {
                        check.failed_not_final(&step_id)?;
                    }
                }
                check.not_empty("reason", &reason)?;
                Ok(vec![RunEvent::StepSkipped {
                    step_id,
                    reason,
                    at,
                }])
            }

            RunCommand::ApplyRecovery {
                step_id,
                action: recovery,
                at,
            } => {
                check.status_in(ACTIVE)?;
                let state = check.step(&step_id)?;
                if let StepState::Failed { attempt, .. } = state
                    && let Some(applied) = self.recovery_of(&step_id, *attempt)
                {
                    return Err(RunError::RecoveryAlreadyApplied {
                        run,
                        step: step_id,
                        attempt: *attempt,
                        applied: applied.clone(),
                    });
                }
                check.failed_not_final(&step_id)?;
                let error_class = match state {
                    StepState::Failed { error, .. } => error.class,
                    _ => return Err(check.step_not_in(&step_id, state, &[StepPhase::Failed])),
                };
                match &recovery {
                    RecoveryAction::IncreaseTimeout {
                        new_timeout_seconds: 0,
                    } => return Err(RunError::ZeroTimeout { run, step: step_id }),
                    RecoveryAction::Fallback { tool } => check.not_empty("fallback tool", tool)?,
                    RecoveryAction::Escalate { gate_id } => check.new_gate(gate_id)?,
                    _ => {}
                }
                Ok(vec![RunEvent::RecoveryApplied {
                    step_id,
                    error_class,
                    action: recovery,
                    at,
                }])
            }

            RunCommand::OpenGate {
                gate_id,
                step_id,
                approvers,
                message,
                expires_at,
                at,
            } => {
                check.status_in(ACTIVE)?;
                check.new_gate(&gate_id)?;
                let state = check.step(&step_id)?;
                if matches!(state, StepState::Skipped { .. }) {
                    return Err(check.step_not_in(
                        &step_id,
                        state,
                        &[StepPhase::Scheduled, StepPhase::Running, StepPhase::Failed],
                    ));
                }
                if approvers.iter().any(|a| a.trim().is_empty()) {
                    return Err(check.empty("approver"));
                }
                check.after("expires_at", expires_at, at)?;
                Ok(vec![RunEvent::GateOpened {
                    gate_id,
                    step_id,
                    approvers,
                    message,
                    expires_at,
                    at,
                }])
            }

            RunCommand::ApproveGate {
                gate_id,
                by,
                comment,
                at,
            } => {
                check.status_in(ACTIVE)?;
                check.decidable_gate(&gate_id, &by, at)?;
                Ok(vec![RunEvent::GateApproved {
                    gate_id,
                    by,
                    comment,
                    at,
                }])
            }

            RunCommand::RejectGate {
                gate_id,
                by,
                comment,
                at,
            } => {
                check.status_in(ACTIVE)?;
                check.decidable_gate(&gate_id, &by, at)?;
                check.not_empty("comment", &comment)?;
                Ok(vec![RunEvent::GateRejected {
                    gate_id,
                    by,
                    comment,
                    at,
                }])
            }

            RunCommand::ExpireGate { gate_id, at } => {
                check.status_in(ACTIVE)?;
                let gate = check.open_gate(&gate_id)?;
                let Some(expires_at) = gate.expires_at else {
                    return Err(RunError::GateNeverExpires { run, gate: gate_id });
                };
                if at < expires_at {
                    return Err(RunError::GateNotDue {
                        run,
                        gate: gate_id,
                        expires_at,
                        at,
                    });
                }
                Ok(vec![RunEvent::GateExpired { gate_id, at }])
            }

            RunCommand::ChargeCost {
                step_id,
                usd,
                tokens,
                at,
            } => {
                check.status_in(ACTIVE)?;
                if let Some(step_id) = &step_id {
                    check.step(step_id)?;
                }
                check.amount("usd", usd)?;
                Ok(self.charge(step_id, usd, tokens, at))
            }

            RunCommand::StartCompensation {
                reason,
                error_class,
                steps,
                at,
            } => {
                check.status_in(ACTIVE)?;
                if !self.has_failure(at) {
                    return Err(RunError::NothingFailed { run });
                }
                check.not_empty("reason", &reason)?;
                check.compensation_order(&steps)?;
                Ok(vec![RunEvent::CompensationStarted {
                    reason,
                    error_class,
                    steps,
                    at,
                }])
            }

            RunCommand::RecordCompensationStep {
                step_id,
                succeeded,
                error,
                at,
            } => {
                check.status_in(&[Compensating])?;
                let expected = self.compensation.as_ref().and_then(|c| c.next_step());
                if expected != Some(&step_id) {
                    return Err(RunError::UnexpectedCompensation {
                        run,
                        step: step_id,
                        expected: expected.cloned(),
                    });
                }
                let has_error = error.as_deref().is_some_and(|e| !e.trim().is_empty());
                if succeeded == error.is_some() || (!succeeded && !has_error) {
                    return Err(RunError::InconsistentCompensation {
                        run,
                        step: step_id,
                        succeeded,
                    });
                }
                Ok(vec![RunEvent::CompensationStepRan {
                    step_id,
                    succeeded,
                    error,
                    at,
                }])
            }

            RunCommand::Complete { outputs, at } => {
                check.status_in(ACTIVE)?;
                let running: Vec<StepId> = self.running_steps().map(|(id, _)| id.clone()).collect();
                let scheduled: Vec<StepId> =
                    self.scheduled_steps().map(|(id, _)| id.clone()).collect();
                let open_gates: Vec<GateId> = self.open_gates().map(|g| g.gate_id).collect();
                // A failure still in play: no recovery chosen yet, or one that leads to
                // another attempt (a retry, or an approved escalation) not yet queued.
                // Given-up failures (abort, continue, a rejected or expired
                // escalation) are settled; whether they fail the run is the
                // executor's decision (a branch that lost a race fails and the run
                // goes on).
                let failed: Vec<StepId> = self
                    .steps
                    .iter()
                    .filter(|(id, state)| match state {
                        StepState::Failed { attempt, .. } => {
                            self.failure_in_play(self.recovery_of(id, *attempt))
                        }
                        _ => false,
                    })
                    .map(|(id, _)| id.clone())
                    .collect();
                if !(running.is_empty()
                    && scheduled.is_empty()
                    && open_gates.is_empty()
                    && failed.is_empty())
                {
                    return Err(RunError::Unfinished {
                        run,
                        running,
                        scheduled,
                        open_gates,
                        failed,
                    });
                }
                Ok(vec![RunEvent::Completed { outputs, at }])
            }

            RunCommand::Fail {
                reason,
                error_class,
                at,
            } => {
                check.status_in(STOPPABLE)?;
                if let Some(compensation) = &self.compensation
                    && !compensation.remaining().is_empty()
                {
                    return Err(RunError::CompensationUnfinished {
                        run,
                        remaining: compensation.remaining().to_vec(),
                    });
                }
                check.not_empty("reason", &reason)?;
                Ok(vec![RunEvent::Failed {
                    reason,
                    error_class,
                    at,
                }])
            }

            RunCommand::CarryStep {
                step_id,
                from_run,
                output,
                at,
            } => {
                check.status_in(ACTIVE)?;
                let refuse = |reason| RunError::CannotCarry {
                    run,
                    step: step_id.clone(),
                    reason,
                };
                if self.origin.is_none() {
                    return Err(refuse("the run is not a rerun or fork"));
                }
                if self.steps.contains_key(&step_id) {
                    return Err(refuse("the step already has a state here"));
                }
                if self.attempts.values().any(|a| !a.is_empty()) {
                    return Err(refuse("the run has started steps of its own"));
                }
                Ok(vec![RunEvent::StepCarried {
                    step_id,
                    from_run,
                    output,
                    at,
                }])
            }

            RunCommand::NoteDerived {
                run_id,
                kind,
                from_step,
                by,
                at,
            } => {
                check.not_empty("by", &by)?;
                // Noted once: an attempt that stopped after noting it and is made
                // again (a bulk rerun carried on after a crash) adds nothing.
                if self.derived.iter().any(|d| d.run_id == run_id) {
                    return Ok(Vec::new());
                }
                Ok(vec![RunEvent::Derived {
                    run_id,
                    kind,
                    from_step,
                    by,
                    at,
                }])
            }

            RunCommand::Pause {
                by,
                reason,
                at,
                workflow,
            } => {
                check.status_in(PAUSABLE)?;
                check.not_empty("by", &by)?;
                Ok(vec![RunEvent::Paused {
                    by,
                    reason,
                    at,
                    workflow,
                }])
            }

            RunCommand::Resume { by, at } => {
                check.status_in(&[Paused])?;
                check.not_empty("by", &by)?;
                Ok(vec![RunEvent::Resumed { by, at }])
            }

            RunCommand::Cancel { by, reason, at } => {
                check.status_in(STOPPABLE)?;
                check.not_empty("by", &by)?;
                Ok(vec![RunEvent::Cancelled { by, reason, at }])
            }

            // A finished run's history does not grow: only a run that still moves
            // continues as new.
            RunCommand::Queue { scope, limit, at } => {
                check.status_in(&[Queued])?;
                check.not_empty("scope", &scope)?;
                if self.queued.as_ref().is_some_and(|q| q.scope == scope) {
                    return Ok(Vec::new());
                }
                Ok(vec![RunEvent::Queued { scope, limit, at }])
            }

            RunCommand::Admit { at } => {
                check.status_in(&[Queued])?;
                Ok(vec![RunEvent::Admitted { at }])
            }

            RunCommand::Continue { at } => {
                check.status_in(STOPPABLE)?;
                Ok(vec![RunEvent::Continued {
                    state: Box::new(self.compacted()),
                    at,
                }])
            }
        }
    }
}

impl Run {
    /// Whether `attempt` of a step the run has not seen may start (or be skipped)
    /// without being scheduled first: its first attempt, under rules 2.
    fn starts_unscheduled(&self, step_id: &StepId, attempt: u32) -> bool {
        attempt == 1 && !self.rules.schedules_every_step() && !self.steps.contains_key(step_id)
    }

    /// What the error handler chose after `attempt` of the step failed, if anything yet.
    /// Whether a failed attempt with this recovery may still be followed by another.
    fn failure_in_play(&self, recovery: Option<&RecoveryAction>) -> bool {
        match recovery {
            None => true,
            Some(RecoveryAction::Abort | RecoveryAction::Continue) => false,
            Some(RecoveryAction::Escalate { gate_id }) => !matches!(
                self.gate(gate_id).and_then(|g| g.decision.as_ref()),
                Some(GateDecision::Rejected { .. } | GateDecision::Expired { .. })
            ),
            Some(_) => true,
        }
    }

    fn recovery_of(&self, step_id: &StepId, attempt: u32) -> Option<&RecoveryAction> {
        self.attempts(step_id)
            .iter()
            .rev()
            .find(|a| a.attempt == attempt)
            .and_then(|a| a.recovery.as_ref())
    }

    /// `run.cost_charged`, and `run.budget_exceeded` when this charge takes the total
    /// over the budget for the first time.
    fn charge(
        &self,
        step_id: Option<StepId>,
        usd: f64,
        tokens: u64,
        at: DateTime<Utc>,
    ) -> Vec<RunEvent> {
        let total_usd = self.total_cost_usd + usd;
        let mut events = vec![RunEvent::CostCharged {
            step_id,
            usd,
            tokens,
            total_usd,
            at,
        }];
        if let Some(budget_usd) = self.budget_usd
            && total_usd > budget_usd
            && self.budget_exceeded_at.is_none()
        {
            events.push(RunEvent::BudgetExceeded {
                budget_usd,
                total_usd,
                at,
            });
        }
        events
    }
}

/// The checks shared by the commands on a started, unfinished run.
struct Check<'a> {
    state: &'a Run,
    run: RunId,
    status: RunStatus,
    action: RunAction,
}

impl<'a> Check<'a> {
    fn status_in(&self, allowed: &'static [RunStatus]) -> Result<(), RunError> {
        if allowed.contains(&self.status) {
            Ok(())
        } else {
            Err(RunError::InvalidStatus {
                run: self.run,
                status: self.status,
                action: self.action,
                allowed,
            })
        }
    }

    /// The step's state; a step that succeeded is refused for every step command, since
    /// completed steps are never re-executed.
    fn step(&self, step_id: &StepId) -> Result<&'a StepState, RunError> {
        let state = self
            .state
            .steps
            .get(step_id)
            .ok_or_else(|| RunError::UnknownStep {
                run: self.run,
                step: step_id.clone(),
                action: self.action,
            })?;
        if let StepState::Succeeded { attempt, .. } = state
            && self.action != RunAction::ChargeCost
        {
            return Err(RunError::StepAlreadySucceeded {
                run: self.run,
                step: step_id.clone(),
                attempt: *attempt,
                action: self.action,
            });
        }
        Ok(state)
    }

    /// The step is running `attempt`.
    fn running_attempt(&self, step_id: &StepId, attempt: u32) -> Result<(), RunError> {
        match self.step(step_id)? {
            StepState::Running {
                attempt: current, ..
            } if *current == attempt => Ok(()),
            other => Err(self.attempt_not_in(step_id, attempt, StepPhase::Running, other)),
        }
    }

    /// The step's latest attempt failed and another may follow; returns that attempt.
    fn failed_not_final(&self, step_id: &StepId) -> Result<u32, RunError> {
        match self.step(step_id)? {
            StepState::Failed {
                attempt,
                is_final: false,
                ..
            } => Ok(*attempt),
            StepState::Failed { attempt, .. } => Err(RunError::FailureIsFinal {
                run: self.run,
                step: step_id.clone(),
                attempt: *attempt,
                action: self.action,
            }),
            other => Err(self.step_not_in(step_id, other, allowed_phases(self.action))),
        }
    }

    fn attempt_not_in(
        &self,
        step_id: &StepId,
        attempt: u32,
        expected: StepPhase,
        now: &StepState,
    ) -> RunError {
        RunError::AttemptNotIn {
            run: self.run,
            step: step_id.clone(),
            attempt,
            expected,
            now: now.into(),
        }
    }

    fn step_not_in(
        &self,
        step_id: &StepId,
        now: &StepState,
        allowed: &'static [StepPhase],
    ) -> RunError {
        RunError::StepNotIn {
            run: self.run,
            step: step_id.clone(),
            action: self.action,
            now: StepSituation::from(now),
            allowed,
        }
    }

    fn new_gate(&self, gate_id: &GateId) -> Result<(), RunError> {
        match self.state.gate(gate_id) {
            Some(gate) => Err(RunError::GateExists {
                run: self.run,
                gate: *gate_id,
                decision: gate.decision.clone(),
            }),
            None => Ok(()),
        }
    }

    fn open_gate(&self, gate_id: &GateId) -> Result<&'a Gate, RunError> {
        let gate = self.state.gate(gate_id).ok_or(RunError::UnknownGate {
            run: self.run,
            gate: *gate_id,
            action: self.action,
        })?;
        match &gate.decision {
            Some(decision) => Err(RunError::GateClosed {
                run: self.run,
                gate: *gate_id,
                action: self.action,
                decision: decision.clone(),
            }),
            None => Ok(gate),
        }
    }

    /// The gate is open, has not expired at `at`, and `by` may decide it.
    fn decidable_gate(
        &self,
        gate_id: &GateId,
        by: &str,
        at: DateTime<Utc>,
    ) -> Result<(), RunError> {
        let gate = self.open_gate(gate_id)?;
        if let Some(expires_at) = gate.expires_at
            && at >= expires_at
        {
            return Err(RunError::GateHasExpired {
                run: self.run,
                gate: *gate_id,
                action: self.action,
                expires_at,
                at,
            });
        }
        self.not_empty("by", by)?;
        if !gate.may_decide(by) {
            return Err(RunError::NotAnApprover {
                run: self.run,
                gate: *gate_id,
                action: self.action,
                by: by.to_string(),
                approvers: gate.approvers.clone(),
            });
        }
        Ok(())
    }

    /// Every listed step succeeded, none is listed twice, and they come most recently
    /// succeeded first.
    fn compensation_order(&self, steps: &[StepId]) -> Result<(), RunError> {
        let mut previous: Option<(&StepId, usize)> = None;
        for (index, step_id) in steps.iter().enumerate() {
            if steps[..index].contains(step_id) {
                return Err(RunError::DuplicateCompensation {
                    run: self.run,
                    step: step_id.clone(),
                });
            }
            let position = self.state.succeeded_order.iter().position(|s| s == step_id);
            let Some(position) = position else {
                return Err(RunError::NotCompensable {
                    run: self.run,
                    step: step_id.clone(),
                    now: self.state.steps.get(step_id).map(StepSituation::from),
                });
            };
            if let Some((earlier, earlier_position)) = previous
                && earlier_position < position
            {
                return Err(RunError::CompensationOutOfOrder {
                    run: self.run,
                    first: earlier.clone(),
                    second: step_id.clone(),
                });
            }
            previous = Some((step_id, position));
        }
        Ok(())
    }

    fn after(
        &self,
        field: &'static str,
        deadline: Option<DateTime<Utc>>,
        at: DateTime<Utc>,
    ) -> Result<(), RunError> {
        match deadline {
            Some(deadline) if deadline <= at => Err(RunError::DeadlineNotAfter {
                run: self.run,
                action: self.action,
                field,
                deadline,
                at,
            }),
            _ => Ok(()),
        }
    }

    fn amount(&self, field: &'static str, value: f64) -> Result<(), RunError> {
        if value.is_finite() && value >= 0.0 {
            Ok(())
        } else {
            Err(RunError::InvalidAmount {
                run: self.run,
                action: self.action,
                field,
                value,
            })
        }
    }

    fn not_empty(&self, field: &'static str, value: &str) -> Result<(), RunError> {
        if value.trim().is_empty() {
            Err(self.empty(field))
        } else {
            Ok(())
        }
    }

    fn empty(&self, field: &'static str) -> RunError {
        RunError::Empty {
            run: self.run,
            action: self.action,
            field,
        }
    }
}

/// The step phases a failure-handling command is allowed in, for its error message.
fn allowed_phases(action: RunAction) -> &'static [StepPhase] {
    match action {
        RunAction::SkipStep => &[StepPhase::Scheduled, StepPhase::Failed],
        _ => &[StepPhase::Failed],
    }
}
