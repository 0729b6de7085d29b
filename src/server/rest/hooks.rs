//! Webhooks: a delivery to `POST /api/v1/hooks/NAME` starts the hook's run. The
//! route needs no token: the hook's signature is the credential, checked by the
//! hooks service before anything is recorded.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde_json::{Map, Value};

use crate::hooks::Delivery;
use crate::server::AppState;
use crate::server::wire::StartedRun;

use super::Api;

/// The headers a delivery's templates see: every header with a text value, by its
/// lower-case name (the signature's own included; it proves nothing to a template).
fn headers_of(headers: &HeaderMap) -> Map<String, Value> {
    headers
        .iter()
        .filter_map(|(name, value)| {
            value.to_str().ok().map(|v| {
                (
                    name.as_str().to_ascii_lowercase(),
                    Value::String(v.to_string()),
                )
            })
        })
        .collect()
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

pub async fn deliver(
    State(app): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Api<(StatusCode, Json<StartedRun>)> {
    let delivery = Delivery {
        id: header(&headers, "webhook-id"),
        timestamp: header(&headers, "webhook-timestamp"),
        signature: header(&headers, "webhook-signature"),
        headers: headers_of(&headers),
        body: body.to_vec(),
    };
    let started = app.hooks.deliver(&name, delivery).await?;
    let status = if started.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(StartedRun::from(&started))))
}
