//! The walk: one pass over a workflow's steps against a run's state, deciding what
//! each step does next.
//!
//! Every decision goes through the run aggregate (`decide`, then `apply` to a scratch
//! copy of the state), so the engine can only ask for transitions the domain allows,
//! and each step is looked at again after its state changed in the same tick: a step
//! scheduled now is started now, a gate approved since the last tick succeeds now.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Duration, Utc};
use cqrs_es::Aggregate;
use serde_json::{Value, json};

use crate::domain::Decide;
use crate::domain::ids::{GateId, RunId, StepId};
use crate::domain::run::{
    ErrorClass, GateDecision, RecoveryAction, Run, RunCommand, RunEvent, RunStatus, StepError,
    StepState,
};
use crate::expr::Expression;
use crate::workflow::model::{
    GateRejected, GateTimedOut, HandlerAction, OnError, Step, StepKind, WaitFor, Workflow,
};

use super::keys::{
    budget_gate_id, child_run_id, compensation_key, escalation_gate_id, gate_id, idempotency_key,
    task_id, unit_hash,
};
use super::recovery::{self, Decision};
use super::{CompensationOutcome, Done, Effect, EngineError, Failure, Tick, TickInput, render};

/// Where a step (or a list of steps) stands after the walk looked at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// Finished: succeeded, skipped, or failed with `on_error: continue`.
    Done,
    /// Waiting: for an outcome, a due time, a person.
    Blocked,
    /// Failed for good: the run fails.
    Failed,
}

/// Safety net: a step whose state changes more often than this in one tick is a bug.
const MAX_MOVES_PER_STEP: usize = 64;

pub(super) struct Walker<'a> {
    def: &'a Workflow,
    input: &'a TickInput,
    run_id: RunId,
    now: DateTime<Utc>,
    state: Run,
    events: Vec<RunEvent>,
    effects: Vec<Effect>,
    wake_at: Option<DateTime<Utc>>,
    step_ids: Vec<String>,
    hooks: BTreeSet<String>,
    outcomes: HashMap<(StepId, u32), Result<Done, Failure>>,
    compensations: HashMap<StepId, Option<String>>,
    /// Keys of attempts started in this tick (their work is already an effect).
    started_now: BTreeSet<String>,
}

impl<'a> Walker<'a> {
    pub(super) fn new(def: &'a Workflow, run: &Run, input: &'a TickInput) -> Self {
        let mut step_ids = Vec::new();
        let mut hooks = BTreeSet::new();
        for step in &def.steps {
            collect_ids(step, &mut step_ids);
        }
        for step in def.on_success.iter().chain(&def.on_failure) {
            let before = step_ids.len();
            collect_ids(step, &mut step_ids);
            hooks.extend(step_ids[before..].iter().cloned());
        }
        Self {
            def,
            input,
            run_id: run.id().unwrap_or_default(),
            now: input.now,
            state: run.clone(),
            events: Vec::new(),
            effects: Vec::new(),
            wake_at: None,
            step_ids,
            hooks,
            outcomes: input
                .outcomes
                .iter()
                .map(|o| ((o.step_id.clone(), o.attempt), o.result.clone()))
                .collect(),
            compensations: input
                .compensations
                .iter()
                .map(|c: &CompensationOutcome| (c.step_id.clone(), c.error.clone()))
                .collect(),
            started_now: BTreeSet::new(),
        }
    }

    pub(super) fn finish(self) -> Tick {
        Tick {
            events: self.events,
            effects: self.effects,
            wake_at: if self.state.is_terminal() {
                None
            } else {
                self.wake_at
            },
            state: self.state,
        }
    }

    /// Ask the run aggregate; on success, apply and keep the events.
    fn decide(&mut self, command: RunCommand) -> Result<(), EngineError> {
        let events = self.state.decide(command)?;
        for event in events {
            self.state.apply(event.clone());
            self.events.push(event);
        }
        Ok(())
    }

    fn wake(&mut self, at: DateTime<Utc>) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }

    pub(super) fn run(&mut self) -> Result<(), EngineError> {
        if self.state.is_terminal() {
            return Ok(());
        }
        self.record_outcomes()?;
        if let Some(deadline) = self.state.timeout_at() {
            self.wake(deadline);
        }
        match self.state.status() {
            Some(RunStatus::Compensating) => self.compensate(),
            Some(RunStatus::Running | RunStatus::Waiting) => self.advance(),
            _ => Ok(()),
        }?;
        if self.state.is_terminal()
            && let Some(parent) = self.state.parent().cloned()
            && self.events.iter().any(is_terminal_event)
        {
            self.effects.push(Effect::WakeParent(parent));
        }
        Ok(())
    }

    /// Turn reported outcomes into events, for attempts that are still running.
    fn record_outcomes(&mut self) -> Result<(), EngineError> {
        let mut reported: Vec<_> = self.outcomes.drain().collect();
        reported.sort_by(|a, b| a.0.cmp(&b.0));
        for ((step_id, attempt), result) in reported {
            let running = matches!(
                self.state.step(&step_id),
                Some(StepState::Running { attempt: a, .. }) if *a == attempt
            );
            if !running || !self.state.status().is_some_and(RunStatus::is_active) {
                continue; // stale: timed out, cancelled, or already recorded
            }
            self.outcome(&step_id, attempt, result)?;
        }
        Ok(())
    }

    fn outcome(
        &mut self,
        step_id: &StepId,
        attempt: u32,
        result: Result<Done, Failure>,
    ) -> Result<(), EngineError> {
        match result {
            Ok(done) => self.decide(RunCommand::SucceedStep {
                step_id: step_id.clone(),
                attempt,
                output: done.output,
                cost_usd: done.cost_usd,
                tokens: done.tokens,
                at: self.now,
            }),
            Err(failure) => self.fail_step(step_id, attempt, failure.class, failure.message),
        }
    }

    fn fail_step(
        &mut self,
        step_id: &StepId,
        attempt: u32,
        class: ErrorClass,
        message: String,
    ) -> Result<(), EngineError> {
        self.decide(RunCommand::FailStep {
            step_id: step_id.clone(),
            attempt,
            error: StepError { class, message },
            at: self.now,
        })
    }

    // ---- the run as a whole ----------------------------------------------------------

    fn advance(&mut self) -> Result<(), EngineError> {
        if let Some((class, reason)) = self.run_level_failure() {
            return self.failing(class, reason, true);
        }
        let main = self.walk_list(&self.def.steps, None)?;
        match main {
            Progress::Blocked => Ok(()),
            Progress::Failed => {
                let (class, reason) = self.step_failure();
                self.failing(class, reason, false)
            }
            Progress::Done => {
                let last = self.def.steps.last().map(|s| s.id().to_string());
                match self.walk_list(&self.def.on_success, last.as_deref())? {
                    Progress::Blocked => Ok(()),
                    _ => self.complete(),
                }
            }
        }
    }

    /// A failure of the whole run: its deadline passed or its budget was exceeded.
    fn run_level_failure(&self) -> Option<(ErrorClass, String)> {
        if let Some(deadline) = self.state.timeout_at()
            && self.now >= deadline
        {
            return Some((
                ErrorClass::Timeout,
                format!("the run timed out at {}", deadline.to_rfc3339()),
            ));
        }
        if self.state.budget_exceeded_at().is_some() && !self.budget_escalation_pending() {
            return Some((
                ErrorClass::Budget,
                format!(
                    "the run cost ${:.4}, over its budget of ${:.4}",
                    self.state.total_cost_usd(),
                    self.state.budget_usd().unwrap_or_default()
                ),
            ));
        }
        None
    }

    /// The workflow's `budget` handler, if it escalates: over budget, a person decides
    /// whether the run goes on.
    fn budget_escalation(&self) -> Option<&'a crate::workflow::model::ErrorHandler> {
        recovery::handler_for(&self.def.error_handlers, ErrorClass::Budget)
            .filter(|h| h.action == HandlerAction::Escalate)
    }

    /// Over budget with an escalation that has not been rejected: the run waits for
    /// (or was given) a person's approval rather than failing.
    fn budget_escalation_pending(&self) -> bool {
        if self.budget_escalation().is_none() {
            return false;
        }
        match self.state.gate(&budget_gate_id(self.run_id)) {
            None => true,
            Some(gate) => matches!(gate.decision, None | Some(GateDecision::Approved { .. })),
        }
    }

    /// Before a step starts over budget: open the budget gate (once) and wait for it;
    /// once approved, the run goes on.
    fn budget_hold(&mut self, id: &StepId) -> Result<bool, EngineError> {
        if self.state.budget_exceeded_at().is_none() {
            return Ok(false);
        }
        let Some(handler) = self.budget_escalation() else {
            return Ok(false);
        };
        let gate_id = budget_gate_id(self.run_id);
        match self.state.gate(&gate_id).map(|g| g.decision.clone()) {
            Some(Some(GateDecision::Approved { .. })) => Ok(false),
            Some(_) => Ok(true),
            None => {
                let message = format!(
                    "The run has cost ${:.4}, over its budget of ${:.4}. Approve to let it go \
                     on (step `{id}` is next); reject to fail it.",
                    self.state.total_cost_usd(),
                    self.state.budget_usd().unwrap_or_default()
                );
                self.decide(RunCommand::OpenGate {
                    gate_id,
                    step_id: id.clone(),
                    approvers: handler.approvers.clone(),
                    message,
                    expires_at: None,
                    at: self.now,
                })?;
                Ok(true)
            }
        }
    }

    /// Why the main flow failed: the first step that failed for good.
    fn step_failure(&self) -> (ErrorClass, String) {
        let failed = self
            .state
            .steps()
            .iter()
            .filter_map(|(id, step)| match step {
                StepState::Failed { error, attempt, .. } if !self.hooks.contains(id.as_str()) => {
                    let record = self
                        .state
                        .attempts(id)
                        .iter()
                        .find(|a| a.attempt == *attempt);
                    let continued =
                        record.and_then(|a| a.recovery.as_ref()) == Some(&RecoveryAction::Continue);
                    (!continued).then(|| (record.and_then(|a| a.ended_at), id, error))
                }
                _ => None,
            });
        // The earliest failure is the cause; later ones may be its consequences.
        match failed.min_by_key(|(at, id, _)| (*at, (*id).clone())) {
            Some((_, id, error)) => (
                error.class,
                format!("step `{id}` failed: {}", error.message),
            ),
            None => (ErrorClass::Unknown, "a step failed".to_string()),
        }
    }

    /// The run is failing: wait for running steps (unless `now`), run the
    /// `on_failure` hooks, then compensate.
    fn failing(&mut self, class: ErrorClass, reason: String, now: bool) -> Result<(), EngineError> {
        if !now
            && self
                .state
                .running_steps()
                .any(|(id, _)| !self.hooks.contains(id.as_str()))
        {
            return Ok(());
        }
        let last = self.def.steps.last().map(|s| s.id().to_string());
        if self.walk_list(&self.def.on_failure, last.as_deref())? == Progress::Blocked && !now {
            return Ok(());
        }
        let steps: Vec<StepId> = self
            .state
            .succeeded_steps()
            .iter()
            .rev()
            .filter(|id| {
                self.find(id.as_str())
                    .is_some_and(|s| s.common.compensate.is_some())
            })
            .cloned()
            .collect();
        self.decide(RunCommand::StartCompensation {
            reason,
            error_class: Some(class),
            steps,
            at: self.now,
        })?;
        self.compensate()
    }

    /// Run the compensations one by one, then fail the run.
    fn compensate(&mut self) -> Result<(), EngineError> {
        loop {
            let Some(compensation) = self.state.compensation() else {
                return Ok(());
            };
            let Some(next) = compensation.next_step().cloned() else {
                let (reason, error_class) = (compensation.reason.clone(), compensation.error_class);
                return self.decide(RunCommand::Fail {
                    reason,
                    error_class,
                    at: self.now,
                });
            };
            if let Some(error) = self.compensations.remove(&next) {
                self.decide(RunCommand::RecordCompensationStep {
                    step_id: next,
                    succeeded: error.is_none(),
                    error,
                    at: self.now,
                })?;
                continue;
            }
            let key = compensation_key(self.run_id, &next);
            if self.input.in_flight.contains(&key) {
                return Ok(());
            }
            let Some(undo) = self
                .find(next.as_str())
                .and_then(|s| s.common.compensate.clone())
            else {
                return self.decide(RunCommand::RecordCompensationStep {
                    step_id: next,
                    succeeded: false,
                    error: Some("the step has no compensation in this definition".into()),
                    at: self.now,
                });
            };
            let scope = self.scope_for(Some(next.as_str()), &templates_of(&undo));
            match render::work(self.def, &undo, &scope, None) {
                Ok(work) => {
                    self.effects.push(Effect::Compensate {
                        key,
                        step_id: next,
                        work,
                        timeout_ms: undo.common.timeout_seconds.map(|s| s * 1000),
                    });
                    return Ok(());
                }
                Err(e) => {
                    self.decide(RunCommand::RecordCompensationStep {
                        step_id: next,
                        succeeded: false,
                        error: Some(e),
                        at: self.now,
                    })?;
                }
            }
        }
    }

    fn complete(&mut self) -> Result<(), EngineError> {
        if self.state.running_steps().next().is_some() {
            return Ok(()); // stragglers of a `wait_for: any`
        }
        // The walk reached the end, so every step it looked at is settled; a failure
        // not yet answered is a straggler that lost a `wait_for: any` race: set it
        // aside (it stays recorded as failed).
        let stragglers: Vec<StepId> = self
            .state
            .steps()
            .iter()
            .filter(|(id, state)| {
                matches!(state, StepState::Failed { is_final: false, attempt, .. }
                    if self.state.attempts(id).iter().find(|a| a.attempt == *attempt)
                        .is_some_and(|a| a.recovery.is_none()))
            })
            .map(|(id, _)| id.clone())
            .collect();
        for step_id in stragglers {
            self.decide(RunCommand::ApplyRecovery {
                step_id,
                action: RecoveryAction::Continue,
                at: self.now,
            })?;
        }
        let last = self.def.steps.last().map(|s| s.id().to_string());
        let outputs = Value::Object(self.def.outputs.clone().into_iter().collect());
        let scope = self.scope_for(last.as_deref(), &outputs);
        match crate::expr::render_value(&outputs, &scope) {
            Ok(outputs) => self.decide(RunCommand::Complete {
                outputs,
                at: self.now,
            }),
            Err(e) => self.failing(ErrorClass::Validation, format!("outputs: {e}"), true),
        }
    }

    // ---- lists and steps --------------------------------------------------------------

    fn walk_list(&mut self, list: &'a [Step], prev: Option<&str>) -> Result<Progress, EngineError> {
        let mut prev = prev.map(String::from);
        for step in list {
            match self.walk_step(step, prev.as_deref())? {
                Progress::Done => prev = Some(step.id().to_string()),
                other => return Ok(other),
            }
        }
        Ok(Progress::Done)
    }

    fn walk_step(&mut self, step: &'a Step, prev: Option<&str>) -> Result<Progress, EngineError> {
        let id = step_id(step);
        for _ in 0..MAX_MOVES_PER_STEP {
            let state = self.state.step(&id).cloned();
            let moved = match state {
                None => {
                    self.decide(RunCommand::ScheduleStep {
                        step_id: id.clone(),
                        due_at: self.now,
                        at: self.now,
                    })?;
                    true
                }
                Some(StepState::Scheduled { attempt, due_at }) => {
                    if due_at > self.now {
                        self.wake(due_at);
                        return Ok(Progress::Blocked);
                    }
                    if self.budget_hold(&id)? {
                        return Ok(Progress::Blocked);
                    }
                    self.begin(step, attempt, prev)?;
                    true
                }
                Some(StepState::Running {
                    attempt,
                    timeout_at,
                    ..
                }) => {
                    if let Some(deadline) = timeout_at {
                        if deadline <= self.now {
                            let seconds = self.timeout_seconds(step, attempt).unwrap_or_default();
                            self.fail_step(
                                &id,
                                attempt,
                                ErrorClass::Timeout,
                                format!("attempt {attempt} timed out after {seconds} s"),
                            )?;
                            continue;
                        }
                        self.wake(deadline);
                    }
                    match self.running(step, attempt, prev)? {
                        Some(progress) => return Ok(progress),
                        None => true,
                    }
                }
                Some(StepState::Succeeded { output, .. }) => {
                    return self.after_success(step, &output, prev);
                }
                Some(StepState::Skipped { .. }) => {
                    self.skip_unscheduled(&step.children())?;
                    return Ok(Progress::Done);
                }
                Some(StepState::Failed {
                    attempt,
                    error,
                    is_final,
                }) => match self.after_failure(step, attempt, error, is_final)? {
                    Some(progress) => return Ok(progress),
                    None => true,
                },
            };
            debug_assert!(moved);
        }
        Err(EngineError::Stuck { step: id })
    }

    /// Start `attempt` of a due step (or skip it when its `if` is false).
    fn begin(
        &mut self,
        step: &'a Step,
        attempt: u32,
        prev: Option<&str>,
    ) -> Result<(), EngineError> {
        let id = step_id(step);
        if attempt == 1
            && let Some(guard) = &step.common.guard
        {
            match self.condition(guard, prev) {
                Ok(true) => {}
                Ok(false) => {
                    return self.decide(RunCommand::SkipStep {
                        step_id: id,
                        reason: format!("`if` is false: {guard}"),
                        at: self.now,
                    });
                }
                Err(e) => {
                    self.start(step, attempt, None)?;
                    return self.fail_step(
                        &id,
                        attempt,
                        ErrorClass::Validation,
                        format!("if: {e}"),
                    );
                }
            }
        }
        let timeout = match &step.kind {
            // A gate's timeout is its expiry, handled by the gate.
            StepKind::Gate(_) => None,
            _ => self.timeout_seconds(step, attempt),
        };
        self.start(step, attempt, timeout)?;
        self.on_start(step, attempt, prev)
    }

    fn start(
        &mut self,
        step: &Step,
        attempt: u32,
        timeout: Option<u64>,
    ) -> Result<(), EngineError> {
        let id = step_id(step);
        let key = idempotency_key(self.run_id, &id, attempt);
        self.started_now.insert(key.clone());
        self.decide(RunCommand::StartStep {
            step_id: id,
            attempt,
            idempotency_key: key,
            timeout_at: timeout.map(|s| self.now + Duration::seconds(s as i64)),
            at: self.now,
        })
    }

    /// What a step does as it starts.
    fn on_start(
        &mut self,
        step: &'a Step,
        attempt: u32,
        prev: Option<&str>,
    ) -> Result<(), EngineError> {
        let id = step_id(step);
        let scope = self.scope_for(prev, &templates_of(step));
        match &step.kind {
            StepKind::Gate(gate) => {
                let message = match render::text(&gate.message, &scope) {
                    Ok(m) => m,
                    Err(e) => return self.fail_step(&id, attempt, ErrorClass::Validation, e),
                };
                self.decide(RunCommand::OpenGate {
                    gate_id: gate_id(self.run_id, &id, attempt),
                    step_id: id,
                    approvers: gate.approvers.clone(),
                    message,
                    expires_at: step
                        .common
                        .timeout_seconds
                        .map(|s| self.now + Duration::seconds(s as i64)),
                    at: self.now,
                })
            }
            StepKind::Conditional(c) => match self.condition(&c.condition, prev) {
                Ok(value) => self.decide(RunCommand::SucceedStep {
                    step_id: id,
                    attempt,
                    output: json!({
                        "branch": if value { "if_true" } else { "if_false" },
                        "condition": value,
                    }),
                    cost_usd: None,
                    tokens: None,
                    at: self.now,
                }),
                Err(e) => self.fail_step(
                    &id,
                    attempt,
                    ErrorClass::Validation,
                    format!("condition: {e}"),
                ),
            },
            StepKind::Parallel(_) => Ok(()),
            StepKind::Agent(a) => {
                let rendered = (|| -> Result<_, String> {
                    let prompt = render::text(&a.prompt, &scope)?;
                    let repository = a
                        .workspace
                        .as_ref()
                        .map(|w| render::text(&w.repository, &scope))
                        .transpose()?;
                    let branch = a
                        .workspace
                        .as_ref()
                        .and_then(|w| w.branch.as_deref())
                        .map(|b| render::text(b, &scope))
                        .transpose()?;
                    Ok((prompt, repository, branch))
                })();
                match rendered {
                    Ok((prompt, repository, branch)) => {
                        self.effects.push(Effect::QueueTask {
                            task_id: task_id(self.run_id, &id, attempt),
                            step_id: id,
                            attempt,
                            prompt,
                            capabilities: a.capabilities.clone(),
                            repository,
                            branch,
                            agent_hint: a.agent_hint.clone(),
                            priority: a.priority,
                            review_required: a.review_required,
                        });
                        Ok(())
                    }
                    Err(e) => self.fail_step(&id, attempt, ErrorClass::Validation, e),
                }
            }
            StepKind::Workflow(w) => {
                let inputs = crate::expr::render_value(&Value::Object(w.inputs.clone()), &scope);
                match inputs {
                    Ok(Value::Object(inputs)) => {
                        self.effects.push(Effect::StartChild {
                            run_id: child_run_id(self.run_id, &id, attempt),
                            step_id: id,
                            attempt,
                            workflow: w.workflow.clone(),
                            inputs,
                        });
                        Ok(())
                    }
                    Ok(other) => self.fail_step(
                        &id,
                        attempt,
                        ErrorClass::Validation,
                        format!("inputs must render to a mapping, not {other}"),
                    ),
                    Err(e) => self.fail_step(&id, attempt, ErrorClass::Validation, e.to_string()),
                }
            }
            _ => self.perform(step, attempt, prev),
        }
    }

    /// Emit the work of a performed step's attempt.
    fn perform(
        &mut self,
        step: &Step,
        attempt: u32,
        prev: Option<&str>,
    ) -> Result<(), EngineError> {
        let id = step_id(step);
        let scope = self.scope_for(prev, &templates_of(step));
        let fallback = self.recovery_before(&id, attempt).and_then(|r| match r {
            RecoveryAction::Fallback { tool } => Some(tool),
            _ => None,
        });
        let work = match render::work(self.def, step, &scope, fallback.as_deref()) {
            Ok(work) => work,
            Err(e) => return self.fail_step(&id, attempt, ErrorClass::Validation, e),
        };
        let before = match self.recovery_before(&id, attempt) {
            Some(RecoveryAction::RefreshAuth) => self.refresh_hook(step, &id, attempt),
            _ => None,
        };
        self.effects.push(Effect::Perform {
            key: idempotency_key(self.run_id, &id, attempt),
            step_id: id,
            attempt,
            work,
            before,
            timeout_ms: self.timeout_seconds(step, attempt).map(|s| s * 1000),
        });
        Ok(())
    }

    /// A running attempt: `Some(progress)` when it has to wait, `None` when its state
    /// changed and it must be looked at again.
    fn running(
        &mut self,
        step: &'a Step,
        attempt: u32,
        prev: Option<&str>,
    ) -> Result<Option<Progress>, EngineError> {
        let id = step_id(step);
        match &step.kind {
            StepKind::Gate(gate) => {
                self.running_gate(&id, attempt, gate.on_reject, gate.on_timeout)
            }
            StepKind::Parallel(parallel) => {
                // Branches already going first: a `wait_for: any` may be decided
                // without starting another one.
                let limit = parallel.max_concurrency.unwrap_or(u32::MAX) as usize;
                let mut progress: Vec<(&str, Option<Progress>)> = Vec::new();
                for branch in &parallel.branches {
                    let started = branch
                        .steps
                        .first()
                        .is_some_and(|s| self.state.step(&step_id(s)).is_some());
                    let p = if started {
                        Some(self.walk_list(&branch.steps, prev)?)
                    } else {
                        None
                    };
                    progress.push((branch.name.as_str(), p));
                }
                let decided = parallel.wait_for == WaitFor::Any
                    && progress.iter().any(|(_, p)| *p == Some(Progress::Done));
                if !decided {
                    let mut active = progress
                        .iter()
                        .filter(|(_, p)| *p == Some(Progress::Blocked))
                        .count();
                    for (branch, slot) in parallel.branches.iter().zip(progress.iter_mut()) {
                        if slot.1.is_none() && active < limit {
                            let p = self.walk_list(&branch.steps, prev)?;
                            if p == Progress::Blocked {
                                active += 1;
                            }
                            slot.1 = Some(p);
                        }
                    }
                }
                let progress: Vec<(&str, Progress)> = progress
                    .into_iter()
                    .map(|(n, p)| (n, p.unwrap_or(Progress::Blocked)))
                    .collect();
                self.settle_parallel(step, attempt, parallel.wait_for, &progress)
            }
            StepKind::Conditional(_) => {
                // Started and decided in one tick; a crash in between cannot leave it
                // running, but decide again if it did.
                self.on_start(step, attempt, prev)?;
                Ok(None)
            }
            StepKind::Agent(_) | StepKind::Workflow(_) => Ok(Some(Progress::Blocked)),
            _ => {
                let key = idempotency_key(self.run_id, &id, attempt);
                if !self.started_now.contains(&key) && !self.input.in_flight.contains(&key) {
                    // Started by a worker that is gone: start the same attempt again.
                    let timeout = self.timeout_seconds(step, attempt);
                    self.start(step, attempt, timeout)?;
                    self.perform(step, attempt, prev)?;
                }
                Ok(Some(Progress::Blocked))
            }
        }
    }

    fn running_gate(
        &mut self,
        id: &StepId,
        attempt: u32,
        on_reject: GateRejected,
        on_timeout: GateTimedOut,
    ) -> Result<Option<Progress>, EngineError> {
        let gate_id = gate_id(self.run_id, id, attempt);
        let Some(gate) = self.state.gate(&gate_id).cloned() else {
            return Ok(Some(Progress::Blocked));
        };
        match gate.decision {
            None => match gate.expires_at {
                Some(expiry) if expiry <= self.now => {
                    self.decide(RunCommand::ExpireGate {
                        gate_id,
                        at: self.now,
                    })?;
                    Ok(None)
                }
                Some(expiry) => {
                    self.wake(expiry);
                    Ok(Some(Progress::Blocked))
                }
                None => Ok(Some(Progress::Blocked)),
            },
            Some(GateDecision::Approved { by, comment, at }) => {
                self.succeed(
                    id,
                    attempt,
                    json!({"approved": true, "by": by, "comment": comment, "at": at}),
                )?;
                Ok(None)
            }
            Some(GateDecision::Rejected { by, comment, .. }) => {
                let message = format!("rejected by {by}: {comment}");
                self.fail_step(id, attempt, ErrorClass::Validation, message)?;
                if on_reject == GateRejected::Skip {
                    self.skip(id, "the gate was rejected; on_reject: skip")?;
                }
                Ok(None)
            }
            Some(GateDecision::Expired { at }) => {
                match on_timeout {
                    GateTimedOut::Approve => {
                        self.succeed(
                            id,
                            attempt,
                            json!({"approved": true, "by": "timeout", "at": at}),
                        )?;
                    }
                    GateTimedOut::Fail | GateTimedOut::Skip => {
                        self.fail_step(
                            id,
                            attempt,
                            ErrorClass::Timeout,
                            "nobody decided before the gate expired".into(),
                        )?;
                        if on_timeout == GateTimedOut::Skip {
                            self.skip(id, "the gate expired; on_timeout: skip")?;
                        }
                    }
                }
                Ok(None)
            }
        }
    }

    fn settle_parallel(
        &mut self,
        step: &Step,
        attempt: u32,
        wait_for: WaitFor,
        progress: &[(&str, Progress)],
    ) -> Result<Option<Progress>, EngineError> {
        let id = step_id(step);
        let status = |p: Progress| match p {
            Progress::Done => "succeeded",
            Progress::Blocked => "running",
            Progress::Failed => "failed",
        };
        let summary: serde_json::Map<String, Value> = progress
            .iter()
            .map(|(name, p)| (name.to_string(), json!(status(*p))))
            .collect();
        let winner = progress.iter().find(|(_, p)| *p == Progress::Done);
        if wait_for == WaitFor::Any
            && let Some((name, _)) = winner
        {
            let output = json!({"branches": summary, "winner": name});
            self.succeed(&id, attempt, output)?;
            return Ok(None);
        }
        if progress.iter().any(|(_, p)| *p == Progress::Blocked) {
            return Ok(Some(Progress::Blocked));
        }
        let failed: Vec<&str> = progress
            .iter()
            .filter(|(_, p)| *p == Progress::Failed)
            .map(|(n, _)| *n)
            .collect();
        if failed.is_empty() {
            self.succeed(&id, attempt, json!({"branches": summary}))?;
        } else {
            let message = format!(
                "branch{} {} failed",
                if failed.len() > 1 { "es" } else { "" },
                failed.join(", ")
            );
            self.fail_step(&id, attempt, ErrorClass::Dependency, message)?;
        }
        Ok(None)
    }

    fn succeed(&mut self, id: &StepId, attempt: u32, output: Value) -> Result<(), EngineError> {
        self.decide(RunCommand::SucceedStep {
            step_id: id.clone(),
            attempt,
            output,
            cost_usd: None,
            tokens: None,
            at: self.now,
        })
    }

    fn skip(&mut self, id: &StepId, reason: &str) -> Result<(), EngineError> {
        self.decide(RunCommand::SkipStep {
            step_id: id.clone(),
            reason: reason.to_string(),
            at: self.now,
        })
    }

    /// A succeeded step: containers go on with their children.
    fn after_success(
        &mut self,
        step: &'a Step,
        output: &Value,
        prev: Option<&str>,
    ) -> Result<Progress, EngineError> {
        match &step.kind {
            StepKind::Conditional(c) => {
                let (chosen, other) = if output["branch"] == "if_true" {
                    (&c.if_true, &c.if_false)
                } else {
                    (&c.if_false, &c.if_true)
                };
                self.skip_unscheduled(&other.iter().collect::<Vec<_>>())?;
                self.walk_list(chosen, prev)
            }
            StepKind::Parallel(p) => {
                // Branches that lost a `wait_for: any` stop where they are.
                let rest: Vec<&Step> = p.branches.iter().flat_map(|b| &b.steps).collect();
                self.skip_waiting(&rest)?;
                Ok(Progress::Done)
            }
            _ => Ok(Progress::Done),
        }
    }

    /// Mark steps that will never run as skipped (the branch not taken), so
    /// expressions and timelines see `skipped` rather than `pending`.
    fn skip_unscheduled(&mut self, steps: &[&Step]) -> Result<(), EngineError> {
        for step in steps {
            let id = step_id(step);
            if self.state.step(&id).is_none() {
                self.decide(RunCommand::ScheduleStep {
                    step_id: id.clone(),
                    due_at: self.now,
                    at: self.now,
                })?;
                self.skip(&id, "its branch was not taken")?;
            }
            self.skip_unscheduled(&step.children())?;
        }
        Ok(())
    }

    /// Skip steps that are scheduled and not yet started (the losers of a race).
    fn skip_waiting(&mut self, steps: &[&Step]) -> Result<(), EngineError> {
        for step in steps {
            let id = step_id(step);
            if matches!(self.state.step(&id), Some(StepState::Scheduled { .. })) {
                self.skip(&id, "another branch finished first")?;
            }
            self.skip_waiting(&step.children())?;
        }
        Ok(())
    }

    /// A failed step: decide the recovery once per attempt, then follow it.
    fn after_failure(
        &mut self,
        step: &'a Step,
        attempt: u32,
        error: StepError,
        is_final: bool,
    ) -> Result<Option<Progress>, EngineError> {
        let id = step_id(step);
        let recovery = self
            .state
            .attempts(&id)
            .iter()
            .find(|a| a.attempt == attempt)
            .and_then(|a| a.recovery.clone());
        match (is_final, recovery) {
            (true, Some(RecoveryAction::Continue)) => Ok(Some(Progress::Done)),
            (true, _) => Ok(Some(Progress::Failed)),
            (false, None) => {
                self.recover(step, attempt, &error)?;
                Ok(None)
            }
            (false, Some(RecoveryAction::Escalate { gate_id })) => self.escalated(&id, gate_id),
            (false, Some(_)) => {
                self.decide(RunCommand::RetryStep {
                    step_id: id,
                    backoff_ms: 0,
                    at: self.now,
                })?;
                Ok(None)
            }
        }
    }

    fn recover(&mut self, step: &Step, attempt: u32, error: &StepError) -> Result<(), EngineError> {
        let id = step_id(step);
        let decision = if self.hooks.contains(id.as_str()) {
            Decision::Settle(OnError::Continue)
        } else if matches!(step.kind, StepKind::Conditional(_) | StepKind::Parallel(_)) {
            // A container's children cannot run twice: only `on_error` applies.
            Decision::Settle(match step.common.on_error.unwrap_or_default() {
                OnError::Retry => OnError::Abort,
                other => other,
            })
        } else {
            recovery::decide(
                self.def,
                step,
                error.class,
                attempt,
                self.timeout_seconds(step, attempt),
                unit_hash(self.run_id, &id, attempt),
            )
        };
        match decision {
            Decision::Retry { action, backoff_ms } => {
                self.decide(RunCommand::ApplyRecovery {
                    step_id: id.clone(),
                    action,
                    at: self.now,
                })?;
                self.decide(RunCommand::RetryStep {
                    step_id: id,
                    backoff_ms,
                    at: self.now,
                })
            }
            Decision::Escalate { approvers } => {
                let gate_id = escalation_gate_id(self.run_id, &id, attempt);
                self.decide(RunCommand::ApplyRecovery {
                    step_id: id.clone(),
                    action: RecoveryAction::Escalate { gate_id },
                    at: self.now,
                })?;
                self.decide(RunCommand::OpenGate {
                    gate_id,
                    step_id: id.clone(),
                    approvers,
                    message: format!(
                        "step `{id}` failed ({error}). Approve to try it again, reject to fail the run."
                    ),
                    expires_at: None,
                    at: self.now,
                })
            }
            Decision::Settle(OnError::Skip) => {
                self.skip(&id, &format!("failed ({error}); on_error: skip"))
            }
            Decision::Settle(OnError::Continue) => self.decide(RunCommand::ApplyRecovery {
                step_id: id,
                action: RecoveryAction::Continue,
                at: self.now,
            }),
            Decision::Settle(_) => self.decide(RunCommand::ApplyRecovery {
                step_id: id,
                action: RecoveryAction::Abort,
                at: self.now,
            }),
        }
    }

    /// A failed step waiting for a person: approval retries it, rejection fails it.
    fn escalated(&mut self, id: &StepId, gate_id: GateId) -> Result<Option<Progress>, EngineError> {
        match self.state.gate(&gate_id).map(|g| g.decision.clone()) {
            Some(None) | None => Ok(Some(Progress::Blocked)),
            Some(Some(GateDecision::Approved { .. })) => {
                self.decide(RunCommand::RetryStep {
                    step_id: id.clone(),
                    backoff_ms: 0,
                    at: self.now,
                })?;
                Ok(None)
            }
            Some(Some(_)) => Ok(Some(Progress::Failed)),
        }
    }

    // ---- helpers ------------------------------------------------------------------------

    fn condition(&self, source: &str, prev: Option<&str>) -> Result<bool, String> {
        let expr = Expression::parse_condition(source).map_err(|e| e.to_string())?;
        let refs = expr.references();
        let steps = if refs.any_step {
            self.step_ids.clone()
        } else {
            refs.steps.iter().cloned().collect()
        };
        expr.evaluate_bool(&render::scope(&steps, &self.state, prev, &self.input.env))
            .map_err(|e| e.to_string())
    }

    /// What the templates in `templates` see: only the steps they name (building the
    /// view of every step for every step would make a long run quadratic), or every
    /// step when they use `steps` as a whole (`steps[k]`, `size(steps)`...).
    fn scope_for(&self, prev: Option<&str>, templates: &Value) -> crate::expr::Scope {
        let refs = crate::expr::references_in(templates);
        let steps: Vec<String> = if refs.any_step {
            self.step_ids.clone()
        } else {
            refs.steps.into_iter().collect()
        };
        render::scope(&steps, &self.state, prev, &self.input.env)
    }

    /// The timeout of `attempt`: the step's, or what an `increase_timeout` recovery
    /// of an earlier attempt set.
    fn timeout_seconds(&self, step: &Step, attempt: u32) -> Option<u64> {
        let id = step_id(step);
        self.state
            .attempts(&id)
            .iter()
            .filter(|a| a.attempt < attempt)
            .filter_map(|a| match &a.recovery {
                Some(RecoveryAction::IncreaseTimeout {
                    new_timeout_seconds,
                }) => Some(*new_timeout_seconds),
                _ => None,
            })
            .next_back()
            .or(step.common.timeout_seconds)
    }

    /// The recovery recorded after the attempt before `attempt`.
    fn recovery_before(&self, id: &StepId, attempt: u32) -> Option<RecoveryAction> {
        self.state
            .attempts(id)
            .iter()
            .find(|a| a.attempt + 1 == attempt)
            .and_then(|a| a.recovery.clone())
    }

    /// The `hook` tool of the `refresh_auth` handler that chose the recovery.
    fn refresh_hook(&self, step: &Step, id: &StepId, attempt: u32) -> Option<super::Work> {
        let class = self
            .state
            .attempts(id)
            .iter()
            .find(|a| a.attempt + 1 == attempt)
            .and_then(|a| a.error_class())?;
        let handler = recovery::handler_for(&step.common.error_handlers, class)
            .or_else(|| recovery::handler_for(&self.def.error_handlers, class))
            .filter(|h| h.action == HandlerAction::RefreshAuth)?;
        let hook = handler.hook.as_deref()?;
        render::tool(self.def, hook, serde_json::Map::new()).ok()
    }

    fn find(&self, id: &str) -> Option<&'a Step> {
        super::find_step(self.def, id)
    }
}

fn step_id(step: &Step) -> StepId {
    // Ids were checked when the workflow was loaded; a bad one cannot get here.
    StepId::try_from(step.id())
        .unwrap_or_else(|_| StepId::try_from("invalid-step-id").unwrap_or_else(|_| unreachable!()))
}

/// The template-bearing fields of a step, as JSON.
fn templates_of(step: &Step) -> Value {
    serde_json::to_value(&step.kind).unwrap_or(Value::Null)
}

fn collect_ids(step: &Step, out: &mut Vec<String>) {
    out.push(step.id().to_string());
    for child in step.children() {
        collect_ids(child, out);
    }
}

fn is_terminal_event(event: &RunEvent) -> bool {
    matches!(
        event,
        RunEvent::Completed { .. } | RunEvent::Failed { .. } | RunEvent::Cancelled { .. }
    )
}
