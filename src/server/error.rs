//! API errors: a status, a stable code and a message that says what and where.
//!
//! Every error body is `{"error": {"code": "...", "message": "..."}}`; clients branch
//! on `code`, people read `message`.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;

use crate::board::BoardError;
use crate::executor::ExecError;
use crate::store::StoreError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

/// The body of every error response.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorDetail {
    /// Stable: `unauthorized`, `forbidden`, `task_not_found`, `illegal_transition`, ...
    pub code: String,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, message = %self.message, "request failed");
        }
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<BoardError> for ApiError {
    fn from(e: BoardError) -> Self {
        let code = e.code();
        let status = match code {
            "task_not_found" | "agent_not_found" => StatusCode::NOT_FOUND,
            "not_assignee" | "forbidden" => StatusCode::FORBIDDEN,
            "invalid_request" => StatusCode::UNPROCESSABLE_ENTITY,
            "busy" => StatusCode::SERVICE_UNAVAILABLE,
            "store_error" => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::CONFLICT,
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Refused(m) => ApiError::new(StatusCode::CONFLICT, "refused", m),
            StoreError::Conflict { .. } => {
                ApiError::new(StatusCode::CONFLICT, "conflict", e.to_string())
            }
            e => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "store_error",
                e.to_string(),
            ),
        }
    }
}

impl From<ExecError> for ApiError {
    fn from(e: ExecError) -> Self {
        match e {
            ExecError::Store(s) => s.into(),
            ExecError::Invalid(d) => ApiError::invalid(d.to_string()),
            ExecError::Refused(m)
                if m.starts_with("no gate")
                    || m.contains("has no version")
                    || m.starts_with("no runnable") =>
            {
                ApiError::not_found("not_found", m)
            }
            ExecError::Refused(m) => ApiError::new(StatusCode::CONFLICT, "illegal_transition", m),
            e => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()),
        }
    }
}
