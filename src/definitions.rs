//! Workflow definitions in the log: registering a file (and the sub-workflow files it
//! names) as a version of the `workflow` stream, and loading a registered version for
//! the engine.
//!
//! A worker may run on another machine than the file: sub-workflow paths become
//! `name@version` references to the registered child at registration. Nothing else
//! about the file's place goes into the definition, so the same file registered from
//! two checkouts is the same version (shell steps run in the worker's directory).
//!
//! Tools of the tools directory a file names ([`KnownTools::declared`]) are copied
//! into the registered definition's `tools:` at registration, as if the file declared
//! them: a run performs the version's copy, so it replays the same (and does the
//! same) whatever the directory holds later, and a changed directory tool is a
//! change of content (registering the same version again with it is refused: the
//! version is bumped, as for a change of the file). A tool the file declares itself
//! wins over a directory tool of the same name. MCP tools are not copied: they are
//! called by name through the registry when a step runs.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::domain::Decide;
use crate::domain::ids::{IdError, WorkflowName};
use crate::domain::workflow::{
    ContentHash, InvalidContentHash, InvalidVersion, Version, WorkflowCommand, WorkflowDefinition,
    WorkflowError,
};
use crate::error::{Classified, ErrorKind};
use crate::log::{Metadata, StreamRef, StreamType};
use crate::store::command::{Command, CommandError};
use crate::store::{EventStore, StoreError, domain_io};
use crate::workflow::model::Workflow;
use crate::workflow::{self, Diagnostics, KnownTools};

/// Why a definition could not be registered or loaded.
#[derive(Debug, thiserror::Error)]
pub enum DefinitionError {
    /// The file has problems (each with file, line, column and field).
    #[error("{0}")]
    Invalid(Diagnostics),
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A name, version or hash the domain does not accept.
    #[error("{0}")]
    Malformed(String),
    /// The workflow's stream refused the registration (a version registered again
    /// with other content, a retired workflow).
    #[error(transparent)]
    Refused(#[from] WorkflowError),
    #[error("workflow `{name}` has no version {version}")]
    NoVersion { name: String, version: String },
    #[error("no runnable version of workflow `{0}` is registered")]
    NoRunnable(String),
    /// A version that may not take new runs (retired, or not registered).
    #[error("{0}")]
    NotRunnable(crate::domain::workflow::NotRunnable),
    #[error("the registered definition of {what} cannot be read: {reason}")]
    Corrupt { what: String, reason: String },
    #[error("{0} kept changing while registering; try again")]
    Busy(StreamRef),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Classified for DefinitionError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::Invalid(_) | Self::Io { .. } | Self::Malformed(_) => ErrorKind::Invalid,
            Self::Refused(_) => ErrorKind::Conflict,
            Self::NoVersion { .. } | Self::NoRunnable(_) => ErrorKind::NotFound,
            Self::NotRunnable(_) => ErrorKind::Conflict,
            Self::Busy(_) => ErrorKind::Unavailable,
            Self::Corrupt { .. } => ErrorKind::Internal,
            Self::Store(e) => e.kind(),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::Invalid(_) | Self::Io { .. } | Self::Malformed(_) => "invalid_workflow",
            Self::Refused(_) => "illegal_transition",
            Self::NoVersion { .. } | Self::NoRunnable(_) => "workflow_not_found",
            Self::NotRunnable(_) => "version_not_runnable",
            Self::Busy(_) => "busy",
            Self::Corrupt { .. } => "corrupt_definition",
            Self::Store(e) => e.code(),
        }
    }
}

impl From<CommandError<WorkflowError>> for DefinitionError {
    fn from(e: CommandError<WorkflowError>) -> Self {
        match e {
            CommandError::Rejected(e) => Self::Refused(e),
            CommandError::Store(e) => Self::Store(e),
            CommandError::Busy(stream) => Self::Busy(stream),
        }
    }
}

macro_rules! malformed {
    ($($t:ty),*) => {$(
        impl From<$t> for DefinitionError {
            fn from(e: $t) -> Self {
                Self::Malformed(e.to_string())
            }
        }
    )*};
}
malformed!(IdError, InvalidVersion, InvalidContentHash);

/// A registered version, as loaded for a run.
#[derive(Debug, Clone)]
pub struct Registered {
    pub name: String,
    pub version: String,
    pub content_hash: String,
    pub workflow: Arc<Workflow>,
}

/// Read, check and register `path` (and, first, every sub-workflow file it names),
/// whose tools are the built-ins and its own.
pub async fn register_file(
    store: &EventStore,
    path: &Path,
    by: &str,
    now: DateTime<Utc>,
) -> Result<Registered, DefinitionError> {
    register_file_with(store, path, by, now, &KnownTools::default()).await
}

/// [`register_file`], where the files may also name the tools of `known` (the
/// registry in use): the directory tools they name are copied into their
/// definitions (see the module's docs).
pub async fn register_file_with(
    store: &EventStore,
    path: &Path,
    by: &str,
    now: DateTime<Utc>,
    known: &KnownTools,
) -> Result<Registered, DefinitionError> {
    let mut visiting = BTreeSet::new();
    Box::pin(register_inner(store, path, by, now, known, &mut visiting)).await
}

async fn register_inner(
    store: &EventStore,
    path: &Path,
    by: &str,
    now: DateTime<Utc>,
    known: &KnownTools,
    visiting: &mut BTreeSet<PathBuf>,
) -> Result<Registered, DefinitionError> {
    let canonical = path.canonicalize().map_err(|source| DefinitionError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !visiting.insert(canonical.clone()) {
        return Err(DefinitionError::Invalid(Diagnostics(vec![
            workflow::Diagnostic {
                file: path.to_path_buf(),
                position: Default::default(),
                field: String::new(),
                message: "this workflow includes itself through its sub-workflows".into(),
            },
        ])));
    }
    let loaded = workflow::load_with(path, known).map_err(DefinitionError::Invalid)?;
    let base = canonical
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut json = loaded.checked.json.clone();
    for pointer in workflow::step_pointers(&json) {
        let Some(step) = json.pointer_mut(&pointer).and_then(Value::as_object_mut) else {
            continue;
        };
        if step.get("type").and_then(Value::as_str) != Some("workflow") {
            continue;
        }
        let target = step
            .get("workflow")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if workflow::names_a_file(target) {
            let child = Box::pin(register_inner(
                store,
                &base.join(target),
                by,
                now,
                known,
                visiting,
            ))
            .await?;
            step.insert(
                "workflow".into(),
                Value::String(format!("{}@{}", child.name, child.version)),
            );
        }
    }
    visiting.remove(&canonical);
    embed_directory_tools(&mut json, loaded.workflow(), known).map_err(|reason| {
        DefinitionError::Corrupt {
            what: format!("a tool of the tools directory named by {}", path.display()),
            reason,
        }
    })?;
    let workflow: Workflow =
        serde_json::from_value(json.clone()).map_err(|e| DefinitionError::Corrupt {
            what: format!("the definition of {}", path.display()),
            reason: e.to_string(),
        })?;
    register(store, &workflow, json, by, now).await
}

/// Copy into `json`'s `tools:` the declaration of every tool of the tools directory
/// that `workflow` names and does not declare itself (in name order, after its own).
fn embed_directory_tools(
    json: &mut Value,
    workflow: &Workflow,
    known: &KnownTools,
) -> Result<(), String> {
    let own: BTreeSet<&str> = workflow
        .tools
        .iter()
        .map(|t| t.header.name.as_str())
        .collect();
    let mut copied = Vec::new();
    for name in workflow::tools_named(workflow) {
        if own.contains(name.as_str()) {
            continue;
        }
        if let Some(declared) = known.declared.get(&name) {
            copied.push(serde_json::to_value(&**declared).map_err(|e| e.to_string())?);
        }
    }
    if copied.is_empty() {
        return Ok(());
    }
    let Some(root) = json.as_object_mut() else {
        return Err("the definition is not a mapping".into());
    };
    match root
        .entry("tools")
        .or_insert_with(|| Value::Array(Vec::new()))
    {
        Value::Array(tools) => {
            tools.extend(copied);
            Ok(())
        }
        _ => Err("its `tools` is not a list".into()),
    }
}

/// The content hash of a definition: SHA-256 of its JSON (keys sorted).
pub fn content_hash(json: &Value) -> String {
    let bytes = serde_json::to_vec(json).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    hex::encode(digest)
}

/// Register `workflow` (as `json`) as a version of its workflow stream. Registering
/// the same content again changes nothing.
pub async fn register(
    store: &EventStore,
    workflow: &Workflow,
    json: Value,
    by: &str,
    now: DateTime<Utc>,
) -> Result<Registered, DefinitionError> {
    let hash = content_hash(&json);
    let name = WorkflowName::try_from(workflow.name.as_str())?;
    let version = Version::try_from(workflow.version.as_str())?;
    let content_hash = ContentHash::try_from(hash.as_str())?;
    let stream = StreamRef::new(StreamType::Workflow, name.as_str());
    Command::new(store, &stream, Metadata::actor(by))
        .run(|state: &WorkflowDefinition| {
            state.decide(WorkflowCommand::Register {
                workflow: name.clone(),
                version,
                definition: json.clone(),
                content_hash: content_hash.clone(),
                by: by.to_string(),
                at: now,
            })
        })
        .await?;
    Ok(Registered {
        name: workflow.name.clone(),
        version: workflow.version.clone(),
        content_hash: hash,
        workflow: Arc::new(workflow.clone()),
    })
}

/// Definitions by (name, version).
type Cache = HashMap<(String, String), Arc<Workflow>>;

/// Registered definitions, loaded once per process (a version never changes).
#[derive(Clone, Default)]
pub struct Definitions {
    cache: Arc<Mutex<Cache>>,
}

impl Definitions {
    /// The definition of `name` at `version`.
    pub async fn get(
        &self,
        store: &EventStore,
        name: &str,
        version: &str,
    ) -> Result<Arc<Workflow>, DefinitionError> {
        let key = (name.to_string(), version.to_string());
        if let Some(found) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(found);
        }
        let (state, _) = domain_io::load::<WorkflowDefinition>(
            store,
            &StreamRef::new(StreamType::Workflow, name),
        )
        .await?;
        let parsed = Version::try_from(version)?;
        let registered = state
            .version(&parsed)
            .ok_or_else(|| DefinitionError::NoVersion {
                name: name.to_string(),
                version: version.to_string(),
            })?;
        let workflow: Workflow =
            serde_json::from_value(registered.definition.clone()).map_err(|e| {
                DefinitionError::Corrupt {
                    what: format!("{name} {version}"),
                    reason: e.to_string(),
                }
            })?;
        let workflow = Arc::new(workflow);
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(key, workflow.clone());
        }
        Ok(workflow)
    }

    /// A `workflow:` reference: `name@version`, or `name` for its latest runnable
    /// version. Returns the definition and the version.
    pub async fn resolve(
        &self,
        store: &EventStore,
        reference: &str,
    ) -> Result<(Arc<Workflow>, String), DefinitionError> {
        if let Some((name, version)) = reference.split_once('@') {
            // A new run may not start a retired version (runs on it finish on it).
            let state = catalog::load(store, name).await?;
            if let Err(not) = state.runnable(&Version::try_from(version)?) {
                return Err(DefinitionError::NotRunnable(not));
            }
            return Ok((self.get(store, name, version).await?, version.to_string()));
        }
        let (state, _) = domain_io::load::<WorkflowDefinition>(
            store,
            &StreamRef::new(StreamType::Workflow, reference),
        )
        .await?;
        let latest = state
            .latest_runnable()
            .ok_or_else(|| DefinitionError::NoRunnable(reference.to_string()))?;
        let version = latest.version.to_string();
        Ok((self.get(store, reference, &version).await?, version))
    }
}

pub mod catalog;
#[cfg(test)]
mod tests;
