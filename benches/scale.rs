//! Growing past one process (issue 18): throughput as `awl worker` and `awl serve`
//! processes are added over one Postgres, and view queries served from a streaming
//! replica while the primary runs the executor, its claims, appends and checkpoints.
//!
//! *Workers*: `--runs` ten-step runs of `sleep 0` are started, then 1, 2 and 4
//! `awl worker` processes (the release binary, `--db-pool` connections each) carry
//! them out; steps per second from spawning the processes to the last run finished.
//! *Servers*: 1, 2 and 4 `awl serve --no-worker` processes (auth on); 20 agents, each
//! calling one server (in turn), wait, ack and complete while 4 senders (each on
//! one server) send 4,000 tasks (`--agents`, `--senders`, `--tasks`: four senders
//! that each wait for an answer leave one server part of the machine idle); full
//! lifecycles per second. A task sent to one
//! server reaches an agent waiting on another through the log (each server's board
//! follows it); with, per lifecycle, the task conflicts the servers counted (appends
//! that lost to another server's, each decided again) and the log pages their
//! followers read from the database. Both on the Postgres of AWL_BENCH_DATABASE_URL /
//! DATABASE_URL / the local server, a fresh database each; with `--via-port P` the processes connect
//! through 127.0.0.1:P instead (a PgBouncer in front of that server), LISTEN and the
//! migrations to the database itself (`AWL_SESSION_DATABASE_URL`).
//!
//! *Replica*: the benchmark starts a Postgres cluster of its own (durable settings) and a
//! streaming replica of it (`pg_basebackup -R`), both on this machine. For each place
//! the views are read from (the primary, then the replica) it starts `--runs` ten-step
//! runs of `sleep 0` on a fresh database, starts `awl serve` in this process (its own
//! executor, the projections, auth off on loopback) and, while the executor works,
//! `--readers` clients read views in a loop over HTTP (`/api/v1/views/runs?limit=50`
//! and `/api/v1/views/analytics/workflows`, in turn). It reports the executor's steps
//! per second, the views answered per second with their latency, and, with a replica,
//! how many events the replica was behind the log (sampled every 20 ms).
//! Prints Markdown for BENCHMARKS.md.
//!
//!     cargo bench --bench scale
//!     cargo bench --bench scale -- --parts workers,servers --processes 1,2,4 --db-pool 8
//!     cargo bench --bench scale -- --parts workers,servers --via-port 6432   # PgBouncer
//!     cargo bench --bench scale -- --parts servers --senders 32 --agents 80 --tasks 8000
//!     cargo bench --bench scale -- --parts replica --runs 5000 --readers 4

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use awl::clock::system_clock;
use awl::domain::ids::RunId;
use awl::executor::WorkerConfig;
use awl::runners::{Runners, RunnersConfig};
use awl::server::{self, ServeConfig};
use awl::store::{EventStore, StoreLocation};
use serde_json::json;

#[path = "support/board.rs"]
#[allow(dead_code, reason = "shared with the board benchmark")]
mod board_support;
#[allow(
    dead_code,
    reason = "the benchmark uses only the cluster and its replica"
)]
#[path = "../tests/it/support/cluster.rs"]
mod cluster;
#[path = "support/runs.rs"]
#[allow(dead_code, reason = "shared with the executor benchmark")]
mod runs_support;
mod support;

use board_support::{Client, send_tasks};
use cluster::Cluster;
use runs_support::{all_finished, register, start_runs, workflow_of};
use support::percentile;

struct Config {
    runs: usize,
    readers: usize,
    /// Which parts to measure (`workers`, `servers`, `replica`); all if empty.
    parts: Vec<String>,
    /// The process counts of the workers and servers parts.
    processes: Vec<usize>,
    /// Each process's pool (`--db-pool`).
    db_pool: u32,
    /// Processes connect through this port of 127.0.0.1 (a PgBouncer in front of the
    /// database) instead of the database's own URL.
    via_port: Option<u16>,
    /// The servers part's load: tasks sent, senders (each waits for its send's
    /// answer before the next) and agents.
    tasks: usize,
    senders: usize,
    agents: usize,
}

impl Config {
    fn wants(&self, part: &str) -> bool {
        self.parts.is_empty() || self.parts.iter().any(|p| p == part)
    }
}

fn config() -> Config {
    let mut args = std::env::args().skip(1);
    let mut c = Config {
        runs: 5_000,
        readers: 4,
        parts: Vec::new(),
        processes: vec![1, 2, 4],
        db_pool: 8,
        via_port: None,
        tasks: 4_000,
        senders: 4,
        agents: 20,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => c.runs = args.next().and_then(|s| s.parse().ok()).unwrap_or(c.runs),
            "--readers" => {
                c.readers = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(c.readers)
            }
            "--parts" => {
                c.parts = args
                    .next()
                    .map(|s| s.split(',').map(str::to_string).collect())
                    .unwrap_or_default();
            }
            "--processes" => {
                c.processes = args
                    .next()
                    .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
                    .unwrap_or_default();
            }
            "--via-port" => c.via_port = args.next().and_then(|s| s.parse().ok()),
            "--tasks" => c.tasks = args.next().and_then(|s| s.parse().ok()).unwrap_or(c.tasks),
            "--senders" => {
                c.senders = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(c.senders)
            }
            "--agents" => c.agents = args.next().and_then(|s| s.parse().ok()).unwrap_or(c.agents),
            "--db-pool" => {
                c.db_pool = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(c.db_pool)
            }
            _ => {}
        }
    }
    c
}

/// `runs` ten-step runs of `sleep 0`, started and waiting for a worker.
async fn sleep_runs(store: &EventStore, runs: usize) -> Vec<RunId> {
    let dir = tempfile::tempdir().expect("dir");
    let path = workflow_of(dir.path(), "ten", 10, "tool: sleep, inputs: {seconds: 0}");
    let registered = register(store, &path).await;
    start_runs(store, &registered, runs).await
}

/// What one measurement found.
struct Measured {
    steps_per_s: f64,
    views_per_s: f64,
    view_p50_ms: f64,
    view_p99_ms: f64,
    /// Events behind the log: p50, p99, max (empty without a replica).
    lag: Option<(f64, f64, f64)>,
}

/// The read store on the replica, once the replica has replayed the database's
/// creation and its migrations.
async fn open_replica(store: &EventStore, url: &str) -> EventStore {
    let location = StoreLocation::Postgres(url.to_string());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.open_read_replica(&location, 16).await {
            Ok(read) => return read,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the replica never became usable: {e}"),
        }
    }
}

async fn views_under_load(primary: &Cluster, replica: Option<&Cluster>, c: &Config) -> Measured {
    let fresh = runs_support::fresh("postgres", &primary.url("postgres")).await;
    let StoreLocation::Postgres(url) = &fresh.location else {
        unreachable!("a Postgres store")
    };
    let database = url.rsplit('/').next().expect("a database name").to_string();
    let ids = sleep_runs(&fresh.store, c.runs).await;
    let read = match replica {
        Some(r) => Some(open_replica(&fresh.store, &r.url(&database)).await),
        None => None,
    };
    let mut config = ServeConfig::new("127.0.0.1:0".parse().expect("addr"));
    let mut worker = WorkerConfig::new("bench-serve");
    worker.poll = Duration::from_millis(20);
    config.worker = Some(worker);
    config.read_store = read.clone();
    config.learn_every = None;
    let started = Instant::now();
    let server = server::start(
        fresh.store.clone(),
        config,
        Runners::new(RunnersConfig::default()),
        system_clock(),
    )
    .await
    .expect("server");
    let base = format!("http://{}", server.addr);
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for r in 0..c.readers {
        let (base, done) = (base.clone(), done.clone());
        readers.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut latencies = Vec::new();
            let mut i = r;
            while !done.load(Ordering::Relaxed) {
                let path = if i % 2 == 0 {
                    "/api/v1/views/runs?limit=50"
                } else {
                    "/api/v1/views/analytics/workflows"
                };
                i += 1;
                let at = Instant::now();
                let answer = http
                    .get(format!("{base}{path}"))
                    .send()
                    .await
                    .expect("view");
                let status = answer.status();
                let body = answer.text().await.expect("body");
                assert!(status.is_success(), "{path}: {status} {body}");
                latencies.push(at.elapsed().as_secs_f64() * 1_000.0);
            }
            latencies
        }));
    }
    let sampler = read.clone().map(|read| {
        let (store, done) = (fresh.store.clone(), done.clone());
        tokio::spawn(async move {
            let mut lags = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let status = store.replica_status(&read).await.expect("replica status");
                lags.push(status.lag() as f64);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            lags
        })
    });
    while !all_finished(&fresh.store, &ids).await {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for r in readers {
        latencies.extend(r.await.expect("reader"));
    }
    latencies.sort_by(f64::total_cmp);
    let lag = match sampler {
        Some(s) => {
            let mut lags = s.await.expect("sampler");
            lags.sort_by(f64::total_cmp);
            Some((
                percentile(&lags, 0.5),
                percentile(&lags, 0.99),
                *lags.last().unwrap_or(&0.0),
            ))
        }
        None => None,
    };
    server.shutdown().await.expect("shutdown");
    Measured {
        steps_per_s: (c.runs * 10) as f64 / elapsed,
        views_per_s: latencies.len() as f64 / elapsed,
        view_p50_ms: percentile(&latencies, 0.5),
        view_p99_ms: percentile(&latencies, 0.99),
        lag,
    }
}

/// `awl` child processes on the store at `url`, killed when dropped.
struct Processes {
    _children: Vec<tokio::process::Child>,
}

impl Processes {
    /// `awl ARGS` for each of `args`, on `url`; through a pooler, `session` is the
    /// database's own URL (LISTEN and the migrations go there).
    fn spawn(url: &str, session: Option<&str>, pool: u32, args: &[Vec<String>]) -> Self {
        Self {
            _children: args
                .iter()
                .map(|a| {
                    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_awl"));
                    command
                        .args(a)
                        .env("DATABASE_URL", url)
                        .env("AWL_DB_POOL", pool.to_string())
                        .env_remove("AWL_LOG")
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .stderr(Stdio::inherit())
                        .kill_on_drop(true);
                    if let Some(session) = session {
                        command.env("AWL_SESSION_DATABASE_URL", session);
                    }
                    command.spawn().expect("start awl")
                })
                .collect(),
        }
    }
}

/// The database's own URL, given as the session URL when processes go through a
/// pooler (`via_port`).
fn session_of(location: &StoreLocation, via_port: Option<u16>) -> Option<String> {
    match location {
        StoreLocation::Postgres(url) if via_port.is_some() => Some(url.clone()),
        _ => None,
    }
}

/// The URL processes use for `location`: its own, or the same database through
/// `via_port` on 127.0.0.1.
fn url_of(location: &StoreLocation, via_port: Option<u16>) -> String {
    let StoreLocation::Postgres(url) = location else {
        unreachable!("the scale benchmark runs on Postgres")
    };
    match via_port {
        Some(port) => {
            let database = url.rsplit('/').next().unwrap_or("postgres");
            format!("postgres://postgres@127.0.0.1:{port}/{database}")
        }
        None => url.clone(),
    }
}

/// Steps per second of `n` worker processes over `runs` ten-step `sleep 0` runs.
async fn workers(n: usize, c: &Config) -> f64 {
    let fresh = runs_support::fresh("postgres", &support::admin_url()).await;
    let ids = sleep_runs(&fresh.store, c.runs).await;
    let started = Instant::now();
    let args: Vec<Vec<String>> = (0..n).map(|_| vec!["worker".to_string()]).collect();
    let session = session_of(&fresh.location, c.via_port);
    let _workers = Processes::spawn(
        &url_of(&fresh.location, c.via_port),
        session.as_deref(),
        c.db_pool,
        &args,
    );
    while !all_finished(&fresh.store, &ids).await {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (c.runs * 10) as f64 / started.elapsed().as_secs_f64()
}

/// What `n` server processes did: full lifecycles per second, how many task commands
/// met another writer's append (their `awl_command_conflicts_total`, summed; `None`
/// when no server counted any, as builds before the counter), and how many pages of
/// the log their followers read from the database (`awl_log_pages_total`).
struct Served {
    rate: f64,
    conflicts: Option<f64>,
    pages_read: Option<f64>,
}

/// A server's `/metrics` page.
async fn metrics_of(http: &reqwest::Client, base: &str, token: &str) -> Option<String> {
    let response = http
        .get(format!("{base}/metrics"))
        .bearer_auth(token)
        .send()
        .await
        .ok()?;
    response.text().await.ok()
}

/// The value of the sample whose line starts with `series` (name and labels).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// `a + b`, where a side without a value counts as nothing.
fn add(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (None, None) => None,
        _ => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
    }
}

/// Full board lifecycles per second over `n` server processes.
async fn servers(n: usize, c: &Config) -> Served {
    let fresh = runs_support::fresh("postgres", &support::admin_url()).await;
    let (operator, agents) = board_support::tokens(&fresh.store, c.agents).await;
    let ports: Vec<u16> = (0..n).map(|_| cluster::free_port()).collect();
    let args: Vec<Vec<String>> = ports
        .iter()
        .map(|p| {
            ["serve", "--no-worker", "--bind", &format!("127.0.0.1:{p}")]
                .map(str::to_string)
                .to_vec()
        })
        .collect();
    let session = session_of(&fresh.location, c.via_port);
    let _servers = Processes::spawn(
        &url_of(&fresh.location, c.via_port),
        session.as_deref(),
        c.db_pool,
        &args,
    );
    let bases: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let http = reqwest::Client::new();
    for base in &bases {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !http
            .get(format!("{base}/health"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            assert!(Instant::now() < deadline, "{base} never answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let client = |i: usize, token: &str| Client::at(bases[i % n].clone(), token);
    for (i, (name, token)) in agents.iter().enumerate() {
        client(i, token)
            .post(
                "/api/v1/agents",
                json!({"agent_id": name, "capabilities": ["rust"]}),
            )
            .await;
    }
    let done = Arc::new(AtomicBool::new(false));
    let completed = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = agents
        .iter()
        .enumerate()
        .map(|(i, (name, token))| {
            let (agent, name) = (client(i, token), name.clone());
            let (done, completed) = (done.clone(), completed.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Relaxed) {
                    let got = agent
                        .post(
                            &format!("/api/v1/agents/{name}/wait"),
                            json!({"timeout_seconds": 0.5}),
                        )
                        .await;
                    let Some(id) = got["task"]["task_id"].as_str() else {
                        continue;
                    };
                    agent
                        .post(&format!("/api/v1/tasks/{id}/ack"), json!({}))
                        .await;
                    agent
                        .post(
                            &format!("/api/v1/tasks/{id}/complete"),
                            json!({"result": {"ok": true}}),
                        )
                        .await;
                    completed.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let senders = (0..c.senders).map(|s| client(s, &operator)).collect();
    send_tasks(senders, c.tasks).await;
    while completed.load(Ordering::Relaxed) < c.tasks {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = c.tasks as f64 / started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    let (mut conflicts, mut pages_read) = (None, None);
    for base in &bases {
        let text = metrics_of(&http, base, &operator).await.unwrap_or_default();
        let counted = sample(&text, "awl_command_conflicts_total{stream=\"task\"}");
        conflicts = add(conflicts, counted);
        let read = sample(&text, "awl_log_pages_total{source=\"database\"}");
        pages_read = add(pages_read, read);
    }
    Served {
        rate,
        conflicts,
        pages_read,
    }
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let c = config();
    let via = c
        .via_port
        .map_or("direct".to_string(), |p| format!("through 127.0.0.1:{p}"));
    if c.wants("workers") {
        println!(
            "\n### `awl worker` processes: {} ten-step `sleep 0` runs, --db-pool {}, {via}\n",
            c.runs, c.db_pool
        );
        println!("| worker processes | steps / s |");
        println!("|---:|---:|");
        for &n in &c.processes {
            println!("| {n} | {:.0} |", workers(n, &c).await);
        }
    }
    if c.wants("servers") {
        println!(
            "\n### `awl serve --no-worker` processes: {} board lifecycles, {} agents, \
             {} senders, --db-pool {}, {via}\n",
            c.tasks, c.agents, c.senders, c.db_pool
        );
        println!(
            "| server processes | full lifecycles / s | task conflicts per lifecycle | log pages read from the database per lifecycle |"
        );
        println!("|---:|---:|---:|---:|");
        let per_lifecycle =
            |k: Option<f64>| k.map_or("-".to_string(), |k| format!("{:.2}", k / c.tasks as f64));
        for &n in &c.processes {
            let served = servers(n, &c).await;
            println!(
                "| {n} | {:.0} | {} | {} |",
                served.rate,
                per_lifecycle(served.conflicts),
                per_lifecycle(served.pages_read)
            );
        }
    }
    if c.wants("replica") {
        replica(&c).await;
    }
}

async fn replica(c: &Config) {
    let primary = Cluster::start();
    let replica = primary.replica();
    println!(
        "\n### Views from a streaming replica: {} ten-step `sleep 0` runs, {} view readers\n",
        c.runs, c.readers
    );
    println!(
        "| views read from | steps / s | views / s | view p50 | view p99 | replica behind (events) p50 / p99 / max |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, read) in [("the primary", None), ("the replica", Some(&replica))] {
        let m = views_under_load(&primary, read, c).await;
        let lag = m.lag.map_or("-".to_string(), |(p50, p99, max)| {
            format!("{p50:.0} / {p99:.0} / {max:.0}")
        });
        println!(
            "| {name} | {:.0} | {:.0} | {:.1} ms | {:.1} ms | {lag} |",
            m.steps_per_s, m.views_per_s, m.view_p50_ms, m.view_p99_ms
        );
    }
}
