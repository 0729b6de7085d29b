//! The catalog of registered workflows: every workflow with its versions (for `awl
//! workflows list`), one version's definition (`show`, `diff`), and retiring a version
//! so it takes no new runs while the runs already on it finish on it; pausing and
//! resuming a whole workflow (the workflow's side of it: its runs are held by a bulk
//! action, `bulk::BulkActions::pause_workflow`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::domain::Decide;
use crate::domain::ids::WorkflowName;
use crate::domain::workflow::{Version, WorkflowCommand, WorkflowDefinition};
use crate::log::{Metadata, StreamRef, StreamType};
use crate::store::command::Command;
use crate::store::{EventStore, domain_io};

use super::DefinitionError;

/// One workflow and its versions, as the catalog lists them.
#[derive(Debug, Clone, Serialize)]
pub struct CatalogEntry {
    pub workflow: String,
    /// The version a run naming none starts.
    pub latest: Option<String>,
    pub retired: Option<String>,
    /// Who paused the whole workflow, when and why, while it is paused.
    pub paused: Option<String>,
    pub versions: Vec<VersionEntry>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VersionEntry {
    pub version: String,
    pub source: String,
    pub registered_by: String,
    pub registered_at: DateTime<Utc>,
    /// Who retired it, when and why.
    pub retired: Option<String>,
}

/// Every workflow in the log, by name, with its versions.
pub async fn list(store: &EventStore) -> Result<Vec<CatalogEntry>, DefinitionError> {
    let names = store.stream_ids(StreamType::Workflow, None).await?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let state = load(store, &name).await?;
        out.push(CatalogEntry {
            workflow: name,
            latest: state.latest_runnable().map(|v| v.version.to_string()),
            retired: state.retirement().map(|r| r.to_string()),
            paused: state.paused().map(|r| r.to_string()),
            versions: state
                .versions()
                .map(|v| VersionEntry {
                    version: v.version.to_string(),
                    source: if v.source.is_learned() {
                        "learned".into()
                    } else {
                        "submitted".into()
                    },
                    registered_by: v.registered_by.clone(),
                    registered_at: v.registered_at,
                    retired: v.retirement.as_ref().map(|r| r.to_string()),
                })
                .collect(),
        });
    }
    Ok(out)
}

/// A workflow's stream folded (empty if nothing was registered under `name`).
pub async fn load(store: &EventStore, name: &str) -> Result<WorkflowDefinition, DefinitionError> {
    let (state, _) =
        domain_io::load::<WorkflowDefinition>(store, &StreamRef::new(StreamType::Workflow, name))
            .await?;
    Ok(state)
}

/// The registered definition of `name` at `version` (the latest runnable one when
/// `None`), as the log keeps it, with the version it is.
pub async fn definition(
    store: &EventStore,
    name: &str,
    version: Option<&str>,
) -> Result<(String, Value), DefinitionError> {
    let state = load(store, name).await?;
    let registered = match version {
        Some(v) => state.version(&Version::try_from(v)?),
        None => state.latest_runnable(),
    }
    .ok_or_else(|| match version {
        Some(v) => DefinitionError::NoVersion {
            name: name.to_string(),
            version: v.to_string(),
        },
        None => DefinitionError::NoRunnable(name.to_string()),
    })?;
    Ok((
        registered.version.to_string(),
        registered.definition.clone(),
    ))
}

/// Retire `version` of `name`: it takes no new runs; runs on it finish on it.
pub async fn retire_version(
    store: &EventStore,
    name: &str,
    version: &str,
    by: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<(), DefinitionError> {
    let version = Version::try_from(version)?;
    decide_on(
        store,
        name,
        by,
        WorkflowCommand::RetireVersion {
            version,
            by: by.to_string(),
            reason: reason.to_string(),
            at: now,
        },
    )
    .await
}

/// Pause the whole workflow `name` (record it on its stream): new runs start paused.
pub async fn pause(
    store: &EventStore,
    name: &str,
    by: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<(), DefinitionError> {
    decide_on(
        store,
        name,
        by,
        WorkflowCommand::Pause {
            by: by.to_string(),
            reason: reason.to_string(),
            at: now,
        },
    )
    .await
}

/// Resume the paused workflow `name` (record it on its stream).
pub async fn resume(
    store: &EventStore,
    name: &str,
    by: &str,
    now: DateTime<Utc>,
) -> Result<(), DefinitionError> {
    decide_on(
        store,
        name,
        by,
        WorkflowCommand::Resume {
            by: by.to_string(),
            at: now,
        },
    )
    .await
}

async fn decide_on(
    store: &EventStore,
    name: &str,
    by: &str,
    command: WorkflowCommand,
) -> Result<(), DefinitionError> {
    let workflow = WorkflowName::try_from(name)?;
    let stream = StreamRef::new(StreamType::Workflow, workflow.as_str());
    Command::new(store, &stream, Metadata::actor(by))
        .run(|state: &WorkflowDefinition| state.decide(command.clone()))
        .await?;
    Ok(())
}
