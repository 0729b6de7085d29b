//! The event log benchmark: appends per second (1 and 16 writers, 1 and 10 events
//! per append), time to load a 1,000-event stream, and rows per second reading the
//! whole log, on Postgres and on SQLite. Prints Markdown tables for BENCHMARKS.md.
//!
//!     cargo bench --bench event_log                    # both stores, 5 s per run
//!     cargo bench --bench event_log -- --seconds 2 --only sqlite
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL; each
//! run creates and drops its own database), default postgres://postgres@127.0.0.1/postgres.
//! Compare with benches/pgbench/raw-limit.sh, which measures the same row shape
//! with no event store around it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use awl::log::{AppendRequest, EventFilter, ExpectedVersion, NewEvent, StreamRef, StreamType};
use awl::store::{EventStore, StoreOptions, TAIL_PAGE};
use serde_json::json;

mod support;
use support::{Fresh, percentile};

struct Config {
    seconds: f64,
    only: Option<String>,
    admin_url: String,
}

fn config() -> Config {
    let mut args = std::env::args().skip(1);
    let mut c = Config {
        seconds: 5.0,
        only: None,
        admin_url: support::admin_url(),
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => c.seconds = args.next().and_then(|s| s.parse().ok()).unwrap_or(5.0),
            "--only" => c.only = args.next(),
            _ => {} // cargo passes --bench
        }
    }
    c
}

/// A fresh store with the default options.
async fn fresh(kind: &str, cfg: &Config) -> Fresh {
    support::fresh(kind, &cfg.admin_url, StoreOptions::default()).await
}

fn batch(n: usize, seq: u64) -> Vec<NewEvent> {
    (0..n)
        .map(|i| {
            NewEvent::new(
                "bench.appended",
                1,
                json!({"step": "build", "attempt": 1, "output": {"ok": true}, "seq": seq, "i": i}),
            )
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// `EventStore::append`: concurrent appends are group-committed.
    GroupCommit,
    /// One `StoreTx` per append: a transaction each, serialised by the head lock.
    TransactionEach,
}

/// Events appended per second by `writers` tasks appending `size` events at a time.
async fn append_rate(
    store: &EventStore,
    writers: usize,
    size: usize,
    mode: Mode,
    secs: f64,
) -> f64 {
    let total = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut handles = Vec::new();
    for w in 0..writers {
        let (store, total) = (store.clone(), total.clone());
        handles.push(tokio::spawn(async move {
            let stream = StreamRef::new(
                StreamType::Run,
                format!("writer-{w}-{}", uuid::Uuid::new_v4()),
            );
            let mut version = 0i64;
            let mut seq = 0u64;
            while Instant::now() < deadline {
                let expected = if version == 0 {
                    ExpectedVersion::NoStream
                } else {
                    ExpectedVersion::Exactly(version)
                };
                let request = AppendRequest::new(stream.clone(), expected, batch(size, seq));
                let appended = match mode {
                    Mode::GroupCommit => store.append(request).await.expect("append"),
                    Mode::TransactionEach => {
                        let mut tx = store.begin().await.expect("begin");
                        let done = tx.append(&[request]).await.expect("append")[0];
                        tx.commit().await.expect("commit");
                        done
                    }
                };
                version = appended.stream_version;
                seq += 1;
                total.fetch_add(size as u64, Ordering::Relaxed);
            }
        }));
    }
    for h in handles {
        h.await.expect("writer");
    }
    total.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

async fn bench_backend(kind: &str, cfg: &Config) {
    println!("\n### {kind}\n");
    println!("| writers | events per append | mode | events/s |");
    println!("|---:|---:|---|---:|");
    let mut biggest: Option<Fresh> = None;
    for writers in [1usize, 16] {
        for size in [1usize, 10] {
            let fresh = fresh(kind, cfg).await;
            let rate =
                append_rate(&fresh.store, writers, size, Mode::GroupCommit, cfg.seconds).await;
            println!("| {writers} | {size} | group commit | {rate:.0} |");
            if writers == 16 && size == 10 {
                biggest = Some(fresh);
            }
        }
    }
    for (writers, size) in [(1usize, 1usize), (16, 1), (16, 10)] {
        let fresh = fresh(kind, cfg).await;
        let rate = append_rate(
            &fresh.store,
            writers,
            size,
            Mode::TransactionEach,
            cfg.seconds,
        )
        .await;
        println!("| {writers} | {size} | transaction each | {rate:.0} |");
    }

    // Load a 1,000-event stream.
    let fresh = fresh(kind, cfg).await;
    let store = &fresh.store;
    let stream = StreamRef::new(StreamType::Run, "thousand");
    for chunk in 0..10 {
        let expected = if chunk == 0 {
            ExpectedVersion::NoStream
        } else {
            ExpectedVersion::Exactly(chunk * 100)
        };
        store
            .append(AppendRequest::new(
                stream.clone(),
                expected,
                batch(100, chunk as u64),
            ))
            .await
            .expect("fill");
    }
    let mut times = Vec::new();
    for _ in 0..200 {
        let start = Instant::now();
        let events = store.read_stream(&stream).await.expect("load");
        times.push(start.elapsed().as_secs_f64() * 1e3);
        assert_eq!(events.len(), 1000);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "\nLoad a 1,000-event stream (200 loads): p50 {:.2} ms, p95 {:.2} ms, min {:.2} ms",
        percentile(&times, 0.5),
        percentile(&times, 0.95),
        times[0]
    );

    // Read the whole log.
    if let Some(fresh) = biggest {
        let store = &fresh.store;
        let head = store.head().await.expect("head");
        let start = Instant::now();
        let (mut after, mut rows) = (0i64, 0u64);
        loop {
            let (events, next) = store
                .read_page(after, TAIL_PAGE, &EventFilter::default())
                .await
                .expect("read");
            rows += events.len() as u64;
            if next == after {
                break;
            }
            after = next;
        }
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(rows as i64, head);
        println!(
            "Read the whole log ({rows} events, pages of {TAIL_PAGE}): {:.0} rows/s",
            rows as f64 / secs
        );
    }
}

#[tokio::main]
async fn main() {
    let cfg = config();
    println!("event_log benchmark: {} s per append run", cfg.seconds);
    for kind in ["postgres", "sqlite"] {
        if cfg.only.as_deref().is_none_or(|o| o == kind) {
            bench_backend(kind, &cfg).await;
        }
    }
}
