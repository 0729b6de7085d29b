//! The `run` stream: one execution of one workflow version, step by step.
//!
//! Workers are stateless: a worker that picks a run up folds this stream and carries on
//! from what it records, so the stream must say everything the executor needs to
//! continue after a crash. That is why a step's life is spelled out attempt by attempt
//! (scheduled, started, succeeded or failed, retried or skipped, and the recovery the
//! error handler chose; under [`Rules`] 2 a first attempt started or skipped as soon
//! as it is reached is not scheduled first), why a completed step's output is kept (completed steps are
//! never re-executed: their recorded output is used), and why an attempt started
//! without an outcome may be started again only with the same idempotency key
//! (at-least-once execution). Gates, costs against the budget, the saga of
//! compensations and the run's ending live here too, so timelines, the approval inbox
//! and analytics are plain projections of the stream.
//!
//! Every rule lives in [`Run::decide`](crate::domain::Decide::decide) (`decide.rs`);
//! `apply` only records what happened. Time is data: due times, gate expiries and
//! deadlines are compared with the `at` of the command, never with a clock.

mod commands;
mod decide;
mod error;
mod events;
mod state;
#[cfg(test)]
mod tests;
mod types;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::ids::{GateId, RunId, StepId, WorkflowName};

pub use commands::{RunAction, RunCommand};
pub use error::RunError;
pub use events::{FINISHED_EVENT_TYPES, Payload, RunEvent};
pub use state::{
    Attempt, AttemptOutcome, Compensation, CompensationRan, Gate, GateDecision, Pause, QueuedOn,
    RunOutcome, RunStatus, StepPhase, StepSituation, StepState,
};
pub use types::{
    DerivedKind, ErrorClass, Flow, FlowSlot, ParentRef, RecoveryAction, Rules, RunOrigin, StepCall,
    StepError, UnknownErrorClass,
};

/// A rerun or fork made from a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DerivedRun {
    pub run_id: RunId,
    pub kind: DerivedKind,
    pub from_step: StepId,
    pub by: String,
    pub at: DateTime<Utc>,
}

/// One run: the state folded from its stream.
///
/// Fields are private so the state only changes through `apply`; read it through the
/// accessors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Run {
    run_id: Option<RunId>,
    status: Option<RunStatus>,
    workflow: Option<WorkflowName>,
    workflow_version: String,
    inputs: Value,
    budget_usd: Option<f64>,
    timeout_at: Option<DateTime<Utc>>,
    parent: Option<ParentRef>,
    steps: BTreeMap<StepId, StepState>,
    attempts: BTreeMap<StepId, Vec<Attempt>>,
    /// Succeeded steps, in the order they succeeded (the saga compensates in reverse).
    succeeded_order: Vec<StepId>,
    /// In the order they were opened.
    gates: Vec<Gate>,
    total_cost_usd: f64,
    total_tokens: u64,
    budget_exceeded_at: Option<DateTime<Utc>>,
    compensation: Option<Compensation>,
    /// The run this one reruns or forks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    origin: Option<RunOrigin>,
    /// Steps kept from the origin run, not performed here.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    carried: BTreeMap<StepId, RunId>,
    /// Reruns and forks made from this run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    derived: Vec<DerivedRun>,
    /// Set while someone has the run paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paused: Option<Pause>,
    /// Its priority and the concurrency slots it needs before its first step.
    #[serde(default, skip_serializing_if = "Flow::is_default")]
    flow: Flow,
    /// When it took its slots (runs without slots never wait for one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    admitted_at: Option<DateTime<Utc>>,
    /// The slot it waits for, while queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    queued: Option<QueuedOn>,
    /// The rules its steps are recorded by.
    #[serde(default, skip_serializing_if = "Rules::is_first")]
    rules: Rules,
    outcome: Option<RunOutcome>,
    started_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
    /// Events folded since the run started or last continued as new (not part of
    /// the state a continuation carries, nor of a read model's copy).
    #[serde(skip)]
    history: HistoryLen,
}

/// A count of folded events that is not part of what a run *is*: two states folded
/// from histories of different lengths (one of them continued as new) are equal.
#[derive(Debug, Clone, Copy, Default)]
struct HistoryLen(u64);

impl PartialEq for HistoryLen {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Run {
    /// The run's id, once it was started.
    pub fn id(&self) -> Option<RunId> {
        self.run_id
    }

    /// Where the run is; `None` before it was started.
    pub fn status(&self) -> Option<RunStatus> {
        self.status
    }

    /// The run this one reruns or forks, and the step it started again at.
    pub fn origin(&self) -> Option<&RunOrigin> {
        self.origin.as_ref()
    }

    /// The run a step was carried from (kept as it ended there), if it was.
    pub fn carried_from(&self, step_id: &StepId) -> Option<RunId> {
        self.carried.get(step_id).copied()
    }

    /// Reruns and forks made from this run, oldest first.
    pub fn derived(&self) -> &[DerivedRun] {
        &self.derived
    }

    /// The rules its steps are recorded by (from its start).
    pub fn rules(&self) -> Rules {
        self.rules
    }

    /// Its priority and the concurrency slots it needs.
    pub fn flow(&self) -> &Flow {
        &self.flow
    }

    /// Started with concurrency slots to take and not admitted yet (nor finished):
    /// no step may start. A paused run is not admitted until it is resumed.
    pub fn awaiting_admission(&self) -> bool {
        self.status == Some(RunStatus::Queued)
    }

    /// The slot a queued run last found full, and since when it waits.
    pub fn queued_on(&self) -> Option<&QueuedOn> {
        self.queued.as_ref()
    }

    /// When the run took its concurrency slots.
    pub fn admitted_at(&self) -> Option<DateTime<Utc>> {
        self.admitted_at
    }

    /// Why a run on its way does not move, in words (none when nothing holds it):
    /// paused, queued for a concurrency slot, or steps throttled by a rate limit.
    pub fn waiting_reason(&self) -> Option<String> {
        if let Some(pause) = &self.paused {
            return Some(format!("paused by {}: {}", pause.by, pause.reason));
        }
        if !self.awaiting_admission() {
            return self.throttled_reason();
        }
        Some(match &self.queued {
            Some(q) => format!(
                "queued: all {} slots of {} are held (waiting since {})",
                q.limit,
                q.scope,
                q.since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            None => format!(
                "queued: waiting for a worker to take its slots ({})",
                self.flow
                    .slots
                    .iter()
                    .map(|s| format!("{} of {}", s.scope, s.limit))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }

    /// The steps held back by a rate limit, and until when.
    fn throttled_reason(&self) -> Option<String> {
        if !self.status.is_some_and(RunStatus::is_active) {
            return None;
        }
        let held: Vec<String> = self
            .steps
            .iter()
            .filter_map(|(id, state)| match state {
                StepState::Scheduled {
                    due_at,
                    throttled: Some(limit),
                    ..
                } => Some(format!(
                    "step {id} by {limit} until {}",
                    due_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                )),
                _ => None,
            })
            .collect();
        (!held.is_empty()).then(|| format!("throttled: {}", held.join("; ")))
    }

    /// Who paused the run, while it is paused: no step starts.
    pub fn paused(&self) -> Option<&Pause> {
        self.paused.as_ref()
    }

    /// How many events the state was folded from since the run started or last
    /// continued as new: what the executor holds against the history limit.
    pub fn history_len(&self) -> u64 {
        self.history.0
    }

    /// The state a continuation carries: this one, with each step's attempts cut to
    /// what deciding still reads (the last two, and the latest that raised the
    /// timeout). Cost and token totals are kept as totals.
    pub fn compacted(&self) -> Run {
        let mut state = self.clone();
        for attempts in state.attempts.values_mut() {
            let keep_from = attempts.len().saturating_sub(2);
            let timeout = attempts[..keep_from]
                .iter()
                .rposition(|a| matches!(a.recovery, Some(RecoveryAction::IncreaseTimeout { .. })));
            let mut kept: Vec<Attempt> = timeout.map(|i| attempts[i].clone()).into_iter().collect();
            kept.extend(attempts.drain(keep_from..));
            *attempts = kept;
        }
        state.history = HistoryLen(0);
        state
    }

    /// SUCCEEDED, FAILED or CANCELLED.
    pub fn is_terminal(&self) -> bool {
        self.status.is_some_and(RunStatus::is_terminal)
    }

    pub fn workflow(&self) -> Option<&WorkflowName> {
        self.workflow.as_ref()
    }

    pub fn workflow_version(&self) -> &str {
        &self.workflow_version
    }

    pub fn inputs(&self) -> &Value {
        &self.inputs
    }

    pub fn budget_usd(&self) -> Option<f64> {
        self.budget_usd
    }

    /// When the whole run times out.
    pub fn timeout_at(&self) -> Option<DateTime<Utc>> {
        self.timeout_at
    }

    /// The step of the parent run, for a sub-workflow run.
    pub fn parent(&self) -> Option<&ParentRef> {
        self.parent.as_ref()
    }

    /// One step's state; `None` for a step that was never scheduled.
    pub fn step(&self, step_id: &StepId) -> Option<&StepState> {
        self.steps.get(step_id)
    }

    /// Every step that was scheduled, by id.
    pub fn steps(&self) -> &BTreeMap<StepId, StepState> {
        &self.steps
    }

    /// Every attempt of a step, first to latest (empty for an unknown step).
    pub fn attempts(&self, step_id: &StepId) -> &[Attempt] {
        self.attempts.get(step_id).map_or(&[], Vec::as_slice)
    }

    /// The steps with an attempt started and no outcome yet.
    pub fn running_steps(&self) -> impl Iterator<Item = (&StepId, &StepState)> {
        self.steps_in(StepPhase::Running)
    }

    /// The steps waiting for their due time.
    pub fn scheduled_steps(&self) -> impl Iterator<Item = (&StepId, &StepState)> {
        self.steps_in(StepPhase::Scheduled)
    }

    fn steps_in(&self, phase: StepPhase) -> impl Iterator<Item = (&StepId, &StepState)> {
        self.steps.iter().filter(move |(_, s)| s.phase() == phase)
    }

    /// The recorded output of a succeeded step: what replay uses instead of running it.
    pub fn succeeded_output(&self, step_id: &StepId) -> Option<&Value> {
        match self.steps.get(step_id) {
            Some(StepState::Succeeded { output, .. }) => Some(output.as_ref()),
            _ => None,
        }
    }

    /// The succeeded steps, in the order they succeeded.
    pub fn succeeded_steps(&self) -> &[StepId] {
        &self.succeeded_order
    }

    /// Every gate, in the order they were opened.
    pub fn gates(&self) -> &[Gate] {
        &self.gates
    }

    pub fn gate(&self, gate_id: &GateId) -> Option<&Gate> {
        self.gates.iter().find(|g| &g.gate_id == gate_id)
    }

    /// The gates nobody has decided yet, in the order they were opened.
    pub fn open_gates(&self) -> impl Iterator<Item = &Gate> {
        self.gates.iter().filter(|g| g.is_open())
    }

    /// What the run has spent so far.
    pub fn total_cost_usd(&self) -> f64 {
        self.total_cost_usd
    }

    pub fn total_tokens(&self) -> u64 {
        self.total_tokens
    }

    /// When the total first went over the budget.
    pub fn budget_exceeded_at(&self) -> Option<DateTime<Utc>> {
        self.budget_exceeded_at
    }

    /// The saga, once compensation started.
    pub fn compensation(&self) -> Option<&Compensation> {
        self.compensation.as_ref()
    }

    /// How a finished run ended.
    pub fn outcome(&self) -> Option<&RunOutcome> {
        self.outcome.as_ref()
    }

    pub fn started_at(&self) -> Option<DateTime<Utc>> {
        self.started_at
    }

    /// The time of the last event.
    pub fn updated_at(&self) -> Option<DateTime<Utc>> {
        self.updated_at
    }

    /// Whether something went wrong that a saga may answer at `at`: a step failed, a
    /// gate was rejected or expired, the budget was exceeded, or the deadline passed.
    pub fn has_failure(&self, at: DateTime<Utc>) -> bool {
        self.steps.values().any(|s| s.phase() == StepPhase::Failed)
            || self.gates.iter().any(|g| {
                matches!(
                    g.decision,
                    Some(GateDecision::Rejected { .. } | GateDecision::Expired { .. })
                )
            })
            || self.budget_exceeded_at.is_some()
            || self.timeout_at.is_some_and(|deadline| at >= deadline)
    }

    fn attempt_mut(&mut self, step_id: &StepId, attempt: u32, at: DateTime<Utc>) -> &mut Attempt {
        let attempts = self.attempts.entry(step_id.clone()).or_default();
        let index = match attempts.iter().position(|a| a.attempt == attempt) {
            Some(index) => index,
            None => {
                attempts.push(Attempt::scheduled(attempt, at, None, at));
                attempts.len() - 1
            }
        };
        &mut attempts[index]
    }

    /// The attempt record of the step's current attempt, if the step is known.
    fn current_attempt_mut(&mut self, step_id: &StepId, at: DateTime<Utc>) -> Option<&mut Attempt> {
        let attempt = self.steps.get(step_id)?.attempt();
        Some(self.attempt_mut(step_id, attempt, at))
    }

    /// RUNNING and WAITING follow from the steps and gates: WAITING while a gate is open
    /// and no step runs (other than one waiting at its own gate).
    fn settle(&mut self) {
        if self.status.is_some_and(RunStatus::is_active) && self.paused.is_some() {
            self.status = Some(RunStatus::Paused);
        } else if self.status.is_some_and(RunStatus::is_active)
            && !self.flow.slots.is_empty()
            && self.admitted_at.is_none()
        {
            self.status = Some(RunStatus::Queued);
        } else if self.status.is_some_and(RunStatus::is_active) {
            // A step waiting at its own open gate (a `gate` step) is waiting, not
            // running.
            let running = self
                .running_steps()
                .any(|(id, _)| !self.open_gates().any(|g| &g.step_id == id));
            let gate_open = self.open_gates().next().is_some();
            self.status = Some(if gate_open && !running {
                RunStatus::Waiting
            } else {
                RunStatus::Running
            });
        }
    }

    /// The run stopped: no failed attempt can be followed by another one.
    fn finalize_failures(&mut self) {
        for state in self.steps.values_mut() {
            if let StepState::Failed { is_final, .. } = state {
                *is_final = true;
            }
        }
    }

    fn end(&mut self, outcome: RunOutcome) {
        self.status = Some(outcome.status());
        self.paused = None;
        self.queued = None;
        self.outcome = Some(outcome);
        self.finalize_failures();
    }
}

crate::domain::impl_aggregate!(Run, "run", RunCommand, RunEvent, RunError);

impl Run {
    /// Fold one event into the state (`Aggregate::apply`): it records what happened and
    /// never fails, since `decide` already refused whatever was not allowed.
    fn apply_event(&mut self, event: RunEvent) {
        self.updated_at = Some(event.at());
        let history = match event {
            RunEvent::Continued { .. } => HistoryLen(1),
            _ => HistoryLen(self.history.0 + 1),
        };
        match event {
            RunEvent::Started {
                run_id,
                workflow,
                workflow_version,
                inputs,
                budget_usd,
                timeout_at,
                parent,
                origin,
                flow,
                rules,
                at,
            } => {
                *self = Run {
                    run_id: Some(run_id),
                    origin,
                    flow,
                    rules,
                    status: Some(RunStatus::Running),
                    workflow: Some(workflow),
                    workflow_version,
                    inputs,
                    budget_usd,
                    timeout_at,
                    parent,
                    started_at: Some(at),
                    updated_at: Some(at),
                    ..Run::default()
                };
            }
            RunEvent::StepScheduled {
                step_id,
                attempt,
                due_at,
                at,
            } => {
                self.steps.insert(
                    step_id.clone(),
                    StepState::Scheduled {
                        attempt,
                        due_at,
                        throttled: None,
                    },
                );
                self.attempts
                    .entry(step_id)
                    .or_default()
                    .push(Attempt::scheduled(attempt, due_at, None, at));
            }
            RunEvent::StepStarted {
                step_id,
                attempt,
                idempotency_key,
                timeout_at,
                at,
                ..
            } => {
                let restart = matches!(
                    self.steps.get(&step_id),
                    Some(StepState::Running { attempt: running, .. }) if *running == attempt
                );
                let record = self.attempt_mut(&step_id, attempt, at);
                record.timeout_at = timeout_at;
                record.idempotency_key = Some(idempotency_key.clone());
                if restart && record.started_at.is_some() {
                    record.restarted_at.push(at);
                } else {
                    record.started_at = Some(at);
                }
                let started_at = record.started_at.unwrap_or(at);
                self.steps.insert(
                    step_id,
                    StepState::Running {
                        attempt,
                        idempotency_key,
                        started_at,
                        timeout_at,
                    },
                );
            }
            RunEvent::StepSucceeded {
                step_id,
                attempt,
                output,
                cost_usd,
                tokens,
                at,
            } => {
                let record = self.attempt_mut(&step_id, attempt, at);
                record.ended_at = Some(at);
                record.outcome = Some(AttemptOutcome::Succeeded);
                record.cost_usd = cost_usd;
                record.tokens = tokens;
                self.succeeded_order.retain(|s| s != &step_id);
                self.succeeded_order.push(step_id.clone());
                self.steps
                    .insert(step_id, StepState::Succeeded { attempt, output });
            }
            RunEvent::StepFailed {
                step_id,
                attempt,
                error,
                at,
            } => {
                let record = self.attempt_mut(&step_id, attempt, at);
                record.ended_at = Some(at);
                record.outcome = Some(AttemptOutcome::Failed);
                record.error = Some(error.clone());
                self.steps.insert(
                    step_id,
                    StepState::Failed {
                        attempt,
                        error,
                        is_final: false,
                    },
                );
            }
            RunEvent::StepRetried {
                step_id,
                next_attempt,
                due_at,
                backoff_ms,
                at,
            } => {
                self.attempts
                    .entry(step_id.clone())
                    .or_default()
                    .push(Attempt::scheduled(
                        next_attempt,
                        due_at,
                        Some(backoff_ms),
                        at,
                    ));
                self.steps.insert(
                    step_id,
                    StepState::Scheduled {
                        attempt: next_attempt,
                        due_at,
                        throttled: None,
                    },
                );
            }
            RunEvent::StepThrottled {
                step_id,
                attempt,
                limit,
                until,
                ..
            } => {
                self.steps.insert(
                    step_id,
                    StepState::Scheduled {
                        attempt,
                        due_at: until,
                        throttled: Some(limit),
                    },
                );
            }
            RunEvent::StepSkipped {
                step_id,
                reason,
                at,
            } => {
                let attempt = self.steps.get(&step_id).map_or(1, StepState::attempt);
                // A step skipped without a schedule (rules 2) gets its attempt's
                // record here.
                let record = self.attempt_mut(&step_id, attempt, at);
                if record.outcome.is_none() {
                    record.ended_at = Some(at);
                    record.outcome = Some(AttemptOutcome::Skipped);
                }
                self.steps
                    .insert(step_id, StepState::Skipped { attempt, reason });
            }
            RunEvent::RecoveryApplied {
                step_id,
                action,
                at,
                ..
            } => {
                // Abort and Continue both give up on the step: its failure is final. Only
                // Abort also fails the run, which is the executor's decision, not the
                // fold's.
                let gives_up = matches!(action, RecoveryAction::Abort | RecoveryAction::Continue);
                if let Some(record) = self.current_attempt_mut(&step_id, at) {
                    record.recovery = Some(action);
                }
                if gives_up
                    && let Some(StepState::Failed { is_final, .. }) = self.steps.get_mut(&step_id)
                {
                    *is_final = true;
                }
            }
            RunEvent::GateOpened {
                gate_id,
                step_id,
                approvers,
                message,
                expires_at,
                at,
            } => {
                self.gates.push(Gate {
                    gate_id,
                    step_id,
                    approvers,
                    message,
                    opened_at: at,
                    expires_at,
                    decision: None,
                });
            }
            RunEvent::GateApproved {
                gate_id,
                by,
                comment,
                at,
            } => self.decide_gate(&gate_id, GateDecision::Approved { by, comment, at }),
            RunEvent::GateRejected {
                gate_id,
                by,
                comment,
                at,
            } => self.decide_gate(&gate_id, GateDecision::Rejected { by, comment, at }),
            RunEvent::GateExpired { gate_id, at } => {
                self.decide_gate(&gate_id, GateDecision::Expired { at })
            }
            RunEvent::CostCharged {
                tokens, total_usd, ..
            } => {
                self.total_cost_usd = total_usd;
                self.total_tokens = self.total_tokens.saturating_add(tokens);
            }
            RunEvent::BudgetExceeded { at, .. } => {
                self.budget_exceeded_at.get_or_insert(at);
            }
            RunEvent::CompensationStarted {
                reason,
                error_class,
                steps,
                at,
            } => {
                self.status = Some(RunStatus::Compensating);
                // A failing run's saga is not held by a pause: its compensations run.
                self.paused = None;
                self.compensation = Some(Compensation {
                    reason,
                    error_class,
                    steps,
                    ran: Vec::new(),
                    started_at: at,
                });
                self.finalize_failures();
            }
            RunEvent::CompensationStepRan {
                step_id,
                succeeded,
                error,
                at,
            } => {
                if let Some(compensation) = &mut self.compensation {
                    compensation.ran.push(CompensationRan {
                        step_id,
                        succeeded,
                        error,
                        at,
                    });
                }
            }
            RunEvent::Completed { outputs, at } => {
                self.end(RunOutcome::Succeeded { outputs, at });
            }
            RunEvent::Failed {
                reason,
                error_class,
                at,
            } => self.end(RunOutcome::Failed {
                reason,
                error_class,
                at,
            }),
            RunEvent::StepCarried {
                step_id,
                from_run,
                output,
                ..
            } => {
                let state = match output {
                    Some(output) => StepState::Succeeded {
                        attempt: 1,
                        output: Arc::new(output),
                    },
                    None => StepState::Skipped {
                        attempt: 1,
                        reason: format!("skipped in run {from_run}"),
                    },
                };
                self.steps.insert(step_id.clone(), state);
                self.carried.insert(step_id, from_run);
            }
            RunEvent::Derived {
                run_id,
                kind,
                from_step,
                by,
                at,
            } => self.derived.push(DerivedRun {
                run_id,
                kind,
                from_step,
                by,
                at,
            }),
            RunEvent::Paused {
                by,
                reason,
                at,
                workflow,
            } => {
                self.paused = Some(Pause {
                    by,
                    reason,
                    at,
                    workflow,
                });
            }
            RunEvent::Resumed { .. } => {
                self.paused = None;
            }
            RunEvent::Queued { scope, limit, at } => {
                self.queued = Some(QueuedOn {
                    scope,
                    limit,
                    since: self.queued.as_ref().map_or(at, |q| q.since),
                });
            }
            RunEvent::Admitted { at } => {
                self.admitted_at = Some(at);
                self.queued = None;
            }
            RunEvent::Cancelled { by, reason, at } => {
                self.end(RunOutcome::Cancelled { by, reason, at });
            }
            RunEvent::Continued { state, .. } => *self = *state,
        }
        self.settle();
        self.history = history;
    }

    fn decide_gate(&mut self, gate_id: &GateId, decision: GateDecision) {
        if let Some(gate) = self.gates.iter_mut().find(|g| &g.gate_id == gate_id) {
            gate.decision = Some(decision);
        }
    }
}
