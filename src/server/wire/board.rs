//! What clients send to the board over REST and MCP, and the shapes only those two
//! interfaces return.
//!
//! Requests refuse unknown fields (a misspelt field is an error, not silently
//! ignored) and are turned into the board's own inputs ([`NewTask`], [`ToolCall`]) at
//! this edge; every shape has a JSON Schema, which the OpenAPI document and the MCP
//! tool list publish.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::board::views::{TaskView, WorkspaceBody};
use crate::board::{NewTask, ToolCall};
use crate::domain::ids::AgentId;
use crate::domain::workspace::{Capabilities, Workspace};

use crate::server::error::ApiError;

/// Put a task on the board.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendTaskRequest {
    /// What the agent is asked to do.
    pub prompt: String,
    /// Capabilities an agent must have to take the task (`rust`, `db`).
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Where the work happens; agents already there are preferred.
    #[serde(default)]
    pub workspace: Option<WorkspaceBody>,
    /// An agent the task is kept for first (others may take it after a grace period).
    #[serde(default)]
    pub agent_hint: Option<String>,
    /// Higher goes first (default 0).
    #[serde(default)]
    pub priority: i32,
    /// The work must be approved by a reviewer before the task completes.
    #[serde(default)]
    pub review_required: bool,
    /// Who may take it: `any` agent (default), only awl's own (`builtin`), or only
    /// `external` ones.
    #[serde(
        default,
        skip_serializing_if = "crate::workflow::model::Runner::is_any"
    )]
    pub runner: crate::workflow::model::Runner,
}

/// Register an agent, or update its registration (idempotent).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// The agent's name (letters, digits, `-_.:/`). With an agent token, the token's name.
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub capabilities: Vec<String>,
    #[serde(default)]
    pub workspace: Option<WorkspaceBody>,
}

/// Wait for a task: returns as soon as one is reserved for the agent, or with no task
/// when the timeout ends.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WaitRequest {
    #[serde(default)]
    pub agent_id: Option<String>,
    /// How long to wait, in seconds (capped by the server; default 30).
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
}

/// An agent's call about its own task (ack).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentCall {
    #[serde(default)]
    pub agent_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgressRequest {
    #[serde(default)]
    pub agent_id: Option<String>,
    pub message: String,
    /// 0 to 100.
    #[serde(default)]
    pub percent: Option<u8>,
}

/// One tool call the agent made: the raw material for learned workflows.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallRequest {
    #[serde(default)]
    pub agent_id: Option<String>,
    pub name: String,
    #[serde(default)]
    pub parameters: Value,
    /// What the tool returned (optional; learning finds data flowing from it into
    /// later calls' arguments; kept when at most 4 KB).
    #[serde(default)]
    pub output: Option<Value>,
    #[serde(default)]
    pub duration_ms: u64,
    pub success: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionRequest {
    #[serde(default)]
    pub agent_id: Option<String>,
    pub question: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerRequest {
    /// The open question's id (optional: the task's open question).
    #[serde(default)]
    pub question_id: Option<Uuid>,
    pub answer: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub branch: Option<String>,
    #[serde(default)]
    pub commit: Option<String>,
    pub summary: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveRequest {
    #[serde(default)]
    pub comment: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangesRequest {
    /// What to change: shown to whichever agent picks the task up next.
    pub feedback: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteRequest {
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The result; for a workflow's agent step, the step's output.
    #[serde(default)]
    pub result: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailRequest {
    #[serde(default)]
    pub agent_id: Option<String>,
    pub reason: String,
    /// network, rate_limit, authentication, dependency, validation, timeout, budget, unknown.
    #[serde(default)]
    pub error_class: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    pub reason: String,
}

/// What `wait_for_prompt` returns: a task reserved for the agent, or none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WaitResult {
    /// The task, now PENDING_ACK for this agent: ack it before `ack_deadline`.
    pub task: Option<TaskView>,
    /// Seconds waited.
    pub waited_seconds: f64,
}

impl TryFrom<SendTaskRequest> for NewTask {
    type Error = ApiError;
    fn try_from(r: SendTaskRequest) -> Result<Self, ApiError> {
        let agent_hint = r
            .agent_hint
            .as_deref()
            .map(AgentId::try_from)
            .transpose()
            .map_err(|e| ApiError::invalid(e.to_string()))?;
        Ok(NewTask {
            prompt: r.prompt,
            capabilities: Capabilities::new(&r.capabilities),
            workspace: r.workspace.map(Workspace::from),
            agent_hint,
            priority: r.priority,
            review_required: r.review_required,
            runner: r.runner,
        })
    }
}

impl ToolCallRequest {
    /// The call, recorded in `scope` (the caller's).
    pub fn into_call(self, scope: String) -> ToolCall {
        ToolCall {
            name: self.name,
            parameters: self.parameters,
            output: self.output,
            duration_ms: self.duration_ms,
            success: self.success,
            scope: Some(scope),
        }
    }
}

/// Filters of the task listing (REST query parameters, MCP `list_tasks` arguments).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskListParams {
    /// Comma-separated statuses (QUEUED,IN_PROGRESS,...).
    #[serde(default)]
    pub status: Option<String>,
    /// Only tasks held by this agent.
    #[serde(default)]
    pub agent: Option<String>,
    /// Only tasks of this run.
    #[serde(default)]
    pub run_id: Option<String>,
    /// The `next` of the previous page.
    #[serde(default)]
    pub after: Option<String>,
    /// Page size, 1 to 1000 (default 100).
    #[serde(default)]
    pub limit: Option<usize>,
}
