//! Rerunning a finished run from one of its steps, and forking it there with changed
//! inputs: a new run of the same workflow version that keeps what the origin's steps
//! before that step did (their outputs, carried as `run.step_carried`, not performed
//! again) and carries on from the step. The new run's start names its origin; the
//! origin records `run.derived`, so both timelines show the link (an archived origin's
//! history is closed: the link is then on the new run only).
//!
//! The step must be a top-level step of the workflow: the steps before it in the file
//! (with everything nested in them) are carried, and each must have succeeded or been
//! skipped in the origin. Carried outputs are copied as the log holds them (secrets
//! masked, personal data sealed under the same subject's key). Carried steps are not
//! compensated by the new run: their effects belong to the origin.

use serde_json::{Map, Value};

use crate::definitions::Registered;
use crate::domain::Decide;
use crate::domain::ids::{RunId, StepId};
use crate::domain::run::{DerivedKind, Run, RunCommand, RunOrigin, StepState};
use crate::log::Metadata;
use crate::store::command::Command;
use crate::store::domain_io;
use crate::workflow::inputs;
use crate::workflow::model::{Step, Workflow};

use super::start::{Lineage, StartOptions, Started};
use super::{Runs, RunsError, run_stream};

impl Runs {
    /// Start a run of `origin`'s workflow version from `from_step`, keeping the steps
    /// before it: with the origin's inputs (a rerun), or with `changes` applied to
    /// them (a fork).
    pub async fn rerun(
        &self,
        origin: RunId,
        from_step: &str,
        changes: Option<Map<String, Value>>,
        by: &str,
    ) -> Result<Started, RunsError> {
        self.rerun_as(RunId::new(), origin, from_step, changes, by)
            .await
    }

    /// [`Runs::rerun`] as the new run `run_id`, chosen by the caller so that doing it
    /// again is harmless: when `run_id` was already started from `origin` (an attempt
    /// that stopped before it was recorded everywhere, as a bulk rerun carried on after
    /// a crash), nothing new is started and the origin's side of the link is made sure
    /// of.
    pub async fn rerun_as(
        &self,
        run_id: RunId,
        origin: RunId,
        from_step: &str,
        changes: Option<Map<String, Value>>,
        by: &str,
    ) -> Result<Started, RunsError> {
        if let Some((started, link)) = self.derived_already(run_id, origin).await? {
            self.note_derived(origin, run_id, link, by).await?;
            return Ok(started);
        }
        let logged = self.store.read_current(&run_stream(origin)).await?;
        let (recorded, _) = domain_io::fold::<Run>(&logged)?;
        let status = recorded.status().ok_or(RunsError::RunNotFound(origin))?;
        if !status.is_terminal() {
            return Err(RunsError::Invalid(format!(
                "run {origin} is {status}: only a finished run is rerun or forked (cancel it first)"
            )));
        }
        let (opened, _) = self.get_plain(origin).await?;
        let name = recorded
            .workflow()
            .map(|w| w.to_string())
            .unwrap_or_default();
        let version = recorded.workflow_version().to_string();
        let workflow = self.definitions.get(&self.store, &name, &version).await?;
        let step = StepId::try_from(from_step)
            .map_err(|e| RunsError::Invalid(format!("step {from_step:?}: {e}")))?;
        let before = steps_before(&workflow, &step)?;
        let now = self.now();
        let carried = before
            .iter()
            .map(|id| carry(&recorded, origin, id, now))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .flatten()
            .collect();
        let kind = if changes.is_some() {
            DerivedKind::Fork
        } else {
            DerivedKind::Rerun
        };
        let mut given = match opened.inputs() {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        given.extend(changes.unwrap_or_default());
        let resolved =
            inputs::resolve(&workflow.inputs, given, inputs::Given::Json).map_err(|problems| {
                RunsError::Inputs(
                    problems
                        .iter()
                        .map(|p| p.message.clone())
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            })?;
        let registered = Registered {
            name,
            version,
            content_hash: String::new(),
            workflow,
        };
        let link = RunOrigin {
            run_id: origin,
            from_step: step,
            kind,
        };
        let lineage = Lineage {
            origin: link.clone(),
            carried,
        };
        let started = self
            .start_registered(
                &registered,
                resolved,
                run_id,
                by,
                None,
                StartOptions {
                    lineage: Some(lineage),
                    // A rerun or fork keeps its origin's place among runs.
                    priority: Some(recorded.flow().priority),
                    // Whose run it is: the person asking, as for any start.
                    scope: None,
                },
            )
            .await?;
        self.note_derived(origin, run_id, link, by).await?;
        Ok(started)
    }

    /// The run `run_id` if it was already started from `origin`, with its link; an
    /// error if it is a run of something else.
    async fn derived_already(
        &self,
        run_id: RunId,
        origin: RunId,
    ) -> Result<Option<(Started, RunOrigin)>, RunsError> {
        let logged = self.store.read_current(&run_stream(run_id)).await?;
        if logged.is_empty() {
            return Ok(None);
        }
        let (run, _) = domain_io::fold::<Run>(&logged)?;
        match run.origin() {
            Some(link) if link.run_id == origin => Ok(Some((
                Started {
                    run_id,
                    workflow: run.workflow().map(|w| w.to_string()).unwrap_or_default(),
                    version: run.workflow_version().to_string(),
                    created: false,
                },
                link.clone(),
            ))),
            _ => Err(RunsError::Invalid(format!(
                "run {run_id} exists and was not made from run {origin}"
            ))),
        }
    }

    /// The origin's side of the link (a finished run still takes this one event, once,
    /// unless it was archived: its history is closed, and the link stays on the new
    /// run's start).
    async fn note_derived(
        &self,
        origin: RunId,
        run_id: RunId,
        link: RunOrigin,
        by: &str,
    ) -> Result<(), RunsError> {
        if self.store.is_archived(&run_stream(origin)).await? {
            return Ok(());
        }
        let now = self.now();
        Command::new(&self.store, &run_stream(origin), Metadata::actor(by))
            .run(|run: &Run| {
                run.decide(RunCommand::NoteDerived {
                    run_id,
                    kind: link.kind,
                    from_step: link.from_step.clone(),
                    by: by.to_string(),
                    at: now,
                })
            })
            .await?;
        Ok(())
    }

    /// A run folded with every sealed value opened (as the executor sees it).
    async fn get_plain(&self, run_id: RunId) -> Result<(Run, i64), RunsError> {
        let mut events = self.store.read_current(&run_stream(run_id)).await?;
        self.store
            .reveal_events(&mut events, crate::vault::Reveal::Plain)
            .await?;
        Ok(domain_io::fold::<Run>(&events)?)
    }
}

/// Every step id nested in the top-level steps before `from` (in the file's order).
fn steps_before(workflow: &Workflow, from: &StepId) -> Result<Vec<StepId>, RunsError> {
    let Some(index) = workflow.steps.iter().position(|s| s.id() == from.as_str()) else {
        let top: Vec<&str> = workflow.steps.iter().map(|s| s.id()).collect();
        return Err(RunsError::Invalid(format!(
            "`{from}` is not a top-level step of {} {}: rerun from one of {}",
            workflow.name,
            workflow.version,
            top.join(", ")
        )));
    };
    let mut ids = Vec::new();
    for step in &workflow.steps[..index] {
        collect(step, &mut ids);
    }
    Ok(ids)
}

fn collect(step: &Step, out: &mut Vec<StepId>) {
    if let Ok(id) = StepId::try_from(step.id()) {
        out.push(id);
    }
    for child in step.children() {
        collect(child, out);
    }
}

/// The carry of one step as the origin ended it: its output, or its skip. A nested
/// step the origin never reached (a branch not taken that it did not mark) has
/// nothing to carry.
fn carry(
    origin: &Run,
    origin_id: RunId,
    step: &StepId,
    at: chrono::DateTime<chrono::Utc>,
) -> Result<Option<RunCommand>, RunsError> {
    let output = match origin.step(step) {
        Some(StepState::Succeeded { output, .. }) => Some(Value::clone(output)),
        Some(StepState::Skipped { .. }) => None,
        None => return Ok(None),
        Some(other) => {
            return Err(RunsError::Invalid(format!(
                "step `{step}` did not succeed in run {origin_id} (it is {}): rerun from `{step}` \
                 or a step before it",
                other.phase().as_str()
            )));
        }
    };
    Ok(Some(RunCommand::CarryStep {
        step_id: step.clone(),
        from_run: origin_id,
        output,
        at,
    }))
}

impl Runs {
    /// Rerun a failed (or cancelled) run from the top-level step it stopped at: the
    /// first one that did not succeed or get skipped.
    pub async fn retry(&self, origin: RunId, by: &str) -> Result<Started, RunsError> {
        self.retry_as(RunId::new(), origin, by).await
    }

    /// [`Runs::retry`] as the new run `run_id` (see [`Runs::rerun_as`]).
    pub async fn retry_as(
        &self,
        run_id: RunId,
        origin: RunId,
        by: &str,
    ) -> Result<Started, RunsError> {
        let logged = self.store.read_current(&run_stream(origin)).await?;
        let (recorded, _) = domain_io::fold::<Run>(&logged)?;
        if recorded.status().is_none() {
            return Err(RunsError::RunNotFound(origin));
        }
        let name = recorded
            .workflow()
            .map(|w| w.to_string())
            .unwrap_or_default();
        let workflow = self
            .definitions
            .get(&self.store, &name, recorded.workflow_version())
            .await?;
        let stopped = workflow.steps.iter().find(|s| {
            !matches!(
                StepId::try_from(s.id())
                    .ok()
                    .and_then(|id| recorded.step(&id).cloned()),
                Some(StepState::Succeeded { .. } | StepState::Skipped { .. })
            )
        });
        let Some(step) = stopped else {
            return Err(RunsError::Invalid(format!(
                "run {origin}: every step succeeded, nothing to retry"
            )));
        };
        self.rerun_as(run_id, origin, step.id(), None, by).await
    }
}
