//! Runs and gates: starting a run, reading it, deciding its gates, through the runs
//! service.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;

use crate::runs::GateDecision;
use crate::server::AppState;
use crate::server::caller::{gate_id, idempotency_header, run_id};
use crate::server::extract::Body;
use crate::server::wire::{
    BulkRequest, BulkView, GateDecisionRequest, RerunRequest, RunActionRequest, RunView,
    StartRunRequest, StartedRun,
};

use super::{Api, Who, created_or_found};

pub async fn start(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Body(req): Body<StartRunRequest>,
) -> Api<Response> {
    let key = idempotency_header(&headers)?;
    let started = app.runs.start(req.into(), &who.name, key.as_ref()).await?;
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

/// What an operator does to a run.
enum Action {
    Pause,
    Resume,
    Cancel,
}

pub async fn pause(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<RunActionRequest>,
) -> Api<Json<RunView>> {
    act(&app, &who.name, &id, Action::Pause, req.reason).await
}

pub async fn resume(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<RunActionRequest>,
) -> Api<Json<RunView>> {
    act(&app, &who.name, &id, Action::Resume, req.reason).await
}

pub async fn cancel(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<RunActionRequest>,
) -> Api<Json<RunView>> {
    act(&app, &who.name, &id, Action::Cancel, req.reason).await
}

/// Act on a run; the answer is the run after it, as people see it.
async fn act(
    app: &AppState,
    by: &str,
    id: &str,
    action: Action,
    reason: Option<String>,
) -> Api<Json<RunView>> {
    let run = run_id(id)?;
    match action {
        Action::Pause => {
            let reason = reason.unwrap_or_else(|| format!("paused by {by}"));
            app.runs.pause(run, by, &reason).await?;
        }
        Action::Resume => {
            app.runs.resume(run, by).await?;
        }
        Action::Cancel => {
            let reason = reason.unwrap_or_else(|| format!("cancelled by {by}"));
            app.runs.cancel(run, by, &reason).await?;
        }
    }
    let (run, version) = app.runs.get(run).await?;
    Ok(Json(RunView::of(&run, version)))
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
    use crate::domain::bulk::{BulkAction, BulkFilter};
    use axum::response::IntoResponse;
    let action = match req.action.as_str() {
        "cancel" => BulkAction::Cancel,
        "pause" => BulkAction::Pause,
        "resume" => BulkAction::Resume,
        "retry" => BulkAction::Retry,
        other => {
            return Err(crate::server::error::ApiError::invalid(format!(
                "action {other:?}: expected cancel, pause, resume or retry"
            )));
        }
    };
    let filter = BulkFilter {
        workflow: req.workflow,
        statuses: req.statuses.iter().map(|s| s.to_uppercase()).collect(),
        since: req.since,
        until: req.until,
        inputs: req.inputs.into_iter().collect(),
        run_ids: req
            .run_ids
            .iter()
            .map(|id| crate::domain::ids::RunId::from_uuid(*id))
            .collect(),
    };
    if req.dry_run {
        let selected = app.bulk.select(&filter).await?;
        let view = BulkView {
            bulk_id: None,
            action: action.as_str().to_string(),
            status: "DRY_RUN".into(),
            total: selected.len() as u64,
            through: 0,
            acted: 0,
            skipped: 0,
            runs: selected.iter().take(100).map(|r| r.as_uuid()).collect(),
        };
        return Ok(Json(view).into_response());
    }
    let reason = req
        .reason
        .unwrap_or_else(|| format!("bulk {} by {}", action.as_str(), who.name));
    let planned = app.bulk.plan(action, filter, &reason, &who.name).await?;
    let view = BulkView::of(&planned);
    if let Some(id) = planned.id() {
        let (bulk, by) = (app.bulk.clone(), who.name.clone());
        tokio::spawn(async move {
            if let Err(e) = bulk.carry_out(id, 200, &by, &|_| {}).await {
                tracing::warn!(bulk = %id, error = %e, "a bulk action stopped; it is carried on at the next start");
            }
        });
    }
    Ok((axum::http::StatusCode::ACCEPTED, Json(view)).into_response())
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
