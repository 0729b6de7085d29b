//! `http` steps and `notify` webhooks.
//!
//! One shared client (`client`: hyper's pool over rustls with the ring provider,
//! redirects followed there, reqwest where a proxy is configured; each step URL
//! worked out once and kept, in `target`), `http` and `https` URLs only, the
//! attempt's timeout over the whole exchange, and the
//! response body streamed and cut at the step's cap (reading stops there: a huge
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
//! | more than 10 redirects, a redirect to a bad URL or another scheme | `dependency` |
//!
//! A failed response's output is attached to the failure.
//!
//! `notify` always records `{message, mentions, delivered, status?}`; with a `url` it
//! POSTs `{"text": ..., "content": ...}`, which Slack (`text`) and Discord
//! (`content`) incoming webhooks both accept, mentions written `@name` before the
//! message (a mention already written `@name` or `<@id>` is kept as it is); a
//! failed delivery is classified like an `http` step.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};
use tracing::Instrument;

use crate::domain::run::ErrorClass;
use crate::telemetry;
use crate::workflow::model::{HttpMethod, HttpStep, NotifyStep};

use super::{Attempt, RunnersConfig, StepFailure, StepSuccess};
use crate::text::clip;

/// The cap on a webhook's answer (it is only kept for the record).
const NOTIFY_RESPONSE_BYTES: u64 = 64 * 1024;
/// How much of an error response's body a message quotes.
const MESSAGE_BODY_BYTES: usize = 300;

mod client;
mod target;

use client::Answer;
pub(crate) use client::HttpClient;
use target::Target;

/// The client every `http` and `notify` step shares.
pub(super) fn client(config: &RunnersConfig) -> Result<HttpClient, String> {
    HttpClient::from_env(config.connect_timeout)
}

/// A request checked and ready to send.
#[derive(Debug, Clone)]
pub(super) struct Request {
    method: Method,
    target: Arc<Target>,
    headers: HeaderMap,
    body: Option<Value>,
    cap: u64,
    expect: Vec<u16>,
}

impl Request {
    /// `http:host:port`, the key of the breaker.
    pub(super) fn breaker_key(&self) -> String {
        self.target.breaker_key.clone()
    }
}

/// How messages name a request: `GET https://host/path` (the URL without
/// credentials, query or fragment). Written only when a message is: a step that
/// succeeds writes none.
#[derive(Clone, Copy)]
pub(super) struct Shown<'a> {
    method: &'a Method,
    url: &'a str,
}

impl<'a> Shown<'a> {
    fn of(req: &'a Request) -> Self {
        Self {
            method: &req.method,
            url: &req.target.shown,
        }
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.url)
    }
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

pub(super) fn prepare(
    client: &HttpClient,
    step: &HttpStep,
    default_cap: u64,
) -> Result<Request, StepFailure> {
    let target = client.target(&step.url)?;
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
        target,
        headers,
        body: step.body.clone(),
        cap: step.max_response_bytes.unwrap_or(default_cap),
        expect: step.expect_status.clone(),
    })
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
    client: &HttpClient,
    a: &Attempt<'_>,
    mut req: Request,
) -> Result<StepSuccess, StepFailure> {
    // The step's headers go to the exchange as they are, not copied.
    let headers = std::mem::take(&mut req.headers);
    let shown = Shown::of(&req);
    // A client span (the HTTP semantic conventions) whose context the request carries
    // as `traceparent`, so the called service joins the run's trace. Its fields are
    // worked out only when it is enabled.
    let span = tracing::info_span!(
        "http.client",
        otel.name = %req.method,
        otel.kind = "client",
        http.request.method = %req.method,
        url.full = %a.mask.apply(&req.target.shown),
        server.address = req.target.url.host_str().unwrap_or_default(),
        http.response.status_code = tracing::field::Empty,
    );
    let exchange = async {
        // The span's context, unless the step sets its own.
        let trace = if headers.contains_key("traceparent") {
            Vec::new()
        } else {
            telemetry::propagation_headers(&tracing::Span::current())
        };
        client.exchange(&req, headers, trace, shown).await
    }
    .instrument(span.clone());
    let answer = match a.timeout {
        Some(limit) => tokio::time::timeout(limit, exchange)
            .await
            .map_err(|_| timed_out(shown, limit))??,
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

fn timed_out(shown: Shown<'_>, limit: Duration) -> StepFailure {
    StepFailure::new(
        ErrorClass::Timeout,
        format!("{shown} timed out after {limit:?}"),
    )
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

pub(super) fn prepare_notify(
    client: &HttpClient,
    step: &NotifyStep,
    url: &str,
) -> Result<Request, StepFailure> {
    Ok(Request {
        method: Method::POST,
        target: client.target(url)?,
        headers: HeaderMap::new(),
        body: Some(webhook_body(step)),
        cap: NOTIFY_RESPONSE_BYTES,
        expect: Vec::new(),
    })
}

pub(super) async fn send_notify(
    client: &HttpClient,
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
