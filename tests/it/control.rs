//! Operators' control over runs in flight, through the real binary and the HTTP API,
//! on both stores, with two `awl worker` processes: pausing (no step starts, the step
//! in flight finishes), resuming (the run goes on where it was), cancelling a paused
//! run, and the refusals that say what state the run is in; workflow versions (a run
//! finishes on the version it started with, `awl workflows list|show|diff|retire`).

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::cli::{Awl, stdout_of, step};
use crate::support::server::{Api, config, serve_with, tokens};
use crate::support::{Backend, TestStore, on_both_stores, poll, wait_for};

on_both_stores!(worker_threads = 2;
    a_paused_run_starts_nothing_new_until_resumed,
    runs_are_paused_resumed_and_cancelled_over_http,
    a_run_finishes_on_its_version_and_a_retired_version_takes_no_new_runs,
);

const LIMIT: u64 = 60;

/// `slow` is in flight when the pause comes; `after` must wait for the resume.
const HELD: &str = r#"
name: held
version: "1.0.0"
steps:
  - id: slow
    type: shell
    script: 'sleep 1; echo slow >> "$MARKS"'
    env: { MARKS: "${{ inputs.marks }}" }
  - id: after
    type: shell
    script: 'echo after >> "$MARKS"'
    env: { MARKS: "${{ inputs.marks }}" }
inputs:
  marks: { type: string, required: true }
"#;

fn phase(status: &Value, id: &str) -> String {
    status["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["step_id"] == id))
        .and_then(|s| s["status"].as_str())
        .unwrap_or("none")
        .to_string()
}

async fn a_paused_run_starts_nothing_new_until_resumed(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("held.awl.yaml");
    std::fs::write(&file, HELD).expect("write");
    let marks = dir.path().join("marks.txt");
    let awl = Awl::bounded(&t.location, LIMIT);
    let run_id = stdout_of(
        "awl run --detach",
        awl.output(&[
            "run",
            "--detach",
            file.to_str().expect("utf-8"),
            "--var",
            &format!("marks={}", marks.display()),
        ])
        .await,
    )
    .trim()
    .to_string();
    let _w1 = awl.worker(dir.path().join("w1.log"), &[]);
    let _w2 = awl.worker(dir.path().join("w2.log"), &[]);
    poll(LIMIT, async || {
        (phase(&awl.status(&run_id).await, "slow") == "running").then_some(())
    })
    .await
    .expect("the slow step runs");
    let said = awl
        .ok(&["pause", &run_id, "--reason", "maintenance", "--by", "ops"])
        .await;
    assert!(said.contains("paused run"), "{said}");
    // The step in flight finishes; the run stays paused and `after` does not start.
    let status = wait_for(LIMIT, "the slow step to finish", async || {
        let s = awl.status(&run_id).await;
        (phase(&s, "slow") == "succeeded").then_some(s)
    })
    .await;
    assert_eq!(status["status"], "PAUSED", "{status:#}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = awl.status(&run_id).await;
    assert_eq!(phase(&status, "after"), "none", "{status:#}");
    assert_eq!(
        std::fs::read_to_string(&marks).unwrap_or_default(),
        "slow\n"
    );
    // Pausing twice is refused, naming the state.
    let again = awl.output(&["pause", &run_id]).await;
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("PAUSED"));
    // Resumed, it goes on where it was: `slow` is not run again.
    awl.ok(&["resume", &run_id, "--by", "ops"]).await;
    let status = wait_for(LIMIT, "the run to finish", async || {
        let s = awl.status(&run_id).await;
        (s["status"] == "SUCCEEDED").then_some(s)
    })
    .await;
    assert_eq!(
        step(&status, "slow")["attempts"].as_array().map(Vec::len),
        Some(1)
    );
    assert_eq!(
        std::fs::read_to_string(&marks).expect("marks"),
        "slow\nafter\n"
    );
    // The log says who paused and resumed, and it replays.
    let events = awl.ok(&["events", "--json", "--stream", &run_id]).await;
    assert!(events.contains("run.paused") && events.contains("run.resumed"));
    assert!(events.contains("\"actor\":\"ops\""), "{events}");
    awl.ok(&["replay", &run_id]).await;
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

const GATED: &str = r#"
name: gated
version: "1.0.0"
steps:
  - { id: ask, type: gate, message: "go?" }
  - { id: then, tool: noop }
"#;

async fn runs_are_paused_resumed_and_cancelled_over_http(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("gated.awl.yaml");
    std::fs::write(&file, GATED).expect("write");
    awl::definitions::register_file(&t.store, &file, "test", chrono::Utc::now())
        .await
        .expect("register");
    let tk = tokens(&t.store, &["coder"]).await;
    let mut config = config();
    config.worker = Some(awl::executor::WorkerConfig::new("serve-test"));
    let server = serve_with(&t.store, config, awl::clock::system_clock()).await;
    let api = Api::of(&server);
    let started = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/runs",
            json!({"workflow": "gated"}),
        )
        .await;
    let run = started["run_id"].as_str().expect("run id").to_string();
    let path = |what: &str| format!("/api/v1/runs/{run}/{what}");
    wait_for(LIMIT, "the gate", async || {
        let view = api
            .fetch(Some(&tk.viewer), &format!("/api/v1/runs/{run}"))
            .await;
        (view["status"] == "WAITING").then_some(())
    })
    .await;
    // A viewer may not; an operator may, and the answer is the run.
    let (status, body) = api
        .call(
            Some(&tk.viewer),
            Method::POST,
            &path("pause"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status.as_u16(), 403, "{body}");
    let paused = api
        .ok(
            &tk.operator,
            Method::POST,
            &path("pause"),
            json!({"reason": "audit"}),
        )
        .await;
    assert_eq!(paused["status"], "PAUSED", "{paused}");
    assert_eq!(paused["paused"]["reason"], "audit");
    assert_eq!(paused["paused"]["by"], "ops");
    // Unknown fields are refused, with the field named.
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            &path("resume"),
            Some(json!({"why": 1})),
        )
        .await;
    assert_eq!(status.as_u16(), 422, "{body}");
    assert!(body.to_string().contains("why"), "{body}");
    // The gate can still be decided while paused, but the next step waits.
    let gate = paused["open_gates"][0]["gate_id"]
        .as_str()
        .expect("gate")
        .to_string();
    api.ok(
        &tk.operator,
        Method::POST,
        &format!("/api/v1/gates/{gate}/approve"),
        json!({}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let view = api
        .get(Some(&tk.viewer), &format!("/api/v1/runs/{run}"))
        .await;
    assert_eq!(view["status"], "PAUSED", "{view}");
    assert!(view["steps"].get("then").is_none(), "{view}");
    let resumed = api
        .ok(&tk.operator, Method::POST, &path("resume"), json!({}))
        .await;
    assert!(resumed["paused"].is_null(), "{resumed}");
    wait_for(LIMIT, "the run to finish", async || {
        let view = api
            .fetch(Some(&tk.viewer), &format!("/api/v1/runs/{run}"))
            .await;
        (view["status"] == "SUCCEEDED").then_some(())
    })
    .await;
    // Resuming a finished run is refused with its state; a second run is paused then
    // cancelled.
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            &path("resume"),
            Some(json!({})),
        )
        .await;
    assert_eq!(status.as_u16(), 409, "{body}");
    assert!(body.to_string().contains("SUCCEEDED"), "{body}");
    let second = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/runs",
            json!({"workflow": "gated"}),
        )
        .await;
    let second = second["run_id"].as_str().expect("run id").to_string();
    // Paused over MCP this time (an operator tool); a viewer's session may not.
    let mcp = format!("{}/mcp", api.base);
    let control = |token: String, id: u64| {
        let (http, mcp, second) = (api.http.clone(), mcp.clone(), second.clone());
        async move {
            let session = crate::mcp::open_session(&http, &mcp, &token).await;
            http.post(&mcp)
                .bearer_auth(&token)
                .header(reqwest::header::ACCEPT, crate::mcp::BOTH)
                .header("mcp-session-id", &session)
                .json(&crate::mcp::call(
                    id,
                    "control_run",
                    json!({"run_id": second, "action": "pause", "reason": "over MCP"}),
                ))
                .send()
                .await
                .expect("an answer")
                .text()
                .await
                .expect("a body")
        }
    };
    let refused = control(tk.viewer.clone(), 7).await;
    assert!(refused.contains("may not call control_run"), "{refused}");
    let answer = control(tk.operator.clone(), 8).await;
    assert!(
        answer.contains("PAUSED") && answer.contains("over MCP"),
        "{answer}"
    );
    let cancelled = api
        .ok(
            &tk.operator,
            Method::POST,
            &format!("/api/v1/runs/{second}/cancel"),
            json!({"reason": "not needed"}),
        )
        .await;
    assert_eq!(cancelled["status"], "CANCELLED", "{cancelled}");
    assert!(
        cancelled["failure"]
            .as_str()
            .unwrap_or_default()
            .contains("not needed")
    );
    server.shutdown().await.expect("stop");
}

fn versioned(version: &str, says: &str) -> String {
    format!(
        "name: versioned\nversion: \"{version}\"\nsteps:\n  - id: say\n    type: shell\n    command: [printf, \"{says}\"]\noutputs:\n  said: \"${{{{ steps.say.outputs.stdout }}}}\"\n"
    )
}

async fn a_run_finishes_on_its_version_and_a_retired_version_takes_no_new_runs(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("versioned.awl.yaml");
    let awl = Awl::bounded(&t.location, LIMIT);
    let start = async |yaml: String| {
        std::fs::write(&file, yaml).expect("write");
        stdout_of(
            "awl run --detach",
            awl.output(&["run", "--detach", file.to_str().expect("utf-8")])
                .await,
        )
        .trim()
        .to_string()
    };
    // Version 1 is started, then version 2 registered (and started) before any worker
    // picks the first run up.
    let first = start(versioned("1.0.0", "one")).await;
    let second = start(versioned("2.0.0", "two")).await;
    let _worker = awl.worker(dir.path().join("worker.log"), &[]);
    for (run, said, version) in [(&first, "one", "1.0.0"), (&second, "two", "2.0.0")] {
        let status = wait_for(LIMIT, "the run to finish", async || {
            let s = awl.status(run).await;
            (s["status"] == "SUCCEEDED").then_some(s)
        })
        .await;
        assert_eq!(status["outcome"]["outputs"]["said"], said, "{status:#}");
        assert_eq!(status["version"], version, "{status:#}");
    }
    let listed = awl.ok(&["workflows", "list", "--json"]).await;
    let entry: Value = serde_json::from_str(listed.lines().next().expect("a line")).expect("JSON");
    assert_eq!(entry["workflow"], "versioned");
    assert_eq!(entry["latest"], "2.0.0");
    assert_eq!(
        entry["versions"].as_array().map(Vec::len),
        Some(2),
        "{entry}"
    );
    let shown = awl.ok(&["workflows", "show", "versioned@1.0.0"]).await;
    assert!(shown.contains("\"one\""), "{shown}");
    let diff = awl
        .ok(&["workflows", "diff", "versioned", "1.0.0", "2.0.0"])
        .await;
    let changed: Vec<&str> = diff
        .lines()
        .filter(|l| l.starts_with('-') || l.starts_with('+'))
        .collect();
    assert!(
        changed
            .iter()
            .any(|l| l.starts_with('-') && l.contains("\"one\"")),
        "{diff}"
    );
    assert!(
        changed
            .iter()
            .any(|l| l.starts_with('+') && l.contains("\"two\"")),
        "{diff}"
    );
    assert!(
        !diff
            .lines()
            .any(|l| l.starts_with('-') && l.contains("\"say\"")),
        "{diff}"
    );

    // Retired, version 2 takes no new runs; a run naming no version gets version 1.
    awl.ok(&[
        "workflows",
        "retire",
        "versioned@2.0.0",
        "--reason",
        "prints the wrong word",
    ])
    .await;
    let listed = awl.ok(&["workflows", "list"]).await;
    assert!(
        listed.contains("new runs: 1.0.0") && listed.contains("prints the wrong word"),
        "{listed}"
    );
    let runs = awl::runs::Runs::new(t.store.clone(), awl::clock::system_clock());
    let refused = runs
        .start(
            awl::runs::StartRun {
                workflow: "versioned@2.0.0".into(),
                ..Default::default()
            },
            "test",
            None,
        )
        .await
        .expect_err("a retired version takes no new runs");
    assert!(refused.to_string().contains("retired"), "{refused}");
    let latest = runs
        .start(
            awl::runs::StartRun {
                workflow: "versioned".into(),
                ..Default::default()
            },
            "test",
            None,
        )
        .await
        .expect("the latest runnable version starts");
    assert_eq!(latest.version, "1.0.0");
    // Retiring a version that does not exist says so.
    let unknown = awl
        .output(&["workflows", "retire", "versioned@9.0.0"])
        .await;
    assert!(!unknown.status.success());
}
