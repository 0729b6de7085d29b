//! Continue-as-new: how long it takes to load a run with a long history (100,000
//! events by default) before and after it continues as new. The history is made by
//! the real executor: a workflow of steps that fail and are retried (25 attempts each,
//! `on_error: continue`), ending at a gate, so the run is still live. Loading is what
//! a worker does when it claims the run: read the events its state is folded from
//! (`read_current`: from the last continuation on) and fold them. Prints Markdown for
//! BENCHMARKS.md.
//!
//!     cargo bench --bench history                      # 100,000 events, both stores
//!     cargo bench --bench history -- --events 20000 --only sqlite
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL), default
//! the local server.

use std::time::{Duration, Instant};

use awl::domain::Decide;
use awl::domain::run::{Run, RunCommand, RunStatus};
use awl::log::{Metadata, StreamRef, StreamType};
use awl::store::command::Command;
use awl::store::{EventStore, domain_io};
use tokio::sync::watch;

#[path = "support/runs.rs"]
#[allow(dead_code)]
mod runs_support;
mod support;

/// Events per failed attempt: started, failed, recovery applied, retried.
const EVENTS_PER_ATTEMPT: usize = 4;
const ATTEMPTS: usize = 25;

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut events = 100_000usize;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--events" => events = args.next().and_then(|s| s.parse().ok()).unwrap_or(events),
            "--only" => only = args.next(),
            _ => {}
        }
    }
    println!(
        "| store | events in history | load before (p50 / p95) | load after continue-as-new (p50 / p95) | events read after |"
    );
    println!("|---|---:|---:|---:|---:|");
    for kind in ["postgres", "sqlite"] {
        if only.as_deref().is_some_and(|o| o != kind) {
            continue;
        }
        measure(kind, events).await;
    }
}

async fn measure(kind: &str, events: usize) {
    let fresh = runs_support::fresh(kind, &support::admin_url()).await;
    let store = fresh.store.clone();
    let steps = (events / (EVENTS_PER_ATTEMPT * ATTEMPTS)).max(1);
    let dir = tempfile::tempdir().expect("dir");
    let body = format!(
        "tool: fail, retry: {{max_attempts: {ATTEMPTS}, backoff: constant, base_seconds: 0}}, on_error: continue"
    );
    let path = runs_support::workflow_of(dir.path(), "polling", steps, &body);
    let mut yaml = std::fs::read_to_string(&path).expect("read");
    yaml.push_str("  - {id: last, type: gate, message: \"done?\"}\n");
    std::fs::write(&path, yaml).expect("write");
    let registered = runs_support::register(&store, &path).await;
    let ids = runs_support::start_runs(&store, &registered, 1).await;
    let stream = StreamRef::new(StreamType::Run, ids[0].to_string());
    // Make the history with continuation off.
    let making = Instant::now();
    let mut config = awl::executor::WorkerConfig::new("history");
    config.poll = Duration::from_millis(20);
    config.history_limit = u64::MAX;
    let worker = awl::executor::Worker::new(
        store.clone(),
        awl::runners::Runners::new(awl::runners::RunnersConfig::default()),
        config,
        awl::clock::system_clock(),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let handle = tokio::spawn(worker.run(stop_rx));
    loop {
        let (run, _) = domain_io::fold::<Run>(&store.read_current(&stream).await.expect("read"))
            .expect("fold");
        if run.status() == Some(RunStatus::Waiting) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = stop_tx.send(true);
    handle.await.expect("join").expect("worker");
    eprintln!(
        "{kind}: made a history of {} events in {:.1} s",
        store.read_stream(&stream).await.expect("read").len(),
        making.elapsed().as_secs_f64()
    );
    let (before, length) = load_times(&store, &stream).await;
    Command::new(&store, &stream, Metadata::actor("bench"))
        .run(|run: &Run| {
            run.decide(RunCommand::Continue {
                at: chrono::Utc::now(),
            })
        })
        .await
        .expect("continue as new");
    let (after, read_after) = load_times(&store, &stream).await;
    println!(
        "| {kind} | {length} | {:.1} ms / {:.1} ms | {:.2} ms / {:.2} ms | {read_after} |",
        before.0, before.1, after.0, after.1
    );
}

/// Load the run 20 times (read its current events and fold them): p50 and p95 in ms,
/// and how many events a load reads.
async fn load_times(store: &EventStore, stream: &StreamRef) -> ((f64, f64), usize) {
    let mut samples = Vec::new();
    let mut read = 0;
    for _ in 0..20 {
        let t = Instant::now();
        let events = store.read_current(stream).await.expect("read");
        let (run, _) = domain_io::fold::<Run>(&events).expect("fold");
        samples.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(run.status(), Some(RunStatus::Waiting));
        read = events.len();
    }
    samples.sort_by(f64::total_cmp);
    let at = |p: f64| support::percentile(&samples, p);
    ((at(0.5), at(0.95)), read)
}
