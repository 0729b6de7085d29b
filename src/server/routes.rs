//! Every route of the API in one table: method, path, the permission it needs, and its
//! documentation. The auth middleware looks the permission up here (a route missing
//! from the table is refused), and the OpenAPI document is generated from it, so the
//! document cannot drift from what the server checks.

use axum::http::Method;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{Map, Value, json};

use crate::auth::Permission;
use crate::board::wire::*;

use super::error::ErrorBody;
use super::runs_api::*;
use super::tokens_api::*;
use super::views_api::*;

type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// One route of the API.
pub struct RouteSpec {
    pub method: Method,
    /// axum's path syntax (`/api/v1/tasks/{task_id}`), also OpenAPI's.
    pub path: &'static str,
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
    ($method:ident $path:literal, $perm:ident, $tag:literal, $summary:literal, req: $req:expr, res: $res:expr, $success:literal $(, query: $query:expr)? $(, idempotent: $idem:expr)?) => {
        RouteSpec {
            method: Method::$method,
            path: $path,
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
    (@q) => { &[] };
    (@q $q:expr) => { $q };
    (@i) => { false };
    (@i $i:expr) => { $i };
}

pub fn routes() -> Vec<RouteSpec> {
    vec![
        route!(GET "/health", Public, "server", "Liveness: the server answers.", req: None, res: Some(s::<Health>), 200),
        route!(GET "/api/v1/health", Public, "server", "Liveness and the store's backend.", req: None, res: Some(s::<Health>), 200),
        route!(GET "/", Public, "dashboard", "The dashboard (its data comes from the API, with the browser's token).", req: None, res: None, 200),
        route!(GET "/assets/app.js", Public, "dashboard", "The dashboard's script.", req: None, res: None, 200),
        route!(GET "/assets/style.css", Public, "dashboard", "The dashboard's styles.", req: None, res: None, 200),
        route!(GET "/api/v1/openapi.json", Public, "server", "This document.", req: None, res: None, 200),
        // agents
        route!(POST "/api/v1/agents", Work, "agents", "Register an agent or update its capabilities and workspace (idempotent).", req: Some(s::<RegisterRequest>), res: Some(s::<AgentView>), 200),
        route!(GET "/api/v1/agents", Read, "agents", "Every registered agent.", req: None, res: Some(s::<Vec<AgentView>>), 200),
        route!(GET "/api/v1/agents/{agent_id}", Read, "agents", "One agent.", req: None, res: Some(s::<AgentView>), 200),
        route!(POST "/api/v1/agents/{agent_id}/wait", Work, "agents", "wait_for_prompt: long poll until a task is reserved for the agent (PENDING_ACK) or the timeout ends.", req: Some(s::<WaitRequest>), res: Some(s::<WaitResult>), 200),
        // tasks
        route!(POST "/api/v1/tasks", Operate, "tasks", "Send a task to the board.", req: Some(s::<SendTaskRequest>), res: Some(s::<TaskView>), 201, idempotent: true),
        route!(GET "/api/v1/tasks", Read, "tasks", "The board: tasks oldest first, filtered and paged.", req: None, res: Some(s::<TaskPage>), 200,
            query: &[("status", "Comma-separated statuses (QUEUED,IN_PROGRESS,...)"), ("agent", "Assignee"), ("run_id", "Tasks of one run"), ("after", "The `next` of the previous page"), ("limit", "Page size, 1 to 1000 (default 100)")]),
        route!(GET "/api/v1/tasks/{task_id}", ReadOwn, "tasks", "One task (an agent may read the tasks it holds).", req: None, res: Some(s::<TaskView>), 200),
        route!(GET "/api/v1/tasks/{task_id}/events", ReadOwn, "tasks", "A task's history: every event of its stream.", req: None, res: Some(s::<Vec<HistoryEntry>>), 200),
        route!(POST "/api/v1/tasks/{task_id}/ack", Work, "tasks", "Acknowledge a delivered task: PENDING_ACK -> IN_PROGRESS.", req: Some(s::<AgentCall>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/progress", Work, "tasks", "Report progress.", req: Some(s::<ProgressRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/tool-calls", Work, "tasks", "Report one tool call (name, parameters, duration, success).", req: Some(s::<ToolCallRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/questions", Work, "tasks", "Ask a question: IN_PROGRESS -> BLOCKED until it is answered.", req: Some(s::<QuestionRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/answer", Operate, "tasks", "Answer the open question: BLOCKED -> IN_PROGRESS.", req: Some(s::<AnswerRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/submit", Work, "tasks", "Submit the work for review: IN_PROGRESS -> IN_REVIEW.", req: Some(s::<SubmitRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/approve", Operate, "tasks", "Approve the work under review: IN_REVIEW -> APPROVED.", req: Some(s::<ApproveRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/request-changes", Operate, "tasks", "Send the work back with feedback: IN_REVIEW -> QUEUED.", req: Some(s::<ChangesRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/complete", Work, "tasks", "Complete the task with a result.", req: Some(s::<CompleteRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/fail", Work, "tasks", "Fail the task for good.", req: Some(s::<FailRequest>), res: Some(s::<TaskView>), 200),
        route!(POST "/api/v1/tasks/{task_id}/cancel", Operate, "tasks", "Cancel the task.", req: Some(s::<CancelRequest>), res: Some(s::<TaskView>), 200),
        // runs and gates
        route!(POST "/api/v1/runs", Operate, "runs", "Start a run of a registered workflow.", req: Some(s::<StartRunRequest>), res: Some(s::<StartedRun>), 201, idempotent: true),
        route!(GET "/api/v1/runs/{run_id}", Read, "runs", "A run's status: steps, open gates, outcome.", req: None, res: Some(s::<RunView>), 200),
        route!(POST "/api/v1/gates/{gate_id}/approve", Operate, "runs", "Approve a gate: the run goes on.", req: Some(s::<GateDecisionRequest>), res: Some(s::<RunView>), 200),
        route!(POST "/api/v1/gates/{gate_id}/reject", Operate, "runs", "Reject a gate (a comment is required): its on_reject applies.", req: Some(s::<GateDecisionRequest>), res: Some(s::<RunView>), 200),
        // views (projections)
        route!(GET "/api/v1/views/board", Read, "views", "The board from its projection: tasks by column, oldest first.", req: None, res: Some(s::<Page<BoardRow>>), 200,
            query: &[("status", "Comma-separated statuses"), ("agent", "Assignee"), ("since", "RFC 3339: queued at or after"), ("until", "RFC 3339: queued before"), ("after", "The `next` of the previous page"), ("limit", "1 to 1000 (default 100)")]),
        route!(GET "/api/v1/views/runs", Read, "views", "Runs, newest first: status, workflow, current step, duration, cost.", req: None, res: Some(s::<Page<RunRow>>), 200,
            query: &[("status", "Comma-separated statuses"), ("workflow", "Workflow name"), ("since", "RFC 3339: started at or after"), ("until", "RFC 3339: started before"), ("after", "The `next` of the previous page"), ("limit", "1 to 1000 (default 100)")]),
        route!(GET "/api/v1/views/runs/{run_id}/timeline", Read, "views", "A run's timeline: every step attempt and gate.", req: None, res: Some(s::<Timeline>), 200),
        route!(GET "/api/v1/views/inbox", Read, "views", "The approval inbox: open gates, oldest first.", req: None, res: Some(s::<Vec<GateRow>>), 200,
            query: &[("workflow", "Workflow name"), ("limit", "1 to 1000 (default 100)")]),
        route!(GET "/api/v1/views/agents", Read, "views", "Agents: capabilities, workspace, current task, tasks done, last call.", req: None, res: Some(s::<Vec<AgentRow>>), 200),
        route!(GET "/api/v1/views/audit", Read, "views", "Who did what and when, newest first.", req: None, res: Some(s::<Page<AuditRow>>), 200,
            query: &[("actor", "Actor"), ("since", "RFC 3339"), ("until", "RFC 3339"), ("after", "The `next` of the previous page"), ("limit", "1 to 1000 (default 100)")]),
        route!(GET "/api/v1/views/analytics/workflows", Read, "views", "Per workflow: runs, success rate, p50/p95/max duration, cost, by day.", req: None, res: Some(s::<Vec<WorkflowStats>>), 200,
            query: &[("workflow", "Workflow name"), ("since", "RFC 3339"), ("until", "RFC 3339")]),
        route!(GET "/api/v1/views/analytics/steps", Read, "views", "Per step: attempts, failures by class, retries, mean duration.", req: None, res: Some(s::<Vec<StepStats>>), 200,
            query: &[("workflow", "Workflow name")]),
        route!(GET "/api/v1/views/analytics/agents", Read, "views", "Per agent: tasks done and failed, review round trips, mean task time.", req: None, res: Some(s::<Vec<AgentStats>>), 200),
        route!(GET "/api/v1/events/stream", Read, "live", "The log as Server-Sent Events (id = position; resume with Last-Event-ID).", req: None, res: None, 200,
            query: &[("after", "Start after this position (default: the head)"), ("stream_type", "Comma-separated stream types")]),
        route!(GET "/api/v1/views/{view}/stream", Read, "live", "A view's changes as Server-Sent Events, each sent once the view's projection applied it (board, runs, inbox, timeline, analytics, agents, audit).", req: None, res: None, 200,
            query: &[("after", "Start after this position (default: the head)")]),
        route!(GET "/api/v1/projections", Read, "views", "Each projection's version, checkpoint and lag.", req: None, res: Some(s::<Vec<crate::projections::ProjectionStatus>>), 200),
        // tokens
        route!(GET "/api/v1/tokens", Admin, "tokens", "Every token (never the secrets).", req: None, res: Some(s::<Vec<TokenView>>), 200),
        route!(POST "/api/v1/tokens", Admin, "tokens", "Create a token; the secret is in this answer only.", req: Some(s::<CreateTokenRequest>), res: Some(s::<CreatedToken>), 201),
        route!(DELETE "/api/v1/tokens/{name}", Admin, "tokens", "Revoke a token by name or id.", req: None, res: Some(s::<TokenView>), 200),
        // MCP
        route!(POST "/mcp", Connect, "mcp", "The MCP endpoint (streamable HTTP): tools for agents and operators; each tool checks the token's role.", req: None, res: None, 200),
        route!(GET "/mcp", Connect, "mcp", "The MCP endpoint's server-to-client stream.", req: None, res: None, 200),
        route!(DELETE "/mcp", Connect, "mcp", "End an MCP session.", req: None, res: None, 200),
    ]
}

/// `GET /health`.
#[derive(Debug, serde::Serialize, serde::Deserialize, JsonSchema)]
pub struct Health {
    pub status: String,
    pub store: String,
    pub auth: bool,
}

/// The OpenAPI 3.0 document (schemars' openapi3 settings) of [`routes`].
pub fn openapi() -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut paths: Map<String, Value> = Map::new();
    for route in routes() {
        let mut op = Map::new();
        op.insert("summary".into(), json!(route.summary));
        op.insert("tags".into(), json!([route.tag]));
        op.insert("operationId".into(), json!(operation_id(&route)));
        let mut params: Vec<Value> = path_params(route.path)
            .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string"}}))
            .collect();
        params.extend(route.query.iter().map(|(name, description)| {
            json!({"name": name, "in": "query", "required": false, "description": description, "schema": {"type": "string"}})
        }));
        if route.idempotent {
            params.push(json!({"name": "Idempotency-Key", "in": "header", "required": false,
                "description": "Repeat the call safely: the same key from the same caller returns the first result (200 instead of 201).",
                "schema": {"type": "string"}}));
        }
        if !params.is_empty() {
            op.insert("parameters".into(), Value::Array(params));
        }
        if let Some(request) = route.request {
            let schema = request(&mut generator);
            op.insert(
                "requestBody".into(),
                json!({"required": false, "content": {"application/json": {"schema": schema}}}),
            );
        }
        let mut responses = Map::new();
        let ok = match route.response {
            Some(response) => {
                json!({"description": "OK", "content": {"application/json": {"schema": response(&mut generator)}}})
            }
            None => json!({"description": "OK"}),
        };
        responses.insert(route.success.to_string(), ok);
        let error = generator.subschema_for::<ErrorBody>();
        for (code, what) in error_statuses(&route) {
            responses.insert(
                code.to_string(),
                json!({"description": what, "content": {"application/json": {"schema": error}}}),
            );
        }
        op.insert("responses".into(), Value::Object(responses));
        if route.permission != Permission::Public {
            op.insert("security".into(), json!([{"bearer": []}]));
            op.insert("x-awl-permission".into(), json!(route.permission));
        }
        let entry = paths
            .entry(route.path.to_string())
            .or_insert_with(|| json!({}));
        entry[route.method.as_str().to_lowercase()] = Value::Object(op);
    }
    let schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "awl",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "The agent board, runs and gates of awl. Bearer tokens carry a role: viewer (read), operator (send, answer, review, runs, gates), agent (its own tasks), admin (everything, tokens)."
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        }
    })
}

fn operation_id(route: &RouteSpec) -> String {
    let api = route.path.strip_prefix("/api/v1");
    let mut words: Vec<String> = api
        .unwrap_or(route.path)
        .split('/')
        .filter(|p| !p.is_empty())
        .map(
            |p| match p.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
                Some(param) => format!("by_{param}"),
                None => p.replace(['-', '.'], "_"),
            },
        )
        .collect();
    if api.is_none() {
        words.insert(0, "root".into());
    }
    format!(
        "{}_{}",
        route.method.as_str().to_lowercase(),
        words.join("_")
    )
}

fn path_params(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|p| p.strip_prefix('{').and_then(|p| p.strip_suffix('}')))
}

fn error_statuses(route: &RouteSpec) -> Vec<(u16, &'static str)> {
    let mut out = Vec::new();
    if route.permission != Permission::Public {
        out.push((401, "No valid bearer token"));
        out.push((403, "The token's role may not do this"));
    }
    if route.request.is_some() {
        out.push((400, "The body is not JSON"));
        out.push((413, "The body is too large"));
        out.push((422, "The body or a value is invalid"));
    }
    if route.path.contains('{') {
        out.push((404, "Not found"));
    }
    if route.method == Method::POST && route.permission != Permission::Public {
        out.push((
            409,
            "Not allowed in the current state (nothing was recorded)",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn refs(value: &Value, out: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(r)) = map.get("$ref") {
                    out.insert(r.clone());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn the_document_lists_every_route_and_every_reference_resolves() {
        let doc = openapi();
        let routes = routes();
        for route in &routes {
            let op = &doc["paths"][route.path][route.method.as_str().to_lowercase()];
            assert!(op.is_object(), "{} {} is missing", route.method, route.path);
            assert_eq!(op["summary"], route.summary);
        }
        let mut found = BTreeSet::new();
        refs(&doc, &mut found);
        assert!(found.len() > 10, "{found:?}");
        for r in found {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("odd ref {r}"));
            assert!(
                doc["components"]["schemas"][name].is_object(),
                "{r} does not resolve"
            );
        }
        let ids: BTreeSet<String> = routes.iter().map(operation_id).collect();
        assert_eq!(ids.len(), routes.len(), "operation ids are unique");
    }

    #[test]
    fn requests_refuse_unknown_fields_in_the_schema_too() {
        let doc = openapi();
        let send = &doc["components"]["schemas"]["SendTaskRequest"];
        assert_eq!(send["additionalProperties"], false);
        assert_eq!(send["required"], json!(["prompt"]));
    }
}
