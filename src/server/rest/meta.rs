//! The server itself: liveness and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::server::AppState;

/// `GET /health`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    pub status: String,
    pub store: String,
    pub auth: bool,
}

pub async fn health(State(app): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        store: app.board.store().backend_name().into(),
        auth: app.auth_on,
    })
}

/// The OpenAPI document, generated from the route table when the server started.
pub async fn openapi_doc(State(app): State<AppState>) -> Json<Value> {
    Json(app.openapi.as_ref().clone())
}
