//! The agent board through the real HTTP server (`awl::server::start` on a free port)
//! on both stores: the whole lifecycle over REST, dispatch of 500 tasks to 20 agents,
//! and of a backlog to agents of two servers (processes) taking from it at once,
//! strict age order alone and spread picks once a reservation lost to another process,
//! requeues on an injected clock, illegal transitions, every route against every
//! role, bad bodies, and a workflow's agent step done by an agent over HTTP.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awl::auth::{Permission, Role, create_token};
use awl::board::NewTask;
use awl::board::{Board, BoardConfig, Caller};
use awl::clock::{ManualClock, system_clock};
use awl::domain::ids::AgentId;
use awl::domain::task::RequeueReason;
use awl::domain::workspace::Capabilities;
use awl::executor::WorkerConfig;
use awl::log::{EventFilter, StreamType};
use awl::runners::{Runners, RunnersConfig};
use awl::server::{self, ServeConfig};
use awl::store::EventStore;
use chrono::Utc;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::server::{Api, config, serve_with, tokens};
use crate::support::{Backend, TestStore, on_both_stores, within};

on_both_stores!(worker_threads = 4;
    the_whole_lifecycle_over_rest,
    a_waiting_agent_gets_a_task_the_moment_it_is_sent,
    twenty_agents_and_500_tasks_each_task_assigned_once_to_a_capable_agent,
    two_servers_busy_agents_and_a_backlog_each_task_assigned_once,
    a_board_spreads_its_picks_once_a_reservation_lost_to_another_process,
    unacked_and_abandoned_tasks_are_requeued_on_the_injected_clock,
    illegal_transitions_are_409_and_append_nothing,
    every_route_against_every_role,
    bad_bodies_are_answered_4xx,
    a_workflow_agent_step_is_done_by_an_agent_over_http,
);

// ---------------------------------------------------------------- fixtures

async fn task_events(store: &EventStore, event_type: &str) -> Vec<awl::log::RecordedEvent> {
    let filter = EventFilter {
        stream_types: vec![StreamType::Task],
        event_types: vec![event_type.to_string()],
        ..EventFilter::default()
    };
    let (events, _) = store.read_page(0, 100_000, &filter).await.unwrap();
    events
}

// ---------------------------------------------------------------- 1. the lifecycle

async fn the_whole_lifecycle_over_rest(backend: Backend) {
    let t = TestStore::new(backend).await;
    let tk = tokens(&t.store, &["coder-1", "coder-2"]).await;
    let server = serve_with(&t.store, config(), system_clock()).await;
    let api = Api::of(&server);
    let (c1, c2) = (&tk.agents["coder-1"], &tk.agents["coder-2"]);

    for (token, name) in [(c1, "coder-1"), (c2, "coder-2")] {
        let agent = api
            .ok(token, Method::POST, "/api/v1/agents", json!({"capabilities": ["rust", "db"], "workspace": {"repository": "org/app", "branch": "main"}}))
            .await;
        assert_eq!(
            (agent["agent_id"].as_str(), agent["status"].as_str()),
            (Some(name), Some("ACTIVE"))
        );
    }
    let task = api
        .ok(&tk.operator, Method::POST, "/api/v1/tasks", json!({"prompt": "add an index", "capabilities": ["rust"], "workspace": {"repository": "org/app"}, "review_required": true}))
        .await;
    let id = task["task_id"].as_str().unwrap().to_string();
    assert_eq!(task["status"], "QUEUED");

    let got = api
        .ok(
            c1,
            Method::POST,
            "/api/v1/agents/coder-1/wait",
            json!({"timeout_seconds": 5}),
        )
        .await;
    assert_eq!(got["task"]["task_id"], id.as_str());
    assert_eq!(got["task"]["status"], "PENDING_ACK");
    assert_eq!(got["task"]["assignee"], "coder-1");
    let path = |what: &str| format!("/api/v1/tasks/{id}/{what}");
    api.ok(c1, Method::POST, &path("ack"), json!({})).await;
    api.ok(
        c1,
        Method::POST,
        &path("progress"),
        json!({"message": "reading the schema", "percent": 10}),
    )
    .await;
    api.ok(c1, Method::POST, &path("tool-calls"), json!({"name": "grep", "parameters": {"pattern": "CREATE INDEX"}, "duration_ms": 12, "success": true})).await;
    let blocked = api
        .ok(
            c1,
            Method::POST,
            &path("questions"),
            json!({"question": "which column?"}),
        )
        .await;
    assert_eq!(blocked["status"], "BLOCKED");
    assert_eq!(blocked["open_question"]["question"], "which column?");
    // The agent reads its own task while blocked; the viewer reads it too.
    let (status, _) = api
        .call(Some(c1), Method::GET, &format!("/api/v1/tasks/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = api
        .call(Some(c2), Method::GET, &format!("/api/v1/tasks/{id}"), None)
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "an agent reads only its own tasks"
    );
    let answered = api
        .ok(
            &tk.operator,
            Method::POST,
            &path("answer"),
            json!({"answer": "created_at"}),
        )
        .await;
    assert_eq!(answered["status"], "IN_PROGRESS");
    let review = api
        .ok(
            c1,
            Method::POST,
            &path("submit"),
            json!({"branch": "idx", "commit": "abc123", "summary": "added the index"}),
        )
        .await;
    assert_eq!(review["status"], "IN_REVIEW");
    // A review-required task cannot skip the review.
    let (status, body) = api
        .call(
            Some(c1),
            Method::POST,
            &path("complete"),
            Some(json!({"result": {}})),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("illegal_transition")),
        "{body}"
    );
    let back = api
        .ok(
            &tk.operator,
            Method::POST,
            &path("request-changes"),
            json!({"feedback": "use a partial index"}),
        )
        .await;
    assert_eq!(back["status"], "QUEUED");

    // The next agent to pick it up sees the feedback and the earlier submission.
    let got = api
        .ok(
            c2,
            Method::POST,
            "/api/v1/agents/coder-2/wait",
            json!({"timeout_seconds": 5}),
        )
        .await;
    assert_eq!(got["task"]["task_id"], id.as_str());
    assert_eq!(
        got["task"]["feedback"][0]["feedback"],
        "use a partial index"
    );
    assert_eq!(got["task"]["submission"]["commit"], "abc123");
    assert_eq!(got["task"]["attempts"], 2);
    api.ok(c2, Method::POST, &path("ack"), json!({})).await;
    api.ok(
        c2,
        Method::POST,
        &path("submit"),
        json!({"summary": "partial index"}),
    )
    .await;
    let approved = api
        .ok(&tk.operator, Method::POST, &path("approve"), json!({}))
        .await;
    assert_eq!(approved["status"], "APPROVED");
    let done = api
        .ok(
            c2,
            Method::POST,
            &path("complete"),
            json!({"result": {"pr": 42}}),
        )
        .await;
    assert_eq!(done["status"], "COMPLETED");
    assert_eq!(done["result"]["pr"], 42);

    let history = api
        .ok(&tk.viewer, Method::GET, &path("events"), Value::Null)
        .await;
    let types: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "task.queued",
            "task.assigned",
            "task.delivered",
            "task.acknowledged",
            "task.progress_reported",
            "task.tool_call_reported",
            "task.question_asked",
            "task.question_answered",
            "task.submitted_for_review",
            "task.changes_requested",
            "task.assigned",
            "task.delivered",
            "task.acknowledged",
            "task.submitted_for_review",
            "task.approved",
            "task.completed",
        ]
    );
    assert_eq!(history[0]["actor"], "ops");
    assert_eq!(history[1]["actor"], "agent:coder-1");
    let board = api
        .ok(
            &tk.viewer,
            Method::GET,
            "/api/v1/tasks?status=COMPLETED",
            Value::Null,
        )
        .await;
    assert_eq!(board["tasks"].as_array().unwrap().len(), 1);
    // The analytics projection saw who did what: coder-1's work was sent back once,
    // coder-2 finished it; both spent time in the columns they held the task in.
    let stats = crate::support::wait_for(20, "the agent analytics", async || {
        let stats = api
            .ok(
                &tk.viewer,
                Method::GET,
                "/api/v1/views/analytics/agents",
                Value::Null,
            )
            .await;
        (stats.as_array().map(Vec::len) == Some(2) && stats[1]["tasks_done"] == 1).then_some(stats)
    })
    .await;
    assert_eq!(
        (
            stats[0]["agent_id"].as_str(),
            stats[0]["review_round_trips"].as_i64(),
            stats[0]["tasks_done"].as_i64()
        ),
        (Some("coder-1"), Some(1), Some(0)),
        "{stats}"
    );
    for column in ["PENDING_ACK", "IN_PROGRESS", "BLOCKED", "IN_REVIEW"] {
        assert!(
            stats[0]["time_in_column_ms"][column].is_i64(),
            "coder-1 held the task in {column}: {stats}"
        );
    }
    assert!(
        stats[1]["time_in_column_ms"]["APPROVED"].is_i64(),
        "{stats}"
    );
    server.shutdown().await.unwrap();
}

// ---------------------------------------------------------------- 2. the long poll

async fn a_waiting_agent_gets_a_task_the_moment_it_is_sent(backend: Backend) {
    let t = TestStore::new(backend).await;
    let tk = tokens(&t.store, &["a"]).await;
    let server = serve_with(&t.store, config(), system_clock()).await;
    let api = Arc::new(Api::of(&server));
    let agent = tk.agents["a"].clone();
    api.ok(
        &agent,
        Method::POST,
        "/api/v1/agents",
        json!({"capabilities": ["go"]}),
    )
    .await;

    // Nothing queued: the wait ends empty at its timeout.
    let empty = api
        .ok(
            &agent,
            Method::POST,
            "/api/v1/agents/a/wait",
            json!({"timeout_seconds": 0.2}),
        )
        .await;
    assert_eq!(empty["task"], Value::Null);

    let waiting = {
        let api = api.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            api.ok(
                &agent,
                Method::POST,
                "/api/v1/agents/a/wait",
                json!({"timeout_seconds": 30}),
            )
            .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A task the agent cannot do does not wake it.
    api.ok(
        &tk.operator,
        Method::POST,
        "/api/v1/tasks",
        json!({"prompt": "rust work", "capabilities": ["rust"]}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "the agent was woken for a task it cannot do"
    );
    let sent = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/tasks",
            json!({"prompt": "go work", "capabilities": ["go"]}),
        )
        .await;
    // Long before the 30 s timeout: the send woke the waiter.
    let got = within(10, "the waiting agent", waiting).await.unwrap();
    assert_eq!(got["task"]["task_id"], sent["task_id"]);
    assert!(got["waited_seconds"].as_f64().unwrap() < 20.0);
    server.shutdown().await.unwrap();
}

// ---------------------------------------------------------------- 3. 20 agents, 500 tasks

async fn twenty_agents_and_500_tasks_each_task_assigned_once_to_a_capable_agent(backend: Backend) {
    let t = TestStore::new(backend).await;
    let caps = ["rust", "python", "go", "db", "ui"];
    // Agent i offers capabilities by the bits of i (never none), so sets differ.
    let agent_caps: BTreeMap<String, Vec<&str>> = (0..20)
        .map(|i| {
            let bits = (i % 31) + 1;
            let set: Vec<&str> = caps
                .iter()
                .enumerate()
                .filter(|(b, _)| bits & (1 << b) != 0)
                .map(|(_, c)| *c)
                .collect();
            (format!("agent-{i:02}"), set)
        })
        .collect();
    let names: Vec<&str> = agent_caps.keys().map(String::as_str).collect();
    let tk = tokens(&t.store, &names).await;
    let server = serve_with(&t.store, config(), system_clock()).await;
    let api = Arc::new(Api::of(&server));
    for (name, set) in &agent_caps {
        api.ok(
            &tk.agents[name],
            Method::POST,
            "/api/v1/agents",
            json!({"capabilities": set}),
        )
        .await;
    }
    // Tasks need one or two capabilities, each set offered by at least one agent.
    let offered: Vec<BTreeSet<&str>> = agent_caps
        .values()
        .map(|s| s.iter().copied().collect())
        .collect();
    let mut needs = Vec::new();
    let mut k = 0usize;
    while needs.len() < 500 {
        let a = caps[k % 5];
        let b = caps[(k / 5) % 5];
        k += 1;
        let set: BTreeSet<&str> = [a, b].into_iter().collect();
        if offered.iter().any(|o| set.is_subset(o)) {
            needs.push(set);
        }
    }
    let done = Arc::new(Mutex::new(0usize));
    let mut workers = Vec::new();
    for name in agent_caps.keys() {
        let token = tk.agents[name].clone();
        workers.push(work_tasks(
            api.clone(),
            token,
            name.clone(),
            done.clone(),
            500,
            0.5,
        ));
    }
    let mut sent = HashMap::new();
    for (i, need) in needs.iter().enumerate() {
        let task = api
            .ok(
                &tk.operator,
                Method::POST,
                "/api/v1/tasks",
                json!({"prompt": format!("task {i}"), "capabilities": need}),
            )
            .await;
        sent.insert(task["task_id"].as_str().unwrap().to_string(), need.clone());
    }
    for w in workers {
        within(120, "the agents to finish 500 tasks", w)
            .await
            .unwrap();
    }
    // The log: every task assigned exactly once, to an agent that covers its needs.
    let assigned = task_events(&t.store, "task.assigned").await;
    let mut per_task: HashMap<String, Vec<String>> = HashMap::new();
    for e in &assigned {
        per_task
            .entry(e.stream.id.clone())
            .or_default()
            .push(e.payload["agent_id"].as_str().unwrap().to_string());
    }
    assert_eq!(per_task.len(), 500, "every task was assigned");
    for (task, agents) in &per_task {
        assert_eq!(
            agents.len(),
            1,
            "task {task} was assigned {} times: {agents:?}",
            agents.len()
        );
        let need = &sent[task];
        let offer: BTreeSet<&str> = agent_caps[&agents[0]].iter().copied().collect();
        assert!(
            need.is_subset(&offer),
            "task {task} needs {need:?} but went to {} offering {offer:?}",
            agents[0]
        );
    }
    assert_eq!(task_events(&t.store, "task.completed").await.len(), 500);
    // The board pages through all 500, oldest first, each once.
    let mut seen = Vec::new();
    let mut path = "/api/v1/tasks?limit=128&status=COMPLETED".to_string();
    loop {
        let page = api.ok(&tk.viewer, Method::GET, &path, Value::Null).await;
        seen.extend(
            page["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["task_id"].as_str().unwrap().to_string()),
        );
        match page["next"].as_str() {
            Some(next) => path = format!("/api/v1/tasks?limit=128&status=COMPLETED&after={next}"),
            None => break,
        }
    }
    assert_eq!(seen.len(), 500);
    assert_eq!(seen.iter().collect::<BTreeSet<_>>().len(), 500);
    server.shutdown().await.unwrap();
}

/// Two servers, each with a store of its own (as two processes), ten agents on each,
/// and tasks sent faster than the agents take them: the agents of both reach into the
/// same backlog at once, their reservations race (those that lose make their server
/// spread its waiters' picks), and still every task is assigned once and completed.
async fn two_servers_busy_agents_and_a_backlog_each_task_assigned_once(backend: Backend) {
    const TASKS: usize = 300;
    let t = TestStore::new(backend).await;
    let names: Vec<String> = (0..20).map(|i| format!("agent-{i:02}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let tk = tokens(&t.store, &name_refs).await;
    let other = EventStore::open(
        &t.location,
        awl::store::StoreOptions {
            migrate: false,
            ..awl::store::StoreOptions::default()
        },
    )
    .await
    .unwrap();
    let first = serve_with(&t.store, config(), system_clock()).await;
    let second = serve_with(&other, config(), system_clock()).await;
    let apis = [Arc::new(Api::of(&first)), Arc::new(Api::of(&second))];
    for (i, name) in names.iter().enumerate() {
        apis[i % 2]
            .ok(
                &tk.agents[name],
                Method::POST,
                "/api/v1/agents",
                json!({"capabilities": ["rust"]}),
            )
            .await;
    }
    let done = Arc::new(Mutex::new(0usize));
    let mut workers = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let (api, token) = (apis[i % 2].clone(), tk.agents[name].clone());
        workers.push(work_tasks(
            api,
            token,
            name.clone(),
            done.clone(),
            TASKS,
            0.2,
        ));
    }
    // Eight senders, half on each server, none waiting for the agents.
    let senders: Vec<_> = (0..8)
        .map(|s| {
            let (api, operator) = (apis[s % 2].clone(), tk.operator.clone());
            tokio::spawn(async move {
                for i in 0..TASKS / 8 + usize::from(s < TASKS % 8) {
                    let body = json!({"prompt": format!("{s}-{i}"), "capabilities": ["rust"]});
                    api.ok(&operator, Method::POST, "/api/v1/tasks", body).await;
                }
            })
        })
        .collect();
    for s in senders {
        s.await.unwrap();
    }
    for w in workers {
        within(120, "the agents to finish the tasks", w)
            .await
            .unwrap();
    }
    let mut assigned: HashMap<String, usize> = HashMap::new();
    for e in task_events(&t.store, "task.assigned").await {
        *assigned.entry(e.stream.id.clone()).or_default() += 1;
    }
    assert_eq!(assigned.len(), TASKS, "every task was assigned");
    assert!(
        assigned.values().all(|&n| n == 1),
        "a task assigned twice: {:?}",
        assigned.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
    assert_eq!(task_events(&t.store, "task.completed").await.len(), TASKS);
    first.shutdown().await.unwrap();
    second.shutdown().await.unwrap();
}

/// One process alone hands out queued tasks oldest first. A second process, whose
/// view is behind (it does not follow the log here), loses its first reservation to
/// the first's; from then on its waiters pick at random among the best queued tasks
/// instead of all reaching for the oldest.
async fn a_board_spreads_its_picks_once_a_reservation_lost_to_another_process(backend: Backend) {
    let t = TestStore::new(backend).await;
    let first = Board::open(t.store.clone(), system_clock(), BoardConfig::default())
        .await
        .unwrap();
    let agents: Vec<AgentId> = (0..10)
        .map(|i| AgentId::try_from(format!("x{i}").as_str()).unwrap())
        .collect();
    for agent in &agents {
        let by = Caller::Agent(agent.clone());
        let caps = Capabilities::new(["rust"]);
        first
            .register(agent.clone(), caps, None, &by)
            .await
            .unwrap();
    }
    let ops = Caller::User("ops".into());
    let mut sent = Vec::new();
    for i in 0..40 {
        let new = NewTask {
            prompt: format!("task {i}"),
            capabilities: Capabilities::new(["rust"]),
            ..NewTask::default()
        };
        let (task, _) = first.send(new, &ops, None).await.unwrap();
        sent.push(task.task_id.to_string());
    }
    let other = EventStore::open(
        &t.location,
        awl::store::StoreOptions {
            migrate: false,
            ..awl::store::StoreOptions::default()
        },
    )
    .await
    .unwrap();
    // Opened now, the second sees all 40 queued, and learns nothing after.
    let second = Board::open(other, system_clock(), BoardConfig::default())
        .await
        .unwrap();
    let wait = async |board: &Board, agent: &AgentId| {
        let got = board
            .wait_for_prompt(agent, Some(Duration::from_secs(5)))
            .await
            .unwrap()
            .expect("a task");
        got.task_id.to_string()
    };
    let mut alone = Vec::new();
    for agent in &agents[..4] {
        alone.push(wait(&first, agent).await);
    }
    assert_eq!(alone, sent[..4], "one process alone: oldest first");
    // The second reaches for the oldest it knows of, loses (the first took it), and
    // spreads from then on.
    let mut spread = Vec::new();
    for agent in &agents[4..] {
        spread.push(wait(&second, agent).await);
    }
    assert!(
        spread.iter().all(|t| sent[4..].contains(t)),
        "only tasks still queued: {spread:?}"
    );
    assert_eq!(
        spread.iter().collect::<BTreeSet<_>>().len(),
        spread.len(),
        "each once"
    );
    assert_ne!(
        spread,
        sent[4..10],
        "after a lost reservation, picks are spread, not oldest first"
    );
}

// ---------------------------------------------------------------- 4. requeues on a clock

async fn unacked_and_abandoned_tasks_are_requeued_on_the_injected_clock(backend: Backend) {
    let t = TestStore::new(backend).await;
    let start = Utc::now();
    let now = ManualClock::new(start);
    let config = BoardConfig {
        ack_timeout: chrono::Duration::seconds(30),
        lost_after: chrono::Duration::minutes(5),
        ..BoardConfig::default()
    };
    let board = Board::open(t.store.clone(), now.clock(), config)
        .await
        .unwrap();
    let ops = Caller::User("ops".into());
    let (a, b) = (
        AgentId::try_from("a").unwrap(),
        AgentId::try_from("b").unwrap(),
    );
    for agent in [&a, &b] {
        board
            .register(
                agent.clone(),
                Capabilities::new(["rust"]),
                None,
                &Caller::Agent(agent.clone()),
            )
            .await
            .unwrap();
    }
    let (task, _) = board
        .send(
            NewTask {
                prompt: "p".into(),
                capabilities: Capabilities::new(["rust"]),
                ..NewTask::default()
            },
            &ops,
            None,
        )
        .await
        .unwrap();
    let id = task.task_id.to_string().parse().unwrap();
    let got = board
        .wait_for_prompt(&a, Some(Duration::from_secs(1)))
        .await
        .unwrap()
        .expect("a task for a");
    assert_eq!(got.status, "PENDING_ACK");

    // Not yet due: nothing moves.
    now.set(start + chrono::Duration::seconds(29));
    assert!(
        board
            .sweep(start + chrono::Duration::seconds(29))
            .await
            .unwrap()
            .is_empty()
    );
    // The ack deadline passes: back to the queue, and b gets it.
    let later = start + chrono::Duration::seconds(31);
    now.set(later);
    assert_eq!(
        board.sweep(later).await.unwrap(),
        vec![(id, RequeueReason::AckTimeout)]
    );
    assert_eq!(board.task(id).await.unwrap().status, "QUEUED");
    let got = board
        .wait_for_prompt(&b, Some(Duration::from_secs(1)))
        .await
        .unwrap()
        .expect("a task for b");
    assert_eq!(got.assignee.as_deref(), Some("b"));
    board.ack(id, &b).await.unwrap();
    // The late ack of a is refused: the task is b's now.
    assert!(board.ack(id, &a).await.is_err());

    // b goes silent for longer than lost_after: the task is requeued for someone else.
    let silent = later + chrono::Duration::minutes(4);
    now.set(silent);
    assert!(
        board.sweep(silent).await.unwrap().is_empty(),
        "4 minutes of silence is within lost_after"
    );
    let gone = later + chrono::Duration::minutes(6);
    now.set(gone);
    assert_eq!(
        board.sweep(gone).await.unwrap(),
        vec![(id, RequeueReason::AgentLost)]
    );
    let requeued = task_events(&t.store, "task.requeued").await;
    let reasons: Vec<&str> = requeued
        .iter()
        .map(|e| e.payload["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons, ["ack_timeout", "agent_lost"]);
    assert_eq!(requeued[1].payload["previous_agent"], "b");
    let got = board
        .wait_for_prompt(&a, Some(Duration::from_secs(1)))
        .await
        .unwrap()
        .expect("requeued for a");
    assert_eq!(got.task_id, task.task_id);

    // Two servers: a calls in on the other one only. This server has not seen a for
    // longer than lost_after, but the shared presence table has, so the task stays.
    board.ack(id, &a).await.unwrap();
    let other_now = ManualClock::new(gone);
    let other_clock = other_now.clock();
    let other = Board::open(t.store.clone(), other_clock, BoardConfig::default())
        .await
        .unwrap();
    let called = gone + chrono::Duration::minutes(4);
    other_now.set(called);
    other.touch(&a);
    crate::support::wait_for(10, "the presence row", async || {
        let seen = t.store.presence(&["a".to_string()]).await.unwrap();
        (seen.get("a").map(|t| t.timestamp_micros()) == Some(called.timestamp_micros()))
            .then_some(())
    })
    .await;
    let check = gone + chrono::Duration::minutes(6);
    now.set(check);
    assert!(
        board.sweep(check).await.unwrap().is_empty(),
        "a called another server 2 minutes ago: not lost"
    );
    let much_later = called + chrono::Duration::minutes(6);
    now.set(much_later);
    assert_eq!(
        board.sweep(much_later).await.unwrap(),
        vec![(id, RequeueReason::AgentLost)]
    );
}

// ---------------------------------------------------------------- 5. illegal transitions

async fn illegal_transitions_are_409_and_append_nothing(backend: Backend) {
    let t = TestStore::new(backend).await;
    let tk = tokens(&t.store, &["a", "b"]).await;
    let server = serve_with(&t.store, config(), system_clock()).await;
    let api = Api::of(&server);
    for name in ["a", "b"] {
        api.ok(&tk.agents[name], Method::POST, "/api/v1/agents", json!({}))
            .await;
    }
    let task = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/tasks",
            json!({"prompt": "p"}),
        )
        .await;
    let id = task["task_id"].as_str().unwrap();
    let head = t.store.head().await.unwrap();
    let refusals = [
        (
            &tk.agents["a"],
            format!("/api/v1/tasks/{id}/ack"),
            json!({}),
            StatusCode::CONFLICT,
            "illegal_transition",
        ),
        (
            &tk.agents["a"],
            format!("/api/v1/tasks/{id}/submit"),
            json!({"summary": "s"}),
            StatusCode::CONFLICT,
            "illegal_transition",
        ),
        (
            &tk.operator,
            format!("/api/v1/tasks/{id}/approve"),
            json!({}),
            StatusCode::CONFLICT,
            "illegal_transition",
        ),
        (
            &tk.operator,
            format!("/api/v1/tasks/{id}/answer"),
            json!({"answer": "x"}),
            StatusCode::CONFLICT,
            "illegal_transition",
        ),
        (
            &tk.agents["a"],
            format!("/api/v1/tasks/{id}/complete"),
            json!({}),
            StatusCode::CONFLICT,
            "illegal_transition",
        ),
        (
            &tk.agents["a"],
            format!("/api/v1/tasks/{id}/progress"),
            json!({"message": "m", "percent": 150}),
            StatusCode::CONFLICT,
            "illegal_transition",
        ),
        (
            &tk.agents["a"],
            format!("/api/v1/tasks/{}/ack", uuid::Uuid::now_v7()),
            json!({}),
            StatusCode::NOT_FOUND,
            "task_not_found",
        ),
    ];
    for (token, path, body, status, code) in &refusals {
        let (got, answer) = api
            .call(Some(token), Method::POST, path, Some(body.clone()))
            .await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (*status, Some(*code)),
            "POST {path}: {answer}"
        );
    }
    // Text the log cannot hold (a NUL character) is refused, saying where.
    let refused_nul = async |token: &str, path: &str, body: Value, at: &str| {
        let (got, answer) = api.call(Some(token), Method::POST, path, Some(body)).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_append")),
            "POST {path}: {answer}"
        );
        let said = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(
            said.contains("NUL") && said.contains(at),
            "POST {path}: {answer}"
        );
    };
    refused_nul(
        &tk.operator,
        "/api/v1/tasks",
        json!({"prompt": "a\u{0}b"}),
        "/prompt",
    )
    .await;
    // Held by a: b may not act on it, and a may not claim to be b.
    api.ok(
        &tk.agents["a"],
        Method::POST,
        "/api/v1/agents/a/wait",
        json!({"timeout_seconds": 1}),
    )
    .await;
    let head_after_wait = t.store.head().await.unwrap();
    assert_eq!(
        head_after_wait,
        head + 2,
        "refusals appended nothing; the reservation appended two"
    );
    let (got, answer) = api
        .call(
            Some(&tk.agents["b"]),
            Method::POST,
            &format!("/api/v1/tasks/{id}/ack"),
            Some(json!({})),
        )
        .await;
    assert_eq!(
        (got, answer["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("not_assignee")),
        "{answer}"
    );
    let (got, _) = api
        .call(
            Some(&tk.agents["a"]),
            Method::POST,
            &format!("/api/v1/tasks/{id}/ack"),
            Some(json!({"agent_id": "b"})),
        )
        .await;
    assert_eq!(got, StatusCode::FORBIDDEN);
    let (got, answer) = api
        .call(
            Some(&tk.agents["a"]),
            Method::POST,
            &format!("/api/v1/tasks/{id}/progress"),
            Some(json!({"message": "m", "percent": 150})),
        )
        .await;
    assert_eq!(got, StatusCode::CONFLICT, "progress before ack: {answer}");
    api.ok(
        &tk.agents["a"],
        Method::POST,
        &format!("/api/v1/tasks/{id}/ack"),
        json!({}),
    )
    .await;
    let (got, answer) = api
        .call(
            Some(&tk.agents["a"]),
            Method::POST,
            &format!("/api/v1/tasks/{id}/progress"),
            Some(json!({"message": "m", "percent": 150})),
        )
        .await;
    assert_eq!(
        (got, answer["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")),
        "{answer}"
    );
    // An agent's result holding a NUL is refused the same way, saying where.
    refused_nul(
        &tk.agents["a"],
        &format!("/api/v1/tasks/{id}/complete"),
        json!({"result": {"log": ["ok", "x\u{0}y"]}}),
        "/result/log/1",
    )
    .await;
    assert_eq!(
        t.store.head().await.unwrap(),
        head_after_wait + 1,
        "only the ack was appended"
    );
    // The board's view was not moved by the refusal: the task can still complete.
    api.ok(
        &tk.agents["a"],
        Method::POST,
        &format!("/api/v1/tasks/{id}/complete"),
        json!({"result": {"log": ["ok"]}}),
    )
    .await;
    server.shutdown().await.unwrap();
}

// ---------------------------------------------------------------- 6. routes x roles

async fn every_route_against_every_role(backend: Backend) {
    let t = TestStore::new(backend).await;
    let tk = tokens(&t.store, &["a"]).await;
    let spare = create_token(&t.store, "spare", Role::Viewer, "test", Utc::now())
        .await
        .unwrap();
    let server = serve_with(&t.store, config(), system_clock()).await;
    let api = Api::of(&server);
    api.ok(&tk.agents["a"], Method::POST, "/api/v1/agents", json!({}))
        .await;
    let task = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/tasks",
            json!({"prompt": "p"}),
        )
        .await;
    let task_id = task["task_id"].as_str().unwrap().to_string();
    let fill = |path: &str| {
        path.replace("{agent_id}", "a")
            .replace("{task_id}", &task_id)
            .replace("{run_id}", &uuid::Uuid::now_v7().to_string())
            .replace("{gate_id}", &uuid::Uuid::now_v7().to_string())
            .replace("{name}", &spare.0.name)
            .replace("{version}", "1.0.0")
            .replace("{view}", "board")
    };
    let callers: Vec<(Option<Role>, Option<&str>)> = vec![
        (None, None),
        (
            None,
            Some("awl_0000000000000000000000000000000000000000000000000000000000000000"),
        ),
        (Some(Role::Viewer), Some(&tk.viewer)),
        (Some(Role::Agent), Some(&tk.agents["a"])),
        (Some(Role::Operator), Some(&tk.operator)),
        (Some(Role::Admin), Some(&tk.admin)),
    ];
    let mut checked = 0;
    for route in server::routes::routes() {
        // Revoking a token is checked last, so the spare token is still there for the others.
        if route.method == Method::DELETE && route.path.starts_with("/api/v1/tokens") {
            continue;
        }
        for (role, token) in &callers {
            let path = fill(route.path);
            let body = (route.method == Method::POST).then(|| json!({}));
            let body = if route.path.ends_with("/wait") {
                Some(json!({"timeout_seconds": 0}))
            } else {
                body
            };
            let (status, answer) = api.call(*token, route.method.clone(), &path, body).await;
            let by_middleware_403 = status == StatusCode::FORBIDDEN
                && answer["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("token may not"));
            match (role, route.permission) {
                // A webhook needs no token, whoever calls: its signature is checked
                // by the handler (here, of a hook nobody declares).
                (_, Permission::Public) if route.path.starts_with("/api/v1/hooks/") => {
                    assert_eq!(
                        answer["error"]["code"], "hook_not_found",
                        "{} {path}: {status} {answer}",
                        route.method
                    )
                }
                // Chat's endpoints need no token either: the service's signature is
                // checked (here, with no chat file, the server has no chat at all).
                (_, Permission::Public) if route.path.starts_with("/api/v1/chat/") => {
                    assert_eq!(
                        answer["error"]["code"], "chat_not_configured",
                        "{} {path}: {status} {answer}",
                        route.method
                    )
                }
                (_, Permission::Public) => assert!(
                    status.is_success(),
                    "{} {path} is public: {status}",
                    route.method
                ),
                (None, _) => assert_eq!(
                    status,
                    StatusCode::UNAUTHORIZED,
                    "{} {path} without a valid token",
                    route.method
                ),
                (Some(role), permission) if !role.allows(permission) => {
                    assert!(
                        by_middleware_403,
                        "{} {path} as {role}: expected 403 from the role check, got {status} {answer}",
                        route.method
                    )
                }
                (Some(role), _) => assert!(
                    status != StatusCode::UNAUTHORIZED && !by_middleware_403,
                    "{} {path} as {role}: the role may, but got {status} {answer}",
                    route.method
                ),
            }
            checked += 1;
        }
    }
    assert!(checked >= 25 * callers.len(), "only {checked} checks");
    // Revoking: only an admin.
    for (role, token) in &callers[..5] {
        let (status, _) = api
            .call(*token, Method::DELETE, "/api/v1/tokens/spare", None)
            .await;
        let expected = if role.is_none() {
            StatusCode::UNAUTHORIZED
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(status, expected, "revoke as {role:?}");
    }
    let (status, _) = api
        .call(
            Some(&tk.admin),
            Method::DELETE,
            "/api/v1/tokens/spare",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    server.shutdown().await.unwrap();
}

// ---------------------------------------------------------------- 7. bad bodies

async fn bad_bodies_are_answered_4xx(backend: Backend) {
    let t = TestStore::new(backend).await;
    let tk = tokens(&t.store, &[]).await;
    let mut config = config();
    config.body_limit = 4 * 1024;
    let server = serve_with(&t.store, config, system_clock()).await;
    let api = Api::of(&server);
    let head = t.store.head().await.unwrap();
    let raw = |body: &'static str| {
        let http = api.http.clone();
        let url = format!("{}/api/v1/tasks", api.base);
        let token = tk.operator.clone();
        async move {
            let r = http
                .post(url)
                .bearer_auth(token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let status = r.status();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = raw("{\"prompt\": ").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("malformed_json")),
        "{body}"
    );
    let (status, body) = raw("{\"prompt\": \"x\", \"colour\": \"red\"}").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_body"))
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("colour"),
        "{body}"
    );
    let (status, _) = raw("{\"prompt\": 3}").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, body) = raw("{\"prompt\": \"x\", \"agent_hint\": \"rm -rf /\"}").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")),
        "{body}"
    );
    let (status, body) = raw("{\"prompt\": \"   \"}").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let big = format!("{{\"prompt\": \"{}\"}}", "x".repeat(8 * 1024));
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/tasks",
            Some(serde_json::from_str(&big).unwrap()),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("body_too_large")),
        "{body}"
    );
    let (status, body) = api
        .call(
            Some(&tk.viewer),
            Method::GET,
            "/api/v1/tasks?status=DONE",
            None,
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request")),
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown status \"DONE\""),
        "{body}"
    );
    // An unknown or ill-typed query parameter is a JSON error too.
    for query in [
        "/api/v1/tasks?colour=red",
        "/api/v1/tasks?limit=many",
        "/api/v1/views/runs?page=2",
    ] {
        let (status, body) = api.call(Some(&tk.viewer), Method::GET, query, None).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("invalid_query")),
            "{query}: {body}"
        );
    }
    let (status, _) = api
        .call(
            Some(&tk.viewer),
            Method::GET,
            "/api/v1/tasks/not-a-uuid",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = api
        .call(Some(&tk.viewer), Method::GET, "/api/v1/nothing-here", None)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("no_route"))
    );
    // The same Idempotency-Key gives the same task, once.
    let send = |key: &'static str, prompt: &'static str| {
        let http = api.http.clone();
        let url = format!("{}/api/v1/tasks", api.base);
        let token = tk.operator.clone();
        async move {
            let r = http
                .post(url)
                .bearer_auth(token)
                .header("idempotency-key", key)
                .json(&json!({"prompt": prompt}))
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };
    let (first, a) = send("k-1", "once").await;
    let (second, b) = send("k-1", "once").await;
    assert_eq!((first, second), (StatusCode::CREATED, StatusCode::OK));
    assert_eq!(a["task_id"], b["task_id"]);
    let (third, c) = send("k-1", "something else").await;
    assert_eq!(
        (third, c["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("idempotency_mismatch"))
    );
    assert_eq!(
        t.store.head().await.unwrap(),
        head + 1,
        "only the one task was recorded"
    );
    // Without tokens, the server will not listen beyond loopback.
    let open = TestStore::new(backend).await;
    let refused = server::start(
        open.store.clone(),
        ServeConfig::new("0.0.0.0:0".parse().unwrap()),
        Runners::new(RunnersConfig::default()),
        system_clock(),
    )
    .await;
    assert!(matches!(
        refused,
        Err(server::ServeError::OpenWithoutAuth(_))
    ));
    server.shutdown().await.unwrap();
}

// ---------------------------------------------------------------- 8. an agent step

const AGENT_WORKFLOW: &str = r#"
name: agent-review
version: "1.0.0"
inputs:
  repo: {type: string, required: true}
steps:
  - id: implement
    type: agent
    prompt: "Implement the feature in ${{ inputs.repo }}"
    capabilities: [rust]
    workspace: {repository: "${{ inputs.repo }}"}
  - id: after
    type: tool
    tool: noop
outputs:
  pr: "${{ steps.implement.outputs.pr }}"
"#;

async fn a_workflow_agent_step_is_done_by_an_agent_over_http(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent-review.awl.yaml");
    std::fs::write(&file, AGENT_WORKFLOW).unwrap();
    awl::definitions::register_file(&t.store, &file, "test", Utc::now())
        .await
        .expect("register");
    let tk = tokens(&t.store, &["coder"]).await;
    let mut config = config();
    config.worker = Some(WorkerConfig::new("serve-test"));
    let server = serve_with(&t.store, config, system_clock()).await;
    let api = Api::of(&server);
    let coder = &tk.agents["coder"];
    api.ok(
        coder,
        Method::POST,
        "/api/v1/agents",
        json!({"capabilities": ["rust"], "workspace": {"repository": "org/app"}}),
    )
    .await;
    let started = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/runs",
            json!({"workflow": "agent-review", "inputs": {"repo": "org/app"}}),
        )
        .await;
    let run_id = started["run_id"].as_str().unwrap().to_string();
    // A run started with an Idempotency-Key is started once; the same key with another
    // request is refused. (Its agent task, in another repository, waits behind ours.)
    let start = |key: &'static str, repo: &'static str| {
        let request = api
            .http
            .post(format!("{}/api/v1/runs", api.base))
            .bearer_auth(&tk.operator)
            .header("idempotency-key", key)
            .json(&json!({"workflow": "agent-review", "inputs": {"repo": repo}}));
        async move {
            let r = request.send().await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };
    let (first, a) = start("deploy-42", "org/other").await;
    let (again, b) = start("deploy-42", "org/other").await;
    assert_eq!(
        (first, again),
        (StatusCode::CREATED, StatusCode::OK),
        "{a} {b}"
    );
    assert_eq!(a["run_id"], b["run_id"]);
    let (other, c) = start("deploy-42", "org/third").await;
    assert_eq!(
        (other, c["error"]["code"].as_str()),
        (StatusCode::CONFLICT, Some("idempotency_mismatch")),
        "{c}"
    );

    let got = api
        .ok(
            coder,
            Method::POST,
            "/api/v1/agents/coder/wait",
            json!({"timeout_seconds": 20}),
        )
        .await;
    let task = &got["task"];
    assert_eq!(task["run_id"], run_id.as_str(), "{got}");
    assert_eq!(task["step_id"], "implement");
    assert_eq!(task["prompt"], "Implement the feature in org/app");
    let id = task["task_id"].as_str().unwrap();
    api.ok(
        coder,
        Method::POST,
        &format!("/api/v1/tasks/{id}/ack"),
        json!({}),
    )
    .await;
    api.ok(
        coder,
        Method::POST,
        &format!("/api/v1/tasks/{id}/complete"),
        json!({"result": {"pr": 7}}),
    )
    .await;

    let run = crate::support::wait_for(30, "the run to finish", async || {
        let (_, run) = api
            .call(
                Some(&tk.viewer),
                Method::GET,
                &format!("/api/v1/runs/{run_id}"),
                None,
            )
            .await;
        (run["status"] == "SUCCEEDED").then_some(run)
    })
    .await;
    assert_eq!(run["steps"]["implement"]["output"]["pr"], 7);
    assert_eq!(run["outputs"]["pr"], 7);
    server.shutdown().await.unwrap();
}

/// An agent's loop over the API: wait for a task (up to `wait_seconds`), acknowledge
/// it, complete it with `{"by": name}`, and count it in `done`, until `done` reaches
/// `until`.
fn work_tasks(
    api: Arc<Api>,
    token: String,
    name: String,
    done: Arc<Mutex<usize>>,
    until: usize,
    wait_seconds: f64,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while *done.lock().unwrap() < until {
            let got = api
                .ok(
                    &token,
                    Method::POST,
                    &format!("/api/v1/agents/{name}/wait"),
                    json!({ "timeout_seconds": wait_seconds }),
                )
                .await;
            let Some(id) = got["task"]["task_id"].as_str() else {
                continue;
            };
            let ack = format!("/api/v1/tasks/{id}/ack");
            api.ok(&token, Method::POST, &ack, json!({})).await;
            let complete = format!("/api/v1/tasks/{id}/complete");
            api.ok(
                &token,
                Method::POST,
                &complete,
                json!({"result": {"by": name}}),
            )
            .await;
            *done.lock().unwrap() += 1;
        }
    })
}
