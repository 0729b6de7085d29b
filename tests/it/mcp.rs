//! The MCP endpoint (`/mcp`) from outside: the official MCP Python SDK drives a task's
//! whole life (`tests/mcp/lifecycle.py`) against a server started here on a fresh
//! store with real tokens; raw HTTP checks the token and `Host` rules and that open
//! MCP sessions and waits do not hold up a graceful shutdown.
//!
//! The Python SDK comes from the virtualenv `scripts/test` sets up; its interpreter is
//! named by `AWL_TEST_PYTHON`. Without it the lifecycle test fails (it does not skip).

use std::time::{Duration, Instant};

use awl::auth::Role;
use awl::clock::system_clock;
use reqwest::header::{ACCEPT, HOST, ORIGIN};
use serde_json::{Value, json};

use crate::support::server::{Api, config, serve, serve_with, token};
use crate::support::{Backend, TestStore, on_both_stores, within};

on_both_stores!(worker_threads = 2;
    lifecycle_through_the_python_sdk,
    open_sessions_and_waits_do_not_hold_up_shutdown,
    tokens_paths_and_hosts,
    origins_are_checked_with_auth_on_and_off,
    long_polls_per_token_are_capped,
);

pub(crate) const BOTH: &str = "application/json, text/event-stream";

fn python() -> String {
    std::env::var("AWL_TEST_PYTHON").unwrap_or_else(|_| {
        panic!(
            "AWL_TEST_PYTHON is not set: the MCP tests drive the server with the official MCP \
             Python SDK, which scripts/test installs in a virtualenv (target/pyenv) and names \
             in AWL_TEST_PYTHON. Run the tests with scripts/test."
        )
    })
}

async fn lifecycle_through_the_python_sdk(backend: Backend) {
    let python = python();
    let db = TestStore::new(backend).await;
    let operator = token(&db.store, "ops", Role::Operator).await;
    let agent = token(&db.store, "py-agent", Role::Agent).await;
    let viewer = token(&db.store, "watcher", Role::Viewer).await;
    let server = serve(&db.store).await;
    assert!(server.auth_on);

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/lifecycle.py");
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(script)
        .env("AWL_MCP_URL", format!("http://{}/mcp", server.addr))
        .env("AWL_OPERATOR_TOKEN", &operator)
        .env("AWL_AGENT_TOKEN", &agent)
        .env("AWL_AGENT_ID", "py-agent")
        .env("AWL_VIEWER_TOKEN", &viewer)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = within(120, "tests/mcp/lifecycle.py", cmd.output())
        .await
        .unwrap_or_else(|e| panic!("cannot run {python} {script}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "lifecycle.py failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(stdout.contains("lifecycle.py: ok"), "{stdout}\n{stderr}");
    within(15, "the server to stop", server.shutdown())
        .await
        .expect("a clean stop");
}

/// One JSON-RPC request over raw HTTP: the response and its body (an SSE stream whose
/// `data:` lines are JSON-RPC messages, or JSON).
async fn rpc(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    session: Option<&str>,
    body: Value,
) -> (reqwest::StatusCode, reqwest::header::HeaderMap, String) {
    let mut req = http
        .post(url)
        .bearer_auth(token)
        .header(ACCEPT, BOTH)
        .json(&body);
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    let res = req.send().await.expect("send");
    let (status, headers) = (res.status(), res.headers().clone());
    (status, headers, res.text().await.expect("body"))
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "awl-test", "version": "0"}}})
}

pub(crate) async fn open_session(http: &reqwest::Client, url: &str, token: &str) -> String {
    let (status, headers, body) = rpc(http, url, token, None, initialize()).await;
    assert_eq!(status, 200, "initialize: {body}");
    assert!(body.contains("\"name\":\"awl\""), "server name: {body}");
    let session = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .expect("a session id")
        .to_string();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, body) = rpc(http, url, token, Some(&session), note).await;
    assert!(status.is_success(), "initialized: {status} {body}");
    session
}

pub(crate) fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": args}})
}

async fn open_sessions_and_waits_do_not_hold_up_shutdown(backend: Backend) {
    let db = TestStore::new(backend).await;
    let admin = token(&db.store, "root", Role::Admin).await;
    let server = serve(&db.store).await;
    let url = format!("http://{}/mcp", server.addr);
    let http = reqwest::Client::new();
    let session = open_session(&http, &url, &admin).await;
    let register = call(2, "register", json!({"agent_id": "a1"}));
    let (status, _, body) = rpc(&http, &url, &admin, Some(&session), register).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"agent_id\":\"a1\""), "{body}");

    // The session's server-to-client stream, open and idle.
    let stream = http
        .get(&url)
        .bearer_auth(&admin)
        .header(ACCEPT, "text/event-stream")
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("GET /mcp");
    assert_eq!(stream.status(), 200);
    // A long wait in flight.
    let wait = {
        let (http, url, admin, session) = (http.clone(), url.clone(), admin.clone(), session);
        let body = call(
            3,
            "wait_for_prompt",
            json!({"agent_id": "a1", "timeout_seconds": 60}),
        );
        tokio::spawn(async move { rpc(&http, &url, &admin, Some(&session), body).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    let started = Instant::now();
    within(
        10,
        "the server to stop with an MCP session open",
        server.shutdown(),
    )
    .await
    .expect("a clean stop");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "stopping took {:?}",
        started.elapsed()
    );
    within(5, "the wait to end", wait)
        .await
        .expect("the wait's task");
    drop(stream);
}

async fn tokens_paths_and_hosts(backend: Backend) {
    let http = reqwest::Client::new();
    // Auth on: a token is needed; any Host is accepted (a rebinding page has no token).
    let db = TestStore::new(backend).await;
    let viewer = token(&db.store, "watcher", Role::Viewer).await;
    let server = serve(&db.store).await;
    let url = format!("http://{}/mcp", server.addr);
    let res = http
        .post(&url)
        .header(ACCEPT, BOTH)
        .json(&initialize())
        .send()
        .await
        .expect("send");
    assert_eq!(res.status(), 401, "no token");
    let res = http
        .post(format!("{url}/"))
        .bearer_auth(&viewer)
        .header(ACCEPT, BOTH)
        .json(&initialize())
        .send()
        .await
        .expect("send");
    assert_eq!(res.status(), 404, "only /mcp itself is the endpoint");
    let res = http
        .post(&url)
        .bearer_auth(&viewer)
        .header(ACCEPT, BOTH)
        .header(HOST, "awl.example.com")
        .json(&initialize())
        .send()
        .await
        .expect("send");
    assert_eq!(res.status(), 200, "any host with auth on");
    // A viewer may connect but not send.
    let session = open_session(&http, &url, &viewer).await;
    let send = call(2, "send_task", json!({"prompt": "x"}));
    let (status, _, body) = rpc(&http, &url, &viewer, Some(&session), send).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"isError\":true") && body.contains("forbidden"),
        "{body}"
    );
    within(15, "the server to stop", server.shutdown())
        .await
        .expect("a clean stop");

    // Auth off (no tokens, loopback): only loopback names, against DNS rebinding.
    let open = TestStore::new(backend).await;
    let server = serve(&open.store).await;
    assert!(!server.auth_on);
    let url = format!("http://{}/mcp", server.addr);
    let res = http
        .post(&url)
        .header(ACCEPT, BOTH)
        .header(HOST, "rebound.example.com")
        .json(&initialize())
        .send()
        .await
        .expect("send");
    assert!(
        res.status().is_client_error(),
        "a foreign Host with auth off: {}",
        res.status()
    );
    let res = http
        .post(&url)
        .header(ACCEPT, BOTH)
        .header(HOST, format!("localhost:{}", server.addr.port()))
        .json(&initialize())
        .send()
        .await
        .expect("send");
    assert_eq!(res.status(), 200, "localhost with auth off");
    within(15, "the server to stop", server.shutdown())
        .await
        .expect("a clean stop");
}

/// An `initialize` from a browser page at `origin` (`None`: no Origin header, as
/// non-browser clients send).
async fn initialize_from(
    http: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    origin: Option<&str>,
) -> (reqwest::StatusCode, String) {
    let mut req = http.post(url).header(ACCEPT, BOTH).json(&initialize());
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(origin) = origin {
        req = req.header(ORIGIN, origin);
    }
    let res = req.send().await.expect("send");
    let status = res.status();
    (status, res.text().await.expect("body"))
}

/// The specification's MUST: an `Origin` that is neither loopback nor listed gets 403,
/// before the token is looked at, with auth on and with auth off.
async fn origins_are_checked_with_auth_on_and_off(backend: Backend) {
    let http = reqwest::Client::new();
    for auth_on in [true, false] {
        let db = TestStore::new(backend).await;
        let admin = if auth_on {
            Some(token(&db.store, "boss", Role::Admin).await)
        } else {
            None
        };
        let mut cfg = config();
        cfg.allowed_origins =
            awl::server::origin::AllowedOrigins::new(&["https://console.example.com".to_string()])
                .expect("a valid origin");
        let server = serve_with(&db.store, cfg, system_clock()).await;
        assert_eq!(server.auth_on, auth_on);
        let url = format!("http://{}/mcp", server.addr);
        let port = server.addr.port();
        for (origin, token, expected) in [
            (Some("https://evil.example"), admin.as_deref(), 403),
            (Some("https://evil.example"), None, 403),
            (Some("null"), admin.as_deref(), 403),
            (
                Some("https://console.example.com:8443"),
                admin.as_deref(),
                403,
            ),
            (None, admin.as_deref(), 200),
            (
                Some(&*format!("http://localhost:{port}")),
                admin.as_deref(),
                200,
            ),
            (Some("https://console.example.com"), admin.as_deref(), 200),
        ] {
            let (status, body) = initialize_from(&http, &url, token, origin).await;
            let expected = if expected == 200 && auth_on && token.is_none() {
                401
            } else {
                expected
            };
            assert_eq!(
                status,
                expected,
                "auth {auth_on}, Origin {origin:?}, token {}: {body}",
                token.is_some()
            );
            if expected == 403 {
                let error: Value = serde_json::from_str(&body).expect("a JSON error");
                assert_eq!(error["error"]["code"], "origin_not_allowed", "{body}");
            }
        }
        // The REST API is not the MCP endpoint: an Origin there is left to CORS.
        let (status, _) = Api::of(&server)
            .call(admin.as_deref(), reqwest::Method::GET, "/health", None)
            .await;
        assert_eq!(status, 200);
        within(15, "the server to stop", server.shutdown())
            .await
            .expect("a clean stop");
    }
}

/// A token may hold only so many `wait_for_prompt` calls open, over REST and MCP
/// together; a slot comes back when its wait ends.
async fn long_polls_per_token_are_capped(backend: Backend) {
    let db = TestStore::new(backend).await;
    let agent = token(&db.store, "agent-a", Role::Agent).await;
    let mut cfg = config();
    cfg.max_waits_per_token = 2;
    let server = serve_with(&db.store, cfg, system_clock()).await;
    let api = Api::of(&server);
    api.ok(
        &agent,
        reqwest::Method::POST,
        "/api/v1/agents",
        json!({"capabilities": ["x"]}),
    )
    .await;
    let wait = |secs: f64| {
        let api = api.clone();
        let agent = agent.clone();
        async move {
            api.call(
                Some(&agent),
                reqwest::Method::POST,
                "/api/v1/agents/agent-a/wait",
                Some(json!({"timeout_seconds": secs})),
            )
            .await
        }
    };
    let first = tokio::spawn(wait(3.0));
    let second = tokio::spawn(wait(3.0));
    // Both are open (each holds the board's waiter) before the third is tried.
    crate::support::wait_for(10, "two waiters", async || {
        (server.board.waiting() == 2).then_some(())
    })
    .await;
    let started = Instant::now();
    let (status, body) = wait(3.0).await;
    assert_eq!(status, 429, "the third wait is refused: {body}");
    assert_eq!(body["error"]["code"], "too_many_waits", "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused at once"
    );
    // Over MCP too: the same token's slots are shared.
    let http = reqwest::Client::new();
    let url = format!("http://{}/mcp", server.addr);
    let session = open_session(&http, &url, &agent).await;
    let (status, _, body) = rpc(
        &http,
        &url,
        &agent,
        Some(&session),
        call(2, "wait_for_prompt", json!({"timeout_seconds": 1})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"isError\":true") && body.contains("too_many_waits"),
        "{body}"
    );
    for handle in [first, second] {
        let (status, body) = handle.await.expect("the wait");
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = wait(0.2).await;
    assert_eq!(status, 200, "slots came back: {body}");
    within(15, "the server to stop", server.shutdown())
        .await
        .expect("a clean stop");
}
