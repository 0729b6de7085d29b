//! Learning over HTTP: mining status, the proposals inbox (show, approve, reject), the
//! learned workflows' uses, and suggestions for a context, through the learner. Each
//! caller sees its own scope's learning (an admin every scope's); approving and
//! rejecting need a person's role, which the route table checks.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;

use crate::learning::{LearnStatus, LearnedUse, ProposalView, ProposeReport};
use crate::server::AppState;
use crate::server::caller::viewer;
use crate::server::extract::{Body, Params};
use crate::server::wire::{
    ApproveProposalRequest, RejectProposalRequest, SuggestRequest, SuggestionList,
};

use super::{Api, Who};

/// `?status=OPEN` (or APPROVED, REJECTED, SUPERSEDED).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProposalParams {
    status: Option<String>,
}

pub async fn status(State(app): State<AppState>) -> Api<Json<LearnStatus>> {
    Ok(Json(app.learner.status().await?))
}

pub async fn mine(State(app): State<AppState>, who: Who) -> Api<Json<ProposeReport>> {
    Ok(Json(app.learner.propose(&who.name, (app.clock)()).await?))
}

pub async fn proposals(
    State(app): State<AppState>,
    who: Who,
    Params(params): Params<ProposalParams>,
) -> Api<Json<Vec<ProposalView>>> {
    let status = params.status.as_deref().map(str::to_ascii_uppercase);
    if let Some(s) = &status
        && !["OPEN", "APPROVED", "REJECTED", "SUPERSEDED"].contains(&s.as_str())
    {
        return Err(crate::server::ApiError::invalid(format!(
            "status `{s}` is not one of OPEN, APPROVED, REJECTED, SUPERSEDED"
        )));
    }
    Ok(Json(
        app.learner
            .proposals(&viewer(&who), status.as_deref())
            .await?,
    ))
}

pub async fn proposal(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
) -> Api<Json<ProposalView>> {
    Ok(Json(app.learner.proposal(&viewer(&who), &id).await?))
}

pub async fn approve(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<ApproveProposalRequest>,
) -> Api<Json<ProposalView>> {
    let decided = app
        .learner
        .approve(&viewer(&who), &id, req.shared, &who.name, (app.clock)())
        .await?;
    Ok(Json(decided))
}

pub async fn reject(
    State(app): State<AppState>,
    who: Who,
    Path(id): Path<String>,
    Body(req): Body<RejectProposalRequest>,
) -> Api<Json<ProposalView>> {
    let decided = app
        .learner
        .reject(&viewer(&who), &id, &req.reason, &who.name, (app.clock)())
        .await?;
    Ok(Json(decided))
}

pub async fn uses(State(app): State<AppState>, who: Who) -> Api<Json<Vec<LearnedUse>>> {
    Ok(Json(app.learner.uses(&viewer(&who)).await?))
}

pub async fn suggest(
    State(app): State<AppState>,
    who: Who,
    Body(req): Body<SuggestRequest>,
) -> Api<Json<SuggestionList>> {
    let suggestions = app
        .learner
        .suggest(&viewer(&who), &req.context(), req.threshold, req.limit()?)
        .await?;
    Ok(Json(SuggestionList { suggestions }))
}
