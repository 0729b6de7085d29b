//! The executor benchmark's moving parts, shared with the telemetry benchmark: fresh
//! stores, workflows of ten steps, starting many runs, workers, and the steps-per-
//! second measurement, with the CPU time it took (this process and Postgres).

use std::collections::HashMap;
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
    worker_holding(store, owner, WorkerConfig::new(owner).batch)
}

/// A worker that holds at most `batch` runs at once (`awl worker --batch`).
pub fn worker_holding(store: &EventStore, owner: &str, batch: usize) -> Worker {
    let mut config = WorkerConfig::new(owner);
    config.poll = Duration::from_millis(20);
    config.batch = batch;
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

/// Steps per second, the seconds they took, and the CPU time spent meanwhile.
pub struct Throughput {
    pub rate: f64,
    pub secs: f64,
    /// `None` where /proc cannot be read (not Linux).
    pub cpu: Option<CpuUse>,
}

/// Steps per second and seconds for `runs` ten-step runs of `body` carried out by
/// `workers` workers, each with its own pool as separate processes would have, from
/// the workers' start to the last run finished, with the CPU time spent meanwhile.
/// With `projections`, the first worker's process also keeps the projections live,
/// as an `awl serve` with an in-process worker does. Each worker holds at most
/// `batch` runs at once (`awl worker --batch`; [`WorkerConfig`]'s default is 512).
pub async fn measured(
    kind: &str,
    admin_url: &str,
    runs: usize,
    workers: usize,
    body: &str,
    projections: bool,
    batch: usize,
) -> Throughput {
    let fresh = fresh(kind, admin_url).await;
    let dir = tempfile::tempdir().expect("dir");
    let registered = register(&fresh.store, &workflow_of(dir.path(), "ten", 10, body)).await;
    let ids = start_runs(&fresh.store, &registered, runs).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    let cpu_before = CpuSample::now();
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
            worker_holding(&store, &format!("bench-{w}"), batch).run(stop_rx.clone()),
        ));
    }
    while !all_finished(&fresh.store, &ids).await {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let cpu = cpu_before.zip(CpuSample::now()).map(|(a, b)| b.since(&a));
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
    Throughput {
        rate: steps / elapsed,
        secs: elapsed,
        cpu,
    }
}

/// CPU time read from /proc: this process's, each Postgres server process's, and the
/// machine's (busy and in all), in microseconds.
pub struct CpuSample {
    this: f64,
    postgres: HashMap<u32, f64>,
    busy: f64,
    all: f64,
}

/// The CPU time between two samples: this process's and Postgres's (every server
/// process, including those started in between), and the share of the machine's
/// time that was busy.
#[derive(Debug, Clone, Copy)]
pub struct CpuUse {
    pub this_us: f64,
    pub postgres_us: f64,
    pub busy: f64,
}

impl CpuSample {
    pub fn now() -> Option<Self> {
        let tick = 1e6 / clock_ticks();
        let this = process_ticks("/proc/self/stat")? * tick;
        let mut postgres = HashMap::new();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
            if comm.trim_end() == "postgres"
                && let Some(t) = process_ticks(&format!("/proc/{pid}/stat"))
            {
                postgres.insert(pid, t * tick);
            }
        }
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let cpu: Vec<f64> = stat
            .lines()
            .next()?
            .split_whitespace()
            .skip(1)
            .filter_map(|f| f.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal (guest time is in user)
        let all: f64 = cpu.iter().take(8).sum::<f64>() * tick;
        let idle = (cpu.get(3)? + cpu.get(4).unwrap_or(&0.0)) * tick;
        Some(Self {
            this,
            postgres,
            busy: all - idle,
            all,
        })
    }

    pub fn since(&self, earlier: &CpuSample) -> CpuUse {
        let postgres_us = self
            .postgres
            .iter()
            .map(|(pid, t)| t - earlier.postgres.get(pid).copied().unwrap_or(0.0))
            .filter(|d| *d > 0.0)
            .sum();
        CpuUse {
            this_us: self.this - earlier.this,
            postgres_us,
            busy: (self.busy - earlier.busy) / (self.all - earlier.all).max(1.0),
        }
    }
}

/// utime + stime of a /proc/PID/stat, in clock ticks.
fn process_ticks(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // The fields after the command name (which is in parentheses and may hold spaces).
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line: 12 and 13 after the name.
    Some(fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?)
}

fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}
