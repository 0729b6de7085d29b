//! Why a command on a task was refused. Each message names the task, what was
//! attempted and why it cannot be done, so it can be shown to an agent or a person as is.

use chrono::{DateTime, Utc};

use crate::domain::ids::{AgentId, QuestionId, TaskId};

use super::commands::TaskAction;
use super::{TaskEnding, TaskStatus};

/// A refused task command.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TaskError {
    #[error("the task does not exist: cannot {action} (a task must be queued first)")]
    NotQueued { action: TaskAction },

    #[error("task {task} already exists (it is {status}): cannot queue it again")]
    AlreadyQueued { task: TaskId, status: TaskStatus },

    #[error(
        "task {task} is {status}: cannot {action} ({action} is only allowed in {})",
        list_states(.allowed)
    )]
    InvalidTransition {
        task: TaskId,
        status: TaskStatus,
        action: TaskAction,
        allowed: &'static [TaskStatus],
    },

    #[error("task {task} is finished ({ending}): cannot {action}, a finished task never changes")]
    Finished {
        task: TaskId,
        action: TaskAction,
        ending: TaskEnding,
    },

    #[error(
        "task {task} is assigned to {}, not to {agent}: only the assignee may {action}",
        assignee_name(.assignee)
    )]
    NotAssignee {
        task: TaskId,
        action: TaskAction,
        agent: AgentId,
        assignee: Option<AgentId>,
    },

    #[error("task {task}: cannot {action} with an empty {field}")]
    Empty {
        task: TaskId,
        action: TaskAction,
        field: &'static str,
    },

    #[error("task {task}: cannot report progress of {percent}% (a percentage is 0 to 100)")]
    PercentOutOfRange { task: TaskId, percent: u8 },

    #[error(
        "task {task} is blocked on question {open}: cannot answer question {given}, which is not the open one"
    )]
    WrongQuestion {
        task: TaskId,
        open: QuestionId,
        given: QuestionId,
    },

    #[error(
        "task {task}: cannot requeue for an ack timeout at {at}, the agent may ack until {deadline}"
    )]
    AckNotDue {
        task: TaskId,
        deadline: DateTime<Utc>,
        at: DateTime<Utc>,
    },

    #[error(
        "task {task}: cannot deliver with an ack deadline of {ack_deadline}, which is not after the delivery at {at}"
    )]
    DeadlineNotAfterDelivery {
        task: TaskId,
        ack_deadline: DateTime<Utc>,
        at: DateTime<Utc>,
    },

    #[error(
        "task {task} requires review: cannot complete it from IN_PROGRESS (submit it for review and have it approved first)"
    )]
    ReviewRequired { task: TaskId },
}

/// `QUEUED`, `ASSIGNED or PENDING_ACK`, `QUEUED, ASSIGNED or PENDING_ACK`.
fn list_states(states: &[TaskStatus]) -> String {
    match states {
        [] => "no state".to_string(),
        [one] => one.to_string(),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(ToString::to_string).collect();
            format!("{} or {last}", init.join(", "))
        }
    }
}

fn assignee_name(assignee: &Option<AgentId>) -> String {
    match assignee {
        Some(agent) => agent.to_string(),
        None => "no agent".to_string(),
    }
}
