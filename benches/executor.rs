//! The executor benchmark: steps per second for 1,000 runs of a ten-step workflow
//! (no-op, `sleep 0`, `http` against a local server, `shell`) with one and two
//! workers; time from starting a run to its first step starting; replay time of a
//! run with 1,000 events. On Postgres and on SQLite. Beside each rate, the CPU time
//! per step of the workers' phase, read from /proc: this process's (the workers, and
//! for `http` the local server too) and every Postgres server process's, and how
//! busy the machine was; and, with `http`, the floor under an `http` step: the same
//! exchange alone, without awl or Postgres.
//! Prints Markdown for BENCHMARKS.md.
//!
//!     cargo bench --bench executor                       # both stores
//!     cargo bench --bench executor -- --only postgres --runs 1000
//!     cargo bench --bench executor -- --only postgres --runs 5000 --steps sleep,http \
//!         --workers 2 --throughput-only
//!     cargo bench --bench executor -- --only postgres --runs 5000 --steps sleep \
//!         --workers 2 --throughput-only --projections   # the projections live beside
//!     cargo bench --bench executor -- --only postgres --runs 5000 --steps sleep \
//!         --workers 2 --throughput-only --batch 1024     # runs held per worker
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL; each
//! measurement creates and drops its own database), default
//! postgres://postgres@127.0.0.1/postgres.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use awl::clock::system_clock;
use awl::domain::run::Run;
use awl::engine::{self, TickInput};
use awl::log::{StreamRef, StreamType};
use awl::runs::Runs;
use awl::store::domain_io;
use chrono::Utc;
use serde_json::Map;
use tokio::sync::watch;

/// The floor under an `http` step: the same GET to the same server with nothing
/// else, `in_flight` at a time for `time`. Requests per second, and this process's
/// CPU time per request (client and server: both are in it) in microseconds.
async fn exchange_alone(
    server: std::net::SocketAddr,
    in_flight: usize,
    time: Duration,
) -> (f64, f64) {
    // hyper's pooled client alone: what awl's `http` runner sends through.
    let client: hyper_util::client::legacy::Client<_, http_body_util::Full<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .build_http();
    let url = format!("http://{server}/ok");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let loops: Vec<_> = (0..in_flight)
        .map(|_| {
            let (client, url, stop, done) =
                (client.clone(), url.clone(), stop.clone(), done.clone());
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let request = hyper::Request::get(&url)
                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                        .expect("request");
                    let response = client.request(request).await.expect("send");
                    let body = http_body_util::BodyExt::collect(response.into_body())
                        .await
                        .expect("body")
                        .to_bytes();
                    let _: serde_json::Value = serde_json::from_slice(&body).expect("json");
                    done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Connections opened first: the measurement is of requests on open connections,
    // as the steps' are.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (before, from, started) = (
        CpuSample::now(),
        done.load(std::sync::atomic::Ordering::Relaxed),
        Instant::now(),
    );
    tokio::time::sleep(time).await;
    let (after, to, secs) = (
        CpuSample::now(),
        done.load(std::sync::atomic::Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in loops {
        let _ = l.await;
    }
    let requests = (to - from) as f64;
    let us = before
        .zip(after)
        .map_or(f64::NAN, |(b, a)| a.since(&b).this_us / requests);
    (requests / secs, us)
}

#[path = "support/local_http.rs"]
mod local_http;
#[path = "support/runs.rs"]
mod runs_support;
mod support;
use runs_support::{CpuSample, all_finished, measured, register, start_runs, worker, workflow_of};
use support::percentile;

struct Config {
    only: Option<String>,
    runs: usize,
    admin_url: String,
    /// Which step kinds to measure (`noop`, `sleep`, `http`, `shell`); all if empty.
    steps: Vec<String>,
    /// Which worker counts to measure.
    workers: Vec<usize>,
    /// Skip the latency and replay measurements.
    throughput_only: bool,
    /// Keep the projections live in the first worker's process while measuring
    /// throughput, as `awl serve` with an in-process worker does.
    projections: bool,
    /// Most runs each worker holds at once (`awl worker --batch`).
    batch: usize,
}

fn config() -> Config {
    let mut args = std::env::args().skip(1);
    let mut c = Config {
        only: None,
        runs: 1_000,
        admin_url: support::admin_url(),
        steps: Vec::new(),
        workers: vec![1, 2],
        throughput_only: false,
        projections: false,
        batch: awl::executor::WorkerConfig::new("bench").batch,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--only" => c.only = args.next(),
            "--runs" => c.runs = args.next().and_then(|s| s.parse().ok()).unwrap_or(1_000),
            "--steps" => {
                c.steps = args
                    .next()
                    .map(|s| s.split(',').map(str::to_string).collect())
                    .unwrap_or_default();
            }
            "--workers" => {
                c.workers = args
                    .next()
                    .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect())
                    .unwrap_or_default();
            }
            "--throughput-only" => c.throughput_only = true,
            "--projections" => c.projections = true,
            "--batch" => {
                c.batch = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(c.batch)
                    .max(1)
            }
            _ => {}
        }
    }
    c
}

/// A workflow of `steps` no-op tool steps.
fn noop_workflow(dir: &Path, name: &str, steps: usize) -> std::path::PathBuf {
    workflow_of(dir, name, steps, "tool: noop")
}

/// From `start_run` returning to the first step's `run.step_started` being committed,
/// with an idle worker waiting.
async fn first_step_latency(kind: &str, cfg: &Config) -> (f64, f64) {
    let fresh = runs_support::fresh(kind, &cfg.admin_url).await;
    let dir = tempfile::tempdir().expect("dir");
    // A shell step: the first step is started (and committed) before it is performed.
    let path = dir.path().join("one.awl.yaml");
    std::fs::write(&path, "name: one\nversion: \"1.0.0\"\nsteps:\n  - {id: first, type: shell, command: [\"true\"]}\n").expect("write");
    let registered = register(&fresh.store, &path).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let handle = tokio::spawn(worker(&fresh.store, "latency").run(stop_rx));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut samples = Vec::new();
    for _ in 0..100 {
        let t0 = Instant::now();
        let id = Runs::new(fresh.store.clone(), system_clock())
            .start_version(&registered, Map::new(), "bench")
            .await
            .expect("start")
            .run_id;
        let stream = StreamRef::new(StreamType::Run, id.to_string());
        let started = Instant::now();
        loop {
            let events = fresh.store.read_stream(&stream).await.expect("read");
            if events.iter().any(|e| e.event_type == "run.step_started") {
                break;
            }
            tokio::task::yield_now().await;
        }
        let _ = t0;
        samples.push(started.elapsed().as_secs_f64() * 1e3);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_tx.send(true);
    handle.await.expect("join").expect("worker");
    samples.sort_by(f64::total_cmp);
    (percentile(&samples, 0.5), percentile(&samples, 0.99))
}

/// Read and fold a run with about 1,000 events, and decide its next move.
async fn replay(kind: &str, cfg: &Config) -> (usize, f64, f64) {
    let fresh = runs_support::fresh(kind, &cfg.admin_url).await;
    let dir = tempfile::tempdir().expect("dir");
    // 333 steps x 3 events + start and end: just over 1,000 events.
    let registered = register(&fresh.store, &noop_workflow(dir.path(), "long", 333)).await;
    let definition = Arc::clone(&registered.workflow);
    let ids = start_runs(&fresh.store, &registered, 1).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let handle = tokio::spawn(worker(&fresh.store, "replay").run(stop_rx));
    while !all_finished(&fresh.store, &ids).await {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let _ = stop_tx.send(true);
    handle.await.expect("join").expect("worker");
    let stream = StreamRef::new(StreamType::Run, ids[0].to_string());
    let mut samples = Vec::new();
    let mut count = 0;
    for _ in 0..100 {
        let t = Instant::now();
        let events = fresh.store.read_stream(&stream).await.expect("read");
        let (run, version) = domain_io::fold::<Run>(&events).expect("fold");
        let tick = engine::tick(
            &definition,
            &run,
            &TickInput {
                now: Utc::now(),
                ..TickInput::default()
            },
        )
        .expect("tick");
        assert!(tick.events.is_empty());
        samples.push(t.elapsed().as_secs_f64() * 1e3);
        count = version as usize;
    }
    samples.sort_by(f64::total_cmp);
    (count, percentile(&samples, 0.5), percentile(&samples, 0.95))
}

#[tokio::main]
async fn main() {
    let cfg = config();
    for kind in ["postgres", "sqlite"] {
        if cfg.only.as_deref().is_some_and(|o| o != kind) {
            continue;
        }
        println!("\n### {kind}\n");
        println!(
            "| step | workers | runs | steps | seconds | steps/s | CPU µs a step: this process | Postgres | machine busy |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        // `noop` is pure: a worker answers it at once and decides on, so a run's ten
        // steps are one commit. The others are performed off the decision path, each
        // recorded as started before it is performed and its outcome after: every
        // step is a start commit and an outcome commit, batched across runs. `http`
        // calls a local server; `shell` starts a process.
        let server = local_http::local_http_server().await;
        let http = format!("type: http, method: GET, url: \"http://{server}/ok\"");
        for (label, key, body) in [
            ("noop", "noop", "tool: noop".to_string()),
            (
                "sleep 0",
                "sleep",
                "tool: sleep, inputs: {seconds: 0}".to_string(),
            ),
            ("http GET (local)", "http", http),
            (
                "shell `true`",
                "shell",
                "type: shell, command: [\"true\"]".to_string(),
            ),
        ] {
            if !cfg.steps.is_empty() && !cfg.steps.iter().any(|s| s == key) {
                continue;
            }
            for &workers in &cfg.workers {
                let t = measured(
                    kind,
                    &cfg.admin_url,
                    cfg.runs,
                    workers,
                    &body,
                    cfg.projections,
                    cfg.batch,
                )
                .await;
                let steps = (cfg.runs * 10) as f64;
                let cpu = t.cpu.map_or("- | - | -".to_string(), |c| {
                    format!(
                        "{:.0} | {} | {:.0} %",
                        c.this_us / steps,
                        if kind == "postgres" {
                            format!("{:.0}", c.postgres_us / steps)
                        } else {
                            "-".into()
                        },
                        c.busy * 100.0
                    )
                });
                println!(
                    "| {label} | {workers} | {} | {} | {:.2} | {:.0} | {cpu} |",
                    cfg.runs,
                    cfg.runs * 10,
                    t.secs,
                    t.rate,
                );
            }
        }
        if cfg.steps.is_empty() || cfg.steps.iter().any(|s| s == "http") {
            let (rate, us) = exchange_alone(server, 512, Duration::from_secs(3)).await;
            println!(
                "\nThe `http` steps' exchange alone (hyper's client to the local server, 512 in flight, \
                 no awl, no Postgres): {rate:.0} requests/s, {us:.1} µs of this process's CPU each"
            );
        }
        if cfg.throughput_only {
            continue;
        }
        let (p50, p99) = first_step_latency(kind, &cfg).await;
        println!(
            "\nRun to first step started (100 runs, idle worker): p50 {p50:.1} ms, p99 {p99:.1} ms"
        );
        let (events, p50, p95) = replay(kind, &cfg).await;
        println!(
            "Replay a run of {events} events (read + fold + decide, 100 times): p50 {p50:.2} ms, p95 {p95:.2} ms"
        );
    }
}
