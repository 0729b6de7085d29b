//! Operators' control over runs in flight, through the real binary and the HTTP API,
//! on both stores, with two `awl worker` processes: pausing (no step starts, the step
//! in flight finishes), resuming (the run goes on where it was), cancelling a paused
//! run, and the refusals that say what state the run is in; workflow versions (a run
//! finishes on the version it started with, `awl workflows list|show|diff|retire`);
//! reruns from a step and forks, with their side effects counted; a bulk cancel and a
//! bulk rerun from a step over a filter, each process killed mid-way and carried on; a whole workflow paused (its
//! runs held, new runs queued) and resumed; a long run (or a heavy one) that continues
//! as new; finished runs archived out of the hot log (by hand, and by `awl serve` on a
//! schedule, with their tasks) and read the same, and rerun from the archive.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::cli::{Awl, stdout_of, step};
use crate::support::server::{Api, config, free_port, serve_with, tokens};
use crate::support::{Backend, TestStore, on_both_stores, poll, wait_for};

on_both_stores!(worker_threads = 2;
    a_paused_run_starts_nothing_new_until_resumed,
    runs_are_paused_resumed_and_cancelled_over_http,
    a_run_finishes_on_its_version_and_a_retired_version_takes_no_new_runs,
    a_rerun_from_a_step_keeps_the_steps_before_it_and_a_fork_changes_inputs,
    a_bulk_cancel_counts_first_survives_a_crash_and_acts_once,
    a_bulk_rerun_from_a_step_runs_each_selected_run_again_once,
    a_paused_workflow_holds_its_runs_and_queues_new_ones,
    a_long_run_continues_as_new_and_replays_from_there,
    an_archived_run_reads_the_same_and_survives_a_rebuild,
    serve_archives_finished_runs_with_their_tasks_on_a_schedule,
    a_run_whose_history_grows_heavy_continues_as_new,
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
    let run_id = detach(&awl, &file, &[format!("marks={}", marks.display())]).await;
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
    let status = awl_run_reaches(&awl, &run_id, "SUCCEEDED").await;
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
    run_reaches(&api, &tk.viewer, &run, "WAITING").await;
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
    run_reaches(&api, &tk.viewer, &run, "SUCCEEDED").await;
    // Rerun over HTTP from the step after the gate: the gate is kept, not asked again.
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            &path("rerun"),
            Some(json!({"from_step": "nowhere"})),
        )
        .await;
    assert_eq!(status.as_u16(), 422, "{body}");
    assert!(body.to_string().contains("ask, then"), "{body}");
    let rerun = api
        .ok(
            &tk.operator,
            Method::POST,
            &path("rerun"),
            json!({"from_step": "then"}),
        )
        .await;
    let rerun = rerun["run_id"].as_str().expect("a new run").to_string();
    assert_ne!(rerun, run);
    run_reaches(&api, &tk.viewer, &rerun, "SUCCEEDED").await;
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
    // A bulk pause over HTTP: a viewer may not; a dry run counts; the real one is
    // carried out in the background and followed to its end.
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let started = api
            .ok(
                &tk.operator,
                Method::POST,
                "/api/v1/runs",
                json!({"workflow": "gated"}),
            )
            .await;
        waiting.push(started["run_id"].as_str().expect("run id").to_string());
    }
    for run in &waiting {
        run_reaches(&api, &tk.viewer, run, "WAITING").await;
    }
    let request = json!({"action": "pause", "workflow": "gated", "statuses": ["WAITING"]});
    let (status, body) = api
        .call(
            Some(&tk.viewer),
            Method::POST,
            "/api/v1/bulk",
            Some(request.clone()),
        )
        .await;
    assert_eq!(status.as_u16(), 403, "{body}");
    // A rerun names the step it starts from; no other action takes one.
    for (wrong, says) in [
        (
            json!({"action": "rerun", "workflow": "gated"}),
            "needs the step",
        ),
        (
            json!({"action": "pause", "workflow": "gated", "from_step": "then"}),
            "only a rerun",
        ),
        (
            json!({"action": "rewind", "workflow": "gated"}),
            "retry or rerun",
        ),
    ] {
        let (status, body) = api
            .call(
                Some(&tk.operator),
                Method::POST,
                "/api/v1/bulk",
                Some(wrong),
            )
            .await;
        assert_eq!(status.as_u16(), 422, "{body}");
        assert!(body.to_string().contains(says), "{body}");
    }
    let mut dry = request.clone();
    dry["dry_run"] = json!(true);
    let (status, counted) = api
        .call(Some(&tk.operator), Method::POST, "/api/v1/bulk", Some(dry))
        .await;
    assert_eq!(status.as_u16(), 200, "{counted}");
    assert_eq!(counted["total"], 3, "{counted}");
    assert_eq!(counted["status"], "DRY_RUN");
    let (status, planned) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/bulk",
            Some(request),
        )
        .await;
    assert_eq!(status.as_u16(), 202, "{planned}");
    let id = planned["bulk_id"].as_str().expect("a bulk id").to_string();
    let finished = wait_for(LIMIT, "the bulk pause to finish", async || {
        let view = api
            .fetch(Some(&tk.viewer), &format!("/api/v1/bulk/{id}"))
            .await;
        (view["status"] == "COMPLETED").then_some(view)
    })
    .await;
    assert_eq!(
        (finished["total"].as_u64(), finished["acted"].as_u64()),
        (Some(3), Some(3)),
        "{finished}"
    );
    for run in &waiting {
        let view = api
            .get(Some(&tk.viewer), &format!("/api/v1/runs/{run}"))
            .await;
        assert_eq!(view["status"], "PAUSED", "{view}");
    }
    // The same over MCP: a bulk dry run, and a rerun of the first run.
    let counted = mcp_call(
        &api,
        &tk.operator,
        20,
        "bulk_action",
        json!({"action": "resume", "workflow": "gated", "statuses": ["PAUSED"], "dry_run": true}),
    )
    .await;
    assert!(
        counted.contains("DRY_RUN") && counted.contains("\"total\":3"),
        "{counted}"
    );
    let rerun = mcp_call(
        &api,
        &tk.operator,
        21,
        "rerun_run",
        json!({"run_id": run, "from_step": "then"}),
    )
    .await;
    assert!(
        rerun.contains("run_id") && !rerun.contains(&format!("\"run_id\":\"{run}\"")),
        "{rerun}"
    );
    let refused = mcp_call(
        &api,
        &tk.viewer,
        22,
        "rerun_run",
        json!({"run_id": run, "from_step": "then"}),
    )
    .await;
    assert!(refused.contains("may not call rerun_run"), "{refused}");
    // The whole workflow paused over REST (a viewer may not): a run started now
    // starts paused; resumed over MCP, that run goes on and the runs paused by hand
    // stay paused.
    let (status, body) = api
        .call(
            Some(&tk.viewer),
            Method::POST,
            "/api/v1/workflows/gated/pause",
            Some(json!({})),
        )
        .await;
    assert_eq!(status.as_u16(), 403, "{body}");
    let (status, held) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/workflows/gated/pause",
            Some(json!({"reason": "upstream outage"})),
        )
        .await;
    assert_eq!(status.as_u16(), 202, "{held}");
    assert_eq!(held["paused"], true, "{held}");
    let (status, again) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/workflows/gated/pause",
            Some(json!({})),
        )
        .await;
    assert_eq!(status.as_u16(), 409, "{again}");
    assert!(again.to_string().contains("already paused"), "{again}");
    // The catalog says so, over REST and MCP alike.
    let listed = api.fetch(Some(&tk.viewer), "/api/v1/workflows").await;
    let gated = listed["workflows"]
        .as_array()
        .and_then(|all| all.iter().find(|w| w["workflow"] == "gated"))
        .cloned()
        .unwrap_or_else(|| panic!("gated is listed: {listed}"));
    assert_eq!(gated["latest"], "1.0.0", "{gated}");
    assert!(
        gated["paused"]
            .as_str()
            .is_some_and(|p| p.contains("upstream outage")),
        "{gated}"
    );
    let by_mcp = mcp_call(&api, &tk.viewer, 24, "list_workflows", json!({})).await;
    assert!(
        by_mcp.contains("upstream outage") && by_mcp.contains("\"latest\":\"1.0.0\""),
        "{by_mcp}"
    );
    let queued = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/runs",
            json!({"workflow": "gated"}),
        )
        .await;
    let queued = queued["run_id"].as_str().expect("run id").to_string();
    let view = run_reaches(&api, &tk.viewer, &queued, "PAUSED").await;
    assert!(
        view["open_gates"].as_array().is_none_or(Vec::is_empty),
        "{view}"
    );
    assert!(
        view["paused"]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("upstream outage"),
        "{view}"
    );
    let resumed = mcp_call(
        &api,
        &tk.operator,
        23,
        "control_workflow",
        json!({"workflow": "gated", "action": "resume"}),
    )
    .await;
    assert!(resumed.contains("\"total\":1"), "{resumed}");
    run_reaches(&api, &tk.viewer, &queued, "WAITING").await;
    for run in &waiting {
        run_reaches(&api, &tk.viewer, run, "PAUSED").await;
    }
    // Started over MCP with a priority of its own: recorded in its start; one out of
    // range is refused with what the range is, and starts nothing.
    let by_mcp = mcp_call(
        &api,
        &tk.operator,
        26,
        "start_run",
        json!({"workflow": "gated", "priority": 42}),
    )
    .await;
    let started: Vec<awl::log::RecordedEvent> = crate::support::logged(&t.store, "run.started")
        .await
        .into_iter()
        .filter(|e| by_mcp.contains(&e.stream.id))
        .collect();
    assert_eq!(started.len(), 1, "{by_mcp}");
    assert_eq!(started[0].payload["flow"]["priority"], json!(42));
    let before = crate::support::logged(&t.store, "run.started").await.len();
    let refused = mcp_call(
        &api,
        &tk.operator,
        27,
        "start_run",
        json!({"workflow": "gated", "priority": 5000}),
    )
    .await;
    assert!(refused.contains("-1000 to 1000"), "{refused}");
    assert_eq!(
        crate::support::logged(&t.store, "run.started").await.len(),
        before
    );
    // Retiring a version: not a viewer's to do; an unknown version is named; retired
    // over MCP, the workflow takes no new runs, and the runs on it are left alone.
    let retire = "/api/v1/workflows/gated/versions/1.0.0/retire";
    let (status, body) = api
        .call(
            Some(&tk.viewer),
            Method::POST,
            retire,
            Some(json!({"reason": "old"})),
        )
        .await;
    assert_eq!(status.as_u16(), 403, "{body}");
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/workflows/gated/versions/9.9.9/retire",
            Some(json!({"reason": "old"})),
        )
        .await;
    assert!(
        status.is_client_error() && body.to_string().contains("9.9.9"),
        "{status} {body}"
    );
    let retired = mcp_call(
        &api,
        &tk.operator,
        25,
        "retire_version",
        json!({"workflow": "gated", "version": "1.0.0", "reason": "replaced"}),
    )
    .await;
    assert!(
        retired.contains("replaced") && retired.contains("\"latest\":null"),
        "{retired}"
    );
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/runs",
            Some(json!({"workflow": "gated"})),
        )
        .await;
    assert!(
        status.is_client_error() && body.to_string().contains("no runnable version"),
        "{status} {body}"
    );
    run_reaches(&api, &tk.viewer, &queued, "WAITING").await;
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
        let status = awl_run_reaches(&awl, run, "SUCCEEDED").await;
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

const RELAY: &str = r#"
name: relay
version: "1.0.0"
inputs:
  marks: { type: string, required: true }
  flag: { type: string, required: true }
  label: { type: string, default: first }
steps:
  - id: fetch
    type: shell
    script: 'echo fetch >> "$MARKS"; printf "data-%s" "$LABEL"'
    env: { MARKS: "${{ inputs.marks }}", LABEL: "${{ inputs.label }}" }
  - id: process
    type: shell
    script: 'echo process >> "$MARKS"; test ! -e "$FLAG" && printf "processed %s" "$FROM"'
    env: { MARKS: "${{ inputs.marks }}", FLAG: "${{ inputs.flag }}", FROM: "${{ steps.fetch.outputs.stdout }}" }
  - id: publish
    type: shell
    script: 'echo publish >> "$MARKS"'
    env: { MARKS: "${{ inputs.marks }}" }
outputs:
  result: "${{ steps.process.outputs.stdout }}"
"#;

async fn a_rerun_from_a_step_keeps_the_steps_before_it_and_a_fork_changes_inputs(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("relay.awl.yaml");
    std::fs::write(&file, RELAY).expect("write");
    let (marks, flag) = (dir.path().join("marks.txt"), dir.path().join("broken"));
    std::fs::write(&flag, "").expect("flag");
    let awl = Awl::bounded(&t.location, LIMIT);
    let read_marks = || std::fs::read_to_string(&marks).unwrap_or_default();
    let ran = awl
        .output(&[
            "run",
            file.to_str().expect("utf-8"),
            "--var",
            &format!("marks={}", marks.display()),
            "--var",
            &format!("flag={}", flag.display()),
        ])
        .await;
    assert!(!ran.status.success(), "the first run fails at `process`");
    let origin = crate::support::cli::run_id_of(&String::from_utf8_lossy(&ran.stderr));
    assert_eq!(read_marks(), "fetch\nprocess\n");

    // Refusals name what is wrong.
    let unknown = awl.output(&["rerun", &origin, "--from", "nope"]).await;
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        !unknown.status.success() && said.contains("fetch, process, publish"),
        "{said}"
    );
    let past_failure = awl.output(&["rerun", &origin, "--from", "publish"]).await;
    let said = String::from_utf8_lossy(&past_failure.stderr);
    assert!(
        !past_failure.status.success() && said.contains("step `process` did not succeed"),
        "{said}"
    );

    // Fixed, rerun from `process`: `fetch` is not run again, its output is used.
    std::fs::remove_file(&flag).expect("unflag");
    let rerun = awl
        .output(&["rerun", &origin, "--from", "process", "--by", "ops"])
        .await;
    let said = String::from_utf8_lossy(&rerun.stderr).to_string();
    assert!(rerun.status.success(), "{said}");
    let again = crate::support::cli::run_id_of(&said);
    assert_ne!(again, origin);
    assert_eq!(
        read_marks(),
        "fetch\nprocess\nprocess\npublish\n",
        "fetch ran once"
    );
    let status = awl.status(&again).await;
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(
        status["outcome"]["outputs"]["result"],
        "processed data-first"
    );
    assert_eq!(status["origin"]["run_id"], origin.as_str(), "{status:#}");
    assert_eq!(status["origin"]["kind"], "rerun");
    assert_eq!(
        step(&status, "fetch")["carried_from"],
        origin.as_str(),
        "{status:#}"
    );
    assert_eq!(step(&status, "fetch")["attempts"], json!([]));
    let before = awl.status(&origin).await;
    assert_eq!(before["status"], "FAILED", "the origin stays as it ended");
    assert_eq!(before["derived"][0]["run_id"], again.as_str(), "{before:#}");
    assert_eq!(before["derived"][0]["by"], "ops");

    // A fork from the first step with a changed input runs everything again.
    let fork = awl
        .output(&["rerun", &again, "--from", "fetch", "--var", "label=second"])
        .await;
    let said = String::from_utf8_lossy(&fork.stderr).to_string();
    assert!(fork.status.success(), "{said}");
    let forked = crate::support::cli::run_id_of(&said);
    let status = awl.status(&forked).await;
    assert_eq!(
        status["outcome"]["outputs"]["result"],
        "processed data-second"
    );
    assert_eq!(status["origin"]["kind"], "fork");
    assert_eq!(
        read_marks(),
        "fetch\nprocess\nprocess\npublish\nfetch\nprocess\npublish\n"
    );
    // Every run replays, and the log is sound.
    for run in [&origin, &again, &forked] {
        awl.ok(&["replay", run]).await;
    }
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

const CUSTOMERS: &str = r#"
name: per-customer
version: "1.0.0"
inputs:
  customer: { type: string, required: true }
steps:
  - { id: wait, type: gate, message: "go?" }
"#;

async fn a_bulk_cancel_counts_first_survives_a_crash_and_acts_once(backend: Backend) {
    /// Runs of each customer: a batch of one run each, so the process is caught with
    /// most of them still to do.
    const EACH: usize = 400;
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("per-customer.awl.yaml");
    std::fs::write(&file, CUSTOMERS).expect("write");
    let registered = awl::definitions::register_file(&t.store, &file, "test", chrono::Utc::now())
        .await
        .expect("register");
    let runs = awl::runs::Runs::new(t.store.clone(), awl::clock::system_clock());
    let mut of_acme = std::collections::BTreeSet::new();
    for i in 0..2 * EACH {
        let customer = if i % 2 == 0 { "acme" } else { "globex" };
        let mut inputs = serde_json::Map::new();
        inputs.insert("customer".into(), json!(customer));
        let started = runs
            .start_version(&registered, inputs, "test")
            .await
            .expect("start");
        if customer == "acme" {
            of_acme.insert(started.run_id.to_string());
        }
    }
    let awl = Awl::bounded(&t.location, LIMIT);
    // A dry run says how many, and touches none.
    let head = t.store.head().await.expect("head");
    let dry = awl
        .ok(&[
            "bulk",
            "cancel",
            "--workflow",
            "per-customer",
            "--input",
            "customer=acme",
            "--dry-run",
        ])
        .await;
    assert!(dry.contains(&format!("would cancel {EACH} runs")), "{dry}");
    assert_eq!(
        t.store.head().await.expect("head"),
        head,
        "a dry run writes nothing"
    );

    // The real one, a run per batch; the process is frozen as soon as it reports its
    // first batch, then killed.
    let log = dir.path().join("bulk.log");
    let mut child = awl
        .command(&[
            "bulk",
            "cancel",
            "--workflow",
            "per-customer",
            "--input",
            "customer=acme",
            "--batch",
            "1",
            "--reason",
            "customer left",
            "--by",
            "ops",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start awl bulk");
    let pid = child.id().expect("running").to_string();
    let bulk_id = tokio::time::timeout(Duration::from_secs(LIMIT), async {
        loop {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            if said.contains(" done") {
                let _ = std::process::Command::new("kill")
                    .args(["-STOP", &pid])
                    .status();
                let id = said
                    .lines()
                    .find_map(|l| l.strip_prefix("bulk ")?.split(':').next())
                    .map(str::to_string);
                break id;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the bulk action records a batch")
    .expect("it says its id");
    child.start_kill().expect("kill");
    let _ = child.wait().await;
    let shown: Value =
        serde_json::from_str(&awl.ok(&["bulk", "show", &bulk_id, "--json"]).await).expect("JSON");
    assert_eq!(shown["total"], EACH, "{shown}");
    let through = shown["through"].as_u64().expect("through");
    assert!(
        through > 0 && through < EACH as u64,
        "killed mid-way: {shown}"
    );
    assert_eq!(shown["status"], "RUNNING");

    // `awl serve`, starting, carries it on from its last batch to the end; `awl bulk
    // continue` then has nothing left to do.
    let server = crate::support::server::serve(&t.store).await;
    poll(LIMIT, async || {
        let shown = awl.ok(&["bulk", "show", &bulk_id, "--json"]).await;
        shown.contains("\"COMPLETED\"").then_some(())
    })
    .await
    .expect("the server carries the bulk action on");
    server.shutdown().await.expect("stop");
    let done = awl.ok(&["bulk", "continue", &bulk_id]).await;
    assert!(done.contains(&format!("{EACH} of {EACH} runs")), "{done}");
    let shown: Value =
        serde_json::from_str(&awl.ok(&["bulk", "show", &bulk_id, "--json"]).await).expect("JSON");
    assert_eq!(shown["status"], "COMPLETED", "{shown}");
    let acted = shown["acted"].as_u64().unwrap_or(0);
    let skipped = shown["skipped"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(acted + skipped, EACH as u64, "{shown}");
    // Every acme run is cancelled once, by ops with the reason; no globex run is.
    let cancels = crate::support::logged(&t.store, "run.cancelled").await;
    let mut cancelled = std::collections::BTreeSet::new();
    for e in &cancels {
        assert!(
            cancelled.insert(e.stream.id.clone()),
            "{} cancelled twice",
            e.stream.id
        );
        assert_eq!(e.metadata.actor.as_deref(), Some("ops"), "{e:?}");
        assert_eq!(e.payload["reason"], "customer left", "{e:?}");
    }
    assert_eq!(cancelled, of_acme, "exactly the acme runs are cancelled");
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

/// The relay runs of a status, counted from the runs view.
async fn relays(runs: &awl::runs::Runs, status: &str) -> usize {
    let filter = awl::projections::queries::RunFilter {
        statuses: vec![status.to_string()],
        workflow: Some("relay".into()),
        limit: 10_000,
        ..Default::default()
    };
    runs.list(&filter).await.expect("the runs").len()
}

async fn a_bulk_rerun_from_a_step_runs_each_selected_run_again_once(backend: Backend) {
    /// Runs the bulk rerun selects (`label=first`), and runs it leaves alone.
    const PICKED: usize = 40;
    const OTHERS: usize = 5;
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("relay.awl.yaml");
    std::fs::write(&file, RELAY).expect("write");
    let (marks, flag) = (dir.path().join("marks.txt"), dir.path().join("broken"));
    std::fs::write(&flag, "").expect("flag");
    let registered = awl::definitions::register_file(&t.store, &file, "test", chrono::Utc::now())
        .await
        .expect("register");
    let runs = awl::runs::Runs::new(t.store.clone(), awl::clock::system_clock());
    let mut picked = std::collections::BTreeSet::new();
    for i in 0..PICKED + OTHERS {
        let label = if i < PICKED { "first" } else { "other" };
        let mut inputs = serde_json::Map::new();
        inputs.insert("marks".into(), json!(marks.display().to_string()));
        inputs.insert("flag".into(), json!(flag.display().to_string()));
        inputs.insert("label".into(), json!(label));
        let started = runs
            .start_version(&registered, inputs, "test")
            .await
            .expect("start");
        if label == "first" {
            picked.insert(started.run_id.to_string());
        }
    }
    let awl = Awl::bounded(&t.location, LIMIT);
    let workers = [
        awl.worker(dir.path().join("w1.log"), &[]),
        awl.worker(dir.path().join("w2.log"), &[]),
    ];
    poll(LIMIT, async || {
        (relays(&runs, "FAILED").await == PICKED + OTHERS).then_some(())
    })
    .await
    .expect("every run fails at `process`");
    // Workers whose breaker for the broken script is closed (after five failures in a
    // row the old ones fail it fast without running it, which is why `process` ran
    // fewer times than `fetch`).
    drop(workers);
    let _w1 = awl.worker(dir.path().join("w3.log"), &[]);
    let _w2 = awl.worker(dir.path().join("w4.log"), &[]);
    let count = |text: &str, mark: &str| text.lines().filter(|l| *l == mark).count();
    let before = std::fs::read_to_string(&marks).expect("marks");
    assert_eq!(count(&before, "fetch"), PICKED + OTHERS);
    let processed = count(&before, "process");

    // The step is fixed. A dry run counts the picked runs; a rerun without its step, or
    // from a step that is not there, is refused before anything is recorded.
    std::fs::remove_file(&flag).expect("unflag");
    let select = [
        "--workflow",
        "relay",
        "--status",
        "FAILED",
        "--input",
        "label=first",
    ];
    let head = t.store.head().await.expect("head");
    let dry = awl
        .ok(&[
            &["bulk", "rerun", "--from", "process"][..],
            &select,
            &["--dry-run"],
        ]
        .concat())
        .await;
    assert!(dry.contains(&format!("would rerun {PICKED} runs")), "{dry}");
    let missing = awl
        .output(&[&["bulk", "rerun"][..], &select].concat())
        .await;
    assert!(!missing.status.success(), "the step is required");
    assert_eq!(
        t.store.head().await.expect("head"),
        head,
        "nothing recorded"
    );

    // The real one, a run per batch; the process is frozen as soon as it reports its
    // first batch, then killed.
    let log = dir.path().join("bulk.log");
    let mut child = awl
        .command(
            &[
                &["bulk", "rerun", "--from", "process", "--batch", "1"][..],
                &select,
                &["--by", "ops", "--reason", "parser fixed"],
            ]
            .concat(),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start awl bulk");
    let pid = child.id().expect("running").to_string();
    let bulk_id = tokio::time::timeout(Duration::from_secs(LIMIT), async {
        loop {
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            if said.contains(" done") {
                let _ = std::process::Command::new("kill")
                    .args(["-STOP", &pid])
                    .status();
                let id = said
                    .lines()
                    .find_map(|l| l.strip_prefix("bulk ")?.split(':').next())
                    .map(str::to_string);
                break id;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the bulk rerun records a batch")
    .expect("it says its id");
    child.start_kill().expect("kill");
    let _ = child.wait().await;
    let bulks = awl::bulk::BulkActions::new(t.store.clone(), awl::clock::system_clock());
    let stopped = bulks
        .get(bulk_id.parse().expect("a bulk id"))
        .await
        .expect("the bulk action");
    assert_eq!(stopped.from_step(), Some("process"));
    assert!(
        stopped.through() > 0 && stopped.remaining().len() > 1,
        "killed mid-way: {} of {}",
        stopped.through(),
        stopped.total()
    );
    // A process killed mid-batch may have started its next run's rerun without
    // recording the batch: that is done here as it would have, and carrying on must
    // not start that run twice.
    let next = stopped.remaining()[0];
    let id = stopped.id().expect("an id");
    runs.rerun_as(
        awl::bulk::derived_run_id(id, next),
        next,
        "process",
        None,
        "ops",
    )
    .await
    .expect("the killed process's rerun");
    let done = awl.ok(&["bulk", "continue", &bulk_id]).await;
    assert!(
        done.contains(&format!(
            "{PICKED} of {PICKED} runs ({PICKED} acted on, 0 skipped)"
        )),
        "{done}"
    );
    poll(LIMIT, async || {
        (relays(&runs, "SUCCEEDED").await == PICKED).then_some(())
    })
    .await
    .expect("every rerun succeeds");

    // `fetch` ran once per run, never again; `process` and `publish` once per rerun.
    let after = std::fs::read_to_string(&marks).expect("marks");
    assert_eq!(count(&after, "fetch"), PICKED + OTHERS, "fetch is carried");
    assert_eq!(count(&after, "process"), processed + PICKED);
    assert_eq!(count(&after, "publish"), PICKED);
    assert_eq!(
        relays(&runs, "FAILED").await,
        PICKED + OTHERS,
        "origins stay"
    );
    // Each picked run has exactly one rerun, linked both ways, noted by ops.
    let derived = crate::support::logged(&t.store, "run.derived").await;
    let mut origins = std::collections::BTreeSet::new();
    for e in &derived {
        assert!(
            origins.insert(e.stream.id.clone()),
            "{} rerun twice",
            e.stream.id
        );
        assert_eq!(e.payload["from_step"], "process", "{e:?}");
        assert_eq!(e.metadata.actor.as_deref(), Some("ops"), "{e:?}");
        let rerun = e.payload["run_id"].as_str().expect("a run id");
        let status = awl.status(rerun).await;
        assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
        assert_eq!(status["origin"]["run_id"], e.stream.id.as_str());
        assert_eq!(step(&status, "fetch")["carried_from"], e.stream.id.as_str());
    }
    assert_eq!(origins, picked, "exactly the picked runs are rerun");
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

async fn a_paused_workflow_holds_its_runs_and_queues_new_ones(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("held.awl.yaml");
    std::fs::write(&file, HELD).expect("write");
    let awl = Awl::bounded(&t.location, LIMIT);
    let marks = |name: &str| dir.path().join(format!("{name}.txt"));
    let start = |name: &str| {
        let var = format!("marks={}", marks(name).display());
        let (awl, file) = (&awl, &file);
        async move { detach(awl, file, &[var]).await }
    };
    let (held, by_hand) = (start("held").await, start("by_hand").await);
    let _w1 = awl.worker(dir.path().join("w1.log"), &[]);
    let _w2 = awl.worker(dir.path().join("w2.log"), &[]);
    for run in [&held, &by_hand] {
        poll(LIMIT, async || {
            (phase(&awl.status(run).await, "slow") == "running").then_some(())
        })
        .await
        .expect("the slow step runs");
    }
    awl.ok(&["pause", &by_hand, "--by", "ops"]).await;
    let said = awl
        .ok(&[
            "workflows",
            "pause",
            "held",
            "--reason",
            "db migration",
            "--by",
            "ops",
        ])
        .await;
    assert!(said.contains("1 active runs held"), "{said}");
    let listed = awl.ok(&["workflows", "list"]).await;
    assert!(listed.contains("PAUSED by ops"), "{listed}");
    // A run started while the workflow is paused queues: it starts no step.
    let queued = start("queued").await;
    for run in [&held, &by_hand] {
        let status = wait_for(LIMIT, "the slow step to finish", async || {
            let s = awl.status(run).await;
            (phase(&s, "slow") == "succeeded").then_some(s)
        })
        .await;
        assert_eq!(status["status"], "PAUSED", "{status:#}");
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let status = awl.status(&queued).await;
    assert_eq!(status["status"], "PAUSED", "{status:#}");
    assert_eq!(phase(&status, "slow"), "none", "{status:#}");
    assert_eq!(phase(&awl.status(&held).await, "after"), "none");
    assert!(!marks("queued").exists());
    // Resumed: the held and the queued runs go on; the one paused by hand stays.
    let said = awl
        .ok(&["workflows", "resume", "held", "--by", "ops"])
        .await;
    assert!(said.contains("2 held runs go on"), "{said}");
    for run in [&held, &queued] {
        awl_run_reaches(&awl, run, "SUCCEEDED").await;
    }
    assert_eq!(awl.status(&by_hand).await["status"], "PAUSED");
    assert_eq!(
        std::fs::read_to_string(marks("held")).expect("marks"),
        "slow\nafter\n"
    );
    let events = awl.ok(&["events", "--json", "--stream", "held"]).await;
    assert!(
        events.contains("workflow.paused") && events.contains("workflow.resumed"),
        "{events}"
    );
    for run in [&held, &queued] {
        awl.ok(&["replay", run]).await;
    }
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

/// Fails four times (a fifth would open the step's circuit breaker), then prints what
/// it was given: a history of retries.
const POLLING: &str = r#"
name: polling
version: "1.0.0"
inputs:
  count: { type: string, required: true }
  token: { type: string, required: true, secret: true }
steps:
  - id: poll
    type: shell
    script: 'n=$(cat "$COUNT" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$COUNT"; [ "$n" -ge 5 ] && echo "ready $TOKEN"'
    env: { COUNT: "${{ inputs.count }}", TOKEN: "${{ inputs.token }}" }
    retry: { max_attempts: 20, backoff: constant, base_seconds: 0 }
  - id: after
    type: shell
    script: 'echo "after: $SAID"'
    env: { SAID: "${{ steps.poll.outputs.stdout }}" }
"#;

async fn a_long_run_continues_as_new_and_replays_from_there(backend: Backend) {
    const TOKEN: &str = "tok-5f0c1e2d9a";
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("polling.awl.yaml");
    std::fs::write(&file, POLLING).expect("write");
    let count = dir.path().join("count.txt");
    let awl = Awl::bounded(&t.location, LIMIT);
    let vars = [
        format!("count={}", count.display()),
        format!("token={TOKEN}"),
    ];
    let run_id = detach(&awl, &file, &vars).await;
    let limit = ["--history-limit", "6"];
    let _w1 = awl.worker(dir.path().join("w1.log"), &limit);
    let _w2 = awl.worker(dir.path().join("w2.log"), &limit);
    let status = awl_run_reaches(&awl, &run_id, "SUCCEEDED").await;
    // Every attempt ran once, whichever segment of the history it fell in.
    assert_eq!(std::fs::read_to_string(&count).expect("count").trim(), "5");
    let said = step(&status, "after")["output"]["stdout"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(said.trim(), "after: ready [redacted]", "{status:#}");
    let events = awl.ok(&["events", "--json", "--stream", &run_id]).await;
    let continued = events.matches("\"run.continued\"").count();
    assert!(continued >= 3, "{continued} continuations in\n{events}");
    assert!(
        !events.contains(TOKEN),
        "the secret stays sealed in every continuation"
    );
    // Replay walks the whole history and checks each continuation carries the state
    // its history folds to; the log and the projections check out.
    awl.ok(&["replay", &run_id]).await;
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

async fn an_archived_run_reads_the_same_and_survives_a_rebuild(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let awl = Awl::bounded(&t.location, LIMIT);
    let (done, gated) = (
        dir.path().join("done.awl.yaml"),
        dir.path().join("gated.awl.yaml"),
    );
    std::fs::write(&done, versioned("1.0.0", "archived")).expect("write");
    std::fs::write(&gated, GATED).expect("write");
    let path = |p: &std::path::Path| p.to_str().expect("utf-8").to_string();
    let mut finished = Vec::new();
    for _ in 0..2 {
        let out = awl.output(&["run", &path(&done)]).await;
        assert!(out.status.success(), "{out:?}");
        finished.push(crate::support::cli::run_id_of(&String::from_utf8_lossy(
            &out.stderr,
        )));
    }
    // A run still waiting holds the log's head meanwhile: it is not archived.
    let waiting = stdout_of(
        "awl run --detach",
        awl.output(&["run", "--detach", &path(&gated)]).await,
    )
    .trim()
    .to_string();
    let _w = awl.worker(dir.path().join("w.log"), &[]);
    awl_run_reaches(&awl, &waiting, "WAITING").await;
    let history = |run: String| {
        let awl = &awl;
        async move { awl.ok(&["events", "--json", "--stream", &run]).await }
    };
    let before_log = awl.ok(&["events", "--json"]).await;
    let before_run = history(finished[0].clone()).await;
    let before_status = awl.status(&finished[0]).await;
    let before_list = awl.ok(&["list", "--json"]).await;
    let dry = awl
        .ok(&["archive", "--older-than", "0s", "--dry-run"])
        .await;
    assert!(dry.contains("would archive 2 finished runs"), "{dry}");
    let moved = awl.ok(&["archive", "--older-than", "0s"]).await;
    assert!(moved.contains("archived 2 runs"), "{moved}");
    // Out of the hot log: a second pass finds nothing left to move, and a dry run
    // none to select.
    let again = awl.ok(&["archive", "--older-than", "0s"]).await;
    assert!(again.contains("archived 0 runs"), "{again}");
    let dry = awl
        .ok(&["archive", "--older-than", "0s", "--dry-run"])
        .await;
    assert!(dry.contains("would archive 0 finished runs"), "{dry}");
    // The runs view still lists both as finished, a page at a time by id (the
    // archive's pass reads it so); the waiting run is not among them.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = awl::projections::queries::finished_run_ids(
            &t.store,
            chrono::Utc::now(),
            after.as_deref(),
            1,
        )
        .await
        .expect("finished runs");
        let Some(last) = page.last().cloned() else {
            break;
        };
        paged.extend(page);
        after = Some(last);
    }
    let mut expected = finished.clone();
    expected.sort();
    assert_eq!(paged, expected);
    // The log, the run's history, its status and the views read the same.
    assert_eq!(awl.ok(&["events", "--json"]).await, before_log);
    assert_eq!(history(finished[0].clone()).await, before_run);
    assert_eq!(awl.status(&finished[0]).await, before_status);
    assert_eq!(awl.ok(&["list", "--json"]).await, before_list);
    awl.ok(&["replay", &finished[0]]).await;
    // Read models rebuilt from position 0 read the archive too; the live run goes on.
    awl.ok(&["projections", "rebuild"]).await;
    assert_eq!(awl.ok(&["list", "--json"]).await, before_list);
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
    // Over HTTP: admins only; a dry run counts the runs still to move (none).
    let tk = tokens(&t.store, &[]).await;
    let server = serve_with(&t.store, config(), awl::clock::system_clock()).await;
    let api = Api::of(&server);
    let request = json!({"older_than_seconds": 0, "dry_run": true});
    let (status, body) = api
        .call(
            Some(&tk.operator),
            Method::POST,
            "/api/v1/archive",
            Some(request.clone()),
        )
        .await;
    assert_eq!(status.as_u16(), 403, "{body}");
    let counted = api
        .ok(&tk.admin, Method::POST, "/api/v1/archive", request)
        .await;
    assert_eq!(counted["selected"], 0, "{counted}");
    assert_eq!(counted["archived"], 0, "{counted}");
    let moved = api
        .ok(
            &tk.admin,
            Method::POST,
            "/api/v1/archive",
            json!({"older_than_seconds": 0}),
        )
        .await;
    assert_eq!(
        (moved["archived"].as_u64(), moved["events"].as_u64()),
        (Some(0), Some(0)),
        "{moved}"
    );
    let refused = mcp_call(
        &api,
        &tk.operator,
        30,
        "archive_runs",
        json!({"older_than_seconds": 0}),
    )
    .await;
    assert!(refused.contains("may not call archive_runs"), "{refused}");
    server.shutdown().await.expect("stop");
    // Appends go on after the move: positions keep rising from the head it kept.
    awl.ok(&["cancel", &waiting]).await;
    awl_run_reaches(&awl, &waiting, "CANCELLED").await;
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

const REVIEWED: &str = r#"
name: reviewed
version: "1.0.0"
steps:
  - id: implement
    type: agent
    prompt: "Implement it"
    capabilities: [rust]
  - id: after
    tool: noop
"#;

async fn serve_archives_finished_runs_with_their_tasks_on_a_schedule(backend: Backend) {
    use awl::log::{StreamRef, StreamType};
    let t = TestStore::new(backend).await;
    if backend == Backend::Postgres {
        // Retention on Postgres moves a run with its period's partition, or row by
        // row once the period is over: one-second periods keep the test short.
        t.pg_execute("UPDATE event_partitioning SET run_period = 1")
            .await
            .expect("one-second run periods");
    }
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join("reviewed.awl.yaml"), REVIEWED).expect("write");
    std::fs::write(dir.path().join("gated.awl.yaml"), GATED).expect("write");
    let tk = tokens(&t.store, &["coder"]).await;
    let awl = Awl::bounded(&t.location, LIMIT);
    let port = free_port();
    let log = std::fs::File::create(dir.path().join("serve.log")).expect("log");
    let mut serve = awl
        .command(&[
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--workflows",
            dir.path().to_str().expect("utf-8"),
            "--archive-older-than",
            "0s",
            "--archive-every",
            "1s",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("start awl serve");
    let api = Api::at(format!("http://127.0.0.1:{port}"));
    api.wait_healthy(30).await;
    let coder = &tk.agents["coder"];
    api.ok(
        coder,
        Method::POST,
        "/api/v1/agents",
        json!({"capabilities": ["rust"]}),
    )
    .await;
    let started = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/runs",
            json!({"workflow": "reviewed"}),
        )
        .await;
    let run_id = started["run_id"].as_str().expect("run id").to_string();
    let got = api
        .ok(
            coder,
            Method::POST,
            "/api/v1/agents/coder/wait",
            json!({"timeout_seconds": 20}),
        )
        .await;
    let task_id = got["task"]["task_id"].as_str().expect("a task").to_string();
    for (action, body) in [
        ("ack", json!({})),
        ("complete", json!({"result": {"ok": 1}})),
    ] {
        api.ok(
            coder,
            Method::POST,
            &format!("/api/v1/tasks/{task_id}/{action}"),
            body,
        )
        .await;
    }
    let finished = run_reaches(&api, &tk.viewer, &run_id, "SUCCEEDED").await;
    // The finished run's last event is the log's head, which a move never takes: a
    // run waiting at a gate moves the head on.
    let waiting = api
        .ok(
            &tk.operator,
            Method::POST,
            "/api/v1/runs",
            json!({"workflow": "gated"}),
        )
        .await["run_id"]
        .as_str()
        .expect("run id")
        .to_string();
    run_reaches(&api, &tk.viewer, &waiting, "WAITING").await;
    let (run, task) = (
        StreamRef::new(StreamType::Run, run_id.as_str()),
        StreamRef::new(StreamType::Task, task_id.as_str()),
    );
    wait_for(
        LIMIT,
        "the schedule to archive the run and its task",
        async || {
            let moved = t.store.is_archived(&run).await.expect("read")
                && t.store.is_archived(&task).await.expect("read");
            moved.then_some(())
        },
    )
    .await;
    assert!(
        !t.store
            .is_archived(&StreamRef::new(StreamType::Run, waiting.as_str()))
            .await
            .expect("read")
    );
    // Read from the archive: the run and its task as they were.
    let view = api
        .fetch(Some(&tk.viewer), &format!("/api/v1/runs/{run_id}"))
        .await;
    assert_eq!(view, finished);
    let task_view = api
        .fetch(Some(&tk.viewer), &format!("/api/v1/tasks/{task_id}"))
        .await;
    assert_eq!(task_view["status"], "COMPLETED", "{task_view}");
    // An archived run is rerun from a step: the agent's step is carried, not queued
    // again; the link is on the new run (the origin's history is closed).
    let rerun = api
        .ok(
            &tk.operator,
            Method::POST,
            &format!("/api/v1/runs/{run_id}/rerun"),
            json!({"from_step": "after"}),
        )
        .await;
    let rerun_id = rerun["run_id"].as_str().expect("run id").to_string();
    let again = run_reaches(&api, &tk.viewer, &rerun_id, "SUCCEEDED").await;
    assert_eq!(again["origin"]["run_id"], run_id.as_str(), "{again}");
    let board = api.fetch(Some(&tk.viewer), "/api/v1/tasks").await;
    assert_eq!(
        board.to_string().matches("Implement it").count(),
        1,
        "one task in all: {board}"
    );
    assert_eq!(
        api.fetch(Some(&tk.viewer), &format!("/api/v1/runs/{run_id}"))
            .await,
        finished
    );
    serve.kill().await.expect("stop awl serve");
    let check = awl.ok(&["check"]).await;
    assert!(check.contains("no problems"), "{check}");
}

/// `steps` shell steps, each printing `width` characters.
fn wordy(steps: usize, width: usize) -> String {
    let mut text = String::from("name: wordy\nversion: \"1.0.0\"\nsteps:\n");
    for i in 0..steps {
        text.push_str(&format!(
            "  - {{ id: s{i}, type: shell, script: 'printf \"%0{width}d\" 0' }}\n"
        ));
    }
    text
}

async fn a_run_whose_history_grows_heavy_continues_as_new(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("wordy.awl.yaml");
    std::fs::write(&file, wordy(40, 1500)).expect("write");
    let awl = Awl::bounded(&t.location, LIMIT);
    let run_id = detach(&awl, &file, &[]).await;
    // Far below the limit in events (10,000 by default), past 20 kB in bytes.
    let _w = awl.worker(dir.path().join("w.log"), &["--history-bytes", "20000"]);
    let status = awl_run_reaches(&awl, &run_id, "SUCCEEDED").await;
    assert_eq!(
        step(&status, "s39")["output"]["stdout"]
            .as_str()
            .map(str::len),
        Some(1500),
        "{status:#}"
    );
    let events = awl.ok(&["events", "--json", "--stream", &run_id]).await;
    let continued = events.matches("\"run.continued\"").count();
    assert!(
        (1..=3).contains(&continued),
        "{continued} continuations in\n{events}"
    );
    awl.ok(&["replay", &run_id]).await;
}

/// `awl run --detach FILE --var V...`: the id of the run it started.
async fn detach(awl: &Awl, file: &std::path::Path, vars: &[String]) -> String {
    let mut args = vec!["run", "--detach", file.to_str().expect("utf-8")];
    for var in vars {
        args.extend(["--var", var.as_str()]);
    }
    stdout_of("awl run --detach", awl.output(&args).await)
        .trim()
        .to_string()
}

/// One MCP tool call in a session of its own, over raw HTTP: the answer's text.
async fn mcp_call(api: &Api, token: &str, id: u64, tool: &str, args: Value) -> String {
    let mcp = format!("{}/mcp", api.base);
    let session = crate::mcp::open_session(&api.http, &mcp, token).await;
    api.http
        .post(&mcp)
        .bearer_auth(token)
        .header(reqwest::header::ACCEPT, crate::mcp::BOTH)
        .header("mcp-session-id", &session)
        .json(&crate::mcp::call(id, tool, args))
        .send()
        .await
        .expect("an answer")
        .text()
        .await
        .expect("a body")
}

/// Poll `GET /api/v1/runs/{run}` until the run is `status` (or fail after LIMIT).
async fn run_reaches(api: &Api, token: &str, run: &str, status: &str) -> Value {
    wait_for(LIMIT, &format!("run {run} to be {status}"), async || {
        let view = api.fetch(Some(token), &format!("/api/v1/runs/{run}")).await;
        (view["status"] == status).then_some(view)
    })
    .await
}

/// Poll `awl status RUN` until the run is `status` (or fail after LIMIT).
async fn awl_run_reaches(awl: &Awl, run: &str, status: &str) -> Value {
    wait_for(LIMIT, &format!("run {run} to be {status}"), async || {
        let s = awl.status(run).await;
        (s["status"] == status).then_some(s)
    })
    .await
}
