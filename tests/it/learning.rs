//! Learning from history, end to end on both stores: agents of two teams report tool
//! calls over HTTP while doing board tasks; `awl learn mine` proposes what one team
//! repeated (with the confidence its failures leave), and nothing for the team that
//! did it too rarely; the generated file passes `awl validate`; a person approves it
//! and it runs and replays like any workflow; a rebuild of the projections from
//! position 0 gives the same proposals; each team sees only its own.
//!
//! Workflow runs are observed too: the shell steps of a team's runs (started over
//! REST, on the server's worker) are mined like reported calls, and what its runs
//! repeat is proposed as a workflow of those same steps.
//!
//! Two processes' miners taking turns over one log (each keeping its own cache of
//! pattern details) leave the rows a rebuild from position 0 makes.
//!
//! Calls spread past the window (a team's sessions three minutes between calls) are
//! not learned, live or rebuilt, while the same sequence done quickly is.
//!
//! And through the server alone: agents report their calls over MCP, the server's
//! learner proposes without being asked, the inbox, decisions and suggestions over REST
//! and MCP answer each token with its own team's learning, an agent token cannot
//! approve, and the approved workflow runs on the server's worker.

use reqwest::Method;
use serde_json::{Value, json};

use awl::auth::{Role, create_team_token};
use awl::domain::learning::Context;
use awl::learning::{LearnConfig, Learner, Viewer};

use crate::support::cli::{Awl, run_id_of, stdout_of};
use crate::support::server::{Api, config, serve_with};
use crate::support::{Backend, TestStore, on_both_stores, wait_for};

on_both_stores!(worker_threads = 2;
    repeated_tool_calls_become_a_workflow_a_person_approves_and_runs,
    the_server_learns_from_mcp_reports_and_people_decide_over_rest,
    the_calls_of_workflow_runs_are_learned_too,
    two_miners_taking_turns_mine_what_one_rebuild_does,
    a_tool_named_with_the_separator_is_learned_and_a_quiet_round_proposes_nothing,
    pattern_counters_are_rewritten_in_place,
    calls_spread_past_the_window_are_not_learned,
    a_session_keeps_its_tail_until_it_ends,
);

const LIMIT: u64 = 60;

async fn team_token(t: &TestStore, name: &str, role: Role, team: &str) -> String {
    create_team_token(&t.store, name, role, Some(team), "test", chrono::Utc::now())
        .await
        .expect("a token")
        .1
}

/// How an agent reports its tool calls.
#[derive(Clone, Copy)]
enum Report {
    Http,
    Mcp,
}

/// One board task done by `agent`: echo a ticket, hand it to noop twice (the last
/// call fails when `fail_last`), the calls reported `by` HTTP or MCP.
async fn session(
    api: &Api,
    operator: &str,
    agent: (&str, &str),
    ticket: &str,
    fail_last: bool,
    by: Report,
) {
    let (name, token) = agent;
    let task = api
        .ok(
            operator,
            Method::POST,
            "/api/v1/tasks",
            json!({"prompt": format!("triage {ticket}"), "capabilities": ["triage"]}),
        )
        .await;
    let id = task["task_id"].as_str().expect("a task id").to_string();
    let got = api
        .ok(
            token,
            Method::POST,
            &format!("/api/v1/agents/{name}/wait"),
            json!({"timeout_seconds": 5}),
        )
        .await;
    assert_eq!(got["task"]["task_id"], id.as_str(), "{got:#}");
    let path = |what: &str| format!("/api/v1/tasks/{id}/{what}");
    api.ok(token, Method::POST, &path("ack"), json!({})).await;
    let calls = [
        json!({"name": "echo", "parameters": {"message": ticket}, "output": {"message": ticket}, "duration_ms": 3, "success": true}),
        json!({"name": "noop", "parameters": {"ticket": ticket, "queue": "triage"}, "output": {"ticket": ticket, "queue": "triage"}, "duration_ms": 2, "success": true}),
        json!({"name": "noop", "parameters": {"ticket": ticket, "done": true}, "output": {"ticket": ticket, "done": true}, "duration_ms": 2, "success": !fail_last}),
    ];
    for mut call in calls {
        match by {
            Report::Http => {
                api.ok(token, Method::POST, &path("tool-calls"), call).await;
            }
            Report::Mcp => {
                call["task_id"] = json!(id);
                let reported = mcp_tool(api, token, "report_tool_call", call).await;
                assert_ne!(reported["isError"], true, "{reported:#}");
            }
        }
    }
    api.ok(
        token,
        Method::POST,
        &path("complete"),
        json!({"result": {"ticket": ticket}}),
    )
    .await;
}

async fn repeated_tool_calls_become_a_workflow_a_person_approves_and_runs(backend: Backend) {
    let t = TestStore::new(backend).await;
    let ops_a = team_token(&t, "ops-a", Role::Operator, "alpha").await;
    let ops_b = team_token(&t, "ops-b", Role::Operator, "beta").await;
    let agent_a = team_token(&t, "agent-a", Role::Agent, "alpha").await;
    let agent_b = team_token(&t, "agent-b", Role::Agent, "beta").await;
    let server = serve_with(&t.store, config(), awl::clock::system_clock()).await;
    let api = Api::of(&server);
    for (name, token) in [("agent-a", &agent_a), ("agent-b", &agent_b)] {
        api.ok(
            token,
            Method::POST,
            "/api/v1/agents",
            json!({"capabilities": [format!("triage-{name}"), "triage"]}),
        )
        .await;
    }
    // Alpha: four tasks done the same way, one more whose last call failed.
    for n in 0..4 {
        session(
            &api,
            &ops_a,
            ("agent-a", &agent_a),
            &format!("T-{n}"),
            false,
            Report::Http,
        )
        .await;
    }
    session(
        &api,
        &ops_a,
        ("agent-a", &agent_a),
        "T-9",
        true,
        Report::Http,
    )
    .await;
    // Beta: the same sequence, twice only (below the support of 3).
    for n in 0..2 {
        session(
            &api,
            &ops_b,
            ("agent-b", &agent_b),
            &format!("B-{n}"),
            false,
            Report::Http,
        )
        .await;
    }

    let awl = Awl::bounded(&t.location, LIMIT);
    let mined: Value =
        serde_json::from_str(&awl.ok(&["learn", "mine", "--json"]).await).expect("mine --json");
    assert_eq!(
        mined["proposed"].as_array().map(Vec::len),
        Some(1),
        "{mined:#}"
    );
    let list: Value =
        serde_json::from_str(&awl.ok(&["learn", "list", "--json"]).await).expect("list --json");
    let proposals = list.as_array().expect("a list");
    assert_eq!(proposals.len(), 1, "{list:#}");
    let p = &proposals[0];
    assert_eq!(p["scope"], "team:alpha");
    assert_eq!(p["status"], "OPEN");
    assert_eq!(p["tools"], json!(["echo", "noop", "noop"]));
    assert_eq!(
        (p["successes"].as_i64(), p["executions"].as_i64()),
        (Some(4), Some(5))
    );
    assert!(
        (p["confidence"].as_f64().unwrap() - 0.8).abs() < 1e-9,
        "{p:#}"
    );
    let sessions = p["evidence"]["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 4, "the failed task is no evidence: {p:#}");
    let id = p["proposal_id"].as_str().expect("an id").to_string();
    let workflow = p["workflow"].as_str().expect("a workflow").to_string();
    // Mining again proposes nothing new.
    let again: Value =
        serde_json::from_str(&awl.ok(&["learn", "mine", "--json"]).await).expect("json");
    assert_eq!(again["proposed"], json!([]));

    // The generated file: the ticket varies (an input), the queue is a constant, the
    // ticket flows from echo's output into both noop calls.
    let file = awl.ok(&["learn", "show", &id, "--file"]).await;
    let dir = tempfile::tempdir().expect("a scratch folder");
    let path = dir.path().join("learned.awl.yaml");
    std::fs::write(&path, &file).expect("write the file");
    let path = path.to_string_lossy().to_string();
    awl.ok(&["validate", &path]).await;
    assert!(file.contains("s1_echo_message"), "{file}");
    assert!(
        file.contains("\"${{ steps.s1_echo.outputs.message }}\""),
        "{file}"
    );
    assert!(file.contains("queue: \"triage\""), "{file}");

    // Each team sees its own; an admin (the CLI) sees every scope.
    let learner = Learner::new(t.store.clone(), LearnConfig::default());
    let alpha = Viewer::Scope("team:alpha".into());
    let beta = Viewer::Scope("team:beta".into());
    assert_eq!(learner.proposals(&alpha, None).await.unwrap().len(), 1);
    assert!(learner.proposals(&beta, None).await.unwrap().is_empty());
    assert!(learner.proposal(&beta, &id).await.is_err());

    // Not runnable before a person approves it: no version is registered.
    let versions = |state: &awl::domain::workflow::WorkflowDefinition| {
        state
            .versions()
            .map(|v| {
                (
                    v.version.to_string(),
                    v.source.is_learned(),
                    v.registered_by.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let before = awl::definitions::catalog::load(&t.store, &workflow)
        .await
        .unwrap();
    assert!(versions(&before).is_empty());
    let early = awl.output(&["learn", "reject", &id, "--reason", ""]).await;
    assert!(!early.status.success(), "a rejection needs a reason");
    let approved = awl.ok(&["learn", "approve", &id, "--by", "ada"]).await;
    assert!(approved.contains(&workflow), "{approved}");
    let after = awl::definitions::catalog::load(&t.store, &workflow)
        .await
        .unwrap();
    assert_eq!(
        versions(&after),
        [("1.0.0".to_string(), true, "ada".to_string())]
    );
    let twice = awl.output(&["learn", "approve", &id]).await;
    assert!(!twice.status.success());
    assert!(String::from_utf8_lossy(&twice.stderr).contains("APPROVED"));

    // Suggestions: alpha's last calls begin it; beta is not shown alpha's workflow.
    awl::projections::Projections::new(t.store.clone())
        .catch_up_all()
        .await
        .unwrap();
    let context = Context {
        tools: vec!["echo".into(), "noop".into()],
        ..Context::default()
    };
    let for_alpha = learner.suggest(&alpha, &context, None, 5).await.unwrap();
    assert_eq!(for_alpha.len(), 1, "{for_alpha:?}");
    assert_eq!(for_alpha[0].workflow, workflow);
    assert!(
        for_alpha[0].why.contains("goes on with noop"),
        "{}",
        for_alpha[0].why
    );
    assert!(
        learner
            .suggest(&beta, &context, None, 5)
            .await
            .unwrap()
            .is_empty()
    );

    // It runs like any workflow, and replays to the same decisions.
    let output = awl
        .output(&["run", &path, "--var", "s1_echo_message=T-42"])
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "{stderr}");
    let run_id = run_id_of(&stderr);
    let status: Value =
        serde_json::from_str(&awl.ok(&["status", &run_id, "--json"]).await).expect("status --json");
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(status["workflow"], workflow.as_str());
    let replay = stdout_of(
        "awl replay",
        awl.output(&["replay", &run_id, "--json"]).await,
    );
    let replay: Value = serde_json::from_str(&replay).expect("replay --json");
    assert!(replay["replay"]["verified"]["decisions"].as_u64() > Some(0));

    // A rebuild from position 0 gives the same proposals.
    let before = awl.ok(&["learn", "list", "--json"]).await;
    awl.ok(&["projections", "rebuild"]).await;
    let after = awl.ok(&["learn", "list", "--json"]).await;
    assert_eq!(before, after);
    let uses: Value =
        serde_json::from_str(&awl.ok(&["learn", "uses", "--json"]).await).expect("json");
    assert_eq!(uses[0]["runs"], 1, "{uses:#}");
    assert_eq!(uses[0]["succeeded"], 1, "{uses:#}");
    drop(server);
}

/// One MCP tool call in a session of its own; the tool's JSON-RPC `result`.
async fn mcp_tool(api: &Api, token: &str, tool: &str, args: Value) -> Value {
    let url = format!("{}/mcp", api.base);
    let session = crate::mcp::open_session(&api.http, &url, token).await;
    let body = api
        .http
        .post(&url)
        .bearer_auth(token)
        .header(reqwest::header::ACCEPT, crate::mcp::BOTH)
        .header("mcp-session-id", &session)
        .json(&crate::mcp::call(7, tool, args))
        .send()
        .await
        .expect("an answer")
        .text()
        .await
        .expect("a body");
    // A JSON body, or an event stream whose data line holds the answer.
    std::iter::once(body.as_str())
        .chain(body.lines().filter_map(|l| l.strip_prefix("data:")))
        .filter_map(|text| serde_json::from_str::<Value>(text.trim()).ok())
        .find(|message| message["id"] == 7)
        .map(|message| message["result"].clone())
        .unwrap_or_else(|| panic!("no answer to {tool} in {body}"))
}

async fn the_server_learns_from_mcp_reports_and_people_decide_over_rest(backend: Backend) {
    let t = TestStore::new(backend).await;
    let ops_a = team_token(&t, "ops-a", Role::Operator, "alpha").await;
    let ops_b = team_token(&t, "ops-b", Role::Operator, "beta").await;
    let agent_a = team_token(&t, "agent-a", Role::Agent, "alpha").await;
    let agent_b = team_token(&t, "agent-b", Role::Agent, "beta").await;
    let admin = crate::support::server::token(&t.store, "root", Role::Admin).await;
    let mut config = config();
    config.learn_every = Some(std::time::Duration::from_millis(200));
    config.worker = Some(awl::executor::WorkerConfig::new("learning-test"));
    let server = serve_with(&t.store, config, awl::clock::system_clock()).await;
    let api = Api::of(&server);
    api.ok(
        &agent_a,
        Method::POST,
        "/api/v1/agents",
        json!({"capabilities": ["triage"]}),
    )
    .await;
    for n in 0..3 {
        let agent = ("agent-a", agent_a.as_str());
        session(&api, &ops_a, agent, &format!("M-{n}"), false, Report::Mcp).await;
    }

    // The server's learner proposes it without being asked; alpha's operator sees it,
    // beta's does not, an admin sees every scope.
    let proposals = wait_for(LIMIT, "the learner to propose", async || {
        let list = api
            .fetch(Some(&ops_a), "/api/v1/learn/proposals?status=open")
            .await;
        (list.as_array().map(Vec::len) == Some(1)).then_some(list)
    })
    .await;
    let p = &proposals[0];
    assert_eq!(p["scope"], "team:alpha", "{p:#}");
    assert_eq!(p["tools"], json!(["echo", "noop", "noop"]));
    assert_eq!(
        (p["successes"].as_i64(), p["executions"].as_i64()),
        (Some(3), Some(3))
    );
    let id = p["proposal_id"].as_str().expect("an id").to_string();
    let workflow = p["workflow"].as_str().expect("a workflow").to_string();
    assert!(
        p["file"].as_str().unwrap_or_default().contains(&workflow),
        "{p:#}"
    );
    let one = format!("/api/v1/learn/proposals/{id}");
    assert_eq!(
        api.fetch(Some(&ops_b), "/api/v1/learn/proposals").await,
        json!([])
    );
    let (status, body) = api.call(Some(&ops_b), Method::GET, &one, None).await;
    assert_eq!(status, 404, "{body:#}");
    assert_eq!(body["error"]["code"], "proposal_not_found");
    assert_eq!(
        api.fetch(Some(&admin), &one).await["workflow"],
        workflow.as_str()
    );
    let (status, body) = api
        .call(
            Some(&ops_a),
            Method::GET,
            "/api/v1/learn/proposals?status=maybe",
            None,
        )
        .await;
    assert_eq!(status, 422, "{body:#}");
    let status_view = api.fetch(Some(&ops_a), "/api/v1/learn/status").await;
    assert_eq!(status_view["tool_calls"], 9, "{status_view:#}");
    assert_eq!(status_view["proposals"]["OPEN"], 1, "{status_view:#}");

    // Only a person decides: an agent token is refused, as is another team's operator.
    let approve = format!("{one}/approve");
    for (token, code) in [(&agent_a, 403), (&ops_b, 404)] {
        let (status, body) = api
            .call(Some(token), Method::POST, &approve, Some(json!({})))
            .await;
        assert_eq!(status, code, "{body:#}");
    }
    let (status, body) = api
        .call(
            Some(&ops_a),
            Method::POST,
            &format!("{one}/reject"),
            Some(json!({"reason": " "})),
        )
        .await;
    assert_eq!(status, 422, "a rejection needs a reason: {body:#}");
    let nothing_yet = awl::definitions::catalog::load(&t.store, &workflow)
        .await
        .expect("the workflow's stream");
    assert_eq!(
        nothing_yet.versions().count(),
        0,
        "refused calls register nothing"
    );
    let decided = api.ok(&ops_a, Method::POST, &approve, json!({})).await;
    assert_eq!(decided["status"], "APPROVED", "{decided:#}");
    assert_eq!(decided["decided_by"], "ops-a");
    assert_eq!(decided["version"], "1.0.0");
    let (status, body) = api
        .call(Some(&ops_a), Method::POST, &approve, Some(json!({})))
        .await;
    // At once (the log refuses it; the inbox may not show the decision yet) and once
    // the inbox shows it: a conflict either way, saying it was approved.
    assert_eq!(status, 409, "{body:#}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("already approved"), "{body:#}");
    wait_for(LIMIT, "the inbox to show the decision", async || {
        let p = api.fetch(Some(&ops_a), &one).await;
        (p["status"] == "APPROVED").then_some(())
    })
    .await;
    let (status, body) = api
        .call(Some(&ops_a), Method::POST, &approve, Some(json!({})))
        .await;
    assert_eq!(
        (status.as_u16(), &body["error"]["code"]),
        (409, &json!("proposal_decided"))
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("APPROVED"),
        "{body:#}"
    );

    // Suggestions: alpha's agent asks over MCP and is shown the learned workflow; beta's
    // agent and operator are not. Bad requests say what is wrong.
    let context = json!({"tools": ["echo", "noop"]});
    let asked = wait_for(LIMIT, "a suggestion for alpha", async || {
        let r = mcp_tool(&api, &agent_a, "suggest_workflow", context.clone()).await;
        let found = r["structuredContent"]["suggestions"].clone();
        (found.as_array().map(Vec::len) == Some(1)).then_some(found)
    })
    .await;
    assert_eq!(asked[0]["workflow"], workflow.as_str(), "{asked:#}");
    assert_eq!(asked[0]["source"], "learned");
    assert!(
        asked[0]["why"]
            .as_str()
            .unwrap_or_default()
            .contains("goes on with noop"),
        "{asked:#}"
    );
    let for_beta = mcp_tool(&api, &agent_b, "suggest_workflow", context.clone()).await;
    assert_eq!(
        for_beta["structuredContent"]["suggestions"],
        json!([]),
        "{for_beta:#}"
    );
    let over_rest = api
        .ok(&ops_b, Method::POST, "/api/v1/suggest", context.clone())
        .await;
    assert_eq!(over_rest["suggestions"], json!([]));
    let by_rest = api
        .ok(&ops_a, Method::POST, "/api/v1/suggest", context.clone())
        .await;
    assert_eq!(by_rest["suggestions"][0]["workflow"], workflow.as_str());
    for bad in [
        json!({}),
        json!({"tools": ["echo"], "limit": 0}),
        json!({"tools": ["echo"], "threshold": 2}),
    ] {
        let (status, body) = api
            .call(Some(&ops_a), Method::POST, "/api/v1/suggest", Some(bad))
            .await;
        assert_eq!(status, 422, "{body:#}");
    }

    // The agent that was suggested it starts it over MCP; beta's agent may not, nor
    // may an agent start a workflow that was not learned. It runs on the server's
    // worker; its use is counted.
    let start = json!({"workflow": workflow, "inputs": {"s1_echo_message": "M-42"}});
    let refused = mcp_tool(&api, &agent_b, "start_run", start.clone()).await;
    assert_eq!(refused["isError"], true, "{refused:#}");
    assert!(refused.to_string().contains("forbidden"), "{refused:#}");
    let started = mcp_tool(&api, &agent_a, "start_run", start).await;
    assert_ne!(started["isError"], true, "{started:#}");
    let run = started["structuredContent"]["run_id"]
        .as_str()
        .expect("a run id")
        .to_string();
    let dir = tempfile::tempdir().expect("a scratch folder");
    let own = dir.path().join("by-hand.awl.yaml");
    std::fs::write(
        &own,
        "name: by-hand\nversion: \"1.0.0\"\nsteps:\n  - {id: a, tool: noop}\n",
    )
    .expect("write a workflow");
    awl::definitions::register_file(&t.store, &own, "ops-a", chrono::Utc::now())
        .await
        .expect("register it");
    let refused = mcp_tool(&api, &agent_a, "start_run", json!({"workflow": "by-hand"})).await;
    assert_eq!(refused["isError"], true, "{refused:#}");
    wait_for(LIMIT, "the learned workflow's run to succeed", async || {
        let view = api
            .fetch(Some(&ops_a), &format!("/api/v1/runs/{run}"))
            .await;
        (view["status"] == "SUCCEEDED").then_some(())
    })
    .await;
    // The uses projection may see the run's start and its end in different pages:
    // wait for the end.
    let uses = wait_for(LIMIT, "the run's success to be counted", async || {
        let uses = api.fetch(Some(&ops_a), "/api/v1/learn/uses").await;
        (uses[0]["succeeded"] == 1).then_some(uses)
    })
    .await;
    assert_eq!(uses[0]["workflow"], workflow.as_str());
    assert_eq!(uses[0]["runs"], 1, "{uses:#}");
    assert_eq!(
        api.fetch(Some(&ops_b), "/api/v1/learn/uses").await,
        json!([])
    );
    server.shutdown().await.expect("a clean stop");
}

/// A user's workflow: fetch an item, check it (a failed check does not stop the
/// run), store it; a branch that pages someone is never taken here.
const INGEST: &str = r#"
name: ingest
version: "1.0.0"
inputs:
  item: {type: string, required: true}
  verdict: {type: string, default: "ok"}
steps:
  - id: fetch
    type: shell
    command: [echo, "${{ inputs.item }}"]
  - id: check
    type: shell
    script: 'test "$1" = ok'
    args: ["${{ inputs.verdict }}"]
    on_error: continue
  - id: store
    type: shell
    command: [printf, "%s", "stored"]
  - id: route
    type: conditional
    condition: inputs.verdict == 'escalate'
    if_true:
      - id: page
        type: http
        url: "http://127.0.0.1:9/page"
"#;

async fn the_calls_of_workflow_runs_are_learned_too(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("a scratch folder");
    let file = dir.path().join("ingest.awl.yaml");
    std::fs::write(&file, INGEST).expect("write the workflow");
    awl::definitions::register_file(&t.store, &file, "test", chrono::Utc::now())
        .await
        .expect("register it");
    let ops_a = team_token(&t, "ops-a", Role::Operator, "alpha").await;
    let ops_b = team_token(&t, "ops-b", Role::Operator, "beta").await;
    let mut config = config();
    config.worker = Some(awl::executor::WorkerConfig::new("learn-test"));
    config.learn_every = None;
    let server = serve_with(&t.store, config, awl::clock::system_clock()).await;
    let api = Api::of(&server);
    // Alpha: four clean runs and one whose check failed; beta: two clean runs.
    let mut runs = Vec::new();
    let starts = (0..4)
        .map(|n| (&ops_a, format!("A-{n}"), "ok"))
        .chain([(&ops_a, "A-9".to_string(), "bad")])
        .chain((0..2).map(|n| (&ops_b, format!("B-{n}"), "ok")));
    for (token, item, verdict) in starts {
        let started = api
            .ok(
                token,
                Method::POST,
                "/api/v1/runs",
                json!({"workflow": "ingest", "inputs": {"item": item, "verdict": verdict}}),
            )
            .await;
        runs.push((
            token,
            started["run_id"].as_str().expect("a run id").to_string(),
        ));
        // One at a time, so each run is one session in order.
        let (token, run) = runs.last().expect("a run");
        wait_for(LIMIT, "the run to succeed", async || {
            let view = api.fetch(Some(token), &format!("/api/v1/runs/{run}")).await;
            (view["status"] == "SUCCEEDED").then_some(())
        })
        .await;
    }

    let awl = Awl::bounded(&t.location, LIMIT);
    let status: Value =
        serde_json::from_str(&awl.ok(&["learn", "status", "--json"]).await).expect("status");
    assert_eq!(status["tool_calls"], 21, "three calls per run: {status:#}");
    let mined: Value =
        serde_json::from_str(&awl.ok(&["learn", "mine", "--json"]).await).expect("mine --json");
    assert_eq!(
        mined["proposed"].as_array().map(Vec::len),
        Some(1),
        "alpha's runs only (beta's are too few): {mined:#}"
    );
    let list: Value =
        serde_json::from_str(&awl.ok(&["learn", "list", "--json"]).await).expect("list --json");
    let p = &list[0];
    assert_eq!(p["scope"], "team:alpha", "{p:#}");
    assert_eq!(p["tools"], json!(["shell", "shell", "shell"]));
    assert_eq!(
        (p["successes"].as_i64(), p["executions"].as_i64()),
        (Some(4), Some(5)),
        "the failed check is an execution that did not succeed"
    );
    let sessions: Vec<&str> = p["evidence"]["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let clean: Vec<String> = runs[..4].iter().map(|(_, r)| format!("run:{r}")).collect();
    assert_eq!(sessions.len(), 4, "{p:#}");
    assert!(
        clean.iter().all(|r| sessions.contains(&r.as_str())),
        "{p:#}"
    );

    // The file is those shell steps again: the item an input, the rest constants.
    let id = p["proposal_id"].as_str().expect("an id").to_string();
    let learned = awl.ok(&["learn", "show", &id, "--file"]).await;
    assert!(learned.contains("type: \"shell\""), "{learned}");
    assert!(
        learned.contains("\"${{ inputs.s1_shell_command_1 }}\""),
        "{learned}"
    );
    assert!(
        learned.contains("script: \"test \\\"$1\\\" = ok\""),
        "{learned}"
    );
    let path = dir.path().join("learned.awl.yaml");
    std::fs::write(&path, &learned).expect("write the file");
    let path = path.to_string_lossy().to_string();
    awl.ok(&["validate", &path]).await;
    awl.ok(&["learn", "approve", &id, "--by", "ada"]).await;
    let output = awl
        .output(&["run", &path, "--var", "s1_shell_command_1=A-42"])
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(output.status.success(), "{stderr}");

    // Rebuilt from position 0, the same; every run has finished, so no session's
    // tail is kept.
    let before = awl.ok(&["learn", "list", "--json"]).await;
    awl.ok(&["projections", "rebuild"]).await;
    assert_eq!(before, awl.ok(&["learn", "list", "--json"]).await);
    assert_eq!(tails(&t).await, Vec::<String>::new());
    drop(server);
}

/// The sessions whose tails the learning projection keeps.
async fn tails(t: &TestStore) -> Vec<String> {
    t.store
        .query_rows("SELECT session FROM tool_tails ORDER BY session", &[])
        .await
        .expect("tails")
        .iter()
        .filter_map(|r| r.get("session").and_then(|s| s.as_str()).map(String::from))
        .collect()
}

/// Board sessions of one agent, each a call of each of `tools` whose arguments vary
/// a little (so a pattern's examples and evidence keep changing for a while).
async fn board_sessions(
    board: &awl::board::Board,
    agent: &awl::domain::ids::AgentId,
    from: usize,
    n: usize,
    tools: &[&str],
) {
    board_sessions_in(board, agent, from, n, tools, "triage").await
}

/// As [`board_sessions`], with every call's `queue` argument given.
async fn board_sessions_in(
    board: &awl::board::Board,
    agent: &awl::domain::ids::AgentId,
    from: usize,
    n: usize,
    tools: &[&str],
    queue: &str,
) {
    use awl::board::{Caller, ToolCall};
    for i in from..from + n {
        let id = start_task(board, agent, &format!("session {i}")).await;
        let ticket = format!("T-{}", i % 7);
        for (k, tool) in tools.iter().enumerate() {
            let call = ToolCall {
                name: tool.to_string(),
                parameters: json!({"ticket": ticket, "k": k, "queue": queue}),
                output: Some(json!({"ticket": ticket})),
                duration_ms: 5,
                // One session in five fails its last call.
                success: !(i % 5 == 4 && k == 2),
                scope: Some("team:miners".into()),
            };
            board.tool_call(id, agent, call).await.expect("report");
        }
        board
            .complete(id, json!({}), &Caller::Agent(agent.clone()))
            .await
            .expect("complete");
    }
}

/// A board on the test's store with one registered agent, `miner`, able to `mine`.
async fn miner_board(t: &TestStore) -> (awl::board::Board, awl::domain::ids::AgentId) {
    miner_board_on(t, awl::clock::system_clock()).await
}

/// As [`miner_board`], on `clock`.
async fn miner_board_on(
    t: &TestStore,
    clock: awl::clock::Clock,
) -> (awl::board::Board, awl::domain::ids::AgentId) {
    use awl::board::{Board, BoardConfig, Caller};
    use awl::domain::workspace::Capabilities;
    let board = Board::open(t.store.clone(), clock, BoardConfig::default())
        .await
        .expect("board");
    let agent = awl::domain::ids::AgentId::try_from("miner").expect("an id");
    board
        .register(
            agent.clone(),
            Capabilities::new(["mine"]),
            None,
            &Caller::Agent(agent.clone()),
        )
        .await
        .expect("register");
    (board, agent)
}

/// A task sent by `ops` that `agent` (of [`miner_board`]) takes and acks.
async fn start_task(
    board: &awl::board::Board,
    agent: &awl::domain::ids::AgentId,
    prompt: &str,
) -> awl::domain::ids::TaskId {
    use awl::board::{Caller, NewTask};
    use awl::domain::workspace::Capabilities;
    let request = NewTask {
        prompt: prompt.to_string(),
        capabilities: Capabilities::new(["mine"]),
        ..NewTask::default()
    };
    board
        .send(request, &Caller::User("ops".into()), None)
        .await
        .expect("send");
    let got = board
        .wait_for_prompt(agent, Some(std::time::Duration::from_secs(2)))
        .await
        .expect("wait")
        .expect("a task");
    let id = got.task_id.to_string().parse().expect("a task id");
    board.ack(id, agent).await.expect("ack");
    id
}

/// A successful call of `tool` about `ticket`, reported in `scope`.
fn ticket_call(tool: &str, ticket: &str, scope: &str) -> awl::board::ToolCall {
    awl::board::ToolCall {
        name: tool.to_string(),
        parameters: json!({"ticket": ticket}),
        output: Some(json!({"ticket": ticket})),
        duration_ms: 5,
        success: true,
        scope: Some(scope.to_string()),
    }
}

async fn two_miners_taking_turns_mine_what_one_rebuild_does(backend: Backend) {
    use awl::projections::Projections;
    let t = TestStore::new(backend).await;
    let (board, agent) = miner_board(&t).await;
    // Two processes' projections over one store: each keeps its own details cache.
    let (a, b) = (
        Projections::new(t.store.clone()),
        Projections::new(t.store.clone()),
    );
    a.prepare().await.expect("prepare");
    for (round, miner) in [&a, &b, &a, &b, &a].into_iter().enumerate() {
        board_sessions(&board, &agent, round * 6, 6, &["search", "read", "label"]).await;
        miner.catch_up_all().await.expect("catch up");
    }
    let patterns = async || {
        t.store
            .query_rows("SELECT * FROM tool_patterns ORDER BY pattern_key", &[])
            .await
            .expect("patterns")
    };
    let taken_in_turns = patterns().await;
    let search_read_label = taken_in_turns
        .iter()
        .find(|r| r["signature"] == "search > read > label")
        .expect("the sequence was mined");
    assert_eq!(
        search_read_label["executions"], 30,
        "{search_read_label:#?}"
    );
    assert_eq!(
        search_read_label["successes"], 24,
        "one session in five failed"
    );
    let detail: Value =
        serde_json::from_str(search_read_label["detail"].as_str().expect("detail")).expect("json");
    assert_eq!(
        detail["args"][0]["ticket"]["examples"]
            .as_array()
            .map(Vec::len),
        Some(5),
        "examples gathered across both miners' turns: {detail:#}"
    );
    assert_eq!(
        detail["evidence"].as_array().map(Vec::len),
        Some(20),
        "{detail:#}"
    );
    Projections::new(t.store.clone())
        .rebuild("learning", &|_, _| {})
        .await
        .expect("rebuild");
    assert_eq!(
        patterns().await,
        taken_in_turns,
        "a rebuild from 0 gives the same rows"
    );
}

/// The learner chooses candidates from the patterns' counters and signatures, reading
/// a pattern's details only to draft its file: a tool whose name holds the signature's
/// separator is read whole instead, and a round with nothing new proposes nothing.
async fn a_tool_named_with_the_separator_is_learned_and_a_quiet_round_proposes_nothing(
    backend: Backend,
) {
    use awl::learning::{LearnConfig, Learner, Viewer};
    use awl::projections::Projections;
    let t = TestStore::new(backend).await;
    let (board, agent) = miner_board(&t).await;
    let projections = Projections::new(t.store.clone());
    projections.prepare().await.expect("prepare");
    let tools = ["search", "fetch > parse", "label"];
    board_sessions(&board, &agent, 0, 6, &tools).await;
    projections.catch_up_all().await.expect("catch up");
    let learner = Learner::new(t.store.clone(), LearnConfig::default());
    let first = learner
        .propose("test", chrono::Utc::now())
        .await
        .expect("propose");
    assert_eq!(first.proposed.len(), 1, "{first:?}");
    projections.catch_up_all().await.expect("catch up");
    let open = learner
        .proposals(&Viewer::All, Some("OPEN"))
        .await
        .expect("proposals");
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].tools, tools.map(String::from).to_vec());
    let again = learner
        .propose("test", chrono::Utc::now())
        .await
        .expect("propose");
    assert!(again.proposed.is_empty(), "{again:?}");
    // The proposal's events moved no pattern: the round looked at no scope.
    assert_eq!((again.scopes, again.candidates), (0, 0), "{again:?}");
    assert_eq!(
        again.drafted, 0,
        "nothing changed, nothing drafted: {again:?}"
    );
    // A new learner (a new process) looks at every scope and finds the proposal
    // recorded: nothing new either, and it drafts nothing (it starts from the
    // executions the proposal records).
    let fresh = Learner::new(t.store.clone(), LearnConfig::default());
    let first_round = fresh
        .propose("test", chrono::Utc::now())
        .await
        .expect("propose");
    assert!(first_round.proposed.is_empty(), "{first_round:?}");
    assert_eq!(
        (
            first_round.scopes,
            first_round.candidates,
            first_round.drafted
        ),
        (1, 1, 0),
        "{first_round:?}"
    );
    // More executions of the sequence: the scope is looked at again and the
    // sequence drafted again, by that learner and by a new one. Its file is the one
    // proposed, which the new learner knows from the log: it is neither looked up nor
    // validated again.
    board_sessions(&board, &agent, 6, 2, &tools).await;
    projections.catch_up_all().await.expect("catch up");
    let grown = fresh
        .propose("test", chrono::Utc::now())
        .await
        .expect("propose");
    assert_eq!(
        (grown.scopes, grown.drafted, grown.checked),
        (1, 1, 0),
        "{grown:?}"
    );
    assert!(grown.proposed.is_empty(), "{grown:?}");
    let quiet = fresh
        .propose("test", chrono::Utc::now())
        .await
        .expect("propose");
    assert_eq!((quiet.scopes, quiet.drafted), (0, 0), "{quiet:?}");
    // A user-submitted workflow changes what is covered: every scope again.
    let dir = tempfile::tempdir().expect("a scratch folder");
    let own = dir.path().join("by-hand.awl.yaml");
    std::fs::write(
        &own,
        "name: by-hand\nversion: \"1.0.0\"\nsteps:\n  - {id: a, type: shell, script: \"true\"}\n",
    )
    .expect("write a workflow");
    awl::definitions::register_file(&t.store, &own, "ops", chrono::Utc::now())
        .await
        .expect("register it");
    projections.catch_up_all().await.expect("catch up");
    let after_user = fresh
        .propose("test", chrono::Utc::now())
        .await
        .expect("propose");
    assert_eq!(after_user.scopes, 1, "{after_user:?}");
    // Once its details settle (every example and piece of evidence it keeps taken),
    // a sequence done again adds executions and changes no file: the round looks at
    // its scope and chooses it, but does not draft it again. Live load is this.
    board_sessions(&board, &agent, 8, 22, &tools).await;
    projections.catch_up_all().await.expect("catch up");
    let filled = fresh
        .propose("test", chrono::Utc::now())
        .await
        .expect("propose");
    assert_eq!((filled.candidates, filled.drafted), (1, 1), "{filled:?}");
    assert!(filled.proposed.is_empty(), "the same file: {filled:?}");
    board_sessions(&board, &agent, 30, 1, &tools).await;
    projections.catch_up_all().await.expect("catch up");
    let settled = fresh
        .propose("test", chrono::Utc::now())
        .await
        .expect("propose");
    assert_eq!(
        (settled.scopes, settled.candidates, settled.drafted),
        (1, 1, 0),
        "more executions, the same details: {settled:?}"
    );
    // A value that was constant varies: the details change, the file with them.
    board_sessions_in(&board, &agent, 31, 1, &tools, "urgent").await;
    projections.catch_up_all().await.expect("catch up");
    let varied = fresh
        .propose("test", chrono::Utc::now())
        .await
        .expect("propose");
    assert_eq!(
        (varied.drafted, varied.checked, varied.proposed.len()),
        (1, 1, 1),
        "a new file is checked and proposed: {varied:?}"
    );
    projections.catch_up_all().await.expect("catch up");
    let proposed = learner
        .proposals(&Viewer::All, Some("OPEN"))
        .await
        .expect("proposals");
    assert!(
        proposed
            .iter()
            .any(|p| p.definition["inputs"].to_string().contains("queue")),
        "`queue` is an input now: {proposed:?}"
    );
}

/// Each occurrence rewrites its patterns' counters: no index may cover a column that
/// changes (an update that changes an indexed column cannot stay on its page), and on
/// Postgres the table leaves room in its pages for the next versions. Without both,
/// its heap grew by a version per update: 862 MB for 4,350 patterns after a million
/// mined calls, which each learner round read whole.
async fn pattern_counters_are_rewritten_in_place(backend: Backend) {
    use awl::projections::Projections;
    let t = TestStore::new(backend).await;
    let (board, agent) = miner_board(&t).await;
    let projections = Projections::new(t.store.clone());
    projections.prepare().await.expect("prepare");
    board_sessions(&board, &agent, 0, 4, &["search", "fetch", "label"]).await;
    projections.catch_up_all().await.expect("catch up");
    let text = |row: &serde_json::Map<String, serde_json::Value>, key: &str| {
        row.get(key)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let (indexes, options): (Vec<String>, String) = match backend {
        Backend::Postgres => {
            let indexes = t
                .store
                .query_rows(
                    "SELECT indexdef FROM pg_indexes WHERE tablename LIKE 'tool_patterns_g%'",
                    &[],
                )
                .await
                .expect("indexes");
            let options = t
                .store
                .query_rows(
                    "SELECT array_to_string(reloptions, ',') AS options FROM pg_class \
                     WHERE relname LIKE 'tool_patterns_g%' AND relkind = 'r'",
                    &[],
                )
                .await
                .expect("options");
            assert_eq!(options.len(), 1, "one generation: {options:?}");
            (
                indexes.iter().map(|r| text(r, "indexdef")).collect(),
                text(&options[0], "options"),
            )
        }
        Backend::Sqlite => {
            let indexes = t
                .store
                .query_rows(
                    "SELECT coalesce(sql, name) AS sql FROM sqlite_master \
                     WHERE type = 'index' AND tbl_name LIKE 'tool_patterns_g%'",
                    &[],
                )
                .await
                .expect("indexes");
            (
                indexes.iter().map(|r| text(r, "sql")).collect(),
                String::new(),
            )
        }
    };
    assert!(!indexes.is_empty(), "the key and the scope are indexed");
    for index in &indexes {
        for changing in [
            "executions",
            "successes",
            "sessions",
            "confidence",
            "last_at",
            "span_ms",
            "detail",
            "changed",
        ] {
            assert!(
                !index.contains(changing),
                "{index} covers `{changing}`, which every occurrence changes"
            );
        }
    }
    if backend == Backend::Postgres {
        assert_eq!(options, "fillfactor=50", "room left in each page");
    }
}

/// The same three calls, done six times by two teams' agents: one team does each
/// session within a minute, the other three minutes apart (six minutes a session,
/// past the default five-minute window). Only the first is learned, live and by a
/// rebuild from 0.
async fn calls_spread_past_the_window_are_not_learned(backend: Backend) {
    use awl::board::Caller;
    use awl::learning::{LearnConfig, Learner, Viewer};
    use awl::projections::Projections;
    let t = TestStore::new(backend).await;
    let clock = awl::clock::ManualClock::new(chrono::Utc::now());
    let (board, agent) = miner_board_on(&t, clock.clock()).await;
    for (scope, apart) in [("team:quick", 20), ("team:slow", 180)] {
        for i in 0..6 {
            let id = start_task(&board, &agent, &format!("{scope} session {i}")).await;
            for tool in ["search", "fetch", "label"] {
                clock.advance(chrono::Duration::seconds(apart));
                let call = ticket_call(tool, &format!("T-{i}"), scope);
                board.tool_call(id, &agent, call).await.expect("report");
            }
            board
                .complete(id, json!({}), &Caller::Agent(agent.clone()))
                .await
                .expect("complete");
            clock.advance(chrono::Duration::minutes(30));
        }
    }
    let projections = Projections::new(t.store.clone());
    projections.prepare().await.expect("prepare");
    projections.catch_up_all().await.expect("catch up");
    let learner = Learner::new(t.store.clone(), LearnConfig::default());
    let scopes_proposed = async || {
        let report = learner
            .propose("test", chrono::Utc::now())
            .await
            .expect("propose");
        projections.catch_up_all().await.expect("catch up");
        let proposals = learner
            .proposals(&Viewer::All, None)
            .await
            .expect("proposals");
        (
            report,
            proposals
                .iter()
                .map(|p| (p.scope.clone(), p.tools.join(" > ")))
                .collect::<Vec<_>>(),
        )
    };
    let (report, proposed) = scopes_proposed().await;
    assert_eq!(
        proposed,
        [(
            "team:quick".to_string(),
            "search > fetch > label".to_string()
        )],
        "{report:?}"
    );
    // No three of a slow session's calls fall within one window: no pattern at all.
    let slow = t
        .store
        .query_rows(
            "SELECT count(*) AS n FROM tool_patterns WHERE scope = ?",
            &[awl::store::rows::Param::from("team:slow")],
        )
        .await
        .expect("patterns");
    assert_eq!(slow[0]["n"].as_i64(), Some(0), "{slow:?}");
    projections
        .rebuild("learning", &|_, _| {})
        .await
        .expect("rebuild");
    let rebuilt = t
        .store
        .query_rows(
            "SELECT scope, signature, executions FROM tool_patterns ORDER BY pattern_key",
            &[],
        )
        .await
        .expect("patterns");
    assert_eq!(
        rebuilt.len(),
        1,
        "one pattern, the quick team's: {rebuilt:?}"
    );
    assert_eq!(rebuilt[0]["scope"], "team:quick");
    assert_eq!(rebuilt[0]["executions"].as_i64(), Some(6));
}

/// A task's recent calls are kept while it is going (a later call may extend them into
/// a sequence) and dropped when it ends, live and by a rebuild: the table holds the
/// sessions in progress, not one row per task ever done.
async fn a_session_keeps_its_tail_until_it_ends(backend: Backend) {
    use awl::board::Caller;
    use awl::projections::Projections;
    let t = TestStore::new(backend).await;
    let (board, agent) = miner_board(&t).await;
    let projections = Projections::new(t.store.clone());
    projections.prepare().await.expect("prepare");
    board_sessions(&board, &agent, 0, 3, &["search", "fetch", "label"]).await;
    let id = start_task(&board, &agent, "still going").await;
    for tool in ["search", "fetch"] {
        let call = ticket_call(tool, "T-going", "team:miners");
        board.tool_call(id, &agent, call).await.expect("report");
    }
    projections.catch_up_all().await.expect("catch up");
    let going = vec![format!("task:{id}")];
    assert_eq!(tails(&t).await, going, "only the task still going");
    projections
        .rebuild("learning", &|_, _| {})
        .await
        .expect("rebuild");
    assert_eq!(tails(&t).await, going, "a rebuild keeps the same");
    // Its third call ends a sequence with the two before it, which the tail kept.
    let call = ticket_call("label", "T-going", "team:miners");
    board.tool_call(id, &agent, call).await.expect("report");
    board
        .complete(id, json!({}), &Caller::Agent(agent.clone()))
        .await
        .expect("complete");
    projections.catch_up_all().await.expect("catch up");
    assert_eq!(tails(&t).await, Vec::<String>::new(), "every task ended");
    let executions = t
        .store
        .query_rows(
            "SELECT executions FROM tool_patterns WHERE signature = ?",
            &[awl::store::rows::Param::from("search > fetch > label")],
        )
        .await
        .expect("patterns");
    assert_eq!(
        executions[0]["executions"].as_i64(),
        Some(4),
        "{executions:?}"
    );
}
