//! Archiving finished runs: the streams of runs that ended before a cutoff move out of
//! the hot log into the archive (`store::archive`), in batches. The read models keep
//! their rows (analytics, the timeline, the audit trail), a rebuild reads the archive
//! too, and a run's status and history are read from the archive once it moved.
//! A run's tasks stay in the hot log.

use chrono::{DateTime, Utc};

use crate::domain::ids::RunId;
use crate::domain::run::RunStatus;
use crate::log::StreamType;
use crate::projections::queries::RunFilter;

use super::{Runs, RunsError};

/// Runs moved per transaction.
const BATCH: usize = 500;

/// What an archive pass found, and moved unless it was a dry run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchivePass {
    /// Finished runs that ended before the cutoff.
    pub selected: Vec<RunId>,
    /// Runs moved (the run holding the log's head waits for the next pass).
    pub runs: usize,
    /// Events moved.
    pub events: u64,
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
        }
        Ok(pass)
    }
}
