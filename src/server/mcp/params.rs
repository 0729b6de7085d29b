//! The arguments of the tools that act on one task or run: the REST body's fields plus
//! the id REST carries in the path. Tools without an id take the REST body type itself
//! (`server::wire`). Unknown fields are refused, as in REST.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::server::wire::ToolCallRequest;

/// An agent's call about one of its tasks.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskCall {
    pub task_id: Uuid,
    /// With an agent token, the token's own agent (the default); an admin names one.
    #[serde(default)]
    pub agent_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProgressParams {
    pub task_id: Uuid,
    #[serde(default)]
    pub agent_id: Option<String>,
    /// What is happening now.
    pub message: String,
    /// 0 to 100.
    #[serde(default)]
    pub percent: Option<u8>,
}

/// One tool call the agent made while working on the task.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToolCallParams {
    pub task_id: Uuid,
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The tool's name (`bash`, `edit_file`, ...).
    pub name: String,
    /// The arguments it was called with.
    #[serde(default)]
    pub parameters: Value,
    /// What the tool returned (optional: learning finds where later calls' arguments
    /// came from in it).
    #[serde(default)]
    pub output: Option<Value>,
    #[serde(default)]
    pub duration_ms: u64,
    pub success: bool,
}

impl ToolCallParams {
    pub fn into_request(self) -> ToolCallRequest {
        ToolCallRequest {
            agent_id: self.agent_id,
            name: self.name,
            parameters: self.parameters,
            output: self.output,
            duration_ms: self.duration_ms,
            success: self.success,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionParams {
    pub task_id: Uuid,
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The question for a person; the task is BLOCKED until it is answered.
    pub question: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitParams {
    pub task_id: Uuid,
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The branch the work is on.
    #[serde(default)]
    pub branch: Option<String>,
    /// The commit to review.
    #[serde(default)]
    pub commit: Option<String>,
    /// What was done, for the reviewer.
    pub summary: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteParams {
    pub task_id: Uuid,
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The result; for a workflow's agent step, the step's output.
    #[serde(default)]
    pub result: Value,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FailParams {
    pub task_id: Uuid,
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Why the task cannot be done.
    pub reason: String,
    /// network, rate_limit, authentication, dependency, validation, timeout, budget, unknown.
    #[serde(default)]
    pub error_class: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerParams {
    pub task_id: Uuid,
    /// The open question's id (default: the task's open question).
    #[serde(default)]
    pub question_id: Option<Uuid>,
    pub answer: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveTaskParams {
    pub task_id: Uuid,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangesParams {
    pub task_id: Uuid,
    /// What to change: shown to whichever agent picks the task up next.
    pub feedback: String,
}

/// Start a run of a registered workflow.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRunParams {
    /// The workflow's name; `name@version` for a given version (default: the latest).
    pub workflow: String,
    #[serde(default)]
    pub inputs: Map<String, Value>,
    /// Calling again with the same key returns the run the first call started.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// The run's priority, -1000 to 1000 (default: the workflow's, else 0).
    #[serde(default)]
    pub priority: Option<i32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    pub run_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RerunParams {
    pub run_id: String,
    /// The top-level step to start again at; the steps before it keep their outputs.
    pub from_step: String,
    /// Inputs to change (a fork); absent: the origin's inputs (a rerun).
    #[serde(default)]
    pub inputs: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ControlRunParams {
    pub run_id: String,
    /// `pause` (no step starts; steps in flight finish), `resume`, or `cancel`.
    pub action: crate::server::operate::RunControl,
    /// Why (recorded with who).
    #[serde(default)]
    pub reason: Option<String>,
}

/// Retire a version of a workflow.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetireVersionParams {
    /// The workflow's name.
    pub workflow: String,
    /// The version to retire.
    pub version: String,
    /// Why (recorded with who).
    pub reason: String,
}

/// Pause or resume a whole workflow.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ControlWorkflowParams {
    /// The workflow's name.
    pub workflow: String,
    /// `pause` (its runs start no new step, new runs start paused) or `resume`.
    pub action: crate::server::operate::WorkflowControl,
    /// Why (recorded with who).
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GateVerdict {
    Approve,
    Reject,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GateParams {
    pub gate_id: String,
    /// `approve` lets the run go on; `reject` applies the gate's `on_reject`.
    pub decision: GateVerdict,
    /// Required to reject: why.
    #[serde(default)]
    pub comment: Option<String>,
}

/// Ask one of awl's own agents.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskAgentParams {
    /// The agent's name.
    pub agent: String,
    /// The question or task.
    pub prompt: String,
}
