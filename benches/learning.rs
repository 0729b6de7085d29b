//! The learning benchmark, on Postgres, with a history of one million tool calls:
//!
//! - the history: 125,000 board tasks (queued, assigned, delivered, acked, eight tool
//!   calls, completed), 50 teams each repeating 8 tool sequences, one task in 20 with
//!   its last call failed; appended by 16 writers, then mined from position 0 by the
//!   projections (all of them, as a rebuild does); the learner proposes what that
//!   history supports and every proposal is approved;
//! - `awl serve` start-up: the release binary started on that database, timed from
//!   the spawn to `/health` answering, and to `/ready` (projections within their lag);
//! - recording a tool call: `POST /api/v1/tasks/ID/tool-calls` by an agent, one at a
//!   time, then by 8 agents at once, against a server that mines as it goes;
//! - a suggestion: `POST /api/v1/suggest` by a team's operator (the first three tools
//!   of one of its sequences), one at a time;
//! - mining live: tasks with eight tool calls each appended at a steady 5,000 calls
//!   per second while the server's projections follow; for each append, the time until
//!   the `learning` projection's checkpoint passes it.
//!
//! Prints Markdown for BENCHMARKS.md.
//!
//!     cargo bench --bench learning
//!     cargo bench --bench learning -- --calls 200000 --rate 5000 --seconds 20
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL; the
//! benchmark creates and drops its own database), default the local server.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use awl::auth::{Role, create_team_token, create_token};
use awl::clock::system_clock;
use awl::domain::Decide;
use awl::domain::ids::{AgentId, TaskId};
use awl::domain::task::{CompletedBy, Task, TaskCommand};
use awl::domain::workspace::Capabilities;
use awl::learning::{LearnConfig, Learner, Viewer};
use awl::log::{AppendRequest, ExpectedVersion, Metadata, NewEvent, StreamRef, StreamType};
use awl::projections::Projections;
use awl::runners::{Runners, RunnersConfig};
use awl::server::{self, ServeConfig};
use awl::store::{EventStore, StoreLocation, StoreOptions, domain_io};
use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;
use serde_json::{Value, json};

mod support;
use support::percentile;

const TEAMS: usize = 50;
const SEQUENCES: usize = 8;
const CALLS_PER_TASK: usize = 8;
const TOOLS: [&str; 16] = [
    "git_clone",
    "grep",
    "read_file",
    "edit_file",
    "cargo_build",
    "cargo_test",
    "git_commit",
    "open_pr",
    "lint",
    "format",
    "search_docs",
    "fetch_url",
    "run_sql",
    "notify",
    "echo",
    "noop",
];

/// Sequence `r`: eight different tools (5 is prime to 16, so `k * 5` visits 8 of them).
fn sequence(r: usize) -> Vec<&'static str> {
    (0..CALLS_PER_TASK)
        .map(|k| TOOLS[(r * 3 + k * 5) % TOOLS.len()])
        .collect()
}

struct Args {
    calls: usize,
    rate: usize,
    seconds: u64,
    /// Also rebuild each projection alone, timed (where mining's time goes).
    per_projection: bool,
    /// Append the history, keep its database and stop (for profiling a rebuild of
    /// it with `awl projections rebuild`).
    history_only: bool,
    /// Stop after every proposal is approved and keep the database (for looking at
    /// `awl serve` on it by hand).
    keep: bool,
    /// Tool calls reported before the timed ones (default 200).
    warm_up: usize,
    /// The live server's rounds of proposing, in seconds (0: none; default 5, the
    /// server's own default).
    learn_every: u64,
}

fn args() -> Args {
    let mut a = Args {
        calls: 1_000_000,
        rate: 5_000,
        seconds: 20,
        per_projection: false,
        history_only: false,
        keep: false,
        warm_up: 200,
        learn_every: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |d: usize| it.next().and_then(|s| s.parse().ok()).unwrap_or(d);
        match arg.as_str() {
            "--calls" => a.calls = value(a.calls),
            "--rate" => a.rate = value(a.rate),
            "--seconds" => a.seconds = value(a.seconds as usize) as u64,
            "--per-projection" => a.per_projection = true,
            "--history-only" => a.history_only = true,
            "--keep" => a.keep = true,
            "--warm-up" => a.warm_up = value(a.warm_up),
            "--learn-every" => a.learn_every = value(a.learn_every as usize) as u64,
            _ => {}
        }
    }
    a
}

/// Task `i` of the history as the board records it: its lifecycle with eight tool
/// calls of its team's sequence, two seconds apart, reported with the team's scope.
fn task_events(i: usize, start: DateTime<Utc>) -> AppendRequest {
    let team = i % TEAMS;
    let tools = sequence((i / TEAMS) % SEQUENCES);
    let agent = AgentId::try_from(format!("agent-{team}")).expect("an agent id");
    let task_id = TaskId::new();
    let ticket = format!("T-{i}");
    let mut at = start;
    let mut tick = |seconds: i64| {
        at += chrono::Duration::seconds(seconds);
        at
    };
    let mut commands = vec![
        TaskCommand::Queue {
            task_id,
            prompt: format!("fix {ticket}"),
            required_capabilities: Capabilities::new(&["rust".to_string()]),
            workspace: None,
            agent_hint: None,
            priority: 0,
            review_required: false,
            runner: Default::default(),
            run_step: None,
            at: tick(0),
        },
        TaskCommand::Assign {
            agent: agent.clone(),
            at: tick(0),
        },
        TaskCommand::Deliver {
            agent: agent.clone(),
            ack_deadline: tick(0) + chrono::Duration::seconds(30),
            at: tick(0),
        },
        TaskCommand::Ack {
            agent: agent.clone(),
            at: tick(1),
        },
    ];
    let failed = i % 20 == 19;
    for (k, tool) in tools.iter().enumerate() {
        commands.push(TaskCommand::ReportToolCall {
            agent: agent.clone(),
            name: tool.to_string(),
            parameters: json!({"ticket": ticket, "step": k, "repo": format!("repo-{team}")}),
            output: Some(json!({"ticket": ticket, "ok": true})),
            duration_ms: 40 + (k as u64) * 10,
            success: !(failed && k == CALLS_PER_TASK - 1),
            scope: Some(format!("team:team-{team}")),
            at: tick(2),
        });
    }
    commands.push(TaskCommand::Complete {
        by: CompletedBy::Agent(agent.clone()),
        result: json!({"ticket": ticket}),
        at: tick(1),
    });
    let stream = StreamRef::new(StreamType::Task, task_id.as_uuid().to_string());
    let metadata = Metadata::actor(agent.to_string());
    let mut task = Task::default();
    let mut events: Vec<NewEvent> = Vec::with_capacity(commands.len());
    for command in commands {
        for event in task.decide(command).expect("a legal lifecycle") {
            events.push(domain_io::encode(&stream, &event, &metadata).expect("encode"));
            task.apply(event);
        }
    }
    AppendRequest::new(stream, ExpectedVersion::NoStream, events)
}

/// Append tasks `range` with 16 writers; the position of each task's last event and
/// when its append returned.
async fn append_tasks(
    store: &EventStore,
    range: std::ops::Range<usize>,
    start: DateTime<Utc>,
) -> Vec<(i64, Instant)> {
    let next = Arc::new(Mutex::new(range));
    let writers: Vec<_> = (0..16)
        .map(|_| {
            let (store, next) = (store.clone(), next.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                loop {
                    let Some(i) = next.lock().expect("lock").next() else {
                        return done;
                    };
                    let appended = store.append(task_events(i, start)).await.expect("append");
                    done.push((appended.last_position, Instant::now()));
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in writers {
        all.extend(w.await.expect("a writer"));
    }
    all
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn summary(mut samples: Vec<f64>) -> String {
    samples.sort_by(f64::total_cmp);
    format!(
        "{:.2} / {:.2} / {:.2} ms",
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        samples.last().copied().unwrap_or_default()
    )
}

struct Http {
    client: reqwest::Client,
    base: String,
}

impl Http {
    async fn post(&self, token: &str, path: &str, body: &Value) -> Value {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("the server answers");
        let status = response.status();
        let value: Value = response.json().await.expect("json");
        assert!(status.is_success(), "POST {path}: {status} {value}");
        value
    }
}

/// A task held by `agent` (IN_PROGRESS), for tool calls to be reported on.
async fn task_in_progress(http: &Http, operator: &str, agent: (&str, &str)) -> String {
    let (name, token) = agent;
    let body = json!({"prompt": format!("work for {name}"), "capabilities": [name]});
    let task = http.post(operator, "/api/v1/tasks", &body).await;
    let id = task["task_id"].as_str().expect("an id").to_string();
    let got = http
        .post(
            token,
            &format!("/api/v1/agents/{name}/wait"),
            &json!({"timeout_seconds": 10}),
        )
        .await;
    assert_eq!(got["task"]["task_id"], id.as_str(), "{got}");
    http.post(token, &format!("/api/v1/tasks/{id}/ack"), &json!({}))
        .await;
    id
}

async fn report_calls(http: &Http, token: &str, task: &str, n: usize) -> Vec<f64> {
    let mut took = Vec::with_capacity(n);
    let mut began = Vec::with_capacity(n);
    for k in 0..n {
        let call = json!({"name": TOOLS[k % TOOLS.len()], "parameters": {"ticket": format!("L-{k}")},
                          "output": {"ok": true}, "duration_ms": 12, "success": true});
        began.push(Utc::now());
        let t = Instant::now();
        http.post(token, &format!("/api/v1/tasks/{task}/tool-calls"), &call)
            .await;
        took.push(ms(t.elapsed()));
    }
    if std::env::var_os("AWL_BENCH_SHOW_SLOW").is_some() {
        let mut at = 0.0;
        for (k, (ms, when)) in took.iter().zip(&began).enumerate() {
            if *ms > 4.0 {
                eprintln!(
                    "slow call {k} at {at:.0} ms ({}): {ms:.2} ms",
                    when.format("%H:%M:%S%.3f")
                );
            }
            at += ms;
        }
    }
    took
}

/// Start `awl serve` on the database; how long until `/health`, then `/ready`, answer
/// 200, and its resident memory (MB) idle 3 s after that.
async fn serve_start(url: &str) -> (f64, f64, f64) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a port")
        .port();
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_awl"))
        .args([
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--no-worker",
        ])
        .env("DATABASE_URL", url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start awl serve");
    let mut times = Vec::new();
    for path in ["/health", "/ready"] {
        loop {
            let answered = client
                .get(format!("http://127.0.0.1:{port}{path}"))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if answered.is_ok_and(|r| r.status().is_success()) {
                times.push(ms(started.elapsed()));
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "awl serve never got ready"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss = child.id().map_or(0.0, resident_mb);
    let _ = child.start_kill();
    let _ = child.wait().await;
    (times[0], times[1], rss)
}

/// The resident set of process `pid` in MB (Linux `/proc`; 0 elsewhere).
fn resident_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // `RUST_LOG=awl=debug` shows what the server does while it is measured (the
    // learner's rounds and their times, for one).
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let a = args();
    let tasks = a.calls / CALLS_PER_TASK;
    let options = StoreOptions {
        max_connections: 32,
        ..StoreOptions::default()
    };
    let fresh = support::fresh("postgres", &support::admin_url(), options).await;
    let store = fresh.store.clone();
    let StoreLocation::Postgres(url) = fresh.location.clone() else {
        unreachable!("a Postgres store")
    };
    println!(
        "Learning, {} tool calls in {tasks} tasks, Postgres\n",
        tasks * CALLS_PER_TASK
    );

    // The history, appended, then mined from position 0.
    let start = Utc::now() - chrono::Duration::days(7);
    let t = Instant::now();
    append_tasks(&store, 0..tasks, start).await;
    let appended = t.elapsed();
    let head = store.head().await.expect("head");
    if a.history_only {
        println!("{head} events appended in {appended:?}; the database is kept: {url}");
        std::mem::forget(fresh);
        return;
    }
    let projections = Projections::new(store.clone());
    projections.prepare().await.expect("prepare");
    let t = Instant::now();
    projections.catch_up_all().await.expect("catch up");
    let mined = t.elapsed();
    let alone = if a.per_projection {
        per_projection(&projections).await
    } else {
        String::new()
    };
    let learner = Learner::new(store.clone(), LearnConfig::default());
    let t = Instant::now();
    let report = learner.propose("bench", Utc::now()).await.expect("propose");
    let proposing = t.elapsed();
    projections.catch_up_all().await.expect("catch up");
    let open = learner
        .proposals(&Viewer::All, Some("OPEN"))
        .await
        .expect("proposals");
    for p in &open {
        learner
            .approve(&Viewer::All, &p.proposal_id, false, "bench", Utc::now())
            .await
            .expect("approve");
    }
    projections.catch_up_all().await.expect("catch up");
    // A round of proposing with nothing new (what a server does every 5 s).
    let t = Instant::now();
    let again = learner.propose("bench", Utc::now()).await.expect("propose");
    let idle_round = t.elapsed();
    assert!(
        again.proposed.is_empty(),
        "a round with nothing new proposed"
    );
    println!("| history | figure |\n|---|---:|");
    println!("| events in the log | {head} |");
    println!(
        "| appended (16 writers) | {:.1} s ({:.0} events/s) |",
        appended.as_secs_f64(),
        head as f64 / appended.as_secs_f64()
    );
    println!(
        "| mined from 0 (every projection) | {:.1} s ({:.0} tool calls/s) |",
        mined.as_secs_f64(),
        (tasks * CALLS_PER_TASK) as f64 / mined.as_secs_f64()
    );
    println!(
        "| proposed | {} of {} candidates in {:.0} ms; {} approved |",
        report.proposed.len(),
        report.candidates,
        ms(proposing),
        open.len()
    );

    println!(
        "| a round of proposing with nothing new (the same learner) | {:.0} ms |",
        ms(idle_round)
    );
    print!("{alone}");
    if a.keep {
        println!("\nThe database is kept: {url}");
        std::mem::forget(fresh);
        return;
    }

    // `awl serve` start-up on that history.
    let mut health = Vec::new();
    let mut ready = Vec::new();
    let mut resident = Vec::new();
    for _ in 0..5 {
        let (h, r, rss) = serve_start(&url).await;
        health.push(h);
        ready.push(r);
        resident.push(rss);
    }
    resident.sort_by(f64::total_cmp);
    health.sort_by(f64::total_cmp);
    ready.sort_by(f64::total_cmp);
    println!(
        "| `awl serve` to /health 200 (5 starts, p50 / max) | {:.0} / {:.0} ms |",
        health[2], health[4]
    );
    println!(
        "| `awl serve` to /ready 200 (5 starts, p50 / max) | {:.0} / {:.0} ms |",
        ready[2], ready[4]
    );
    println!(
        "| `awl serve` resident memory, idle 3 s after /ready (5 starts, p50 / max) | {:.0} / {:.0} MB |\n",
        resident[2], resident[4]
    );

    // A server that mines as it goes, for the live figures.
    let now = Utc::now();
    let operator = create_team_token(
        &store,
        "ops-7",
        Role::Operator,
        Some("team-7"),
        "bench",
        now,
    )
    .await
    .expect("token")
    .1;
    let mut agents = Vec::new();
    for k in 0..8 {
        let name = format!("live-{k}");
        let token = create_token(&store, &name, Role::Agent, "bench", now)
            .await
            .expect("token")
            .1;
        agents.push((name, token));
    }
    // The server's defaults: it proposes every 5 s.
    let mut config = ServeConfig::new("127.0.0.1:0".parse().expect("addr"));
    config.learn_every = (a.learn_every > 0).then(|| Duration::from_secs(a.learn_every));
    let server = server::start(
        store.clone(),
        config,
        Runners::new(RunnersConfig::default()),
        system_clock(),
    )
    .await
    .expect("server");
    let http = Arc::new(Http {
        client: reqwest::Client::new(),
        base: format!("http://{}", server.addr),
    });
    let mut held = Vec::new();
    for (name, token) in &agents {
        http.post(token, "/api/v1/agents", &json!({"capabilities": [name]}))
            .await;
        held.push(task_in_progress(&http, &operator, (name, token)).await);
    }

    // Recording a tool call: one agent, then eight at once.
    report_calls(&http, &agents[0].1, &held[0], a.warm_up).await; // warm-up
    let one = report_calls(&http, &agents[0].1, &held[0], 2_000).await;
    let t = Instant::now();
    let together: Vec<_> = agents
        .iter()
        .zip(&held)
        .map(|((_, token), task)| {
            let (http, token, task) = (http.clone(), token.clone(), task.clone());
            tokio::spawn(async move { report_calls(&http, &token, &task, 500).await })
        })
        .collect();
    let mut eight = Vec::new();
    for j in together {
        eight.extend(j.await.expect("a reporter"));
    }
    let eight_rate = eight.len() as f64 / t.elapsed().as_secs_f64();
    println!(
        "| recording a tool call over HTTP | calls | p50 / p99 / max | calls/s |\n|---|---:|---:|---:|"
    );
    println!(
        "| one agent, one at a time | {} | {} | |",
        one.len(),
        summary(one)
    );
    println!(
        "| eight agents at once | {} | {} | {eight_rate:.0} |\n",
        eight.len(),
        summary(eight)
    );

    // A suggestion for team 7: the first three tools of each of its sequences.
    let mut took = Vec::new();
    for k in 0..1_000 {
        let tools: Vec<&str> = sequence(k % SEQUENCES)[..3].to_vec();
        let body = json!({"tools": tools});
        let t = Instant::now();
        let answer = http.post(&operator, "/api/v1/suggest", &body).await;
        took.push(ms(t.elapsed()));
        let found = answer["suggestions"].as_array().map_or(0, Vec::len);
        if found == 0 {
            let rows = store
                .query_rows(
                    "SELECT workflow, scope, learned, shared, retired, confidence, tools FROM workflow_tools LIMIT 5",
                    &[],
                )
                .await
                .expect("rows");
            panic!("no suggestion for {tools:?}: {answer}; workflow_tools: {rows:?}");
        }
    }
    println!("| a suggestion over HTTP | requests | p50 / p99 / max |\n|---|---:|---:|");
    println!(
        "| team 7, three tools of one of its sequences | 1000 | {} |\n",
        summary(took)
    );

    // Mining live at a steady rate.
    let live = live_lag(&store, a.rate, a.seconds, tasks).await;
    println!("{live}");
    println!("{}", patterns_table(&store).await);
    server.shutdown().await.expect("stop");
}

/// The size of the patterns' table after all this, and how many of its updates
/// stayed on their page (Postgres' statistics, which lag by up to a second or so).
async fn patterns_table(store: &EventStore) -> String {
    let rows = store
        .query_rows(
            "SELECT n_live_tup AS rows, pg_relation_size(relid) AS heap, n_tup_upd AS updates, \
                    n_tup_hot_upd AS hot \
               FROM pg_stat_user_tables WHERE relname LIKE 'tool_patterns_g%'",
            &[],
        )
        .await
        .expect("the patterns' table statistics");
    let mut out = String::from(
        "| `tool_patterns` at the end | rows | heap | updates | of them on their page (HOT) |\n|---|---:|---:|---:|---:|\n",
    );
    for row in rows {
        let n = |k: &str| row.get(k).and_then(|v| v.as_i64()).unwrap_or(0);
        out.push_str(&format!(
            "| | {} | {:.1} MB | {} | {:.1} % |\n",
            n("rows"),
            n("heap") as f64 / 1_048_576.0,
            n("updates"),
            100.0 * n("hot") as f64 / n("updates").max(1) as f64
        ));
    }
    out
}

/// Each projection rebuilt alone from 0 over the history: where mining's time goes.
async fn per_projection(projections: &Projections) -> String {
    let mut out = String::from("| rebuilt alone | time |\n|---|---:|\n");
    for status in projections.status().await.expect("status") {
        let t = Instant::now();
        projections
            .rebuild(&status.name, &|_, _| {})
            .await
            .expect("rebuild");
        out.push_str(&format!(
            "| `{}` | {:.1} s |\n",
            status.name,
            t.elapsed().as_secs_f64()
        ));
    }
    out.push('\n');
    out
}

/// Append tasks at `rate` tool calls per second for `seconds` while the server's
/// projections follow; the lag of the `learning` checkpoint behind each append.
async fn live_lag(store: &EventStore, rate: usize, seconds: u64, first: usize) -> String {
    let tasks_per_second = rate as f64 / CALLS_PER_TASK as f64;
    let pending: Arc<Mutex<VecDeque<(i64, Instant)>>> = Arc::default();
    let lags: Arc<Mutex<Vec<f64>>> = Arc::default();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let watcher = {
        let (store, pending, lags) = (store.clone(), pending.clone(), lags.clone());
        tokio::spawn(async move {
            loop {
                let at = awl::projections::queries::checkpoint(&store, "learning")
                    .await
                    .expect("checkpoint");
                let seen = Instant::now();
                {
                    let mut p = pending.lock().expect("lock");
                    let mut l = lags.lock().expect("lock");
                    while p.front().is_some_and(|(pos, _)| *pos <= at) {
                        let (_, when) = p.pop_front().expect("front");
                        l.push(ms(seen.duration_since(when)));
                    }
                    if *stopped.borrow() && p.is_empty() {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let began = Instant::now();
    let mut sent = 0usize;
    let mut ticker = tokio::time::interval(Duration::from_millis(20));
    while began.elapsed() < Duration::from_secs(seconds) {
        ticker.tick().await;
        let due = (began.elapsed().as_secs_f64() * tasks_per_second) as usize;
        let batch = first + sent..first + due;
        sent = due;
        let appends: Vec<_> = batch
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let appended = store
                        .append(task_events(i, Utc::now()))
                        .await
                        .expect("append");
                    (appended.last_position, Instant::now())
                })
            })
            .collect();
        let mut done = Vec::new();
        for a in appends {
            done.push(a.await.expect("an append"));
        }
        done.sort_by_key(|(pos, _)| *pos);
        pending.lock().expect("lock").extend(done);
    }
    let achieved = (sent * CALLS_PER_TASK) as f64 / began.elapsed().as_secs_f64();
    let _ = stop.send(true);
    let _ = watcher.await;
    let lags = lags.lock().expect("lock").clone();
    format!(
        "| mining live | tool calls/s appended | tasks | lag of `learning` p50 / p99 / max |\n|---|---:|---:|---:|\n\
         | {seconds} s at {rate} calls/s asked | {achieved:.0} | {sent} | {} |\n",
        summary(lags)
    )
}
