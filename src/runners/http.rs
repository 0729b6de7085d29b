//! `http` steps and `notify` webhooks.
//!
//! One shared reqwest client (rustls with the ring provider, connection pooling),
//! `http` and `https` URLs only, the attempt's timeout over the whole exchange, and
//! the response body streamed and cut at the step's cap (reading stops there: a huge
//! or endless body costs at most the cap). URLs in messages lose their query string
//! and credentials, which is where tokens tend to be.
//!
//! Output: `{status, headers: {lowercase name: value}, body, truncated?}`, `body`
//! being the JSON value when the (complete) body parses as JSON, else the text.
//!
//! | outcome | class |
//! |---|---|
//! | status in `expect_status` (default: any 2xx) | success |
//! | cannot connect (refused, DNS, TLS, nothing within `connect_timeout`), connection reset | `network` |
//! | attempt timeout | `timeout` |
//! | 429 | `rate_limit` (the message carries `Retry-After`) |
//! | 401, 403 | `authentication` |
//! | 5xx | `dependency` |
//! | any other status | `validation` (the request was wrong) |
//! | bad URL, scheme other than http/https, bad header | `validation` |
//! | too many redirects | `dependency` |
//!
//! A failed response's output is attached to the failure.
//!
//! `notify` always records `{message, mentions, delivered, status?}`; with a `url` it
//! POSTs `{"text": ..., "content": ...}`, which Slack (`text`) and Discord
//! (`content`) incoming webhooks both accept, mentions written `@name` before the
//! message (a mention already written `@name` or `<@id>` is kept as it is); a
//! failed delivery is classified like an `http` step.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::{Method, Url};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use crate::domain::run::ErrorClass;
use crate::telemetry;
use crate::workflow::model::{HttpMethod, HttpStep, NotifyStep};

use super::shell::Captured;
use super::{Attempt, RunnersConfig, StepFailure, StepSuccess};
use crate::text::{clip, error_chain};

/// The cap on a webhook's answer (it is only kept for the record).
const NOTIFY_RESPONSE_BYTES: u64 = 64 * 1024;
/// How much of an error response's body a message quotes.
const MESSAGE_BODY_BYTES: usize = 300;

/// The client every `http` and `notify` step shares.
pub(super) fn client(config: &RunnersConfig) -> Result<reqwest::Client, String> {
    // reqwest is built without a default crypto provider; awl uses ring. Installing
    // twice is refused, which is fine: one is installed either way.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .user_agent(concat!("awl/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| error_chain(&e))
}

/// A request checked and ready to send.
#[derive(Debug, Clone)]
pub(super) struct Request {
    method: Method,
    url: Url,
    headers: HeaderMap,
    body: Option<Value>,
    cap: u64,
    expect: Vec<u16>,
}

impl Request {
    /// `host:port`, the key of the breaker.
    pub(super) fn host_key(&self) -> String {
        host_key(&self.url)
    }
}

fn host_key(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// The URL as messages show it: no credentials, no query, no fragment.
fn redacted(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.to_string()
}

fn parse_url(raw: &str) -> Result<Url, StepFailure> {
    let url = Url::parse(raw)
        .map_err(|e| StepFailure::validation(format!("`url` is not a valid URL: {e}")))?;
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(StepFailure::validation(format!(
                "`url` has scheme `{other}`: only http and https are allowed"
            )));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(StepFailure::validation("`url` has no host"));
    }
    Ok(url)
}

fn method(m: HttpMethod) -> Method {
    match m {
        HttpMethod::Get => Method::GET,
        HttpMethod::Post => Method::POST,
        HttpMethod::Put => Method::PUT,
        HttpMethod::Patch => Method::PATCH,
        HttpMethod::Delete => Method::DELETE,
        HttpMethod::Head => Method::HEAD,
    }
}

pub(super) fn prepare(step: &HttpStep, default_cap: u64) -> Result<Request, StepFailure> {
    let url = parse_url(&step.url)?;
    let mut headers = HeaderMap::new();
    for (name, value) in &step.headers {
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
            StepFailure::validation(format!(
                "header name {name:?} is not a valid HTTP header name"
            ))
        })?;
        let value = HeaderValue::from_str(value).map_err(|_| {
            StepFailure::validation(format!(
                "header `{name}` has a value that cannot be sent (control characters or non-ASCII)"
            ))
        })?;
        headers.append(header, value);
    }
    Ok(Request {
        method: method(step.method),
        url,
        headers,
        body: step.body.clone(),
        cap: step.max_response_bytes.unwrap_or(default_cap),
        expect: step.expect_status.clone(),
    })
}

/// A response as far as it was read.
#[derive(Debug)]
struct Answer {
    status: u16,
    reason: &'static str,
    headers: Map<String, Value>,
    body: Captured,
}

impl Answer {
    /// `{status, headers, body, truncated?}`
    fn into_output(self) -> Value {
        let text = self.body.text();
        let body = if self.body.truncated {
            Value::String(text.into_owned())
        } else {
            serde_json::from_slice::<Value>(&self.body.kept)
                .unwrap_or_else(|_| Value::String(text.into_owned()))
        };
        let mut o = Map::new();
        o.insert("status".into(), json!(self.status));
        o.insert("headers".into(), Value::Object(self.headers));
        o.insert("body".into(), body);
        if self.body.truncated {
            o.insert("truncated".into(), Value::Bool(true));
        }
        Value::Object(o)
    }
}

/// Send the request under the attempt's timeout and classify the answer.
pub(super) async fn send(
    client: &reqwest::Client,
    a: &Attempt<'_>,
    req: Request,
) -> Result<StepSuccess, StepFailure> {
    let shown = format!("{} {}", req.method, redacted(&req.url));
    let url_shown = a.mask.apply(&redacted(&req.url)).into_owned();
    // A client span (the HTTP semantic conventions) whose context the request carries
    // as `traceparent`, so the called service joins the run's trace.
    let span = tracing::info_span!(
        "http.client",
        otel.name = %req.method,
        otel.kind = "client",
        http.request.method = %req.method,
        url.full = %url_shown,
        server.address = req.url.host_str().unwrap_or_default(),
        http.response.status_code = tracing::field::Empty,
    );
    let exchange = exchange(client, &req, &shown).instrument(span.clone());
    let answer = match a.timeout {
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| timed_out(&shown, limit))??,
        None => exchange.await?,
    };
    span.record("http.response.status_code", answer.status);
    let Some(class) = classify_status(answer.status, &req.expect) else {
        return Ok(StepSuccess::output(answer.into_output()));
    };
    let mut message = format!("{shown} answered {} {}", answer.status, answer.reason);
    match answer.headers.get("retry-after").and_then(Value::as_str) {
        Some(retry_after) => message.push_str(&format!(" (Retry-After: {retry_after})")),
        None if class == ErrorClass::RateLimit => message.push_str(" (no Retry-After)"),
        None => {}
    }
    let body = answer.body.text();
    let body = body.trim();
    if !body.is_empty() {
        message.push_str(": ");
        message.push_str(&clip(body, MESSAGE_BODY_BYTES));
    }
    Err(StepFailure::new(class, message).with_output(answer.into_output()))
}

fn timed_out(shown: &str, limit: Duration) -> StepFailure {
    StepFailure::new(
        ErrorClass::Timeout,
        format!("{shown} timed out after {limit:?}"),
    )
}

/// The request and its answer, body read up to the cap. The attempt's timeout is
/// the caller's, around all of it.
async fn exchange(
    client: &reqwest::Client,
    req: &Request,
    shown: &str,
) -> Result<Answer, StepFailure> {
    let mut builder = client
        .request(req.method.clone(), req.url.clone())
        .headers(req.headers.clone());
    if !req.headers.contains_key("traceparent") {
        for (name, value) in telemetry::propagation_headers(&tracing::Span::current()) {
            builder = builder.header(name, value);
        }
    }
    if let Some(body) = &req.body {
        builder = builder.json(body);
    }
    let mut response = builder
        .send()
        .await
        .map_err(|e| transport_failure(e, shown))?;
    let status = response.status();
    let mut headers = Map::new();
    for (name, value) in response.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        // Repeated headers are joined as HTTP allows (`a, b`).
        match headers.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            _ => {
                headers.insert(name.as_str().to_string(), Value::String(value));
            }
        }
    }
    let mut body = Captured::default();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| transport_failure(e, shown))?
    {
        body.push(&chunk, req.cap);
        if body.truncated {
            // Stop reading: the rest of the body is not wanted.
            break;
        }
    }
    Ok(Answer {
        status: status.as_u16(),
        reason: status.canonical_reason().unwrap_or(""),
        headers,
        body,
    })
}

/// `None` when `status` is a success; otherwise the class of the failure.
pub(super) fn classify_status(status: u16, expect: &[u16]) -> Option<ErrorClass> {
    let ok = if expect.is_empty() {
        (200..300).contains(&status)
    } else {
        expect.contains(&status)
    };
    if ok {
        return None;
    }
    Some(match status {
        429 => ErrorClass::RateLimit,
        401 | 403 => ErrorClass::Authentication,
        500..=599 => ErrorClass::Dependency,
        _ => ErrorClass::Validation,
    })
}

/// A failure before a complete answer: no connection, timeout, reset...
fn transport_failure(e: reqwest::Error, shown: &str) -> StepFailure {
    // Connecting comes first: running out of `connect_timeout` is a connection that
    // could not be made, not the attempt's timeout (which is timed around the send).
    let (class, what) = if e.is_connect() {
        // DNS, refused, unreachable, TLS handshake, no answer in time
        (ErrorClass::Network, "could not connect")
    } else if e.is_timeout() {
        (ErrorClass::Timeout, "timed out")
    } else if e.is_builder() {
        (ErrorClass::Validation, "failed")
    } else if e.is_redirect() {
        (ErrorClass::Dependency, "failed")
    } else {
        // request, body: the network failed us.
        (ErrorClass::Network, "failed")
    };
    let e = e.without_url();
    StepFailure::new(class, format!("{shown} {what}: {}", error_chain(&e)))
}

/// `@alice @bob message`.
pub(super) fn notify_text(step: &NotifyStep) -> String {
    let mut text = String::new();
    for m in &step.mentions {
        if !m.starts_with('@') && !m.starts_with('<') {
            text.push('@');
        }
        text.push_str(m);
        text.push(' ');
    }
    text.push_str(&step.message);
    text
}

/// `{message, mentions, delivered, status?}`
pub(super) fn notify_record(step: &NotifyStep, status: Option<(u16, bool)>) -> Value {
    let mut o = Map::new();
    o.insert("message".into(), Value::String(step.message.clone()));
    o.insert("mentions".into(), json!(step.mentions));
    o.insert(
        "delivered".into(),
        Value::Bool(status.is_some_and(|(_, ok)| ok)),
    );
    if let Some((status, _)) = status {
        o.insert("status".into(), json!(status));
    }
    Value::Object(o)
}

/// The webhook body: Slack reads `text`, Discord reads `content`.
pub(super) fn webhook_body(step: &NotifyStep) -> Value {
    let text = notify_text(step);
    json!({ "text": text, "content": text })
}

pub(super) fn prepare_notify(step: &NotifyStep, url: &str) -> Result<Request, StepFailure> {
    Ok(Request {
        method: Method::POST,
        url: parse_url(url)?,
        headers: HeaderMap::new(),
        body: Some(webhook_body(step)),
        cap: NOTIFY_RESPONSE_BYTES,
        expect: Vec::new(),
    })
}

pub(super) async fn send_notify(
    client: &reqwest::Client,
    a: &Attempt<'_>,
    step: &NotifyStep,
    req: Request,
) -> Result<StepSuccess, StepFailure> {
    match send(client, a, req).await {
        Ok(ok) => {
            let status = ok.output["status"]
                .as_u64()
                .and_then(|s| u16::try_from(s).ok());
            Ok(StepSuccess::output(notify_record(
                step,
                status.map(|s| (s, true)),
            )))
        }
        Err(mut failure) => {
            let status = failure
                .output
                .as_ref()
                .and_then(|o| o["status"].as_u64())
                .and_then(|s| u16::try_from(s).ok());
            failure.output = Some(notify_record(step, status.map(|s| (s, false))));
            failure.message = format!("the notification was not delivered: {}", failure.message);
            Err(failure)
        }
    }
}

#[cfg(test)]
mod tests;
