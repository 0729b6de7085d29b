//! awl's own agents over HTTP: the tool registry, the agent definitions, asking an
//! agent (`POST /api/v1/solve`, answered whole or as Server-Sent Events of its phases
//! and tokens) and reading a solve back.
//!
//! A solve runs in a task of its own: a client that goes away, or a request that
//! times out, does not cut it off half-way (it finishes and stays readable at
//! `GET /api/v1/solves/{id}`).

use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::json;

use crate::agents::SolveResult;
use crate::domain::ids::SolveId;
use crate::domain::solve::SolveEvent;
use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::extract::Body;
use crate::server::operate::{self, SolveUpdate};
use crate::server::wire::{AgentDefinitionView, SolveRequest, ToolView};

use super::{Api, Who};

pub async fn tools(State(app): State<AppState>) -> Api<Json<Vec<ToolView>>> {
    Ok(Json(
        app.agents.registry().list().map(ToolView::of).collect(),
    ))
}

pub async fn definitions(State(app): State<AppState>) -> Api<Json<Vec<AgentDefinitionView>>> {
    Ok(Json(
        app.agents.list().map(AgentDefinitionView::of).collect(),
    ))
}

pub async fn show(State(app): State<AppState>, Path(id): Path<String>) -> Api<Json<SolveResult>> {
    let id: SolveId = id
        .parse()
        .map_err(|e| ApiError::invalid(format!("solve id {id:?}: {e}")))?;
    Ok(Json(app.agents.solve(id).await?))
}

pub async fn solve(
    State(app): State<AppState>,
    who: Who,
    headers: HeaderMap,
    Body(req): Body<SolveRequest>,
) -> Result<Response, ApiError> {
    let streaming = req.stream
        || headers
            .get("accept")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/event-stream"));
    let mut rx = operate::ask_agent(&app, &req.agent, &req.prompt, &who.name)?;
    if !streaming {
        return Ok(Json(operate::solve_result(&mut rx).await?).into_response());
    }
    let events = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|update| (update, rx))
    })
    .map(|update| Ok::<_, Infallible>(sse_event(update)));
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response())
}

fn sse_event(update: SolveUpdate) -> Event {
    let (name, data) = match update {
        SolveUpdate::Token(text) => ("token", json!({ "text": text })),
        SolveUpdate::Event(event) => {
            let name = match &event {
                SolveEvent::Started { .. } => "started",
                SolveEvent::ModelReplied { .. } => "model",
                SolveEvent::ToolFinished { .. } => "tool",
                SolveEvent::Finished { .. } => "finished",
                SolveEvent::Failed { .. } => "failed",
            };
            let payload = serde_json::to_value(&event).unwrap_or_default();
            let inner = payload
                .as_object()
                .and_then(|o| o.values().next().cloned())
                .unwrap_or_default();
            (name, inner)
        }
        SolveUpdate::Done(Ok(result)) => {
            ("result", serde_json::to_value(&result).unwrap_or_default())
        }
        SolveUpdate::Done(Err(e)) => ("error", json!({ "message": e.to_string() })),
    };
    Event::default()
        .event(name)
        .json_data(&data)
        .unwrap_or_else(|_| Event::default().event("error").data("could not encode"))
}
