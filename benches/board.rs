//! The agent board benchmark, over real HTTP on loopback against `awl::server` with
//! auth on (agent and operator tokens):
//!
//! - dispatch latency: 10 agents wait in `wait_for_prompt`; 1,000 tasks are sent one
//!   at a time; latency runs from the start of the send request (so it includes the
//!   send's own commit) to the waiting agent's `wait_for_prompt` returning that task;
//! - full lifecycles per second: 20 agents doing wait -> ack -> complete while 4
//!   senders send 4,000 tasks; from the first send to the last completion.
//!
//! Run it:
//!
//!     cargo bench --bench board                     # Postgres and SQLite
//!     cargo bench --bench board -- --only postgres
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL; each
//! measurement creates and drops its own database), default the local server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

#[path = "support/board.rs"]
mod board_support;
mod support;
use board_support::{Client, dispatch_latency, send_tasks, setup, spawn_agents};

const LIFECYCLE_TASKS: usize = 4_000;
const LIFECYCLE_AGENTS: usize = 20;
const SENDERS: usize = 4;

async fn lifecycles_per_second(kind: &str) -> f64 {
    let setup = setup(kind, LIFECYCLE_AGENTS).await;
    let received = Arc::new(Mutex::new(HashMap::new()));
    let got_one = Arc::new(Notify::new());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let agents = spawn_agents(&setup, received.clone(), got_one, stop.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let senders = (0..SENDERS)
        .map(|_| Client::new(&setup.server, &setup.operator))
        .collect();
    send_tasks(senders, LIFECYCLE_TASKS).await;
    let store = setup.server.board.store().clone();
    let filter = awl::log::EventFilter {
        event_types: vec!["task.completed".into()],
        ..awl::log::EventFilter::default()
    };
    loop {
        let completed = store
            .read_page(0, 100_000, &filter)
            .await
            .expect("read")
            .0
            .len();
        if completed >= LIFECYCLE_TASKS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for a in agents {
        let _ = a.await;
    }
    setup.server.shutdown().await.expect("shutdown");
    LIFECYCLE_TASKS as f64 / elapsed
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut only = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--only" {
            only = args.next();
        }
    }
    println!("| store | dispatch p50 | dispatch p99 | dispatch max | full lifecycles / s |");
    println!("|---|---|---|---|---|");
    for kind in ["postgres", "sqlite"] {
        if only.as_deref().is_some_and(|o| o != kind) {
            continue;
        }
        let (p50, p99, max) = dispatch_latency(kind).await;
        let rate = lifecycles_per_second(kind).await;
        println!("| {kind} | {p50:.2} ms | {p99:.2} ms | {max:.2} ms | {rate:.0} |");
    }
}
