//! Where an `http` or `notify` step's request goes, and how its answer is read.
//!
//! A request goes straight through hyper's pooled client (hyper-util's, the one
//! reqwest is built on) over rustls with the platform's certificate verifier, and
//! redirects are followed here. Without reqwest's layers (its redirect and retry
//! services, the request and header copies they make, the final URL parsed again
//! for every response) an exchange costs about a quarter less CPU (BENCHMARKS.md,
//! "The `http` step's exchange without reqwest's layers"), which is most of what
//! an `http` step costs awl besides its two events.
//!
//! A destination that the environment's proxy settings (`HTTP_PROXY`,
//! `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`, as curl reads them) send to a proxy
//! goes through reqwest instead, which speaks proxies (absolute-form requests,
//! `CONNECT` tunnels, proxy credentials) and follows redirects the same way.
//!
//! Redirects: at most [`MAX_REDIRECTS`]; 301 and 302 turn a `POST` into a `GET`
//! and 303 turns anything but `HEAD` into a `GET`, dropping the body; 307 and 308
//! resend the request as it was. Credentials (`authorization`, `cookie`,
//! `proxy-authorization`) are not sent on to another origin.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use reqwest::Url;
use rustls_platform_verifier::ConfigVerifierExt;
use serde_json::{Map, Value};
use tokio::net::TcpStream;

use super::target::{Target, Targets, uri_of};
use super::{Request, Shown};
use crate::domain::run::ErrorClass;
use crate::runners::StepFailure;
use crate::runners::shell::Captured;
use crate::text::error_chain;

/// How many redirects one request follows before failing.
const MAX_REDIRECTS: usize = 10;

type Direct = hyper_util::client::legacy::Client<TimedConnector, Full<Bytes>>;

/// Connecting, TCP and TLS handshake both, within `connect_timeout`: a server that
/// accepts and then never answers the handshake cannot connect, like one that never
/// accepts.
#[derive(Clone)]
struct TimedConnector {
    inner: HttpsConnector<HttpConnector>,
    limit: Duration,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Connecting = std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Result<hyper_rustls::MaybeHttpsStream<TokioIo<TcpStream>>, BoxError>,
            > + Send,
    >,
>;

impl tower_service::Service<Uri> for TimedConnector {
    type Response = hyper_rustls::MaybeHttpsStream<TokioIo<TcpStream>>;
    type Error = BoxError;
    type Future = Connecting;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let connecting = self.inner.call(dst);
        let limit = self.limit;
        Box::pin(async move {
            match tokio::time::timeout(limit, connecting).await {
                Ok(connected) => connected,
                Err(_) => Err(format!("no connection within {limit:?}").into()),
            }
        })
    }
}

/// The client every `http` and `notify` step shares.
pub(crate) struct HttpClient {
    direct: Direct,
    /// The URLs steps asked for, worked out once.
    targets: Targets,
    /// Destinations the proxy settings intercept go through reqwest.
    proxies: Matcher,
    proxied: reqwest::Client,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient").finish_non_exhaustive()
    }
}

/// A response as far as it was read.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) reason: &'static str,
    pub(super) headers: Map<String, Value>,
    pub(super) body: Captured,
}

impl HttpClient {
    /// The client with the proxies the environment sets, as curl reads them: the
    /// destinations they intercept go through a reqwest client, which reads the
    /// same settings.
    pub(super) fn from_env(connect_timeout: Duration) -> Result<Self, String> {
        // reqwest is built without a default crypto provider; awl uses ring. Installing
        // twice is refused, which is fine: one is installed either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = rustls::ClientConfig::with_platform_verifier()
            .map_err(|e| format!("no usable TLS setup: {}", error_chain(&e)))?;
        // As reqwest sets them: no Nagle delay, keep-alive probes after 15 s.
        let mut connector = HttpConnector::new();
        connector.enforce_http(false);
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        connector.set_keepalive(Some(Duration::from_secs(15)));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(connector);
        let direct = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(TimedConnector {
                inner: https,
                limit: connect_timeout,
            });
        let proxied = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .user_agent(USER_AGENT)
            .build()
            .map_err(|e| error_chain(&e))?;
        Ok(Self {
            direct,
            targets: Targets::default(),
            proxies: Matcher::from_env(),
            proxied,
        })
    }

    /// Where a step's `url` goes: checked, worked out, and kept for the next step
    /// that asks (see the `target` module).
    pub(super) fn target(&self, url: &str) -> Result<Arc<Target>, StepFailure> {
        self.targets.get(url)
    }

    /// Send `req` with the step's `headers` (`shown` names it in messages) and read
    /// the answer, its body up to the request's cap. The attempt's timeout is the caller's, around all of it.
    pub(super) async fn exchange(
        &self,
        req: &Request,
        mut headers: HeaderMap,
        extra: Vec<(String, String)>,
        shown: Shown<'_>,
    ) -> Result<Answer, StepFailure> {
        let target = &req.target;
        if self.proxies.intercept(&target.uri).is_some() {
            return self.through_proxy(req, headers, extra, shown).await;
        }
        if let Some(basic) = &target.credentials {
            headers
                .entry(header::AUTHORIZATION)
                .or_insert_with(|| basic.clone());
        }
        for (name, value) in extra {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                headers.entry(name).or_insert(value);
            }
        }
        headers
            .entry(header::USER_AGENT)
            .or_insert(HeaderValue::from_static(USER_AGENT));
        headers
            .entry(header::ACCEPT)
            .or_insert(HeaderValue::from_static("*/*"));
        let body = match &req.body {
            Some(body) => {
                headers
                    .entry(header::CONTENT_TYPE)
                    .or_insert(HeaderValue::from_static("application/json"));
                Bytes::from(serde_json::to_vec(body).map_err(|e| {
                    StepFailure::validation(format!("`body` cannot be written as JSON: {e}"))
                })?)
            }
            None => Bytes::new(),
        };
        self.follow(
            Hop {
                method: req.method.clone(),
                url: target.url.clone(),
                uri: target.uri.clone(),
                headers,
                body,
            },
            req.cap,
            shown,
        )
        .await
    }

    /// Send `hop`, and the hops its redirects lead to.
    async fn follow(
        &self,
        mut hop: Hop,
        cap: u64,
        shown: Shown<'_>,
    ) -> Result<Answer, StepFailure> {
        let mut redirects = 0;
        loop {
            let mut request = hyper::Request::new(Full::new(hop.body.clone()));
            *request.method_mut() = hop.method.clone();
            *request.uri_mut() = hop.uri.clone();
            *request.headers_mut() = hop.headers.clone();
            let response = self
                .direct
                .request(request)
                .await
                .map_err(|e| direct_failure(&e, shown))?;
            let status = response.status();
            let location = response
                .headers()
                .get(header::LOCATION)
                .and_then(|l| l.to_str().ok());
            let Some(location) = location.filter(|_| status.is_redirection()) else {
                let (parts, body) = response.into_parts();
                return read_direct(parts.status, &parts.headers, body, cap, shown).await;
            };
            let next = redirected(&hop, status, location).map_err(|why| {
                StepFailure::new(
                    ErrorClass::Dependency,
                    format!("{shown} failed: a redirect {why}"),
                )
            })?;
            let Some(next) = next else {
                // Not a redirect to follow (304, 300): the answer is this one.
                let (parts, body) = response.into_parts();
                return read_direct(parts.status, &parts.headers, body, cap, shown).await;
            };
            if redirects == MAX_REDIRECTS {
                return Err(StepFailure::new(
                    ErrorClass::Dependency,
                    format!("{shown} failed: more than {MAX_REDIRECTS} redirects"),
                ));
            }
            redirects += 1;
            hop = next;
        }
    }

    async fn through_proxy(
        &self,
        req: &Request,
        headers: HeaderMap,
        extra: Vec<(String, String)>,
        shown: Shown<'_>,
    ) -> Result<Answer, StepFailure> {
        let mut builder = self
            .proxied
            .request(req.method.clone(), req.target.url.clone());
        if let Some(basic) = &req.target.credentials
            && !headers.contains_key(header::AUTHORIZATION)
        {
            builder = builder.header(header::AUTHORIZATION, basic.clone());
        }
        for (name, value) in extra {
            if !headers.contains_key(name.as_str()) {
                builder = builder.header(name, value);
            }
        }
        builder = builder.headers(headers);
        if let Some(body) = &req.body {
            builder = builder.json(body);
        }
        let mut response = builder
            .send()
            .await
            .map_err(|e| proxied_failure(e, shown))?;
        let mut body = Captured::default();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| proxied_failure(e, shown))?
        {
            body.push(&chunk, req.cap);
            if body.truncated {
                // Stop reading: the rest of the body is not wanted.
                break;
            }
        }
        Ok(answer(response.status(), response.headers(), body))
    }
}

const USER_AGENT: &str = concat!("awl/", env!("CARGO_PKG_VERSION"));

/// One request of a chain of redirects.
struct Hop {
    method: Method,
    url: Url,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
}

/// The request a redirect to `location` asks for, `None` for a 3xx that is not
/// one to follow, or why it cannot be followed.
fn redirected(hop: &Hop, status: StatusCode, location: &str) -> Result<Option<Hop>, String> {
    let (method, keep_body) = match status.as_u16() {
        301 | 302 if hop.method == Method::POST => (Method::GET, false),
        303 if hop.method != Method::HEAD => (Method::GET, false),
        301 | 302 | 303 | 307 | 308 => (hop.method.clone(), true),
        _ => return Ok(None),
    };
    let url = hop
        .url
        .join(location)
        .map_err(|e| format!("to {location:?} is not to a valid URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("to scheme `{}` is not followed", url.scheme()));
    }
    let uri = uri_of(&url).map_err(|f| f.message)?;
    let mut headers = hop.headers.clone();
    if !keep_body {
        for name in [
            header::CONTENT_TYPE,
            header::CONTENT_LENGTH,
            header::CONTENT_ENCODING,
            header::TRANSFER_ENCODING,
        ] {
            headers.remove(name);
        }
    }
    if url.origin() != hop.url.origin() {
        for name in [
            header::AUTHORIZATION,
            header::COOKIE,
            header::PROXY_AUTHORIZATION,
        ] {
            headers.remove(name);
        }
    }
    Ok(Some(Hop {
        method,
        url,
        uri,
        headers,
        body: if keep_body {
            hop.body.clone()
        } else {
            Bytes::new()
        },
    }))
}

async fn read_direct(
    status: StatusCode,
    headers: &HeaderMap,
    mut incoming: hyper::body::Incoming,
    cap: u64,
    shown: Shown<'_>,
) -> Result<Answer, StepFailure> {
    let mut body = Captured::default();
    while let Some(frame) = incoming.frame().await {
        let frame = frame.map_err(|e| {
            StepFailure::new(
                ErrorClass::Network,
                format!("{shown} failed: {}", error_chain(&e)),
            )
        })?;
        if let Ok(chunk) = frame.into_data() {
            body.push(&chunk, cap);
            if body.truncated {
                // Stop reading: the rest of the body is not wanted.
                break;
            }
        }
    }
    Ok(answer(status, headers, body))
}

fn answer(status: StatusCode, headers: &HeaderMap, body: Captured) -> Answer {
    let mut shown = Map::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        // Repeated headers are joined as HTTP allows (`a, b`).
        match shown.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(&value);
            }
            _ => {
                shown.insert(name.as_str().to_string(), Value::String(value));
            }
        }
    }
    Answer {
        status: status.as_u16(),
        reason: status.canonical_reason().unwrap_or(""),
        headers: shown,
        body,
    }
}

/// A failure before a complete answer on the direct path: no connection (refused,
/// DNS, TLS, nothing within `connect_timeout`), or the connection failed us.
fn direct_failure(e: &hyper_util::client::legacy::Error, shown: Shown<'_>) -> StepFailure {
    let what = if e.is_connect() {
        "could not connect"
    } else {
        "failed"
    };
    StepFailure::new(
        ErrorClass::Network,
        format!("{shown} {what}: {}", error_chain(e)),
    )
}

/// The same through reqwest.
fn proxied_failure(e: reqwest::Error, shown: Shown<'_>) -> StepFailure {
    // Connecting comes first: running out of `connect_timeout` is a connection that
    // could not be made, not the attempt's timeout (which is timed around the send).
    let (class, what) = if e.is_connect() {
        (ErrorClass::Network, "could not connect")
    } else if e.is_timeout() {
        (ErrorClass::Timeout, "timed out")
    } else if e.is_builder() {
        (ErrorClass::Validation, "failed")
    } else if e.is_redirect() {
        (ErrorClass::Dependency, "failed")
    } else {
        (ErrorClass::Network, "failed")
    };
    let e = e.without_url();
    StepFailure::new(class, format!("{shown} {what}: {}", error_chain(&e)))
}
