//! The read models over HTTP: each handler parses its query parameters into a typed
//! filter and calls `projections::queries` on `AppState::views`: a streaming replica
//! when the server was given one (`--read-database-url`), so these reads leave the
//! primary to appends and claims. The projections' status (checkpoints against the
//! head) is always the primary's.

use axum::Json;
use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::page::{Cursor, Page};
use crate::projections::lease::{self, Follower};
use crate::projections::queries::{self, *};
use crate::projections::{ProjectionStatus, Projections};
use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::extract::Params;

use super::Api;

/// The query parameters of every view (each view reads the ones it has).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewParams {
    status: Option<String>,
    agent: Option<String>,
    workflow: Option<String>,
    actor: Option<String>,
    model: Option<String>,
    by: Option<ModelGroup>,
    since: Option<String>,
    until: Option<String>,
    after: Option<String>,
    limit: Option<i64>,
}

impl ViewParams {
    fn limit(&self) -> usize {
        self.limit.unwrap_or(100).clamp(1, 1_000) as usize
    }

    fn time(value: &Option<String>, name: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
        value
            .as_deref()
            .map(|v| {
                DateTime::parse_from_rfc3339(v)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|e| {
                        ApiError::invalid(format!("`{name}` must be an RFC 3339 time: {e}"))
                    })
            })
            .transpose()
    }

    fn since(&self) -> Result<Option<DateTime<Utc>>, ApiError> {
        Self::time(&self.since, "since")
    }

    fn until(&self) -> Result<Option<DateTime<Utc>>, ApiError> {
        Self::time(&self.until, "until")
    }

    fn after(&self) -> Result<Option<Cursor>, ApiError> {
        Ok(Cursor::parse_opt(self.after.as_deref())?)
    }

    fn statuses(&self) -> Vec<String> {
        self.status
            .as_deref()
            .map(|s| {
                s.split(',')
                    .map(|x| x.trim().to_uppercase())
                    .filter(|x| !x.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }
}

pub async fn board(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Json<Page<BoardRow>>> {
    let filter = BoardFilter {
        statuses: p.statuses(),
        agent: p.agent.clone(),
        runs: Vec::new(),
        since: p.since()?,
        until: p.until()?,
        after: p.after()?,
        limit: p.limit(),
    };
    Ok(Json(queries::board(app.views(), &filter).await?))
}

pub async fn runs(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Json<Page<RunRow>>> {
    let filter = RunFilter {
        statuses: p.statuses(),
        workflow: p.workflow.clone(),
        since: p.since()?,
        until: p.until()?,
        after: p.after()?,
        limit: p.limit(),
    };
    Ok(Json(queries::runs(app.views(), &filter).await?))
}

pub async fn timeline(
    State(app): State<AppState>,
    Path(run_id): Path<String>,
) -> Api<Json<Timeline>> {
    queries::timeline(app.views(), &run_id)
        .await?
        .map(Json)
        .ok_or_else(|| {
            ApiError::not_found("run_not_found", format!("no run {run_id} in the runs view"))
        })
}

pub async fn inbox(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Json<Vec<GateRow>>> {
    let filter = InboxFilter {
        workflow: p.workflow.clone(),
        limit: p.limit(),
    };
    Ok(Json(queries::inbox(app.views(), &filter).await?))
}

pub async fn agents(State(app): State<AppState>) -> Api<Json<Vec<AgentRow>>> {
    Ok(Json(queries::agents(app.views()).await?))
}

pub async fn audit(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Json<Page<AuditRow>>> {
    let filter = AuditFilter {
        actor: p.actor.clone(),
        since: p.since()?,
        until: p.until()?,
        after: p.after()?,
        limit: p.limit(),
    };
    Ok(Json(queries::audit(app.views(), &filter).await?))
}

pub async fn workflow_analytics(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Json<Vec<WorkflowStats>>> {
    let filter = AnalyticsFilter {
        workflow: p.workflow.clone(),
        since: p.since()?,
        until: p.until()?,
    };
    Ok(Json(queries::workflow_stats(app.views(), &filter).await?))
}

pub async fn step_analytics(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Json<Vec<StepStats>>> {
    Ok(Json(
        queries::step_stats(app.views(), p.workflow.as_deref()).await?,
    ))
}

/// Model use of awl's own agents per model, agent or workflow (`by`).
pub async fn model_analytics(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Json<Vec<ModelUseStats>>> {
    let filter = ModelUseFilter {
        by: p.by.unwrap_or_default(),
        model: p.model.clone(),
        agent: p.agent.clone(),
        workflow: p.workflow.clone(),
        since: p.since()?,
        until: p.until()?,
    };
    Ok(Json(queries::model_use(app.views(), &filter).await?))
}

/// awl's own agents' solves, newest first.
pub async fn solves(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Json<Page<SolveRow>>> {
    let filter = SolveFilter {
        statuses: p.statuses().iter().map(|s| s.to_lowercase()).collect(),
        agent: p.agent.clone(),
        model: p.model.clone(),
        workflow: p.workflow.clone(),
        after: p.after()?,
        limit: p.limit(),
        ..SolveFilter::default()
    };
    Ok(Json(queries::solves(app.views(), &filter).await?))
}

pub async fn agent_analytics(State(app): State<AppState>) -> Api<Json<Vec<AgentStats>>> {
    Ok(Json(queries::agent_stats(app.views()).await?))
}

/// Which server follows the log into the projections.
pub async fn projections_follower(State(app): State<AppState>) -> Api<Json<Follower>> {
    let now = (app.clock)();
    Ok(Json(
        lease::follower(app.board.store(), Some(&app.projections_lease), now).await?,
    ))
}

/// Each projection's checkpoint and lag.
pub async fn projections(State(app): State<AppState>) -> Api<Json<Vec<ProjectionStatus>>> {
    Ok(Json(
        Projections::new(app.board.store().clone()).status().await?,
    ))
}
