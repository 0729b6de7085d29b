//! Bulk actions over runs: select by a filter (workflow, status, start time, input
//! values), say how many a dry run would touch, then act on each in batches, recording
//! the selection and every batch in the action's own stream (`domain::bulk`), so a
//! process that dies mid-way is carried on from its last batch by anyone (`awl bulk
//! continue`). Each run's own aggregate decides whether it can be acted on; one that
//! cannot (it finished meanwhile, it is not paused) is skipped with the reason. A
//! batch of cancels, pauses or resumes is committed in one transaction (the executor's
//! way with many runs); retries and reruns from a step start new runs, one command
//! each, under run ids derived from the action's id and the origin's, so a batch done
//! again after a crash starts no run twice.
//!
//! Pausing a whole workflow is the workflow's own event (`workflow.paused`, after which
//! its new runs start paused) followed by a bulk action that holds its active runs;
//! resuming it is `workflow.resumed` followed by a bulk resume of the runs the pause
//! held (a run someone paused by hand stays paused).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use uuid::Uuid;

use crate::clock::Clock;
use crate::domain::Decide;
use crate::domain::bulk::{Bulk, BulkAction, BulkCommand, BulkError, BulkFilter, Skipped};
use crate::domain::ids::RunId;
use crate::domain::run::{Run, RunCommand};
use crate::log::{Metadata, StreamRef, StreamType};
use crate::projections::queries::RunFilter;
use crate::runs::{Runs, RunsError};
use crate::store::command::{Command, CommandError};
use crate::store::{EventStore, StoreError, domain_io};

/// Run ids recorded per `bulk.selected` event.
const SELECTED_PER_EVENT: usize = 1_000;

/// Runs of one batch acted on at the same time.
const CONCURRENT_RUNS: usize = 16;

/// Why a bulk action could not be planned or carried on (a run that cannot be acted
/// on is not an error: it is skipped).
#[derive(Debug, thiserror::Error)]
pub enum BulkServiceError {
    #[error("no bulk action {0}")]
    NotFound(Uuid),
    #[error(transparent)]
    Refused(#[from] BulkError),
    #[error("{0} kept changing; another process may be carrying it out")]
    Busy(StreamRef),
    #[error(transparent)]
    Runs(#[from] RunsError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl crate::error::Classified for BulkServiceError {
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::Refused(BulkError::Invalid { .. }) => ErrorKind::Invalid,
            Self::Refused(_) => ErrorKind::Conflict,
            Self::Busy(_) => ErrorKind::Unavailable,
            Self::Runs(e) => e.kind(),
            Self::Store(e) => e.kind(),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) => "bulk_not_found",
            Self::Refused(BulkError::Invalid { .. }) => "invalid_request",
            Self::Refused(_) => "illegal_transition",
            Self::Busy(_) => "busy",
            Self::Runs(e) => e.code(),
            Self::Store(e) => e.code(),
        }
    }
}

impl From<CommandError<BulkError>> for BulkServiceError {
    fn from(e: CommandError<BulkError>) -> Self {
        match e {
            CommandError::Rejected(e) => Self::Refused(e),
            CommandError::Store(e) => Self::Store(e),
            CommandError::Busy(stream) => Self::Busy(stream),
        }
    }
}

/// The bulk-action service. Cheap to clone.
#[derive(Clone)]
pub struct BulkActions {
    store: EventStore,
    runs: Runs,
    clock: Clock,
}

fn stream(id: Uuid) -> StreamRef {
    StreamRef::new(StreamType::Bulk, id.to_string())
}

/// The run command a bulk action issues to each run in one commit; `None` for a retry
/// or a rerun, which start new runs instead.
fn run_command(
    action: BulkAction,
    by: &str,
    reason: &str,
    at: DateTime<Utc>,
) -> Option<RunCommand> {
    let (by, reason) = (by.to_string(), reason.to_string());
    match action {
        BulkAction::Cancel => Some(RunCommand::Cancel { by, reason, at }),
        BulkAction::Pause | BulkAction::Hold => Some(RunCommand::Pause {
            by,
            reason,
            at,
            workflow: action == BulkAction::Hold,
        }),
        BulkAction::Resume => Some(RunCommand::Resume { by, at }),
        BulkAction::Retry | BulkAction::Rerun => None,
    }
}

/// The id of the run a bulk retry or rerun `bulk_id` starts from `origin`: the same
/// each time the batch is done, so a batch done again after a crash finds the run it
/// started.
pub fn derived_run_id(bulk_id: Uuid, origin: RunId) -> RunId {
    RunId::from_uuid(Uuid::new_v5(&bulk_id, origin.as_uuid().as_bytes()))
}

/// A run folded from its stream, with the stream's version.
type Folded = Result<(Run, i64), StoreError>;

fn run_stream(id: RunId) -> StreamRef {
    StreamRef::new(StreamType::Run, id.to_string())
}

impl BulkActions {
    pub fn new(store: EventStore, clock: Clock) -> Self {
        Self {
            runs: Runs::new(store.clone(), Arc::clone(&clock)),
            store,
            clock,
        }
    }

    /// The runs `filter` selects now, newest first (what a dry run reports).
    pub async fn select(&self, filter: &BulkFilter) -> Result<Vec<RunId>, BulkServiceError> {
        let query = RunFilter {
            statuses: filter.statuses.clone(),
            workflow: filter.workflow.clone(),
            since: filter.since,
            until: filter.until,
            after: None,
            limit: 100_000,
        };
        let runs = self.runs.list(&query).await?;
        Ok(runs
            .into_iter()
            .filter(|run| {
                filter
                    .inputs
                    .iter()
                    .all(|(name, wanted)| run.inputs().get(name) == Some(wanted))
                    && (filter.run_ids.is_empty()
                        || run.id().is_some_and(|id| filter.run_ids.contains(&id)))
            })
            .filter_map(|run| run.id())
            .collect())
    }

    /// Plan `action` over what `filter` selects, recording the selection.
    pub async fn plan(
        &self,
        action: BulkAction,
        from_step: Option<String>,
        filter: BulkFilter,
        reason: &str,
        by: &str,
    ) -> Result<Bulk, BulkServiceError> {
        crate::domain::bulk::check_step(action, from_step.as_deref())?;
        let selected = self.select(&filter).await?;
        let bulk_id = Uuid::now_v7();
        let now = (self.clock)();
        let plan = BulkCommand::Plan {
            bulk_id,
            action,
            from_step,
            filter,
            reason: reason.to_string(),
            total: selected.len() as u64,
            by: by.to_string(),
            at: now,
        };
        let done = Command::new(&self.store, &stream(bulk_id), Metadata::actor(by))
            .run(|state: &Bulk| {
                let mut scratch = state.clone();
                let mut events = Vec::new();
                let mut next = |command: BulkCommand| -> Result<(), BulkError> {
                    for e in scratch.decide(command)? {
                        cqrs_es::Aggregate::apply(&mut scratch, e.clone());
                        events.push(e);
                    }
                    Ok(())
                };
                next(plan.clone())?;
                for chunk in selected.chunks(SELECTED_PER_EVENT) {
                    next(BulkCommand::Select {
                        runs: chunk.to_vec(),
                        at: now,
                    })?;
                }
                Ok(events)
            })
            .await?;
        Ok(done.state)
    }

    /// Bulk actions in the log that were not carried to their end (a process stopped
    /// mid-way): `awl serve` carries them on when it starts.
    pub async fn unfinished(&self) -> Result<Vec<Uuid>, BulkServiceError> {
        // Through the streams' index: reading the log for `bulk.planned` paged
        // through all of it at every start (163 reads over 1.6 million events).
        let ids: Vec<Uuid> = self
            .store
            .stream_ids(StreamType::Bulk, Some("bulk.planned"))
            .await?
            .iter()
            .filter_map(|id| id.parse::<Uuid>().ok())
            .collect();
        let mut open = Vec::new();
        for id in ids {
            if self.get(id).await?.status() != Some(crate::domain::bulk::BulkStatus::Completed) {
                open.push(id);
            }
        }
        Ok(open)
    }

    /// Carry on every unfinished bulk action, one after another, on behalf of whoever
    /// planned each.
    pub async fn carry_on_unfinished(&self, batch: usize) {
        let open = match self.unfinished().await {
            Ok(open) => open,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for unfinished bulk actions");
                return;
            }
        };
        for id in open {
            let by = match self.get(id).await {
                Ok(bulk) => bulk.by().to_string(),
                Err(_) => continue,
            };
            tracing::info!(bulk = %id, "carrying on a bulk action");
            if let Err(e) = self.carry_out(id, batch, &by, &|_| {}).await {
                tracing::warn!(bulk = %id, error = %e, "a bulk action stopped; `awl bulk continue` carries it on");
            }
        }
    }

    /// Plan `action` and carry it out in the background (a stop mid-way is carried on
    /// at the next start of `awl serve`, or by `awl bulk continue`).
    pub async fn start(
        &self,
        action: BulkAction,
        from_step: Option<String>,
        filter: BulkFilter,
        reason: &str,
        by: &str,
    ) -> Result<Bulk, BulkServiceError> {
        let planned = self.plan(action, from_step, filter, reason, by).await?;
        self.carry_out_in_background(&planned, by);
        Ok(planned)
    }

    /// Carry a planned bulk action out in a task of its own (a stop mid-way is carried
    /// on at the next start of `awl serve`, or by `awl bulk continue`).
    pub fn carry_out_in_background(&self, planned: &Bulk, by: &str) {
        if let Some(id) = planned.id() {
            let (bulk, by) = (self.clone(), by.to_string());
            tokio::spawn(async move {
                if let Err(e) = bulk.carry_out(id, 200, &by, &|_| {}).await {
                    tracing::warn!(bulk = %id, error = %e, "a bulk action stopped; it is carried on at the next start");
                }
            });
        }
    }

    /// Pause the whole workflow `name`: record it, then plan a bulk action that holds
    /// every active run of it (the caller carries it out; after a crash it is carried
    /// on like any bulk action).
    pub async fn pause_workflow(
        &self,
        name: &str,
        reason: &str,
        by: &str,
    ) -> Result<Bulk, BulkServiceError> {
        let now = (self.clock)();
        crate::definitions::catalog::pause(&self.store, name, by, reason, now)
            .await
            .map_err(RunsError::from)?;
        let filter = BulkFilter {
            workflow: Some(name.to_string()),
            statuses: vec!["RUNNING".into(), "WAITING".into()],
            ..BulkFilter::default()
        };
        let reason = format!("workflow {name} paused: {reason}");
        self.plan(BulkAction::Hold, None, filter, &reason, by).await
    }

    /// Resume the paused workflow `name`: record it, then plan a bulk resume of the
    /// runs its pause held (none when it held no run); the caller carries it out.
    pub async fn resume_workflow(
        &self,
        name: &str,
        by: &str,
    ) -> Result<Option<Bulk>, BulkServiceError> {
        let now = (self.clock)();
        crate::definitions::catalog::resume(&self.store, name, by, now)
            .await
            .map_err(RunsError::from)?;
        let paused = RunFilter {
            statuses: vec!["PAUSED".into()],
            workflow: Some(name.to_string()),
            since: None,
            until: None,
            after: None,
            limit: 100_000,
        };
        let held: Vec<RunId> = self
            .runs
            .list(&paused)
            .await?
            .into_iter()
            .filter(|run| run.paused().is_some_and(|p| p.workflow))
            .filter_map(|run| run.id())
            .collect();
        if held.is_empty() {
            // An empty list of runs would select every paused run of the workflow.
            return Ok(None);
        }
        let filter = BulkFilter {
            workflow: Some(name.to_string()),
            statuses: vec!["PAUSED".into()],
            run_ids: held,
            ..BulkFilter::default()
        };
        let reason = format!("workflow {name} resumed");
        Ok(Some(
            self.plan(BulkAction::Resume, None, filter, &reason, by)
                .await?,
        ))
    }

    /// A bulk action as its stream stands.
    pub async fn get(&self, bulk_id: Uuid) -> Result<Bulk, BulkServiceError> {
        let (bulk, version) = domain_io::load::<Bulk>(&self.store, &stream(bulk_id)).await?;
        if version == 0 {
            return Err(BulkServiceError::NotFound(bulk_id));
        }
        Ok(bulk)
    }

    /// Carry a bulk action out from where its stream stands, `batch` runs per recorded
    /// batch, calling `progress` after each; returns it completed.
    pub async fn carry_out(
        &self,
        bulk_id: Uuid,
        batch: usize,
        by: &str,
        progress: &(dyn Fn(&Bulk) + Sync),
    ) -> Result<Bulk, BulkServiceError> {
        let mut bulk = self.get(bulk_id).await?;
        let action = bulk.action().ok_or(BulkServiceError::NotFound(bulk_id))?;
        let reason = bulk.reason().to_string();
        loop {
            let todo: Vec<RunId> = bulk
                .remaining()
                .iter()
                .take(batch.max(1))
                .copied()
                .collect();
            let now = (self.clock)();
            let command = if todo.is_empty() {
                if bulk.status() == Some(crate::domain::bulk::BulkStatus::Completed) {
                    return Ok(bulk);
                }
                BulkCommand::Complete { at: now }
            } else {
                let (mut acted, mut skipped) = (0, Vec::new());
                let results = match run_command(action, by, &reason, now) {
                    // A retry or a rerun starts a new run per run: one command each.
                    None => self.act_each(&bulk, &todo, by).await,
                    Some(command) => {
                        self.act_in_one_commit(&bulk, action, &command, &todo, by)
                            .await?
                    }
                };
                for (run, result) in results {
                    let run = &run;
                    match result {
                        Ok(()) => acted += 1,
                        Err(RunsError::Store(e)) => return Err(e.into()),
                        Err(e @ RunsError::Busy(_)) => return Err(e.into()),
                        Err(e) => skipped.push(Skipped {
                            run_id: *run,
                            reason: e.to_string(),
                        }),
                    }
                }
                BulkCommand::Progress {
                    through: bulk.through() + todo.len() as u64,
                    acted,
                    skipped,
                    at: now,
                }
            };
            let done = Command::new(&self.store, &stream(bulk_id), Metadata::actor(by))
                .run(|state: &Bulk| state.decide(command.clone()))
                .await?;
            bulk = done.state;
            progress(&bulk);
        }
    }

    /// Act on each run with its own command, a few at a time; results in order.
    async fn act_each(
        &self,
        bulk: &Bulk,
        runs: &[RunId],
        by: &str,
    ) -> Vec<(RunId, Result<(), RunsError>)> {
        futures_util::stream::iter(runs.iter().copied())
            .map(|run| async move { (run, self.act(bulk, run, by).await) })
            .buffered(CONCURRENT_RUNS)
            .collect()
            .await
    }

    /// Cancel, pause or resume a batch in one transaction, as the executor commits many
    /// runs' decisions: each run read and decided by its own aggregate, all appended
    /// (each at the version it was decided on) with their wake-ups in one commit. A
    /// run written meanwhile (a worker's commit won) is acted on again with its own
    /// command; one that refuses is skipped with its reason. Results in order.
    async fn act_in_one_commit(
        &self,
        bulk: &Bulk,
        action: BulkAction,
        command: &RunCommand,
        runs: &[RunId],
        by: &str,
    ) -> Result<Vec<(RunId, Result<(), RunsError>)>, BulkServiceError> {
        let now = (self.clock)();
        let cancel = action == BulkAction::Cancel;
        let pause = matches!(action, BulkAction::Pause | BulkAction::Hold);
        // Every run of the batch read in one query.
        let ids: Vec<String> = runs.iter().map(RunId::to_string).collect();
        let mut streams = self.store.read_streams(StreamType::Run, &ids).await?;
        let folded: Vec<(RunId, Folded)> = runs
            .iter()
            .map(|run| {
                let events = streams.remove(&run.to_string()).unwrap_or_default();
                (*run, domain_io::fold::<Run>(&events))
            })
            .collect();
        let actor = Metadata::actor(by);
        let mut results: Vec<(RunId, Result<(), RunsError>)> = Vec::with_capacity(runs.len());
        let mut requests = Vec::new();
        // For each request: its result slot, the runs to wake, and the finished workflow.
        let mut planned: Vec<(usize, Vec<String>, Option<String>)> = Vec::new();
        for (run_id, folded) in folded {
            let (run, version) = folded?;
            if version == 0 {
                results.push((run_id, Err(RunsError::RunNotFound(run_id))));
                continue;
            }
            match run.decide(command.clone()) {
                Ok(events) => {
                    requests.push(domain_io::append_request(
                        &run_stream(run_id),
                        version,
                        &events,
                        &actor,
                    )?);
                    let mut wake = Vec::new();
                    if !pause {
                        wake.push(run_id.to_string());
                    }
                    let mut finished = None;
                    if cancel {
                        wake.extend(run.parent().map(|p| p.run_id.to_string()));
                        finished = run.workflow().map(|w| w.to_string());
                    }
                    planned.push((results.len(), wake, finished));
                    results.push((run_id, Ok(())));
                }
                Err(refused) => results.push((run_id, Err(RunsError::Run(refused)))),
            }
        }
        let mut tx = self.store.begin().await?;
        let appended = tx.append_each(&requests).await?;
        let mut again = Vec::new();
        let mut finished = Vec::new();
        for ((slot, wake, workflow), result) in planned.into_iter().zip(appended) {
            match result {
                Ok(_) => {
                    for run in wake {
                        tx.wake_run(&run, now).await?;
                    }
                    finished.extend(workflow);
                }
                Err(StoreError::Conflict { .. }) => again.push(slot),
                Err(e) => return Err(e.into()),
            }
        }
        tx.commit().await?;
        for workflow in finished {
            crate::telemetry::run_finished(&workflow, "cancelled");
        }
        // Runs another writer touched meanwhile: the runs service's own command,
        // which reloads and decides again.
        for slot in again {
            let run = results[slot].0;
            results[slot].1 = self.act(bulk, run, by).await;
        }
        Ok(results)
    }

    /// Act on one run with its own command.
    async fn act(&self, bulk: &Bulk, run: RunId, by: &str) -> Result<(), RunsError> {
        let reason = bulk.reason();
        let Some((bulk_id, action)) = bulk.id().zip(bulk.action()) else {
            return Err(RunsError::Invalid("the bulk action is not planned".into()));
        };
        let derived = derived_run_id(bulk_id, run);
        match action {
            BulkAction::Cancel => self.runs.cancel(run, by, reason).await.map(|_| ()),
            BulkAction::Pause => self.runs.pause(run, by, reason).await.map(|_| ()),
            BulkAction::Hold => self.runs.hold(run, by, reason).await.map(|_| ()),
            BulkAction::Resume => self.runs.resume(run, by).await.map(|_| ()),
            BulkAction::Retry => self.runs.retry_as(derived, run, by).await.map(|_| ()),
            BulkAction::Rerun => {
                let step = bulk.from_step().unwrap_or_default();
                self.runs
                    .rerun_as(derived, run, step, None, by)
                    .await
                    .map(|_| ())
            }
        }
    }
}
