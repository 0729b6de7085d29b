//! awl's own agents: definitions read from YAML, and the runner that works a question
//! with a language model and the tool registry (plan, execute, solve), every step of
//! it recorded on a `solve` stream (`domain::solve`).
//!
//! | module | what it holds |
//! |---|---|
//! | `definition` | agent files: model and endpoint, system prompt, tools, budget, iterations |
//! | `runner` | the loop: the conversation rebuilt from the stream, budget checks, model and tool calls |
//! | `result` | what a solve answers: the message, the plan, the tools used, timings, cost |
//!
//! A solve is started (`solve.started` holds the agent's setup at that moment) and
//! then driven to its end; a process that died while driving one drives it on from
//! its stream ([`Agents::resume`]) without calling the model again for a reply
//! already recorded.

mod definition;
mod result;
mod runner;

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::clock::Clock;
use crate::domain::Decide;
use crate::domain::ids::SolveId;
use crate::domain::solve::{Origin, Setup, Solve, SolveCommand, SolveError, SolveEvent};
use crate::error::{Classified, ErrorKind};
use crate::log::{Metadata, StreamRef, StreamType};
use crate::models::{ModelClient, ModelError};
use crate::store::command::{Command, CommandError};
use crate::store::{EventStore, StoreError, domain_io};
use crate::tools::Registry;

pub use definition::{
    AgentDefinition, AgentFile, DEFAULT_ITERATIONS, ModelSpec, PriceSpec, check, load_dir,
};
pub use result::{PlanStep, SolveResult};

/// Who watches a solve as it goes (SSE, `awl ask --stream`): every recorded event,
/// and the reply's text as the model streams it.
pub trait Observer {
    fn event(&mut self, _event: &SolveEvent) {}
    fn token(&mut self, _text: &str) {}
    /// A model call's own time (the successful HTTP attempt), to the microsecond,
    /// before its reply is recorded.
    fn model_called(&mut self, _latency: std::time::Duration) {}
}

/// An observer that watches nothing.
pub struct Unobserved;
impl Observer for Unobserved {}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("no agent `{name}` (agents: {known})")]
    UnknownAgent { name: String, known: String },
    #[error("no solve {0}")]
    NotFound(SolveId),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Solve(#[from] SolveError),
    #[error("solve {0} kept changing while recording; try again")]
    Busy(StreamRef),
    #[error("the model client cannot be set up: {0}")]
    Client(#[from] ModelError),
    #[error("{0}")]
    Internal(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Classified for AgentError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::UnknownAgent { .. } | Self::NotFound(_) => ErrorKind::NotFound,
            Self::Invalid(_) => ErrorKind::Invalid,
            Self::Solve(_) => ErrorKind::Conflict,
            Self::Busy(_) => ErrorKind::Unavailable,
            Self::Client(_) | Self::Internal(_) => ErrorKind::Internal,
            Self::Store(e) => e.kind(),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::UnknownAgent { .. } => "agent_not_found",
            Self::NotFound(_) => "solve_not_found",
            Self::Invalid(_) => "invalid_request",
            Self::Solve(_) => "illegal_transition",
            Self::Busy(_) => "busy",
            Self::Client(_) => "model_client",
            Self::Internal(_) => "internal",
            Self::Store(e) => e.code(),
        }
    }
}

/// The agents, the registry their tools come from, and what they record in.
/// Cheap to clone.
#[derive(Clone)]
pub struct Agents {
    inner: Arc<Inner>,
}

struct Inner {
    store: EventStore,
    definitions: BTreeMap<String, AgentDefinition>,
    registry: Registry,
    client: ModelClient,
    clock: Clock,
}

impl std::fmt::Debug for Agents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agents")
            .field("agents", &self.inner.definitions.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Agents {
    pub fn new(
        store: EventStore,
        definitions: Vec<AgentDefinition>,
        registry: Registry,
        clock: Clock,
    ) -> Result<Self, AgentError> {
        Ok(Self {
            inner: Arc::new(Inner {
                store,
                definitions: definitions
                    .into_iter()
                    .map(|d| (d.name().to_string(), d))
                    .collect(),
                registry,
                client: ModelClient::new()?,
                clock,
            }),
        })
    }

    pub fn list(&self) -> impl Iterator<Item = &AgentDefinition> {
        self.inner.definitions.values()
    }

    pub fn get(&self, name: &str) -> Result<&AgentDefinition, AgentError> {
        self.inner
            .definitions
            .get(name)
            .ok_or_else(|| AgentError::UnknownAgent {
                name: name.to_string(),
                known: self
                    .inner
                    .definitions
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// Ask `agent` to work `prompt` to its end, recorded as solve `id`. The answer
    /// (or the failure) is in the result; an `Err` is a fault of awl or its store.
    pub async fn ask(
        &self,
        id: SolveId,
        agent: &str,
        prompt: &str,
        origin: Origin,
        by: &str,
        observer: &mut (dyn Observer + Send),
    ) -> Result<SolveResult, AgentError> {
        let definition = self.get(agent)?;
        if prompt.trim().is_empty() {
            return Err(AgentError::Invalid("the prompt is empty".into()));
        }
        let setup = Setup {
            agent: definition.name().to_string(),
            model: definition.file.model.name.clone(),
            system_prompt: definition.file.system_prompt.clone(),
            tools: definition.file.tools.clone(),
            max_iterations: definition.max_iterations(),
            budget_usd: definition.file.budget_usd,
        };
        let mut recorder = Recorder::new(&self.inner.store, id, by);
        let at = (self.inner.clock)();
        recorder
            .record(
                SolveCommand::Start {
                    setup,
                    prompt: prompt.to_string(),
                    origin,
                    by: by.to_string(),
                    at,
                },
                observer,
            )
            .await?;
        self.drive(&mut recorder, definition, observer).await?;
        Ok(SolveResult::of(id, recorder.state()))
    }

    /// Drive solve `id` on from its stream (after a crash), to its end.
    pub async fn resume(
        &self,
        id: SolveId,
        by: &str,
        observer: &mut (dyn Observer + Send),
    ) -> Result<SolveResult, AgentError> {
        let mut recorder = Recorder::load(&self.inner.store, id, by).await?;
        let agent = recorder
            .state()
            .setup
            .as_ref()
            .map(|s| s.agent.clone())
            .unwrap_or_default();
        let definition = self.get(&agent)?;
        self.drive(&mut recorder, definition, observer).await?;
        Ok(SolveResult::of(id, recorder.state()))
    }

    /// A solve as recorded.
    pub async fn solve(&self, id: SolveId) -> Result<SolveResult, AgentError> {
        let (state, version) = load(&self.inner.store, id).await?;
        if version == 0 {
            return Err(AgentError::NotFound(id));
        }
        Ok(SolveResult::of(id, &state))
    }
}

/// The stream of solve `id`.
pub fn stream(id: SolveId) -> StreamRef {
    StreamRef::new(StreamType::Solve, id.to_string())
}

async fn load(store: &EventStore, id: SolveId) -> Result<(Solve, i64), AgentError> {
    Ok(domain_io::load::<Solve>(store, &stream(id)).await?)
}

/// One solve's stream as the runner writes it: the state it knows, and each command
/// decided on it and appended (on a cached state; another writer's append makes the
/// command decide again on the stream as stored).
pub(crate) struct Recorder<'a> {
    store: &'a EventStore,
    id: SolveId,
    stream: StreamRef,
    by: String,
    state: (Solve, i64),
}

impl<'a> Recorder<'a> {
    fn new(store: &'a EventStore, id: SolveId, by: &str) -> Self {
        Self {
            store,
            id,
            stream: stream(id),
            by: by.to_string(),
            state: (Solve::default(), 0),
        }
    }

    async fn load(store: &'a EventStore, id: SolveId, by: &str) -> Result<Self, AgentError> {
        let state = load(store, id).await?;
        if state.1 == 0 {
            return Err(AgentError::NotFound(id));
        }
        Ok(Self {
            state,
            ..Self::new(store, id, by)
        })
    }

    pub(crate) fn id(&self) -> SolveId {
        self.id
    }

    pub(crate) fn state(&self) -> &Solve {
        &self.state.0
    }

    pub(crate) async fn record(
        &mut self,
        command: SolveCommand,
        observer: &mut (dyn Observer + Send),
    ) -> Result<(), AgentError> {
        let mut decided = Vec::new();
        let executed = Command::new(self.store, &self.stream, Metadata::actor(self.by.clone()))
            .cached(Some(self.state.clone()))
            .run(|state: &Solve| {
                let events = state.decide(command.clone())?;
                decided = events.clone();
                Ok::<_, SolveError>(events)
            })
            .await
            .map_err(|e| match e {
                CommandError::Rejected(e) => AgentError::Solve(e),
                CommandError::Store(e) => AgentError::Store(e),
                CommandError::Busy(s) => AgentError::Busy(s),
            })?;
        self.state = (executed.state, executed.version);
        for event in &decided {
            observer.event(event);
        }
        Ok(())
    }
}
