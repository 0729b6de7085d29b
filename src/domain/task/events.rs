//! The events of a `task` stream: a permanent wire format.
//!
//! Each variant's serde tag is its dotted event type (`task.queued`), which the store
//! keeps as the row's event type while the inner object becomes the payload. Renaming
//! a tag or reshaping a payload therefore needs a new schema version and an upcaster.

use std::fmt;

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::ids::{AgentId, QuestionId, RunId, StepId, TaskId};
use crate::domain::workspace::{Capabilities, Workspace};
use crate::workflow::model::Runner;

/// Something that happened to one task on the board.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum TaskEvent {
    /// The task was put on the board, waiting for an agent.
    #[serde(rename = "task.queued")]
    Queued {
        task_id: TaskId,
        prompt: String,
        required_capabilities: Capabilities,
        workspace: Option<Workspace>,
        agent_hint: Option<AgentId>,
        priority: i32,
        review_required: bool,
        /// Who may take it (absent: any agent).
        #[serde(default, skip_serializing_if = "Runner::is_any")]
        runner: Runner,
        run_step: Option<RunStepRef>,
        at: DateTime<Utc>,
    },
    /// The board chose an agent for the task.
    #[serde(rename = "task.assigned")]
    Assigned {
        agent_id: AgentId,
        at: DateTime<Utc>,
    },
    /// The prompt was handed to the assigned agent, which must ack before the deadline.
    #[serde(rename = "task.delivered")]
    Delivered {
        agent_id: AgentId,
        ack_deadline: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// The agent confirmed it has the task and started working.
    #[serde(rename = "task.acknowledged")]
    Acknowledged {
        agent_id: AgentId,
        at: DateTime<Utc>,
    },
    /// The task went back to the queue without its agent.
    #[serde(rename = "task.requeued")]
    Requeued {
        reason: RequeueReason,
        previous_agent: Option<AgentId>,
        at: DateTime<Utc>,
    },
    /// The agent said how far it got (the task's state does not change).
    #[serde(rename = "task.progress_reported")]
    ProgressReported {
        agent_id: AgentId,
        message: String,
        percent: Option<u8>,
        at: DateTime<Utc>,
    },
    /// The agent reported one tool call it made (input to analytics and learning).
    #[serde(rename = "task.tool_call_reported")]
    ToolCallReported {
        agent_id: AgentId,
        name: String,
        parameters: Value,
        /// What the tool returned, when the agent said (absent before learning read it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<Value>,
        duration_ms: u64,
        success: bool,
        /// Whose history it belongs to: `team:NAME` or `user:NAME`, from the reporting
        /// token (absent: the agent's own, `user:AGENT`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scope: Option<String>,
        at: DateTime<Utc>,
    },
    /// The agent is blocked until a person answers its question.
    #[serde(rename = "task.question_asked")]
    QuestionAsked {
        agent_id: AgentId,
        question_id: QuestionId,
        question: String,
        at: DateTime<Utc>,
    },
    /// Someone answered the open question; the agent carries on.
    #[serde(rename = "task.question_answered")]
    QuestionAnswered {
        question_id: QuestionId,
        answer: String,
        by: String,
        at: DateTime<Utc>,
    },
    /// The agent finished its work and handed it in for review.
    #[serde(rename = "task.submitted_for_review")]
    SubmittedForReview {
        agent_id: AgentId,
        branch: Option<String>,
        commit: Option<String>,
        summary: String,
        at: DateTime<Utc>,
    },
    /// A reviewer accepted the work.
    #[serde(rename = "task.approved")]
    Approved { by: String, at: DateTime<Utc> },
    /// A reviewer sent the work back to the queue with feedback for the next agent.
    #[serde(rename = "task.changes_requested")]
    ChangesRequested {
        by: String,
        feedback: String,
        at: DateTime<Utc>,
    },
    /// The task is done; `result` becomes the output of the workflow step, if any.
    #[serde(rename = "task.completed")]
    Completed {
        by: CompletedBy,
        result: Value,
        at: DateTime<Utc>,
    },
    /// The task failed for good.
    #[serde(rename = "task.failed")]
    Failed {
        by: String,
        reason: String,
        error_class: Option<String>,
        at: DateTime<Utc>,
    },
    /// The task was withdrawn.
    #[serde(rename = "task.cancelled")]
    Cancelled {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
}

impl TaskEvent {
    /// When the event happened (the time carried by the command that caused it).
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::Queued { at, .. }
            | Self::Assigned { at, .. }
            | Self::Delivered { at, .. }
            | Self::Acknowledged { at, .. }
            | Self::Requeued { at, .. }
            | Self::ProgressReported { at, .. }
            | Self::ToolCallReported { at, .. }
            | Self::QuestionAsked { at, .. }
            | Self::QuestionAnswered { at, .. }
            | Self::SubmittedForReview { at, .. }
            | Self::Approved { at, .. }
            | Self::ChangesRequested { at, .. }
            | Self::Completed { at, .. }
            | Self::Failed { at, .. }
            | Self::Cancelled { at, .. } => *at,
        }
    }
}

impl DomainEvent for TaskEvent {
    fn event_type(&self) -> String {
        match self {
            Self::Queued { .. } => "task.queued",
            Self::Assigned { .. } => "task.assigned",
            Self::Delivered { .. } => "task.delivered",
            Self::Acknowledged { .. } => "task.acknowledged",
            Self::Requeued { .. } => "task.requeued",
            Self::ProgressReported { .. } => "task.progress_reported",
            Self::ToolCallReported { .. } => "task.tool_call_reported",
            Self::QuestionAsked { .. } => "task.question_asked",
            Self::QuestionAnswered { .. } => "task.question_answered",
            Self::SubmittedForReview { .. } => "task.submitted_for_review",
            Self::Approved { .. } => "task.approved",
            Self::ChangesRequested { .. } => "task.changes_requested",
            Self::Completed { .. } => "task.completed",
            Self::Failed { .. } => "task.failed",
            Self::Cancelled { .. } => "task.cancelled",
        }
        .to_string()
    }

    fn event_version(&self) -> String {
        "1".to_string()
    }
}

/// The types of the events that end a task (`task.completed`, `task.failed`,
/// `task.cancelled`): a finished task takes no more events.
pub const FINISHED_EVENT_TYPES: [&str; 3] = ["task.completed", "task.failed", "task.cancelled"];

/// The workflow step (and which attempt of it) a task was queued for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStepRef {
    pub run_id: RunId,
    pub step_id: StepId,
    pub attempt: u32,
    /// The run's workflow (absent in tasks queued before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
}

/// Why a task went back to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequeueReason {
    /// The prompt was delivered but the agent did not ack before the deadline.
    AckTimeout,
    /// The agent stopped heart-beating (or was retired) while holding the task.
    AgentLost,
    /// The prompt could not be handed to the agent.
    DeliveryFailed,
}

impl fmt::Display for RequeueReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::AckTimeout => "ack timeout",
            Self::AgentLost => "agent lost",
            Self::DeliveryFailed => "delivery failed",
        })
    }
}

/// Who completed a task: the agent working on it, or a person (or awl itself).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletedBy {
    Agent(AgentId),
    User(String),
}

impl fmt::Display for CompletedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Agent(agent) => write!(f, "agent {agent}"),
            Self::User(by) => f.write_str(by),
        }
    }
}
