//! The dashboard: three files embedded in the binary and served as they are. They hold
//! no data (every view is fetched from the API with the browser's token), so they are
//! public; the headers forbid framing (the inbox has approve buttons) and any script
//! or style from elsewhere.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("dashboard/index.html");
const APP: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

pub async fn index() -> Response {
    asset(INDEX, "text/html; charset=utf-8")
}

pub async fn app() -> Response {
    asset(APP, "text/javascript; charset=utf-8")
}

pub async fn style() -> Response {
    asset(STYLE, "text/css; charset=utf-8")
}
