//! Learning from history, end to end on both stores: agents of two teams report tool
//! calls over HTTP while doing board tasks; `awl learn mine` proposes what one team
//! repeated (with the confidence its failures leave), and nothing for the team that
//! did it too rarely; the generated file passes `awl validate`; a person approves it
//! and it runs and replays like any workflow; a rebuild of the projections from
//! position 0 gives the same proposals; each team sees only its own.

use reqwest::Method;
use serde_json::{Value, json};

use awl::auth::{Role, create_team_token};
use awl::domain::learning::Context;
use awl::learning::{LearnConfig, Learner, Viewer};

use crate::support::cli::{Awl, run_id_of, stdout_of};
use crate::support::server::{Api, config, serve_with};
use crate::support::{Backend, TestStore, on_both_stores};

on_both_stores!(worker_threads = 2;
    repeated_tool_calls_become_a_workflow_a_person_approves_and_runs,
);

const LIMIT: u64 = 60;

async fn team_token(t: &TestStore, name: &str, role: Role, team: &str) -> String {
    create_team_token(&t.store, name, role, Some(team), "test", chrono::Utc::now())
        .await
        .expect("a token")
        .1
}

/// One board task done by `agent`: echo a ticket, hand it to noop twice (the last
/// call fails when `fail_last`).
async fn session(api: &Api, operator: &str, agent: (&str, &str), ticket: &str, fail_last: bool) {
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
    for call in calls {
        api.ok(token, Method::POST, &path("tool-calls"), call).await;
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
        )
        .await;
    }
    session(&api, &ops_a, ("agent-a", &agent_a), "T-9", true).await;
    // Beta: the same sequence, twice only (below the support of 3).
    for n in 0..2 {
        session(
            &api,
            &ops_b,
            ("agent-b", &agent_b),
            &format!("B-{n}"),
            false,
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
