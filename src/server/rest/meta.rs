//! The server itself: liveness, readiness, metrics and the OpenAPI document.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::projections::Projections;
use crate::server::AppState;
use crate::store::EventStore;
use crate::telemetry;

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

/// `GET /ready`: whether this server can do its work now.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct Readiness {
    pub ready: bool,
    pub checks: Vec<ReadyCheck>,
}

/// One condition of readiness.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct ReadyCheck {
    /// `database`, `migrations`, `projections` or `read_database`.
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

/// Ready when the database answers, every migration is applied, every projection is
/// within the configured lag of the log's head, and the read database (when views are
/// served from a replica) answers within that lag too. 503 otherwise, saying which.
pub async fn ready(State(app): State<AppState>) -> Response {
    let readiness = readiness(&app).await;
    let status = if readiness.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(readiness)).into_response()
}

async fn readiness(app: &AppState) -> Readiness {
    let store = app.board.store();
    let check = |name: &str, result: Result<String, String>| ReadyCheck {
        name: name.to_string(),
        ok: result.is_ok(),
        detail: result.unwrap_or_else(|e| e),
    };
    let database = store
        .ping()
        .await
        .map(|()| "answers".to_string())
        .map_err(|e| e.to_string());
    let mut checks = vec![check("database", database.clone())];
    if database.is_ok() {
        let migrations = match store.pending_migrations().await {
            Ok(pending) if pending.is_empty() => Ok("all applied".to_string()),
            Ok(pending) => Err(format!("not applied: {pending:?}")),
            Err(e) => Err(e.to_string()),
        };
        checks.push(check("migrations", migrations));
        let max = app.ready_max_lag;
        let projections = match Projections::new(store.clone()).status().await {
            Ok(all) => {
                let behind: Vec<String> = all
                    .iter()
                    .filter(|p| p.lag > max)
                    .map(|p| format!("{} is {} events behind", p.name, p.lag))
                    .collect();
                if behind.is_empty() {
                    Ok(format!("every projection within {max} events of the log"))
                } else {
                    Err(behind.join("; "))
                }
            }
            Err(e) => Err(e.to_string()),
        };
        checks.push(check("projections", projections));
    }
    if let Some(replica) = &app.read_store {
        checks.push(check(
            "read_database",
            read_database(store, replica, app.ready_max_lag).await,
        ));
    }
    Readiness {
        ready: checks.iter().all(|c| c.ok),
        checks,
    }
}

/// The read database (views) answers and is within `max` events of the log's head.
async fn read_database(
    store: &EventStore,
    replica: &EventStore,
    max: i64,
) -> Result<String, String> {
    let status = store
        .replica_status(replica)
        .await
        .map_err(|e| e.to_string())?;
    let what = if status.in_recovery {
        "a standby"
    } else {
        "not a standby (the primary itself)"
    };
    if status.lag() > max {
        return Err(format!(
            "{what} {} events behind the log (at {}, the head is {}), more than {max}",
            status.lag(),
            status.replica_head,
            status.primary_head
        ));
    }
    Ok(format!("{what} {} events behind the log", status.lag()))
}

/// `GET /metrics`: every metric of this process, in the Prometheus text format.
pub async fn metrics() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        telemetry::render(),
    )
        .into_response()
}
