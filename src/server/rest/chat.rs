//! Chat's incoming endpoints: Slack's interactivity and slash-command URLs, Discord's
//! interactions endpoint. No token: each request's signature is the credential,
//! checked by `chat::incoming` before anything in it is read (401 otherwise). Without
//! a chat file the routes answer 404.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::chat::incoming::{Answer, Incoming, Signed};
use crate::server::AppState;
use crate::server::error::ApiError;

use super::Api;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn incoming(app: &AppState) -> Result<&Incoming, ApiError> {
    app.chat.as_ref().ok_or_else(|| {
        ApiError::not_found(
            "chat_not_configured",
            "chat is not configured on this server (no chat file: --chat-config)",
        )
    })
}

fn respond(answer: Answer) -> Response {
    match answer {
        Answer::Empty => StatusCode::OK.into_response(),
        Answer::Json(v) => Json(v).into_response(),
    }
}

fn slack<'a>(headers: &'a HeaderMap, body: &'a Bytes) -> Signed<'a> {
    Signed {
        timestamp: header(headers, "x-slack-request-timestamp"),
        signature: header(headers, "x-slack-signature"),
        body,
    }
}

/// `POST /api/v1/chat/slack/interactions`
pub async fn slack_interactions(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Api<Response> {
    let answer = incoming(&app)?
        .slack_interaction(slack(&headers, &body))
        .await?;
    Ok(respond(answer))
}

/// `POST /api/v1/chat/slack/commands`
pub async fn slack_commands(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Api<Response> {
    let answer = incoming(&app)?
        .slack_command(slack(&headers, &body))
        .await?;
    Ok(respond(answer))
}

/// `POST /api/v1/chat/slack/events`
pub async fn slack_events(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Api<Response> {
    let answer = incoming(&app)?.slack_event(slack(&headers, &body)).await?;
    Ok(respond(answer))
}

/// `POST /api/v1/chat/discord/interactions`
pub async fn discord_interactions(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Api<Response> {
    let signed = Signed {
        timestamp: header(&headers, "x-signature-timestamp"),
        signature: header(&headers, "x-signature-ed25519"),
        body: &body,
    };
    let answer = incoming(&app)?.discord_interaction(signed).await?;
    Ok(respond(answer))
}
