//! Walking lists of steps and starting a step: guards, conditionals, and the work a
//! step asks for (an effect, a task, a child run, a gate).

use super::*;

impl<'a> Walker<'a> {
    pub(super) fn walk_list(
        &mut self,
        list: &'a [Step],
        prev: Option<&str>,
    ) -> Result<Progress, EngineError> {
        let mut prev = prev.map(String::from);
        for step in list {
            match self.walk_step(step, prev.as_deref())? {
                Progress::Done => prev = Some(step.id().to_string()),
                other => return Ok(other),
            }
        }
        Ok(Progress::Done)
    }

    pub(super) fn walk_step(
        &mut self,
        step: &'a Step,
        prev: Option<&str>,
    ) -> Result<Progress, EngineError> {
        let id = step_id(step);
        for _ in 0..MAX_MOVES_PER_STEP {
            // Matched by reference: a succeeded step's output is not copied on every
            // walk (the walk passes every step of the run on every tick).
            let moved = match self.state.step(&id) {
                // Paused, or queued for a concurrency slot: nothing new is scheduled or
                // started (steps in flight go on).
                None | Some(StepState::Scheduled { .. })
                    if self.state.paused().is_some() || self.state.awaiting_admission() =>
                {
                    return Ok(Progress::Blocked);
                }
                None if self.starts_unscheduled() => {
                    self.begin(step, 1, prev)?;
                    true
                }
                None => {
                    self.decide(RunCommand::ScheduleStep {
                        step_id: id.clone(),
                        due_at: self.now,
                        at: self.now,
                    })?;
                    true
                }
                Some(&StepState::Scheduled {
                    attempt,
                    due_at,
                    ref throttled,
                }) => {
                    let throttled = throttled.is_some();
                    if due_at > self.now {
                        self.wake(due_at);
                        return Ok(Progress::Blocked);
                    }
                    if self.budget_hold(&id)? {
                        return Ok(Progress::Blocked);
                    }
                    if throttled {
                        // Its token was reserved for now: take no other.
                        self.reserved_now
                            .insert(idempotency_key(self.run_id, &id, attempt));
                    }
                    self.begin(step, attempt, prev)?;
                    true
                }
                Some(&StepState::Running {
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
                    // Only a conditional's output says which branch it took (and
                    // looking costs a search of every other step's output, every tick).
                    let took_if_true = matches!(step.kind, StepKind::Conditional(_))
                        && output["branch"] == "if_true";
                    return self.after_success(step, took_if_true, prev);
                }
                Some(StepState::Skipped { .. }) => {
                    self.skip_unscheduled(&step.children())?;
                    return Ok(Progress::Done);
                }
                Some(&StepState::Failed {
                    attempt,
                    ref error,
                    is_final,
                }) => match self.after_failure(step, attempt, error.clone(), is_final)? {
                    Some(progress) => return Ok(progress),
                    None => true,
                },
            };
            debug_assert!(moved);
        }
        Err(EngineError::Stuck { step: id })
    }

    /// Start `attempt` of a due step (or skip it when its `if` is false).
    pub(super) fn begin(
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
                    self.start(step, attempt, None, None)?;
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
        match &step.kind {
            StepKind::Workflow(w) => self.start_child(step, w, attempt, timeout, prev),
            StepKind::Gate(_)
            | StepKind::Conditional(_)
            | StepKind::Parallel(_)
            | StepKind::Agent(_) => {
                self.start(step, attempt, timeout, None)?;
                self.on_start(step, attempt, prev)
            }
            _ => self.start_and_perform(step, attempt, timeout, prev),
        }
    }

    /// Record the start of `attempt`, with what it calls if it reaches outside awl.
    pub(super) fn start(
        &mut self,
        step: &Step,
        attempt: u32,
        timeout: Option<u64>,
        call: Option<StepCall>,
    ) -> Result<(), EngineError> {
        let id = step_id(step);
        let key = idempotency_key(self.run_id, &id, attempt);
        self.started_now.insert(key.clone());
        self.decide(RunCommand::StartStep {
            step_id: id,
            attempt,
            idempotency_key: key,
            timeout_at: timeout.map(|s| self.now + Duration::seconds(s as i64)),
            call,
            at: self.now,
        })
    }

    /// Start a sub-workflow step: its inputs rendered, the start recording them, the
    /// child run asked for.
    fn start_child(
        &mut self,
        step: &Step,
        w: &SubWorkflowStep,
        attempt: u32,
        timeout: Option<u64>,
        prev: Option<&str>,
    ) -> Result<(), EngineError> {
        let id = step_id(step);
        let scope = self.scope_for_step(prev, step);
        let inputs = match crate::expr::render_value(&Value::Object(w.inputs.clone()), &scope) {
            Ok(Value::Object(inputs)) => inputs,
            Ok(other) => {
                self.start(step, attempt, timeout, None)?;
                return self.fail_step(
                    &id,
                    attempt,
                    ErrorClass::Validation,
                    format!("inputs must render to a mapping, not {other}"),
                );
            }
            Err(e) => {
                self.start(step, attempt, timeout, None)?;
                return self.fail_step(&id, attempt, ErrorClass::Validation, e.to_string());
            }
        };
        let call = StepCall {
            tool: format!("workflow:{}", w.workflow),
            inputs: Value::Object(inputs.clone()),
        };
        self.start(step, attempt, timeout, Some(call))?;
        self.effects.push(Effect::StartChild {
            run_id: child_run_id(self.run_id, &id, attempt),
            step_id: id,
            attempt,
            workflow: w.workflow.clone(),
            inputs,
        });
        Ok(())
    }

    /// What a step that awl decides itself (a gate, a conditional, a parallel block,
    /// an agent's task) does as it starts; performed steps and sub-workflows start
    /// through [`Self::start_and_perform`] and [`Self::start_child`].
    pub(super) fn on_start(
        &mut self,
        step: &'a Step,
        attempt: u32,
        prev: Option<&str>,
    ) -> Result<(), EngineError> {
        let id = step_id(step);
        let scope = self.scope_for_step(prev, step);
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
                    output: std::sync::Arc::new(json!({
                        "branch": if value { "if_true" } else { "if_false" },
                        "condition": value,
                    })),
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
                            runner: a.runner,
                        });
                        Ok(())
                    }
                    Err(e) => self.fail_step(&id, attempt, ErrorClass::Validation, e),
                }
            }
            other => Err(EngineError::Misrouted {
                step: id,
                kind: other.type_name(),
            }),
        }
    }

    /// Start a performed step's attempt and emit its work: rendered first, so that
    /// its start records what it calls; a rendering problem fails the started attempt.
    pub(super) fn start_and_perform(
        &mut self,
        step: &Step,
        attempt: u32,
        timeout: Option<u64>,
        prev: Option<&str>,
    ) -> Result<(), EngineError> {
        let id = step_id(step);
        let scope = self.scope_for_step(prev, step);
        let fallback = self.recovery_before(&id, attempt).and_then(|r| match r {
            RecoveryAction::Fallback { tool } => Some(tool),
            _ => None,
        });
        let (work, call) = match render::performed(self.def, step, &scope, fallback.as_deref()) {
            Ok(performed) => performed,
            Err(e) => {
                self.start(step, attempt, timeout, None)?;
                return self.fail_step(&id, attempt, ErrorClass::Validation, e);
            }
        };
        self.start(step, attempt, timeout, call)?;
        let before = match self.recovery_before(&id, attempt) {
            Some(RecoveryAction::RefreshAuth) => self.refresh_hook(step, &id, attempt),
            _ => None,
        };
        let key = idempotency_key(self.run_id, &id, attempt);
        let rate = if self.def.rate_limits.is_empty() || self.reserved_now.contains(&key) {
            Vec::new()
        } else {
            let inputs = self.state.inputs().as_object().cloned().unwrap_or_default();
            match super::super::flow::rate_buckets(self.def, step, &inputs) {
                Ok(rate) => rate,
                Err(e) => return self.fail_step(&id, attempt, ErrorClass::Validation, e),
            }
        };
        let cost_usd = render::declared_cost(self.def, step, fallback.as_deref());
        self.effects.push(Effect::Perform {
            key,
            step_id: id,
            attempt,
            work,
            before,
            timeout_ms: self.timeout_seconds(step, attempt).map(|s| s * 1000),
            cost_usd,
            rate,
        });
        Ok(())
    }
}
