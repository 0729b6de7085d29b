//! What the board shows: tasks, agents, pages and histories, as REST and MCP return
//! them.
//!
//! These are the API's contract, kept apart from the domain's types so the domain can
//! change without breaking clients; every shape has a JSON Schema, which the OpenAPI
//! document and the MCP tool list publish. (What clients *send* is the server's:
//! `server::wire`.)

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::agent::Agent;
use crate::domain::task::{Task, TaskEnding};
use crate::domain::workspace::Workspace;

/// A repository (`org/app`) and optionally a branch: metadata only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceBody {
    pub repository: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

impl From<WorkspaceBody> for Workspace {
    fn from(w: WorkspaceBody) -> Self {
        Workspace {
            repository: w.repository,
            branch: w.branch,
        }
    }
}

impl From<&Workspace> for WorkspaceBody {
    fn from(w: &Workspace) -> Self {
        WorkspaceBody {
            repository: w.repository.clone(),
            branch: w.branch.clone(),
        }
    }
}

/// A task as the board shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskView {
    pub task_id: Uuid,
    pub status: String,
    pub prompt: String,
    pub capabilities: Vec<String>,
    pub workspace: Option<WorkspaceBody>,
    pub agent_hint: Option<String>,
    pub priority: i32,
    pub review_required: bool,
    /// The workflow run and step this task does, if a run queued it.
    pub run_id: Option<Uuid>,
    pub step_id: Option<String>,
    /// The workflow of that run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// The agent holding the task (or the last one, once it ended).
    pub assignee: Option<String>,
    pub ack_deadline: Option<DateTime<Utc>>,
    pub open_question: Option<QuestionView>,
    /// The latest work handed in for review.
    pub submission: Option<SubmissionView>,
    /// Every "changes requested", oldest first: read it before starting.
    pub feedback: Vec<FeedbackView>,
    pub review_rounds: u32,
    /// How many times it was given to an agent.
    pub attempts: u32,
    pub result: Option<Value>,
    /// How it ended: `COMPLETED by agent x`, `FAILED by ...: reason`.
    pub ending: Option<String>,
    pub error_class: Option<String>,
    pub queued_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    /// The task stream's version (the number of its events).
    pub version: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuestionView {
    pub question_id: Uuid,
    pub question: String,
    pub asked_by: String,
    pub asked_at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubmissionView {
    pub agent_id: String,
    pub branch: Option<String>,
    pub commit: Option<String>,
    pub summary: String,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FeedbackView {
    pub round: u32,
    pub by: String,
    pub feedback: String,
    pub at: DateTime<Utc>,
}

/// A prompt as a view without keys shows it: personal data sealed in it (a run's
/// task) reads `[personal]`; `Board::opened` opens it where a person or agent asks.
fn hidden_prompt(prompt: &str) -> String {
    let mut shown = prompt.to_string();
    crate::vault::reveal_string(
        &mut shown,
        &crate::vault::Keys::new(),
        crate::vault::Reveal::Hidden,
    );
    shown
}

impl TaskView {
    pub fn of(task: &Task, version: i64) -> Self {
        let run_step = task.run_step();
        let error_class = match task.ending() {
            Some(TaskEnding::Failed { error_class, .. }) => error_class.clone(),
            _ => None,
        };
        TaskView {
            task_id: task.id().unwrap_or_default().as_uuid(),
            status: task
                .status()
                .map(|s| s.as_str())
                .unwrap_or("NONE")
                .to_string(),
            prompt: hidden_prompt(task.prompt()),
            capabilities: task
                .required_capabilities()
                .iter()
                .map(str::to_string)
                .collect(),
            workspace: task.workspace().map(WorkspaceBody::from),
            agent_hint: task.agent_hint().map(|a| a.to_string()),
            priority: task.priority(),
            review_required: task.review_required(),
            run_id: run_step.map(|r| r.run_id.as_uuid()),
            step_id: run_step.map(|r| r.step_id.to_string()),
            workflow: run_step.and_then(|r| r.workflow.clone()),
            assignee: task.assignee().map(|a| a.to_string()),
            ack_deadline: task.ack_deadline(),
            open_question: task.open_question().map(|q| QuestionView {
                question_id: q.question_id.as_uuid(),
                question: q.question.clone(),
                asked_by: q.asked_by.to_string(),
                asked_at: q.asked_at,
            }),
            submission: task.submission().map(|s| SubmissionView {
                agent_id: s.agent_id.to_string(),
                branch: s.branch.clone(),
                commit: s.commit.clone(),
                summary: s.summary.clone(),
                at: s.at,
            }),
            feedback: task
                .feedback()
                .iter()
                .map(|f| FeedbackView {
                    round: f.round,
                    by: f.by.clone(),
                    feedback: f.feedback.clone(),
                    at: f.at,
                })
                .collect(),
            review_rounds: task.review_rounds(),
            attempts: task.attempts(),
            result: task.result().cloned(),
            ending: task.ending().map(ToString::to_string),
            error_class,
            queued_at: task.queued_at(),
            updated_at: task.updated_at(),
            version,
        }
    }
}

/// An agent as the board shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentView {
    pub agent_id: String,
    /// ACTIVE or RETIRED.
    pub status: String,
    pub capabilities: Vec<String>,
    pub workspace: Option<WorkspaceBody>,
    pub registered_at: Option<DateTime<Utc>>,
    /// When it last called the board (this server's knowledge).
    pub last_seen: Option<DateTime<Utc>>,
    pub version: i64,
    /// One of awl's own agents (run by the built-in runner).
    #[serde(default)]
    pub builtin: bool,
}

impl AgentView {
    pub fn of(agent: &Agent, version: i64, last_seen: Option<DateTime<Utc>>) -> Self {
        AgentView {
            agent_id: agent.id().map(|a| a.to_string()).unwrap_or_default(),
            status: agent
                .status()
                .map(|s| s.as_str())
                .unwrap_or("NONE")
                .to_string(),
            capabilities: agent.capabilities().iter().map(str::to_string).collect(),
            workspace: agent.workspace().map(WorkspaceBody::from),
            registered_at: agent.registered_at(),
            last_seen,
            version,
            builtin: agent.is_builtin(),
        }
    }
}

/// A page of tasks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskPage {
    pub tasks: Vec<TaskView>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next: Option<String>,
}

/// One event of a task's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryEntry {
    pub position: i64,
    pub version: i64,
    pub event_type: String,
    pub actor: Option<String>,
    pub recorded_at: DateTime<Utc>,
    pub payload: Value,
}
