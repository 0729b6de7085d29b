//! Flow control on both stores: a concurrency limit per workflow and per key held by
//! two worker processes (checked over the log: at no position do more runs hold a
//! slot of a scope than its limit), queued runs recorded and shown as QUEUED, and
//! priorities ordering the claims.

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
