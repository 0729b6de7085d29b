//! The cost of flow control on claims: runs of one pure step finished per second by
//! two workers, with no concurrency limit against a per-key limit over 1,000 keys
//! (every run queued at start, admitted by a worker in its commit, its slot given
//! back when it ends). Prints Markdown for BENCHMARKS.md.
//!
//!     cargo bench --bench flow                          # 10,000 runs, Postgres
//!     cargo bench --bench flow -- --runs 20000 --keys 1000 --per-key 2 --only sqlite
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL), default
//! the local server.

use std::time::{Duration, Instant};

use awl::clock::system_clock;
use awl::runs::{Runs, StartRun};
use awl::store::{EventStore, StoreOptions};
use serde_json::{Map, json};
use tokio::sync::watch;

#[path = "support/runs.rs"]
#[allow(dead_code)]
mod runs_support;
// Throughput only: the shared percentile helper is not used here.
#[allow(dead_code)]
mod support;

use runs_support::{fresh, register, worker};

fn workflow(limited: bool, per_key: u32) -> String {
    let concurrency = if limited {
        format!("concurrency: {{key: inputs.customer, per_key: {per_key}}}\n")
    } else {
        String::new()
    };
    format!(
        "name: claim\nversion: \"1.0.0\"\ninputs:\n  customer: {{type: string}}\n{concurrency}\
         steps:\n  - {{id: s0, tool: noop}}\n"
    )
}

/// Runs finished per second, and how many were queued (recorded `run.queued`).
async fn measure(
    kind: &str,
    runs: usize,
    keys: usize,
    per_key: u32,
    limited: bool,
) -> (f64, usize) {
    let fresh = fresh(kind, &support::admin_url()).await;
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("claim.awl.yaml");
    std::fs::write(&path, workflow(limited, per_key)).expect("write");
    register(&fresh.store, &path).await;
    let service = Runs::new(fresh.store.clone(), system_clock());
    for i in 0..runs {
        let mut inputs = Map::new();
        inputs.insert("customer".into(), json!(format!("c{:04}", i % keys)));
        service
            .start(
                StartRun {
                    workflow: "claim".into(),
                    inputs,
                    priority: None,
                    scope: None,
                },
                "bench",
                None,
            )
            .await
            .expect("start");
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..2 {
        let store = EventStore::open(
            &fresh.location,
            StoreOptions {
                migrate: false,
                ..StoreOptions::default()
            },
        )
        .await
        .expect("open");
        handles.push(tokio::spawn(
            worker(&store, &format!("bench-{w}")).run(stop_rx.clone()),
        ));
    }
    while !fresh.store.wakeups().await.expect("wakeups").is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let _ = stop_tx.send(true);
    for h in handles {
        h.await.expect("join").expect("worker");
    }
    let count = |t: &str| {
        let store = fresh.store.clone();
        let t = t.to_string();
        async move {
            let filter = awl::log::EventFilter {
                event_types: vec![t],
                ..awl::log::EventFilter::default()
            };
            let mut n = 0;
            let mut after = 0;
            loop {
                let (events, next) = store.read_page(after, 10_000, &filter).await.expect("read");
                n += events.len();
                if next <= after {
                    break n;
                }
                after = next;
            }
        }
    };
    let completed = count("run.completed").await;
    assert_eq!(completed, runs, "every run succeeded");
    let queued = count("run.queued").await;
    if limited {
        assert_eq!(
            count("run.admitted").await,
            runs,
            "every run was admitted once"
        );
    }
    (runs as f64 / elapsed, queued)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut runs = 10_000usize;
    let mut keys = 1_000usize;
    let mut per_key = 1u32;
    let mut kinds = vec!["postgres".to_string(), "sqlite".to_string()];
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|s| s.parse().ok()).unwrap_or(runs),
            "--keys" => keys = args.next().and_then(|s| s.parse().ok()).unwrap_or(keys),
            "--per-key" => per_key = args.next().and_then(|s| s.parse().ok()).unwrap_or(per_key),
            "--only" => kinds = args.next().into_iter().collect(),
            _ => {}
        }
    }
    println!("| store | flow control | runs | runs/s (two workers) | queued at least once |");
    println!("|---|---|---:|---:|---:|");
    for kind in &kinds {
        for limited in [false, true] {
            let (rate, queued) = measure(kind, runs, keys, per_key, limited).await;
            let what = if limited {
                format!("{keys} keys, {per_key} per key")
            } else {
                "none".to_string()
            };
            println!("| {kind} | {what} | {runs} | {rate:.0} | {queued} |");
        }
    }
}
