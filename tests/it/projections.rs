//! Projections on both stores: after a random workload (runs that pass, fail and wait
//! at gates approved or rejected; tasks that complete, fail, are cancelled or sent
//! back), every projection rebuilt from position 0 equals the one maintained live, row
//! for row; an event applied twice changes nothing; lag returns to zero after a burst.

use std::sync::Arc;
use std::time::Duration;

use awl::board::NewTask;
use awl::board::{Board, BoardConfig, Caller};
use awl::clock::ManualClock;
use awl::clock::system_clock;
use awl::definitions;
use awl::domain::ids::AgentId;
use awl::domain::run::Run;
use awl::domain::workspace::Capabilities;
use awl::executor::{Worker, WorkerConfig};
use awl::log::{EventFilter, StreamRef, StreamType};
use awl::projections::Projections;
use awl::runners::{Runners, RunnersConfig};
use awl::runs::{GateDecision, Runs};
use awl::store::domain_io;
use awl::store::{EventStore, FollowerLease};
use chrono::Utc;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::support::cli::Awl;
use crate::support::server::{self, Api, sse_messages};
use crate::support::{Backend, TestStore, on_both_stores, wait_for};

on_both_stores!(worker_threads = 4;
    a_rebuilt_projection_equals_the_live_one_row_for_row,
    lag_returns_to_zero_after_a_burst,
    the_views_follow_a_run_and_a_task_live,
    live_streams_resume_and_follow_the_views,
    a_new_projection_version_is_rebuilt_at_start,
    catching_up_past_full_pages_reads_ahead_and_misses_nothing,
    one_server_at_a_time_follows_into_the_projections,
    each_server_says_which_server_follows,
);

mod postgres_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_runs_folded_state_is_compressed_with_lz4() {
        super::a_runs_folded_state_is_compressed_with_lz4().await;
    }
}

/// Every view's rows, ordered by their keys.
async fn snapshot(store: &EventStore) -> Vec<(String, Vec<Map<String, Value>>)> {
    let views = [
        ("board_tasks", "task_id"),
        ("runs", "run_id"),
        ("run_steps", "run_id, step_id, attempt"),
        ("run_gates", "gate_id"),
        ("agents", "agent_id"),
        ("audit", "position"),
        ("workflow_days", "workflow, day"),
        ("workflow_durations", "workflow, day, bucket"),
        ("step_stats", "workflow, step_id"),
        ("step_failures", "workflow, step_id, error_class"),
        ("agent_stats", "agent_id"),
        ("agent_columns", "agent_id, status"),
    ];
    let mut out = Vec::new();
    for (view, key) in views {
        let rows = store
            .query_rows(&format!("SELECT * FROM {view} ORDER BY {key}"), &[])
            .await
            .unwrap();
        out.push((view.to_string(), rows));
    }
    out
}

/// A tiny deterministic generator, so a failure can be replayed.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const WORKFLOW: &str = r#"
name: mixed
version: "1.0.0"
inputs:
  mode: {type: string, required: true}
steps:
  - id: first
    type: tool
    tool: echo
    inputs: {message: "${{ inputs.mode }}"}
  - id: check
    type: conditional
    condition: "inputs.mode == 'fail'"
    if_true:
      - id: boom
        type: tool
        tool: fail
        inputs: {class: dependency, message: "it broke"}
  - id: approve
    type: gate
    message: "Ship ${{ inputs.mode }}?"
  - id: last
    type: tool
    tool: noop
"#;

async fn workload(store: &EventStore, projections: &Projections, seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mixed.awl.yaml");
    std::fs::write(&file, WORKFLOW).unwrap();
    let registered = definitions::register_file(store, &file, "test", Utc::now())
        .await
        .expect("register");
    let (stop, stop_rx) = watch::channel(false);
    let worker = Worker::new(
        store.clone(),
        Runners::new(RunnersConfig::default()),
        WorkerConfig::new("w"),
        system_clock(),
    );
    let worker = tokio::spawn(worker.run(stop_rx));
    let mut rng = Lcg(seed);

    let mut runs = Vec::new();
    for i in 0..12 {
        let mode = if rng.next(3) == 0 { "fail" } else { "ok" };
        let mut inputs = Map::new();
        inputs.insert("mode".into(), json!(mode));
        let id = Runs::new(store.clone(), system_clock())
            .start_version(&registered, inputs, "test")
            .await
            .unwrap()
            .run_id;
        runs.push(id);
        if i % 4 == 0 {
            projections.catch_up_all().await.unwrap();
        }
    }

    let board = Board::open(store.clone(), system_clock(), BoardConfig::default())
        .await
        .unwrap();
    let ops = Caller::User("ops".into());
    let agents: Vec<AgentId> = (0..3)
        .map(|i| AgentId::try_from(format!("agent-{i}")).unwrap())
        .collect();
    for a in &agents {
        board
            .register(
                a.clone(),
                Capabilities::new(["rust"]),
                None,
                &Caller::Agent(a.clone()),
            )
            .await
            .unwrap();
    }
    for i in 0..30 {
        let request = NewTask {
            prompt: format!("task {i}"),
            capabilities: Capabilities::new(["rust"]),
            review_required: rng.next(2) == 0,
            ..NewTask::default()
        };
        let (task, _) = board.send(request, &ops, None).await.unwrap();
        let id = task.task_id.to_string().parse().unwrap();
        let agent = &agents[rng.next(3) as usize];
        if rng.next(6) == 0 {
            board.cancel(id, "not needed".into(), &ops).await.unwrap();
            continue;
        }
        // The agent may get an older task sent back from review: work on what it got.
        let got = board
            .wait_for_prompt(agent, Some(Duration::from_secs(1)))
            .await
            .unwrap()
            .expect("a task");
        let id = got.task_id.to_string().parse().unwrap();
        board.ack(id, agent).await.unwrap();
        board
            .progress(id, agent, "going".into(), Some(50))
            .await
            .unwrap();
        match rng.next(4) {
            0 => {
                board
                    .fail(
                        id,
                        "no luck".into(),
                        Some("dependency".into()),
                        &Caller::Agent(agent.clone()),
                    )
                    .await
                    .unwrap();
            }
            _ if got.review_required => {
                board
                    .submit(id, agent, None, None, "done".into())
                    .await
                    .unwrap();
                if rng.next(2) == 0 {
                    board
                        .request_changes(id, "again".into(), &ops)
                        .await
                        .unwrap();
                } else {
                    board.approve(id, &ops).await.unwrap();
                    board
                        .complete(id, json!({"n": i}), &Caller::Agent(agent.clone()))
                        .await
                        .unwrap();
                }
            }
            _ => {
                board
                    .complete(id, json!({"n": i}), &Caller::Agent(agent.clone()))
                    .await
                    .unwrap();
            }
        }
        if i % 7 == 0 {
            projections.catch_up_all().await.unwrap();
        }
    }

    // Decide every gate as it opens: approve most, reject some.
    for run_id in &runs {
        let stream = StreamRef::new(StreamType::Run, run_id.to_string());
        let gate = wait_for(30, "the run to wait or end", async || {
            let (run, _) = domain_io::load::<Run>(store, &stream).await.unwrap();
            if run.is_terminal() {
                return Some(None);
            }
            run.open_gates().next().map(|g| Some(g.gate_id))
        })
        .await;
        if let Some(gate) = gate {
            let decision = if rng.next(4) == 0 {
                GateDecision::Reject {
                    comment: "not now".into(),
                }
            } else {
                GateDecision::Approve { comment: None }
            };
            Runs::new(store.clone(), system_clock())
                .decide_gate(gate, decision, "ops")
                .await
                .unwrap();
        }
    }
    for run_id in &runs {
        let stream = StreamRef::new(StreamType::Run, run_id.to_string());
        wait_for(30, "every run to end", async || {
            let (run, _) = domain_io::load::<Run>(store, &stream).await.unwrap();
            run.is_terminal().then_some(())
        })
        .await;
    }
    let _ = stop.send(true);
    worker.await.unwrap().unwrap();
}

async fn a_rebuilt_projection_equals_the_live_one_row_for_row(backend: Backend) {
    let t = TestStore::new(backend).await;
    let projections = Projections::new(t.store.clone());
    assert!(projections.prepare().await.unwrap().is_empty());
    workload(&t.store, &projections, 7).await;
    projections.catch_up_all().await.unwrap();
    let live = snapshot(&t.store).await;
    let counts: Vec<(String, usize)> = live
        .iter()
        .map(|(v, rows)| (v.clone(), rows.len()))
        .collect();
    for (view, n) in &counts {
        assert!(
            *n > 0,
            "the workload left {view} empty: {counts:?}\n{:#?}",
            live[1]
                .1
                .iter()
                .map(|r| (r["status"].clone(), r["error"].clone()))
                .collect::<Vec<_>>()
        );
    }
    // The workload reached every column and outcome it meant to.
    let statuses: std::collections::BTreeSet<String> = live[0]
        .1
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert!(
        statuses.contains("COMPLETED")
            && statuses.contains("FAILED")
            && statuses.contains("CANCELLED"),
        "{statuses:?}"
    );
    let run_statuses: std::collections::BTreeSet<String> = live[1]
        .1
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_string())
        .collect();
    assert!(
        run_statuses.contains("SUCCEEDED") && run_statuses.contains("FAILED"),
        "{run_statuses:?}"
    );

    let progress = Arc::new(std::sync::Mutex::new(Vec::new()));
    for name in projections.names() {
        let seen = progress.clone();
        projections
            .rebuild(name, &move |at, head| seen.lock().unwrap().push((at, head)))
            .await
            .unwrap();
    }
    let rebuilt = snapshot(&t.store).await;
    for ((view, a), (_, b)) in live.iter().zip(&rebuilt) {
        assert_eq!(
            a.len(),
            b.len(),
            "{view}: {} rows live, {} rebuilt",
            a.len(),
            b.len()
        );
        for (x, y) in a.iter().zip(b) {
            assert_eq!(x, y, "{view} differs after a rebuild");
        }
    }
    let status = projections.status().await.unwrap();
    assert!(
        status.iter().all(|s| s.generation == 2 && s.lag == 0),
        "{status:?}"
    );
    assert!(!progress.lock().unwrap().is_empty());
    // All of them in one pass over the log gives the same rows again.
    projections.rebuild_all(&|_, _| {}).await.unwrap();
    let in_one_pass = snapshot(&t.store).await;
    assert_eq!(in_one_pass, rebuilt, "rebuilding all in one pass differs");
    let status = projections.status().await.unwrap();
    assert!(
        status.iter().all(|s| s.generation == 3 && s.lag == 0),
        "{status:?}"
    );

    // Applying the whole log again on top changes nothing (every event twice).
    for name in projections.names() {
        let p = awl::projections::all()
            .into_iter()
            .find(|p| p.name() == name)
            .unwrap();
        let (events, _) = t
            .store
            .read_page(
                0,
                100_000,
                &EventFilter {
                    stream_types: p.stream_types(),
                    ..EventFilter::default()
                },
            )
            .await
            .unwrap();
        projections.apply_again(name, &events).await.unwrap();
    }
    let twice = snapshot(&t.store).await;
    assert_eq!(twice, rebuilt, "applying events twice changed a view");
}

async fn lag_returns_to_zero_after_a_burst(backend: Backend) {
    let t = TestStore::new(backend).await;
    let projections = Projections::new(t.store.clone());
    let (stop, stop_rx) = watch::channel(false);
    let runner = {
        let p = projections.clone();
        tokio::spawn(async move { p.run(stop_rx).await })
    };
    let board = Board::open(t.store.clone(), system_clock(), BoardConfig::default())
        .await
        .unwrap();
    let ops = Caller::User("ops".into());
    let sends: Vec<_> = (0..400)
        .map(|i| {
            let board = board.clone();
            let ops = ops.clone();
            tokio::spawn(async move {
                board
                    .send(
                        NewTask {
                            prompt: format!("burst {i}"),
                            ..NewTask::default()
                        },
                        &ops,
                        None,
                    )
                    .await
                    .unwrap()
            })
        })
        .collect();
    for s in sends {
        s.await.unwrap();
    }
    let head = t.store.head().await.unwrap();
    wait_for(30, "the projections to catch up", async || {
        let status = projections.status().await.unwrap();
        status
            .iter()
            .all(|s| s.lag == 0 && s.position >= head)
            .then_some(())
    })
    .await;
    let rows = t
        .store
        .query_rows(
            "SELECT count(*) AS n FROM board_tasks WHERE status = 'QUEUED'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows[0]["n"], 400);
    let _ = stop.send(true);
    runner.await.unwrap().unwrap();
}

const GATED: &str = r#"
name: gated
version: "1.0.0"
steps:
  - id: build
    type: tool
    tool: echo
    inputs: {message: "built"}
  - id: approve
    type: gate
    message: "Ship it?"
  - id: ship
    type: tool
    tool: noop
"#;

/// The view endpoints answer from the projections that `awl serve` keeps live: a run
/// waits in the inbox, is approved over the API, and its timeline, the runs list, the
/// board, agents, analytics and the audit trail all show it.
async fn the_views_follow_a_run_and_a_task_live(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gated.awl.yaml");
    std::fs::write(&file, GATED).unwrap();
    definitions::register_file(&t.store, &file, "test", Utc::now())
        .await
        .unwrap();
    let mut config = server::config();
    config.worker = Some(WorkerConfig::new("serve"));
    let server = server::serve_with(&t.store, config, system_clock()).await;
    let api = Api::of(&server);
    let started = api
        .post(None, "/api/v1/runs", json!({"workflow": "gated"}))
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_string();
    let gate = wait_for(30, "the gate in the inbox", async || {
        let inbox = api.fetch(None, "/api/v1/views/inbox").await;
        inbox
            .as_array()
            .and_then(|g| g.first())
            .map(|g| g["gate_id"].as_str().unwrap().to_string())
    })
    .await;
    api.post(
        None,
        "/api/v1/agents",
        json!({"agent_id": "a", "capabilities": []}),
    )
    .await;
    api.post(
        None,
        "/api/v1/tasks",
        json!({"prompt": "look at the release"}),
    )
    .await;
    api.post(None, &format!("/api/v1/gates/{gate}/approve"), json!({}))
        .await;
    let runs = wait_for(30, "the run to succeed in the runs view", async || {
        let runs = api.fetch(None, "/api/v1/views/runs").await;
        (runs["rows"][0]["status"] == "SUCCEEDED").then_some(runs)
    })
    .await;
    assert_eq!(runs["rows"][0]["run_id"], run_id.as_str());
    assert!(runs["rows"][0]["duration_ms"].as_i64().unwrap() >= 0);
    let timeline = api
        .get(None, &format!("/api/v1/views/runs/{run_id}/timeline"))
        .await;
    let steps: Vec<&str> = timeline["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_id"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["build", "approve", "ship"], "{timeline}");
    // The gate's step was in the view, started, while its gate waited in the inbox:
    // its row is written again when it ends.
    assert_eq!(timeline["steps"][1]["outcome"], "SUCCEEDED", "{timeline}");
    assert!(timeline["steps"][1]["ended_at"].is_string(), "{timeline}");
    assert_eq!(timeline["gates"][0]["decision"], "APPROVED");
    assert_eq!(timeline["gates"][0]["decided_by"], "local");
    assert!(
        timeline["steps"][0]["output_summary"]
            .as_str()
            .unwrap()
            .contains("built")
    );
    let inbox = api.get(None, "/api/v1/views/inbox").await;
    assert_eq!(
        inbox.as_array().unwrap().len(),
        0,
        "the approved gate left the inbox"
    );
    let board = wait_for(30, "the task on the board view", async || {
        let board = api.fetch(None, "/api/v1/views/board?status=QUEUED").await;
        (board["rows"].as_array().unwrap().len() == 1).then_some(board)
    })
    .await;
    assert_eq!(board["rows"][0]["prompt"], "look at the release");
    let later = (Utc::now() + chrono::Duration::hours(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let none = api
        .get(None, &format!("/api/v1/views/board?since={later}"))
        .await;
    assert_eq!(none["rows"].as_array().unwrap().len(), 0, "{none}");
    let (status, bad) = api
        .call(
            None,
            reqwest::Method::GET,
            "/api/v1/views/board?since=yesterday",
            None,
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::UNPROCESSABLE_ENTITY, "{bad}");
    assert_eq!(bad["error"]["code"], "invalid_request");
    let agents = api.get(None, "/api/v1/views/agents").await;
    assert_eq!(agents[0]["agent_id"], "a");
    assert!(agents[0]["last_seen_at"].is_string(), "{agents}");
    let stats = api.get(None, "/api/v1/views/analytics/workflows").await;
    assert_eq!(
        (
            stats[0]["workflow"].as_str(),
            stats[0]["runs"].as_i64(),
            stats[0]["success_rate"].as_f64()
        ),
        (Some("gated"), Some(1), Some(1.0)),
        "{stats}"
    );
    let steps = api
        .get(None, "/api/v1/views/analytics/steps?workflow=gated")
        .await;
    assert_eq!(steps.as_array().unwrap().len(), 3, "{steps}");
    let per_agent = api.get(None, "/api/v1/views/analytics/agents").await;
    assert!(per_agent.is_array(), "{per_agent}");
    let steps_failed = api.get(None, "/api/v1/views/analytics/steps").await;
    assert!(
        steps_failed
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["attempts"] == 1 && s["failures"] == 0),
        "{steps_failed}"
    );
    let audit = api
        .get(None, "/api/v1/views/audit?actor=local&limit=2")
        .await;
    assert_eq!(audit["rows"].as_array().unwrap().len(), 2);
    assert!(audit["next"].is_string());
    let status = api.get(None, "/api/v1/projections").await;
    let names: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "board",
            "runs",
            "agents",
            "audit",
            "learning",
            "proposals",
            "model_use",
            "chat"
        ]
    );
    server.shutdown().await.unwrap();
}

/// The log's event stream resumes after `Last-Event-ID`; a view's stream says what
/// changed once the view shows it; both end when the server stops.
async fn live_streams_resume_and_follow_the_views(backend: Backend) {
    let t = TestStore::new(backend).await;
    let server = server::serve(&t.store).await;
    let base = format!("http://{}", server.addr);
    let http = reqwest::Client::new();
    let api = Api::of(&server);
    let log = http
        .get(format!("{base}/api/v1/events/stream?after=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(log.headers()["content-type"], "text/event-stream");
    let view = http
        .get(format!("{base}/api/v1/views/board/stream"))
        .send()
        .await
        .unwrap();
    let first = api
        .post(None, "/api/v1/tasks", json!({"prompt": "one"}))
        .await;
    api.post(None, "/api/v1/tasks", json!({"prompt": "two"}))
        .await;
    let messages = sse_messages(log, 2).await;
    assert_eq!(messages[0].1, "task.queued");
    assert_eq!(messages[0].2["stream_id"], first["task_id"]);
    let first_position = messages[0].0.clone();
    // The view's message comes once the board view has the task.
    let changed = sse_messages(view, 1).await;
    assert_eq!(changed[0].1, "changed");
    let rows = t
        .store
        .query_rows(
            "SELECT task_id FROM board_tasks WHERE task_id = ?",
            &[awl::store::rows::Param::from(
                first["task_id"].as_str().unwrap(),
            )],
        )
        .await
        .unwrap();
    assert_eq!(
        rows.len(),
        1,
        "the message came before the view had the change"
    );
    // Resume after the first event: the second comes next, not the first again.
    let resumed = http
        .get(format!("{base}/api/v1/events/stream"))
        .header("last-event-id", &first_position)
        .send()
        .await
        .unwrap();
    let next = sse_messages(resumed, 1).await;
    assert_eq!(
        next[0].0.parse::<i64>().unwrap(),
        first_position.parse::<i64>().unwrap() + 1
    );
    let (status, body) = {
        let r = http
            .get(format!("{base}/api/v1/views/nothing/stream"))
            .send()
            .await
            .unwrap();
        (r.status(), r.json::<Value>().await.unwrap())
    };
    assert_eq!(
        (status.as_u16(), body["error"]["code"].as_str()),
        (404, Some("no_view"))
    );
    // An open stream does not hold up a graceful stop.
    let _open = http
        .get(format!("{base}/api/v1/events/stream"))
        .send()
        .await
        .unwrap();
    crate::support::within(
        10,
        "the server to stop with a stream open",
        server.shutdown(),
    )
    .await
    .unwrap();
}

/// A projection whose code version is newer than its tables' is rebuilt at start-up,
/// beside the live tables, and then carries on live.
async fn a_new_projection_version_is_rebuilt_at_start(backend: Backend) {
    use awl::projections::{Projection, ProjectionError, Writer};

    /// The audit projection under a newer version number.
    struct AuditV2(Arc<dyn Projection>);

    #[async_trait::async_trait]
    impl Projection for AuditV2 {
        fn name(&self) -> &'static str {
            self.0.name()
        }
        fn version(&self) -> i32 {
            self.0.version() + 1
        }
        fn ddl(&self) -> &'static str {
            self.0.ddl()
        }
        fn tables(&self) -> &'static [&'static str] {
            self.0.tables()
        }
        fn stream_types(&self) -> Vec<StreamType> {
            self.0.stream_types()
        }
        async fn apply(
            &self,
            w: &mut Writer<'_>,
            events: &[awl::log::RecordedEvent],
        ) -> Result<(), ProjectionError> {
            self.0.apply(w, events).await
        }
    }

    let t = TestStore::new(backend).await;
    let audit = || {
        awl::projections::all()
            .into_iter()
            .find(|p| p.name() == "audit")
            .unwrap()
    };
    let v1 = Projections::with(t.store.clone(), vec![audit()]);
    v1.prepare().await.unwrap();
    let board = Board::open(t.store.clone(), system_clock(), BoardConfig::default())
        .await
        .unwrap();
    for i in 0..5 {
        board
            .send(
                NewTask {
                    prompt: format!("t{i}"),
                    ..NewTask::default()
                },
                &Caller::User("ops".into()),
                None,
            )
            .await
            .unwrap();
    }
    v1.catch_up_all().await.unwrap();

    let v2 = Projections::with(t.store.clone(), vec![Arc::new(AuditV2(audit()))]);
    let (stop, stop_rx) = watch::channel(false);
    let runner = {
        let p = v2.clone();
        tokio::spawn(async move { p.run(stop_rx).await })
    };
    let status = wait_for(30, "the rebuild at start-up", async || {
        let s = v2.status().await.unwrap().remove(0);
        (s.version == s.code_version && s.generation == 2).then_some(s)
    })
    .await;
    assert_eq!(status.lag, 0);
    // Live after the swap.
    board
        .send(
            NewTask {
                prompt: "after".into(),
                ..NewTask::default()
            },
            &Caller::User("ops".into()),
            None,
        )
        .await
        .unwrap();
    let head = t.store.head().await.unwrap();
    wait_for(30, "the new generation to follow the log", async || {
        let rows = t
            .store
            .query_rows("SELECT count(*) AS n FROM audit", &[])
            .await
            .unwrap();
        (rows[0]["n"] == head).then_some(())
    })
    .await;
    let _ = stop.send(true);
    runner.await.unwrap().unwrap();
}

/// Catching up over more than a page reads each next page while the current one is
/// applied: every event reaches the projections once, none skipped (the audit trail
/// holds each position), and every checkpoint ends at the head.
async fn catching_up_past_full_pages_reads_ahead_and_misses_nothing(backend: Backend) {
    use awl::log::{AppendRequest, ExpectedVersion, NewEvent};
    let t = TestStore::new(backend).await;
    let projections = Projections::new(t.store.clone());
    projections.prepare().await.expect("prepare");
    // Schedule events: only the audit trail reads them. 7,000 events are pages of
    // 1,000, 2,000 and 4,000, each full one read ahead of the next.
    for batch in 0..70 {
        let stream = StreamRef::new(StreamType::Schedule, format!("s{batch}"));
        let events = (0..100)
            .map(|k| NewEvent::new("test.happened", 1, json!({"k": k})))
            .collect();
        t.store
            .append(AppendRequest::new(
                stream,
                ExpectedVersion::NoStream,
                events,
            ))
            .await
            .expect("append");
    }
    let head = t.store.head().await.expect("head");
    assert_eq!(head, 7_000);
    projections.catch_up_all().await.expect("catch up");
    let rows = t
        .store
        .query_rows(
            "SELECT count(*) AS n, min(position) AS lo, max(position) AS hi FROM audit",
            &[],
        )
        .await
        .expect("audit");
    assert_eq!(
        (
            rows[0]["n"].as_i64(),
            rows[0]["lo"].as_i64(),
            rows[0]["hi"].as_i64()
        ),
        (Some(7_000), Some(1), Some(7_000)),
        "{rows:?}"
    );
    for status in projections.status().await.expect("status") {
        assert_eq!(status.position, head, "{}", status.name);
    }
}

/// On Postgres a projection's large values (here a run's folded state, rewritten with
/// each batch of its events) are compressed with lz4, not the slower default pglz.
async fn a_runs_folded_state_is_compressed_with_lz4() {
    let t = TestStore::new(Backend::Postgres).await;
    let projections = Projections::new(t.store.clone());
    projections.prepare().await.expect("prepare");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.awl.yaml");
    std::fs::write(
        &file,
        r#"
name: long
version: "1.0.0"
inputs:
  text: {type: string, required: true}
steps:
  - {id: say, type: tool, tool: echo, inputs: {message: "${{ inputs.text }}"}}
"#,
    )
    .unwrap();
    let registered = definitions::register_file(&t.store, &file, "test", Utc::now())
        .await
        .expect("register");
    let mut inputs = Map::new();
    // A state of kilobytes, well past the size at which Postgres compresses a row.
    inputs.insert("text".into(), json!("the same words again. ".repeat(400)));
    let run_id = Runs::new(t.store.clone(), system_clock())
        .start_version(&registered, inputs, "test")
        .await
        .unwrap()
        .run_id;
    let (stop, stop_rx) = watch::channel(false);
    let worker = Worker::new(
        t.store.clone(),
        Runners::new(RunnersConfig::default()),
        WorkerConfig::new("w"),
        system_clock(),
    );
    let worker = tokio::spawn(worker.run(stop_rx));
    let stream = StreamRef::new(StreamType::Run, run_id.to_string());
    wait_for(30, "the run to end", async || {
        let (run, _) = domain_io::load::<Run>(&t.store, &stream).await.unwrap();
        run.is_terminal().then_some(())
    })
    .await;
    let _ = stop.send(true);
    worker.await.unwrap().unwrap();
    projections.catch_up_all().await.unwrap();
    let rows = t
        .store
        .query_rows(
            "SELECT status, pg_column_compression(state) AS method, \
                    octet_length(state) AS chars FROM runs",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["status"], "SUCCEEDED", "{rows:?}");
    assert!(rows[0]["chars"].as_i64().unwrap() > 8_000, "{rows:?}");
    assert_eq!(
        rows[0]["method"], "lz4",
        "{rows:?} (this test needs a Postgres built with lz4, as Debian's and the official images are)"
    );
}

/// Tasks in the board view.
async fn board_rows(store: &EventStore) -> i64 {
    let rows = store
        .query_rows("SELECT count(*) AS n FROM board_tasks", &[])
        .await
        .unwrap();
    rows[0]["n"].as_i64().unwrap()
}

/// Who holds the projections' lease.
async fn lease_owner(store: &EventStore) -> Option<String> {
    let rows = store
        .query_rows(
            "SELECT owner FROM follower_checkpoints WHERE name = 'projections'",
            &[],
        )
        .await
        .unwrap();
    rows.first()
        .and_then(|r| r["owner"].as_str())
        .map(str::to_string)
}

/// Servers over one database take turns following the log into the projections: none
/// follows while another server's lease holds; one takes over when that lease lapses
/// (a server that died); a second waits while the first renews, and takes over at
/// once when the first stops and gives the lease up.
async fn one_server_at_a_time_follows_into_the_projections(backend: Backend) {
    let t = TestStore::new(backend).await;
    let projections = Projections::new(t.store.clone());
    projections.prepare().await.unwrap();
    let time = ManualClock::new(Utc::now());
    let lease = |owner: &str| FollowerLease {
        name: awl::projections::lease::FOLLOWER,
        owner: owner.to_string(),
        lease: Duration::from_secs(10),
        renew: Duration::from_millis(100),
        clock: time.clock(),
    };
    let follow = |owner: &str| {
        let (stop, stop_rx) = watch::channel(false);
        let (p, lease) = (projections.clone(), lease(owner));
        (
            stop,
            tokio::spawn(async move { p.follow_leased(vec![], lease, stop_rx).await }),
        )
    };
    let board = Board::open(t.store.clone(), system_clock(), BoardConfig::default())
        .await
        .unwrap();
    let send = async |n: usize| {
        let task = NewTask {
            prompt: format!("task {n}"),
            ..NewTask::default()
        };
        let ops = Caller::User("ops".into());
        board.send(task, &ops, None).await.unwrap();
    };

    // A server that died holds the lease for a minute more.
    let now = time.now();
    let until = now + chrono::Duration::seconds(60);
    let taken = t.store.claim_follower("projections", "dead", now, until, 0);
    assert!(taken.await.unwrap());
    let (stop_a, a) = follow("a");
    send(1).await;
    // Ten tries at the lease, and a follower would have read the log at least once.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(board_rows(&t.store).await, 0, "followed without the lease");
    assert_eq!(lease_owner(&t.store).await.as_deref(), Some("dead"));
    let awl = Awl::bounded(&t.location, 60);
    let status = awl.ok(&["projections", "status"]).await;
    assert!(status.contains("followed by dead (a server;"), "{status}");

    time.advance(chrono::Duration::seconds(61));
    wait_for(10, "a to take the lapsed lease and follow", async || {
        (board_rows(&t.store).await == 1).then_some(())
    })
    .await;
    assert_eq!(lease_owner(&t.store).await.as_deref(), Some("a"));

    let (stop_b, b) = follow("b");
    send(2).await;
    wait_for(10, "a to follow the second task", async || {
        (board_rows(&t.store).await == 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        lease_owner(&t.store).await.as_deref(),
        Some("a"),
        "a renews"
    );

    stop_a.send(true).unwrap();
    a.await.unwrap().unwrap();
    send(3).await;
    // The clock has not moved: b takes over because a gave the lease up.
    wait_for(10, "b to take the lease up and follow", async || {
        (board_rows(&t.store).await == 3).then_some(())
    })
    .await;
    assert_eq!(lease_owner(&t.store).await.as_deref(), Some("b"));

    stop_b.send(true).unwrap();
    b.await.unwrap().unwrap();
    assert_eq!(lease_owner(&t.store).await, None, "b gives the lease up");
    let status = awl.ok(&["projections", "status"]).await;
    assert!(status.contains("followed by no server"), "{status}");
}

/// `GET /api/v1/projections/follower`: two servers over one store agree on which of
/// them follows, and each says whether it is that one; once it stops, the other
/// takes over and says so.
async fn each_server_says_which_server_follows(backend: Backend) {
    let t = TestStore::new(backend).await;
    let first = server::serve(&t.store).await;
    let follower = async |api: &Api| api.get(None, "/api/v1/projections/follower").await;
    let a = Api::of(&first);
    let held = wait_for(10, "the first server to take the lease", async || {
        let f = follower(&a).await;
        (f["this_server"] == true).then_some(f)
    })
    .await;
    let owner = held["owner"].as_str().expect("an owner").to_string();
    let until: chrono::DateTime<Utc> = held["lease_until"].as_str().unwrap().parse().unwrap();
    assert!(until > Utc::now(), "{held}");
    assert_eq!(lease_owner(&t.store).await.as_deref(), Some(owner.as_str()));

    let second = server::serve(&t.store).await;
    let b = Api::of(&second);
    // The second has tried the lease (it does at start) and lost it to the first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = follower(&b).await;
    assert_eq!(
        (seen["owner"].as_str(), &seen["this_server"]),
        (Some(owner.as_str()), &json!(false)),
        "{seen}"
    );

    first.shutdown().await.unwrap();
    // The first gave the lease up; the second takes it at its next try (2 s).
    let taken = wait_for(10, "the second server to take the lease over", async || {
        let f = follower(&b).await;
        (f["this_server"] == true).then_some(f)
    })
    .await;
    assert_ne!(taken["owner"].as_str(), Some(owner.as_str()), "{taken}");
    second.shutdown().await.unwrap();
    let awl = Awl::bounded(&t.location, 60);
    let status = awl.ok(&["projections", "status"]).await;
    assert!(status.contains("followed by no server"), "{status}");
}
