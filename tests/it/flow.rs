//! Flow control on both stores: a concurrency limit per workflow and per key held by
//! two worker processes (checked over the log: at no position do more runs hold a
//! slot of a scope than its limit), queued runs recorded and shown as QUEUED;
//! priorities ordering the claims; a rate limit held by two worker processes
//! (checked at the called side: no window holds more calls than burst and rate
//! allow), attempts held back recorded as throttled and shown as such.

use std::collections::{BTreeMap, HashMap};

use chrono::Utc;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use awl::clock::system_clock;
use awl::definitions;
use awl::executor::{Worker, WorkerConfig};
use awl::log::{EventFilter, StreamType};
use awl::runners::{Runners, RunnersConfig};
use awl::runs::{Runs, StartRun};

use crate::support::cli::Awl;
use crate::support::{Backend, TestStore, on_both_stores, wait_for};

on_both_stores!(worker_threads = 2;
    a_concurrency_key_with_two_workers_never_exceeds_its_limit,
    priorities_order_the_claims,
    a_rate_limit_holds_across_workers,
);

const LIMIT: u64 = 120;

const LIMITED: &str = r#"
name: limited
version: "1.0.0"
inputs:
  customer: { type: string, required: true }
concurrency: { limit: 3, key: inputs.customer, per_key: 2 }
steps:
  - id: work
    tool: sleep
    inputs: { seconds: 0.15 }
"#;

async fn register(
    t: &TestStore,
    yaml: &str,
    name: &str,
) -> (tempfile::TempDir, definitions::Registered) {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join(format!("{name}.awl.yaml"));
    std::fs::write(&file, yaml).expect("write");
    let registered = definitions::register_file(&t.store, &file, "test", Utc::now())
        .await
        .expect("register");
    (dir, registered)
}

async fn start(t: &TestStore, workflow: &str, inputs: Value, priority: Option<i32>) -> String {
    let Value::Object(inputs) = inputs else {
        panic!("inputs are an object")
    };
    Runs::new(t.store.clone(), system_clock())
        .start(
            StartRun {
                workflow: workflow.into(),
                inputs,
                priority,
                scope: None,
            },
            "test",
            None,
        )
        .await
        .expect("start")
        .run_id
        .to_string()
}

/// The scopes each run's start asked for, with their limits.
fn slots_of(started: &Value) -> Vec<(String, i64)> {
    started["flow"]["slots"]
        .as_array()
        .map(|slots| {
            slots
                .iter()
                .map(|s| {
                    (
                        s["scope"].as_str().unwrap_or_default().to_string(),
                        s["limit"].as_i64().unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn a_concurrency_key_with_two_workers_never_exceeds_its_limit(backend: Backend) {
    let t = TestStore::new(backend).await;
    let (dir, _) = register(&t, LIMITED, "limited").await;
    let mut runs = Vec::new();
    for (customer, n) in [("acme", 8), ("globex", 5), ("initech", 3)] {
        for _ in 0..n {
            runs.push(start(&t, "limited", json!({ "customer": customer }), None).await);
        }
    }
    // Started before any worker runs: every one of them is QUEUED.
    let awl = Awl::bounded(&t.location, LIMIT);
    let status = awl.ok(&["status", &runs[0]]).await;
    assert!(status.contains("QUEUED"), "{status}");

    let workers: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| awl.worker(dir.path().join(format!("worker-{name}.log")), &[]))
        .collect();
    let store = t.store.clone();
    let total = runs.len();
    wait_for(90, "every run to finish", async || {
        let done = crate::support::logged(&store, "run.completed").await.len();
        (done == total).then_some(())
    })
    .await;
    drop(workers);

    // Replay the log in order: slots held per scope after each event.
    let (events, _) = t
        .store
        .read_page(0, 100_000, &EventFilter::default())
        .await
        .expect("the log");
    let mut slots: HashMap<String, Vec<(String, i64)>> = HashMap::new();
    let mut holding: BTreeMap<String, i64> = BTreeMap::new();
    let mut most: BTreeMap<String, i64> = BTreeMap::new();
    let mut queued = 0;
    for e in events.iter().filter(|e| e.stream.kind == StreamType::Run) {
        let run = e.stream.id.clone();
        match e.event_type.as_str() {
            "run.started" => {
                slots.insert(run, slots_of(&e.payload));
            }
            "run.queued" => queued += 1,
            "run.admitted" => {
                for (scope, limit) in &slots[&run] {
                    let held = holding.entry(scope.clone()).or_default();
                    *held += 1;
                    assert!(
                        *held <= *limit,
                        "{scope}: {held} runs hold a slot at position {} (limit {limit})",
                        e.position
                    );
                    let top = most.entry(scope.clone()).or_default();
                    *top = (*top).max(*held);
                }
            }
            "run.completed" | "run.failed" | "run.cancelled" => {
                for (scope, _) in &slots[&run] {
                    *holding.entry(scope.clone()).or_default() -= 1;
                }
            }
            "run.step_started" => {
                assert!(
                    slots[&run].is_empty()
                        || events.iter().any(|a| a.stream.id == run
                            && a.event_type == "run.admitted"
                            && a.position < e.position),
                    "run {run} started a step before it was admitted"
                );
            }
            _ => {}
        }
    }
    // The limits were reached, so the check above could have failed.
    assert_eq!(most.get("workflow:limited"), Some(&3), "{most:?}");
    assert_eq!(most.get("workflow:limited:key:acme"), Some(&2), "{most:?}");
    assert!(queued > 0, "some runs waited, recorded as run.queued");
    assert!(holding.values().all(|n| *n == 0), "{holding:?}");
    // Every slot was given back in the database too, and nobody waits any more.
    let held = t
        .store
        .query_rows("SELECT scope, held FROM flow_scopes ORDER BY scope", &[])
        .await
        .expect("the counters");
    assert_eq!(held.len(), 4, "{held:?}");
    assert!(held.iter().all(|row| row["held"] == json!(0)), "{held:?}");
    let holders = t
        .store
        .query_rows("SELECT run_id FROM flow_holders", &[])
        .await
        .expect("the holders");
    assert!(holders.is_empty(), "{holders:?}");
    let status = awl.ok(&["status", &runs[0]]).await;
    assert!(status.contains("SUCCEEDED"), "{status}");
}

const QUICK: &str = r#"
name: quick
version: "1.0.0"
inputs:
  n: { type: integer, required: true }
steps:
  - { id: work, tool: noop, inputs: { n: "${{ inputs.n }}" } }
"#;

async fn priorities_order_the_claims(backend: Backend) {
    let t = TestStore::new(backend).await;
    let (_dir, _) = register(&t, QUICK, "quick").await;
    // Ten runs started in a shuffled order of priority, before any worker.
    let priorities = [3, -5, 9, 0, 7, 1, -2, 5, 8, 2];
    let mut by_run = HashMap::new();
    for (n, p) in priorities.iter().enumerate() {
        let run = start(&t, "quick", json!({ "n": n }), Some(*p)).await;
        by_run.insert(run, *p);
    }
    // One worker claiming one run at a time: it finishes each (pure steps) before
    // it claims the next, so the order of completions is the order of claims.
    let (stop, stop_rx) = watch::channel(false);
    let config = WorkerConfig {
        batch: 1,
        ..WorkerConfig::new("one-at-a-time")
    };
    let worker = Worker::new(
        t.store.clone(),
        Runners::new(RunnersConfig::default()),
        config,
        system_clock(),
    );
    let worker = tokio::spawn(worker.run(stop_rx));
    let store = t.store.clone();
    let completed = wait_for(60, "every run to finish", async || {
        let done = crate::support::logged(&store, "run.completed").await;
        (done.len() == priorities.len()).then_some(done)
    })
    .await;
    stop.send(true).expect("stop");
    worker.await.expect("join").expect("worker");
    let order: Vec<i32> = completed.iter().map(|e| by_run[&e.stream.id]).collect();
    let mut expected = priorities.to_vec();
    expected.sort_by(|a, b| b.cmp(a));
    assert_eq!(order, expected, "claimed highest priority first");
    // The priority is recorded in each run's start.
    let first = crate::support::logged(&t.store, "run.started").await;
    let recorded: Map<String, Value> = first
        .iter()
        .map(|e| (e.stream.id.clone(), e.payload["flow"]["priority"].clone()))
        .collect();
    for (run, p) in &by_run {
        let want = if *p == 0 { Value::Null } else { json!(p) };
        assert_eq!(recorded[run], want, "run {run}");
    }
}

/// Each call appends the time it ran (nanoseconds) to the file it is given.
const RATED: &str = r#"
name: rated
version: "1.0.0"
inputs:
  n: { type: integer, required: true }
rate_limits:
  - { name: crm, per_second: 4, burst: 2 }
steps:
  - id: call
    type: shell
    command: ["sh", "-c", "date +%s%N >> \"$0\"", "CALLS"]
    rate_limit: crm
"#;

const RATE: f64 = 4.0;
const BURST: f64 = 2.0;

async fn a_rate_limit_holds_across_workers(backend: Backend) {
    let t = TestStore::new(backend).await;
    let calls = tempfile::NamedTempFile::new().expect("calls file");
    let path = calls.path().to_str().expect("a utf-8 path");
    let (dir, _) = register(&t, &RATED.replace("CALLS", path), "rated").await;
    let total = 16;
    let mut runs = Vec::new();
    for n in 0..total {
        runs.push(start(&t, "rated", json!({ "n": n }), None).await);
    }
    let awl = Awl::bounded(&t.location, LIMIT);
    let workers: Vec<_> = ["a", "b"]
        .iter()
        .map(|name| awl.worker(dir.path().join(format!("worker-{name}.log")), &[]))
        .collect();
    // While they wait, the runs say so: some run is held back by the limit (found
    // through the library, cheaply; then `awl status` asked about the one held back
    // longest, which it still is).
    let service = Runs::new(t.store.clone(), system_clock());
    let longest = wait_for(60, "a run throttled by the limit", async || {
        let mut held = Vec::new();
        for run in &runs {
            let id = run.parse().expect("a run id");
            let (state, _) = service.get(id).await.expect("the run");
            if let Some(reason) = state
                .waiting_reason()
                .filter(|r| r.starts_with("throttled"))
            {
                held.push((reason, run.clone()));
            }
        }
        held.into_iter().max()
    })
    .await;
    let status = awl.ok(&["status", &longest.1]).await;
    assert!(
        status.contains("throttled: step call by rate:crm until") && status.contains("RUNNING"),
        "{status}"
    );
    let store = t.store.clone();
    wait_for(90, "every run to finish", async || {
        let done = crate::support::logged(&store, "run.completed").await.len();
        (done == total).then_some(())
    })
    .await;
    drop(workers);

    // At the called side: the times the calls ran, in order.
    let text = std::fs::read_to_string(calls.path()).expect("the calls");
    let mut at: Vec<f64> = text
        .lines()
        .map(|l| l.trim().parse::<u128>().expect("a time") as f64 / 1e9)
        .collect();
    at.sort_by(f64::total_cmp);
    assert_eq!(at.len(), total, "each run called once: {text}");
    // No window holds more calls than the burst and the rate allow. A call runs a
    // little after its token's time (a process starts), so its window is widened by
    // a margin for that; the spread below shows the limit held them back at all.
    const MARGIN: f64 = 0.2;
    for i in 0..at.len() {
        for j in i..at.len() {
            let calls = (j - i + 1) as f64;
            let allowed = BURST + RATE * (at[j] - at[i] + MARGIN);
            assert!(
                calls <= allowed.floor(),
                "{calls} calls within {:.3} s (calls {i}..={j}); allowed {allowed:.2}",
                at[j] - at[i]
            );
        }
    }
    let spread = at[at.len() - 1] - at[0];
    let least = (total as f64 - BURST) / RATE;
    assert!(
        spread >= least - MARGIN,
        "{total} calls in {spread:.3} s: the limit held nobody back"
    );

    // Over the log: attempts held back were throttled, not failed, and started again
    // as the same attempt holding their token.
    let throttles = crate::support::logged(&t.store, "run.step_throttled").await;
    assert!(!throttles.is_empty(), "waits over a second are recorded");
    for e in &throttles {
        assert_eq!(e.payload["limit"], json!("rate:crm"), "{}", e.payload);
        assert_eq!(e.payload["attempt"], json!(1), "{}", e.payload);
    }
    assert!(
        crate::support::logged(&t.store, "run.step_failed")
            .await
            .is_empty()
    );
    assert!(
        crate::support::logged(&t.store, "run.step_retried")
            .await
            .is_empty()
    );
    let buckets = t
        .store
        .query_rows("SELECT bucket FROM rate_buckets", &[])
        .await
        .expect("the buckets");
    assert_eq!(buckets.len(), 1, "one bucket for the limit: {buckets:?}");
    let done = awl.ok(&["status", &runs[total - 1]]).await;
    assert!(
        done.contains("SUCCEEDED") && !done.contains("throttled:"),
        "{done}"
    );
}
