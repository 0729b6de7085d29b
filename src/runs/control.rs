//! Pausing and resuming a run: an operator's hold on a run in flight.
//!
//! A pause is an event on the run's stream (`run.paused`, with who and why); while it
//! holds, the engine schedules and starts no step, and steps already in flight finish
//! and have their outcomes recorded. Resuming (`run.resumed`) wakes the run so a worker
//! picks it up at once. Both are decided by the run aggregate, so a run that ended, or
//! one already paused, refuses with the state it is in.

use crate::domain::Decide;
use crate::domain::ids::RunId;
use crate::domain::run::{Run, RunCommand};
use crate::log::Metadata;
use crate::store::command::Command;

use super::{Runs, RunsError, run_stream};

impl Runs {
    /// Pause a run: no step starts until it is resumed.
    pub async fn pause(&self, run_id: RunId, by: &str, reason: &str) -> Result<Run, RunsError> {
        let now = self.now();
        self.act(run_id, by, false, |_| RunCommand::Pause {
            by: by.to_string(),
            reason: reason.to_string(),
            at: now,
            workflow: false,
        })
        .await
    }

    /// Pause a run because its whole workflow was paused: resuming the workflow
    /// resumes it.
    pub async fn hold(&self, run_id: RunId, by: &str, reason: &str) -> Result<Run, RunsError> {
        let now = self.now();
        self.act(run_id, by, false, |_| RunCommand::Pause {
            by: by.to_string(),
            reason: reason.to_string(),
            at: now,
            workflow: true,
        })
        .await
    }

    /// Resume a paused run; it is woken so a worker takes it up at once.
    pub async fn resume(&self, run_id: RunId, by: &str) -> Result<Run, RunsError> {
        let now = self.now();
        self.act(run_id, by, true, |_| RunCommand::Resume {
            by: by.to_string(),
            at: now,
        })
        .await
    }

    /// One operator command on a run, by `by`, waking it when `wake`.
    async fn act(
        &self,
        run_id: RunId,
        by: &str,
        wake: bool,
        command: impl Fn(&Run) -> RunCommand,
    ) -> Result<Run, RunsError> {
        let now = self.now();
        let done = Command::new(&self.store, &run_stream(run_id), Metadata::actor(by))
            .wakes(now, move |_: &Run| {
                if wake {
                    vec![run_id.to_string()]
                } else {
                    Vec::new()
                }
            })
            .run(|run| {
                if run.status().is_none() {
                    return Err(RunsError::RunNotFound(run_id));
                }
                Ok(run.decide(command(run))?)
            })
            .await?;
        Ok(done.state)
    }
}
