//! A server for a test: `awl::server::start` in this process on a free port of a test
//! store, an API client for it (or for an `awl serve` child process), API tokens of
//! every role, and a free port.

use std::collections::BTreeMap;
use std::time::Duration;

use awl::auth::{Role, create_token};
use awl::clock::{Clock, system_clock};
use awl::runners::{Runners, RunnersConfig};
use awl::server::{self, ServeConfig, Server};
use awl::store::EventStore;
use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::Value;

use super::wait_for;

/// A server configuration for tests: a free port on loopback, a quick sweeper.
pub fn config() -> ServeConfig {
    let mut config = ServeConfig::new("127.0.0.1:0".parse().expect("an address"));
    config.sweep_every = Duration::from_millis(200);
    config
}

/// Start a server on `store` with [`config`] and the system clock.
pub async fn serve(store: &EventStore) -> Server {
    serve_with(store, config(), system_clock()).await
}

/// Start a server on `store` as configured, on `clock`.
pub async fn serve_with(store: &EventStore, config: ServeConfig, clock: Clock) -> Server {
    server::start(
        store.clone(),
        config,
        Runners::new(RunnersConfig::default()),
        clock,
    )
    .await
    .expect("the server starts")
}

/// A new API token (its secret).
pub async fn token(store: &EventStore, name: &str, role: Role) -> String {
    create_token(store, name, role, "test", Utc::now())
        .await
        .expect("create a token")
        .1
}

/// A token of every role, and one per agent (named after it).
pub struct Tokens {
    pub admin: String,
    pub operator: String,
    pub viewer: String,
    pub agents: BTreeMap<String, String>,
}

pub async fn tokens(store: &EventStore, agents: &[&str]) -> Tokens {
    let mut by_agent = BTreeMap::new();
    for a in agents {
        by_agent.insert(a.to_string(), token(store, a, Role::Agent).await);
    }
    Tokens {
        admin: token(store, "root", Role::Admin).await,
        operator: token(store, "ops", Role::Operator).await,
        viewer: token(store, "watcher", Role::Viewer).await,
        agents: by_agent,
    }
}

pub use super::cluster::free_port;

/// A client of the API at one base URL.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
}

impl Api {
    /// A client of the server at `base` (`http://127.0.0.1:PORT`).
    pub fn at(base: impl Into<String>) -> Self {
        // reqwest is built without a TLS provider of its own: awl's (ring) is the one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            base: base.into(),
            http: reqwest::Client::new(),
        }
    }

    /// A client of a server started in this process.
    pub fn of(server: &Server) -> Self {
        Self::at(format!("http://{}", server.addr))
    }

    /// Wait until `/health` answers (a server starting in a child process).
    pub async fn wait_healthy(&self, secs: u64) {
        wait_for(secs, "the server to answer /health", async || {
            self.http
                .get(format!("{}/health", self.base))
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success())
        })
        .await;
    }

    /// One call: its status and its body (JSON, else the text as a string).
    pub async fn call(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the server answers");
        let status = response.status();
        if status.is_success() && path.contains("/stream") {
            // An event stream never ends: its status is the answer.
            return (status, Value::Null);
        }
        let text = response.text().await.expect("a body");
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    /// A call that must succeed; its body.
    pub async fn ok_as(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Value {
        let (status, value) = self.call(token, method.clone(), path, body).await;
        assert!(
            status.is_success(),
            "{method} {path} answered {status}: {value}"
        );
        value
    }

    /// A call with `token` that must succeed; its body.
    pub async fn ok(&self, token: &str, method: Method, path: &str, body: Value) -> Value {
        self.ok_as(Some(token), method, path, Some(body)).await
    }

    /// Start a run of `workflow` (no token); its id once acknowledged.
    pub async fn start_run(&self, workflow: &str) -> String {
        let body = self
            .ok_as(
                None,
                Method::POST,
                "/api/v1/runs",
                Some(serde_json::json!({"workflow": workflow})),
            )
            .await;
        body["run_id"].as_str().expect("a run id").to_string()
    }

    /// A GET's body whatever its status (for polling while a server warms up).
    pub async fn fetch(&self, token: Option<&str>, path: &str) -> Value {
        self.call(token, Method::GET, path, None).await.1
    }

    /// A GET that must succeed.
    pub async fn get(&self, token: Option<&str>, path: &str) -> Value {
        self.ok_as(token, Method::GET, path, None).await
    }

    /// A POST with `token` that must succeed.
    pub async fn ok_post(&self, token: &str, path: &str, body: Value) -> Value {
        self.ok_as(Some(token), Method::POST, path, Some(body))
            .await
    }

    /// A POST that must succeed.
    pub async fn post(&self, token: Option<&str>, path: &str, body: Value) -> Value {
        self.ok_as(token, Method::POST, path, Some(body)).await
    }
}

/// Read SSE messages (`id`, `event`, `data`) from a response until `n` have come.
pub async fn sse_messages(response: reqwest::Response, n: usize) -> Vec<(String, String, Value)> {
    use futures_util::StreamExt;
    let mut body = response.bytes_stream();
    let mut text = String::new();
    let mut out = Vec::new();
    while out.len() < n {
        let chunk = crate::support::within(10, "an SSE message", body.next())
            .await
            .expect("the stream goes on")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let (mut id, mut event, mut data) = (String::new(), String::new(), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim().to_string();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim());
                }
            }
            if !id.is_empty() {
                out.push((
                    id,
                    event,
                    serde_json::from_str(&data).unwrap_or(Value::Null),
                ));
            }
        }
    }
    out
}
