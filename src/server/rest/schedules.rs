//! Schedules: listing, declaring, removing, pausing, resuming and triggering them,
//! through the schedules service.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;

use crate::server::AppState;
use crate::server::extract::Body;
use crate::server::wire::{
    DeclareSchedule, RunActionRequest, ScheduleList, ScheduleView, StartedRun,
};

use super::{Api, Who};

pub async fn list(State(app): State<AppState>) -> Api<Json<ScheduleList>> {
    let schedules = app.schedules.list().await?;
    Ok(Json(ScheduleList {
        schedules: schedules.iter().map(ScheduleView::of).collect(),
    }))
}

pub async fn one(State(app): State<AppState>, Path(name): Path<String>) -> Api<Json<ScheduleView>> {
    Ok(Json(ScheduleView::of(&app.schedules.get(&name).await?)))
}

pub async fn declare(
    State(app): State<AppState>,
    who: Who,
    Body(req): Body<DeclareSchedule>,
) -> Api<(StatusCode, Json<ScheduleView>)> {
    let schedule = app
        .schedules
        .declare(&req.name, &req.workflow, req.schedule, &who.name)
        .await?;
    Ok((StatusCode::CREATED, Json(ScheduleView::of(&schedule))))
}

pub async fn remove(
    State(app): State<AppState>,
    who: Who,
    Path(name): Path<String>,
) -> Api<Json<ScheduleView>> {
    Ok(Json(ScheduleView::of(
        &app.schedules.remove(&name, &who.name).await?,
    )))
}

pub async fn pause(
    State(app): State<AppState>,
    who: Who,
    Path(name): Path<String>,
    Body(req): Body<RunActionRequest>,
) -> Api<Json<ScheduleView>> {
    let reason = req
        .reason
        .unwrap_or_else(|| format!("paused by {}", who.name));
    Ok(Json(ScheduleView::of(
        &app.schedules.pause(&name, &who.name, &reason).await?,
    )))
}

pub async fn resume(
    State(app): State<AppState>,
    who: Who,
    Path(name): Path<String>,
    Body(_req): Body<RunActionRequest>,
) -> Api<Json<ScheduleView>> {
    Ok(Json(ScheduleView::of(
        &app.schedules.resume(&name, &who.name).await?,
    )))
}

pub async fn trigger(
    State(app): State<AppState>,
    who: Who,
    Path(name): Path<String>,
    Body(_req): Body<RunActionRequest>,
) -> Api<(StatusCode, Json<StartedRun>)> {
    let started = app.schedules.trigger(&name, &who.name).await?;
    Ok((StatusCode::CREATED, Json(StartedRun::from(&started))))
}
