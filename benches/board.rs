//! The agent board benchmark, over real HTTP on loopback against `awl::server` with
//! auth on (agent and operator tokens):
//!
//! - dispatch latency: 10 agents wait in `wait_for_prompt`; 1,000 tasks are sent one
//!   at a time; latency runs from the start of the send request (so it includes the
//!   send's own commit) to the waiting agent's `wait_for_prompt` returning that task;
//! - full lifecycles per second: 20 agents doing wait -> ack -> complete while 4
//!   senders send 4,000 tasks (`--agents`, `--senders` change the load); from the
//!   first send to the last completion the agents were answered.
//!
//! Run it:
//!
//!     cargo bench --bench board                     # Postgres and SQLite
//!     cargo bench --bench board -- --only postgres
//!     cargo bench --bench board -- --only postgres --lifecycles-only --senders 16 --agents 40
//!     cargo bench --bench board -- --only postgres --lifecycles-only --tasks 40000   # a longer phase, to profile
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL; each
//! measurement creates and drops its own database), default the local server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

#[path = "support/board.rs"]
mod board_support;
mod support;
use board_support::{Client, dispatch_latency, send_tasks, setup, spawn_agents};

/// Tasks sent in the lifecycle phase unless `--tasks` says otherwise.
const LIFECYCLE_TASKS: usize = 4_000;

/// The load of the lifecycle phase: `senders` clients send `tasks` tasks one after
/// another while `agents` agents loop wait -> ack -> complete.
#[derive(Debug, Clone, Copy)]
struct Load {
    senders: usize,
    agents: usize,
    tasks: usize,
}

async fn lifecycles_per_second(kind: &str, load: Load) -> f64 {
    let setup = setup(kind, load.agents).await;
    let received = Arc::new(Mutex::new(HashMap::new()));
    let got_one = Arc::new(Notify::new());
    let completed = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let agents = spawn_agents(&setup, received, got_one, completed.clone(), stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let senders = (0..load.senders)
        .map(|_| Client::new(&setup.server, &setup.operator))
        .collect();
    send_tasks(senders, load.tasks).await;
    // Counted by the agents as each `complete` is answered (after its commit): the
    // clock stops without the measurement itself reading the store.
    while completed.load(Ordering::Relaxed) < load.tasks {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for a in agents {
        let _ = a.await;
    }
    let filter = awl::log::EventFilter {
        event_types: vec!["task.completed".into()],
        ..awl::log::EventFilter::default()
    };
    let recorded = setup
        .server
        .board
        .store()
        .read_page(0, i64::MAX, &filter)
        .await
        .expect("read")
        .0
        .len();
    assert_eq!(
        recorded, load.tasks,
        "every task's completion is in the log"
    );
    setup.server.shutdown().await.expect("shutdown");
    load.tasks as f64 / elapsed
}

fn number(value: Option<String>, flag: &str) -> usize {
    value
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{flag} takes a number"))
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut only = None;
    let mut load = Load {
        senders: 4,
        agents: 20,
        tasks: LIFECYCLE_TASKS,
    };
    let mut lifecycles_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--only" => only = args.next(),
            "--senders" => load.senders = number(args.next(), "--senders"),
            "--agents" => load.agents = number(args.next(), "--agents"),
            "--tasks" => load.tasks = number(args.next(), "--tasks"),
            "--lifecycles-only" => lifecycles_only = true,
            _ => {}
        }
    }
    println!(
        "lifecycles: {} senders, {} agents, {} tasks",
        load.senders, load.agents, load.tasks
    );
    println!("| store | dispatch p50 | dispatch p99 | dispatch max | full lifecycles / s |");
    println!("|---|---|---|---|---|");
    for kind in ["postgres", "sqlite"] {
        if only.as_deref().is_some_and(|o| o != kind) {
            continue;
        }
        let (p50, p99, max) = if lifecycles_only {
            (f64::NAN, f64::NAN, f64::NAN)
        } else {
            dispatch_latency(kind).await
        };
        let rate = lifecycles_per_second(kind, load).await;
        println!("| {kind} | {p50:.2} ms | {p99:.2} ms | {max:.2} ms | {rate:.0} |");
    }
}
