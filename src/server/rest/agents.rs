//! Agents: registering, listing, and the long poll for work.

use axum::Json;
use axum::extract::{Path, State};

use crate::board::views::AgentView;
use crate::domain::ids::AgentId;
use crate::domain::workspace::{Capabilities, Workspace};
use crate::server::AppState;
use crate::server::caller::{acting_agent, caller, wait_timeout};
use crate::server::error::ApiError;
use crate::server::extract::Body;
use crate::server::wire::{RegisterRequest, WaitRequest, WaitResult};

use super::{Api, Who};

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

pub async fn list(State(app): State<AppState>) -> Json<Vec<AgentView>> {
    Json(app.board.agents())
}

pub async fn one(State(app): State<AppState>, Path(id): Path<String>) -> Api<Json<AgentView>> {
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
    let _slot = app.waits.take(&who, &agent, app.auth_on)?;
    let started = std::time::Instant::now();
    let task = app.board.wait_for_prompt(&agent, timeout).await?;
    Ok(Json(WaitResult {
        task,
        waited_seconds: started.elapsed().as_secs_f64(),
    }))
}
