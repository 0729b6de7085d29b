//! Tasks on the board: sending, listing, reading, and every step of their lifecycle.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;

use crate::auth::{Principal, Role};
use crate::board::views::{HistoryEntry, TaskPage, TaskView};
use crate::board::{Caller, NewTask};
use crate::domain::ids::QuestionId;
use crate::server::AppState;
use crate::server::caller::{acting_agent, caller, idempotency_header, task_id, task_query};
use crate::server::error::ApiError;
use crate::server::extract::{Body, Params};
use crate::server::wire::*;

use super::{Api, Who, created_or_found};

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

pub async fn send(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Body(req): Body<SendTaskRequest>,
) -> Api<Response> {
    let key = idempotency_header(&headers)?;
    let new = NewTask::try_from(req)?;
    let (view, created) = app.board.send(new, &caller(&who), key.as_ref()).await?;
    Ok(created_or_found(created, view))
}

pub async fn list(
    State(app): State<AppState>,
    Params(p): Params<TaskListParams>,
) -> Api<Json<TaskPage>> {
    Ok(Json(app.board.tasks(&task_query(p)?).await?))
}

pub async fn one(
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

pub async fn events(
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
    Ok(Json(
        app.board
            .tool_call(task_id(&id)?, &agent, req.into_call(who.scope()))
            .await?,
    ))
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
