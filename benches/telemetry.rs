//! What traces and metrics cost: the executor's steps per second (and awl's CPU time
//! per step) and the board's dispatch latency with telemetry off (awl's log subscriber
//! only: no OpenTelemetry layer, no metrics recorder) and on (every span sampled and exported over OTLP/HTTP to a local receiver, every
//! metric recorded), on Postgres.
//!
//! Logging and tracing are set up once per process, so each measurement runs in a
//! child process of this one, off and on alternately, several rounds, and the medians
//! are compared. Prints Markdown for BENCHMARKS.md.
//!
//!     cargo bench --bench telemetry
//!     cargo bench --bench telemetry -- --rounds 9 --runs 2000
//!     cargo bench --bench telemetry -- --rounds 25 --dispatch-only
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL), default
//! the local server.

use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use serde_json::{Value, json};

#[path = "support/board.rs"]
#[allow(
    dead_code,
    reason = "the lifecycle helpers are the board and scale benchmarks'"
)]
mod board_support;
#[path = "support/runs.rs"]
#[allow(dead_code, reason = "shared with the executor benchmark")]
mod runs_support;
mod support;

/// Ten-step runs of a step performed off the decision path (a start commit and an
/// outcome commit each, so each step is a span).
const STEP: &str = "tool: sleep, inputs: {seconds: 0}";
/// Runs each worker holds at once: `awl worker`'s default.
const BATCH: usize = 512;

/// One measurement in this process, with telemetry as `mode` says; prints a JSON line.
async fn measure(mode: &str, runs: usize) {
    // Off is awl as it runs without an OTLP endpoint, less the metrics recorder: its
    // log subscriber only. On adds the OpenTelemetry layer and the recorder.
    let telemetry = if mode == "on" || mode == "metrics" {
        Some(awl::telemetry::init("bench").expect("telemetry"))
    } else {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
            .with_writer(std::io::stderr)
            .try_init();
        None
    };
    if let Some(t) = &telemetry {
        assert_eq!(
            t.tracing_on(),
            mode == "on",
            "OTEL_EXPORTER_OTLP_ENDPOINT is set for the on mode only"
        );
    }
    let admin = support::admin_url();
    let (steps_per_second, cpu_per_1000_steps) =
        if std::env::var("AWL_BENCH_SKIP_THROUGHPUT").is_ok() {
            (f64::NAN, f64::NAN)
        } else {
            let t = runs_support::measured("postgres", &admin, runs, 2, STEP, false, BATCH).await;
            // µs a step = ms per 1,000 steps.
            let cpu = t.cpu.map_or(f64::NAN, |c| c.this_us / (runs as f64 * 10.0));
            (t.rate, cpu)
        };
    let (p50, p99) = if std::env::var("AWL_BENCH_SKIP_DISPATCH").is_ok() {
        (f64::NAN, f64::NAN)
    } else {
        let (p50, p99, _) = board_support::dispatch_latency("postgres").await;
        (p50, p99)
    };
    if let Some(t) = telemetry {
        let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
    }
    println!(
        "{}",
        json!({"mode": mode, "steps_per_second": steps_per_second, "cpu_ms_per_1000_steps": cpu_per_1000_steps, "dispatch_p50_ms": p50, "dispatch_p99_ms": p99})
    );
}

/// The OTLP receiver: counts the export requests and bytes it gets.
#[derive(Clone, Default)]
struct Sink {
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

async fn receive(State(sink): State<Sink>, body: Bytes) -> &'static str {
    sink.requests.fetch_add(1, Ordering::Relaxed);
    sink.bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
    ""
}

/// The median (NaN when there are no values: a measurement skipped).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut rounds = 3;
    let mut runs = 1_000;
    let mut skip_dispatch = false;
    let mut skip_throughput = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => rounds = args.next().and_then(|s| s.parse().ok()).unwrap_or(3),
            "--runs" => runs = args.next().and_then(|s| s.parse().ok()).unwrap_or(1_000),
            // Throughput only (the child measurements skip dispatch).
            "--skip-dispatch" => skip_dispatch = true,
            // Dispatch latency only (more rounds in the same time).
            "--dispatch-only" => skip_throughput = true,
            _ => {}
        }
    }
    if let Ok(mode) = std::env::var("AWL_BENCH_TELEMETRY_MODE") {
        measure(&mode, runs).await;
        return;
    }
    let sink = Sink::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the receiver");
    let endpoint = format!("http://{}", listener.local_addr().expect("address"));
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(sink.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let me = std::env::current_exe().expect("this benchmark's path");
    let mut results: Vec<Value> = Vec::new();
    for round in 0..rounds {
        // Alternate which goes first, so a drift of the machine over the run does not
        // favour one mode.
        let order = if round % 2 == 0 {
            ["off", "on"]
        } else {
            ["on", "off"]
        };
        for mode in order {
            let mut cmd = tokio::process::Command::new(&me);
            cmd.args(["--runs", &runs.to_string()])
                .env("AWL_BENCH_TELEMETRY_MODE", mode)
                .envs(skip_dispatch.then_some(("AWL_BENCH_SKIP_DISPATCH", "1")))
                .envs(skip_throughput.then_some(("AWL_BENCH_SKIP_THROUGHPUT", "1")))
                .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
                .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                .stderr(Stdio::inherit())
                .stdout(Stdio::piped());
            if mode == "on" {
                cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
                    .env("OTEL_TRACES_SAMPLER", "always_on")
                    .env("OTEL_SERVICE_NAME", "awl-bench");
            }
            let out = cmd.output().await.expect("run a measurement");
            assert!(out.status.success(), "the {mode} measurement failed");
            let line = String::from_utf8_lossy(&out.stdout);
            let result: Value = line
                .lines()
                .rev()
                .find_map(|l| serde_json::from_str(l).ok())
                .expect("a result line");
            eprintln!("round {round}: {result}");
            results.push(result);
        }
    }
    let of = |mode: &str, key: &str| -> f64 {
        median(
            results
                .iter()
                .filter(|r| r["mode"] == mode)
                .filter_map(|r| r[key].as_f64())
                .collect(),
        )
    };
    println!(
        "| telemetry | steps/s (2 workers, {runs} ten-step runs) | awl CPU per 1,000 steps | dispatch p50 | dispatch p99 |"
    );
    println!("|---|---:|---:|---:|---:|");
    for mode in ["off", "on"] {
        println!(
            "| {mode} | {:.0} | {:.0} ms | {:.2} ms | {:.2} ms |",
            of(mode, "steps_per_second"),
            of(mode, "cpu_ms_per_1000_steps"),
            of(mode, "dispatch_p50_ms"),
            of(mode, "dispatch_p99_ms")
        );
    }
    let slower = 1.0 - of("on", "steps_per_second") / of("off", "steps_per_second");
    let cpu = of("on", "cpu_ms_per_1000_steps") / of("off", "cpu_ms_per_1000_steps") - 1.0;
    let p50 = of("on", "dispatch_p50_ms") / of("off", "dispatch_p50_ms") - 1.0;
    let p99 = of("on", "dispatch_p99_ms") / of("off", "dispatch_p99_ms") - 1.0;
    println!(
        "\nOn against off (medians of {rounds} rounds): throughput {:+.1} %, awl CPU per step {:+.1} %, dispatch p50 {:+.1} %, p99 {:+.1} %; the receiver got {} export requests, {} KiB",
        -slower * 100.0,
        cpu * 100.0,
        p50 * 100.0,
        p99 * 100.0,
        sink.requests.load(Ordering::Relaxed),
        sink.bytes.load(Ordering::Relaxed) / 1024
    );
}
