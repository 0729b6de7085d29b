//! Workflow definitions in the log: registering a file (and the sub-workflow files it
//! names) as a version of the `workflow` stream, and loading a registered version for
//! the engine.
//!
//! A worker may run on another machine than the file: sub-workflow paths become
//! `name@version` references to the registered child at registration. Nothing else
//! about the file's place goes into the definition, so the same file registered from
//! two checkouts is the same version (shell steps run in the worker's directory).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::domain::Decide;
use crate::domain::ids::WorkflowName;
use crate::domain::workflow::{ContentHash, Version, WorkflowCommand, WorkflowDefinition};
use crate::log::{Metadata, StreamRef, StreamType};
use crate::store::{EventStore, StoreError, domain_io};
use crate::workflow::model::Workflow;
use crate::workflow::{self, Diagnostics};

use super::ExecError;

/// A registered version, as loaded for a run.
#[derive(Debug, Clone)]
pub struct Registered {
    pub name: String,
    pub version: String,
    pub content_hash: String,
    pub workflow: Arc<Workflow>,
}

/// Read, check and register `path` (and, first, every sub-workflow file it names).
pub async fn register_file(
    store: &EventStore,
    path: &Path,
    by: &str,
    now: DateTime<Utc>,
) -> Result<Registered, ExecError> {
    let mut visiting = BTreeSet::new();
    Box::pin(register_inner(store, path, by, now, &mut visiting)).await
}

async fn register_inner(
    store: &EventStore,
    path: &Path,
    by: &str,
    now: DateTime<Utc>,
    visiting: &mut BTreeSet<PathBuf>,
) -> Result<Registered, ExecError> {
    let canonical = path.canonicalize().map_err(|e| ExecError::Io {
        what: format!("reading {}", path.display()),
        source: e,
    })?;
    if !visiting.insert(canonical.clone()) {
        return Err(ExecError::Invalid(Diagnostics(vec![
            workflow::Diagnostic {
                file: path.to_path_buf(),
                position: Default::default(),
                field: String::new(),
                message: "this workflow includes itself through its sub-workflows".into(),
            },
        ])));
    }
    let loaded = workflow::load(path).map_err(ExecError::Invalid)?;
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
            let child =
                Box::pin(register_inner(store, &base.join(target), by, now, visiting)).await?;
            step.insert(
                "workflow".into(),
                Value::String(format!("{}@{}", child.name, child.version)),
            );
        }
    }
    visiting.remove(&canonical);
    let workflow: Workflow =
        serde_json::from_value(json.clone()).map_err(|e| ExecError::Corrupt {
            what: format!("the definition of {}", path.display()),
            reason: e.to_string(),
        })?;
    register(store, &workflow, json, by, now).await
}

/// The content hash of a definition: SHA-256 of its JSON (keys sorted).
pub fn content_hash(json: &Value) -> String {
    let bytes = serde_json::to_vec(json).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Register `workflow` (as `json`) as a version of its workflow stream. Registering
/// the same content again changes nothing.
pub async fn register(
    store: &EventStore,
    workflow: &Workflow,
    json: Value,
    by: &str,
    now: DateTime<Utc>,
) -> Result<Registered, ExecError> {
    let hash = content_hash(&json);
    let name = WorkflowName::try_from(workflow.name.as_str())
        .map_err(|e| ExecError::Refused(e.to_string()))?;
    let version = Version::try_from(workflow.version.as_str())
        .map_err(|e| ExecError::Refused(e.to_string()))?;
    let stream = StreamRef::new(StreamType::Workflow, name.as_str());
    for _ in 0..3 {
        let (state, current) = domain_io::load::<WorkflowDefinition>(store, &stream).await?;
        let command = WorkflowCommand::Register {
            workflow: name.clone(),
            version,
            definition: json.clone(),
            content_hash: ContentHash::try_from(hash.as_str())
                .map_err(|e| ExecError::Refused(e.to_string()))?,
            by: by.to_string(),
            at: now,
        };
        let events = state
            .decide(command)
            .map_err(|e| ExecError::Refused(e.to_string()))?;
        if events.is_empty() {
            break;
        }
        let request = domain_io::append_request(&stream, current, &events, &Metadata::actor(by))?;
        match store.append(request).await {
            Ok(_) => break,
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
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
    ) -> Result<Arc<Workflow>, ExecError> {
        let key = (name.to_string(), version.to_string());
        if let Some(found) = self.cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(found);
        }
        let (state, _) = domain_io::load::<WorkflowDefinition>(
            store,
            &StreamRef::new(StreamType::Workflow, name),
        )
        .await?;
        let parsed = Version::try_from(version).map_err(|e| ExecError::Refused(e.to_string()))?;
        let registered = state.version(&parsed).ok_or_else(|| {
            ExecError::Refused(format!("workflow `{name}` has no version {version}"))
        })?;
        let workflow: Workflow =
            serde_json::from_value(registered.definition.clone()).map_err(|e| {
                ExecError::Corrupt {
                    what: format!("the registered definition of {name} {version}"),
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
    ) -> Result<(Arc<Workflow>, String), ExecError> {
        if let Some((name, version)) = reference.split_once('@') {
            return Ok((self.get(store, name, version).await?, version.to_string()));
        }
        let (state, _) = domain_io::load::<WorkflowDefinition>(
            store,
            &StreamRef::new(StreamType::Workflow, reference),
        )
        .await?;
        let latest = state.latest_runnable().ok_or_else(|| {
            ExecError::Refused(format!(
                "no runnable version of workflow `{reference}` is registered"
            ))
        })?;
        let version = latest.version.to_string();
        Ok((self.get(store, reference, &version).await?, version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoreLocation, StoreOptions};

    const PARENT: &str = "name: parent\nversion: \"1.0.0\"\nsteps:\n  - {id: go, type: shell, command: [\"true\"]}\n  - {id: sub, type: workflow, workflow: ./child.awl.yaml}\n";
    const CHILD: &str = "name: child\nversion: \"2.0.0\"\nsteps: [{id: x, tool: noop}]\n";

    fn checkout(dir: &Path) -> PathBuf {
        std::fs::write(dir.join("parent.awl.yaml"), PARENT).unwrap();
        std::fs::write(dir.join("child.awl.yaml"), CHILD).unwrap();
        dir.join("parent.awl.yaml")
    }

    #[tokio::test]
    async fn a_file_registers_the_same_version_from_any_folder() {
        let db = tempfile::tempdir().unwrap();
        let store = EventStore::open(
            &StoreLocation::sqlite(db.path().join("awl.db")),
            StoreOptions::default(),
        )
        .await
        .unwrap();
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let first = register_file(&store, &checkout(a.path()), "ada", Utc::now())
            .await
            .unwrap();
        let second = register_file(&store, &checkout(b.path()), "bob", Utc::now())
            .await
            .unwrap();
        assert_eq!(first.content_hash, second.content_hash);
        // The sub-workflow path became a reference to the registered child.
        let definitions = Definitions::default();
        let parent = definitions.get(&store, "parent", "1.0.0").await.unwrap();
        let sub = serde_json::to_value(&parent.steps[1]).unwrap();
        assert_eq!(sub["workflow"], "child@2.0.0");
        // One version event per workflow: the second registration changed nothing.
        let events = store
            .read_page(0, 100, &crate::log::EventFilter::default())
            .await
            .unwrap()
            .0;
        let registered: Vec<&str> = events.iter().map(|e| e.stream.id.as_str()).collect();
        assert_eq!(registered, vec!["child", "parent"]);
    }

    #[tokio::test]
    async fn a_workflow_that_includes_itself_is_refused() {
        let db = tempfile::tempdir().unwrap();
        let store = EventStore::open(
            &StoreLocation::sqlite(db.path().join("awl.db")),
            StoreOptions::default(),
        )
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("loop.awl.yaml");
        std::fs::write(
            &path,
            "name: loop\nversion: \"1.0.0\"\nsteps: [{id: again, type: workflow, workflow: ./loop.awl.yaml}]\n",
        )
        .unwrap();
        match register_file(&store, &path, "ada", Utc::now()).await {
            Err(ExecError::Invalid(d)) => {
                assert!(d.to_string().contains("includes itself"), "{d}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
