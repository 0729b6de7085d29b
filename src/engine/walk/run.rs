//! The run as a whole: advancing through the steps, budgets, failing the run,
//! compensating succeeded steps in reverse order (saga), and completing.

use super::*;

impl<'a> Walker<'a> {
    pub(super) fn advance(&mut self) -> Result<(), EngineError> {
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
    pub(super) fn run_level_failure(&self) -> Option<(ErrorClass, String)> {
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
    pub(super) fn budget_escalation(&self) -> Option<&'a crate::workflow::model::ErrorHandler> {
        recovery::handler_for(&self.def.error_handlers, ErrorClass::Budget)
            .filter(|h| h.action == HandlerAction::Escalate)
    }

    /// Over budget with an escalation that has not been rejected: the run waits for
    /// (or was given) a person's approval rather than failing.
    pub(super) fn budget_escalation_pending(&self) -> bool {
        if self.budget_escalation().is_none() {
            return false;
        }
        match self.state.gate(&budget_gate_id(self.run_id)) {
            None => true,
            Some(gate) => matches!(gate.decision, None | Some(GateDecision::Approved { .. })),
        }
    }

    /// Whether a step the walk reaches for the first time starts (or is skipped) at
    /// once, unscheduled: under rules 2, unless the run is over its budget (then it is
    /// scheduled and waits for the budget's gate, as every step does under rules 1).
    pub(super) fn starts_unscheduled(&self) -> bool {
        !self.state.rules().schedules_every_step() && self.state.budget_exceeded_at().is_none()
    }

    /// Before a step starts over budget: open the budget gate (once) and wait for it;
    /// once approved, the run goes on.
    pub(super) fn budget_hold(&mut self, id: &StepId) -> Result<bool, EngineError> {
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
    pub(super) fn step_failure(&self) -> (ErrorClass, String) {
        let failed = self
            .state
            .steps()
            .iter()
            .filter_map(|(id, step)| match step {
                StepState::Failed { error, attempt, .. } if !self.index.is_hook(id.as_str()) => {
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
    pub(super) fn failing(
        &mut self,
        class: ErrorClass,
        reason: String,
        now: bool,
    ) -> Result<(), EngineError> {
        if !now
            && self
                .state
                .running_steps()
                .any(|(id, _)| !self.index.is_hook(id.as_str()))
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
    pub(super) fn compensate(&mut self) -> Result<(), EngineError> {
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
            if let Some(mut error) = self.compensations.remove(&next) {
                if let Some(message) = &mut error {
                    crate::text::replace_nul_in_text(message);
                }
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
            let scope = self.scope_of(Some(next.as_str()), &references_of(&undo));
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

    pub(super) fn complete(&mut self) -> Result<(), EngineError> {
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
        let scope = self.scope_of(last.as_deref(), &crate::expr::references_in(&outputs));
        match crate::expr::render_value(&outputs, &scope) {
            Ok(outputs) => self.decide(RunCommand::Complete {
                outputs,
                at: self.now,
            }),
            Err(e) => self.failing(ErrorClass::Validation, format!("outputs: {e}"), true),
        }
    }
}
