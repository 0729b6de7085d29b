//! Bulk actions at scale: a bulk cancel of many runs (100,000 by default). The runs
//! are started first (outside the measurement) and the runs view caught up, as `awl
//! serve` keeps it; then the bulk action is planned (the filter's selection read from
//! the view and recorded) and carried out in batches of 200, each run's cancel its own
//! command. Prints Markdown for BENCHMARKS.md.
//!
//!     cargo bench --bench bulk                          # 100,000 runs on Postgres
//!     cargo bench --bench bulk -- --runs 20000 --only sqlite
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL), default
//! the local server.

use std::time::Instant;

use awl::bulk::BulkActions;
use awl::clock::system_clock;
use awl::domain::bulk::{BulkAction, BulkFilter};
use awl::projections::Projections;
use awl::runs::Runs;
use futures_util::StreamExt;
use serde_json::Map;

mod support;

const WORKFLOW: &str =
    "name: held\nversion: \"1.0.0\"\nsteps:\n  - {id: wait, type: gate, message: \"go?\"}\n";

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut runs = 100_000usize;
    let mut kind = "postgres".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().and_then(|s| s.parse().ok()).unwrap_or(runs),
            "--only" => kind = args.next().unwrap_or(kind),
            _ => {}
        }
    }
    let options = awl::store::StoreOptions {
        max_connections: 32,
        ..awl::store::StoreOptions::default()
    };
    let fresh = support::fresh(&kind, &support::admin_url(), options).await;
    let store = fresh.store.clone();
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("held.awl.yaml");
    std::fs::write(&file, WORKFLOW).expect("write");
    let registered = awl::definitions::register_file(&store, &file, "bench", chrono::Utc::now())
        .await
        .expect("register");
    let starting = Instant::now();
    let service = Runs::new(store.clone(), system_clock());
    futures_util::stream::iter(0..runs)
        .map(|_| {
            let (service, registered) = (service.clone(), &registered);
            async move {
                service
                    .start_version(registered, Map::new(), "bench")
                    .await
                    .expect("start");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let started = starting.elapsed();
    let projections = Projections::new(store.clone());
    projections.prepare().await.expect("prepare");
    projections.catch_up_all().await.expect("catch up");
    eprintln!("started {runs} runs in {:.1} s", started.as_secs_f64());

    let bulk = BulkActions::new(store.clone(), system_clock());
    let filter = BulkFilter {
        workflow: Some("held".into()),
        ..BulkFilter::default()
    };
    let planning = Instant::now();
    let planned = bulk
        .plan(BulkAction::Cancel, None, filter, "bench", "bench")
        .await
        .expect("plan");
    let plan = planning.elapsed();
    let id = planned.id().expect("an id");
    let carrying = Instant::now();
    let batches = std::sync::Mutex::new((Instant::now(), Vec::new()));
    let done = bulk
        .carry_out(id, 200, "bench", &|_| {
            if let Ok(mut b) = batches.lock() {
                let took = b.0.elapsed().as_secs_f64() * 1e3;
                b.1.push(took);
                b.0 = Instant::now();
            }
        })
        .await
        .expect("carry out");
    let carry = carrying.elapsed();
    let mut batch_ms = batches.into_inner().map(|b| b.1).unwrap_or_default();
    batch_ms.sort_by(f64::total_cmp);
    assert_eq!(done.acted(), runs as u64, "every run cancelled");
    println!("\n### bulk cancel, {kind}\n");
    println!(
        "| runs | plan (select + record) | carry out | runs/s (carry out) | runs/s (end to end) | batch of 200, p50 / p99 |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {runs} | {:.2} s | {:.2} s | {:.0} | {:.0} | {:.0} / {:.0} ms |",
        plan.as_secs_f64(),
        carry.as_secs_f64(),
        runs as f64 / carry.as_secs_f64(),
        runs as f64 / (plan + carry).as_secs_f64(),
        support::percentile(&batch_ms, 0.5),
        support::percentile(&batch_ms, 0.99)
    );
}
