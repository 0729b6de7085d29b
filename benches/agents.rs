//! awl's own agent runner, model time excluded: solves against the scripted
//! OpenAI-compatible server of the tests (`tests/it/support/openai.rs`, on loopback,
//! answering at once), with the built-in `echo` tool. Two figures:
//!
//! 1. The runner's own cost per phase: the time between one recorded phase and the
//!    next (each model reply, each tool result, the answer), minus the time the model
//!    call's HTTP attempt took as the client measured it (the raw loopback call to the
//!    scripted server is measured alone beside it). p50 / p99 over every phase.
//! 2. 100 agent steps at once: 100 runs of a one-step workflow whose `agent` step only
//!    a built-in agent may take (`runner: builtin`), started together on `awl serve`
//!    (in this process) with a board agent of concurrency 100; from the first start to
//!    the last run succeeded.
//!
//! Run:
//!
//!     cargo bench --bench agents                          # 200 solves, Postgres
//!     cargo bench --bench agents -- --solves 500 --only sqlite
//!
//! Postgres comes from AWL_BENCH_DATABASE_URL or DATABASE_URL (an admin URL), default
//! the local server.

use std::time::{Duration, Instant};

use awl::agents::{Agents, Observer, load_dir};
use awl::clock::system_clock;
use awl::domain::ids::SolveId;
use awl::domain::solve::{Origin, SolveEvent};
use awl::models::{ChatRequest, Message, ModelClient};
use awl::runners::{Runners, RunnersConfig};
use awl::tools::Registry;

mod support;

#[path = "../tests/it/support/openai.rs"]
#[allow(dead_code)]
mod openai;

use openai::{Scripted, ScriptedServer};

/// Stamps each recorded phase, with the time of the model call it holds, if any.
#[derive(Default)]
struct Stamps {
    at: Vec<(Instant, Option<Duration>)>,
    model: Option<Duration>,
}

impl Observer for Stamps {
    fn model_called(&mut self, latency: Duration) {
        self.model = Some(latency);
    }

    fn event(&mut self, event: &SolveEvent) {
        let model = match event {
            SolveEvent::ModelReplied { .. } => self.model.take(),
            _ => None,
        };
        self.at.push((Instant::now(), model));
    }
}

fn agent_dir(base_url: &str, extra: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::create_dir_all(dir.path().join("agents")).expect("agents dir");
    std::fs::write(
        dir.path().join("agents/bench.yaml"),
        format!(
            "name: bench\ncapabilities: [bench]\nmodel:\n  name: scripted\n  base_url: {base_url}\ntools: [echo]\nmax_iterations: 3\n{extra}"
        ),
    )
    .expect("agent file");
    dir
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let mut solves = 200usize;
    let mut kind = "postgres".to_string();
    let mut steps = 100usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--solves" => solves = args.next().and_then(|s| s.parse().ok()).unwrap_or(solves),
            "--steps" => steps = args.next().and_then(|s| s.parse().ok()).unwrap_or(steps),
            "--only" => kind = args.next().unwrap_or(kind),
            _ => {}
        }
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    println!("## Agents ({kind})\n");
    phases(&kind, solves).await;
    at_once(&kind, steps).await;
}

/// Each solve: a plan phase calling `echo` twice, then the answer: 5 recorded phases
/// after the start (reply, two results, reply, finished).
async fn phases(kind: &str, solves: usize) {
    let fresh = support::fresh(kind, &support::admin_url(), Default::default()).await;
    let model = ScriptedServer::start(std::iter::empty()).await;
    for _ in 0..solves {
        model.push(Scripted::tool_calls(&[
            ("echo", r#"{"message": "a"}"#),
            ("echo", r#"{"message": "b"}"#),
        ]));
        model.push(Scripted::text("done"));
    }
    let dir = agent_dir(model.base_url(), "");
    let registry = Registry::builtins(Runners::new(RunnersConfig::default()));
    let definitions = load_dir(&dir.path().join("agents"), &registry).expect("agent");
    let agents =
        Agents::new(fresh.store.clone(), definitions, registry, system_clock()).expect("agents");
    let mut own_us = Vec::new();
    let started = Instant::now();
    for _ in 0..solves {
        let mut stamps = Stamps::default();
        let result = agents
            .ask(
                SolveId::new(),
                "bench",
                "say a and b",
                Origin::default(),
                "bench",
                &mut stamps,
            )
            .await
            .expect("solve");
        assert!(result.finished(), "{result:?}");
        for pair in stamps.at.windows(2) {
            let (from, _) = pair[0];
            let (to, model) = pair[1];
            let phase = to.duration_since(from).as_secs_f64() * 1e6;
            let model = model.map_or(0.0, |m| m.as_secs_f64() * 1e6);
            own_us.push((phase - model).max(0.0));
        }
    }
    let elapsed = started.elapsed();
    own_us.sort_by(f64::total_cmp);

    // The raw model call alone: what the phases above include and the runner does not
    // control (the loopback HTTP exchange with the scripted server).
    let client = ModelClient::new().expect("client");
    let endpoint = model.endpoint();
    let request = ChatRequest {
        model: "scripted".into(),
        messages: vec![Message::User {
            content: "x".into(),
        }],
        tools: vec![],
        tool_choice_none: false,
        max_tokens: None,
        temperature: None,
    };
    let mut raw_us = Vec::new();
    for _ in 0..solves.min(500) {
        model.push(Scripted::text("done"));
        let t = Instant::now();
        client.chat(&endpoint, &request).await.expect("raw call");
        raw_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    raw_us.sort_by(f64::total_cmp);
    println!(
        "Runner cost per phase, model time excluded ({solves} solves, {} phases): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; {:.0} solves/s one after another.",
        own_us.len(),
        support::percentile(&own_us, 0.5) / 1000.0,
        support::percentile(&own_us, 0.99) / 1000.0,
        own_us.last().copied().unwrap_or(f64::NAN) / 1000.0,
        solves as f64 / elapsed.as_secs_f64()
    );
    println!(
        "(A model call's own time, as the client measured its HTTP attempt, is taken off its phase; the raw loopback call to the scripted server alone: p50 {:.2} ms, p99 {:.2} ms.)\n",
        support::percentile(&raw_us, 0.5) / 1000.0,
        support::percentile(&raw_us, 0.99) / 1000.0
    );
}

const WORKFLOW: &str = r#"
name: ask-once
version: "1.0.0"
steps:
  - id: ask
    type: agent
    prompt: "Say done."
    capabilities: [bench]
    runner: builtin
"#;

/// `steps` runs of a one-step workflow whose agent step a built-in agent does, started
/// at once on a server in this process.
async fn at_once(kind: &str, steps: usize) {
    let options = awl::store::StoreOptions {
        max_connections: 32,
        ..awl::store::StoreOptions::default()
    };
    let fresh = support::fresh(kind, &support::admin_url(), options).await;
    let store = fresh.store.clone();
    let model = ScriptedServer::always(Scripted::text("done")).await;
    let dir = agent_dir(
        model.base_url(),
        &format!("board: true\nconcurrency: {steps}\n"),
    );
    let registry = Registry::builtins(Runners::new(RunnersConfig::default()));
    let definitions = load_dir(&dir.path().join("agents"), &registry).expect("agent");
    let file = dir.path().join("ask-once.awl.yaml");
    std::fs::write(&file, WORKFLOW).expect("workflow");
    awl::definitions::register_file(&store, &file, "bench", chrono::Utc::now())
        .await
        .expect("register");
    let mut config = awl::server::ServeConfig::new("127.0.0.1:0".parse().expect("addr"));
    config.tools = Some(registry);
    config.agents = definitions;
    config.learn_every = None;
    config.worker = Some(awl::executor::WorkerConfig::new("bench"));
    let server = awl::server::start(
        store.clone(),
        config,
        Runners::new(RunnersConfig::default()),
        system_clock(),
    )
    .await
    .expect("server");
    let runs = awl::runs::Runs::new(store.clone(), system_clock());
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..steps {
        let run = runs
            .start(
                awl::runs::StartRun {
                    workflow: "ask-once".into(),
                    ..Default::default()
                },
                "bench",
                None,
            )
            .await
            .expect("start");
        ids.push(run.run_id);
    }
    let mut latencies = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut pending = ids.clone();
    while !pending.is_empty() && Instant::now() < deadline {
        let mut still = Vec::new();
        for id in pending {
            let (run, _) = runs.get(id).await.expect("run");
            if run.is_terminal() {
                latencies.push(started.elapsed().as_secs_f64());
            } else {
                still.push(id);
            }
        }
        pending = still;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all = started.elapsed();
    assert!(
        pending.is_empty(),
        "{} runs did not finish in 300 s",
        pending.len()
    );
    for id in &ids {
        let (run, _) = runs.get(*id).await.expect("run");
        assert_eq!(
            run.status(),
            Some(awl::domain::run::RunStatus::Succeeded),
            "run {id}"
        );
    }
    latencies.sort_by(f64::total_cmp);
    println!(
        "{steps} agent steps at once (one-step runs, `runner: builtin`, a board agent of concurrency {steps}, the scripted model answering at once): all done in {:.2} s ({:.0} steps/s); a run's time from the first start p50 {:.2} s, p99 {:.2} s.\n",
        all.as_secs_f64(),
        steps as f64 / all.as_secs_f64(),
        support::percentile(&latencies, 0.5),
        support::percentile(&latencies, 0.99),
    );
    server.shutdown().await.expect("shutdown");
}
