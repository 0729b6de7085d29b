//! The REST handlers: each parses its input, checks who may act, and calls the board
//! or the executor's control functions. No rule lives here.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde::Deserialize;
use serde_json::Value;

use crate::auth::{Principal, Role};
use crate::board::wire::*;
use crate::board::{Caller, TaskQuery};
use crate::domain::ids::{AgentId, QuestionId, RunId, TaskId};
use crate::domain::task::TaskStatus;
use crate::domain::workspace::{Capabilities, Workspace};

use super::AppState;
use super::error::ApiError;
use super::extract::{Body, Params};
use super::routes::{Health, openapi};
use super::runs_api::{self, GateDecisionRequest, RunView, StartRunRequest};
use super::tokens_api::*;

type Api<T> = Result<T, ApiError>;
type Who = axum::Extension<Principal>;

pub async fn health(State(app): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        store: app.board.store().backend_name().into(),
        auth: app.auth_on,
    })
}

pub async fn openapi_doc() -> Json<Value> {
    Json(openapi())
}

// ---- identities ---------------------------------------------------------------------

/// The agent a call acts for: an agent token's own name (a different `agent_id` is
/// refused), or the `agent_id` given by an admin.
pub fn acting_agent(who: &Principal, given: Option<&str>) -> Api<AgentId> {
    if who.role == Role::Agent {
        let own = who.agent_id().ok_or_else(|| {
            ApiError::forbidden(format!("token {:?} is not a valid agent id", who.name))
        })?;
        if let Some(given) = given
            && given != own.as_str()
        {
            return Err(ApiError::forbidden(format!(
                "the token of agent {own} may not act as agent {given}"
            )));
        }
        return Ok(own);
    }
    let given = given
        .ok_or_else(|| ApiError::invalid("agent_id is required (the token is not an agent's)"))?;
    AgentId::try_from(given).map_err(|e| ApiError::invalid(e.to_string()))
}

/// Who a person's call is recorded as.
pub fn caller(who: &Principal) -> Caller {
    match who.agent_id() {
        Some(agent) => Caller::Agent(agent),
        None => Caller::User(who.name.clone()),
    }
}

fn task_id(raw: &str) -> Api<TaskId> {
    raw.parse().map_err(|e: crate::domain::ids::IdError| {
        ApiError::not_found("task_not_found", e.to_string())
    })
}

// ---- agents ---------------------------------------------------------------------------

pub async fn register(
    State(app): State<AppState>,
    who: Who,
    Body(req): Body<RegisterRequest>,
) -> Api<Json<AgentView>> {
    let agent = acting_agent(&who, req.agent_id.as_deref())?;
    let view = app
        .board
        .register(
            agent,
            Capabilities::new(&req.capabilities),
            req.workspace.map(Workspace::from),
            &caller(&who),
        )
        .await?;
    Ok(Json(view))
}

pub async fn agents(State(app): State<AppState>) -> Json<Vec<AgentView>> {
    Json(app.board.agents())
}

pub async fn agent(State(app): State<AppState>, Path(id): Path<String>) -> Api<Json<AgentView>> {
    let id =
        AgentId::try_from(id).map_err(|e| ApiError::not_found("agent_not_found", e.to_string()))?;
    app.board.agent(&id).map(Json).ok_or_else(|| {
        ApiError::not_found("agent_not_found", format!("agent {id} is not registered"))
    })
}

pub async fn wait(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<WaitRequest>,
) -> Api<Json<WaitResult>> {
    let agent = acting_agent(&who, Some(req.agent_id.as_deref().unwrap_or(&id)))?;
    if agent.as_str() != id {
        return Err(ApiError::invalid(format!(
            "agent_id {agent} differs from the path's {id}"
        )));
    }
    let timeout = wait_timeout(req.timeout_seconds)?;
    let started = std::time::Instant::now();
    let task = app.board.wait_for_prompt(&agent, timeout).await?;
    Ok(Json(WaitResult {
        task,
        waited_seconds: started.elapsed().as_secs_f64(),
    }))
}

pub fn wait_timeout(seconds: Option<f64>) -> Api<Option<Duration>> {
    match seconds {
        None => Ok(None),
        Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s.min(86_400.0)))),
        Some(s) => Err(ApiError::invalid(format!(
            "timeout_seconds must be a number of seconds >= 0, not {s}"
        ))),
    }
}

// ---- tasks ------------------------------------------------------------------------------

pub async fn send(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Body(req): Body<SendTaskRequest>,
) -> Api<Response> {
    let key = idempotency_key(&headers)?;
    let (view, created) = app.board.send(req, &caller(&who), key.as_deref()).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(view)).into_response())
}

fn idempotency_key(headers: &HeaderMap) -> Api<Option<String>> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .map_err(|_| ApiError::invalid("the Idempotency-Key header must be visible ASCII"))?;
    if key.is_empty() || key.len() > 255 {
        return Err(ApiError::invalid(
            "the Idempotency-Key header must be 1 to 255 characters",
        ));
    }
    Ok(Some(key.to_string()))
}

/// Filters of the task listing (REST query parameters, MCP `list_tasks` arguments).
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
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

pub async fn tasks(
    State(app): State<AppState>,
    Params(p): Params<TaskListParams>,
) -> Api<Json<TaskPage>> {
    Ok(Json(app.board.tasks(&task_query(p)?)?))
}

/// The board query a listing's filters ask for.
pub fn task_query(p: TaskListParams) -> Api<TaskQuery> {
    let statuses = match &p.status {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| parse_status(s.trim()))
            .collect::<Api<Vec<_>>>()?,
    };
    Ok(TaskQuery {
        statuses,
        assignee: p
            .agent
            .map(AgentId::try_from)
            .transpose()
            .map_err(|e| ApiError::invalid(e.to_string()))?,
        run_id: p
            .run_id
            .map(|r| r.parse::<RunId>())
            .transpose()
            .map_err(|e| ApiError::invalid(e.to_string()))?,
        after: p.after,
        limit: p.limit.unwrap_or(100),
    })
}

pub fn parse_status(s: &str) -> Api<TaskStatus> {
    TaskStatus::ALL
        .into_iter()
        .find(|t| t.as_str().eq_ignore_ascii_case(s))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "unknown status {s:?}: expected one of {}",
                TaskStatus::ALL.map(|t| t.as_str()).join(", ")
            ))
        })
}

/// An agent may read only the tasks it holds (or held last).
fn readable(who: &Principal, task: &TaskView) -> Api<()> {
    if who.role != Role::Agent {
        return Ok(());
    }
    let me = who.agent_id().map(|a| a.to_string());
    if task.assignee.is_some() && task.assignee == me {
        Ok(())
    } else {
        Err(ApiError::forbidden(format!(
            "task {} is not held by agent {}",
            task.task_id, who.name
        )))
    }
}

pub async fn task(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
) -> Api<Json<TaskView>> {
    let view = app.board.task(task_id(&id)?).await?;
    readable(&who, &view)?;
    if let Some(agent) = who.agent_id() {
        app.board.touch(&agent);
    }
    Ok(Json(view))
}

pub async fn task_events(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
) -> Api<Json<Vec<HistoryEntry>>> {
    let id = task_id(&id)?;
    readable(&who, &app.board.task(id).await?)?;
    Ok(Json(app.board.history(id).await?))
}

pub async fn ack(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<AgentCall>,
) -> Api<Json<TaskView>> {
    let agent = acting_agent(&who, req.agent_id.as_deref())?;
    Ok(Json(app.board.ack(task_id(&id)?, &agent).await?))
}

pub async fn progress(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<ProgressRequest>,
) -> Api<Json<TaskView>> {
    let agent = acting_agent(&who, req.agent_id.as_deref())?;
    Ok(Json(
        app.board
            .progress(task_id(&id)?, &agent, req.message, req.percent)
            .await?,
    ))
}

pub async fn tool_call(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<ToolCallRequest>,
) -> Api<Json<TaskView>> {
    let agent = acting_agent(&who, req.agent_id.as_deref())?;
    Ok(Json(app.board.tool_call(task_id(&id)?, &agent, req).await?))
}

pub async fn ask(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<QuestionRequest>,
) -> Api<Json<TaskView>> {
    let agent = acting_agent(&who, req.agent_id.as_deref())?;
    Ok(Json(
        app.board.ask(task_id(&id)?, &agent, req.question).await?,
    ))
}

pub async fn answer(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<AnswerRequest>,
) -> Api<Json<TaskView>> {
    let question = req.question_id.map(QuestionId::from_uuid);
    Ok(Json(
        app.board
            .answer(task_id(&id)?, question, req.answer, &caller(&who))
            .await?,
    ))
}

pub async fn submit(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<SubmitRequest>,
) -> Api<Json<TaskView>> {
    let agent = acting_agent(&who, req.agent_id.as_deref())?;
    Ok(Json(
        app.board
            .submit(task_id(&id)?, &agent, req.branch, req.commit, req.summary)
            .await?,
    ))
}

pub async fn approve(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(_req): Body<ApproveRequest>,
) -> Api<Json<TaskView>> {
    Ok(Json(app.board.approve(task_id(&id)?, &caller(&who)).await?))
}

pub async fn request_changes(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<ChangesRequest>,
) -> Api<Json<TaskView>> {
    Ok(Json(
        app.board
            .request_changes(task_id(&id)?, req.feedback, &caller(&who))
            .await?,
    ))
}

pub async fn complete(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<CompleteRequest>,
) -> Api<Json<TaskView>> {
    let agent = acting_agent(&who, req.agent_id.as_deref())?;
    Ok(Json(
        app.board
            .complete(task_id(&id)?, req.result, &Caller::Agent(agent))
            .await?,
    ))
}

pub async fn fail(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<FailRequest>,
) -> Api<Json<TaskView>> {
    let agent = acting_agent(&who, req.agent_id.as_deref())?;
    Ok(Json(
        app.board
            .fail(
                task_id(&id)?,
                req.reason,
                req.error_class,
                &Caller::Agent(agent),
            )
            .await?,
    ))
}

pub async fn cancel(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<CancelRequest>,
) -> Api<Json<TaskView>> {
    Ok(Json(
        app.board
            .cancel(task_id(&id)?, req.reason, &caller(&who))
            .await?,
    ))
}

// ---- runs and gates ---------------------------------------------------------------------

pub async fn start_run(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Body(req): Body<StartRunRequest>,
) -> Api<Response> {
    let key = idempotency_key(&headers)?;
    let (started, created) = runs_api::start_run(&app, &who, key.as_deref(), req).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(started)).into_response())
}

pub async fn run_status(State(app): State<AppState>, Path(id): Path<String>) -> Api<Json<RunView>> {
    runs_api::run_status(&app, &id).await.map(Json)
}

pub async fn approve_gate(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<GateDecisionRequest>,
) -> Api<Json<RunView>> {
    runs_api::decide_gate(&app, &who, &id, true, req.comment)
        .await
        .map(Json)
}

pub async fn reject_gate(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<GateDecisionRequest>,
) -> Api<Json<RunView>> {
    runs_api::decide_gate(&app, &who, &id, false, req.comment)
        .await
        .map(Json)
}

// ---- tokens -------------------------------------------------------------------------------

pub async fn tokens(State(app): State<AppState>) -> Api<Json<Vec<TokenView>>> {
    let records = app.board.store().tokens().await?;
    Ok(Json(records.into_iter().map(TokenView::from).collect()))
}

pub async fn create_token(
    State(app): State<AppState>,
    who: Who,
    Body(req): Body<CreateTokenRequest>,
) -> Api<Response> {
    let role: Role = req.role.parse().map_err(ApiError::invalid)?;
    let (record, token) =
        crate::auth::create_token(app.board.store(), &req.name, role, &who.name, Utc::now())
            .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            token,
            record: record.into(),
        }),
    )
        .into_response())
}

pub async fn revoke_token(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Api<Json<TokenView>> {
    let store = app.board.store();
    if !store.revoke_token(&name, Utc::now()).await? {
        return Err(ApiError::not_found(
            "token_not_found",
            format!("no active token {name:?}"),
        ));
    }
    let record = store
        .tokens()
        .await?
        .into_iter()
        .find(|t| t.name == name || t.id.to_string() == name)
        .ok_or_else(|| ApiError::not_found("token_not_found", format!("no token {name:?}")))?;
    Ok(Json(record.into()))
}
