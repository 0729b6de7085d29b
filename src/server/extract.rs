//! Request bodies: JSON with clear errors, and an empty body read as `{}`.
//!
//! axum's own `Json` answers a bad body in plain text; here every problem is a JSON
//! error with a code: `body_too_large` (413), `malformed_json` (400: not JSON, with
//! line and column), `invalid_body` (422: JSON of the wrong shape, naming the field,
//! unknown fields included).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON body of type `T`; an empty body is `{}` (so `T`'s defaults apply).
pub struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "body_too_large",
                    e.body_text(),
                )
            } else {
                ApiError::new(StatusCode::BAD_REQUEST, "unreadable_body", e.body_text())
            }
        })?;
        parse(&bytes).map(Body)
    }
}

/// Parse a body, telling malformed JSON from JSON of the wrong shape.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(text).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Syntax | Category::Eof | Category::Io => ApiError::new(
                StatusCode::BAD_REQUEST,
                "malformed_json",
                format!("the body is not valid JSON: {e}"),
            ),
            Category::Data => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_body",
                format!("the body does not have the expected shape: {e}"),
            ),
        }
    })
}

/// Query parameters of type `T`; a bad one (unknown, or of the wrong type) is a JSON
/// error `invalid_query` (400) like every other error, not axum's plain text.
pub struct Params<T>(pub T);

impl<S, T> FromRequestParts<S> for Params<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Params(q.0))
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, "invalid_query", e.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::wire::SendTaskRequest;

    #[test]
    fn malformed_unknown_and_empty_bodies() {
        let e = parse::<SendTaskRequest>(b"{\"prompt\": ").err().unwrap();
        assert_eq!((e.status.as_u16(), e.code), (400, "malformed_json"));
        let e = parse::<SendTaskRequest>(b"{\"prompt\": \"x\", \"colour\": 1}")
            .err()
            .unwrap();
        assert_eq!((e.status.as_u16(), e.code), (422, "invalid_body"));
        assert!(
            e.message.contains("unknown field `colour`"),
            "{}",
            e.message
        );
        let e = parse::<SendTaskRequest>(b"{\"prompt\": 5}").err().unwrap();
        assert_eq!(e.code, "invalid_body");
        assert!(parse::<crate::server::wire::AgentCall>(b"  ").is_ok());
    }
}
