//! After an attempt ends: success (and what follows it), skips, failure, the
//! recovery handlers, and escalation to a person.

use super::*;

impl<'a> Walker<'a> {
    pub(super) fn succeed(
        &mut self,
        id: &StepId,
        attempt: u32,
        output: Value,
    ) -> Result<(), EngineError> {
        self.decide(RunCommand::SucceedStep {
            step_id: id.clone(),
            attempt,
            output: std::sync::Arc::new(output),
            cost_usd: None,
            tokens: None,
            at: self.now,
        })
    }

    pub(super) fn skip(&mut self, id: &StepId, reason: &str) -> Result<(), EngineError> {
        self.decide(RunCommand::SkipStep {
            step_id: id.clone(),
            reason: reason.to_string(),
            at: self.now,
        })
    }

    /// A succeeded step: containers go on with their children.
    pub(super) fn after_success(
        &mut self,
        step: &'a Step,
        took_if_true: bool,
        prev: Option<&str>,
    ) -> Result<Progress, EngineError> {
        match &step.kind {
            StepKind::Conditional(c) => {
                let (chosen, other) = if took_if_true {
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
    pub(super) fn skip_unscheduled(&mut self, steps: &[&Step]) -> Result<(), EngineError> {
        for step in steps {
            let id = step_id(step);
            if self.state.step(&id).is_none() {
                if self.state.rules().schedules_every_step() {
                    self.decide(RunCommand::ScheduleStep {
                        step_id: id.clone(),
                        due_at: self.now,
                        at: self.now,
                    })?;
                }
                self.skip(&id, "its branch was not taken")?;
            }
            self.skip_unscheduled(&step.children())?;
        }
        Ok(())
    }

    /// Skip steps that are scheduled and not yet started (the losers of a race).
    pub(super) fn skip_waiting(&mut self, steps: &[&Step]) -> Result<(), EngineError> {
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
    pub(super) fn after_failure(
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

    pub(super) fn recover(
        &mut self,
        step: &Step,
        attempt: u32,
        error: &StepError,
    ) -> Result<(), EngineError> {
        let id = step_id(step);
        let decision = if self.index.is_hook(id.as_str()) {
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
    pub(super) fn escalated(
        &mut self,
        id: &StepId,
        gate_id: GateId,
    ) -> Result<Option<Progress>, EngineError> {
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
}
