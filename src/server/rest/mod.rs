//! The REST handlers, one file per resource. Each parses its input, checks who may act
//! (beyond the route's permission, which the auth middleware checked), calls a service
//! (the board, runs, the read-model queries) and shapes the answer. No rule lives here.

pub mod agents;
pub mod chat;
pub mod hooks;
pub mod learning;
pub mod live;
pub mod meta;
pub mod runs;
pub mod schedules;
pub mod solve;
pub mod tasks;
pub mod tokens;
pub mod views;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::auth::Principal;

use super::error::ApiError;

type Api<T> = Result<T, ApiError>;
type Who = axum::Extension<Principal>;

/// 201 for a new resource, 200 for one an idempotent request found.
fn created_or_found<T: Serialize>(created: bool, body: T) -> Response {
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (status, Json(body)).into_response()
}
