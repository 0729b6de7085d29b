//! An OTLP/HTTP (JSON) trace receiver for a test: every span an `awl` process exports,
//! with its resource's attributes, kept in memory.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use reqwest::StatusCode;
use serde_json::Value;

/// What the OTLP receiver got: every span, with its resource's attributes.
#[derive(Clone, Default)]
pub struct Received(pub Arc<Mutex<Vec<Value>>>);

impl Received {
    /// The spans received so far.
    pub fn spans(&self) -> Vec<Value> {
        self.0.lock().expect("spans").clone()
    }
}

/// The receiver's routes: `POST /v1/traces`.
pub fn router(got: Received) -> Router {
    Router::new()
        .route("/v1/traces", post(receive))
        .with_state(got)
}

async fn receive(State(got): State<Received>, body: Bytes) -> StatusCode {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let mut spans = got.0.lock().expect("spans");
    for rs in request["resourceSpans"].as_array().into_iter().flatten() {
        let resource = attributes(&rs["resource"]["attributes"]);
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for span in ss["spans"].as_array().into_iter().flatten() {
                let mut span = span.clone();
                span["resource"] = resource.clone();
                span["attrs"] = attributes(&span["attributes"]);
                spans.push(span);
            }
        }
    }
    StatusCode::OK
}

/// OTLP attributes (`[{key, value: {stringValue | intValue | ...}}]`) as an object.
pub fn attributes(list: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for kv in list.as_array().into_iter().flatten() {
        let value = kv["value"]
            .as_object()
            .and_then(|v| v.values().next())
            .cloned()
            .unwrap_or(Value::Null);
        if let Some(key) = kv["key"].as_str() {
            out.insert(key.to_string(), value);
        }
    }
    Value::Object(out)
}
