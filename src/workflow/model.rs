//! A workflow file, as Rust types.
//!
//! These types are the single definition of the workflow language: the JSON Schema
//! that awl publishes (and validates every file against) is generated from them
//! (`schema.rs`), and a file that passes validation deserialises into them. Field
//! docs become the schema's descriptions, so they are written for workflow authors.
//!
//! Strings that may hold expressions (`${{ inputs.repo }}`, `$steps.build.outputs.url`)
//! are kept as written here; they are checked by `rules.rs` when a file is loaded and
//! rendered by the engine (`engine/render.rs`), never spliced into shell or SQL text.

pub mod index;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An awl workflow: typed inputs, steps run durably in order, and what to do on
/// failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "awl workflow")]
pub struct Workflow {
    /// The workflow's name, unique in a store: letters, digits, `-`, `_` and `.`.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"))]
    pub name: String,
    /// The version of this definition, `MAJOR.MINOR.PATCH` (quote it in YAML: "1.0.0").
    #[schemars(regex(pattern = r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$"))]
    pub version: String,
    /// What the workflow is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The values a run is started with, by name (`${{ inputs.NAME }}`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, InputSpec>,
    /// Whose personal data a run carries: a template over the inputs
    /// (`"customer:${{ inputs.customer_id }}"`). Required when an input is
    /// `personal`; `awl forget` takes the same text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The whole run fails with a `timeout` error after this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<u64>,
    /// The run stops (or, with a `budget` handler that escalates, asks a person)
    /// once its cost goes over this. Steps report cost as `cost_usd` and `tokens` in
    /// their JSON result: a shell step's JSON stdout, an HTTP step's JSON body, an
    /// agent's task result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub cost_budget_usd: Option<f64>,
    /// Plain-language rules for the agents working on this workflow's tasks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
    /// What to do about a failed step, by error class, when the step has no handler
    /// of its own for that class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_handlers: Vec<ErrorHandler>,
    /// Tools declared in this file, usable by `tool` steps like built-in ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// The steps, run in order (`parallel` and `conditional` steps nest more).
    #[schemars(length(min = 1))]
    pub steps: Vec<Step>,
    /// Steps run after the run succeeded (their failure does not change the outcome).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_success: Vec<Step>,
    /// Steps run when the run fails, before the compensations run (their failure does
    /// not change the outcome).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_failure: Vec<Step>,
    /// The run's outputs, by name: values or templates over inputs and step outputs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub outputs: BTreeMap<String, Value>,
    /// When runs start by themselves: cron patterns in a time zone, or intervals.
    /// The latest runnable version's schedules are the workflow's; `awl serve` fires
    /// them, once per time across all servers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<super::schedule::ScheduleSpec>,
    /// The priority of its runs (default 0; -1000 to 1000, higher first): among runs
    /// due at once, and runs waiting for a concurrency slot. A start may give its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1000, max = 1000))]
    pub priority: Option<i32>,
    /// How many of its runs may be on their way at once, in all and per key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<super::flow::ConcurrencySpec>,
    /// Starts with the same key within a window join the first one's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce: Option<super::flow::DebounceSpec>,
    /// Webhooks that start its runs (`POST /api/v1/hooks/NAME`, HMAC-signed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<super::flow::HookSpec>,
    /// How fast steps may call what they call: calls per second and burst, shared
    /// by every worker (and every workflow declaring the same name). A step takes a
    /// token before each attempt; one that must wait is THROTTLED until its token's
    /// time, which is not a failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rate_limits: Vec<super::flow::RateLimitSpec>,
    /// Which of its runs' notices go to which channel of the chat file (`awl serve
    /// --chat-config`), besides the chat file's own routes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chat: Vec<ChatRoute>,
    /// What the engine asks of the steps on every tick, worked out once
    /// (`model/index.rs`); not part of the language.
    #[serde(skip)]
    #[schemars(skip)]
    index: index::IndexCell,
}

impl Workflow {
    /// Every step's id, which are hooks, and what each step's templates refer to,
    /// computed on first use and kept.
    pub fn index(&self) -> &index::StepIndex {
        self.index.get_or_init(self)
    }
}

/// Notices of `events` go to chat channel `channel` (a name of the chat file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChatRoute {
    #[schemars(length(min = 1))]
    pub events: Vec<ChatNotice>,
    pub channel: String,
}

/// What can be told in chat.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChatNotice {
    /// A run failed.
    RunFailed,
    /// A gate waits for a decision (with Approve and Reject buttons).
    GateWaiting,
    /// A task is BLOCKED with a question (answered from a form or a thread reply).
    TaskBlocked,
    /// Work was submitted for review (with Approve and Request changes buttons).
    ReviewRequested,
}

impl ChatNotice {
    pub const ALL: [ChatNotice; 4] = [
        Self::RunFailed,
        Self::GateWaiting,
        Self::TaskBlocked,
        Self::ReviewRequested,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunFailed => "run_failed",
            Self::GateWaiting => "gate_waiting",
            Self::TaskBlocked => "task_blocked",
            Self::ReviewRequested => "review_requested",
        }
    }
}

/// One input of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InputSpec {
    /// The JSON type the value must have.
    #[serde(rename = "type", default)]
    pub kind: InputType,
    /// A run cannot start without this input (unless it has a default).
    #[serde(default)]
    pub required: bool,
    /// The value used when a run does not give one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A secret (an API key, a password): stored sealed in the run's first event and
    /// shown as `[redacted]` wherever it would appear (step outputs and errors, gate
    /// messages, task prompts, the run's outputs, logs and traces).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
    /// Personal data of the run's `subject`: sealed under the subject's key, and so is
    /// every later text of the run that contains it; `awl forget SUBJECT` erases it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub personal: bool,
}

/// The type of an input value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputType {
    #[default]
    String,
    Integer,
    Number,
    Boolean,
    Object,
    Array,
    /// Any JSON value.
    Any,
}

impl InputType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Object => "object",
            Self::Array => "array",
            Self::Any => "any",
        }
    }
}

/// The fields every step has, whatever its type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepCommon {
    /// Unique in the workflow; how other steps refer to this one
    /// (`${{ steps.ID.outputs.x }}`). Letters, digits, `_` and `-`.
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"))]
    pub id: String,
    /// A human name for timelines and the board.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Run the step only when this expression is true; otherwise it is skipped.
    #[serde(rename = "if", default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
    /// How often and how fast to try again when the step fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// One attempt fails with a `timeout` error after this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<u64>,
    /// What a failure (after retries) does to the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
    /// Handlers for this step's failures, by error class (before the workflow's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub error_handlers: Vec<ErrorHandler>,
    /// A step that undoes this one; run, in reverse order of success, when the run
    /// fails (saga). It is a `tool`, `shell`, `http`, `database` or `notify` step,
    /// performed once: no `if`, `retry`, `on_error`, handlers or `compensate` of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensate: Option<Box<Step>>,
    /// The rate limit (a name under `rate_limits:`) this step takes a token of
    /// before each attempt. Only steps awl performs itself: `tool`, `shell`, `http`,
    /// `database`, `notify`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<String>,
}

/// One step of a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    #[serde(flatten)]
    pub common: StepCommon,
    #[serde(flatten)]
    pub kind: StepKind,
}

impl Step {
    pub fn id(&self) -> &str {
        &self.common.id
    }

    /// The steps nested inside this one (branches, if_true / if_false), not counting
    /// its compensation.
    pub fn children(&self) -> Vec<&Step> {
        match &self.kind {
            StepKind::Conditional(c) => c.if_true.iter().chain(&c.if_false).collect(),
            StepKind::Parallel(p) => p.branches.iter().flat_map(|b| &b.steps).collect(),
            _ => Vec::new(),
        }
    }
}

/// What a step does, by its `type`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StepKind {
    Tool(ToolStep),
    Shell(ShellStep),
    Http(HttpStep),
    Agent(AgentStep),
    Gate(GateStep),
    Conditional(ConditionalStep),
    Parallel(ParallelStep),
    Database(DatabaseStep),
    Notify(NotifyStep),
    Workflow(SubWorkflowStep),
}

impl StepKind {
    /// Every step type, as written in files.
    pub const TYPES: [&'static str; 10] = [
        "tool",
        "shell",
        "http",
        "agent",
        "gate",
        "conditional",
        "parallel",
        "database",
        "notify",
        "workflow",
    ];

    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Tool(_) => "tool",
            Self::Shell(_) => "shell",
            Self::Http(_) => "http",
            Self::Agent(_) => "agent",
            Self::Gate(_) => "gate",
            Self::Conditional(_) => "conditional",
            Self::Parallel(_) => "parallel",
            Self::Database(_) => "database",
            Self::Notify(_) => "notify",
            Self::Workflow(_) => "workflow",
        }
    }
}

/// Run a tool: a built-in, one declared under `tools:`, or one of the tool registry
/// (a tool of the tools directory, or an MCP server's `SERVER__TOOL`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolStep {
    /// The tool's name.
    pub tool: String,
    /// The tool's arguments; values may be templates.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub inputs: serde_json::Map<String, Value>,
}

/// Run a process. Values reach it as arguments or environment variables, never
/// spliced into the script: templates are refused in `script`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ShellStep {
    /// The program and its arguments, one list item each (no shell involved); items
    /// may be templates. Give either `command` or `script`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub command: Option<Vec<String>>,
    /// A script for `shell` (default `sh`), run as `sh -c SCRIPT awl ARGS...`: it reads
    /// values from `"$1"`, `"$2"`... or from environment variables. No templates here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// The interpreter for `script`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Arguments after the command (or the script's `$1`, `$2`...); may be templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Environment variables for the process; values may be templates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The working directory: absolute, or relative to the directory the worker
    /// (`awl worker`, or `awl run`) was started in, which is also the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// Text written to the process's standard input; may be a template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Keep at most this many bytes of stdout and of stderr (default 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_output_bytes: Option<u64>,
    /// Exit codes that count as success (default: 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub success_exit_codes: Vec<i32>,
}

/// An HTTP request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HttpStep {
    #[serde(default)]
    pub method: HttpMethod,
    /// The URL; may be a template.
    pub url: String,
    /// Request headers; values may be templates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// A JSON body (templates inside are rendered), sent as application/json.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// Statuses that count as success (default: any 2xx).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expect_status: Vec<u16>,
    /// Keep at most this many bytes of the response body (default 1 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_response_bytes: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum HttpMethod {
    #[default]
    Get,
    Post,
    Put,
    Patch,
    Delete,
    Head,
}

impl HttpMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "GET",
            Self::Post => "POST",
            Self::Put => "PUT",
            Self::Patch => "PATCH",
            Self::Delete => "DELETE",
            Self::Head => "HEAD",
        }
    }
}

/// Work for an external agent: a task on the board; the step waits for it to end
/// and its result becomes the step's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentStep {
    /// What the agent is asked to do; may be a template.
    pub prompt: String,
    /// Capabilities the agent must have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    /// Where the work is to be done (metadata; the server never touches files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceSpec>,
    /// Prefer this agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_hint: Option<String>,
    /// Higher is handed out first.
    #[serde(default)]
    pub priority: i32,
    /// The agent's submission must be approved by a person.
    #[serde(default)]
    pub review_required: bool,
    /// Who may take the task: `any` agent (the default), only awl's own `builtin`
    /// agents, or only `external` ones.
    #[serde(default, skip_serializing_if = "Runner::is_any")]
    pub runner: Runner,
}

/// Who may take a task: awl's own agents, external ones, or either.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Runner {
    /// Any agent whose capabilities cover the task's.
    #[default]
    Any,
    /// Only awl's own agents (agent definitions run by the built-in runner).
    Builtin,
    /// Only agents outside awl, pulling work over MCP or HTTP.
    External,
}

impl Runner {
    pub fn is_any(&self) -> bool {
        *self == Self::Any
    }

    /// Whether an agent (built-in or not) may take a task with this runner.
    pub fn allows(self, builtin_agent: bool) -> bool {
        match self {
            Self::Any => true,
            Self::Builtin => builtin_agent,
            Self::External => !builtin_agent,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Any => "any",
            Self::Builtin => "builtin",
            Self::External => "external",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSpec {
    /// A repository, e.g. `org/app`; may be a template.
    pub repository: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

/// A human approval: the run waits until someone approves or rejects, or the gate
/// times out (`timeout_seconds`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GateStep {
    /// What the approvers are asked; may be a template.
    pub message: String,
    /// Who may decide (names or roles); anyone with the operator role when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// What a rejection does (default `fail`).
    #[serde(default)]
    pub on_reject: GateRejected,
    /// What a timeout does (default `fail`).
    #[serde(default)]
    pub on_timeout: GateTimedOut,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateRejected {
    /// The gate step fails (and `on_error` applies).
    #[default]
    Fail,
    /// The gate step is skipped and the run goes on.
    Skip,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GateTimedOut {
    #[default]
    Fail,
    Skip,
    Approve,
}

/// Run `if_true` or `if_false` depending on an expression.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConditionalStep {
    /// A boolean expression over inputs and steps.
    pub condition: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub if_true: Vec<Step>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub if_false: Vec<Step>,
}

/// Branches that run at the same time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ParallelStep {
    #[schemars(length(min = 1))]
    pub branches: Vec<Branch>,
    /// `all`: every branch must succeed; `any`: the first branch to succeed wins.
    #[serde(default)]
    pub wait_for: WaitFor,
    /// At most this many branches run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_concurrency: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Branch {
    pub name: String,
    #[schemars(length(min = 1))]
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitFor {
    #[default]
    All,
    Any,
}

/// A parameterised SQL statement on a named connection (from awl's configuration).
/// Values are bind parameters (`$1`, `$2`... on Postgres, `?1`... on SQLite); the
/// query text takes no templates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DatabaseStep {
    /// A connection name from configuration.
    pub connection: String,
    /// The SQL text, with placeholders.
    pub query: String,
    /// The bind parameters, in order; may be templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<Value>,
}

/// Post a message to a webhook (a Slack- and Discord-compatible body), and record it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NotifyStep {
    /// The message; may be a template.
    pub message: String,
    /// The webhook URL; may be a template. Without it (and without `chat`), the
    /// message is only recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A channel of the chat file (`awl serve --chat-config`) to post to, by name: a
    /// Slack or Discord channel or webhook. Taken over `url` when both are given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat: Option<String>,
    /// People or channels to mention.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<String>,
}

/// Run another workflow as a child run; its outputs become this step's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SubWorkflowStep {
    /// A workflow file, relative to this one (`./child.awl.yaml`), or the name of a
    /// registered workflow.
    pub workflow: String,
    /// The child's inputs; values may be templates.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub inputs: serde_json::Map<String, Value>,
}

/// How often and how fast a failed step is tried again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    #[schemars(range(min = 1, max = 100))]
    pub max_attempts: u32,
    #[serde(default)]
    pub backoff: Backoff,
    /// The first delay, in seconds (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub base_seconds: Option<f64>,
    /// No delay is longer than this, in seconds (default 300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub max_seconds: Option<f64>,
    /// Randomise each delay by up to this fraction of it, either way (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub jitter: Option<f64>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Backoff {
    /// base, 2 x base, 4 x base...
    #[default]
    Exponential,
    /// base, 2 x base, 3 x base...
    Linear,
    /// base every time.
    Constant,
}

/// What a step's failure does to the run, once retries are used up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The run fails (compensations run).
    #[default]
    Abort,
    /// The step counts as skipped; the run goes on.
    Skip,
    /// Try again under the step's retry policy (3 attempts, exponential, if none).
    Retry,
    /// The step stays failed; the run goes on, and later steps can test its status.
    Continue,
}

/// What to do about a failure of one error class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorHandler {
    /// The class of failure this handler is for, or `any`.
    pub class: HandlerClass,
    pub action: HandlerAction,
    /// Attempts in all under this handler (default: the step's retry policy, or 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_attempts: Option<u32>,
    /// `increase_timeout`: multiply the step's timeout by this (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1.0))]
    pub timeout_factor: Option<f64>,
    /// `fallback`: the tool to use instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_tool: Option<String>,
    /// `refresh_auth`: the tool that refreshes credentials before the next attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<String>,
    /// `escalate`: who is asked (a gate opens for them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HandlerClass {
    Network,
    RateLimit,
    Authentication,
    Dependency,
    Validation,
    Timeout,
    Budget,
    Unknown,
    /// Every class without a handler of its own.
    Any,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HandlerAction {
    /// Try again at once.
    Retry,
    /// Try again after the step's back-off.
    RetryWithBackoff,
    /// Try again with a longer timeout.
    IncreaseTimeout,
    /// Run `hook`, then try again.
    RefreshAuth,
    /// Try again with `fallback_tool` (for `tool` steps).
    Fallback,
    /// Open a gate: a person decides to retry (approve) or fail (reject).
    Escalate,
    /// Fail the step for good.
    Abort,
}

/// A tool declared in a workflow file: a named, reusable `shell`, `http`, `database`
/// or `notify` step whose templates read the tool step's `inputs` as `inputs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    #[serde(flatten)]
    pub header: ToolHeader,
    #[serde(flatten)]
    pub kind: StepKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolHeader {
    /// The tool's name, as `tool:` steps refer to it.
    #[schemars(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"))]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The tool's parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, InputSpec>,
    /// A call fails with class `timeout` after this many seconds, when the step
    /// calling it sets no timeout of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86_400))]
    pub timeout_seconds: Option<u64>,
    /// What one call costs, in USD: charged to the budget of the run or agent that
    /// calls it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0))]
    pub cost_usd: Option<f64>,
}

/// The step types a declared tool may be.
pub const TOOL_KINDS: [&str; 4] = ["shell", "http", "database", "notify"];

/// A file of the tools directory (`tools/*.yaml`): tools declared as in a workflow
/// file, and MCP servers whose tools are discovered when awl starts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "awl tools file")]
pub struct ToolsFile {
    /// Tools declared in this file, in the same form as a workflow file's `tools:`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDefinition>,
    /// MCP servers whose tools join the registry as `SERVER__TOOL`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpServerSpec>,
}

/// An external MCP server: started as a process speaking MCP on its stdin and stdout
/// (`command`), or reached over streamable HTTP (`url`). Its tools are listed when
/// awl starts, cached for `refresh_seconds`, and called through one session kept
/// open. Credentials come only from awl's own environment, named here; nothing of a
/// caller's is ever passed on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerSpec {
    /// The server's name: its tools are registered as `NAME__TOOL`.
    #[schemars(regex(pattern = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"))]
    pub name: String,
    /// A stdio server: the program and its arguments (no shell), run in the tools
    /// file's directory with an empty environment but `PATH`, `HOME` and `env_from`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
    /// The names of awl's environment variables passed on to a stdio server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$")))]
    pub env_from: Vec<String>,
    /// A streamable HTTP server: its MCP endpoint (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", regex(pattern = r"^https?://[^\s]+$"))]
    pub url: Option<String>,
    /// The name of awl's environment variable whose value is sent to an HTTP server
    /// as its bearer token (`Authorization: Bearer ...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "String", regex(pattern = r"^[A-Za-z_][A-Za-z0-9_]*$"))]
    pub bearer_token_env: Option<String>,
    /// A call fails with class `timeout` after this many seconds. Starting the
    /// server and listing its tools may take as long, and at least 30 seconds.
    #[serde(default = "default_mcp_timeout")]
    #[schemars(range(min = 1, max = 86_400))]
    pub timeout_seconds: u64,
    /// What one call of any of its tools costs, in USD.
    #[serde(default)]
    #[schemars(range(min = 0.0))]
    pub cost_usd: f64,
    /// How long the list of its tools is kept before it is asked for again.
    #[serde(default = "default_mcp_refresh")]
    #[schemars(range(min = 1, max = 86_400))]
    pub refresh_seconds: u64,
}

fn default_mcp_timeout() -> u64 {
    60
}

fn default_mcp_refresh() -> u64 {
    300
}
