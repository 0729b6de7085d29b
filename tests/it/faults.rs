//! Faults of the database under real processes: a Postgres cluster of the test's own
//! crashed (`pg_ctl stop -m immediate`) under `awl serve` and `awl worker`; the LISTEN
//! connection cut again and again while wake-ups are due; a connection dropped after
//! the database got a `COMMIT` but before its answer came back (through a proxy).

use std::collections::{BTreeMap, HashMap};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use awl::clock::system_clock;
use awl::definitions;
use awl::log::{StreamRef, StreamType};
use awl::runs::Runs;
use awl::store::{EventStore, StoreLocation, StoreOptions};
use chrono::{DateTime, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};
use sqlx::Connection;

use crate::support::cli::Awl;
use crate::support::cluster::Cluster;
use crate::support::events::{for_step, of_type};
use crate::support::proxy::Proxy;
use crate::support::server::{Api, free_port};
use crate::support::{Backend, TestStore, on_both_stores, poll, wait_for, within};

on_both_stores!(worker_threads = 4;
    a_command_tried_again_under_its_id_is_recorded_once,
    awl_check_names_what_is_wrong_and_where,
);

const LIMIT: u64 = 90;

const STEPS: &str = r#"
name: crashy
version: "1.0.0"
steps:
  - {id: one, type: shell, command: ["sleep", "0.2"]}
  - {id: two, type: shell, command: ["sleep", "0.2"]}
  - {id: three, type: shell, command: ["sleep", "0.2"]}
  - {id: four, type: tool, tool: noop}
"#;

async fn run_status(api: &Api, run: &str) -> Option<String> {
    let (status, body) = api
        .call(None, Method::GET, &format!("/api/v1/runs/{run}"), None)
        .await;
    status
        .is_success()
        .then(|| body["status"].as_str().unwrap_or_default().to_string())
}

/// `awl serve` (with its own executor) and an `awl worker` over a cluster that is
/// killed mid-work and started again: requests while it is down get 503 quickly,
/// every run acknowledged before the crash finishes without anyone stepping in, no
/// step outcome is recorded twice, and the board follows the log again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_database_crash_loses_no_acknowledged_write() {
    let cluster = Cluster::start();
    let location = StoreLocation::Postgres(cluster.url("postgres"));
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("crashy.awl.yaml"), STEPS).expect("write the workflow");
    let awl = Awl::unbounded(&location);
    let port = free_port();
    let serve_log = std::fs::File::create(dir.path().join("serve.log")).expect("log file");
    let _serve = awl
        .command(&[
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--workflows",
            &dir.path().to_string_lossy(),
        ])
        .env("AWL_LOG", "info")
        .stdout(Stdio::null())
        .stderr(serve_log)
        .spawn()
        .expect("start awl serve");
    let api = Api::at(format!("http://127.0.0.1:{port}"));
    api.wait_healthy(30).await;
    let _worker = awl.worker(dir.path().join("worker.log"), &["--lease-seconds", "5"]);

    let mut acknowledged = Vec::new();
    for _ in 0..30 {
        acknowledged.push(api.start_run("crashy").await);
    }
    let task = api
        .ok_as(
            None,
            Method::POST,
            "/api/v1/tasks",
            Some(json!({"prompt": "before the crash", "capabilities": ["x"]})),
        )
        .await;
    let task_before = task["task_id"].as_str().expect("a task id").to_string();
    // Some runs are part-way through.
    let store = EventStore::open(&location, StoreOptions::default())
        .await
        .expect("open the store");
    wait_for(LIMIT, "some runs to make progress", async || {
        for run in &acknowledged[..5] {
            let events = store
                .read_stream(&StreamRef::new(StreamType::Run, run.clone()))
                .await
                .ok()?;
            if of_type(&events, "run.step_succeeded").next().is_some() {
                return Some(());
            }
        }
        None
    })
    .await;

    cluster.crash();
    // Answers, not hangs: a read and a write each get a 503 that says why.
    for (method, path, body) in [
        (
            Method::GET,
            format!("/api/v1/runs/{}", acknowledged[0]),
            None,
        ),
        (
            Method::POST,
            "/api/v1/runs".to_string(),
            Some(json!({"workflow": "crashy"})),
        ),
    ] {
        let (status, answer) = within(
            15,
            "an answer with the database down",
            api.call(None, method.clone(), &path, body),
        )
        .await;
        assert_eq!(
            status,
            StatusCode::SERVICE_UNAVAILABLE,
            "{method} {path} with the database down: {answer}"
        );
        assert_eq!(answer["error"]["code"], "store_unavailable", "{answer}");
    }
    let (status, _) = api.call(None, Method::GET, "/health", None).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "liveness does not depend on the database"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    cluster.start_again();

    // Everything acknowledged finishes, with no one stepping in.
    for run in &acknowledged {
        let status = poll(LIMIT, async || {
            run_status(&api, run)
                .await
                .filter(|s| matches!(s.as_str(), "SUCCEEDED" | "FAILED" | "CANCELLED"))
        })
        .await;
        if status.as_deref() != Some("SUCCEEDED") {
            let events = store
                .read_stream(&StreamRef::new(StreamType::Run, run.clone()))
                .await
                .unwrap_or_default();
            let types: Vec<String> = events
                .iter()
                .map(|e| {
                    format!(
                        "{} {}",
                        e.event_type,
                        e.payload.get("step_id").cloned().unwrap_or_default()
                    )
                })
                .collect();
            panic!(
                "run {run} ended {status:?}: {types:#?}\nwake-ups: {:?}\n--- postgres\n{}\n--- serve\n{}\n--- worker\n{}",
                store.wakeups().await,
                cluster.log(),
                std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default(),
                std::fs::read_to_string(dir.path().join("worker.log")).unwrap_or_default(),
            );
        }
    }
    for run in &acknowledged {
        let events = store
            .read_stream(&StreamRef::new(StreamType::Run, run.clone()))
            .await
            .expect("the run's events");
        for step in ["one", "two", "three", "four"] {
            assert_eq!(
                for_step(&events, "run.step_succeeded", step).count(),
                1,
                "run {run} step {step}: one outcome"
            );
        }
    }
    // The board's view follows the log again: a task sent by another process after
    // the restart shows up on the server, and the one sent before is still there.
    let sent = awl
        .ok(&["send", "after the restart", "--cap", "x", "--json"])
        .await;
    let sent: Value = serde_json::from_str(sent.trim()).expect("the task as JSON");
    let task_after = sent["task_id"].as_str().expect("a task id").to_string();
    for task in [&task_before, &task_after] {
        wait_for(30, "the server's board to show the task", async || {
            let (status, _) = api
                .call(None, Method::GET, &format!("/api/v1/tasks/{task}"), None)
                .await;
            status.is_success().then_some(())
        })
        .await;
    }
    // And a new run goes through.
    let run = api.start_run("crashy").await;
    let status = wait_for(LIMIT, "a run started after the restart", async || {
        run_status(&api, &run).await.filter(|s| s == "SUCCEEDED")
    })
    .await;
    assert_eq!(status, "SUCCEEDED");
    // The log as a whole is sound.
    assert_log_is_sound(&location, "the crash").await;
}

const TIMED: &str = r#"
name: timed
version: "1.0.0"
steps:
  - id: hold
    type: gate
    message: "nobody answers"
    timeout_seconds: 2
    on_timeout: approve
  - {id: after, type: tool, tool: noop}
"#;

/// Wake-ups are due times in the database, not notifications: with the worker's
/// LISTEN connection terminated every 200 ms, every gate's expiry still fires on time
/// (the poll fallback) and exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wake_ups_fire_on_time_with_the_listen_connection_cut() {
    let t = TestStore::new(Backend::Postgres).await;
    let StoreLocation::Postgres(url) = &t.location else {
        unreachable!()
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("timed.yaml");
    std::fs::write(&path, TIMED).expect("write");
    let registered = definitions::register_file(&t.store, &path, "test", Utc::now())
        .await
        .expect("register");
    let _worker = Awl::unbounded(&t.location).worker(dir.path().join("worker.log"), &[]);
    // Cut the worker's LISTEN connection over and over.
    let cuts = Arc::new(AtomicU64::new(0));
    let cutter = {
        let url = url.clone();
        let cuts = cuts.clone();
        tokio::spawn(async move {
            let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect");
            loop {
                let killed: Vec<bool> = sqlx::query_scalar(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                      WHERE datname = current_database() AND query ILIKE 'LISTEN%' \
                        AND pid <> pg_backend_pid()",
                )
                .fetch_all(&mut conn)
                .await
                .expect("terminate the listener");
                cuts.fetch_add(
                    killed.iter().filter(|k| **k).count() as u64,
                    Ordering::SeqCst,
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let runs = Runs::new(t.store.clone(), system_clock());
    let mut ids = Vec::new();
    for _ in 0..10 {
        let started = runs
            .start_version(&registered, Map::new(), "test")
            .await
            .expect("start");
        ids.push(started.run_id.to_string());
    }
    let mut finished: HashMap<String, Vec<awl::log::RecordedEvent>> = HashMap::new();
    for id in &ids {
        let read = async || {
            t.store
                .read_stream(&StreamRef::new(StreamType::Run, id.clone()))
                .await
                .unwrap_or_default()
        };
        let done = poll(LIMIT, async || {
            let events = read().await;
            let done = of_type(&events, "run.completed").next().is_some();
            done.then_some(events)
        })
        .await;
        let events = match done {
            Some(events) => events,
            None => panic!("run {id} did not finish: {:#?}", read().await),
        };
        finished.insert(id.clone(), events);
    }
    cutter.abort();
    let cuts = cuts.load(Ordering::SeqCst);
    // Over two seconds of waiting, cut every 200 ms and made again within 100 ms.
    assert!(cuts >= 3, "the LISTEN connection was cut only {cuts} times");
    let time = |v: &Value, field: &str| {
        v[field]
            .as_str()
            .and_then(|s| s.parse::<DateTime<Utc>>().ok())
            .unwrap_or_else(|| panic!("a time in {field}: {v}"))
    };
    let mut late: BTreeMap<String, f64> = BTreeMap::new();
    for (id, events) in &finished {
        let opened: Vec<&Value> = for_step(events, "run.gate_opened", "hold").collect();
        let expired: Vec<&Value> = of_type(events, "run.gate_expired").collect();
        assert_eq!(opened.len(), 1, "run {id}: one gate");
        assert_eq!(expired.len(), 1, "run {id}: its expiry fired once");
        let due = time(opened[0], "expires_at");
        let lateness = (time(expired[0], "at") - due).num_milliseconds() as f64 / 1000.0;
        assert!(
            lateness >= -0.05,
            "run {id}: the gate expired early ({lateness} s)"
        );
        late.insert(id.clone(), lateness);
    }
    let worst = late.values().cloned().fold(0.0, f64::max);
    eprintln!("gate expiry lateness with LISTEN cut {cuts} times: worst {worst:.3} s: {late:?}");
    // The worker polls every second when it hears nothing.
    assert!(worst < 2.0, "a wake-up was late by {worst} s: {late:?}");
    assert_log_is_sound(&t.location, "the LISTEN cuts").await;
}

/// `awl check` (log and projections) after a fault: no findings.
async fn assert_log_is_sound(location: &StoreLocation, after: &str) {
    let report = Awl::bounded(location, LIMIT).ok(&["check", "--json"]).await;
    let report: Value = serde_json::from_str(report.trim()).expect("the report");
    assert_eq!(
        report["findings"],
        json!([]),
        "awl check after {after}: {report}"
    );
}

/// A command whose connection died after the database got its `COMMIT` (the answer
/// never came back) is looked for before it is tried again, and recorded once. On
/// Postgres through a proxy that drops the line after the `COMMIT`; on both stores
/// by carrying a command out twice under one id.
async fn a_command_tried_again_under_its_id_is_recorded_once(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("crashy.yaml");
    std::fs::write(&path, STEPS).expect("write");
    let registered = definitions::register_file(&t.store, &path, "test", Utc::now())
        .await
        .expect("register");

    if let StoreLocation::Postgres(url) = &t.location {
        let (proxy, proxied) = Proxy::to_postgres(url).await;
        let store = EventStore::open(&StoreLocation::Postgres(proxied), StoreOptions::default())
            .await
            .expect("open through the proxy");
        proxy.cut_after(b"COMMIT");
        let started = Runs::new(store.clone(), system_clock())
            .start_version(&registered, Map::new(), "test")
            .await
            .expect("the start is recorded although its COMMIT's answer was lost");
        assert_eq!(
            proxy.marker_cuts.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the COMMIT's answer was dropped"
        );
        let events = t
            .store
            .read_stream(&StreamRef::new(StreamType::Run, started.run_id.to_string()))
            .await
            .expect("the run");
        assert_eq!(
            of_type(&events, "run.started").count(),
            1,
            "recorded once: {events:#?}"
        );
    }

    // Tried again under the same id: the second try finds the first's events.
    use awl::domain::Decide;
    use awl::domain::run::Run;
    use awl::store::command::Command;
    let command = awl::engine::start_command(
        &registered.workflow,
        &registered.version,
        awl::domain::ids::RunId::new(),
        Map::new(),
        None,
        Utc::now(),
    )
    .expect("a start command");
    let run_id = match &command {
        awl::domain::run::RunCommand::Start { run_id, .. } => *run_id,
        other => panic!("not a start: {other:?}"),
    };
    let stream = StreamRef::new(StreamType::Run, run_id.to_string());
    let id = uuid::Uuid::now_v7();
    let mut results = Vec::new();
    for _ in 0..2 {
        let done = Command::<Run>::new(&t.store, &stream, awl::log::Metadata::actor("test"))
            .with_id(id)
            .run(|run| run.decide(command.clone()))
            .await
            .expect("the command");
        results.push((done.appended, done.already_recorded, done.version));
    }
    assert!(!results[0].1, "the first try records it");
    assert_eq!(
        results[1],
        (results[0].0, true, results[0].2),
        "the second finds it"
    );
    let events = t.store.read_stream(&stream).await.expect("the run");
    assert_eq!(of_type(&events, "run.started").count(), 1);
    assert!(events.iter().all(|e| e.metadata.command_id == Some(id)));
    assert_log_is_sound(&t.location, "the lost commit answers").await;
}

/// `awl check` over a log with a step attempt that has two outcomes and a stream with
/// a hole: exit status 1, and each problem with its stream, position and rule.
async fn awl_check_names_what_is_wrong_and_where(backend: Backend) {
    use awl::log::{AppendRequest, ExpectedVersion, NewEvent};
    let t = TestStore::new(backend).await;
    let awl = Awl::bounded(&t.location, 60);
    let clean = awl.ok(&["check"]).await;
    assert!(clean.contains("no problems"), "{clean}");

    let at = "2026-11-24T00:00:00Z";
    let run = "01a20e6b-8945-711b-9472-ef7063836890";
    let event = |ty: &str, payload: Value| NewEvent::new(ty, 1, payload);
    let started =
        json!({"step_id": "a", "attempt": 1, "idempotency_key": "k", "timeout_at": null, "at": at});
    let succeeded = json!({"step_id": "a", "attempt": 1, "output": {}, "cost_usd": null, "tokens": null, "at": at});
    t.store
        .append(AppendRequest::new(
            StreamRef::new(StreamType::Run, run),
            ExpectedVersion::NoStream,
            vec![
                event("run.step_started", started),
                event("run.step_succeeded", succeeded.clone()),
                event("run.step_succeeded", succeeded),
            ],
        ))
        .await
        .expect("append");
    let out = awl.output(&["check"]).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!out.status.success(), "a problem fails the check: {text}");
    assert!(
        text.contains(&format!("run/{run} at position 3"))
            && text.contains("second outcome")
            && text.contains("(outcome_twice)")
            && text.contains("1 problem"),
        "{text}"
    );
    let json_out = awl.output(&["check", "--json"]).await;
    let report: Value = serde_json::from_slice(&json_out.stdout).expect("JSON");
    assert_eq!(report["events"], 3);
    assert_eq!(report["findings"][0]["rule"], "outcome_twice");
    assert_eq!(report["findings"][0]["position"], 3);

    // A task acknowledged that was never delivered.
    let task = "01a20e6b-8945-711b-9472-ef7063836892";
    let queued = json!({"task_id": task, "prompt": "p", "required_capabilities": [],
        "workspace": null, "agent_hint": null, "priority": 0, "review_required": false,
        "run_step": null, "at": at});
    t.store
        .append(AppendRequest::new(
            StreamRef::new(StreamType::Task, task),
            ExpectedVersion::NoStream,
            vec![
                event("task.queued", queued),
                event("task.acknowledged", json!({"agent_id": "a1", "at": at})),
            ],
        ))
        .await
        .expect("append");
    // The projections caught up, then a row of one removed behind their back.
    awl.ok(&["projections", "rebuild"]).await;
    let generation = t
        .store
        .query_rows(
            "SELECT generation FROM projection_state WHERE name = 'audit'",
            &[],
        )
        .await
        .expect("the audit projection's state")[0]["generation"]
        .as_i64()
        .expect("a generation");
    t.store
        .execute_sql(&format!(
            "DELETE FROM audit_g{generation} WHERE position = 2"
        ))
        .await
        .expect("delete a row");
    let json_out = awl.output(&["check", "--json"]).await;
    assert!(!json_out.status.success());
    let report: Value = serde_json::from_slice(&json_out.stdout).expect("JSON");
    let findings: Vec<(String, String, i64)> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| {
            (
                f["rule"].as_str().unwrap_or_default().to_string(),
                f["stream"].as_str().unwrap_or_default().to_string(),
                f["position"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        findings,
        vec![
            ("outcome_twice".into(), format!("run/{run}"), 3),
            ("task_transition_illegal".into(), format!("task/{task}"), 5),
            ("projection_differs".into(), "projection/audit".into(), 5),
        ],
        "{report:#}"
    );
    let differs = report["findings"][2]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        differs.contains("table audit") && differs.contains("0 rows only live, 1 only folded"),
        "{differs}"
    );
    let task_finding = report["findings"][1]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        task_finding.contains("allowed from: PENDING_ACK"),
        "{task_finding}"
    );
    // The log alone still has its two problems; the projections are not compared.
    let log_only = awl.output(&["check", "--log-only", "--json"]).await;
    let report: Value = serde_json::from_slice(&log_only.stdout).expect("JSON");
    assert_eq!(
        report["findings"].as_array().map(Vec::len),
        Some(2),
        "{report:#}"
    );
    // Rebuilt, the projection is a fold of the log again.
    awl.ok(&["projections", "rebuild", "audit"]).await;
    let report: Value =
        serde_json::from_slice(&awl.output(&["check", "--json"]).await.stdout).expect("JSON");
    assert_eq!(
        report["findings"].as_array().map(Vec::len),
        Some(2),
        "{report:#}"
    );
}
