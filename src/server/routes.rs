//! Every route of the API in one table: method, path, handler, the permission it
//! needs, and its documentation. The router is built from it, the auth middleware
//! looks the permission up in it (a route missing from the table is refused), and the
//! OpenAPI document is generated from it (`openapi.rs`), so a route cannot exist in
//! one of them and not the others.

use axum::http::Method;
use axum::routing::{MethodFilter, MethodRouter, on};
use schemars::{JsonSchema, Schema, SchemaGenerator};

use crate::auth::Permission;
use crate::board::views::*;
use crate::page::Page;
use crate::projections::queries::*;

use super::AppState;
use super::dashboard;
use super::rest::meta::{Health, Readiness};
use super::rest::{
    agents, chat, hooks, learning, live, meta, runs, schedules, solve, tasks, tokens, views,
};
use super::wire::*;

type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// What serves a route. (Built once, when the router is; the size of a method router
/// does not matter there.)
#[allow(clippy::large_enum_variant)]
pub enum Handler {
    /// An axum handler for this route's method.
    Rest(MethodRouter<AppState>),
    /// The MCP endpoint (one service for all its methods, mounted once).
    Mcp,
}

/// One route of the API.
pub struct RouteSpec {
    pub method: Method,
    /// axum's path syntax (`/api/v1/tasks/{task_id}`), also OpenAPI's.
    pub path: &'static str,
    pub handler: Handler,
    pub permission: Permission,
    pub summary: &'static str,
    pub tag: &'static str,
    pub request: Option<SchemaFn>,
    /// The success body (`None`: not JSON, e.g. an SSE stream or the MCP endpoint).
    pub response: Option<SchemaFn>,
    pub success: u16,
    /// Query parameters: name and description.
    pub query: &'static [(&'static str, &'static str)],
    /// Takes an `Idempotency-Key` header.
    pub idempotent: bool,
}

fn s<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

macro_rules! route {
    ($method:ident $path:literal, $perm:ident, $tag:literal, $summary:literal, $handler:tt $(:: $more:ident)*, req: $req:expr, res: $res:expr, $success:literal $(, query: $query:expr)? $(, idempotent: $idem:expr)?) => {
        RouteSpec {
            method: Method::$method,
            path: $path,
            handler: route!(@h $method $handler $(:: $more)*),
            permission: Permission::$perm,
            summary: $summary,
            tag: $tag,
            request: $req,
            response: $res,
            success: $success,
            query: route!(@q $($query)?),
            idempotent: route!(@i $($idem)?),
        }
    };
    (@h $method:ident mcp) => { Handler::Mcp };
    (@h $method:ident $handler:tt $(:: $more:ident)*) => { Handler::Rest(on(MethodFilter::$method, $handler $(:: $more)*)) };
    (@q) => { &[] };
    (@q $q:expr) => { $q };
    (@i) => { false };
    (@i $i:expr) => { $i };
}

pub fn routes() -> Vec<RouteSpec> {
    vec![
        route!(GET "/health", Public, "server", "Liveness: the server answers.", meta::health, req: None, res: Some(s::<Health>), 200),
        route!(GET "/api/v1/health", Public, "server", "Liveness and the store's backend.", meta::health, req: None, res: Some(s::<Health>), 200),
        route!(GET "/", Public, "dashboard", "The dashboard (its data comes from the API, with the browser's token).", dashboard::index, req: None, res: None, 200),
        route!(GET "/assets/app.js", Public, "dashboard", "The dashboard's script.", dashboard::app, req: None, res: None, 200),
        route!(GET "/assets/style.css", Public, "dashboard", "The dashboard's styles.", dashboard::style, req: None, res: None, 200),
        route!(GET "/api/v1/openapi.json", Public, "server", "This document.", meta::openapi_doc, req: None, res: None, 200),
        route!(GET "/ready", Public, "server", "Readiness: the database answers, migrations are applied, projections are within the set lag (503 with the failing checks otherwise).", meta::ready, req: None, res: Some(s::<Readiness>), 200),
        route!(GET "/metrics", Read, "server", "Metrics in the Prometheus text format (also on --metrics-bind without auth).", meta::metrics, req: None, res: None, 200),
        // agents
        route!(POST "/api/v1/agents", Work, "agents", "Register an agent or update its capabilities and workspace (idempotent).", agents::register, req: Some(s::<RegisterRequest>), res: Some(s::<AgentView>), 200),
        route!(GET "/api/v1/agents", Read, "agents", "Every registered agent.", agents::list, req: None, res: Some(s::<Vec<AgentView>>), 200),
        route!(GET "/api/v1/agents/{agent_id}", Read, "agents", "One agent.", agents::one, req: None, res: Some(s::<AgentView>), 200),
        route!(POST "/api/v1/agents/{agent_id}/wait", Work, "agents", "wait_for_prompt: long poll until a task is reserved for the agent (PENDING_ACK) or the timeout ends.", agents::wait, req: Some(s::<WaitRequest>), res: Some(s::<WaitResult>), 200),
        // tasks
        route!(POST "/api/v1/tasks", Operate, "tasks", "Send a task to the board.", tasks::send, req: Some(s::<SendTaskRequest>), res: Some(s::<TaskView>), 201, idempotent: true),
        route!(GET "/api/v1/tasks", Read, "tasks", "The board: tasks oldest first, filtered and paged.", tasks::list, req: None, res: Some(s::<TaskPage>), 200,
            query: &[("status", "Comma-separated statuses (QUEUED,IN_PROGRESS,...)"), ("agent", "Assignee"), ("run_id", "Tasks of one run"), ("after", "The `next` of the previous page"), ("limit", "Page size, 1 to 1000 (default 100)")]),
        route!(GET "/api/v1/tasks/{task_id}", ReadOwn, "tasks", "One task (an agent may read the tasks it holds).", tasks::one, req: None, res: Some(s::<TaskView>), 200),
        route!(GET "/api/v1/tasks/{task_id}/events", ReadOwn, "tasks", "A task's history: every event of its stream.", tasks::events, req: None, res: Some(s::<Vec<HistoryEntry>>), 200),
        route!(POST "/api/v1/tasks/{task_id}/ack", Work, "tasks", "Acknowledge a delivered task: PENDING_ACK -> IN_PROGRESS.", tasks::ack, req: Some(s::<AgentCall>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/progress", Work, "tasks", "Report progress.", tasks::progress, req: Some(s::<ProgressRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/tool-calls", Work, "tasks", "Report one tool call (name, parameters, duration, success).", tasks::tool_call, req: Some(s::<ToolCallRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/questions", Work, "tasks", "Ask a question: IN_PROGRESS -> BLOCKED until it is answered.", tasks::ask, req: Some(s::<QuestionRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/answer", Operate, "tasks", "Answer the open question: BLOCKED -> IN_PROGRESS.", tasks::answer, req: Some(s::<AnswerRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/submit", Work, "tasks", "Submit the work for review: IN_PROGRESS -> IN_REVIEW.", tasks::submit, req: Some(s::<SubmitRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/approve", Operate, "tasks", "Approve the work under review: IN_REVIEW -> APPROVED.", tasks::approve, req: Some(s::<ApproveRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/request-changes", Operate, "tasks", "Send the work back with feedback: IN_REVIEW -> QUEUED.", tasks::request_changes, req: Some(s::<ChangesRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/complete", Work, "tasks", "Complete the task with a result.", tasks::complete, req: Some(s::<CompleteRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/fail", Work, "tasks", "Fail the task for good.", tasks::fail, req: Some(s::<FailRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/cancel", Operate, "tasks", "Cancel the task.", tasks::cancel, req: Some(s::<CancelRequest>), res: Some(s::<TaskView>), 200),
        // runs and gates
        route!(POST "/api/v1/runs", Operate, "runs", "Start a run of a registered workflow.", runs::start, req: Some(s::<StartRunRequest>), res: Some(s::<StartedRun>), 201, idempotent: true),
        route!(GET "/api/v1/runs/{run_id}", Read, "runs", "A run's status: steps, open gates, outcome.", runs::status, req: None, res: Some(s::<RunView>), 200),
        route!(POST "/api/v1/runs/{run_id}/pause", Operate, "runs", "Pause a run: no step starts until it is resumed; steps in flight finish.", runs::pause, req: Some(s::<RunActionRequest>), res: Some(s::<RunView>), 200),
        route!(POST "/api/v1/runs/{run_id}/resume", Operate, "runs", "Resume a paused run.", runs::resume, req: Some(s::<RunActionRequest>), res: Some(s::<RunView>), 200),
        route!(POST "/api/v1/runs/{run_id}/rerun", Operate, "runs", "Start a finished run again from a top-level step, keeping the outputs of the steps before it; with inputs, a fork.", runs::rerun, req: Some(s::<RerunRequest>), res: Some(s::<StartedRun>), 201),
        route!(POST "/api/v1/bulk", Operate, "runs", "One action (cancel, pause, resume, retry) over every run a filter selects; dry_run says how many. Carried out in the background, resumable.", runs::bulk, req: Some(s::<BulkRequest>), res: Some(s::<BulkView>), 202),
        route!(GET "/api/v1/workflows", Read, "runs", "The registered workflows: their versions (oldest first), the one new runs start, retired ones, and whether the workflow is paused.", runs::workflows, req: None, res: Some(s::<WorkflowList>), 200),
        route!(POST "/api/v1/workflows/{name}/versions/{version}/retire", Operate, "runs", "Retire a version of a workflow: it takes no new runs (runs on it finish on it); new runs start the newest version not retired.", runs::retire_version, req: Some(s::<RetireRequest>), res: Some(s::<WorkflowSummary>), 200),
        route!(POST "/api/v1/workflows/{name}/pause", Operate, "runs", "Pause a whole workflow: its active runs start no new step (steps in flight finish) and new runs start paused, until it is resumed. The bulk action over its runs is carried out in the background.", runs::pause_workflow, req: Some(s::<RunActionRequest>), res: Some(s::<WorkflowControlView>), 202),
        route!(POST "/api/v1/workflows/{name}/resume", Operate, "runs", "Resume a paused workflow: the runs its pause held go on (runs paused one by one stay paused).", runs::resume_workflow, req: Some(s::<RunActionRequest>), res: Some(s::<WorkflowControlView>), 202),
        route!(POST "/api/v1/archive", Admin, "runs", "Move runs that finished more than older_than_seconds ago out of the hot log into the archive table (their views, status and history stay readable); dry_run counts them.", runs::archive, req: Some(s::<ArchiveRequest>), res: Some(s::<ArchiveView>), 200),
        // chat (no token: each service's signature is checked instead)
        route!(POST "/api/v1/chat/slack/interactions", Public, "chat", "Slack's interactivity URL: button clicks (gates, reviews, questions) and the forms they open. No token: the X-Slack-Signature (v0 HMAC-SHA256 under the app's signing secret) and X-Slack-Request-Timestamp (within 5 minutes) are checked, and a request seen before is refused (401). The clicking user must be mapped (`awl chat users`).", chat::slack_interactions, req: None, res: None, 200),
        route!(POST "/api/v1/chat/slack/commands", Public, "chat", "Slack's slash command URL: `/awl send PROMPT`, `/awl status RUN`, `/awl tasks`, answered privately. Signed like the interactivity URL.", chat::slack_commands, req: None, res: None, 200),
        route!(POST "/api/v1/chat/slack/events", Public, "chat", "Slack's Events API URL: the URL check, and message events: a mapped user's reply in the thread of a question awl posted answers it. Signed like the interactivity URL.", chat::slack_events, req: None, res: None, 200),
        route!(POST "/api/v1/chat/discord/interactions", Public, "chat", "Discord's interactions endpoint: PING, button clicks, forms (modals) and `/awl` commands. No token: the X-Signature-Ed25519 over X-Signature-Timestamp and the body under the application's public key is checked (401 otherwise).", chat::discord_interactions, req: None, res: None, 200),
        // webhooks
        route!(POST "/api/v1/hooks/{name}", Public, "hooks", "A webhook delivery: starts the run of the workflow declaring hook NAME. No token: the Standard Webhooks signature (webhook-id, webhook-timestamp, webhook-signature) under the hook's secret is checked, and a delivery signed more than the hook's tolerance from now is refused (401). A delivery sent again answers with the run it started (200).", hooks::deliver, req: None, res: Some(s::<StartedRun>), 201),
        // schedules
        route!(GET "/api/v1/schedules", Read, "schedules", "The declared schedules: workflow, timing, policies, next time, last run, runs fired and times skipped.", schedules::list, req: None, res: Some(s::<ScheduleList>), 200),
        route!(POST "/api/v1/schedules", Operate, "schedules", "Declare a schedule (or change one declared over the API): cron in a time zone or an interval, inputs, missed-time and overlap policies, jitter.", schedules::declare, req: Some(s::<DeclareSchedule>), res: Some(s::<ScheduleView>), 201),
        route!(GET "/api/v1/schedules/{name}", Read, "schedules", "One schedule.", schedules::one, req: None, res: Some(s::<ScheduleView>), 200),
        route!(DELETE "/api/v1/schedules/{name}", Operate, "schedules", "Remove a schedule declared over the API (a workflow file's schedules go with the file).", schedules::remove, req: None, res: Some(s::<ScheduleView>), 200),
        route!(POST "/api/v1/schedules/{name}/pause", Operate, "schedules", "Pause a schedule: nothing fires until it is resumed, and times meanwhile are not caught up.", schedules::pause, req: Some(s::<RunActionRequest>), res: Some(s::<ScheduleView>), 200),
        route!(POST "/api/v1/schedules/{name}/resume", Operate, "schedules", "Resume a paused schedule.", schedules::resume, req: Some(s::<RunActionRequest>), res: Some(s::<ScheduleView>), 200),
        route!(POST "/api/v1/schedules/{name}/trigger", Operate, "schedules", "Start a run of the schedule now, whatever its times.", schedules::trigger, req: Some(s::<RunActionRequest>), res: Some(s::<StartedRun>), 201),
        route!(GET "/api/v1/bulk/{bulk_id}", Read, "runs", "Where a bulk action is.", runs::bulk_status, req: None, res: Some(s::<BulkView>), 200),
        route!(POST "/api/v1/runs/{run_id}/cancel", Operate, "runs", "Cancel a run (its parent, if any, sees it).", runs::cancel, req: Some(s::<RunActionRequest>), res: Some(s::<RunView>), 200),
        route!(POST "/api/v1/gates/{gate_id}/approve", Operate, "runs", "Approve a gate: the run goes on.", runs::approve_gate, req: Some(s::<GateDecisionRequest>), res: Some(s::<RunView>), 200),
        route!(POST "/api/v1/gates/{gate_id}/reject", Operate, "runs", "Reject a gate (a comment is required): its on_reject applies.", runs::reject_gate, req: Some(s::<GateDecisionRequest>), res: Some(s::<RunView>), 200),
        // views (projections)
        route!(GET "/api/v1/views/board", Read, "views", "The board from its projection: tasks by column, oldest first.", views::board, req: None, res: Some(s::<Page<BoardRow>>), 200,
            query: &[("status", "Comma-separated statuses"), ("agent", "Assignee"), ("since", "RFC 3339: queued at or after"), ("until", "RFC 3339: queued before"), ("after", "The `next` of the previous page"), ("limit", "1 to 1000 (default 100)")]),
        route!(GET "/api/v1/views/runs", Read, "views", "Runs, newest first: status, workflow, current step, duration, cost.", views::runs, req: None, res: Some(s::<Page<RunRow>>), 200,
            query: &[("status", "Comma-separated statuses"), ("workflow", "Workflow name"), ("since", "RFC 3339: started at or after"), ("until", "RFC 3339: started before"), ("after", "The `next` of the previous page"), ("limit", "1 to 1000 (default 100)")]),
        route!(GET "/api/v1/views/runs/{run_id}/timeline", Read, "views", "A run's timeline: every step attempt and gate.", views::timeline, req: None, res: Some(s::<Timeline>), 200),
        route!(GET "/api/v1/views/inbox", Read, "views", "The approval inbox: open gates, oldest first.", views::inbox, req: None, res: Some(s::<Vec<GateRow>>), 200,
            query: &[("workflow", "Workflow name"), ("limit", "1 to 1000 (default 100)")]),
        route!(GET "/api/v1/views/agents", Read, "views", "Agents: capabilities, workspace, current task, tasks done, last call.", views::agents, req: None, res: Some(s::<Vec<AgentRow>>), 200),
        route!(GET "/api/v1/views/audit", Read, "views", "Who did what and when, newest first.", views::audit, req: None, res: Some(s::<Page<AuditRow>>), 200,
            query: &[("actor", "Actor"), ("since", "RFC 3339"), ("until", "RFC 3339"), ("after", "The `next` of the previous page"), ("limit", "1 to 1000 (default 100)")]),
        route!(GET "/api/v1/views/analytics/workflows", Read, "views", "Per workflow: runs, success rate, p50/p95/max duration, cost, by day.", views::workflow_analytics, req: None, res: Some(s::<Vec<WorkflowStats>>), 200,
            query: &[("workflow", "Workflow name"), ("since", "RFC 3339"), ("until", "RFC 3339")]),
        route!(GET "/api/v1/views/analytics/steps", Read, "views", "Per step: attempts, failures by class, retries, mean duration.", views::step_analytics, req: None, res: Some(s::<Vec<StepStats>>), 200,
            query: &[("workflow", "Workflow name")]),
        route!(GET "/api/v1/views/analytics/agents", Read, "views", "Per agent: tasks done and failed, review round trips, mean task time.", views::agent_analytics, req: None, res: Some(s::<Vec<AgentStats>>), 200),
        route!(GET "/api/v1/views/analytics/models", Read, "views", "Model use of awl's own agents per model, agent or workflow: solves, calls, retries, tokens, cost, latency p50/p95/max, by day.", views::model_analytics, req: None, res: Some(s::<Vec<ModelUseStats>>), 200,
            query: &[("by", "model (default), agent or workflow"), ("model", "Model name"), ("agent", "Agent name"), ("workflow", "Workflow name (empty: asked directly)"), ("since", "RFC 3339"), ("until", "RFC 3339")]),
        route!(GET "/api/v1/views/solves", Read, "views", "awl's own agents' solves, newest first: agent, model, workflow, status, calls, tokens, cost, time.", views::solves, req: None, res: Some(s::<Page<SolveRow>>), 200,
            query: &[("status", "Comma-separated: running, finished, failed"), ("agent", "Agent name"), ("model", "Model name"), ("workflow", "Workflow name"), ("after", "The `next` of the previous page"), ("limit", "1 to 1000 (default 100)")]),
        route!(GET "/api/v1/events/stream", Read, "live", "The log as Server-Sent Events (id = position; resume with Last-Event-ID).", live::log_stream, req: None, res: None, 200,
            query: &[("after", "Start after this position (default: the head)"), ("stream_type", "Comma-separated stream types")]),
        route!(GET "/api/v1/views/{view}/stream", Read, "live", "A view's changes as Server-Sent Events, each sent once the view's projection applied it (board, runs, inbox, timeline, analytics, models, agents, audit, learned).", live::view_stream, req: None, res: None, 200,
            query: &[("after", "Start after this position (default: the head)")]),
        route!(GET "/api/v1/projections", Read, "views", "Each projection's version, checkpoint and lag.", views::projections, req: None, res: Some(s::<Vec<crate::projections::ProjectionStatus>>), 200),
        route!(GET "/api/v1/projections/follower", Read, "views", "Which server follows the log into the projections (one at a time, through a lease), until when, and whether it is this one.", views::projections_follower, req: None, res: Some(s::<crate::projections::lease::Follower>), 200),
        // learning
        route!(GET "/api/v1/learn/status", Read, "learning", "How far mining got: tool calls observed, sessions, patterns, proposals by status, the thresholds.", learning::status, req: None, res: Some(s::<crate::learning::LearnStatus>), 200),
        route!(POST "/api/v1/learn/mine", Operate, "learning", "Propose now what mining found (the server also does it every few seconds); says what was proposed.", learning::mine, req: None, res: Some(s::<crate::learning::ProposeReport>), 200),
        route!(GET "/api/v1/learn/proposals", Read, "learning", "The proposals of the caller's scope (an admin: every scope), newest first, each with its generated file and evidence.", learning::proposals, req: None, res: Some(s::<Vec<crate::learning::ProposalView>>), 200,
            query: &[("status", "OPEN, APPROVED, REJECTED or SUPERSEDED")]),
        route!(GET "/api/v1/learn/proposals/{proposal_id}", Read, "learning", "One proposal of the caller's scope: the generated file, the evidence, the decision.", learning::proposal, req: None, res: Some(s::<crate::learning::ProposalView>), 200),
        route!(POST "/api/v1/learn/proposals/{proposal_id}/approve", Operate, "learning", "Approve an open proposal (a person only: an agent token is refused): its workflow becomes a registered, runnable learned version; shared suggests it to every scope.", learning::approve, req: Some(s::<ApproveProposalRequest>), res: Some(s::<crate::learning::ProposalView>), 200),
        route!(POST "/api/v1/learn/proposals/{proposal_id}/reject", Operate, "learning", "Reject an open proposal, with a reason.", learning::reject, req: Some(s::<RejectProposalRequest>), res: Some(s::<crate::learning::ProposalView>), 200),
        route!(GET "/api/v1/learn/uses", Read, "learning", "Each approved learned workflow of the caller's scope: runs, success rate, mean run time against the manual sequences it replaced.", learning::uses, req: None, res: Some(s::<Vec<crate::learning::LearnedUse>>), 200),
        route!(POST "/api/v1/suggest", Connect, "learning", "The workflows that fit a context (recent tool calls, a prompt, capabilities), best first, each with why: submitted ones first, then learned ones of the caller's scope or shared above the confidence threshold. Any token, agents' included.", learning::suggest, req: Some(s::<SuggestRequest>), res: Some(s::<SuggestionList>), 200),
        // awl's own agents
        route!(GET "/api/v1/tools", Read, "agents", "The tool registry: built-in tools and those declared or discovered, each with its input schema, timeout, cost and source.", solve::tools, req: None, res: Some(s::<Vec<ToolView>>), 200),
        route!(GET "/api/v1/agent-definitions", Read, "agents", "awl's own agents, as their definition files say: model, tools, budget, iterations, capabilities.", solve::definitions, req: None, res: Some(s::<Vec<AgentDefinitionView>>), 200),
        route!(POST "/api/v1/solve", Operate, "agents", "Ask one of awl's own agents: it plans tool calls with its model, runs them and answers (plan, execute, solve), every step recorded on a solve stream. The answer holds the message, the plan, the tools used, timings and cost; with `stream: true` or `Accept: text/event-stream`, Server-Sent Events of each phase and the reply's tokens, then `result`.", solve::solve, req: Some(s::<SolveRequest>), res: Some(s::<crate::agents::SolveResult>), 200),
        route!(GET "/api/v1/solves/{solve_id}", Read, "agents", "One solve as recorded: its answer or failure, plan, tools used, timings and cost.", solve::show, req: None, res: Some(s::<crate::agents::SolveResult>), 200),
        // tokens
        route!(GET "/api/v1/tokens", Admin, "tokens", "Every token (never the secrets).", tokens::list, req: None, res: Some(s::<Vec<TokenView>>), 200),
        route!(POST "/api/v1/tokens", Admin, "tokens", "Create a token; the secret is in this answer only.", tokens::create, req: Some(s::<CreateTokenRequest>), res: Some(s::<CreatedToken>), 201),
        route!(DELETE "/api/v1/tokens/{name}", Admin, "tokens", "Revoke a token by name or id.", tokens::revoke, req: None, res: Some(s::<TokenView>), 200),
        // MCP
        route!(POST "/mcp", Connect, "mcp", "The MCP endpoint (streamable HTTP): tools for agents and operators; each tool checks the token's role.", mcp, req: None, res: None, 200),
        route!(GET "/mcp", Connect, "mcp", "The MCP endpoint's server-to-client stream.", mcp, req: None, res: None, 200),
        route!(DELETE "/mcp", Connect, "mcp", "End an MCP session.", mcp, req: None, res: None, 200),
    ]
}
