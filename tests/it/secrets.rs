//! Secrets and personal data, end to end through the real `awl` binary, on both
//! stores:
//!
//! - a secret input, a secret env variable and the store's own URL never reach the
//!   log in clear, though steps use them: a step that prints them, and one that fails
//!   with the secret in its error, record `[redacted]`; the run still works (the
//!   secret is sealed in the start event and opened for the steps);
//! - personal data is sealed in the log (the input, and every text of the run that
//!   contains it: a step's output, the run's outputs) and shown opened in the run's
//!   status while its subject is remembered; after `awl forget SUBJECT` the same
//!   status reads `[erased]`, the log has not changed by one event, and `awl check`
//!   still passes;
//! - the server shows the same: the live event stream and `GET /api/v1/runs/{id}` open
//!   personal data (then `[erased]`) and never a secret, and the read models behind the
//!   views hold `[personal]`, never the data;
//! - an agent step's prompt that holds personal data is sealed in the task's stream,
//!   opened for the agent that takes it and for a person looking at the task,
//!   `[personal]` in board lists and the board view, `[erased]` once forgotten;
//! - a sub-workflow handed a parent's personal data (into an input it does not declare
//!   personal) seals it, and every text it derives from it, under the parent's
//!   subject: forgetting the subject erases the child's copies too;
//! - API tokens, good and bad, in headers and by mistake in a URL, never reach the
//!   server's logs (at `trace`), its spans (through an OTLP receiver), its error bodies
//!   or the log.

use std::path::Path;

use awl::log::EventFilter;
use awl::store::EventStore;

use serde_json::Value;

use crate::support::cli::{Awl, run_id_of, step};
use crate::support::server::{self, Api, sse_messages};
use crate::support::{Backend, TestStore, wait_for};

const LIMIT: u64 = 90;
const TOKEN: &str = "tok-5f1e9c0a7b2d4e68";
const ENV_SECRET: &str = "env-secret-93b1d2c4e5";
const EMAIL: &str = "alice.liddell@example.com";

const WORKFLOW: &str = r#"
name: protected
version: "1.0.0"
subject: "customer:${{ inputs.customer }}"
inputs:
  customer: { type: string, required: true }
  token: { type: string, required: true, secret: true }
  email: { type: string, required: true, personal: true }
steps:
  - id: use
    type: shell
    script: 'printf "token=%s env=%s email=%s" "$TOKEN" "$ENV_SECRET" "$EMAIL"'
    env:
      TOKEN: "${{ inputs.token }}"
      ENV_SECRET: "${{ env.AWL_TEST_ENV_SECRET }}"
      EMAIL: "${{ inputs.email }}"
  - id: check
    type: shell
    script: 'test "$TOKEN" = "$EXPECTED" && printf ok'
    env:
      TOKEN: "${{ inputs.token }}"
      EXPECTED: "${{ env.AWL_TEST_EXPECTED }}"
  - id: leak
    type: shell
    script: 'echo "login failed for token $TOKEN" >&2; exit 3'
    env:
      TOKEN: "${{ inputs.token }}"
    on_error: continue
outputs:
  mailed: "sent to ${{ inputs.email }}"
"#;

/// Every event of the store, as stored, in one text.
async fn whole_log(store: &EventStore) -> String {
    let (events, _) = store
        .read_page(0, 100_000, &EventFilter::default())
        .await
        .expect("read the log");
    serde_json::to_string(&events).expect("events as JSON")
}

async fn start(awl: &Awl, dir: &Path, url_secret: &str) -> String {
    let file = dir.join("protected.awl.yaml");
    std::fs::write(&file, WORKFLOW).expect("write the workflow");
    let mut cmd = awl.command(&[
        "run",
        file.to_str().expect("utf-8 path"),
        "--var",
        "customer=42",
        "--var",
        &format!("token={TOKEN}"),
        "--var",
        &format!("email={EMAIL}"),
        "--secret-env",
        "AWL_TEST_ENV_SECRET",
        "--secret-env",
        "AWL_TEST_EXPECTED",
    ]);
    cmd.env("AWL_TEST_ENV_SECRET", ENV_SECRET)
        .env("AWL_TEST_EXPECTED", TOKEN);
    let output = awl.output_of("awl run", &mut cmd).await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    );
    assert!(output.status.success(), "awl run failed: {stderr}");
    for secret in [TOKEN, ENV_SECRET] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "awl run printed a secret:\n{stdout}\n{stderr}"
        );
    }
    if !url_secret.is_empty() {
        assert!(
            !stderr.contains(url_secret),
            "awl run printed the store's password"
        );
    }
    run_id_of(&stderr)
}

pub async fn secrets_never_reach_the_log(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let awl = Awl::bounded(&t.location, LIMIT);
    let run_id = start(&awl, dir.path(), "").await;

    let log = whole_log(&t.store).await;
    for (what, secret) in [
        ("secret input", TOKEN),
        ("secret env", ENV_SECRET),
        ("personal input", EMAIL),
    ] {
        assert!(!log.contains(secret), "the {what} is in the log in clear");
    }
    assert!(
        log.contains("[redacted]"),
        "the masked secrets are not marked"
    );
    assert!(
        log.contains("awl:sealed:v1:secret:"),
        "the secret input is not sealed"
    );
    assert!(
        log.contains("awl:sealed:v1:personal:"),
        "the personal data is not sealed"
    );

    let status = awl.status(&run_id).await;
    let shown = status.to_string();
    assert_eq!(status["status"], "SUCCEEDED", "{shown}");
    // The secret reached the steps: `check` compared it and succeeded.
    assert_eq!(step(&status, "check")["status"], "succeeded", "{shown}");
    assert!(
        !shown.contains(TOKEN) && !shown.contains(ENV_SECRET),
        "status shows a secret: {shown}"
    );
    assert!(
        shown.contains(&format!("token=[redacted] env=[redacted] email={EMAIL}")),
        "the step's output, opened for a viewer, masks the secrets and shows the personal data: {shown}"
    );
    assert!(
        shown.contains("login failed for token [redacted]"),
        "the failing step's error is masked: {shown}"
    );
    assert!(
        shown.contains(&format!("sent to {EMAIL}")),
        "run outputs: {shown}"
    );
}

/// What the server shows of the run: every event of the live stream, the run's status,
/// and its timeline view (once the view has the finished run).
async fn served(store: &EventStore, run_id: &str) -> (String, String, String) {
    let server = server::serve(store).await;
    let api = Api::of(&server);
    let events = store.head().await.expect("the head") as usize;
    let stream = reqwest::Client::new()
        .get(format!(
            "http://{}/api/v1/events/stream?after=0",
            server.addr
        ))
        .send()
        .await
        .expect("the event stream");
    let messages = sse_messages(stream, events).await;
    let stream: Vec<Value> = messages.into_iter().map(|(_, _, data)| data).collect();
    let status = api.get(None, &format!("/api/v1/runs/{run_id}")).await;
    let timeline = wait_for(LIMIT, "the timeline view to have the run", async || {
        // 404 until the runs projection has the run.
        let view = api
            .fetch(None, &format!("/api/v1/views/runs/{run_id}/timeline"))
            .await;
        view.to_string().contains("leak").then_some(view)
    })
    .await;
    server.shutdown().await.expect("the server stops");
    (
        Value::from(stream).to_string(),
        status.to_string(),
        timeline.to_string(),
    )
}

pub async fn a_forgotten_subject_reads_erased(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let awl = Awl::bounded(&t.location, LIMIT);
    let run_id = start(&awl, dir.path(), "").await;
    let before = whole_log(&t.store).await;
    assert!(awl.status(&run_id).await.to_string().contains(EMAIL));
    let (stream, status, timeline) = served(&t.store, &run_id).await;
    for shown in [&stream, &status] {
        assert!(
            shown.contains(EMAIL),
            "personal data is shown while remembered: {shown}"
        );
        assert!(
            !shown.contains(TOKEN) && !shown.contains(ENV_SECRET),
            "{shown}"
        );
        assert!(!shown.contains("awl:sealed:v1:personal"), "{shown}");
    }
    assert!(
        stream.contains("[redacted]"),
        "the secret input reads redacted: {stream}"
    );
    assert!(
        !timeline.contains(EMAIL),
        "a read model holds personal data: {timeline}"
    );
    assert!(timeline.contains("[personal]"), "{timeline}");

    let said = awl.ok(&["forget", "customer:42", "--by", "dpo"]).await;
    assert!(said.contains("forgot subject"), "{said}");
    let again = awl.ok(&["forget", "customer:42"]).await;
    assert!(again.contains("nothing to erase"), "{again}");

    assert_eq!(
        whole_log(&t.store).await,
        before,
        "forgetting rewrote the log"
    );
    let status = awl.status(&run_id).await;
    let shown = status.to_string();
    assert!(
        !shown.contains(EMAIL),
        "the forgotten subject's data is still shown: {shown}"
    );
    assert!(shown.contains(r#""mailed":"[erased]""#), "{shown}");
    let (stream, status, _) = served(&t.store, &run_id).await;
    for shown in [&stream, &status] {
        assert!(
            !shown.contains(EMAIL),
            "forgotten data still served: {shown}"
        );
        assert!(shown.contains("[erased]"), "{shown}");
    }
    // The secret input had its own key, which forgetting the subject left alone; the
    // log stays valid.
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

crate::support::on_both_stores!(
    worker_threads = 2;
    secrets_never_reach_the_log,
    a_forgotten_subject_reads_erased,
    api_tokens_never_reach_logs_traces_or_error_bodies,
    a_task_prompt_with_personal_data_is_sealed_and_opened_for_its_agent,
    a_child_run_given_personal_data_seals_what_it_derives,
);

/// `awl serve` with auth on, logging everything (`AWL_LOG=trace`) and exporting spans
/// to a receiver here, is called with good tokens, wrong ones, a token pasted into the
/// URL, a bad body and over MCP; no token appears in its stderr, a span, an error body
/// or an event.
async fn api_tokens_never_reach_logs_traces_or_error_bodies(backend: Backend) {
    use awl::auth::Role;
    use reqwest::{Method, StatusCode};

    let t = TestStore::new(backend).await;
    let admin = server::token(&t.store, "root", Role::Admin).await;
    let agent = server::token(&t.store, "coder", Role::Agent).await;
    // Wrong tokens: one character off a real one, and a real one with more after it.
    let mut off_by_one = admin.clone();
    let last = off_by_one.pop().expect("a token");
    off_by_one.push(if last == 'a' { 'b' } else { 'a' });
    let extended = format!("{admin}x");
    let secrets = [admin.as_str(), agent.as_str(), &off_by_one, &extended];

    let got = crate::support::otlp::Received::default();
    let receiver = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let endpoint = format!("http://{}", receiver.local_addr().expect("addr"));
    let app = crate::support::otlp::router(got.clone());
    tokio::spawn(async move { axum::serve(receiver, app).await });
    let dir = tempfile::tempdir().expect("dir");
    let log_path = dir.path().join("serve.log");
    let port = server::free_port();
    let mut serve = Awl::unbounded(&t.location)
        .command(&["serve", "--bind", &format!("127.0.0.1:{port}")])
        .env("AWL_LOG", "trace")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path).expect("log file"))
        .spawn()
        .expect("start awl serve");
    let api = Api::at(format!("http://127.0.0.1:{port}"));
    api.wait_healthy(30).await;

    let mut bodies = Vec::new();
    let (status, body) = api
        .call(Some(&admin), Method::GET, "/api/v1/views/runs", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Something recorded by a token's holder (the event names its actor).
    let (status, body) = api
        .call(
            Some(&admin),
            Method::POST,
            "/api/v1/tasks",
            Some(serde_json::json!({"prompt": "rotate the keys"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for wrong in [&off_by_one, &extended] {
        let (status, body) = api
            .call(Some(wrong), Method::GET, "/api/v1/views/runs", None)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        bodies.push(body);
    }
    // A token pasted into the URL, as people do.
    let (status, body) = api
        .call(
            Some(&admin),
            Method::GET,
            &format!("/api/v1/views/runs?access_token={admin}&limit=5"),
            None,
        )
        .await;
    bodies.push(body);
    assert!(status.is_success() || status.is_client_error(), "{status}");
    // A bad body, sent with a good token: the error names the body, not the caller.
    let (status, body) = api
        .call(
            Some(&agent),
            Method::POST,
            "/api/v1/tasks",
            Some(serde_json::json!({"prompt": 42})),
        )
        .await;
    assert!(status.is_client_error(), "{status} {body}");
    bodies.push(body);
    // A call the agent's role does not allow: refused, the body says why, not who.
    let (status, body) = api
        .call(Some(&agent), Method::GET, "/api/v1/tasks", None)
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    bodies.push(body);
    // The agent's own session over MCP, and a wrong token there.
    let mcp = format!("{}/mcp", api.base);
    crate::mcp::open_session(&api.http, &mcp, &agent).await;
    let refused = api
        .http
        .post(&mcp)
        .bearer_auth(&off_by_one)
        .header(reqwest::header::ACCEPT, crate::mcp::BOTH)
        .json(&crate::mcp::call(1, "list_tasks", serde_json::json!({})))
        .send()
        .await
        .expect("an answer");
    assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
    bodies.push(Value::String(refused.text().await.expect("a body")));

    // Stop it (SIGTERM: it exports the spans it still holds), then look everywhere.
    let spans = wait_for(30, "the requests' spans", async || {
        let spans = got.spans();
        (spans
            .iter()
            .filter(|s| s["name"].as_str().is_some_and(|n| n.contains("/api/v1/")))
            .count()
            >= 4)
            .then_some(spans)
    })
    .await;
    if let Some(pid) = serve.id() {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
    }
    let _ = tokio::time::timeout(std::time::Duration::from_secs(20), serve.wait()).await;
    let _ = serve.kill().await;
    let log = std::fs::read_to_string(&log_path).expect("the server's log");
    assert!(
        log.lines().count() > 20 && log.contains("TRACE") && log.contains("/api/v1/views/runs"),
        "the server logged its requests at trace level: {log}"
    );
    let spans = serde_json::to_string(&spans).expect("JSON");
    let events = t
        .store
        .read_page(0, 100_000, &EventFilter::default())
        .await
        .expect("the log")
        .0;
    assert!(!events.is_empty(), "the task sent is in the log");
    let events = serde_json::to_string(&events).expect("JSON");
    let bodies = serde_json::to_string(&bodies).expect("JSON");
    for (i, secret) in secrets.iter().enumerate() {
        // The part after the prefix is the secret; the prefix alone names the kind.
        for (place, text) in [
            ("log", &log),
            ("spans", &spans),
            ("error bodies", &bodies),
            ("events", &events),
        ] {
            assert!(
                !text.contains(*secret),
                "token {i} appears in the server's {place}"
            );
        }
    }
}

const AGENT_STEP: &str = r#"
name: mailer
version: "1.0.0"
subject: "customer:${{ inputs.customer }}"
inputs:
  customer: { type: string, required: true }
  email: { type: string, required: true, personal: true }
steps:
  - id: write
    type: agent
    prompt: "Write to ${{ inputs.email }} about their order"
    capabilities: [mail]
"#;

async fn a_task_prompt_with_personal_data_is_sealed_and_opened_for_its_agent(backend: Backend) {
    use awl::auth::Role;
    use reqwest::Method;
    use serde_json::json;

    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("mailer.awl.yaml");
    std::fs::write(&file, AGENT_STEP).expect("write");
    awl::definitions::register_file(&t.store, &file, "test", chrono::Utc::now())
        .await
        .expect("register");
    let operator = server::token(&t.store, "ops", Role::Operator).await;
    let agent = server::token(&t.store, "scribe", Role::Agent).await;
    let mut config = server::config();
    config.worker = Some(awl::executor::WorkerConfig::new("serve-test"));
    let running = server::serve_with(&t.store, config.clone(), awl::clock::system_clock()).await;
    let api = Api::of(&running);
    api.ok(
        &agent,
        Method::POST,
        "/api/v1/agents",
        json!({"capabilities": ["mail"]}),
    )
    .await;
    api.ok(
        &operator,
        Method::POST,
        "/api/v1/runs",
        json!({"workflow": "mailer", "inputs": {"customer": "7", "email": EMAIL}}),
    )
    .await;
    // Once the board projection holds the task, a server started anew takes it from
    // there, where the prompt is hidden: it must read that task from the log.
    wait_for(LIMIT, "the board projection to hold the task", async || {
        let rows = t
            .store
            .query_rows("SELECT state FROM board_tasks", &[])
            .await
            .ok()?;
        rows.first()?
            .get("state")?
            .as_str()?
            .contains("[personal]")
            .then_some(())
    })
    .await;
    running.shutdown().await.expect("the server stops");
    let running = server::serve_with(&t.store, config, awl::clock::system_clock()).await;
    let api = Api::of(&running);
    // The agent that takes the task reads the prompt.
    let got = api
        .ok(
            &agent,
            Method::POST,
            "/api/v1/agents/scribe/wait",
            json!({"timeout_seconds": 30}),
        )
        .await;
    let prompt = got["task"]["prompt"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        prompt,
        format!("Write to {EMAIL} about their order"),
        "{got}"
    );
    let task_id = got["task"]["task_id"].as_str().expect("a task").to_string();
    // The log holds it sealed.
    let log = whole_log(&t.store).await;
    assert!(!log.contains(EMAIL), "personal data in the log in clear");
    assert!(log.contains("awl:sealed:v1:personal"), "nothing sealed");
    // A person looking at the task, and its history, see it; lists and the board view
    // (a read model) do not.
    let shown = api
        .get(Some(&operator), &format!("/api/v1/tasks/{task_id}"))
        .await;
    assert_eq!(shown["prompt"], prompt.as_str(), "{shown}");
    let history = api
        .get(Some(&operator), &format!("/api/v1/tasks/{task_id}/events"))
        .await;
    assert!(history.to_string().contains(EMAIL), "{history}");
    let listed = api.get(Some(&operator), "/api/v1/tasks").await;
    assert!(
        !listed.to_string().contains(EMAIL) && listed.to_string().contains("[personal]"),
        "{listed}"
    );
    let board = wait_for(LIMIT, "the board view to have the task", async || {
        let view = api.fetch(Some(&operator), "/api/v1/views/board").await;
        view.to_string().contains(&task_id).then_some(view)
    })
    .await;
    assert!(!board.to_string().contains(EMAIL), "{board}");

    // Forgotten: the task reads erased at once, on the same server.
    let awl = Awl::bounded(&t.location, LIMIT);
    awl.ok(&["forget", "customer:7"]).await;
    let shown = api
        .get(Some(&operator), &format!("/api/v1/tasks/{task_id}"))
        .await;
    assert_eq!(shown["prompt"], "[erased]", "{shown}");
    running.shutdown().await.expect("the server stops");
}

const PARENT: &str = r#"
name: onboard
version: "1.0.0"
subject: "customer:${{ inputs.customer }}"
inputs:
  customer: { type: string, required: true }
  email: { type: string, required: true, personal: true }
steps:
  - id: welcome
    type: workflow
    workflow: ./welcome.awl.yaml
    inputs: { to: "${{ inputs.email }}" }
outputs:
  said: "${{ steps.welcome.outputs.said }}"
"#;

const CHILD: &str = r#"
name: welcome
version: "1.0.0"
inputs:
  to: { type: string, required: true }
steps:
  - id: send
    type: shell
    script: 'printf "welcome mail sent to %s" "$TO"'
    env: { TO: "${{ inputs.to }}" }
outputs:
  said: "${{ steps.send.outputs.stdout }}"
"#;

async fn a_child_run_given_personal_data_seals_what_it_derives(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("welcome.awl.yaml"), CHILD).expect("write");
    let parent = dir.path().join("onboard.awl.yaml");
    std::fs::write(&parent, PARENT).expect("write");
    let awl = Awl::bounded(&t.location, LIMIT);
    let output = awl
        .output(&[
            "run",
            parent.to_str().expect("utf-8"),
            "--var",
            "customer=9",
            "--var",
            &format!("email={EMAIL}"),
        ])
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "{stderr}");
    let run_id = run_id_of(&stderr);
    let log = whole_log(&t.store).await;
    assert!(
        !log.contains(EMAIL),
        "the child wrote personal data in clear: {log}"
    );
    let status = awl.status(&run_id).await;
    assert_eq!(
        status["outcome"]["outputs"]["said"],
        format!("welcome mail sent to {EMAIL}"),
        "{status:#}"
    );
    // The child's own status opens it too, and reads erased once forgotten.
    let listed = awl.ok(&["list", "--json", "--workflow", "welcome"]).await;
    let child = crate::support::cli::json_lines(&listed)
        .first()
        .and_then(|r| r["run_id"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("the child run: {listed}"));
    let shown = awl.status(&child).await.to_string();
    assert!(shown.contains(EMAIL), "{shown}");
    awl.ok(&["forget", "customer:9"]).await;
    for run in [&run_id, &child] {
        let shown = awl.status(run).await.to_string();
        assert!(!shown.contains(EMAIL), "{shown}");
        assert!(shown.contains("[erased]"), "{shown}");
    }
}
