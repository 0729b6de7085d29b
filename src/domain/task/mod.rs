//! The `task` stream: one unit of agent work on the board, from queued to finished.
//!
//! Agents pull work, so a task moves through a hand-shake before anyone works on it:
//! the board assigns it (QUEUED -> ASSIGNED), hands the prompt over (-> PENDING_ACK)
//! and waits for the agent's ack (-> IN_PROGRESS). A task whose agent never acks, or
//! disappears, is requeued, so no work is lost to a crashed agent. While working the
//! agent reports progress and tool calls, may block on a question, and submits for
//! review; a reviewer approves or sends it back to the queue with feedback, which the
//! state keeps so the next agent sees it. COMPLETED, FAILED and CANCELLED are final.
//!
//! Every rule lives in [`Task::decide`](crate::domain::Decide::decide) (`decide.rs`);
//! `apply` only records what happened. Time is data: the ack deadline is compared with
//! the `at` of the command, never with a clock.

mod commands;
mod decide;
mod error;
mod events;
#[cfg(test)]
mod tests;

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::ids::{AgentId, QuestionId, TaskId};
use crate::domain::workspace::{Capabilities, Workspace};
pub use crate::workflow::model::Runner;

pub use commands::{TaskAction, TaskCommand};
pub use error::TaskError;
pub use events::{CompletedBy, FINISHED_EVENT_TYPES, RequeueReason, RunStepRef, TaskEvent};

/// Where a task is in its life. A task that was never queued has no status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    Queued,
    Assigned,
    PendingAck,
    InProgress,
    Blocked,
    InReview,
    Approved,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    /// Every status, in the order of the happy path (then the other endings).
    pub const ALL: [TaskStatus; 10] = [
        Self::Queued,
        Self::Assigned,
        Self::PendingAck,
        Self::InProgress,
        Self::Blocked,
        Self::InReview,
        Self::Approved,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The statuses a task can still leave: QUEUED up to APPROVED.
    pub const ACTIVE: [TaskStatus; 7] = [
        Self::Queued,
        Self::Assigned,
        Self::PendingAck,
        Self::InProgress,
        Self::Blocked,
        Self::InReview,
        Self::Approved,
    ];

    /// Still on the board: it can move on, fail or be cancelled.
    pub fn is_active(self) -> bool {
        !self.is_terminal()
    }

    /// COMPLETED, FAILED or CANCELLED: nothing changes any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The name used on the wire and in messages (`PENDING_ACK`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "QUEUED",
            Self::Assigned => "ASSIGNED",
            Self::PendingAck => "PENDING_ACK",
            Self::InProgress => "IN_PROGRESS",
            Self::Blocked => "BLOCKED",
            Self::InReview => "IN_REVIEW",
            Self::Approved => "APPROVED",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
            Self::Cancelled => "CANCELLED",
        }
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The question a BLOCKED task waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenQuestion {
    pub question_id: QuestionId,
    pub question: String,
    pub asked_by: AgentId,
    pub asked_at: DateTime<Utc>,
}

/// What the agent handed in for review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub agent_id: AgentId,
    pub branch: Option<String>,
    pub commit: Option<String>,
    pub summary: String,
    pub at: DateTime<Utc>,
}

/// One "changes requested" from a reviewer, kept for the agents that come next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewFeedback {
    /// The review round it answered (1 for the first submission).
    pub round: u32,
    pub by: String,
    pub feedback: String,
    pub at: DateTime<Utc>,
}

/// How a finished task ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskEnding {
    Completed {
        by: CompletedBy,
        at: DateTime<Utc>,
    },
    Failed {
        by: String,
        reason: String,
        error_class: Option<String>,
        at: DateTime<Utc>,
    },
    Cancelled {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
}

impl TaskEnding {
    /// The terminal status this ending leaves the task in.
    pub fn status(&self) -> TaskStatus {
        match self {
            Self::Completed { .. } => TaskStatus::Completed,
            Self::Failed { .. } => TaskStatus::Failed,
            Self::Cancelled { .. } => TaskStatus::Cancelled,
        }
    }
}

impl fmt::Display for TaskEnding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Completed { by, .. } => write!(f, "COMPLETED by {by}"),
            Self::Failed {
                by,
                reason,
                error_class: Some(class),
                ..
            } => write!(f, "FAILED ({class}) by {by}: {reason}"),
            Self::Failed { by, reason, .. } => write!(f, "FAILED by {by}: {reason}"),
            Self::Cancelled { by, reason, .. } => write!(f, "CANCELLED by {by}: {reason}"),
        }
    }
}

/// One task: the state folded from its stream.
///
/// Fields are private so the state only changes through `apply`; read it through the
/// accessors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Task {
    task_id: Option<TaskId>,
    status: Option<TaskStatus>,
    prompt: String,
    required_capabilities: Capabilities,
    workspace: Option<Workspace>,
    agent_hint: Option<AgentId>,
    priority: i32,
    review_required: bool,
    runner: Runner,
    run_step: Option<RunStepRef>,
    assignee: Option<AgentId>,
    ack_deadline: Option<DateTime<Utc>>,
    open_question: Option<OpenQuestion>,
    submission: Option<Submission>,
    feedback: Vec<ReviewFeedback>,
    review_rounds: u32,
    attempts: u32,
    result: Option<Value>,
    ending: Option<TaskEnding>,
    queued_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
}

impl Task {
    /// The task's id, once it was queued.
    pub fn id(&self) -> Option<TaskId> {
        self.task_id
    }

    /// Where the task is; `None` before it was queued.
    pub fn status(&self) -> Option<TaskStatus> {
        self.status
    }

    /// COMPLETED, FAILED or CANCELLED.
    pub fn is_terminal(&self) -> bool {
        self.status.is_some_and(TaskStatus::is_terminal)
    }

    pub fn prompt(&self) -> &str {
        &self.prompt
    }

    pub fn required_capabilities(&self) -> &Capabilities {
        &self.required_capabilities
    }

    pub fn workspace(&self) -> Option<&Workspace> {
        self.workspace.as_ref()
    }

    pub fn agent_hint(&self) -> Option<&AgentId> {
        self.agent_hint.as_ref()
    }

    pub fn priority(&self) -> i32 {
        self.priority
    }

    pub fn review_required(&self) -> bool {
        self.review_required
    }

    /// Who may take it.
    pub fn runner(&self) -> Runner {
        self.runner
    }

    /// The workflow step this task does, when a run queued it.
    pub fn run_step(&self) -> Option<&RunStepRef> {
        self.run_step.as_ref()
    }

    /// The agent holding the task (from ASSIGNED until it is requeued or sent back;
    /// kept after the task finishes, as the last agent that worked on it).
    pub fn assignee(&self) -> Option<&AgentId> {
        self.assignee.as_ref()
    }

    /// Until when the agent may ack (PENDING_ACK only).
    pub fn ack_deadline(&self) -> Option<DateTime<Utc>> {
        self.ack_deadline
    }

    /// The question a BLOCKED task waits on.
    pub fn open_question(&self) -> Option<&OpenQuestion> {
        self.open_question.as_ref()
    }

    /// The latest work handed in for review (kept when changes are requested, so the
    /// next agent can start from it).
    pub fn submission(&self) -> Option<&Submission> {
        self.submission.as_ref()
    }

    /// Every "changes requested", oldest first.
    pub fn feedback(&self) -> &[ReviewFeedback] {
        &self.feedback
    }

    /// How many times the task was submitted for review.
    pub fn review_rounds(&self) -> u32 {
        self.review_rounds
    }

    /// How many times the task was assigned to an agent.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The result of a COMPLETED task.
    pub fn result(&self) -> Option<&Value> {
        self.result.as_ref()
    }

    /// How a finished task ended.
    pub fn ending(&self) -> Option<&TaskEnding> {
        self.ending.as_ref()
    }

    pub fn queued_at(&self) -> Option<DateTime<Utc>> {
        self.queued_at
    }

    /// The time of the last event.
    pub fn updated_at(&self) -> Option<DateTime<Utc>> {
        self.updated_at
    }
}

crate::domain::impl_aggregate!(Task, "task", TaskCommand, TaskEvent, TaskError);

impl Task {
    /// Fold one event into the state (`Aggregate::apply`): it records what happened and
    /// never fails, since `decide` already refused whatever was not allowed.
    fn apply_event(&mut self, event: TaskEvent) {
        self.updated_at = Some(event.at());
        match event {
            TaskEvent::Queued {
                task_id,
                prompt,
                required_capabilities,
                workspace,
                agent_hint,
                priority,
                review_required,
                runner,
                run_step,
                at,
            } => {
                *self = Task {
                    task_id: Some(task_id),
                    status: Some(TaskStatus::Queued),
                    prompt,
                    required_capabilities,
                    workspace,
                    agent_hint,
                    priority,
                    review_required,
                    runner,
                    run_step,
                    queued_at: Some(at),
                    updated_at: Some(at),
                    ..Task::default()
                };
            }
            TaskEvent::Assigned { agent_id, .. } => {
                self.status = Some(TaskStatus::Assigned);
                self.assignee = Some(agent_id);
                self.attempts = self.attempts.saturating_add(1);
            }
            TaskEvent::Delivered { ack_deadline, .. } => {
                self.status = Some(TaskStatus::PendingAck);
                self.ack_deadline = Some(ack_deadline);
            }
            TaskEvent::Acknowledged { .. } => {
                self.status = Some(TaskStatus::InProgress);
                self.ack_deadline = None;
            }
            TaskEvent::Requeued { .. } => {
                self.status = Some(TaskStatus::Queued);
                self.assignee = None;
                self.ack_deadline = None;
                self.open_question = None;
            }
            TaskEvent::ProgressReported { .. } | TaskEvent::ToolCallReported { .. } => {}
            TaskEvent::QuestionAsked {
                agent_id,
                question_id,
                question,
                at,
            } => {
                self.status = Some(TaskStatus::Blocked);
                self.open_question = Some(OpenQuestion {
                    question_id,
                    question,
                    asked_by: agent_id,
                    asked_at: at,
                });
            }
            TaskEvent::QuestionAnswered { .. } => {
                self.status = Some(TaskStatus::InProgress);
                self.open_question = None;
            }
            TaskEvent::SubmittedForReview {
                agent_id,
                branch,
                commit,
                summary,
                at,
            } => {
                self.status = Some(TaskStatus::InReview);
                self.review_rounds = self.review_rounds.saturating_add(1);
                self.submission = Some(Submission {
                    agent_id,
                    branch,
                    commit,
                    summary,
                    at,
                });
            }
            TaskEvent::Approved { .. } => {
                self.status = Some(TaskStatus::Approved);
            }
            TaskEvent::ChangesRequested { by, feedback, at } => {
                self.status = Some(TaskStatus::Queued);
                self.assignee = None;
                self.feedback.push(ReviewFeedback {
                    round: self.review_rounds,
                    by,
                    feedback,
                    at,
                });
            }
            TaskEvent::Completed { by, result, at } => {
                self.status = Some(TaskStatus::Completed);
                self.result = Some(result);
                self.ending = Some(TaskEnding::Completed { by, at });
            }
            TaskEvent::Failed {
                by,
                reason,
                error_class,
                at,
            } => {
                self.status = Some(TaskStatus::Failed);
                self.ack_deadline = None;
                self.open_question = None;
                self.ending = Some(TaskEnding::Failed {
                    by,
                    reason,
                    error_class,
                    at,
                });
            }
            TaskEvent::Cancelled { by, reason, at } => {
                self.status = Some(TaskStatus::Cancelled);
                self.ack_deadline = None;
                self.open_question = None;
                self.ending = Some(TaskEnding::Cancelled { by, reason, at });
            }
        }
    }
}
