//! Archiving finished runs: the streams of runs that ended before a cutoff move out of
//! the hot log into the archive (`store::archive`), in batches. The read models keep
//! their rows (analytics, the timeline, the audit trail), a rebuild reads the archive
//! too, and a run's status and history are read from the archive once it moved.
//! A run's tasks (its agent steps' board tasks, found in the board's read model) move
//! with it once they are finished.
//!
//! On Postgres a pass first moves whole run partitions (`store::partitions`): every
//! partition whose period is over by the cutoff and whose runs all finished before it
//! leaves the hot log without a row being copied. What is left is moved run by run:
//! `awl archive` (and its REST and MCP forms) moves every run that finished before
//! the cutoff now, while the schedule of `awl serve --archive-older-than` leaves a
//! run whose partition's period is not over yet for its partition to take along, so
//! that in steady state retention moves partitions, not rows. A run so leaves the hot
//! log at most one period (30 days by default) after it passes the age.

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::domain::ids::RunId;
use crate::domain::run::{FINISHED_EVENT_TYPES, RunStatus};
use crate::domain::task::TaskStatus;
use crate::log::StreamType;
use crate::projections::queries::{self, BoardFilter, RunFilter};

use super::{Runs, RunsError};

/// Archiving on a schedule (`awl serve --archive-older-than`).
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Runs that finished longer ago than this are archived.
    pub older_than: chrono::Duration,
    /// How often a pass runs.
    pub every: std::time::Duration,
}

/// Runs moved per transaction.
const BATCH: usize = 500;

/// What an archive pass found, and moved unless it was a dry run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchivePass {
    /// Finished runs that ended before the cutoff.
    pub selected: Vec<RunId>,
    /// Runs moved (the run holding the log's head waits for the next pass).
    pub runs: usize,
    /// Events moved (the runs' and their tasks').
    pub events: u64,
    /// Finished tasks of those runs moved with them.
    pub tasks: usize,
    /// The hot log's run partitions moved whole (their runs are counted in `runs`).
    pub partitions: Vec<String>,
}

/// Which runs a pass moves row by row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowMoves {
    /// Every run that finished before the cutoff.
    All,
    /// Only the runs whose partition's period was over by the cutoff (the partition
    /// held an unfinished run): the others leave with their partition.
    OnlyFromPastPeriods,
}

impl Runs {
    /// [`Runs::archive_finished`] for the runs that finished more than `age` ago.
    pub async fn archive_older_than(
        &self,
        age: chrono::Duration,
        dry_run: bool,
    ) -> Result<(DateTime<Utc>, ArchivePass), RunsError> {
        let cutoff = self.now() - age;
        Ok((cutoff, self.archive_finished(cutoff, dry_run).await?))
    }

    /// Move the runs that finished before `cutoff` into the archive (with `dry_run`,
    /// only say which).
    pub async fn archive_finished(
        &self,
        cutoff: DateTime<Utc>,
        dry_run: bool,
    ) -> Result<ArchivePass, RunsError> {
        self.archive_pass(cutoff, dry_run, RowMoves::All).await
    }

    /// Retention's pass: whole partitions, and row by row only the runs of a
    /// partition whose period is over (see the module's doc).
    pub async fn archive_by_partition(
        &self,
        cutoff: DateTime<Utc>,
    ) -> Result<ArchivePass, RunsError> {
        self.archive_pass(cutoff, false, RowMoves::OnlyFromPastPeriods)
            .await
    }

    async fn archive_pass(
        &self,
        cutoff: DateTime<Utc>,
        dry_run: bool,
        row_moves: RowMoves,
    ) -> Result<ArchivePass, RunsError> {
        let filter = RunFilter {
            statuses: [
                RunStatus::Succeeded,
                RunStatus::Failed,
                RunStatus::Cancelled,
            ]
            .iter()
            .map(|s| s.as_str().to_string())
            .collect(),
            workflow: None,
            since: None,
            until: Some(cutoff),
            after: None,
            limit: 100_000,
        };
        let selected: Vec<RunId> = self
            .list(&filter)
            .await?
            .into_iter()
            .filter(|run| run.updated_at().is_some_and(|at| at < cutoff))
            .filter_map(|run| run.id())
            .collect();
        let mut pass = ArchivePass {
            selected,
            ..ArchivePass::default()
        };
        if dry_run {
            return Ok(pass);
        }
        let whole = self
            .store
            .archive_run_partitions(cutoff, self.now(), &FINISHED_EVENT_TYPES)
            .await?;
        pass.runs += whole.runs.len();
        pass.events += whole.events;
        pass.partitions = whole.partitions;
        for batch in whole.runs.chunks(BATCH) {
            self.move_finished_tasks(batch, &mut pass).await?;
        }
        let selected = std::mem::take(&mut pass.selected);
        for batch in selected.chunks(BATCH) {
            let mut ids: Vec<String> = batch.iter().map(RunId::to_string).collect();
            if row_moves == RowMoves::OnlyFromPastPeriods {
                let ends = self.store.run_period_ends(&ids).await?;
                ids.retain(|id| ends.get(id).is_none_or(|end| *end <= cutoff));
            }
            let moved = self
                .store
                .archive_streams(StreamType::Run, &ids, self.now())
                .await?;
            pass.runs += moved.streams.len();
            pass.events += moved.events;
            self.move_finished_tasks(&moved.streams, &mut pass).await?;
        }
        pass.selected = selected;
        Ok(pass)
    }

    /// Move the finished tasks of the runs `runs` (just archived) after them.
    async fn move_finished_tasks(
        &self,
        runs: &[String],
        pass: &mut ArchivePass,
    ) -> Result<(), RunsError> {
        let tasks = self.finished_tasks_of(runs).await?;
        let moved = self
            .store
            .archive_streams(StreamType::Task, &tasks, self.now())
            .await?;
        pass.tasks += moved.streams.len();
        pass.events += moved.events;
        Ok(())
    }

    /// Archive what `retention` says, every `retention.every`, until `stop` turns
    /// true. Several servers may do this at once: a stream is moved once whoever
    /// moves it, and a failed pass (the database away) is tried again next time.
    pub async fn archive_every(&self, retention: Retention, mut stop: watch::Receiver<bool>) {
        loop {
            let cutoff = self.now() - retention.older_than;
            match self.archive_by_partition(cutoff).await {
                Ok(pass) if pass.runs > 0 || !pass.partitions.is_empty() => tracing::info!(
                    runs = pass.runs,
                    partitions = pass.partitions.len(),
                    tasks = pass.tasks,
                    events = pass.events,
                    %cutoff,
                    "archived finished runs"
                ),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "archiving finished runs failed; trying again later")
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(retention.every) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
        }
    }

    /// The finished board tasks the runs `ids` queued (from the board's read model).
    async fn finished_tasks_of(&self, ids: &[String]) -> Result<Vec<String>, RunsError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let filter = BoardFilter {
            statuses: [
                TaskStatus::Completed,
                TaskStatus::Failed,
                TaskStatus::Cancelled,
            ]
            .iter()
            .map(|s| s.as_str().to_string())
            .collect(),
            runs: ids.to_vec(),
            limit: 1_000_000,
            ..BoardFilter::default()
        };
        let page = queries::board(&self.store, &filter).await?;
        Ok(page.rows.into_iter().map(|row| row.task_id).collect())
    }
}
