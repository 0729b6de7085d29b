//! Schedule fire latency: many schedules due every second, fired by two schedulers
//! (as two `awl serve` processes would run them) over one store for a while. For each
//! time: from the time to its `schedule.fired` being recorded, and to its run's
//! `run.started`; and whether any time fired twice. Prints Markdown for BENCHMARKS.md.
//!
//!     cargo bench --bench schedules                       # 100 schedules, 20 s, Postgres
//!     cargo bench --bench schedules -- --schedules 500 --seconds 30 --only sqlite
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL), default
//! the local server.

use std::collections::BTreeMap;
use std::time::Duration;

use awl::clock::system_clock;
use awl::log::{EventFilter, StreamType};
use awl::schedules::{Scheduler, Schedules};
use awl::workflow::schedule::{OverlapPolicy, ScheduleSpec};

mod support;

const WORKFLOW: &str = "name: pulse\nversion: \"1.0.0\"\nsteps:\n  - {id: beat, tool: noop}\n";

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut schedules = 100usize;
    let mut seconds = 20u64;
    let mut kind = "postgres".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--schedules" => {
                schedules = args
                    .next()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(schedules)
            }
            "--seconds" => seconds = args.next().and_then(|s| s.parse().ok()).unwrap_or(seconds),
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
    let file = dir.path().join("pulse.awl.yaml");
    std::fs::write(&file, WORKFLOW).expect("write");
    awl::definitions::register_file(&store, &file, "bench", chrono::Utc::now())
        .await
        .expect("register");
    let service = Schedules::new(store.clone(), system_clock());
    let mut spec = ScheduleSpec::every("1s");
    spec.overlap = OverlapPolicy::Allow;
    for i in 0..schedules {
        service
            .declare(&format!("pulse-{i:04}"), "pulse", spec.clone(), "bench")
            .await
            .expect("declare");
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let servers: Vec<_> = (0..2)
        .map(|_| {
            let scheduler = Scheduler::new(Schedules::new(store.clone(), system_clock()));
            tokio::spawn(scheduler.run(stopped.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let _ = stop.send(true);
    for s in servers {
        let _ = s.await;
    }

    let read = |types: &[&str], stream: StreamType| EventFilter {
        stream_types: vec![stream],
        event_types: types.iter().map(|t| t.to_string()).collect(),
        ..EventFilter::default()
    };
    let fires = all(&store, &read(&["schedule.fired"], StreamType::Schedule)).await;
    let starts = all(&store, &read(&["run.started"], StreamType::Run)).await;
    let started_at: BTreeMap<String, chrono::DateTime<chrono::Utc>> = starts
        .iter()
        .map(|e| (e.stream.id.clone(), e.recorded_at))
        .collect();
    let mut per_time: BTreeMap<(String, String), usize> = BTreeMap::new();
    let (mut to_fire, mut to_start) = (Vec::new(), Vec::new());
    for e in &fires {
        let Some(due) = e.payload["due_at"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        else {
            continue;
        };
        let due = due.with_timezone(&chrono::Utc);
        *per_time
            .entry((e.stream.id.clone(), due.to_rfc3339()))
            .or_default() += 1;
        to_fire.push((e.recorded_at - due).num_microseconds().unwrap_or(0) as f64 / 1e3);
        if let Some(at) = e.payload["run_id"].as_str().and_then(|r| started_at.get(r)) {
            to_start.push((*at - due).num_microseconds().unwrap_or(0) as f64 / 1e3);
        }
    }
    let twice = per_time.values().filter(|n| **n > 1).count();
    to_fire.sort_by(f64::total_cmp);
    to_start.sort_by(f64::total_cmp);
    println!("\n### schedule fire latency, {kind}\n");
    println!(
        "| schedules (every 1 s) | servers | seconds | times fired | fired twice | time to fire p50 / p99 / max | time to run started p50 / p99 / max |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {schedules} | 2 | {seconds} | {} | {twice} | {:.1} / {:.1} / {:.1} ms | {:.1} / {:.1} / {:.1} ms |",
        to_fire.len(),
        support::percentile(&to_fire, 0.5),
        support::percentile(&to_fire, 0.99),
        to_fire.last().copied().unwrap_or(0.0),
        support::percentile(&to_start, 0.5),
        support::percentile(&to_start, 0.99),
        to_start.last().copied().unwrap_or(0.0),
    );
}

async fn all(store: &awl::store::EventStore, filter: &EventFilter) -> Vec<awl::log::RecordedEvent> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let (events, next) = store.read_page(after, 10_000, filter).await.expect("read");
        out.extend(events);
        if next <= after {
            return out;
        }
        after = next;
    }
}
