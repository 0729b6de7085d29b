//! The executor benchmark's moving parts, shared with the telemetry benchmark: fresh
//! stores, workflows of ten steps, starting many runs, workers, and the steps-per-
//! second measurement.

use std::path::Path;
use std::time::{Duration, Instant};

use awl::clock::system_clock;
use awl::definitions::{self, Registered};
use awl::domain::ids::RunId;
use awl::domain::run::{Run, RunStatus};
use awl::executor::{Worker, WorkerConfig};
use awl::log::StreamType;
use awl::runners::{Runners, RunnersConfig};
use awl::runs::Runs;
use awl::store::{EventStore, StoreOptions, domain_io};
use chrono::Utc;
use serde_json::Map;
use tokio::sync::watch;

use crate::support::{self, Fresh};

/// A fresh store with a pool big enough for the workers.
pub async fn fresh(kind: &str, admin_url: &str) -> Fresh {
    let options = StoreOptions {
        max_connections: 32,
        ..StoreOptions::default()
    };
    support::fresh(kind, admin_url, options).await
}

/// A workflow of `steps` steps, each `body`.
pub fn workflow_of(dir: &Path, name: &str, steps: usize, body: &str) -> std::path::PathBuf {
    let mut yaml = format!("name: {name}\nversion: \"1.0.0\"\nsteps:\n");
    for i in 0..steps {
        yaml.push_str(&format!("  - {{id: s{i}, {body}}}\n"));
    }
    let path = dir.join(format!("{name}.awl.yaml"));
    std::fs::write(&path, yaml).expect("write workflow");
    path
}

pub async fn register(store: &EventStore, path: &Path) -> Registered {
    definitions::register_file(store, path, "bench", Utc::now())
        .await
        .expect("register")
}

pub async fn start_runs(store: &EventStore, registered: &Registered, n: usize) -> Vec<RunId> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Runs::new(store.clone(), system_clock())
            .start_version(registered, Map::new(), "bench")
            .await
            .expect("start");
        ids.push(started.run_id);
    }
    ids
}

pub fn worker(store: &EventStore, owner: &str) -> Worker {
    let mut config = WorkerConfig::new(owner);
    config.poll = Duration::from_millis(20);
    Worker::new(
        store.clone(),
        Runners::new(RunnersConfig::default()),
        config,
        system_clock(),
    )
}

pub async fn all_finished(store: &EventStore, ids: &[RunId]) -> bool {
    !store.has_wakeups().await.expect("wakeups") && {
        let sample: Vec<String> = ids.iter().take(20).map(|i| i.to_string()).collect();
        let streams = store
            .read_streams(StreamType::Run, &sample)
            .await
            .expect("read");
        sample.iter().all(|id| {
            domain_io::fold::<Run>(&streams[id])
                .map(|(r, _)| r.is_terminal())
                .unwrap_or(false)
        })
    }
}

/// Steps per second and seconds for `runs` ten-step runs of `body` carried out by
/// `workers` workers, each with its own pool as separate processes would have. With
/// `projections`, the first worker's process also keeps the projections live, as an
/// `awl serve` with an in-process worker does.
pub async fn throughput(
    kind: &str,
    admin_url: &str,
    runs: usize,
    workers: usize,
    body: &str,
    projections: bool,
) -> (f64, f64) {
    let fresh = fresh(kind, admin_url).await;
    let dir = tempfile::tempdir().expect("dir");
    let registered = register(&fresh.store, &workflow_of(dir.path(), "ten", 10, body)).await;
    let ids = start_runs(&fresh.store, &registered, runs).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let started = Instant::now();
    let mut handles = Vec::new();
    let mut following = Vec::new();
    for w in 0..workers {
        // Each worker its own pool, as separate processes would have.
        let store = EventStore::open(
            &fresh.location,
            StoreOptions {
                migrate: false,
                ..StoreOptions::default()
            },
        )
        .await
        .expect("open");
        if projections && w == 0 {
            let live = awl::projections::Projections::new(store.clone());
            let stop = stop_rx.clone();
            following.push(tokio::spawn(async move { live.run(stop).await }));
        }
        handles.push(tokio::spawn(
            worker(&store, &format!("bench-{w}")).run(stop_rx.clone()),
        ));
    }
    while !all_finished(&fresh.store, &ids).await {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let _ = stop_tx.send(true);
    for h in handles {
        h.await.expect("join").expect("worker");
    }
    for f in following {
        f.await.expect("join").expect("projections");
    }
    let statuses = fresh
        .store
        .read_streams(
            StreamType::Run,
            &ids.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
        )
        .await
        .expect("read");
    let succeeded = statuses
        .values()
        .filter(|events| {
            domain_io::fold::<Run>(events)
                .map(|(r, _)| r.status() == Some(RunStatus::Succeeded))
                .unwrap_or(false)
        })
        .count();
    assert_eq!(succeeded, ids.len(), "every run succeeded");
    let steps = (ids.len() * 10) as f64;
    (steps / elapsed, elapsed)
}
