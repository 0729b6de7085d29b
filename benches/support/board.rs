//! The board benchmark's moving parts, shared with the telemetry benchmark: a
//! server with auth on over a fresh store, agents that wait, ack and complete over
//! HTTP, and the dispatch-latency measurement.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use awl::auth::{Role, create_token};
use awl::clock::system_clock;
use awl::runners::{Runners, RunnersConfig};
use awl::server::{self, ServeConfig, Server};
use awl::store::{EventStore, StoreOptions};
use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{self, percentile};

pub const DISPATCH_TASKS: usize = 1_000;
pub const DISPATCH_AGENTS: usize = 10;

pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    pub fn new(server: &Server, token: &str) -> Self {
        Self::at(format!("http://{}", server.addr), token)
    }

    /// A client of the server at `base` (`http://HOST:PORT`).
    pub fn at(base: String, token: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            base,
            token: token.to_string(),
        }
    }

    pub async fn post(&self, path: &str, body: Value) -> Value {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .expect("the server answers");
        let status = response.status();
        let value: Value = response.json().await.expect("json");
        assert!(status.is_success(), "POST {path}: {status} {value}");
        value
    }
}

pub struct Setup {
    pub server: Server,
    pub operator: String,
    pub agents: Vec<(String, String)>,
    _fresh: support::Fresh,
}

pub async fn setup(kind: &str, agents: usize) -> Setup {
    let options = StoreOptions {
        max_connections: 32,
        ..StoreOptions::default()
    };
    let fresh = support::fresh(kind, &support::admin_url(), options).await;
    let (operator, names) = tokens(&fresh.store, agents).await;
    let config = ServeConfig::new("127.0.0.1:0".parse().expect("addr"));
    let server = server::start(
        fresh.store.clone(),
        config,
        Runners::new(RunnersConfig::default()),
        system_clock(),
    )
    .await
    .expect("server");
    for (name, token) in &names {
        Client::new(&server, token)
            .post(
                "/api/v1/agents",
                json!({"agent_id": name, "capabilities": ["rust"]}),
            )
            .await;
    }
    Setup {
        server,
        operator,
        agents: names,
        _fresh: fresh,
    }
}

/// An operator's token and `agents` agents' (`agent-0`, ...), with their names.
pub async fn tokens(store: &EventStore, agents: usize) -> (String, Vec<(String, String)>) {
    let now = Utc::now();
    let operator = create_token(store, "bench-ops", Role::Operator, "bench", now)
        .await
        .expect("token")
        .1;
    let mut names = Vec::new();
    for i in 0..agents {
        let name = format!("agent-{i}");
        let token = create_token(store, &name, Role::Agent, "bench", now)
            .await
            .expect("token")
            .1;
        names.push((name, token));
    }
    (operator, names)
}

/// Send `tasks` tasks needing `rust` from each of `senders` (one after another
/// per sender, the senders side by side); returns when all were sent.
pub async fn send_tasks(senders: Vec<Client>, tasks: usize) {
    let count = senders.len().max(1);
    let handles: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(s, client)| {
            tokio::spawn(async move {
                for i in 0..tasks / count {
                    client
                        .post(
                            "/api/v1/tasks",
                            json!({"prompt": format!("{s}-{i}"), "capabilities": ["rust"]}),
                        )
                        .await;
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("sender");
    }
}

/// Agents that wait, ack and complete until `stop`; each received task's id and the
/// instant its wait returned go to `received`, and each completion (once the server
/// answered it) counts in `completed`.
pub fn spawn_agents(
    setup: &Setup,
    received: Arc<Mutex<HashMap<String, Instant>>>,
    got_one: Arc<Notify>,
    completed: Arc<AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    setup
        .agents
        .iter()
        .map(|(name, token)| {
            let client = Client::new(&setup.server, token);
            let name = name.clone();
            let received = received.clone();
            let got_one = got_one.clone();
            let completed = completed.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let got = client
                        .post(
                            &format!("/api/v1/agents/{name}/wait"),
                            json!({"timeout_seconds": 0.5}),
                        )
                        .await;
                    let at = Instant::now();
                    let Some(id) = got["task"]["task_id"].as_str() else {
                        continue;
                    };
                    received.lock().expect("lock").insert(id.to_string(), at);
                    got_one.notify_one();
                    client
                        .post(&format!("/api/v1/tasks/{id}/ack"), json!({}))
                        .await;
                    client
                        .post(
                            &format!("/api/v1/tasks/{id}/complete"),
                            json!({"result": {"ok": true}}),
                        )
                        .await;
                    completed.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect()
}

/// Dispatch latency, ms: p50, p99, max.
pub async fn dispatch_latency(kind: &str) -> (f64, f64, f64) {
    let setup = setup(kind, DISPATCH_AGENTS).await;
    let received = Arc::new(Mutex::new(HashMap::new()));
    let got_one = Arc::new(Notify::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let completed = Arc::new(AtomicUsize::new(0));
    let agents = spawn_agents(
        &setup,
        received.clone(),
        got_one.clone(),
        completed,
        stop.clone(),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sender = Client::new(&setup.server, &setup.operator);
    let mut latencies = Vec::with_capacity(DISPATCH_TASKS);
    for i in 0..DISPATCH_TASKS {
        let start = Instant::now();
        let task = sender
            .post(
                "/api/v1/tasks",
                json!({"prompt": format!("task {i}"), "capabilities": ["rust"]}),
            )
            .await;
        let id = task["task_id"].as_str().expect("id").to_string();
        let at = loop {
            if let Some(at) = received.lock().expect("lock").get(&id).copied() {
                break at;
            }
            tokio::time::timeout(Duration::from_secs(5), got_one.notified())
                .await
                .expect("a task was dispatched within 5 s");
        };
        latencies.push(at.duration_since(start).as_secs_f64() * 1e3);
        // Let the agent that took it finish and wait again: 10 agents wait at each send.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for a in agents {
        let _ = a.await;
    }
    setup.server.shutdown().await.expect("shutdown");
    latencies.sort_by(f64::total_cmp);
    (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        *latencies.last().unwrap_or(&0.0),
    )
}
