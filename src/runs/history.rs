//! History files: one run's recorded events and the definition it ran, in a file, to
//! be replayed through another build of awl (`awl replay --history FILE`).
//!
//! Golden histories are such files kept in the tests (`tests/golden/`): every build
//! replays them and must decide what they record, so a change that would break the
//! runs already in a log fails in CI with the step it breaks. Operators export runs of
//! their own (`awl replay RUN --export FILE`) to check an upgrade the same way.
//!
//! The events are kept as the log gives them (type, schema version, payload), so a
//! file written before an event's schema changed loads through the upcasters like a
//! read from a store, and the definition
//! as the log registered it, so an old definition that no longer loads fails too. A
//! file never holds a sealed value: a run with secret or personal inputs cannot be
//! exported (the key would have to travel with it).

use std::collections::{BTreeMap, BTreeSet};

use chrono::DateTime;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::ids::RunId;
use crate::domain::run::Run;
use crate::engine::verify::{Recorded, ReplayContext, Verified, verify_history};
use crate::log::{Metadata, RecordedEvent, Upcasters};
use crate::store::domain_io;
use crate::workflow::model::Workflow;

use super::{Runs, RunsError, run_stream};

/// The format's version, written in every file.
pub const FORMAT: u32 = 1;

/// One run's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryFile {
    /// The file format ([`FORMAT`]).
    pub awl_history: u32,
    pub run_id: RunId,
    pub workflow: String,
    pub version: String,
    /// The definition as the log registered it.
    pub definition: Value,
    /// The environment variables the workflow's expressions read (`env.NAME`), as the
    /// worker had them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub events: Vec<HistoryEvent>,
}

/// One event as the log keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    #[serde(rename = "type")]
    pub event_type: String,
    pub event_version: i32,
    pub payload: Value,
}

/// Why a history file cannot be made or replayed.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history format {0} is not one this build reads (it reads {FORMAT})")]
    Format(u32),
    #[error("the recorded definition of {workflow} {version} no longer loads: {reason}")]
    Definition {
        workflow: String,
        version: String,
        reason: String,
    },
    #[error("event {version} ({event_type}) cannot be read: {reason}")]
    Event {
        version: usize,
        event_type: String,
        reason: String,
    },
    #[error(
        "run {0} holds sealed values (secret or personal inputs): a history file would need their keys, so it is not exported"
    )]
    Sealed(RunId),
    #[error(transparent)]
    Divergence(#[from] Box<crate::engine::verify::Divergence>),
}

impl HistoryFile {
    /// Replay the history through this build's engine.
    pub fn verify(&self, upcasters: &Upcasters) -> Result<Verified, HistoryError> {
        if self.awl_history != FORMAT {
            return Err(HistoryError::Format(self.awl_history));
        }
        let definition: Workflow =
            serde_json::from_value(self.definition.clone()).map_err(|e| {
                HistoryError::Definition {
                    workflow: self.workflow.clone(),
                    version: self.version.clone(),
                    reason: e.to_string(),
                }
            })?;
        let history = self.recorded(upcasters)?;
        let context = ReplayContext {
            env: self.env.clone(),
            ..ReplayContext::default()
        };
        Ok(verify_history(&definition, &history, &context)?)
    }

    fn recorded(&self, upcasters: &Upcasters) -> Result<Vec<Recorded>, HistoryError> {
        let stream = run_stream(self.run_id);
        self.events
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let bad = |reason: String| HistoryError::Event {
                    version: i + 1,
                    event_type: e.event_type.clone(),
                    reason,
                };
                let (event_version, payload) = upcasters
                    .upcast(&e.event_type, e.event_version, e.payload.clone())
                    .map_err(|u| bad(u.to_string()))?;
                let recorded = RecordedEvent {
                    position: i as i64 + 1,
                    stream: stream.clone(),
                    version: i as i64 + 1,
                    event_type: e.event_type.clone(),
                    event_version,
                    payload,
                    metadata: Metadata::default(),
                    recorded_at: DateTime::UNIX_EPOCH,
                };
                let event = domain_io::decode::<Run>(&recorded).map_err(|s| bad(s.to_string()))?;
                Ok(Recorded::plain(event))
            })
            .collect()
    }
}

impl Runs {
    /// The history file of a run, as its stream holds it now.
    pub async fn export_history(
        &self,
        run_id: RunId,
        env: BTreeMap<String, String>,
    ) -> Result<HistoryFile, RunsError> {
        let events = self.store.read_stream(&run_stream(run_id)).await?;
        let (run, version) = domain_io::fold::<Run>(&events)?;
        if version == 0 {
            return Err(RunsError::RunNotFound(run_id));
        }
        let mut sealed = BTreeSet::new();
        for event in &events {
            crate::vault::key_ids(&event.payload, &mut sealed);
        }
        if !sealed.is_empty() {
            return Err(RunsError::History(HistoryError::Sealed(run_id)));
        }
        let workflow = run.workflow().map(|w| w.to_string()).unwrap_or_default();
        let definition = self
            .definitions
            .get(&self.store, &workflow, run.workflow_version())
            .await?;
        let definition =
            serde_json::to_value(definition.as_ref()).map_err(|e| RunsError::Corrupt {
                what: format!("the definition of {workflow}"),
                reason: e.to_string(),
            })?;
        Ok(HistoryFile {
            awl_history: FORMAT,
            run_id,
            workflow,
            version: run.workflow_version().to_string(),
            definition,
            env,
            events: events
                .into_iter()
                .map(|e| HistoryEvent {
                    event_type: e.event_type,
                    event_version: e.event_version,
                    payload: e.payload,
                })
                .collect(),
        })
    }
}
