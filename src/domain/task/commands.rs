//! What can be asked of a task. Every command carries the time it was issued (`at`)
//! and, when it matters who asks, the actor: `agent` for an agent's own report (checked
//! against the assignee), `by` for a person or for awl itself.

use std::fmt;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::ids::{AgentId, QuestionId, TaskId};
use crate::domain::workspace::{Capabilities, Workspace};
use crate::workflow::model::Runner;

use super::events::{CompletedBy, RequeueReason, RunStepRef};

/// A request to change one task.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskCommand {
    /// Put a new task on the board.
    Queue {
        task_id: TaskId,
        prompt: String,
        required_capabilities: Capabilities,
        workspace: Option<Workspace>,
        agent_hint: Option<AgentId>,
        priority: i32,
        review_required: bool,
        /// Who may take it: awl's own agents, external ones, or either.
        runner: Runner,
        run_step: Option<RunStepRef>,
        at: DateTime<Utc>,
    },
    /// Give a queued task to an agent (the matcher's choice).
    Assign {
        agent: AgentId,
        at: DateTime<Utc>,
    },
    /// Record that the prompt reached the assigned agent, which must ack by `ack_deadline`.
    Deliver {
        agent: AgentId,
        ack_deadline: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// The assigned agent confirms it has the task.
    Ack {
        agent: AgentId,
        at: DateTime<Utc>,
    },
    /// Take the task away from its agent and queue it again.
    Requeue {
        reason: RequeueReason,
        at: DateTime<Utc>,
    },
    ReportProgress {
        agent: AgentId,
        message: String,
        /// 0 to 100.
        percent: Option<u8>,
        at: DateTime<Utc>,
    },
    ReportToolCall {
        agent: AgentId,
        name: String,
        parameters: Value,
        /// What the tool returned, if the agent says (learning finds data flows in it).
        output: Option<Value>,
        duration_ms: u64,
        success: bool,
        /// Whose history the call belongs to (the reporting token's team or user).
        scope: Option<String>,
        at: DateTime<Utc>,
    },
    AskQuestion {
        agent: AgentId,
        question_id: QuestionId,
        question: String,
        at: DateTime<Utc>,
    },
    Answer {
        question_id: QuestionId,
        answer: String,
        by: String,
        at: DateTime<Utc>,
    },
    SubmitForReview {
        agent: AgentId,
        branch: Option<String>,
        commit: Option<String>,
        summary: String,
        at: DateTime<Utc>,
    },
    Approve {
        by: String,
        at: DateTime<Utc>,
    },
    RequestChanges {
        by: String,
        feedback: String,
        at: DateTime<Utc>,
    },
    /// Finish the task with a result. An agent may only complete its own task.
    Complete {
        by: CompletedBy,
        result: Value,
        at: DateTime<Utc>,
    },
    Fail {
        by: String,
        reason: String,
        error_class: Option<String>,
        at: DateTime<Utc>,
    },
    Cancel {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
}

impl TaskCommand {
    /// What the command attempts, for error messages.
    pub fn action(&self) -> TaskAction {
        match self {
            Self::Queue { .. } => TaskAction::Queue,
            Self::Assign { .. } => TaskAction::Assign,
            Self::Deliver { .. } => TaskAction::Deliver,
            Self::Ack { .. } => TaskAction::Ack,
            Self::Requeue { reason, .. } => TaskAction::Requeue(*reason),
            Self::ReportProgress { .. } => TaskAction::ReportProgress,
            Self::ReportToolCall { .. } => TaskAction::ReportToolCall,
            Self::AskQuestion { .. } => TaskAction::AskQuestion,
            Self::Answer { .. } => TaskAction::Answer,
            Self::SubmitForReview { .. } => TaskAction::SubmitForReview,
            Self::Approve { .. } => TaskAction::Approve,
            Self::RequestChanges { .. } => TaskAction::RequestChanges,
            Self::Complete { .. } => TaskAction::Complete,
            Self::Fail { .. } => TaskAction::Fail,
            Self::Cancel { .. } => TaskAction::Cancel,
        }
    }
}

/// The kind of a [`TaskCommand`], without its data: what an error says was attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskAction {
    Queue,
    Assign,
    Deliver,
    Ack,
    Requeue(RequeueReason),
    ReportProgress,
    ReportToolCall,
    AskQuestion,
    Answer,
    SubmitForReview,
    Approve,
    RequestChanges,
    Complete,
    Fail,
    Cancel,
}

impl fmt::Display for TaskAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Queue => f.write_str("queue"),
            Self::Assign => f.write_str("assign"),
            Self::Deliver => f.write_str("deliver"),
            Self::Ack => f.write_str("ack"),
            Self::Requeue(reason) => write!(f, "requeue ({reason})"),
            Self::ReportProgress => f.write_str("report progress"),
            Self::ReportToolCall => f.write_str("report a tool call"),
            Self::AskQuestion => f.write_str("ask a question"),
            Self::Answer => f.write_str("answer"),
            Self::SubmitForReview => f.write_str("submit for review"),
            Self::Approve => f.write_str("approve"),
            Self::RequestChanges => f.write_str("request changes"),
            Self::Complete => f.write_str("complete"),
            Self::Fail => f.write_str("fail"),
            Self::Cancel => f.write_str("cancel"),
        }
    }
}
