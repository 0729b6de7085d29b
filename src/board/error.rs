//! What the board refuses, with a stable code for each kind of refusal.

use crate::domain::agent::AgentError;
use crate::domain::ids::{AgentId, IdError, TaskId};
use crate::domain::task::TaskError;
use crate::error::{Classified, ErrorKind};
use crate::projections::queries::QueryError;
use crate::store::StoreError;
use crate::store::command::CommandError;

#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    #[error("no task {0}")]
    TaskNotFound(TaskId),
    #[error("agent {0} is not registered: register it first")]
    AgentNotFound(AgentId),
    #[error("agent {0} is retired: register it again to take work")]
    AgentRetired(AgentId),
    #[error(transparent)]
    Task(#[from] TaskError),
    #[error(transparent)]
    Agent(#[from] AgentError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("Idempotency-Key {key:?} was already used for task {task} with a different request")]
    IdempotencyMismatch { key: String, task: TaskId },
    #[error("{0} kept changing while deciding; try again")]
    Busy(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Reading the board projection (ended tasks) failed.
    #[error(transparent)]
    View(#[from] QueryError),
}

impl From<IdError> for BoardError {
    fn from(e: IdError) -> Self {
        BoardError::Invalid(e.to_string())
    }
}

impl From<CommandError<BoardError>> for BoardError {
    fn from(e: CommandError<BoardError>) -> Self {
        match e {
            CommandError::Rejected(e) => e,
            CommandError::Store(e) => BoardError::Store(e),
            CommandError::Busy(stream) => BoardError::Busy(stream.to_string()),
        }
    }
}

impl Classified for BoardError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::TaskNotFound(_) | Self::AgentNotFound(_) => ErrorKind::NotFound,
            Self::Task(TaskError::NotQueued { .. }) => ErrorKind::NotFound,
            Self::Agent(AgentError::NotRegistered { .. }) => ErrorKind::NotFound,
            Self::Task(TaskError::NotAssignee { .. }) | Self::Forbidden(_) => ErrorKind::Forbidden,
            Self::Task(
                TaskError::Empty { .. }
                | TaskError::PercentOutOfRange { .. }
                | TaskError::DeadlineNotAfterDelivery { .. },
            )
            | Self::Invalid(_) => ErrorKind::Invalid,
            Self::Busy(_) => ErrorKind::Unavailable,
            Self::Store(e) => e.kind(),
            Self::View(e) => e.kind(),
            Self::AgentRetired(_)
            | Self::Task(_)
            | Self::Agent(_)
            | Self::IdempotencyMismatch { .. } => ErrorKind::Conflict,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::TaskNotFound(_) => "task_not_found",
            Self::AgentNotFound(_) => "agent_not_found",
            Self::AgentRetired(_) => "agent_retired",
            Self::Task(e) => match e {
                TaskError::NotQueued { .. } => "task_not_found",
                TaskError::NotAssignee { .. } => "not_assignee",
                TaskError::Empty { .. }
                | TaskError::PercentOutOfRange { .. }
                | TaskError::DeadlineNotAfterDelivery { .. } => "invalid_request",
                TaskError::WrongQuestion { .. } => "wrong_question",
                _ => "illegal_transition",
            },
            Self::Agent(AgentError::NotRegistered { .. }) => "agent_not_found",
            Self::Agent(AgentError::Retired { .. }) => "agent_retired",
            Self::Agent(_) => "illegal_transition",
            Self::Invalid(_) => "invalid_request",
            Self::Forbidden(_) => "forbidden",
            Self::IdempotencyMismatch { .. } => "idempotency_mismatch",
            Self::Busy(_) => "busy",
            Self::Store(e) => e.code(),
            Self::View(e) => e.code(),
        }
    }
}
