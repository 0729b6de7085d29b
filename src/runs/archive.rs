//! Archiving finished runs: the streams of runs that ended before a cutoff move out of
//! the hot log into the archive (`store::archive`), in batches. The read models keep
//! their rows (analytics, the timeline, the audit trail), a rebuild reads the archive
//! too, and a run's status and history are read from the archive once it moved.
//! A run's tasks (its agent steps' board tasks, found in the board's read model) move
//! with it once they are finished.

use chrono::{DateTime, Utc};
use tokio::sync::watch;

use crate::domain::ids::RunId;
use crate::domain::run::RunStatus;
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
        for batch in pass.selected.chunks(BATCH) {
            let ids: Vec<String> = batch.iter().map(RunId::to_string).collect();
            let moved = self
                .store
                .archive_streams(StreamType::Run, &ids, self.now())
                .await?;
            pass.runs += moved.streams.len();
            pass.events += moved.events;
            let tasks = self.finished_tasks_of(&moved.streams).await?;
            let moved = self
                .store
                .archive_streams(StreamType::Task, &tasks, self.now())
                .await?;
            pass.tasks += moved.streams.len();
            pass.events += moved.events;
        }
        Ok(pass)
    }

    /// Archive what `retention` says, every `retention.every`, until `stop` turns
    /// true. Several servers may do this at once: a stream is moved once whoever
    /// moves it, and a failed pass (the database away) is tried again next time.
    pub async fn archive_every(&self, retention: Retention, mut stop: watch::Receiver<bool>) {
        loop {
            match self.archive_older_than(retention.older_than, false).await {
                Ok((cutoff, pass)) if pass.runs > 0 => tracing::info!(
                    runs = pass.runs,
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
