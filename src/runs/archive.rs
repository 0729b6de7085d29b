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
//!
//! Retention on Postgres takes its row-by-row runs from the summaries of the past
//! periods' partitions, so what it reads grows with the hot log, not with every run
//! ever archived. Otherwise (`awl archive`, and retention on SQLite) the finished
//! runs' ids are read from the runs view a page at a time by id and kept to those
//! the hot log still holds: a run archived long ago costs an id and an index probe,
//! not a read of its state, and no number of them hides the runs behind.

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::domain::ids::RunId;
use crate::domain::run::FINISHED_EVENT_TYPES;
use crate::domain::task::TaskStatus;
use crate::log::StreamType;
use crate::projections::queries::{self, BoardFilter};

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

/// Finished runs read from the runs view per query.
const PAGE: usize = 5_000;

/// What an archive pass found, and moved unless it was a dry run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchivePass {
    /// Finished runs that ended before the cutoff and were still in the hot log.
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
    /// Only the finished runs of partitions whose period was over by the cutoff but
    /// that could not move whole (they held an unfinished run): the others leave
    /// with their partition. Without partitions (SQLite), every finished run.
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
        if dry_run {
            return Ok(ArchivePass {
                selected: self.finished_hot_runs(cutoff).await?,
                ..ArchivePass::default()
            });
        }
        let whole = self
            .store
            .archive_run_partitions(cutoff, self.now(), &FINISHED_EVENT_TYPES)
            .await?;
        let mut pass = ArchivePass {
            runs: whole.runs.len(),
            events: whole.events,
            partitions: whole.partitions,
            ..ArchivePass::default()
        };
        for batch in whole.runs.chunks(BATCH) {
            self.move_finished_tasks(batch, &mut pass).await?;
        }
        // What is left to move row by row. Retention on Postgres knows it without
        // reading the runs view: the finished runs of the past periods' partitions
        // that could not leave whole. Otherwise every finished run still hot.
        let rows: Vec<String> = match row_moves {
            RowMoves::OnlyFromPastPeriods if self.store.has_partitions() => whole.left,
            _ => self
                .finished_hot_runs(cutoff)
                .await?
                .iter()
                .map(RunId::to_string)
                .collect(),
        };
        for batch in rows.chunks(BATCH) {
            let moved = self
                .store
                .archive_streams(StreamType::Run, batch, self.now())
                .await?;
            pass.runs += moved.streams.len();
            pass.events += moved.events;
            self.move_finished_tasks(&moved.streams, &mut pass).await?;
        }
        pass.selected = whole
            .runs
            .iter()
            .chain(&rows)
            .filter_map(|id| id.parse().ok())
            .collect();
        Ok(pass)
    }

    /// The runs that finished before `cutoff` and are still in the hot log: the
    /// runs view's finished runs, a page at a time by id (each row read once, only
    /// its id), each page kept to the runs the hot log still holds. A pass so costs
    /// a read of the finished runs' ids, not of their states, and never stops at
    /// the runs archived before.
    async fn finished_hot_runs(&self, cutoff: DateTime<Utc>) -> Result<Vec<RunId>, RunsError> {
        self.catch_up_views().await?;
        let mut hot = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page =
                queries::finished_run_ids(&self.store, cutoff, after.as_deref(), PAGE).await?;
            let Some(last) = page.last().cloned() else {
                break;
            };
            let mut still = self.store.hot_streams(StreamType::Run, &page).await?;
            still.sort();
            hot.extend(still.iter().filter_map(|id| id.parse::<RunId>().ok()));
            if page.len() < PAGE {
                break;
            }
            after = Some(last);
        }
        Ok(hot)
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
