//! Runs and gates: starting a run, reading it, deciding its gates, through the runs
//! service.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;

use crate::runs::{GateDecision, StartRun};
use crate::server::AppState;
use crate::server::caller::{gate_id, idempotency_header, run_id};
use crate::server::extract::Body;
use crate::server::operate::{self, RunControl, WorkflowControl};
use crate::server::wire::{
    ArchiveRequest, ArchiveView, BulkRequest, BulkView, GateDecisionRequest, RerunRequest,
    RetireRequest, RunActionRequest, RunView, StartRunRequest, StartedRun, WorkflowControlView,
    WorkflowList, WorkflowSummary,
};

use super::{Api, Who, created_or_found};

pub async fn start(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Body(req): Body<StartRunRequest>,
) -> Api<Response> {
    let key = idempotency_header(&headers)?;
    let request = StartRun {
        scope: Some(who.scope()),
        ..req.into()
    };
    let started = app.runs.start(request, &who.name, key.as_ref()).await?;
    Ok(created_or_found(
        started.created,
        StartedRun::from(&started),
    ))
}

pub async fn status(State(app): State<AppState>, Path(id): Path<String>) -> Api<Json<RunView>> {
    let (run, version) = app.runs.get(run_id(&id)?).await?;
    Ok(Json(RunView::of(&run, version)))
}

/// Rerun a finished run from a step (a fork when inputs are given): 201 and the new run.
pub async fn rerun(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<RerunRequest>,
) -> Api<Response> {
    let started = app
        .runs
        .rerun(run_id(&id)?, &req.from_step, req.inputs, &who.name)
        .await?;
    Ok(created_or_found(true, StartedRun::from(&started)))
}

pub async fn pause(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<RunActionRequest>,
) -> Api<Json<RunView>> {
    let view = operate::control(&app, &who.name, run_id(&id)?, RunControl::Pause, req.reason);
    Ok(Json(view.await?))
}

pub async fn resume(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<RunActionRequest>,
) -> Api<Json<RunView>> {
    let view = operate::control(
        &app,
        &who.name,
        run_id(&id)?,
        RunControl::Resume,
        req.reason,
    );
    Ok(Json(view.await?))
}

pub async fn cancel(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<RunActionRequest>,
) -> Api<Json<RunView>> {
    let view = operate::control(
        &app,
        &who.name,
        run_id(&id)?,
        RunControl::Cancel,
        req.reason,
    );
    Ok(Json(view.await?))
}

pub async fn approve_gate(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<GateDecisionRequest>,
) -> Api<Json<RunView>> {
    decide(&app, &who.name, &id, true, req.comment).await
}

pub async fn reject_gate(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<GateDecisionRequest>,
) -> Api<Json<RunView>> {
    decide(&app, &who.name, &id, false, req.comment).await
}

/// Decide a gate; the answer is the run after the decision.
async fn decide(
    app: &AppState,
    by: &str,
    gate: &str,
    approve: bool,
    comment: Option<String>,
) -> Api<Json<RunView>> {
    let decision = GateDecision::new(approve, comment)?;
    let (run, version) = app.runs.decide_gate(gate_id(gate)?, decision, by).await?;
    Ok(Json(RunView::of(&run, version)))
}

/// A bulk action over the runs a filter selects: a dry run answers how many (200);
/// otherwise it is planned, carried out in the background, and answered at once (202)
/// with its id, to follow with `GET /api/v1/bulk/{id}`.
pub async fn bulk(
    State(app): State<AppState>,
    who: Who,
    Body(req): Body<BulkRequest>,
) -> Api<Response> {
    use axum::response::IntoResponse;
    let (dry_run, view) = operate::bulk(&app, &who.name, req).await?;
    let status = if dry_run {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::ACCEPTED
    };
    Ok((status, Json(view)).into_response())
}

pub async fn pause_workflow(
    State(app): State<AppState>,
    who: Who,
    Path(name): Path<String>,
    Body(req): Body<RunActionRequest>,
) -> Api<Response> {
    let view =
        operate::control_workflow(&app, &who.name, &name, WorkflowControl::Pause, req.reason);
    accepted(view.await?)
}

pub async fn resume_workflow(
    State(app): State<AppState>,
    who: Who,
    Path(name): Path<String>,
    Body(req): Body<RunActionRequest>,
) -> Api<Response> {
    let view =
        operate::control_workflow(&app, &who.name, &name, WorkflowControl::Resume, req.reason);
    accepted(view.await?)
}

fn accepted(view: WorkflowControlView) -> Api<Response> {
    use axum::response::IntoResponse;
    Ok((axum::http::StatusCode::ACCEPTED, Json(view)).into_response())
}

pub async fn workflows(State(app): State<AppState>) -> Api<Json<WorkflowList>> {
    Ok(Json(WorkflowList::of(app.runs.workflows().await?)))
}

pub async fn retire_version(
    State(app): State<AppState>,
    who: Who,
    Path((name, version)): Path<(String, String)>,
    Body(req): Body<RetireRequest>,
) -> Api<Json<WorkflowSummary>> {
    let entry = app
        .runs
        .retire_version(&name, &version, &who.name, &req.reason)
        .await?;
    Ok(Json(WorkflowSummary::of(entry)))
}

pub async fn archive(
    State(app): State<AppState>,
    Body(req): Body<ArchiveRequest>,
) -> Api<Json<ArchiveView>> {
    Ok(Json(operate::archive(&app, req).await?))
}

pub async fn bulk_status(
    State(app): State<AppState>,
    Path(id): Path<String>,
) -> Api<Json<BulkView>> {
    let id: uuid::Uuid = id.parse().map_err(|_| {
        crate::server::error::ApiError::invalid(format!("{id:?} is not a bulk action id"))
    })?;
    Ok(Json(BulkView::of(&app.bulk.get(id).await?)))
}
