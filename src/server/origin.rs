//! The `Origin` check in front of `/mcp`.
//!
//! The MCP specification's streamable HTTP transport says servers MUST validate the
//! `Origin` header of every request and answer 403 to an invalid one: a web page the
//! user visits must not be able to drive a local or internal MCP server (DNS
//! rebinding makes the page's host name point at the server, so the `Host` check
//! alone cannot tell). This check runs before the token check, with auth on or off,
//! so a page gets 403 whatever it sends.
//!
//! Allowed: requests without `Origin` (clients that are not browsers send none),
//! loopback origins on any port (`localhost`, `127.0.0.0/8`, `[::1]`: code on the
//! same machine), and the origins the operator lists (`--allowed-origin`, an exact
//! scheme, host and port, or `:*` for any port). Everything else, `Origin: null`
//! included, is refused.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// The path the check guards.
pub const MCP_PATH: &str = "/mcp";

/// An origin as RFC 6454 compares them: scheme, host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    scheme: String,
    host: String,
    /// `None` in an allow-list entry: any port.
    port: Option<u16>,
}

/// Which browser origins may call `/mcp`.
#[derive(Debug, Clone, Default)]
pub struct AllowedOrigins {
    listed: Vec<Origin>,
}

/// An allow-list entry that is not `scheme://host[:port|:*]`.
#[derive(Debug, thiserror::Error)]
#[error("--allowed-origin {0:?} is not an origin: write scheme://host[:port], or :* for any port")]
pub struct BadOrigin(String);

impl AllowedOrigins {
    pub fn new(entries: &[String]) -> Result<Self, BadOrigin> {
        let listed = entries
            .iter()
            .map(|e| parse(e, true).ok_or_else(|| BadOrigin(e.clone())))
            .collect::<Result<_, _>>()?;
        Ok(Self { listed })
    }

    /// Whether a request carrying `Origin: value` may proceed.
    pub fn allows(&self, value: &str) -> bool {
        let Some(origin) = parse(value, false) else {
            return false;
        };
        is_loopback(&origin.host)
            || self.listed.iter().any(|allowed| {
                allowed.scheme == origin.scheme
                    && allowed.host == origin.host
                    && allowed.port.is_none_or(|p| Some(p) == origin.port)
            })
    }
}

/// Parse `scheme://host[:port]` (an entry may end in `:*`). Ports are made explicit
/// (80 for http, 443 for https) so `https://a` and `https://a:443` are one origin.
fn parse(value: &str, entry: bool) -> Option<Origin> {
    let (value, any_port) = match value.strip_suffix(":*") {
        Some(rest) if entry => (rest, true),
        _ => (value, false),
    };
    let uri: Uri = value.parse().ok()?;
    let scheme = uri.scheme_str()?.to_ascii_lowercase();
    let host = uri.host()?.to_ascii_lowercase();
    // An origin is scheme, host and port only.
    if uri
        .path_and_query()
        .is_some_and(|p| p.as_str() != "/" && !p.as_str().is_empty())
        || value.contains('@')
    {
        return None;
    }
    let default = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let port = if any_port {
        None
    } else {
        Some(uri.port_u16().unwrap_or(default))
    };
    Some(Origin { scheme, host, port })
}

fn is_loopback(host: &str) -> bool {
    if host == "localhost" {
        return true;
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Middleware: refuse a request to `/mcp` whose `Origin` is not allowed.
pub async fn check(
    State(allowed): State<Arc<AllowedOrigins>>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() == MCP_PATH
        && let Some(origin) = request.headers().get(header::ORIGIN)
    {
        let value = origin.to_str().unwrap_or("");
        if !allowed.allows(value) {
            tracing::warn!(origin = ?origin, "refused an MCP request from a disallowed Origin");
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "origin_not_allowed",
                format!(
                    "Origin {origin:?} may not call {MCP_PATH}: only loopback origins and those \
                     given with --allowed-origin may"
                ),
            )
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests;
