//! Every request as a span and a metric sample. The span (`HTTP {method} {route}`,
//! with the HTTP semantic-convention attributes) continues the caller's trace when the
//! request carries a W3C `traceparent`; the metric is labelled with the route template
//! (`/api/v1/tasks/{task_id}`), never the raw path, so its labels stay bounded.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::telemetry;

pub async fn observe(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let span = tracing::info_span!(
        "http.request",
        otel.name = %format!("{method} {route}"),
        otel.kind = "server",
        http.request.method = %method,
        http.route = %route,
        url.path = %request.uri().path(),
        http.response.status_code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    let parent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    telemetry::set_parent(&span, parent);
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    if status >= 500 {
        span.record("otel.status_code", "ERROR");
    }
    telemetry::http_request(
        method.as_str(),
        &route,
        status,
        started.elapsed().as_secs_f64(),
    );
    response
}
