//! The runs service: what people and programs do to workflow runs, behind one API that
//! REST, MCP and the CLI all call, so the three cannot drift apart.
//!
//! - `start.rs`: start a run of a registered workflow (or of a file, registered
//!   first), with the idempotency rule: the same key from the same caller names the
//!   same run, and a different request under that key is refused;
//! - `gates.rs`: find a gate's run and decide the gate;
//! - `tasks.rs`: finish an agent step's task by hand;
//! - `control.rs`: pause and resume a run;
//! - `rerun.rs`: rerun a finished run from a step, or fork it there with changed
//!   inputs;
//! - `replay.rs`: rebuild a run from its events, check that the engine still decides
//!   what they record, and say what a worker would do next;
//! - `history.rs`: a run's history as a file, replayed by another build (golden
//!   histories);
//! - here: read a run, list runs, cancel a run.
//!
//! Every change is one [`Command`] on the run's (or task's) stream, appended together
//! with the wake-up of the run it concerns, at the time the service's clock gives.
//! Carrying runs out is the executor's job (`awl worker`, or `awl serve`'s worker).

mod archive;
mod control;
mod error;
mod gates;
pub mod history;
mod replay;
mod rerun;
mod start;
mod tasks;

use chrono::{DateTime, Utc};

use crate::clock::Clock;
use crate::definitions::Definitions;
use crate::domain::Decide;
use crate::domain::ids::RunId;
use crate::domain::run::{Run, RunCommand};
use crate::log::{Metadata, StreamRef, StreamType};
use crate::projections::Projections;
use crate::projections::queries::{self, RunFilter};
use crate::store::command::Command;
use crate::store::{EventStore, domain_io};
use crate::telemetry;

pub use crate::definitions::catalog::{CatalogEntry, VersionEntry};
pub use crate::engine::verify::{Divergence, Verified};
pub use archive::{ArchivePass, Retention};
pub use error::RunsError;
pub use gates::GateDecision;
pub use replay::Replay;
pub use start::{StartRun, Started};
pub use tasks::TaskFinish;

/// The runs service. Cheap to clone.
#[derive(Clone)]
pub struct Runs {
    store: EventStore,
    definitions: Definitions,
    clock: Clock,
}

impl Runs {
    pub fn new(store: EventStore, clock: Clock) -> Self {
        Self {
            store,
            definitions: Definitions::default(),
            clock,
        }
    }

    pub fn store(&self) -> &EventStore {
        &self.store
    }

    fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// A run's state folded from its stream, and the stream's version, as people may
    /// see it: secrets redacted, personal data opened while its subject is remembered
    /// and `[erased]` after.
    pub async fn get(&self, run_id: RunId) -> Result<(Run, i64), RunsError> {
        let mut events = self.store.read_current(&run_stream(run_id)).await?;
        self.store
            .reveal_events(&mut events, crate::vault::Reveal::View)
            .await?;
        let (run, version) = domain_io::fold::<Run>(&events)?;
        if version == 0 {
            return Err(RunsError::RunNotFound(run_id));
        }
        Ok((run, version))
    }

    /// Bring the read models up to date with the log (nothing to do when a server
    /// keeps them live), before reading them.
    pub(crate) async fn catch_up_views(&self) -> Result<(), RunsError> {
        let projections = Projections::new(self.store.clone());
        projections.prepare().await?;
        projections.catch_up_all().await?;
        Ok(())
    }

    /// Runs, newest first, from the runs projection, brought up to date with the log
    /// first (nothing to do when a server keeps it live).
    pub async fn list(&self, filter: &RunFilter) -> Result<Vec<Run>, RunsError> {
        self.catch_up_views().await?;
        queries::run_states(&self.store, filter)
            .await?
            .into_iter()
            .map(|(run_id, state)| {
                serde_json::from_str::<Run>(&state).map_err(|e| RunsError::Corrupt {
                    what: format!("the runs view's state of run {run_id}"),
                    reason: format!("{e}; `awl projections rebuild runs` rebuilds it from the log"),
                })
            })
            .collect()
    }

    /// Every registered workflow with its versions, which is retired and whether it
    /// is paused (read from the workflow streams).
    pub async fn workflows(&self) -> Result<Vec<CatalogEntry>, RunsError> {
        Ok(crate::definitions::catalog::list(&self.store).await?)
    }

    /// Retire `version` of the workflow `name`: it takes no new runs, its runs finish
    /// on it. The catalog entry afterwards.
    pub async fn retire_version(
        &self,
        name: &str,
        version: &str,
        by: &str,
        reason: &str,
    ) -> Result<CatalogEntry, RunsError> {
        use crate::definitions::catalog;
        catalog::retire_version(&self.store, name, version, by, reason, self.now()).await?;
        catalog::list(&self.store)
            .await?
            .into_iter()
            .find(|e| e.workflow == name)
            .ok_or_else(|| RunsError::Invalid(format!("no workflow named {name:?}")))
    }

    /// Cancel a run; its parent, if any, is woken to see it.
    pub async fn cancel(&self, run_id: RunId, by: &str, reason: &str) -> Result<Run, RunsError> {
        let stream = run_stream(run_id);
        let now = self.now();
        let done = Command::new(&self.store, &stream, Metadata::actor(by))
            .wakes(now, |run: &Run| {
                let mut wake = vec![run_id.to_string()];
                wake.extend(run.parent().map(|p| p.run_id.to_string()));
                wake
            })
            .run(|run| {
                if run.status().is_none() {
                    return Err(RunsError::RunNotFound(run_id));
                }
                Ok(run.decide(RunCommand::Cancel {
                    by: by.to_string(),
                    reason: reason.to_string(),
                    at: now,
                })?)
            })
            .await?;
        if done.appended > 0 {
            let workflow = done
                .state
                .workflow()
                .map(|w| w.as_str())
                .unwrap_or_default();
            telemetry::run_finished(workflow, "cancelled");
        }
        Ok(done.state)
    }
}

fn run_stream(run_id: RunId) -> StreamRef {
    StreamRef::new(StreamType::Run, run_id.to_string())
}
