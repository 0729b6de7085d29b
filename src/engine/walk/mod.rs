//! The walk: one pass over a workflow's steps against a run's state, deciding what
//! each step does next.
//!
//! Every decision goes through the run aggregate (`decide`, then `apply` to a scratch
//! copy of the state), so the engine can only ask for transitions the domain allows,
//! and each step is looked at again after its state changed in the same tick: a step
//! scheduled now is started now, a gate approved since the last tick succeeds now.
//!
//! One concern a file, all methods of one [`Walker`]:
//!
//! - here: the walker, reported outcomes turned into events, shared helpers;
//! - `run.rs`: the run as a whole: advancing, budgets, failing, compensation (saga),
//!   completion;
//! - `steps.rs`: walking lists of steps and starting a step (guards, conditionals,
//!   the work it asks for);
//! - `waiting.rs`: steps in flight: running attempts, gates, parallel branches;
//! - `outcomes.rs`: after an attempt ends: success, skip, failure, recovery handlers
//!   and escalation.

mod outcomes;
mod run;
mod steps;
mod waiting;

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Duration, Utc};
use cqrs_es::Aggregate;
use serde_json::{Value, json};

use crate::domain::Decide;
use crate::domain::ids::{GateId, RunId, StepId};
use crate::domain::run::{
    ErrorClass, GateDecision, RecoveryAction, Run, RunCommand, RunEvent, RunStatus, StepCall,
    StepError, StepState,
};
use crate::expr::{Expression, References};
use crate::workflow::model::index::{StepIndex, references_of};
use crate::workflow::model::{
    GateRejected, GateTimedOut, HandlerAction, OnError, Step, StepKind, SubWorkflowStep, WaitFor,
    Workflow,
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
    /// The definition's step ids, hooks and template references (worked out once).
    index: &'a StepIndex,
    outcomes: HashMap<(StepId, u32), Result<Done, Failure>>,
    compensations: HashMap<StepId, Option<String>>,
    /// Keys of attempts started in this tick (their work is already an effect).
    started_now: BTreeSet<String>,
    /// Keys of attempts started in this tick with the rate-limit token they
    /// reserved when they were throttled.
    reserved_now: BTreeSet<String>,
}

impl<'a> Walker<'a> {
    pub(super) fn new(def: &'a Workflow, run: Run, input: &'a TickInput) -> Self {
        Self {
            def,
            input,
            run_id: run.id().unwrap_or_default(),
            now: input.now,
            state: run,
            events: Vec::new(),
            effects: Vec::new(),
            wake_at: None,
            index: def.index(),
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
            reserved_now: BTreeSet::new(),
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
            if self.input.protection.is_empty() {
                self.state.apply(event.clone());
                self.events.push(event);
            } else {
                let (kept, logged) = super::protect::protect(&self.input.protection, event);
                self.state.apply(kept);
                self.events.push(logged);
            }
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
        // What a process or a server answered may hold a NUL character, which the
        // log cannot store: it is recorded as the replacement character, as bytes
        // that are not UTF-8 are.
        match result {
            Ok(mut done) => {
                if crate::text::nul_in(&done.output).is_some() {
                    crate::text::replace_nul(std::sync::Arc::make_mut(&mut done.output));
                }
                self.decide(RunCommand::SucceedStep {
                    step_id: step_id.clone(),
                    attempt,
                    output: done.output,
                    cost_usd: done.cost_usd,
                    tokens: done.tokens,
                    at: self.now,
                })
            }
            Err(mut failure) => {
                crate::text::replace_nul_in_text(&mut failure.message);
                self.fail_step(step_id, attempt, failure.class, failure.message)
            }
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

    fn condition(&self, source: &str, prev: Option<&str>) -> Result<bool, String> {
        let expr = Expression::parse_condition(source).map_err(|e| e.to_string())?;
        let refs = expr.references();
        let steps = if refs.any_step {
            self.index.ids().to_vec()
        } else {
            refs.steps.iter().cloned().collect()
        };
        let prev = prev.filter(|_| refs.prev);
        expr.evaluate_bool(&render::scope(&steps, &self.state, prev, &self.input.env))
            .map_err(|e| e.to_string())
    }

    /// What the templates of `step` see: only the steps they name (building the
    /// view of every step for every step would make a long run quadratic), or every
    /// step when they use `steps` as a whole (`steps[k]`, `size(steps)`...); `prev`
    /// only when they read it (its view is a copy of that step's output). What a
    /// step of the definition refers to is looked up in its index.
    fn scope_for_step(&self, prev: Option<&str>, step: &Step) -> crate::expr::Scope {
        match self.index.references(step.id()) {
            Some(refs) => self.scope_of(prev, refs),
            None => self.scope_of(prev, &references_of(step)),
        }
    }

    /// What templates referring to `refs` see (see [`Self::scope_for_step`]).
    fn scope_of(&self, prev: Option<&str>, refs: &References) -> crate::expr::Scope {
        let steps: Vec<String> = if refs.any_step {
            self.index.ids().to_vec()
        } else {
            refs.steps.iter().cloned().collect()
        };
        let prev = prev.filter(|_| refs.prev);
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
            .or_else(|| self.declared_tool_timeout(step))
    }

    /// The `timeout_seconds` of the declared tool a `tool` step calls.
    fn declared_tool_timeout(&self, step: &Step) -> Option<u64> {
        let StepKind::Tool(t) = &step.kind else {
            return None;
        };
        self.def
            .tools
            .iter()
            .find(|d| d.header.name == t.tool)
            .and_then(|d| d.header.timeout_seconds)
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

fn is_terminal_event(event: &RunEvent) -> bool {
    matches!(
        event,
        RunEvent::Completed { .. } | RunEvent::Failed { .. } | RunEvent::Cancelled { .. }
    )
}
