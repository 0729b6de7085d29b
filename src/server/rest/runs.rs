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
    GateDecisionRequest, RerunRequest, RunActionRequest, RunView, StartRunRequest, StartedRun,
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
