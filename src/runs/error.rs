//! What the runs service refuses, each with its kind and a stable code.

use crate::definitions::DefinitionError;
use crate::domain::ids::{GateId, RunId, TaskId};
use crate::domain::run::RunError;
use crate::domain::task::TaskError;
use crate::engine::EngineError;
use crate::error::{Classified, ErrorKind};
use crate::log::StreamRef;
use crate::projections::ProjectionError;
use crate::projections::queries::QueryError;
use crate::store::StoreError;
use crate::store::command::CommandError;

#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    #[error("no run {0}")]
    RunNotFound(RunId),
    #[error("no gate {0}")]
    GateNotFound(GateId),
    #[error("no task {0}")]
    TaskNotFound(TaskId),
    /// The workflow (file or registered version) cannot be used.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// The inputs do not match what the workflow declares.
    #[error("{0}")]
    Inputs(String),
    #[error("{0}")]
    Invalid(String),
    /// The run refused the command in its current state.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The task refused the command in its current state.
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error("Idempotency-Key {key:?} was already used for run {run} with a different request")]
    IdempotencyMismatch { key: String, run: RunId },
    #[error("{0} kept changing while deciding; try again")]
    Busy(StreamRef),
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A history file cannot be made or does not replay.
    #[error(transparent)]
    History(#[from] super::history::HistoryError),
    #[error("{what} cannot be read: {reason}")]
    Corrupt { what: String, reason: String },
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    #[error(transparent)]
    Query(#[from] QueryError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Classified for RunsError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::RunNotFound(_) | Self::GateNotFound(_) | Self::TaskNotFound(_) => {
                ErrorKind::NotFound
            }
            Self::Definition(e) => e.kind(),
            Self::Inputs(_) | Self::Invalid(_) => ErrorKind::Invalid,
            Self::Run(_) | Self::Task(_) | Self::IdempotencyMismatch { .. } => ErrorKind::Conflict,
            Self::Busy(_) => ErrorKind::Unavailable,
            Self::Engine(_) | Self::Corrupt { .. } => ErrorKind::Internal,
            Self::History(super::history::HistoryError::Sealed(_)) => ErrorKind::Invalid,
            Self::History(_) => ErrorKind::Internal,
            Self::Projection(e) => e.kind(),
            Self::Query(e) => e.kind(),
            Self::Store(e) => e.kind(),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::RunNotFound(_) => "run_not_found",
            Self::GateNotFound(_) => "gate_not_found",
            Self::TaskNotFound(_) => "task_not_found",
            Self::Definition(e) => e.code(),
            Self::Inputs(_) | Self::Invalid(_) => "invalid_request",
            Self::Run(_) | Self::Task(_) => "illegal_transition",
            Self::IdempotencyMismatch { .. } => "idempotency_mismatch",
            Self::Busy(_) => "busy",
            Self::Engine(_) => "engine_error",
            Self::History(super::history::HistoryError::Divergence(_)) => "non_determinism",
            Self::History(_) => "history_unreadable",
            Self::Corrupt { .. } => "corrupt",
            Self::Projection(e) => e.code(),
            Self::Query(e) => e.code(),
            Self::Store(e) => e.code(),
        }
    }
}

impl<E: Into<RunsError>> From<CommandError<E>> for RunsError {
    fn from(e: CommandError<E>) -> Self {
        match e {
            CommandError::Rejected(e) => e.into(),
            CommandError::Store(e) => Self::Store(e),
            CommandError::Busy(stream) => Self::Busy(stream),
        }
    }
}
