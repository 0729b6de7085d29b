//! The projections benchmark, on Postgres by default:
//!
//! - a log of about one million events: runs of a ten-step no-op workflow carried out
//!   by the real executor, and tasks through their lifecycle (decided by the task
//!   aggregate, appended by 16 concurrent writers);
//! - rebuild speed: every projection rebuilt from position 0 (events of the log per
//!   second of rebuild time);
//! - query latency of each view endpoint over HTTP at that size (p50 / p99 of 50);
//! - live lag: while 1,000 events per second are appended, the time from an append's
//!   commit to every projection's checkpoint passing it (p50 / p99 / max).
//!
//! Run it:
//!
//!     cargo bench --bench projections                      # Postgres, 1,000,000 events
//!     cargo bench --bench projections -- --events 200000 --only sqlite
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL), default
//! the local server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use awl::clock::system_clock;
use awl::definitions;
use awl::domain::Decide;
use awl::domain::ids::{AgentId, TaskId};
use awl::domain::task::{CompletedBy, Task, TaskCommand};
use awl::domain::workspace::Capabilities;
use awl::executor::{Worker, WorkerConfig};
use awl::log::{Metadata, StreamRef, StreamType};
use awl::projections::Projections;
use awl::runners::{Runners, RunnersConfig};
use awl::runs::Runs;
use awl::server::{self, ServeConfig};
use awl::store::{EventStore, StoreOptions, domain_io};
use chrono::{Duration as ChronoDuration, Utc};
use cqrs_es::Aggregate;
use serde_json::{Map, json};
use tokio::sync::watch;

mod support;
use support::percentile;

struct Config {
    events: i64,
    only: String,
}

fn config() -> Config {
    let mut c = Config {
        events: 1_000_000,
        only: "postgres".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--events" => c.events = args.next().and_then(|s| s.parse().ok()).unwrap_or(c.events),
            "--only" => c.only = args.next().unwrap_or(c.only),
            _ => {}
        }
    }
    c
}

/// Runs of a ten-step no-op workflow, carried out by two workers.
async fn runs(store: &EventStore, location: &awl::store::StoreLocation, n: usize) {
    let dir = tempfile::tempdir().expect("dir");
    let mut yaml = "name: ten\nversion: \"1.0.0\"\nsteps:\n".to_string();
    for i in 0..10 {
        yaml.push_str(&format!("  - {{id: s{i}, type: tool, tool: noop}}\n"));
    }
    let path = dir.path().join("ten.awl.yaml");
    std::fs::write(&path, yaml).expect("write");
    let registered = definitions::register_file(store, &path, "bench", Utc::now())
        .await
        .expect("register");
    let (stop, stop_rx) = watch::channel(false);
    let mut workers = Vec::new();
    for w in 0..2 {
        let store = EventStore::open(
            location,
            StoreOptions {
                migrate: false,
                ..StoreOptions::default()
            },
        )
        .await
        .expect("open");
        let mut config = WorkerConfig::new(format!("bench-{w}"));
        config.poll = Duration::from_millis(20);
        workers.push(tokio::spawn(
            Worker::new(
                store,
                Runners::new(RunnersConfig::default()),
                config,
                system_clock(),
            )
            .run(stop_rx.clone()),
        ));
    }
    let starters: Vec<_> = (0..8)
        .map(|_| {
            let store = store.clone();
            let registered = registered.clone();
            tokio::spawn(async move {
                for _ in 0..n / 8 {
                    Runs::new(store.clone(), system_clock())
                        .start_version(&registered, Map::new(), "bench")
                        .await
                        .expect("start");
                }
            })
        })
        .collect();
    for s in starters {
        s.await.expect("starter");
    }
    while !store.wakeups().await.expect("wakeups").is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = stop.send(true);
    for w in workers {
        w.await.expect("join").expect("worker");
    }
}

/// The events of one task's whole life (ten events), spread over the last 30 days.
fn task_life(i: usize) -> (StreamRef, Vec<awl::domain::task::TaskEvent>) {
    let id = TaskId::new();
    let agent = AgentId::try_from(format!("agent-{}", i % 20)).expect("agent");
    let start = Utc::now() - ChronoDuration::minutes((i % (30 * 24 * 60)) as i64);
    let mut task = Task::default();
    let mut events = Vec::new();
    let mut step = |task: &mut Task, command: TaskCommand| {
        for e in task.decide(command).expect("a legal command") {
            task.apply(e.clone());
            events.push(e);
        }
    };
    let at = |s: i64| start + ChronoDuration::seconds(s);
    step(
        &mut task,
        TaskCommand::Queue {
            task_id: id,
            prompt: format!("task {i}"),
            required_capabilities: Capabilities::new(["rust"]),
            workspace: None,
            agent_hint: None,
            priority: 0,
            review_required: false,
            run_step: None,
            runner: Default::default(),
            at: at(0),
        },
    );
    step(
        &mut task,
        TaskCommand::Assign {
            agent: agent.clone(),
            at: at(1),
        },
    );
    step(
        &mut task,
        TaskCommand::Deliver {
            agent: agent.clone(),
            ack_deadline: at(31),
            at: at(1),
        },
    );
    step(
        &mut task,
        TaskCommand::Ack {
            agent: agent.clone(),
            at: at(2),
        },
    );
    for p in 0..5u8 {
        step(
            &mut task,
            TaskCommand::ReportProgress {
                agent: agent.clone(),
                message: "working".into(),
                percent: Some(p * 20),
                at: at(3 + i64::from(p)),
            },
        );
    }
    step(
        &mut task,
        TaskCommand::Complete {
            by: CompletedBy::Agent(agent),
            result: json!({"ok": true}),
            at: at(60),
        },
    );
    (StreamRef::new(StreamType::Task, id.to_string()), events)
}

/// `n` tasks' lives, appended by 16 writers.
async fn tasks(store: &EventStore, n: usize) {
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in (w..n).step_by(16) {
                    let (stream, events) = task_life(i);
                    let request = domain_io::append_request(
                        &stream,
                        0,
                        &events,
                        &Metadata::actor(format!("agent:agent-{}", i % 20)),
                    )
                    .expect("request");
                    store.append(request).await.expect("append");
                }
            })
        })
        .collect();
    for w in writers {
        w.await.expect("writer");
    }
}

async fn rebuild_all(projections: &Projections, head: i64) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut total = 0.0;
    for name in projections.names() {
        let started = Instant::now();
        projections
            .rebuild(name, &|_, _| {})
            .await
            .expect("rebuild");
        let secs = started.elapsed().as_secs_f64();
        total += secs;
        out.push((name.to_string(), head as f64 / secs));
    }
    out.push((
        "all projections, one after another".into(),
        head as f64 / total,
    ));
    let started = Instant::now();
    projections
        .rebuild_all(&|_, _| {})
        .await
        .expect("rebuild all");
    out.push((
        "all projections in one pass (`awl projections rebuild`)".into(),
        head as f64 / started.elapsed().as_secs_f64(),
    ));
    out
}

async fn query_latencies(store: &EventStore) -> Vec<(String, f64, f64)> {
    let server = server::start(
        store.clone(),
        ServeConfig::new("127.0.0.1:0".parse().expect("addr")),
        Runners::new(RunnersConfig::default()),
        system_clock(),
    )
    .await
    .expect("server");
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::new();
    let run: serde_json::Value = http
        .get(format!("{base}/api/v1/views/runs?limit=1"))
        .send()
        .await
        .expect("runs")
        .json()
        .await
        .expect("json");
    let run_id = run["rows"][0]["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let paths = [
        "/api/v1/views/board?status=QUEUED,IN_PROGRESS&limit=100".to_string(),
        "/api/v1/views/board?status=COMPLETED&limit=100".to_string(),
        "/api/v1/views/runs?limit=100".to_string(),
        "/api/v1/views/runs?workflow=ten&status=SUCCEEDED&limit=100".to_string(),
        format!("/api/v1/views/runs/{run_id}/timeline"),
        "/api/v1/views/inbox".to_string(),
        "/api/v1/views/agents".to_string(),
        "/api/v1/views/audit?actor=agent:agent-3&limit=100".to_string(),
        "/api/v1/views/analytics/workflows".to_string(),
        "/api/v1/views/analytics/steps".to_string(),
        "/api/v1/views/analytics/agents".to_string(),
    ];
    let mut out = Vec::new();
    for path in paths {
        let mut samples = Vec::new();
        for _ in 0..50 {
            let started = Instant::now();
            let response = http
                .get(format!("{base}{path}"))
                .send()
                .await
                .expect("answer");
            assert!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
            let _ = response.bytes().await.expect("body");
            samples.push(started.elapsed().as_secs_f64() * 1e3);
        }
        samples.sort_by(f64::total_cmp);
        out.push((path, percentile(&samples, 0.5), percentile(&samples, 0.99)));
    }
    server.shutdown().await.expect("shutdown");
    out
}

/// Append 1,000 events per second for `secs` seconds while the projections follow;
/// for each append, the time until every projection's checkpoint passed it.
async fn live_lag(store: &EventStore, secs: u64) -> (f64, f64, f64) {
    let projections = Projections::new(store.clone());
    let (stop, stop_rx) = watch::channel(false);
    let follower = {
        let p = projections.clone();
        tokio::spawn(async move { p.run(stop_rx).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let appended: Arc<std::sync::Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let writer = {
        let store = store.clone();
        let appended = appended.clone();
        tokio::spawn(async move {
            // Ten events every 10 ms: one task's life per tick.
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let end = Instant::now() + Duration::from_secs(secs);
            let mut i = 10_000_000;
            while Instant::now() < end {
                tick.tick().await;
                let (stream, events) = task_life(i);
                i += 1;
                let request =
                    domain_io::append_request(&stream, 0, &events, &Metadata::actor("bench"))
                        .expect("request");
                let done = store.append(request).await.expect("append");
                appended
                    .lock()
                    .expect("lock")
                    .push((done.last_position, Instant::now()));
            }
        })
    };
    let mut lags = Vec::new();
    let mut next = 0;
    loop {
        let status = projections.status().await.expect("status");
        let applied = status.iter().map(|s| s.position).min().unwrap_or(0);
        let now = Instant::now();
        {
            let list = appended.lock().expect("lock");
            while next < list.len() && list[next].0 <= applied {
                lags.push(now.duration_since(list[next].1).as_secs_f64() * 1e3);
                next += 1;
            }
        }
        if writer.is_finished() && next >= appended.lock().expect("lock").len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    writer.await.expect("writer");
    let _ = stop.send(true);
    follower.await.expect("join").expect("follower");
    lags.sort_by(f64::total_cmp);
    (
        percentile(&lags, 0.5),
        percentile(&lags, 0.99),
        *lags.last().unwrap_or(&0.0),
    )
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cfg = config();
    let kind = cfg.only.as_str();
    let options = StoreOptions {
        max_connections: 32,
        ..StoreOptions::default()
    };
    let fresh = support::fresh(kind, &support::admin_url(), options).await;
    let store = &fresh.store;
    let started = Instant::now();
    // About half the log from runs (33 events each), half from tasks (10 each).
    let run_count = (cfg.events / 2 / 33) as usize;
    runs(store, &fresh.location, run_count).await;
    let after_runs = store.head().await.expect("head");
    let task_count = ((cfg.events - after_runs).max(0) / 10) as usize;
    tasks(store, task_count).await;
    let head = store.head().await.expect("head");
    eprintln!(
        "log: {head} events ({run_count} runs, {task_count} tasks) written in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let projections = Projections::new(store.clone());
    projections.prepare().await.expect("prepare");
    println!("### {kind}: {head} events\n");
    println!("| rebuild | events of the log per second |\n|---|---:|");
    for (name, rate) in rebuild_all(&projections, head).await {
        println!("| {name} | {rate:.0} |");
    }
    println!("\n| view query | p50 | p99 |\n|---|---:|---:|");
    for (path, p50, p99) in query_latencies(store).await {
        println!("| `{path}` | {p50:.2} ms | {p99:.2} ms |");
    }
    let (p50, p99, max) = live_lag(store, 10).await;
    println!("\n| live lag at 1,000 events/s (10 s) | p50 | p99 | max |\n|---|---:|---:|---:|");
    println!(
        "| every projection's checkpoint past the append | {p50:.1} ms | {p99:.1} ms | {max:.1} ms |"
    );
}
