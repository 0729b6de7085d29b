//! Steps in flight: running attempts (timeouts, lost workers), gates waiting for a
//! person or their expiry, and parallel branches settling.

use super::*;

impl<'a> Walker<'a> {
    /// A running attempt: `Some(progress)` when it has to wait, `None` when its state
    /// changed and it must be looked at again.
    pub(super) fn running(
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
                    self.start_and_perform(step, attempt, timeout, prev)?;
                }
                Ok(Some(Progress::Blocked))
            }
        }
    }

    pub(super) fn running_gate(
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

    pub(super) fn settle_parallel(
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
}
