//! Observability from outside: `/metrics` after a run, a real Prometheus (Debian's
//! `prometheus`, started here) scraping `awl serve` on both of its addresses, one
//! trace for a run carried out by two `awl worker` processes (spans received by an
//! OTLP/HTTP receiver started here), `/ready` following a database that goes away and
//! comes back, and the start-up warning for settings that lose acknowledged events.
//!
//! Prometheus comes from `AWL_TEST_PROMETHEUS` or `prometheus` on the PATH
//! (`scripts/test` installs Debian's package when it is missing); without it the
//! Prometheus test fails, saying so.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use awl::auth::Role;
use awl::clock::system_clock;
use awl::executor::WorkerConfig;
use awl::store::{EventStore, StoreLocation, StoreOptions};
use axum::Router;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::cli::Awl;
use crate::support::otlp::{self, Received};
use crate::support::proxy::Proxy;
use crate::support::server::{Api, config, free_port, serve_with, token};
use crate::support::{Backend, TestStore, on_both_stores, poll, sample, wait_for, within};

on_both_stores!(worker_threads = 4;
    metrics_and_readiness_after_a_run,
    prometheus_scrapes_awl_serve,
    one_trace_for_a_run_across_two_workers,
    a_request_trace_carries_into_the_run_and_out_of_its_http_step,
    durability_settings_are_read,
);

mod postgres_only {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn ready_follows_the_database() {
        super::ready_follows_the_database().await;
    }
}

const SHORT: &str = r#"
name: observed
version: "1.0.0"
steps:
  - {id: first, type: shell, command: ["true"]}
  - {id: second, tool: noop}
"#;

fn register(dir: &std::path::Path, name: &str, yaml: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, yaml).expect("write the workflow");
    path
}

/// A run over the API, then `/metrics` shows it, `/ready` is ready.
async fn metrics_and_readiness_after_a_run(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().unwrap();
    let workflow = format!("observed-{}", uuid::Uuid::new_v4().simple());
    let file = register(
        dir.path(),
        "w.awl.yaml",
        &SHORT.replace("observed", &workflow),
    );
    awl::definitions::register_file(&t.store, &file, "test", chrono::Utc::now())
        .await
        .unwrap();
    let mut cfg = config();
    cfg.worker = Some(WorkerConfig::new("metrics-test"));
    let server = serve_with(&t.store, cfg, system_clock()).await;
    let api = Api::of(&server);
    let started = api
        .post(None, "/api/v1/runs", json!({"workflow": workflow}))
        .await;
    let run = started["run_id"].as_str().unwrap().to_string();
    wait_for(30, "the run to succeed", async || {
        let status = api.fetch(None, &format!("/api/v1/runs/{run}")).await;
        (status["status"] == "SUCCEEDED").then_some(())
    })
    .await;
    let text = metrics_text(&api, None).await;
    let finished = sample(
        &text,
        "awl_runs_finished_total",
        &[("workflow", &workflow), ("outcome", "succeeded")],
    );
    assert_eq!(finished, Some(1.0), "{text}");
    let started = sample(&text, "awl_runs_started_total", &[("workflow", &workflow)]);
    assert_eq!(started, Some(1.0));
    assert!(
        sample(
            &text,
            "awl_step_duration_seconds_count",
            &[("type", "shell"), ("outcome", "ok")]
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "awl_http_requests_total",
            &[("route", "/api/v1/runs/{run_id}"), ("status", "200")]
        )
        .is_some_and(|n| n >= 1.0),
        "the route template labels the request, not its path: {text}"
    );
    assert!(
        text.contains("awl_append_duration_seconds_bucket"),
        "{text}"
    );
    assert!(text.contains("# HELP awl_runs_finished_total"), "{text}");
    // The projections' first page (and every page of the worker's transactions'
    // commits) is read from the database.
    assert!(
        sample(&text, "awl_log_pages_total", &[("source", "database")]).is_some_and(|n| n >= 1.0),
        "{text}"
    );

    let (status, ready) = api.call(None, reqwest::Method::GET, "/ready", None).await;
    assert_eq!(status, StatusCode::OK, "{ready}");
    assert_eq!(ready["ready"], true);
    let names: Vec<&str> = ready["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["database", "migrations", "projections"]);
    within(15, "the server to stop", server.shutdown())
        .await
        .unwrap();
}

async fn metrics_text(api: &Api, token: Option<&str>) -> String {
    let mut request = api.http.get(format!("{}/metrics", api.base));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("GET /metrics");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    response.text().await.unwrap()
}

fn prometheus() -> String {
    std::env::var("AWL_TEST_PROMETHEUS")
        .ok()
        .or_else(|| {
            ["/usr/bin/prometheus", "/usr/local/bin/prometheus"]
                .iter()
                .find(|p| std::path::Path::new(p).exists())
                .map(|p| p.to_string())
        })
        .unwrap_or_else(|| {
            panic!(
                "no Prometheus: this test scrapes awl with a real Prometheus; scripts/test \
                 installs Debian's `prometheus` (or set AWL_TEST_PROMETHEUS)"
            )
        })
}

/// Prometheus scrapes `awl serve` on its API port (with a viewer's token) and on its
/// metrics port (without), and its query API returns the run counters after a run.
async fn prometheus_scrapes_awl_serve(backend: Backend) {
    let prometheus = prometheus();
    let t = TestStore::new(backend).await;
    let viewer = token(&t.store, "scraper", Role::Viewer).await;
    let operator = token(&t.store, "ops", Role::Operator).await;
    let dir = tempfile::tempdir().unwrap();
    let workflow = format!("scraped-{}", uuid::Uuid::new_v4().simple());
    register(
        dir.path(),
        "w.awl.yaml",
        &SHORT.replace("observed", &workflow),
    );
    let awl = Awl::unbounded(&t.location);
    let (port, metrics_port) = (free_port(), free_port());
    let mut serve = awl
        .command(&[
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--metrics-bind",
            &format!("127.0.0.1:{metrics_port}"),
            "--workflows",
            &dir.path().to_string_lossy(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start awl serve");
    let api = Api::at(format!("http://127.0.0.1:{port}"));
    api.wait_healthy(30).await;
    // Without a token the API's /metrics is refused; the metrics port needs none.
    let (status, _) = api.call(None, reqwest::Method::GET, "/metrics", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let started = api
        .ok(
            &operator,
            reqwest::Method::POST,
            "/api/v1/runs",
            json!({"workflow": workflow}),
        )
        .await;
    let run = started["run_id"].as_str().unwrap().to_string();
    wait_for(30, "the run to succeed", async || {
        let status = api
            .ok_as(
                Some(&viewer),
                reqwest::Method::GET,
                &format!("/api/v1/runs/{run}"),
                None,
            )
            .await;
        (status["status"] == "SUCCEEDED").then_some(())
    })
    .await;

    let data = tempfile::tempdir().unwrap();
    let config = data.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n\
             \x20 - job_name: awl-api\n    authorization:\n      credentials: {viewer}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n\
             \x20 - job_name: awl-metrics\n    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n"
        ),
    )
    .unwrap();
    let prom_port = free_port();
    let mut prom = tokio::process::Command::new(&prometheus)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            data.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {prometheus}: {e}"));
    let query = Api::at(format!("http://127.0.0.1:{prom_port}"));
    let ask = |q: String| {
        let url = format!("{}/api/v1/query", query.base);
        let http = query.http.clone();
        async move {
            let response = http
                .get(format!("{url}?query={}", percent_encode(&q)))
                .send()
                .await
                .ok()?;
            response.json::<Value>().await.ok()
        }
    };
    // Both targets are up.
    wait_for(60, "Prometheus to scrape both targets", async || {
        let up = ask("up".to_string()).await?;
        let results = up["data"]["result"].as_array()?.clone();
        let jobs: BTreeSet<String> = results
            .iter()
            .filter(|r| r["value"][1] == "1")
            .filter_map(|r| r["metric"]["job"].as_str().map(str::to_string))
            .collect();
        (jobs.len() == 2).then_some(())
    })
    .await;
    // A query's value as both jobs (the API's /metrics and the metrics port) scraped
    // it: each must be 1.
    let both_one = async |what: &str, q: String| {
        let results = wait_for(60, what, async || {
            let answer = ask(q.clone()).await?;
            let results = answer["data"]["result"].as_array()?.clone();
            (results.len() == 2).then_some(results)
        })
        .await;
        for r in results {
            assert_eq!(r["value"][1], "1", "{what}: {r}");
        }
    };
    // The run counter, through Prometheus' query API.
    let finished = format!(
        "sum by (job) (awl_runs_finished_total{{workflow=\"{workflow}\",outcome=\"succeeded\"}})"
    );
    both_one("the run counter in Prometheus", finished).await;
    // The only server follows the log into the projections, and says so.
    let lease = "awl_follower_lease_held{follower=\"projections\"}".to_string();
    both_one("the projections' lease in Prometheus", lease).await;
    let _ = prom.kill().await;
    let _ = serve.kill().await;
}

/// `text` as a URL query value.
fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const GATED: &str = r#"
name: traced
version: "1.0.0"
steps:
  - {id: before, type: shell, command: ["true"]}
  - {id: approval, type: gate, message: "go on?"}
  - {id: after, type: shell, command: ["true"]}
"#;

/// A run started by `awl run --detach`, its first step carried out by one `awl worker`
/// process and its last by another: every step span is in the run's trace, under the
/// span that started the run.
async fn one_trace_for_a_run_across_two_workers(backend: Backend) {
    let t = TestStore::new(backend).await;
    let got = Received::default();
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", receiver.local_addr().unwrap());
    let app = otlp::router(got.clone());
    tokio::spawn(async move { axum::serve(receiver, app).await });

    let dir = tempfile::tempdir().unwrap();
    let file = register(dir.path(), "traced.awl.yaml", GATED);
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_SERVICE_NAME", "awl-test"),
    ];
    let awl = Awl::bounded(&t.location, 60);
    let traced = |args: &[&str]| {
        let mut cmd = awl.command(args);
        cmd.envs(env);
        cmd
    };
    let out = awl
        .output_of(
            "awl run --detach",
            traced(&["run", &file.to_string_lossy(), "--detach"]).stdout(Stdio::piped()),
        )
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = String::from_utf8_lossy(&out.stdout).trim().to_string();

    // Worker A: carries the run to its gate, then stops (and exports its spans).
    let log_a = dir.path().join("a.log");
    let mut a = traced(&["worker"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_a).unwrap())
        .spawn()
        .expect("start worker A");
    let gate = wait_for(30, "the gate to open", async || {
        let status = awl.status(&run).await;
        status["gates"][0]["gate_id"].as_str().map(str::to_string)
    })
    .await;
    stop(&mut a).await;
    awl.ok(&["approve", &gate]).await;

    // Worker B: carries it to the end.
    let mut b = traced(&["worker"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start worker B");
    wait_for(30, "the run to succeed", async || {
        (awl.status(&run).await["status"] == "SUCCEEDED").then_some(())
    })
    .await;
    stop(&mut b).await;

    let spans = poll(30, async || {
        let spans = got.0.lock().unwrap().clone();
        let named = |n: &str| spans.iter().any(|s| s["name"] == n);
        (named("run traced") && named("step before") && named("step after")).then_some(spans)
    })
    .await
    .unwrap_or_else(|| {
        let names: Vec<Value> = got
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|s| s["name"].clone())
            .collect();
        panic!(
            "after 30 s, not every span of the run's start and both workers had arrived: got \
             {names:?} (worker A's log: {})",
            std::fs::read_to_string(&log_a).unwrap_or_default()
        )
    });
    let find = |name: &str| -> &Value {
        spans
            .iter()
            .find(|s| s["name"] == name && s["attrs"]["awl.run.id"] == run.as_str())
            .unwrap_or_else(|| panic!("no span {name} of run {run} in {spans:#?}"))
    };
    let root = find("run traced");
    let (before, after) = (find("step before"), find("step after"));
    let trace = root["traceId"].as_str().unwrap();
    assert_eq!(trace.len(), 32, "{root}");
    for step in [before, after] {
        assert_eq!(step["traceId"], trace, "{step}");
        assert_eq!(step["parentSpanId"], root["spanId"], "{step}");
        assert_eq!(step["resource"]["service.name"], "awl-test");
        assert_eq!(step["attrs"]["awl.step.type"], "shell");
    }
    assert_ne!(
        before["resource"]["service.instance.id"], after["resource"]["service.instance.id"],
        "two worker processes performed the two steps"
    );
    // The run's events carry the trace too.
    let events = t
        .store
        .read_stream(&awl::log::StreamRef::new(
            awl::log::StreamType::Run,
            run.clone(),
        ))
        .await
        .unwrap();
    assert_eq!(events[0].metadata.trace_id.as_deref(), Some(trace));
}

/// The receiver's app: OTLP spans at `/v1/traces`, and `/hook`, which an `http` step
/// calls, keeping the `traceparent` it was sent.
fn receiver_app(got: Received, hooked: Arc<Mutex<Vec<String>>>) -> Router {
    otlp::router(got).route(
        "/hook",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let hooked = hooked.clone();
            async move {
                let tp = headers
                    .get("traceparent")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                hooked.lock().unwrap().push(tp);
                axum::Json(json!({"ok": true}))
            }
        }),
    )
}

/// A request that carries a W3C `traceparent` starts its run in that trace (the
/// server's span is a child of the caller's), and the run's `http` step sends the
/// trace on to the service it calls.
async fn a_request_trace_carries_into_the_run_and_out_of_its_http_step(backend: Backend) {
    let t = TestStore::new(backend).await;
    let got = Received::default();
    let hooked = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local = listener.local_addr().unwrap();
    let app = receiver_app(got.clone(), hooked.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    register(
        dir.path(),
        "called.awl.yaml",
        &format!(
            "name: called\nversion: \"1.0.0\"\nsteps:\n  - {{id: call, type: http, method: GET, url: \"http://{local}/hook\"}}\n"
        ),
    );
    let port = free_port();
    let awl = Awl::unbounded(&t.location);
    let mut serve = awl
        .command(&[
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--workflows",
            &dir.path().to_string_lossy(),
        ])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{local}"))
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start awl serve");
    let api = Api::at(format!("http://127.0.0.1:{port}"));
    api.wait_healthy(30).await;
    let (trace, caller_span) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let response = api
        .http
        .post(format!("{}/api/v1/runs", api.base))
        .header("traceparent", format!("00-{trace}-{caller_span}-01"))
        .json(&json!({"workflow": "called"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let run = response.json::<Value>().await.unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_for(30, "the run to succeed", async || {
        let status = api.fetch(None, &format!("/api/v1/runs/{run}")).await;
        (status["status"] == "SUCCEEDED").then_some(())
    })
    .await;
    // Out: the http step sent the run's trace.
    let sent = hooked.lock().unwrap().clone();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].split('-').nth(1), Some(trace), "{sent:?}");
    // In: the run is in the caller's trace, under the server's request span.
    let events = t
        .store
        .read_stream(&awl::log::StreamRef::new(
            awl::log::StreamType::Run,
            run.clone(),
        ))
        .await
        .unwrap();
    assert_eq!(events[0].metadata.trace_id.as_deref(), Some(trace));
    let spans = wait_for(30, "the request's and the step's spans", async || {
        let spans = got.0.lock().unwrap().clone();
        let named = |n: &str| spans.iter().any(|s| s["name"] == n);
        (named("POST /api/v1/runs") && named("step call") && named("GET")).then_some(spans)
    })
    .await;
    let find = |name: &str| spans.iter().find(|s| s["name"] == name).unwrap();
    let request = find("POST /api/v1/runs");
    assert_eq!(request["traceId"], trace);
    assert_eq!(request["parentSpanId"], caller_span);
    assert_eq!(request["attrs"]["http.route"], "/api/v1/runs");
    // OTLP/JSON writes 64-bit integers as strings.
    assert_eq!(request["attrs"]["http.response.status_code"], "201");
    let step = find("step call");
    assert_eq!(step["traceId"], trace);
    let client = find("GET");
    assert_eq!(
        client["parentSpanId"], step["spanId"],
        "the HTTP call is a child of its step"
    );
    assert_eq!(sent[0].split('-').nth(2), client["spanId"].as_str());

    // MCP: a tool call is a span with the MCP conventions, in the trace its HTTP
    // request names.
    let mcp = format!("{}/mcp", api.base);
    let session = crate::mcp::open_session(&api.http, &mcp, "unused").await;
    let (mcp_trace, mcp_caller) = ("1bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let answer = api
        .http
        .post(&mcp)
        .header(reqwest::header::ACCEPT, crate::mcp::BOTH)
        .header("mcp-session-id", &session)
        .header("traceparent", format!("00-{mcp_trace}-{mcp_caller}-01"))
        .json(&crate::mcp::call(2, "run_status", json!({"run_id": run})))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    assert!(answer.text().await.unwrap().contains("SUCCEEDED"));
    let tool = wait_for(30, "the tool call's span", async || {
        let spans = got.0.lock().unwrap().clone();
        spans
            .into_iter()
            .find(|s| s["name"] == "tools/call run_status")
    })
    .await;
    assert_eq!(tool["traceId"], mcp_trace, "{tool}");
    assert_eq!(tool["parentSpanId"], mcp_caller, "{tool}");
    assert_eq!(tool["attrs"]["mcp.method.name"], "tools/call");
    assert_eq!(tool["attrs"]["gen_ai.tool.name"], "run_status");
    assert_eq!(tool["attrs"]["mcp.session.id"], session.as_str());

    // A board operation is traced as its request's span: which task, what was done
    // (no child span of its own on the request path).
    let task = api
        .http
        .post(format!("{}/api/v1/tasks", api.base))
        .json(&json!({"prompt": "tidy up"}))
        .send()
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    let task_id = task["task_id"].as_str().unwrap().to_string();
    let cancel = |trace: &'static str| {
        api.http
            .post(format!("{}/api/v1/tasks/{task_id}/cancel", api.base))
            .header("traceparent", format!("00-{trace}-{mcp_caller}-01"))
            .json(&json!({"reason": "not needed"}))
            .send()
    };
    assert_eq!(cancel(mcp_trace).await.unwrap().status(), StatusCode::OK);
    // A second cancel is refused: the request says so, and names no operation done.
    let refused_trace = "2bf92f3577b34da6a3ce929d0e0e4736";
    assert_eq!(
        cancel(refused_trace).await.unwrap().status(),
        StatusCode::CONFLICT
    );
    let cancel_span = |trace: &'static str| {
        let got = got.clone();
        async move {
            wait_for(30, "a cancel request's span", async || {
                let spans = got.0.lock().unwrap().clone();
                spans.into_iter().find(|s| {
                    s["name"] == "POST /api/v1/tasks/{task_id}/cancel" && s["traceId"] == trace
                })
            })
            .await
        }
    };
    let refused = cancel_span(refused_trace).await;
    assert_eq!(
        refused["attrs"]["http.response.status_code"], "409",
        "{refused}"
    );
    assert!(
        refused["attrs"].get("awl.task.operation").is_none()
            && refused["attrs"].get("error.type").is_none(),
        "{refused}"
    );
    let request = cancel_span(mcp_trace).await;
    assert_eq!(request["traceId"], mcp_trace, "{request}");
    assert_eq!(
        request["attrs"]["awl.task.operation"], "task cancel",
        "{request}"
    );
    assert_eq!(
        request["attrs"]["awl.task.id"],
        task_id.as_str(),
        "{request}"
    );
    let spans = got.0.lock().unwrap().clone();
    assert!(
        !spans.iter().any(|s| s["name"] == "task cancel"),
        "no child span for the operation"
    );
    let _ = serve.kill().await;
}

/// SIGTERM and wait: a worker finishes, gives its runs back and exports its spans.
async fn stop(child: &mut tokio::process::Child) {
    let pid = child.id().expect("running") as i32;
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let status = within(30, "the worker to stop", child.wait())
        .await
        .unwrap();
    assert!(status.success(), "the worker exited with {status}");
}

/// `/ready` says 503, naming the database, while the database is unreachable, and
/// 200 again once it answers.
async fn ready_follows_the_database() {
    let t = TestStore::new(Backend::Postgres).await;
    let StoreLocation::Postgres(url) = &t.location else {
        unreachable!()
    };
    let (proxy, proxied) = Proxy::to_postgres(url).await;
    let store = EventStore::open(&StoreLocation::Postgres(proxied), StoreOptions::default())
        .await
        .unwrap();
    let server = serve_with(&store, config(), system_clock()).await;
    let api = Api::of(&server);
    let ready = async || api.call(None, reqwest::Method::GET, "/ready", None).await;
    let (status, body) = ready().await;
    assert_eq!(status, StatusCode::OK, "{body}");

    proxy.cut();
    let (status, body) = within(10, "/ready to answer with the database gone", ready()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["ready"], false);
    assert_eq!(body["checks"][0]["name"], "database");
    assert_eq!(body["checks"][0]["ok"], false, "{body}");

    proxy.restore();
    wait_for(30, "/ready to recover", async || {
        let (status, _) = ready().await;
        (status == StatusCode::OK).then_some(())
    })
    .await;
    within(15, "the server to stop", server.shutdown())
        .await
        .unwrap();
}

/// The durability settings are read from the database itself: a database set to
/// commit without waiting for the WAL flush is warned about; the embedded store,
/// which syncs fully, is not.
async fn durability_settings_are_read(backend: Backend) {
    let t = TestStore::new(backend).await;
    assert_eq!(
        t.store.durability_warnings().await.unwrap(),
        Vec::<String>::new()
    );
    if backend == Backend::Sqlite {
        return;
    }
    let StoreLocation::Postgres(url) = &t.location else {
        unreachable!()
    };
    let name = url
        .rsplit('/')
        .next()
        .unwrap()
        .split('?')
        .next()
        .unwrap()
        .to_string();
    t.store
        .execute_sql(&format!(
            "ALTER DATABASE {name} SET synchronous_commit = off"
        ))
        .await
        .unwrap();
    let reopened = t.reopen().await;
    let warnings = reopened.durability_warnings().await.unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("synchronous_commit = off"),
        "{warnings:?}"
    );
}

/// The Grafana dashboard in the repository charts every metric awl keeps, and only
/// those.
#[test]
fn the_grafana_dashboard_charts_every_metric_and_only_real_ones() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/grafana/awl-dashboard.json"
    );
    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard")).expect("JSON");
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("an expression");
            for (i, _) in expr.match_indices("awl_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let base = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(&name)
                    .to_string();
                used.insert(base);
            }
        }
    }
    let kept: BTreeSet<String> = awl::telemetry::ALL_METRICS
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(used, kept, "the dashboard's metrics and awl's differ");
}
