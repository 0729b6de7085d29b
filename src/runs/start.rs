//! Starting runs, with the idempotency rule.
//!
//! Without a key a run gets a fresh id. With one, its id is derived from the caller
//! and the key ([`IdempotencyKey::derive`]), so a request repeated after a lost answer
//! (or two racing copies of it) finds the run the first one started: the start is
//! decided on that stream, and a stream that already holds a run is the answer, if it
//! was started with the same workflow and inputs, or a refusal if not.

use std::path::Path;

use serde_json::{Map, Value};
use tracing::Instrument;
use uuid::Uuid;

use crate::definitions::{self, Registered};
use crate::domain::Decide;
use crate::domain::debounce::{self, Debounce, DebounceCommand, DebounceError};
use crate::domain::ids::{IdempotencyKey, RunId};
use crate::domain::run::{Run, RunCommand, RunError, RunEvent, RunOrigin};
use crate::engine;
use crate::log::{Metadata, StreamRef, StreamType};
use crate::store::command::{Command, CommandError};
use crate::store::domain_io;
use crate::telemetry;
use crate::workflow::{self, KnownTools, inputs};
use cqrs_es::Aggregate;

use super::{Runs, RunsError, run_stream};

/// A refusal is fine when following a workflow's pause: the run moved on meanwhile
/// (someone else paused, resumed or cancelled it).
fn ignore_refusal(result: Result<Run, RunsError>) -> Result<(), RunsError> {
    match result {
        Ok(_) | Err(RunsError::Run(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Names a run started with an idempotency key.
const RUN_KEY_NAMESPACE: Uuid = Uuid::from_u128(0x2f6b_8c1d_5e4a_4b9f_a7c3_1d8e_6f2a_0b54);

/// Start a run of a registered workflow.
#[derive(Debug, Clone, Default)]
pub struct StartRun {
    /// The workflow's name; `name@version` for a given version (default: the latest
    /// runnable one).
    pub workflow: String,
    /// Inputs as JSON values (types must match the declared ones).
    pub inputs: Map<String, Value>,
    /// The run's priority (-1000 to 1000; default: the workflow's, else 0).
    pub priority: Option<i32>,
    /// Whose history the run belongs to (`team:NAME`, `user:NAME`; default
    /// `user:` and the starter's name): learning reads its calls as theirs.
    pub scope: Option<String>,
}

/// What a start may carry besides the workflow and inputs.
#[derive(Debug, Clone, Default)]
pub(super) struct StartOptions {
    /// A rerun's or fork's origin and carried steps.
    pub lineage: Option<Lineage>,
    /// The priority asked for (default: the workflow's).
    pub priority: Option<i32>,
    /// Whose history the run belongs to (see [`StartRun::scope`]).
    pub scope: Option<String>,
}

/// What a rerun or fork starts with besides its inputs: where it came from and the
/// origin's steps it keeps (`RunCommand::CarryStep`s).
#[derive(Debug, Clone)]
pub(super) struct Lineage {
    pub origin: RunOrigin,
    pub carried: Vec<RunCommand>,
}

/// A run that was started (or found, for a repeated idempotent request).
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub run_id: RunId,
    pub workflow: String,
    pub version: String,
    /// False when an earlier request with the same key started it.
    pub created: bool,
}

impl Runs {
    /// Start a run of a registered workflow as `by`.
    pub async fn start(
        &self,
        request: StartRun,
        by: &str,
        key: Option<&IdempotencyKey>,
    ) -> Result<Started, RunsError> {
        let priority = request.priority;
        let scope = request.scope.clone();
        let (registered, inputs) = self.resolve_request(request).await?;
        let run_id = match key {
            Some(k) => RunId::from_uuid(k.derive(&RUN_KEY_NAMESPACE, by)),
            None => RunId::new(),
        };
        let options = StartOptions {
            priority,
            scope,
            ..StartOptions::default()
        };
        if let Some(spec) = &registered.workflow.debounce {
            return match self
                .debounced(&registered, spec, &inputs, run_id, by)
                .await?
            {
                Some(owner) => self.join(&registered, inputs, owner, by, options).await,
                // This start owns the key, but a joiner may have started its run
                // first (it saw the key before the run).
                None => {
                    self.start_or_join(&registered, inputs, run_id, by, options)
                        .await
                }
            };
        }
        self.start_registered(&registered, inputs, run_id, by, key, options)
            .await
    }

    /// For a workflow that debounces its starts: the run an earlier start with the
    /// same key owns (this start joins it), or none (this start now owns the key
    /// for the window, recorded on the key's stream before the run starts).
    async fn debounced(
        &self,
        registered: &Registered,
        spec: &crate::workflow::flow::DebounceSpec,
        inputs: &Map<String, Value>,
        run_id: RunId,
        by: &str,
    ) -> Result<Option<RunId>, RunsError> {
        let value = engine::flow::key_value(&spec.key, inputs)
            .map_err(|e| RunsError::Invalid(format!("debounce key: {e}")))?;
        let stream = StreamRef::new(
            StreamType::Debounce,
            debounce::stream_id(&registered.name, &value),
        );
        let now = self.now();
        let result = Command::new(&self.store, &stream, Metadata::actor(by))
            .run(|key: &Debounce| {
                key.decide(DebounceCommand::Start {
                    run_id,
                    window_seconds: spec.window_seconds,
                    by: by.to_string(),
                    at: now,
                })
            })
            .await;
        match result {
            Ok(_) => Ok(None),
            Err(CommandError::Rejected(DebounceError::Joins { run_id, .. })) => Ok(Some(run_id)),
            Err(CommandError::Rejected(e)) => Err(RunsError::Invalid(e.to_string())),
            Err(CommandError::Store(e)) => Err(e.into()),
            Err(CommandError::Busy(stream)) => Err(RunsError::Busy(stream)),
        }
    }

    /// Join the run `owner` of a debounced key: the answer is that run (created
    /// false); if the start that owns the key died before starting it, it is
    /// started now, with these inputs.
    async fn join(
        &self,
        registered: &Registered,
        inputs: Map<String, Value>,
        owner: RunId,
        by: &str,
        options: StartOptions,
    ) -> Result<Started, RunsError> {
        match self.existing(registered, owner).await? {
            Some(joined) => Ok(joined),
            None => {
                self.start_or_join(registered, inputs, owner, by, options)
                    .await
            }
        }
    }

    /// Start `owner`; if someone started it meanwhile, the answer is that run.
    async fn start_or_join(
        &self,
        registered: &Registered,
        inputs: Map<String, Value>,
        owner: RunId,
        by: &str,
        options: StartOptions,
    ) -> Result<Started, RunsError> {
        match self
            .start_registered(registered, inputs, owner, by, None, options)
            .await
        {
            Err(RunsError::Run(RunError::AlreadyStarted { .. })) => self
                .existing(registered, owner)
                .await?
                .ok_or(RunsError::RunNotFound(owner)),
            other => other,
        }
    }

    /// The run `run_id` as a start that joins it answers, if it was started.
    async fn existing(
        &self,
        registered: &Registered,
        run_id: RunId,
    ) -> Result<Option<Started>, RunsError> {
        let (run, _) =
            domain_io::fold::<Run>(&self.store.read_current(&run_stream(run_id)).await?)?;
        Ok(run.status().is_some().then(|| Started {
            run_id,
            workflow: registered.name.clone(),
            version: run.workflow_version().to_string(),
            created: false,
        }))
    }

    /// Start a run as `run_id`, an id the caller derived so that starting it again
    /// (after a crash, or from another server) finds the first start: the stream
    /// already holding a run of the same workflow and inputs is the answer, created
    /// false. `key` names the start in a refusal (a run of something else there).
    pub async fn start_as(
        &self,
        request: StartRun,
        run_id: RunId,
        by: &str,
        key: &IdempotencyKey,
    ) -> Result<Started, RunsError> {
        let priority = request.priority;
        let scope = request.scope.clone();
        let (registered, inputs) = self.resolve_request(request).await?;
        let options = StartOptions {
            priority,
            scope,
            ..StartOptions::default()
        };
        self.start_registered(&registered, inputs, run_id, by, Some(key), options)
            .await
    }

    /// The version a request names (or the latest runnable one) and its inputs
    /// checked and defaulted against it.
    async fn resolve_request(
        &self,
        request: StartRun,
    ) -> Result<(Registered, Map<String, Value>), RunsError> {
        let (workflow, version) = self
            .definitions
            .resolve(&self.store, &request.workflow)
            .await?;
        let name = request
            .workflow
            .split('@')
            .next()
            .unwrap_or(&request.workflow)
            .to_string();
        let inputs = inputs::resolve(&workflow.inputs, request.inputs, inputs::Given::Json)
            .map_err(|problems| {
                RunsError::Inputs(
                    problems
                        .iter()
                        .map(|p| p.message.clone())
                        .collect::<Vec<_>>()
                        .join("; "),
                )
            })?;
        let registered = Registered {
            name,
            version,
            content_hash: String::new(),
            workflow,
        };
        Ok((registered, inputs))
    }

    /// Register a workflow file (and the sub-workflow files it names), check `given`
    /// inputs against it (text from the command line, read as the declared types) and
    /// start a run. Problems name the file, line and column.
    pub async fn start_file(
        &self,
        path: &Path,
        given: Map<String, Value>,
        by: &str,
    ) -> Result<(Started, Registered), RunsError> {
        self.start_file_with(path, given, by, &KnownTools::default())
            .await
    }

    /// [`Runs::start_file`], where the files may also name the tools of `known` (the
    /// registry in use; its directory tools are copied into the registered version).
    pub async fn start_file_with(
        &self,
        path: &Path,
        given: Map<String, Value>,
        by: &str,
        known: &KnownTools,
    ) -> Result<(Started, Registered), RunsError> {
        let loaded =
            workflow::load_with(path, known).map_err(definitions::DefinitionError::Invalid)?;
        let inputs = inputs::resolve_for(&loaded.checked, path, given, inputs::Given::Text)
            .map_err(definitions::DefinitionError::Invalid)?;
        let registered =
            definitions::register_file_with(&self.store, path, by, self.now(), known).await?;
        let started = self
            .start_registered(
                &registered,
                inputs,
                RunId::new(),
                by,
                None,
                StartOptions::default(),
            )
            .await?;
        Ok((started, registered))
    }

    /// Start a run of a version already registered (and loaded) with inputs already
    /// resolved against its declarations, as [`Runs::start`] and [`Runs::start_file`]
    /// resolve them: for callers that register once and start many runs.
    pub async fn start_version(
        &self,
        registered: &Registered,
        inputs: Map<String, Value>,
        by: &str,
    ) -> Result<Started, RunsError> {
        self.start_registered(
            registered,
            inputs,
            RunId::new(),
            by,
            None,
            StartOptions::default(),
        )
        .await
    }

    /// Append the run's start (inputs already checked) with its first wake-up, in a
    /// span of its own: the run's trace. Its `traceparent` goes into the start
    /// event's metadata, and every step of the run, on any worker, is put under it.
    pub(super) async fn start_registered(
        &self,
        registered: &Registered,
        inputs: Map<String, Value>,
        run_id: RunId,
        by: &str,
        key: Option<&IdempotencyKey>,
        options: StartOptions,
    ) -> Result<Started, RunsError> {
        let span = tracing::info_span!(
            "awl.run.start",
            otel.name = %format!("run {}", registered.name),
            awl.run.id = %run_id,
            awl.workflow = %registered.name,
            awl.workflow.version = %registered.version,
        );
        let started = self
            .append_start(registered, inputs, run_id, by, key, options)
            .instrument(span)
            .await?;
        if started.created {
            telemetry::run_started(&started.workflow);
        }
        Ok(started)
    }

    async fn append_start(
        &self,
        registered: &Registered,
        inputs: Map<String, Value>,
        run_id: RunId,
        by: &str,
        key: Option<&IdempotencyKey>,
        options: StartOptions,
    ) -> Result<Started, RunsError> {
        let now = self.now();
        let flow = engine::flow::flow(&registered.workflow, &inputs, options.priority)
            .map_err(RunsError::Invalid)?;
        let inputs = self.seal_inputs(registered, run_id, inputs, now).await?;
        let mut command = engine::start_command(
            &registered.workflow,
            &registered.version,
            run_id,
            inputs.clone(),
            None,
            now,
        )
        .map_err(|e| RunsError::Invalid(e.to_string()))?;
        let priority = flow.priority;
        if let RunCommand::Start { flow: f, .. } = &mut command {
            *f = flow;
        }
        let carried = match options.lineage {
            Some(Lineage { origin, carried }) => {
                if let RunCommand::Start { origin: o, .. } = &mut command {
                    *o = Some(origin);
                }
                carried
            }
            None => Vec::new(),
        };
        // A run of a paused workflow starts paused: it queues until the workflow is
        // resumed.
        let held = self.workflow_hold(&registered.name, now).await?;
        let stream = run_stream(run_id);
        let metadata = Metadata::actor(by).with_scope(options.scope.clone());
        let done = Command::new(&self.store, &stream, metadata)
            .wakes(now, |_: &Run| vec![run_id.to_string()])
            .priority(priority)
            .run(|run| -> Result<Vec<RunEvent>, RunError> {
                if key.is_some() && run.status().is_some() {
                    // Started by an earlier request with this key: compared below.
                    return Ok(Vec::new());
                }
                let mut events: Vec<RunEvent> = run.decide(command.clone())?;
                if carried.is_empty() && held.is_none() {
                    return Ok(events);
                }
                // A rerun's or fork's carried steps and a workflow's hold, decided on
                // the run as started.
                let mut scratch = run.clone();
                for e in &events {
                    scratch.apply(e.clone());
                }
                for carry in carried.iter().chain(held.iter()) {
                    let more: Result<Vec<RunEvent>, RunError> = scratch.decide(carry.clone());
                    for e in more? {
                        scratch.apply(e.clone());
                        events.push(e);
                    }
                }
                Ok(events)
            })
            .await?;
        let run = &done.state;
        if done.appended == 0 {
            let same = run.workflow().map(|w| w.as_str()) == Some(registered.name.as_str())
                && *run.inputs() == Value::Object(inputs);
            if !same {
                return Err(RunsError::IdempotencyMismatch {
                    key: key.map(|k| k.to_string()).unwrap_or_default(),
                    run: run_id,
                });
            }
        }
        if done.appended > 0 {
            self.follow_workflow_hold(&registered.name, run_id, held.is_some(), by)
                .await?;
        }
        Ok(Started {
            run_id,
            workflow: registered.name.clone(),
            version: run.workflow_version().to_string(),
            created: done.appended > 0,
        })
    }

    /// The pause a new run of `workflow` starts with while the workflow is paused.
    async fn workflow_hold(
        &self,
        workflow: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Option<RunCommand>, RunsError> {
        let state = definitions::catalog::load(&self.store, workflow).await?;
        Ok(state.paused().map(|hold| RunCommand::Pause {
            by: hold.by.clone(),
            reason: hold.reason.clone(),
            at: now,
            workflow: true,
        }))
    }

    /// Read the workflow's pause again after the start committed, and follow it if it
    /// changed meanwhile. A workflow pause records itself before it selects the runs to
    /// hold (reading the log up to its head), so a start this read does not see paused
    /// committed before that selection, which holds it; likewise for a resume.
    async fn follow_workflow_hold(
        &self,
        workflow: &str,
        run_id: RunId,
        started_held: bool,
        by: &str,
    ) -> Result<(), RunsError> {
        let now = self.now();
        match (self.workflow_hold(workflow, now).await?, started_held) {
            (Some(RunCommand::Pause { by, reason, .. }), false) => {
                ignore_refusal(self.hold(run_id, &by, &reason).await)
            }
            (None, true) => ignore_refusal(self.resume(run_id, by).await),
            _ => Ok(()),
        }
    }

    /// Seal the secret and personal inputs (creating their keys), so the start event
    /// holds neither in clear. Sealing is deterministic: a retried start with the same
    /// idempotency key writes, and compares, the same text.
    async fn seal_inputs(
        &self,
        registered: &Registered,
        run_id: RunId,
        mut inputs: Map<String, Value>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Map<String, Value>, RunsError> {
        let id = run_id.to_string();
        let needed = engine::protect::start_keys(&registered.workflow, &id, &inputs)
            .map_err(RunsError::Invalid)?;
        if needed.is_empty() {
            return Ok(inputs);
        }
        let keys = self.store.ensure_subject_keys(&needed, now).await?;
        engine::protect::seal_inputs(&registered.workflow, &id, &mut inputs, &keys)
            .map_err(RunsError::Invalid)?;
        Ok(inputs)
    }
}
