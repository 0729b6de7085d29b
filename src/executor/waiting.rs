//! What a held run's waiting steps depend on: the tasks of its `agent` steps and the
//! child runs of its `workflow` steps. When one has ended, its result becomes the
//! step's outcome, exactly as a runner's would.

use serde_json::Value;

use crate::domain::run::{ErrorClass, Run, RunOutcome, StepState};
use crate::domain::task::{Task, TaskEnding};
use crate::engine::{self, Done, Failure, StepOutcome};
use crate::log::StreamType;
use crate::store::domain_io;
use crate::workflow::model::StepKind;

use super::ExecError;
use super::perform;
use super::worker::{Held, Worker};

impl Worker {
    /// Outcomes of waiting `agent` and `workflow` steps whose task or child run ended
    /// (the tasks and the child runs each read in one query).
    pub(super) async fn external_outcomes(&self, h: &Held) -> Result<Vec<StepOutcome>, ExecError> {
        let Some(id) = h.run.id() else {
            return Ok(Vec::new());
        };
        let mut tasks = Vec::new();
        let mut children = Vec::new();
        for (step_id, state) in h.run.running_steps() {
            let StepState::Running { attempt, .. } = state else {
                continue;
            };
            match engine::find_step(&h.definition, step_id.as_str()).map(|s| &s.kind) {
                Some(StepKind::Agent(_)) => tasks.push((
                    step_id.clone(),
                    *attempt,
                    engine::task_id(id, step_id, *attempt).to_string(),
                )),
                Some(StepKind::Workflow(_)) => children.push((
                    step_id.clone(),
                    *attempt,
                    engine::child_run_id(id, step_id, *attempt).to_string(),
                )),
                _ => {}
            }
        }
        let mut found = Vec::new();
        if !tasks.is_empty() {
            let ids: Vec<String> = tasks.iter().map(|(_, _, t)| t.clone()).collect();
            let streams = self.store.read_streams(StreamType::Task, &ids).await?;
            for (step_id, attempt, task_id) in tasks {
                let events = streams.get(&task_id).map(Vec::as_slice).unwrap_or_default();
                let (task, _) = domain_io::fold::<Task>(events)?;
                if let Some(result) = task_result(&task) {
                    found.push(StepOutcome {
                        step_id,
                        attempt,
                        result,
                    });
                }
            }
        }
        if !children.is_empty() {
            let ids: Vec<String> = children.iter().map(|(_, _, c)| c.clone()).collect();
            let streams = self.store.read_streams(StreamType::Run, &ids).await?;
            for (step_id, attempt, child_id) in children {
                let events = streams
                    .get(&child_id)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let (child, _) = domain_io::fold::<Run>(events)?;
                if let Some(result) = child_result(&child) {
                    found.push(StepOutcome {
                        step_id,
                        attempt,
                        result,
                    });
                }
            }
        }
        Ok(found)
    }
}

/// How an agent step's task ended, if it did.
fn task_result(task: &Task) -> Option<Result<Done, Failure>> {
    match task.ending()? {
        TaskEnding::Completed { .. } => {
            let output = task.result().cloned().unwrap_or(Value::Null);
            let (cost_usd, tokens) = perform::reported_cost(&output);
            Some(Ok(Done {
                output: std::sync::Arc::new(output),
                cost_usd,
                tokens,
            }))
        }
        TaskEnding::Failed {
            reason,
            error_class,
            by,
            ..
        } => Some(Err(Failure {
            class: error_class
                .as_deref()
                .and_then(|c| c.parse().ok())
                .unwrap_or(ErrorClass::Unknown),
            message: format!("the task failed ({by}): {reason}"),
        })),
        TaskEnding::Cancelled { by, reason, .. } => Some(Err(Failure {
            class: ErrorClass::Validation,
            message: format!("the task was cancelled by {by}: {reason}"),
        })),
    }
}

/// How a child run ended, if it did.
fn child_result(child: &Run) -> Option<Result<Done, Failure>> {
    match child.outcome()? {
        RunOutcome::Succeeded { outputs, .. } => Some(Ok(Done {
            output: std::sync::Arc::new(outputs.clone()),
            cost_usd: (child.total_cost_usd() > 0.0).then(|| child.total_cost_usd()),
            tokens: (child.total_tokens() > 0).then(|| child.total_tokens()),
        })),
        RunOutcome::Failed {
            reason,
            error_class,
            ..
        } => Some(Err(Failure {
            class: error_class.unwrap_or(ErrorClass::Dependency),
            message: format!(
                "the sub-workflow run {} failed: {reason}",
                child.id().unwrap_or_default()
            ),
        })),
        RunOutcome::Cancelled { by, reason, .. } => Some(Err(Failure {
            class: ErrorClass::Validation,
            message: format!("the sub-workflow run was cancelled by {by}: {reason}"),
        })),
    }
}
