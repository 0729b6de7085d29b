//! The board's command line through the real binary: `awl token`, `awl send`, `awl
//! tasks`, `awl task ID`, `awl answer`, `awl review`, straight to the store and through
//! a running `awl serve` (with auth on), and the server's graceful stop with a long
//! poll in flight.

use std::process::Stdio;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::cli::Awl;
use crate::support::server::{Api, free_port};
use crate::support::{Backend, TestStore, on_both_stores, within};

on_both_stores!(worker_threads = 2;
    board_commands_work_on_the_store_and_through_a_server,
);

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

async fn board_commands_work_on_the_store_and_through_a_server(backend: Backend) {
    let t = TestStore::new(backend).await;
    let awl = Awl::bounded(&t.location, 60);

    // Tokens: printed once, listed without their secrets.
    let admin = json_of(
        &awl.ok(&[
            "token", "create", "--name", "root", "--role", "admin", "--json",
        ])
        .await,
    );
    let operator = json_of(
        &awl.ok(&[
            "token", "create", "--name", "ops", "--role", "operator", "--json",
        ])
        .await,
    )["token"]
        .as_str()
        .unwrap()
        .to_string();
    let agent = json_of(
        &awl.ok(&[
            "token", "create", "--name", "coder", "--role", "agent", "--json",
        ])
        .await,
    )["token"]
        .as_str()
        .unwrap()
        .to_string();
    let listed = awl.ok(&["token", "list", "--json"]).await;
    assert!(
        !listed.contains(admin["token"].as_str().unwrap()),
        "a secret was listed"
    );
    assert_eq!(json_of(&listed).as_array().unwrap().len(), 3);
    let duplicate = awl
        .output(&["token", "create", "--name", "ops", "--role", "viewer"])
        .await;
    assert!(!duplicate.status.success());
    assert!(String::from_utf8_lossy(&duplicate.stderr).contains("already named \"ops\""));

    // Straight to the store.
    let sent = json_of(
        &awl.ok(&[
            "send",
            "tidy the docs",
            "--cap",
            "docs",
            "--repo",
            "org/app",
            "--agent-hint",
            "coder",
            "--priority",
            "3",
            "--json",
        ])
        .await,
    );
    let first = sent["task_id"].as_str().unwrap().to_string();
    assert_eq!(sent["agent_hint"], "coder");
    let board = json_of(&awl.ok(&["tasks", "--json"]).await);
    assert_eq!(board[0]["task_id"], first.as_str());
    let text = awl.ok(&["tasks"]).await;
    assert!(
        text.contains("QUEUED (1)") && text.contains("tidy the docs") && text.contains("[docs]"),
        "{text}"
    );
    let shown = json_of(&awl.ok(&["task", &first, "--json"]).await);
    assert_eq!(shown["history"][0]["event_type"], "task.queued");

    // Through a server, with auth on.
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut serve = awl
        .command(&[
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--no-worker",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start awl serve");
    let api = Api::at(url.clone());
    api.wait_healthy(30).await;
    let http = api.http.clone();
    let remote = |args: &[&str]| {
        let mut all: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        all.extend([
            "--server".into(),
            url.clone(),
            "--token".into(),
            operator.clone(),
        ]);
        all
    };
    let args = remote(&[
        "send",
        "fix the build",
        "--cap",
        "rust",
        "--review",
        "--json",
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let second = json_of(&awl.ok(&args).await)["task_id"]
        .as_str()
        .unwrap()
        .to_string();
    api.ok_post(
        &agent,
        "/api/v1/agents",
        json!({"capabilities": ["rust", "docs"]}),
    )
    .await;
    // The hinted, higher-priority docs task comes first, then the build.
    let got = api
        .ok_post(
            &agent,
            "/api/v1/agents/coder/wait",
            json!({"timeout_seconds": 5}),
        )
        .await;
    assert_eq!(got["task"]["task_id"], first.as_str());
    let got = api
        .ok_post(
            &agent,
            "/api/v1/agents/coder/wait",
            json!({"timeout_seconds": 5}),
        )
        .await;
    assert_eq!(got["task"]["task_id"], second.as_str());
    api.ok_post(&agent, &format!("/api/v1/tasks/{second}/ack"), json!({}))
        .await;
    api.ok_post(
        &agent,
        &format!("/api/v1/tasks/{second}/questions"),
        json!({"question": "which target?"}),
    )
    .await;
    let args = remote(&["answer", &second, "x86_64"]);
    let out = awl
        .ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert!(out.contains("IN_PROGRESS"), "{out}");
    api.ok_post(
        &agent,
        &format!("/api/v1/tasks/{second}/submit"),
        json!({"summary": "fixed"}),
    )
    .await;
    let args = remote(&["review", "changes", &second, "--feedback", "add a test"]);
    let out = awl
        .ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert!(out.contains("QUEUED"), "{out}");
    let args = remote(&["tasks", "--status", "QUEUED", "--json"]);
    let queued = json_of(
        &awl.ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .await,
    );
    assert_eq!(queued[0]["feedback"][0]["feedback"], "add a test");
    let args = remote(&["task", &second]);
    let out = awl
        .ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    assert!(
        out.contains("task.changes_requested")
            && out.contains("changes requested (round 1) by ops: add a test"),
        "{out}"
    );
    // A wrong token is refused with a clear message.
    let bad = awl
        .output(&["tasks", "--server", &url, "--token", "awl_nope"])
        .await;
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("401"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    // A graceful stop with a long poll in flight: the poll ends with no task, the
    // process exits 0. (The build task is withdrawn first, so nothing is queued.)
    api.ok_post(
        &operator,
        &format!("/api/v1/tasks/{second}/cancel"),
        json!({"reason": "superseded"}),
    )
    .await;
    let poll = {
        let request = http
            .post(format!("{url}/api/v1/agents/coder/wait"))
            .bearer_auth(&agent)
            .json(&json!({"timeout_seconds": 50}));
        tokio::spawn(async move { request.send().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = serve.id().expect("running") as i32;
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let answer = within(15, "the long poll to end at shutdown", poll)
        .await
        .unwrap()
        .expect("an answer");
    assert_eq!(answer.status(), StatusCode::OK);
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["task"], Value::Null);
    let status = within(15, "awl serve to exit", serve.wait()).await.unwrap();
    assert!(status.success(), "awl serve exited with {status}");

    // Revoked tokens stop working.
    awl.ok(&["token", "revoke", "ops"]).await;
    let listed = json_of(&awl.ok(&["token", "list", "--json"]).await);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "ops" && !t["revoked_at"].is_null())
    );
}
