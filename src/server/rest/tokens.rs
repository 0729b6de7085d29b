//! API tokens (admin only): list, create (the secret is in the answer only), revoke.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::Utc;

use crate::auth::Role;
use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::extract::Body;
use crate::server::wire::{CreateTokenRequest, CreatedToken, TokenView};

use super::{Api, Who};

pub async fn list(State(app): State<AppState>) -> Api<Json<Vec<TokenView>>> {
    let records = app.board.store().tokens().await?;
    Ok(Json(records.into_iter().map(TokenView::from).collect()))
}

pub async fn create(
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

pub async fn revoke(State(app): State<AppState>, Path(name): Path<String>) -> Api<Json<TokenView>> {
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
