//! Given / when / then tables for the agent aggregate, and the v1 upcaster.

use chrono::{DateTime, TimeZone, Utc};
use cqrs_es::Aggregate;
use cqrs_es::event_sink::EventSink;
use serde_json::{Value, json};

use super::*;
use crate::domain::testing::{Stream, assert_wire_format, case, check, fold, given_when, t};

impl Stream for AgentEvent {
    type Of = Agent;
    const VARIANTS: usize = 4;

    fn variant(&self) -> usize {
        match self {
            AgentEvent::Registered { .. } => 0,
            AgentEvent::CapabilitiesChanged { .. } => 1,
            AgentEvent::WorkspaceChanged { .. } => 2,
            AgentEvent::Retired { .. } => 3,
        }
    }

    fn time(&self) -> DateTime<Utc> {
        self.at()
    }
}

type Then = crate::domain::testing::Then<AgentEvent>;

// ---- fixtures -------------------------------------------------------------------

fn a1() -> AgentId {
    AgentId::try_from("agent-1").unwrap()
}
fn a2() -> AgentId {
    AgentId::try_from("agent-2").unwrap()
}
fn caps(names: &[&str]) -> Capabilities {
    Capabilities::new(names)
}
fn rust() -> Capabilities {
    caps(&["rust"])
}
fn ws(repository: &str, branch: Option<&str>) -> Option<Workspace> {
    Some(Workspace {
        repository: repository.into(),
        branch: branch.map(Into::into),
    })
}
fn app_main() -> Option<Workspace> {
    ws("org/app", Some("main"))
}

// events
fn registered(
    capabilities: Capabilities,
    workspace: Option<Workspace>,
    at: DateTime<Utc>,
) -> AgentEvent {
    AgentEvent::Registered {
        agent_id: a1(),
        capabilities,
        workspace,
        builtin: false,
        at,
    }
}
fn capabilities_changed(capabilities: Capabilities, at: DateTime<Utc>) -> AgentEvent {
    AgentEvent::CapabilitiesChanged { capabilities, at }
}
fn workspace_changed(workspace: Option<Workspace>, at: DateTime<Utc>) -> AgentEvent {
    AgentEvent::WorkspaceChanged { workspace, at }
}
fn retired(at: DateTime<Utc>) -> AgentEvent {
    AgentEvent::Retired {
        reason: "decommissioned".into(),
        at,
    }
}

// commands
fn register(
    capabilities: Capabilities,
    workspace: Option<Workspace>,
    at: DateTime<Utc>,
) -> AgentCommand {
    register_as(a1(), capabilities, workspace, at)
}
fn register_as(
    agent_id: AgentId,
    capabilities: Capabilities,
    workspace: Option<Workspace>,
    at: DateTime<Utc>,
) -> AgentCommand {
    AgentCommand::Register {
        agent_id,
        capabilities,
        workspace,
        builtin: false,
        at,
    }
}
fn update_capabilities(capabilities: Capabilities, at: DateTime<Utc>) -> AgentCommand {
    AgentCommand::UpdateCapabilities { capabilities, at }
}
fn update_workspace(workspace: Option<Workspace>, at: DateTime<Utc>) -> AgentCommand {
    AgentCommand::UpdateWorkspace { workspace, at }
}
fn retire(at: DateTime<Utc>) -> AgentCommand {
    AgentCommand::Retire {
        reason: "decommissioned".into(),
        at,
    }
}

/// The stream of an agent registered with `rust` in `org/app@main`.
fn active() -> Vec<AgentEvent> {
    vec![registered(rust(), app_main(), t(0))]
}
/// The same agent, retired.
fn retired_agent() -> Vec<AgentEvent> {
    vec![registered(rust(), app_main(), t(0)), retired(t(10))]
}

// ---- decide ------------------------------------------------------------------------

#[test]
fn registration_is_idempotent() {
    let now = t(100);
    let cases = vec![
        case(
            "a new agent registers",
            vec![],
            register(rust(), app_main(), now),
            Ok(vec![registered(rust(), app_main(), now)]),
        ),
        case(
            "a new agent registers without a workspace",
            vec![],
            register(Capabilities::default(), None, now),
            Ok(vec![registered(Capabilities::default(), None, now)]),
        ),
        case(
            "an active agent registers again unchanged: nothing to record",
            active(),
            register(rust(), app_main(), now),
            Ok(vec![]),
        ),
        case(
            "capabilities given in another order and case are the same set",
            vec![registered(caps(&["rust", "python"]), None, t(0))],
            register(caps(&["Python", " RUST "]), None, now),
            Ok(vec![]),
        ),
        case(
            "an active agent registers with new capabilities",
            active(),
            register(caps(&["rust", "go"]), app_main(), now),
            Ok(vec![capabilities_changed(caps(&["rust", "go"]), now)]),
        ),
        case(
            "an active agent registers from another branch",
            active(),
            register(rust(), ws("org/app", Some("dev")), now),
            Ok(vec![workspace_changed(ws("org/app", Some("dev")), now)]),
        ),
        case(
            "an active agent registers without a workspace",
            active(),
            register(rust(), None, now),
            Ok(vec![workspace_changed(None, now)]),
        ),
        case(
            "an active agent registers with both changed: capabilities first",
            active(),
            register(caps(&["go"]), ws("org/api", None), now),
            Ok(vec![
                capabilities_changed(caps(&["go"]), now),
                workspace_changed(ws("org/api", None), now),
            ]),
        ),
        case(
            "registering compares with the latest state, not the first registration",
            vec![
                registered(rust(), app_main(), t(0)),
                capabilities_changed(caps(&["go"]), t(5)),
            ],
            register(rust(), app_main(), now),
            Ok(vec![capabilities_changed(rust(), now)]),
        ),
        case(
            "a retired agent registers again, even unchanged",
            retired_agent(),
            register(rust(), app_main(), now),
            Ok(vec![registered(rust(), app_main(), now)]),
        ),
        case(
            "another agent cannot register on an active agent's stream",
            active(),
            register_as(a2(), rust(), app_main(), now),
            Err(AgentError::WrongAgent {
                stream: a1(),
                given: a2(),
            }),
        ),
        case(
            "another agent cannot register on a retired agent's stream",
            retired_agent(),
            register_as(a2(), rust(), app_main(), now),
            Err(AgentError::WrongAgent {
                stream: a1(),
                given: a2(),
            }),
        ),
    ];
    check(cases);
}

#[test]
fn updates_record_only_changes() {
    let now = t(100);
    let cases = vec![
        case(
            "new capabilities",
            active(),
            update_capabilities(caps(&["rust", "sql"]), now),
            Ok(vec![capabilities_changed(caps(&["rust", "sql"]), now)]),
        ),
        case(
            "the same capabilities",
            active(),
            update_capabilities(caps(&["RUST"]), now),
            Ok(vec![]),
        ),
        case(
            "no capabilities at all",
            active(),
            update_capabilities(Capabilities::default(), now),
            Ok(vec![capabilities_changed(Capabilities::default(), now)]),
        ),
        case(
            "a new repository",
            active(),
            update_workspace(ws("org/api", Some("main")), now),
            Ok(vec![workspace_changed(ws("org/api", Some("main")), now)]),
        ),
        case(
            "only the branch changes",
            active(),
            update_workspace(ws("org/app", None), now),
            Ok(vec![workspace_changed(ws("org/app", None), now)]),
        ),
        case(
            "the same workspace",
            active(),
            update_workspace(app_main(), now),
            Ok(vec![]),
        ),
        case(
            "leave the workspace",
            active(),
            update_workspace(None, now),
            Ok(vec![workspace_changed(None, now)]),
        ),
        case(
            "retire an active agent",
            active(),
            retire(now),
            Ok(vec![retired(now)]),
        ),
    ];
    check(cases);
}

/// Every command in every state: never registered, active, retired. The commands are
/// built to change something, so an accepted one always emits.
#[test]
fn every_command_in_every_state() {
    let now = t(100);
    let gone = |action| {
        Err(AgentError::Retired {
            agent: a1(),
            reason: "decommissioned".into(),
            action,
        })
    };
    let unknown = |action| Err(AgentError::NotRegistered { action });
    // (command, then when new, then when active, then when retired)
    let rows: Vec<(&str, AgentCommand, Then, Then, Then)> = vec![
        (
            "register",
            register(caps(&["go"]), None, now),
            Ok(vec![registered(caps(&["go"]), None, now)]),
            Ok(vec![
                capabilities_changed(caps(&["go"]), now),
                workspace_changed(None, now),
            ]),
            Ok(vec![registered(caps(&["go"]), None, now)]),
        ),
        (
            "update capabilities",
            update_capabilities(caps(&["go"]), now),
            unknown(AgentAction::UpdateCapabilities),
            Ok(vec![capabilities_changed(caps(&["go"]), now)]),
            gone(AgentAction::UpdateCapabilities),
        ),
        (
            "update workspace",
            update_workspace(None, now),
            unknown(AgentAction::UpdateWorkspace),
            Ok(vec![workspace_changed(None, now)]),
            gone(AgentAction::UpdateWorkspace),
        ),
        (
            "retire",
            retire(now),
            unknown(AgentAction::Retire),
            Ok(vec![retired(now)]),
            gone(AgentAction::Retire),
        ),
    ];
    let mut cases = Vec::new();
    for (name, when, new, is_active, is_retired) in rows {
        cases.push((format!("{name} when new"), vec![], when.clone(), new));
        cases.push((
            format!("{name} when active"),
            active(),
            when.clone(),
            is_active,
        ));
        cases.push((
            format!("{name} when retired"),
            retired_agent(),
            when,
            is_retired,
        ));
    }
    assert_eq!(check(cases), 4 * 3);
}

#[test]
fn errors_say_what_and_why() {
    let message = |given: Vec<AgentEvent>, when: AgentCommand| {
        given_when::<Agent>(given, when).unwrap_err().to_string()
    };
    assert_eq!(
        message(vec![], retire(t(1))),
        "the agent is not registered: cannot retire (an agent must register first)"
    );
    assert_eq!(
        message(retired_agent(), update_workspace(None, t(20))),
        "agent agent-1 is retired (decommissioned): cannot update its workspace (register it \
         again to bring it back)"
    );
    assert_eq!(
        message(active(), register_as(a2(), rust(), None, t(1))),
        "this stream belongs to agent agent-1: cannot register agent agent-2 on it"
    );
}

// ---- state --------------------------------------------------------------------------

#[test]
fn the_state_follows_the_events() {
    let new = Agent::default();
    assert_eq!(new.status(), None);
    assert!(!new.is_active());
    assert_eq!(new.id(), None);

    let agent = fold([
        registered(rust(), app_main(), t(0)),
        capabilities_changed(caps(&["rust", "go"]), t(5)),
        workspace_changed(ws("org/api", None), t(6)),
    ]);
    assert_eq!(agent.id(), Some(&a1()));
    assert_eq!(agent.status(), Some(AgentStatus::Active));
    assert!(agent.is_active());
    assert_eq!(agent.capabilities(), &caps(&["go", "rust"]));
    assert_eq!(agent.workspace(), ws("org/api", None).as_ref());
    assert_eq!(agent.registered_at(), Some(t(0)));
    assert_eq!(agent.updated_at(), Some(t(6)));
    assert_eq!(agent.retirement(), None);

    let gone = fold(retired_agent());
    assert_eq!(gone.status(), Some(AgentStatus::Retired));
    assert!(!gone.is_active());
    assert_eq!(
        gone.retirement(),
        Some(&Retirement {
            reason: "decommissioned".into(),
            at: t(10),
        })
    );
    // What it offered is kept for views.
    assert_eq!(gone.capabilities(), &rust());

    let back = fold([
        registered(rust(), app_main(), t(0)),
        retired(t(10)),
        registered(caps(&["go"]), None, t(20)),
    ]);
    assert!(back.is_active());
    assert_eq!(back.retirement(), None);
    assert_eq!(back.capabilities(), &caps(&["go"]));
    assert_eq!(back.workspace(), None);
    assert_eq!(back.registered_at(), Some(t(20)));
}

#[test]
fn the_state_round_trips_through_serde() {
    for events in [vec![], active(), retired_agent()] {
        let agent = fold(events);
        let json = serde_json::to_value(&agent).unwrap();
        assert_eq!(serde_json::from_value::<Agent>(json).unwrap(), agent);
    }
    assert_eq!(
        serde_json::to_value(AgentStatus::ALL).unwrap(),
        json!(["ACTIVE", "RETIRED"])
    );
}

#[tokio::test]
async fn cqrs_es_drives_decide_through_handle() {
    let mut agent = Agent::default();
    let sink = EventSink::default();
    agent
        .handle(register(rust(), None, t(0)), &(), &sink)
        .await
        .unwrap();
    agent
        .handle(register(rust(), None, t(1)), &(), &sink)
        .await
        .unwrap();
    agent.handle(retire(t(2)), &(), &sink).await.unwrap();
    assert_eq!(
        agent.handle(retire(t(3)), &(), &sink).await,
        Err(AgentError::Retired {
            agent: a1(),
            reason: "decommissioned".into(),
            action: AgentAction::Retire,
        })
    );
    assert_eq!(
        sink.collect().await,
        vec![registered(rust(), None, t(0)), retired(t(2))]
    );
    assert_eq!(Agent::TYPE, "agent");
}

// ---- the wire format ---------------------------------------------------------------

fn every_event() -> Vec<AgentEvent> {
    vec![
        registered(rust(), app_main(), t(0)),
        registered(Capabilities::default(), None, t(0)),
        capabilities_changed(caps(&["go", "rust"]), t(1)),
        workspace_changed(ws("org/api", None), t(2)),
        workspace_changed(None, t(2)),
        retired(t(3)),
    ]
}

#[test]
fn every_event_is_tagged_with_its_type_and_round_trips() {
    assert_wire_format(every_event(), |event| match event {
        AgentEvent::Registered { .. } => "2",
        _ => "1",
    });
}

#[test]
fn a_registered_payload_reads_as_documented() {
    assert_eq!(
        serde_json::to_value(registered(caps(&["rust", "python"]), app_main(), t(0))).unwrap(),
        json!({"agent.registered": {
            "agent_id": "agent-1",
            "capabilities": ["python", "rust"],
            "workspace": {"repository": "org/app", "branch": "main"},
            "at": "2025-01-01T12:00:00Z",
        }})
    );
}

// ---- upcasting agent.registered v1 -> v2 -------------------------------------------

fn upcast(v1: Value) -> Result<Value, String> {
    (REGISTERED_V1_TO_V2.upcast)(v1)
}

/// The v2 payload read as the store reads it: the tag is the event type.
fn as_event(v2: Value) -> AgentEvent {
    serde_json::from_value(json!({ "agent.registered": v2 })).unwrap()
}

#[test]
fn v1_registration_upcasts_to_the_current_event() {
    let v1 = json!({
        "agent_id": "a1",
        "capabilities": "rust, Python,,  ",
        "repo": "org/app",
        "branch": "main",
        "registered_at": "2024-05-01T10:00:00Z",
    });
    let (version, v2) = crate::domain::upcasters::all()
        .upcast("agent.registered", 1, v1)
        .unwrap();
    assert_eq!(version, REGISTERED_VERSION);
    assert_eq!(
        v2,
        json!({
            "agent_id": "a1",
            "capabilities": ["python", "rust"],
            "workspace": {"repository": "org/app", "branch": "main"},
            "at": "2024-05-01T10:00:00Z",
        })
    );
    assert_eq!(
        as_event(v2),
        AgentEvent::Registered {
            agent_id: AgentId::try_from("a1").unwrap(),
            capabilities: caps(&["rust", "python"]),
            workspace: app_main(),
            builtin: false,
            at: Utc.with_ymd_and_hms(2024, 5, 1, 10, 0, 0).unwrap(),
        }
    );
}

#[test]
fn v1_workspace_and_time_variants() {
    let at = "2024-05-01T10:00:00Z";
    // (name, v1 fields besides agent_id and capabilities, expected workspace, expected at)
    let cases: Vec<(&str, Value, Option<Workspace>, &str)> = vec![
        (
            "no repo and no branch",
            json!({"registered_at": at}),
            None,
            at,
        ),
        (
            "null repo and branch",
            json!({"repo": null, "branch": null, "registered_at": at}),
            None,
            at,
        ),
        (
            "empty repo and branch",
            json!({"repo": "", "branch": " ", "registered_at": at}),
            None,
            at,
        ),
        (
            "a repo without a branch",
            json!({"repo": "org/app", "registered_at": at}),
            ws("org/app", None),
            at,
        ),
        (
            "a repo with an empty branch",
            json!({"repo": "org/app", "branch": "", "registered_at": at}),
            ws("org/app", None),
            at,
        ),
        (
            "a branch without a repo is dropped",
            json!({"branch": "main", "registered_at": at}),
            None,
            at,
        ),
        (
            "a time with an offset becomes UTC",
            json!({"registered_at": "2024-05-01T12:00:00+02:00"}),
            None,
            at,
        ),
        (
            "fractional seconds are kept",
            json!({"registered_at": "2024-05-01T10:00:00.250Z"}),
            None,
            "2024-05-01T10:00:00.250Z",
        ),
    ];
    for (name, extra, workspace, expected_at) in cases {
        let mut v1 = json!({"agent_id": "a1", "capabilities": ""});
        v1.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let v2 = upcast(v1).unwrap_or_else(|e| panic!("case {name}: {e}"));
        assert_eq!(v2["capabilities"], json!([]), "case: {name}");
        let AgentEvent::Registered {
            workspace: got_workspace,
            at: got_at,
            ..
        } = as_event(v2)
        else {
            panic!("case {name}: not a registration");
        };
        assert_eq!(got_workspace, workspace, "case: {name}");
        assert_eq!(
            got_at,
            DateTime::parse_from_rfc3339(expected_at).unwrap(),
            "case: {name}"
        );
    }
}

#[test]
fn v1_payloads_that_cannot_be_upcast_say_why() {
    let good = json!({
        "agent_id": "a1",
        "capabilities": "rust",
        "repo": "org/app",
        "branch": "main",
        "registered_at": "2024-05-01T10:00:00Z",
    });
    let with = |field: &str, value: Option<Value>| {
        let mut v1 = good.clone();
        let fields = v1.as_object_mut().unwrap();
        match value {
            Some(value) => fields.insert(field.to_string(), value),
            None => fields.remove(field),
        };
        v1
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "not an object",
            json!(["a1"]),
            "the payload is not a JSON object: [\"a1\"]",
        ),
        (
            "agent_id missing",
            with("agent_id", None),
            "agent_id is missing",
        ),
        (
            "agent_id not a string",
            with("agent_id", Some(json!(7))),
            "agent_id must be a string, found 7",
        ),
        (
            "agent_id not a valid name",
            with("agent_id", Some(json!("a 1"))),
            "agent_id: agent id \"a 1\" may contain only letters, digits, '-', '_', '.', ':' and \
             '/' (found ' ')",
        ),
        (
            "capabilities missing",
            with("capabilities", None),
            "capabilities is missing",
        ),
        (
            "capabilities already a list",
            with("capabilities", Some(json!(["rust"]))),
            "capabilities must be a string, found [\"rust\"]",
        ),
        (
            "registered_at missing",
            with("registered_at", None),
            "registered_at is missing",
        ),
        (
            "registered_at not a time",
            with("registered_at", Some(json!("yesterday"))),
            "registered_at \"yesterday\" is not an RFC 3339 time: premature end of input",
        ),
        (
            "repo not a string",
            with("repo", Some(json!({"name": "org/app"}))),
            "repo must be a string or null, found {\"name\":\"org/app\"}",
        ),
        (
            "branch not a string",
            with("branch", Some(json!(true))),
            "branch must be a string or null, found true",
        ),
    ];
    for (name, v1, reason) in cases {
        assert_eq!(upcast(v1), Err(reason.to_string()), "case: {name}");
    }
    let err = crate::domain::upcasters::all()
        .upcast("agent.registered", 1, with("capabilities", None))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot upcast agent.registered from schema version 1: capabilities is missing"
    );
}

#[test]
fn current_registrations_are_not_upcast() {
    let v2 =
        serde_json::to_value(registered(rust(), app_main(), t(0))).unwrap()["agent.registered"]
            .clone();
    assert_eq!(
        crate::domain::upcasters::all()
            .upcast("agent.registered", REGISTERED_VERSION, v2.clone())
            .unwrap(),
        (REGISTERED_VERSION, v2)
    );
    assert_eq!(REGISTERED_V1_TO_V2.event_type, "agent.registered");
    assert_eq!(REGISTERED_V1_TO_V2.from_version, 1);
}
