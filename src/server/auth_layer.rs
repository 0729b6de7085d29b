//! The auth middleware: every request's bearer token is checked against the route
//! table before any handler runs, and the caller's [`Principal`] is put in the
//! request's extensions for the handlers (and MCP tools) to use.
//!
//! With no tokens in the store, auth is off: the server then listens on loopback only
//! (checked at start-up) and every caller is the local admin.

use std::sync::Arc;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::{Permission, Principal, TokenVerifier};

use super::error::ApiError;
use super::routes::routes;

/// How callers are identified.
pub enum AuthMode {
    /// No tokens exist: everyone is the local admin (loopback only).
    Off,
    Tokens(TokenVerifier),
}

pub struct AuthState {
    pub mode: AuthMode,
    permissions: Vec<(Method, &'static str, Permission)>,
}

impl AuthState {
    pub fn new(mode: AuthMode) -> Self {
        Self {
            mode,
            permissions: routes()
                .into_iter()
                .map(|r| (r.method, r.path, r.permission))
                .collect(),
        }
    }

    fn knows_path(&self, path: &str) -> bool {
        self.permissions.iter().any(|(_, p, _)| *p == path)
    }

    fn permission(&self, method: &Method, path: &str) -> Option<Permission> {
        self.permissions
            .iter()
            .find(|(m, p, _)| m == method && *p == path)
            .map(|(_, _, perm)| *perm)
    }
}

pub async fn authenticate(
    State(auth): State<Arc<AuthState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let matched = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let path = matched
        .clone()
        .unwrap_or_else(|| request.uri().path().to_string());
    let Some(permission) = auth.permission(request.method(), &path) else {
        if matched.is_some() && !auth.knows_path(&path) {
            // A route of the router that the table does not list: deny by default.
            return ApiError::forbidden(format!(
                "{} {path} has no permission in the route table",
                request.method()
            ))
            .into_response();
        }
        // No route at all, or another method of a listed path: the router answers 404
        // or 405 (no handler runs).
        return next.run(request).await;
    };
    let principal = match &auth.mode {
        AuthMode::Off => Principal::local(),
        AuthMode::Tokens(_) if permission == Permission::Public => Principal::local_public(),
        AuthMode::Tokens(verifier) => {
            let Some(token) = bearer(&request) else {
                return unauthorized(
                    "this route needs a bearer token: Authorization: Bearer awl_...",
                );
            };
            match verifier.verify(token).await {
                Ok(Some(principal)) => principal,
                Ok(None) => return unauthorized("the bearer token is unknown or revoked"),
                Err(e) => return ApiError::from(e).into_response(),
            }
        }
    };
    if !principal.may(permission) {
        return ApiError::forbidden(format!(
            "{} token may not {} {} (it needs {:?})",
            principal.role.with_article(),
            request.method(),
            path,
            permission
        ))
        .into_response();
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

fn bearer(request: &Request) -> Option<&str> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn unauthorized(message: &str) -> Response {
    let mut response =
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message).into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    response
}
