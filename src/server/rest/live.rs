//! Live updates as Server-Sent Events: the raw log, and one stream per view.
//!
//! Every message's `id` is the global position of the event it is about, so a client
//! that reconnects with `Last-Event-ID` (or `?after=`) resumes exactly after the last
//! event it saw. A view's stream sends an event only once the view's projection has
//! applied it, so a client that re-reads the view on a message sees the change.
//! Streams end when the server stops.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::json;

use crate::log::{EventFilter, StreamType};
use crate::projections::queries;
use crate::server::AppState;
use crate::server::error::ApiError;
use crate::server::extract::Params;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamParams {
    /// Resume after this position (the `Last-Event-ID` header wins).
    after: Option<i64>,
    /// Only these stream types (comma-separated: run,task,agent,workflow).
    stream_type: Option<String>,
}

/// Where to start: `Last-Event-ID`, else `?after=`, else the current head.
async fn start(app: &AppState, headers: &HeaderMap, after: Option<i64>) -> Result<i64, ApiError> {
    if let Some(id) = headers.get("last-event-id") {
        let text = id.to_str().unwrap_or_default();
        return text.trim().parse().map_err(|_| {
            ApiError::invalid(format!("Last-Event-ID {text:?} is not a log position"))
        });
    }
    match after {
        Some(a) if a >= 0 => Ok(a),
        Some(a) => Err(ApiError::invalid(format!("after must be >= 0, not {a}"))),
        None => Ok(app.board.store().head().await?),
    }
}

fn stream_types(list: Option<&str>) -> Result<Vec<StreamType>, ApiError> {
    list.map(|l| {
        l.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                s.trim()
                    .parse::<StreamType>()
                    .map_err(|e| ApiError::invalid(e.to_string()))
            })
            .collect()
    })
    .unwrap_or_else(|| Ok(Vec::new()))
}

type Events = std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;
type EventStream = Sse<axum::response::sse::KeepAliveStream<Events>>;

fn sse(events: Events) -> EventStream {
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// `GET /api/v1/events/stream`: every event of the log, live.
pub async fn log_stream(
    State(app): State<AppState>,
    headers: HeaderMap,
    Params(p): Params<StreamParams>,
) -> Result<EventStream, ApiError> {
    let after = start(&app, &headers, p.after).await?;
    let filter = EventFilter {
        stream_types: stream_types(p.stream_type.as_deref())?,
        ..EventFilter::default()
    };
    let closing = app.board.closing();
    let store = app.board.store().clone();
    let events = app
        .board
        .store()
        .tail(after, filter)
        .take_until(wait_closed(closing))
        .then(move |e| {
            let store = store.clone();
            async move { reveal_one(&store, e).await }
        })
        .map(|e| {
            Ok(match e {
                Ok(e) => Event::default()
                    .id(e.position.to_string())
                    .event(e.event_type.clone())
                    .json_data(&e)
                    .unwrap_or_else(|_| {
                        Event::default()
                            .event("error")
                            .data("an event could not be encoded")
                    }),
                Err(e) => Event::default().event("error").data(e.to_string()),
            })
        });
    Ok(sse(Box::pin(events)))
}

/// An event as a viewer may see it (secrets redacted, personal data opened while its
/// subject is remembered).
async fn reveal_one(
    store: &crate::store::EventStore,
    event: Result<crate::log::RecordedEvent, crate::store::StoreError>,
) -> Result<crate::log::RecordedEvent, crate::store::StoreError> {
    let mut event = event?;
    store
        .reveal_events(std::slice::from_mut(&mut event), crate::vault::Reveal::View)
        .await?;
    Ok(event)
}

async fn wait_closed(mut closing: tokio::sync::watch::Receiver<bool>) {
    let _ = closing.wait_for(|c| *c).await;
}

/// The projection behind a view, and the streams whose events change it.
fn view_source(view: &str) -> Option<(&'static str, Vec<StreamType>)> {
    Some(match view {
        "board" => ("board", vec![StreamType::Task]),
        "runs" | "inbox" | "timeline" | "analytics" => ("runs", vec![StreamType::Run]),
        "agents" => ("agents", vec![StreamType::Agent, StreamType::Task]),
        "audit" => ("audit", Vec::new()),
        "learned" => ("proposals", vec![StreamType::Workflow]),
        "models" => ("model_use", vec![StreamType::Solve]),
        _ => return None,
    })
}

/// `GET /api/v1/views/{view}/stream`: a message for each event that changed the view,
/// sent once the view's projection has applied it.
pub async fn view_stream(
    State(app): State<AppState>,
    Path(view): Path<String>,
    headers: HeaderMap,
    Params(p): Params<StreamParams>,
) -> Result<EventStream, ApiError> {
    let (projection, kinds) = view_source(&view).ok_or_else(|| {
        ApiError::not_found(
            "no_view",
            format!(
                "no view {view:?}: board, runs, inbox, timeline, analytics, models, agents, audit or \
                 learned"
            ),
        )
    })?;
    let after = start(&app, &headers, p.after).await?;
    let filter = EventFilter {
        stream_types: kinds,
        ..EventFilter::default()
    };
    let store = app.board.store().clone();
    let closing = app.board.closing();
    // The projection's checkpoint as last read: events at or below it need no query
    // (one read usually covers a whole burst of events).
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let events = store
        .tail(after, filter)
        .take_until(wait_closed(closing))
        .then(move |e| {
            // The checkpoint as the views' database has it: with a read replica, an
            // event is told once the replica holds the projection's rows for it, so a
            // dashboard that re-reads the view on this signal sees the change.
            let store = app.views().clone();
            let seen = seen.clone();
            async move {
                let e = match e {
                    Ok(e) => e,
                    Err(e) => return Ok(Event::default().event("error").data(e.to_string())),
                };
                if seen.load(Ordering::Relaxed) < e.position {
                    let at = applied(&store, projection, e.position).await;
                    seen.fetch_max(at, Ordering::Relaxed);
                }
                let data = json!({
                    "position": e.position,
                    "stream_type": e.stream.kind.as_str(),
                    "stream_id": e.stream.id,
                    "event_type": e.event_type,
                });
                Ok(Event::default()
                    .id(e.position.to_string())
                    .event("changed")
                    .data(data.to_string()))
            }
        });
    Ok(sse(Box::pin(events)))
}

/// Wait (up to 5 s) until `projection` has applied `position`; its checkpoint then.
async fn applied(store: &crate::store::EventStore, projection: &str, position: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut at = 0;
    while tokio::time::Instant::now() < deadline {
        at = queries::checkpoint(store, projection).await.unwrap_or(0);
        if at >= position {
            return at;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    at
}
