//! Given / when / then tables for the workflow aggregate.
//!
//! `legal_transitions` and the refusal tables spell out single cases; the
//! `every_command_in_every_state` matrix builds a stream that reaches each state
//! (including "nothing recorded") and checks every command against it, with the
//! expected outcome written out per state here, independently of `decide.rs`.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use cqrs_es::Aggregate;
use cqrs_es::event_sink::EventSink;
use serde_json::{Value, json};
use uuid::Uuid;

use super::*;
use crate::domain::ids::RunId;
use crate::domain::testing::{Stream, assert_wire_format, case, check, fold, given_when, t, then};
use crate::log::StreamType;

impl Stream for WorkflowEvent {
    type Of = WorkflowDefinition;
    const VARIANTS: usize = 9;

    fn variant(&self) -> usize {
        match self {
            WorkflowEvent::VersionRegistered { .. } => 0,
            WorkflowEvent::Proposed { .. } => 1,
            WorkflowEvent::ProposalApproved { .. } => 2,
            WorkflowEvent::ProposalRejected { .. } => 3,
            WorkflowEvent::VersionRetired { .. } => 4,
            WorkflowEvent::Retired { .. } => 5,
            WorkflowEvent::Paused { .. } => 6,
            WorkflowEvent::Resumed { .. } => 7,
            WorkflowEvent::ProposalSuperseded { .. } => 8,
        }
    }

    fn time(&self) -> DateTime<Utc> {
        self.at()
    }
}

type Then = crate::domain::testing::Then<WorkflowEvent>;

// ---- fixtures -------------------------------------------------------------------

/// When the matrix issues its commands: after every event of every path.
const LATE: i64 = 100;

fn deploy() -> WorkflowName {
    WorkflowName::try_from("deploy").unwrap()
}
fn release() -> WorkflowName {
    WorkflowName::try_from("release").unwrap()
}
fn v(s: &str) -> Version {
    s.parse().unwrap()
}
/// The user-submitted version of the paths.
fn v1() -> Version {
    v("1.0.0")
}
/// The version proposal p1 is approved as on the "approved" path.
fn v2() -> Version {
    v("2.0.0")
}
/// A version no path registers.
fn v3() -> Version {
    v("3.0.0")
}
fn p1() -> ProposalId {
    ProposalId::from_uuid(Uuid::from_u128(0x71))
}
fn p2() -> ProposalId {
    ProposalId::from_uuid(Uuid::from_u128(0x72))
}
fn p9() -> ProposalId {
    ProposalId::from_uuid(Uuid::from_u128(0x79))
}
fn run(n: u128) -> RunId {
    RunId::from_uuid(Uuid::from_u128(0x100 + n))
}

/// A content hash: 64 times `c`. Each hash goes with the definition [`def`] of `c`.
fn hash(c: char) -> ContentHash {
    ContentHash::try_from(c.to_string().repeat(CONTENT_HASH_LEN)).unwrap()
}
/// The definition whose hash is [`hash`] of `c`.
fn def(c: char) -> Value {
    json!({"name": "deploy", "steps": [{"id": format!("step-{c}"), "type": "shell"}]})
}
fn evidence() -> Evidence {
    Evidence {
        successes: 9,
        executions: 10,
        example_runs: vec![run(1), run(2)],
        tool_sequence: vec!["git_pull".into(), "cargo_test".into(), "deploy".into()],
        sessions: vec![],
        mean_ms: None,
    }
}

// ---- events (one helper per event, named after it) -------------------------------

fn registered(version: Version, c: char, at: DateTime<Utc>) -> WorkflowEvent {
    WorkflowEvent::VersionRegistered {
        workflow: deploy(),
        version,
        definition: def(c),
        content_hash: hash(c),
        source: VersionSource::UserSubmitted,
        by: "alice".into(),
        at,
    }
}
/// The version a proposal with definition `c` became, approved by bob.
fn registered_learned(
    version: Version,
    proposal_id: ProposalId,
    c: char,
    at: DateTime<Utc>,
) -> WorkflowEvent {
    WorkflowEvent::VersionRegistered {
        workflow: deploy(),
        version,
        definition: def(c),
        content_hash: hash(c),
        source: VersionSource::Learned { proposal_id },
        by: "bob".into(),
        at,
    }
}
fn proposed(proposal_id: ProposalId, c: char, at: DateTime<Utc>) -> WorkflowEvent {
    WorkflowEvent::Proposed {
        workflow: deploy(),
        proposal_id,
        definition: def(c),
        content_hash: hash(c),
        confidence: 0.9,
        evidence: evidence(),
        scope: None,
        at,
    }
}
fn superseded(proposal_id: ProposalId, by: ProposalId, at: DateTime<Utc>) -> WorkflowEvent {
    WorkflowEvent::ProposalSuperseded {
        proposal_id,
        superseded_by: by,
        at,
    }
}
fn approved(proposal_id: ProposalId, version: Version, at: DateTime<Utc>) -> WorkflowEvent {
    WorkflowEvent::ProposalApproved {
        proposal_id,
        version,
        shared: false,
        by: "bob".into(),
        at,
    }
}
/// Both events of an approval of a proposal with definition `c`.
fn approval(
    proposal_id: ProposalId,
    c: char,
    version: Version,
    at: DateTime<Utc>,
) -> Vec<WorkflowEvent> {
    vec![
        approved(proposal_id, version, at),
        registered_learned(version, proposal_id, c, at),
    ]
}
fn rejected(proposal_id: ProposalId, at: DateTime<Utc>) -> WorkflowEvent {
    WorkflowEvent::ProposalRejected {
        proposal_id,
        by: "bob".into(),
        reason: "too specific".into(),
        at,
    }
}
fn version_retired(version: Version, at: DateTime<Utc>) -> WorkflowEvent {
    WorkflowEvent::VersionRetired {
        version,
        by: "carol".into(),
        reason: "broken".into(),
        at,
    }
}
fn retired(at: DateTime<Utc>) -> WorkflowEvent {
    WorkflowEvent::Retired {
        by: "carol".into(),
        reason: "superseded".into(),
        at,
    }
}

// ---- commands (one helper per command; each yields the event helper of its name) ----

fn register(version: Version, c: char, at: DateTime<Utc>) -> WorkflowCommand {
    register_as(deploy(), version, def(c), c, "alice", at)
}
fn register_as(
    workflow: WorkflowName,
    version: Version,
    definition: Value,
    c: char,
    by: &str,
    at: DateTime<Utc>,
) -> WorkflowCommand {
    WorkflowCommand::Register {
        workflow,
        version,
        definition,
        content_hash: hash(c),
        by: by.into(),
        at,
    }
}
fn propose(proposal_id: ProposalId, c: char, at: DateTime<Utc>) -> WorkflowCommand {
    propose_with(deploy(), proposal_id, def(c), c, 0.9, evidence(), at)
}
fn propose_with(
    workflow: WorkflowName,
    proposal_id: ProposalId,
    definition: Value,
    c: char,
    confidence: f64,
    evidence: Evidence,
    at: DateTime<Utc>,
) -> WorkflowCommand {
    WorkflowCommand::Propose {
        workflow,
        proposal_id,
        definition,
        content_hash: hash(c),
        confidence,
        evidence,
        scope: None,
        at,
    }
}
fn approve(proposal_id: ProposalId, version: Version, at: DateTime<Utc>) -> WorkflowCommand {
    approve_by(proposal_id, version, "bob", at)
}
fn approve_by(
    proposal_id: ProposalId,
    version: Version,
    by: &str,
    at: DateTime<Utc>,
) -> WorkflowCommand {
    WorkflowCommand::ApproveProposal {
        proposal_id,
        version,
        shared: false,
        by: by.into(),
        at,
    }
}
fn reject(proposal_id: ProposalId, at: DateTime<Utc>) -> WorkflowCommand {
    reject_with(proposal_id, "bob", "too specific", at)
}
fn reject_with(
    proposal_id: ProposalId,
    by: &str,
    reason: &str,
    at: DateTime<Utc>,
) -> WorkflowCommand {
    WorkflowCommand::RejectProposal {
        proposal_id,
        by: by.into(),
        reason: reason.into(),
        at,
    }
}
fn retire_version(version: Version, at: DateTime<Utc>) -> WorkflowCommand {
    retire_version_with(version, "carol", "broken", at)
}
fn retire_version_with(
    version: Version,
    by: &str,
    reason: &str,
    at: DateTime<Utc>,
) -> WorkflowCommand {
    WorkflowCommand::RetireVersion {
        version,
        by: by.into(),
        reason: reason.into(),
        at,
    }
}
fn retire_workflow(at: DateTime<Utc>) -> WorkflowCommand {
    retire_workflow_with("carol", "superseded", at)
}
fn retire_workflow_with(by: &str, reason: &str, at: DateTime<Utc>) -> WorkflowCommand {
    WorkflowCommand::RetireWorkflow {
        by: by.into(),
        reason: reason.into(),
        at,
    }
}

// ---- paths to every state --------------------------------------------------------

/// The states the matrix runs every command in. Each names what the paths did to
/// version 1.0.0 (user-submitted, definition `a`), proposal p1 (definition `d`) and the
/// workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing recorded on the stream.
    New,
    /// Only p1, open: the workflow exists but has no version.
    Proposed,
    /// 1.0.0 registered, p1 open.
    Registered,
    /// 1.0.0 registered, p1 approved as 2.0.0.
    Approved,
    /// 1.0.0 registered, p1 rejected.
    Rejected,
    /// 1.0.0 retired, p1 open.
    VersionRetired,
    /// 1.0.0 registered, p1 open, the workflow retired.
    WorkflowRetired,
}

const STATES: [State; 7] = [
    State::New,
    State::Proposed,
    State::Registered,
    State::Approved,
    State::Rejected,
    State::VersionRetired,
    State::WorkflowRetired,
];

fn path(state: State) -> Vec<WorkflowEvent> {
    let registered_path = || vec![registered(v1(), 'a', t(0)), proposed(p1(), 'd', t(1))];
    let mut events = match state {
        State::New => vec![],
        State::Proposed => vec![proposed(p1(), 'd', t(0))],
        _ => registered_path(),
    };
    match state {
        State::New | State::Proposed | State::Registered => {}
        State::Approved => events.extend(approval(p1(), 'd', v2(), t(2))),
        State::Rejected => events.push(rejected(p1(), t(2))),
        State::VersionRetired => events.push(version_retired(v1(), t(3))),
        State::WorkflowRetired => events.push(retired(t(4))),
    }
    events
}

/// `path(state)` followed by `more`.
fn after(state: State, more: impl IntoIterator<Item = WorkflowEvent>) -> Vec<WorkflowEvent> {
    then(path(state), more)
}

// ---- expected errors ---------------------------------------------------------------

use WorkflowAction as A;

fn not_found(action: WorkflowAction) -> Then {
    Err(WorkflowError::NotFound { action })
}
/// The retirement of the "workflow retired" path.
fn workflow_retirement() -> Retirement {
    Retirement {
        by: "carol".into(),
        reason: "superseded".into(),
        at: t(4),
    }
}
fn workflow_retired(action: WorkflowAction) -> Then {
    Err(WorkflowError::WorkflowRetired {
        workflow: deploy(),
        action,
        retirement: workflow_retirement(),
    })
}
fn empty(action: WorkflowAction, field: &'static str) -> Then {
    Err(WorkflowError::Empty {
        workflow: deploy(),
        action,
        field,
    })
}
fn immutable(version: Version, registered: char, given: char) -> Then {
    Err(WorkflowError::VersionImmutable {
        workflow: deploy(),
        version,
        registered: hash(registered),
        given: hash(given),
    })
}
fn version_exists(version: Version, proposal: ProposalId) -> Then {
    Err(WorkflowError::VersionExists {
        workflow: deploy(),
        version,
        proposal,
    })
}
fn unknown_version(version: Version, action: WorkflowAction) -> Then {
    Err(WorkflowError::UnknownVersion {
        workflow: deploy(),
        version,
        action,
    })
}
/// 1.0.0 as the "version retired" path retired it.
fn v1_retired(action: WorkflowAction) -> Then {
    Err(WorkflowError::VersionRetired {
        workflow: deploy(),
        version: v1(),
        action,
        retirement: Retirement {
            by: "carol".into(),
            reason: "broken".into(),
            at: t(3),
        },
    })
}
fn unknown_proposal(proposal: ProposalId, action: WorkflowAction) -> Then {
    Err(WorkflowError::UnknownProposal {
        workflow: deploy(),
        proposal,
        action,
    })
}
fn conflict(proposal: ProposalId, proposed: char, given: char) -> Then {
    Err(WorkflowError::ProposalConflict {
        workflow: deploy(),
        proposal,
        proposed: hash(proposed),
        given: hash(given),
    })
}
/// p1 as the "approved" path decided it.
fn p1_approved(action: WorkflowAction) -> Then {
    Err(WorkflowError::ProposalDecided {
        workflow: deploy(),
        proposal: p1(),
        action,
        decision: ProposalDecision::Approved {
            version: v2(),
            shared: false,
            by: "bob".into(),
            at: t(2),
        },
    })
}
/// p1 as the "rejected" path decided it.
fn p1_rejected(action: WorkflowAction) -> Then {
    Err(WorkflowError::ProposalDecided {
        workflow: deploy(),
        proposal: p1(),
        action,
        decision: ProposalDecision::Rejected {
            by: "bob".into(),
            reason: "too specific".into(),
            at: t(2),
        },
    })
}
fn not_an_object(action: WorkflowAction, found: &'static str) -> Then {
    Err(WorkflowError::DefinitionNotAnObject {
        workflow: deploy(),
        action,
        found,
    })
}
fn bad_evidence(successes: u32, executions: u32, why: &'static str) -> Then {
    Err(WorkflowError::InvalidEvidence {
        workflow: deploy(),
        proposal: p2(),
        successes,
        executions,
        why,
    })
}

// ---- decide: what is accepted --------------------------------------------------------

#[test]
fn legal_transitions() {
    let now = t(LATE);
    let cases = vec![
        case(
            "the first version names the workflow",
            vec![],
            register(v1(), 'a', now),
            Ok(vec![registered(v1(), 'a', now)]),
        ),
        case(
            "a second version",
            path(State::Registered),
            register(v("1.1.0"), 'b', now),
            Ok(vec![registered(v("1.1.0"), 'b', now)]),
        ),
        case(
            "a lower version than the latest (a back-port)",
            vec![registered(v("2.0.0"), 'a', t(0))],
            register(v("1.4.1"), 'b', now),
            Ok(vec![registered(v("1.4.1"), 'b', now)]),
        ),
        case(
            "a new version with the same content as another",
            path(State::Registered),
            register(v("1.0.1"), 'a', now),
            Ok(vec![registered(v("1.0.1"), 'a', now)]),
        ),
        case(
            "re-registering a version with the same hash records nothing",
            path(State::Registered),
            register(v1(), 'a', now),
            Ok(vec![]),
        ),
        case(
            "re-registering with the same hash but another definition value: the hash decides",
            path(State::Registered),
            register_as(
                deploy(),
                v1(),
                json!({"reformatted": true}),
                'a',
                "alice",
                now,
            ),
            Ok(vec![]),
        ),
        case(
            "re-registering a learned version's hash records nothing",
            path(State::Approved),
            register(v2(), 'd', now),
            Ok(vec![]),
        ),
        case(
            "re-registering a retired version records nothing and does not revive it",
            path(State::VersionRetired),
            register(v1(), 'a', now),
            Ok(vec![]),
        ),
        case(
            "re-registering a version of a retired workflow records nothing",
            path(State::WorkflowRetired),
            register(v1(), 'a', now),
            Ok(vec![]),
        ),
        case(
            "a proposal names a new workflow",
            vec![],
            propose(p1(), 'd', now),
            Ok(vec![proposed(p1(), 'd', now)]),
        ),
        case(
            "a second proposal with the same definition under a new id supersedes the first",
            path(State::Proposed),
            propose(p2(), 'd', now),
            Ok(vec![superseded(p1(), p2(), now), proposed(p2(), 'd', now)]),
        ),
        case(
            "a proposal of another scope leaves the open one be",
            path(State::Proposed),
            WorkflowCommand::Propose {
                workflow: deploy(),
                proposal_id: p2(),
                definition: def('e'),
                content_hash: hash('e'),
                confidence: 0.9,
                evidence: evidence(),
                scope: Some("team:other".into()),
                at: now,
            },
            Ok(vec![WorkflowEvent::Proposed {
                workflow: deploy(),
                proposal_id: p2(),
                definition: def('e'),
                content_hash: hash('e'),
                confidence: 0.9,
                evidence: evidence(),
                scope: Some("team:other".into()),
                at: now,
            }]),
        ),
        case(
            "a proposal at the bounds of confidence (0)",
            path(State::Registered),
            propose_with(deploy(), p2(), def('e'), 'e', 0.0, evidence(), now),
            Ok(vec![
                superseded(p1(), p2(), now),
                WorkflowEvent::Proposed {
                    workflow: deploy(),
                    proposal_id: p2(),
                    definition: def('e'),
                    content_hash: hash('e'),
                    confidence: 0.0,
                    evidence: evidence(),
                    scope: None,
                    at: now,
                },
            ]),
        ),
        case(
            "a proposal at the bounds of confidence (1), every execution successful, no \
             tools listed",
            path(State::Registered),
            propose_with(
                deploy(),
                p2(),
                def('e'),
                'e',
                1.0,
                Evidence {
                    successes: 3,
                    executions: 3,
                    example_runs: vec![],
                    tool_sequence: vec![],
                    sessions: vec![],
                    mean_ms: None,
                },
                now,
            ),
            Ok(vec![
                superseded(p1(), p2(), now),
                WorkflowEvent::Proposed {
                    workflow: deploy(),
                    proposal_id: p2(),
                    definition: def('e'),
                    content_hash: hash('e'),
                    confidence: 1.0,
                    evidence: Evidence {
                        successes: 3,
                        executions: 3,
                        example_runs: vec![],
                        tool_sequence: vec![],
                        sessions: vec![],
                        mean_ms: None,
                    },
                    scope: None,
                    at: now,
                },
            ]),
        ),
        case(
            "re-proposing an open proposal records nothing",
            path(State::Proposed),
            propose(p1(), 'd', now),
            Ok(vec![]),
        ),
        case(
            "re-proposing a rejected proposal records nothing (it is not reopened)",
            path(State::Rejected),
            propose(p1(), 'd', now),
            Ok(vec![]),
        ),
        case(
            "approving a proposal registers it as a learned version",
            path(State::Registered),
            approve(p1(), v3(), now),
            Ok(approval(p1(), 'd', v3(), now)),
        ),
        case(
            "approving the only proposal of a workflow without versions",
            path(State::Proposed),
            approve(p1(), v1(), now),
            Ok(approval(p1(), 'd', v1(), now)),
        ),
        case(
            "approving a proposal whose definition equals a registered version's",
            vec![registered(v1(), 'a', t(0)), proposed(p2(), 'a', t(1))],
            approve(p2(), v2(), now),
            Ok(approval(p2(), 'a', v2(), now)),
        ),
        case(
            "rejecting an open proposal",
            path(State::Registered),
            reject(p1(), now),
            Ok(vec![rejected(p1(), now)]),
        ),
        case(
            "rejecting an open proposal of a retired workflow clears the inbox",
            path(State::WorkflowRetired),
            reject(p1(), now),
            Ok(vec![rejected(p1(), now)]),
        ),
        case(
            "retiring a user-submitted version",
            path(State::Registered),
            retire_version(v1(), now),
            Ok(vec![version_retired(v1(), now)]),
        ),
        case(
            "retiring a learned version",
            path(State::Approved),
            retire_version(v2(), now),
            Ok(vec![version_retired(v2(), now)]),
        ),
        case(
            "retiring the last runnable version",
            after(State::Approved, [version_retired(v2(), t(5))]),
            retire_version(v1(), now),
            Ok(vec![version_retired(v1(), now)]),
        ),
        case(
            "registering a new version after one was retired",
            path(State::VersionRetired),
            register(v("1.0.1"), 'b', now),
            Ok(vec![registered(v("1.0.1"), 'b', now)]),
        ),
        case(
            "retiring the workflow",
            path(State::Registered),
            retire_workflow(now),
            Ok(vec![retired(now)]),
        ),
        case(
            "retiring a workflow that only has proposals",
            path(State::Proposed),
            retire_workflow(now),
            Ok(vec![retired(now)]),
        ),
        case(
            "retiring a workflow whose versions are all retired",
            path(State::VersionRetired),
            retire_workflow(now),
            Ok(vec![retired(now)]),
        ),
    ];
    check(cases);
}

// ---- decide: what is refused -------------------------------------------------------

#[test]
fn refusals_by_identity_and_state() {
    let now = t(LATE);
    let cases = vec![
        case(
            "another workflow registers on this stream",
            path(State::Registered),
            register_as(release(), v3(), def('c'), 'c', "alice", now),
            Err(WorkflowError::WrongWorkflow {
                stream: deploy(),
                given: release(),
                action: A::Register,
            }),
        ),
        case(
            "another workflow proposes on this stream",
            path(State::Proposed),
            propose_with(release(), p2(), def('e'), 'e', 0.9, evidence(), now),
            Err(WorkflowError::WrongWorkflow {
                stream: deploy(),
                given: release(),
                action: A::Propose,
            }),
        ),
        case(
            "another workflow re-registers an existing version: the name is checked first",
            path(State::Registered),
            register_as(release(), v1(), def('a'), 'a', "alice", now),
            Err(WorkflowError::WrongWorkflow {
                stream: deploy(),
                given: release(),
                action: A::Register,
            }),
        ),
        case(
            "a version changed without a new version number",
            path(State::Registered),
            register(v1(), 'b', now),
            immutable(v1(), 'a', 'b'),
        ),
        case(
            "a learned version changed by a user",
            path(State::Approved),
            register(v2(), 'b', now),
            immutable(v2(), 'd', 'b'),
        ),
        case(
            "a retired version changed",
            path(State::VersionRetired),
            register(v1(), 'b', now),
            immutable(v1(), 'a', 'b'),
        ),
        case(
            "a new version of a retired workflow",
            path(State::WorkflowRetired),
            register(v3(), 'c', now),
            workflow_retired(A::Register),
        ),
        case(
            "a proposal changed under its id",
            path(State::Proposed),
            propose(p1(), 'e', now),
            conflict(p1(), 'd', 'e'),
        ),
        case(
            "a new proposal for a retired workflow",
            path(State::WorkflowRetired),
            propose(p2(), 'e', now),
            workflow_retired(A::Propose),
        ),
        case(
            "approving on an empty stream",
            vec![],
            approve(p1(), v3(), now),
            not_found(A::ApproveProposal),
        ),
        case(
            "approving a proposal that was never made",
            path(State::Registered),
            approve(p9(), v3(), now),
            unknown_proposal(p9(), A::ApproveProposal),
        ),
        case(
            "approving a proposal twice",
            path(State::Approved),
            approve(p1(), v3(), now),
            p1_approved(A::ApproveProposal),
        ),
        case(
            "approving a rejected proposal",
            path(State::Rejected),
            approve(p1(), v3(), now),
            p1_rejected(A::ApproveProposal),
        ),
        case(
            "approving a proposal as a version that exists",
            path(State::Registered),
            approve(p1(), v1(), now),
            version_exists(v1(), p1()),
        ),
        case(
            "approving a proposal as a retired version",
            path(State::VersionRetired),
            approve(p1(), v1(), now),
            version_exists(v1(), p1()),
        ),
        case(
            "approving a proposal of a retired workflow",
            path(State::WorkflowRetired),
            approve(p1(), v3(), now),
            workflow_retired(A::ApproveProposal),
        ),
        case(
            "rejecting a proposal that was never made",
            path(State::Registered),
            reject(p9(), now),
            unknown_proposal(p9(), A::RejectProposal),
        ),
        case(
            "rejecting an approved proposal",
            path(State::Approved),
            reject(p1(), now),
            p1_approved(A::RejectProposal),
        ),
        case(
            "rejecting a proposal twice",
            path(State::Rejected),
            reject(p1(), now),
            p1_rejected(A::RejectProposal),
        ),
        case(
            "retiring a version on an empty stream",
            vec![],
            retire_version(v1(), now),
            not_found(A::RetireVersion),
        ),
        case(
            "retiring a version that was never registered",
            path(State::Registered),
            retire_version(v3(), now),
            unknown_version(v3(), A::RetireVersion),
        ),
        case(
            "retiring the version an open proposal would become: proposals are not versions",
            path(State::Proposed),
            retire_version(v1(), now),
            unknown_version(v1(), A::RetireVersion),
        ),
        case(
            "retiring a version twice is refused, not idempotent",
            path(State::VersionRetired),
            retire_version(v1(), now),
            v1_retired(A::RetireVersion),
        ),
        case(
            "retiring a version of a retired workflow",
            path(State::WorkflowRetired),
            retire_version(v1(), now),
            workflow_retired(A::RetireVersion),
        ),
        case(
            "retiring an empty stream",
            vec![],
            retire_workflow(now),
            not_found(A::RetireWorkflow),
        ),
        case(
            "retiring the workflow twice is refused, not idempotent",
            path(State::WorkflowRetired),
            retire_workflow(now),
            workflow_retired(A::RetireWorkflow),
        ),
    ];
    check(cases);
}

#[test]
fn refusals_by_data() {
    let now = t(LATE);
    let with_evidence = |successes, executions, tools: &[&str]| {
        propose_with(
            deploy(),
            p2(),
            def('e'),
            'e',
            0.5,
            Evidence {
                successes,
                executions,
                example_runs: vec![run(1)],
                tool_sequence: tools.iter().map(|s| s.to_string()).collect(),
                sessions: vec![],
                mean_ms: None,
            },
            now,
        )
    };
    let mut cases = vec![
        case(
            "register without who",
            vec![],
            register_as(deploy(), v1(), def('a'), 'a', "", now),
            empty(A::Register, "by"),
        ),
        case(
            "register with a blank who, even as an idempotent repeat",
            path(State::Registered),
            register_as(deploy(), v1(), def('a'), 'a', " \t", now),
            empty(A::Register, "by"),
        ),
        case(
            "propose with zero executions",
            path(State::Registered),
            with_evidence(0, 0, &["a"]),
            bad_evidence(0, 0, "a proposal is learned from at least one execution"),
        ),
        case(
            "propose with more successes than executions",
            path(State::Registered),
            with_evidence(4, 3, &["a"]),
            bad_evidence(4, 3, "there cannot be more successes than executions"),
        ),
        case(
            "propose with an empty tool name",
            path(State::Registered),
            with_evidence(3, 3, &["git_pull", " "]),
            empty(A::Propose, "tool name"),
        ),
        case(
            "approve without who",
            path(State::Registered),
            approve_by(p1(), v3(), "", now),
            empty(A::ApproveProposal, "by"),
        ),
        case(
            "reject without who",
            path(State::Registered),
            reject_with(p1(), "", "too specific", now),
            empty(A::RejectProposal, "by"),
        ),
        case(
            "reject without a reason",
            path(State::Registered),
            reject_with(p1(), "bob", "  ", now),
            empty(A::RejectProposal, "reason"),
        ),
        case(
            "retire a version without who",
            path(State::Registered),
            retire_version_with(v1(), "", "broken", now),
            empty(A::RetireVersion, "by"),
        ),
        case(
            "retire a version without a reason",
            path(State::Registered),
            retire_version_with(v1(), "carol", "", now),
            empty(A::RetireVersion, "reason"),
        ),
        case(
            "retire the workflow without who",
            path(State::Registered),
            retire_workflow_with("", "superseded", now),
            empty(A::RetireWorkflow, "by"),
        ),
        case(
            "retire the workflow without a reason",
            path(State::Registered),
            retire_workflow_with("carol", "\n", now),
            empty(A::RetireWorkflow, "reason"),
        ),
    ];
    // A definition that is not a JSON object, of every other JSON type, both ways in.
    for (value, found) in [
        (Value::Null, "null"),
        (json!(true), "a boolean"),
        (json!(1.5), "a number"),
        (json!("name: deploy"), "a string"),
        (json!([{"id": "a"}]), "an array"),
    ] {
        cases.push(case(
            &format!("register a definition that is {found}"),
            vec![],
            register_as(deploy(), v1(), value.clone(), 'a', "alice", now),
            not_an_object(A::Register, found),
        ));
        cases.push(case(
            &format!("propose a definition that is {found}"),
            vec![],
            propose_with(deploy(), p1(), value, 'd', 0.9, evidence(), now),
            not_an_object(A::Propose, found),
        ));
    }
    for confidence in [-0.01, 1.01, 2.0, f64::INFINITY, f64::NEG_INFINITY] {
        cases.push(case(
            &format!("propose with confidence {confidence}"),
            path(State::Registered),
            propose_with(deploy(), p2(), def('e'), 'e', confidence, evidence(), now),
            Err(WorkflowError::ConfidenceOutOfRange {
                workflow: deploy(),
                proposal: p2(),
                confidence,
            }),
        ));
    }
    assert_eq!(check(cases), 12 + 5 * 2 + 5);

    // NaN is not equal to itself, so it is matched rather than compared.
    let nan = given_when::<WorkflowDefinition>(
        path(State::Registered),
        propose_with(deploy(), p2(), def('e'), 'e', f64::NAN, evidence(), now),
    );
    assert!(
        matches!(
            nan,
            Err(WorkflowError::ConfidenceOutOfRange { confidence, .. }) if confidence.is_nan()
        ),
        "{nan:?}"
    );
}

// ---- the matrix: every command in every state ----------------------------------------

/// One command and what it must do in each state.
struct Row {
    name: &'static str,
    when: WorkflowCommand,
    then: fn(State) -> Then,
}

/// The matrix, one row per command. Each `then` matches every state by name (no
/// wildcard), so a new state does not compile until every row says what it expects.
fn rows() -> Vec<Row> {
    use State::*;
    vec![
        Row {
            name: "register 1.0.0 with its hash",
            when: register(v1(), 'a', now()),
            then: |state| match state {
                New | Proposed => Ok(vec![registered(v1(), 'a', now())]),
                Registered | Approved | Rejected | VersionRetired | WorkflowRetired => Ok(vec![]),
            },
        },
        Row {
            name: "register 1.0.0 with another hash",
            when: register(v1(), 'b', now()),
            then: |state| match state {
                New | Proposed => Ok(vec![registered(v1(), 'b', now())]),
                Registered | Approved | Rejected | VersionRetired | WorkflowRetired => {
                    immutable(v1(), 'a', 'b')
                }
            },
        },
        Row {
            name: "register 3.0.0",
            when: register(v3(), 'c', now()),
            then: |state| match state {
                New | Proposed | Registered | Approved | Rejected | VersionRetired => {
                    Ok(vec![registered(v3(), 'c', now())])
                }
                WorkflowRetired => workflow_retired(A::Register),
            },
        },
        Row {
            name: "propose p1 with its hash",
            when: propose(p1(), 'd', now()),
            then: |state| match state {
                New => Ok(vec![proposed(p1(), 'd', now())]),
                Proposed | Registered | Approved | Rejected | VersionRetired | WorkflowRetired => {
                    Ok(vec![])
                }
            },
        },
        Row {
            name: "propose p1 with another hash",
            when: propose(p1(), 'e', now()),
            then: |state| match state {
                New => Ok(vec![proposed(p1(), 'e', now())]),
                Proposed | Registered | Approved | Rejected | VersionRetired | WorkflowRetired => {
                    conflict(p1(), 'd', 'e')
                }
            },
        },
        Row {
            name: "propose p2",
            when: propose(p2(), 'e', now()),
            then: |state| match state {
                New | Approved | Rejected => Ok(vec![proposed(p2(), 'e', now())]),
                // p1 is open: the newer proposal of the same scope supersedes it.
                Proposed | Registered | VersionRetired => Ok(vec![
                    superseded(p1(), p2(), now()),
                    proposed(p2(), 'e', now()),
                ]),
                WorkflowRetired => workflow_retired(A::Propose),
            },
        },
        Row {
            name: "approve p1 as 3.0.0",
            when: approve(p1(), v3(), now()),
            then: |state| match state {
                New => not_found(A::ApproveProposal),
                Proposed | Registered | VersionRetired => Ok(approval(p1(), 'd', v3(), now())),
                Approved => p1_approved(A::ApproveProposal),
                Rejected => p1_rejected(A::ApproveProposal),
                WorkflowRetired => workflow_retired(A::ApproveProposal),
            },
        },
        Row {
            name: "approve p1 as 1.0.0",
            when: approve(p1(), v1(), now()),
            then: |state| match state {
                New => not_found(A::ApproveProposal),
                Proposed => Ok(approval(p1(), 'd', v1(), now())),
                Registered | VersionRetired => version_exists(v1(), p1()),
                Approved => p1_approved(A::ApproveProposal),
                Rejected => p1_rejected(A::ApproveProposal),
                WorkflowRetired => workflow_retired(A::ApproveProposal),
            },
        },
        Row {
            name: "approve p9",
            when: approve(p9(), v3(), now()),
            then: |state| match state {
                New => not_found(A::ApproveProposal),
                Proposed | Registered | Approved | Rejected | VersionRetired => {
                    unknown_proposal(p9(), A::ApproveProposal)
                }
                WorkflowRetired => workflow_retired(A::ApproveProposal),
            },
        },
        Row {
            name: "reject p1",
            when: reject(p1(), now()),
            then: |state| match state {
                New => not_found(A::RejectProposal),
                Proposed | Registered | VersionRetired | WorkflowRetired => {
                    Ok(vec![rejected(p1(), now())])
                }
                Approved => p1_approved(A::RejectProposal),
                Rejected => p1_rejected(A::RejectProposal),
            },
        },
        Row {
            name: "reject p9",
            when: reject(p9(), now()),
            then: |state| match state {
                New => not_found(A::RejectProposal),
                Proposed | Registered | Approved | Rejected | VersionRetired | WorkflowRetired => {
                    unknown_proposal(p9(), A::RejectProposal)
                }
            },
        },
        Row {
            name: "retire 1.0.0",
            when: retire_version(v1(), now()),
            then: |state| match state {
                New => not_found(A::RetireVersion),
                Proposed => unknown_version(v1(), A::RetireVersion),
                Registered | Approved | Rejected => Ok(vec![version_retired(v1(), now())]),
                VersionRetired => v1_retired(A::RetireVersion),
                WorkflowRetired => workflow_retired(A::RetireVersion),
            },
        },
        Row {
            name: "retire 2.0.0 (learned on the approved path only)",
            when: retire_version(v2(), now()),
            then: |state| match state {
                New => not_found(A::RetireVersion),
                Proposed | Registered | Rejected | VersionRetired => {
                    unknown_version(v2(), A::RetireVersion)
                }
                Approved => Ok(vec![version_retired(v2(), now())]),
                WorkflowRetired => workflow_retired(A::RetireVersion),
            },
        },
        Row {
            name: "retire the workflow",
            when: retire_workflow(now()),
            then: |state| match state {
                New => not_found(A::RetireWorkflow),
                Proposed | Registered | Approved | Rejected | VersionRetired => {
                    Ok(vec![retired(now())])
                }
                WorkflowRetired => workflow_retired(A::RetireWorkflow),
            },
        },
        Row {
            name: "pause the workflow",
            when: pause(now()),
            then: |state| match state {
                New => not_found(A::Pause),
                _ => Ok(vec![paused(now())]),
            },
        },
        Row {
            name: "resume the workflow",
            when: resume(now()),
            then: |state| match state {
                New => not_found(A::Resume),
                _ => Err(WorkflowError::NotPaused { workflow: deploy() }),
            },
        },
    ]
}

fn pause(at: DateTime<Utc>) -> WorkflowCommand {
    WorkflowCommand::Pause {
        by: "dave".into(),
        reason: "the payments API is down".into(),
        at,
    }
}
fn paused(at: DateTime<Utc>) -> WorkflowEvent {
    WorkflowEvent::Paused {
        by: "dave".into(),
        reason: "the payments API is down".into(),
        at,
    }
}
fn resume(at: DateTime<Utc>) -> WorkflowCommand {
    WorkflowCommand::Resume {
        by: "erin".into(),
        at,
    }
}

#[test]
fn a_paused_workflow_resumes_once_and_pauses_once() {
    let now = t(LATE);
    let held = after(State::Registered, [paused(t(5))]);
    check(vec![
        case(
            "resume a paused workflow",
            held.clone(),
            resume(now),
            Ok(vec![WorkflowEvent::Resumed {
                by: "erin".into(),
                at: now,
            }]),
        ),
        case(
            "pause a paused workflow",
            held.clone(),
            pause(now),
            Err(WorkflowError::AlreadyPaused {
                workflow: deploy(),
                hold: Retirement {
                    by: "dave".into(),
                    reason: "the payments API is down".into(),
                    at: t(5),
                },
            }),
        ),
        case(
            "pause without a reason",
            path(State::Registered),
            WorkflowCommand::Pause {
                by: "dave".into(),
                reason: " ".into(),
                at: now,
            },
            empty(A::Pause, "reason"),
        ),
        case(
            "pause again after a resume",
            then(
                held.clone(),
                [WorkflowEvent::Resumed {
                    by: "erin".into(),
                    at: t(6),
                }],
            ),
            pause(now),
            Ok(vec![paused(now)]),
        ),
    ]);
    assert!(fold(held.clone()).paused().is_some());
    assert!(
        fold(held).runnable(&v1()).is_ok(),
        "a paused workflow takes runs (they queue)"
    );
}

/// When the matrix issues its commands.
fn now() -> DateTime<Utc> {
    t(LATE)
}

#[test]
fn every_command_in_every_state() {
    let rows = rows();
    // Every kind of command has at least one row.
    let actions: BTreeSet<String> = rows
        .iter()
        .map(|row| format!("{:?}", row.when.action()))
        .collect();
    assert_eq!(actions.len(), WorkflowAction::ALL.len());

    let mut cases = Vec::new();
    for row in rows {
        for state in STATES {
            cases.push((
                format!("{} when {state:?}", row.name),
                path(state),
                row.when.clone(),
                (row.then)(state),
            ));
        }
    }
    assert_eq!(check(cases), 16 * 7);
}

#[test]
fn the_paths_reach_the_states_they_are_named_after() {
    let of = |state| fold(path(state));
    let new = of(State::New);
    assert_eq!(new, WorkflowDefinition::default());
    assert!(!new.exists());

    let proposed = of(State::Proposed);
    assert_eq!(proposed.name(), Some(&deploy()));
    assert_eq!(proposed.versions().count(), 0);
    assert_eq!(
        proposed.proposal(&p1()).map(Proposal::status),
        Some(ProposalStatus::Open)
    );

    let registered = of(State::Registered);
    assert_eq!(
        registered.version(&v1()).map(|r| r.is_retired()),
        Some(false)
    );
    assert_eq!(
        registered.proposal(&p1()).map(Proposal::status),
        Some(ProposalStatus::Open)
    );

    let approved = of(State::Approved);
    assert_eq!(
        approved.proposal(&p1()).map(Proposal::status),
        Some(ProposalStatus::Approved)
    );
    assert_eq!(
        approved.version(&v2()).map(|r| r.source),
        Some(VersionSource::Learned { proposal_id: p1() })
    );

    let rejected = of(State::Rejected);
    assert_eq!(
        rejected.proposal(&p1()).map(Proposal::status),
        Some(ProposalStatus::Rejected)
    );
    assert_eq!(rejected.versions().count(), 1);

    let version_retired = of(State::VersionRetired);
    assert_eq!(
        version_retired.version(&v1()).map(|r| r.is_retired()),
        Some(true)
    );
    assert!(!version_retired.is_retired());

    let workflow_retired = of(State::WorkflowRetired);
    assert!(workflow_retired.is_retired());
    assert_eq!(workflow_retired.retirement(), Some(&workflow_retirement()));
    assert_eq!(
        workflow_retired.version(&v1()).map(|r| r.is_retired()),
        Some(false)
    );
}

// ---- state queries -------------------------------------------------------------------

/// A runnable version, as (version, source).
type Picked = Option<(Version, VersionSource)>;

fn latest(events: Vec<WorkflowEvent>) -> Picked {
    fold(events)
        .latest_runnable()
        .map(|r| (r.version, r.source))
}

#[test]
fn the_latest_runnable_version_prefers_user_submitted_ones() {
    let user = VersionSource::UserSubmitted;
    let learned = |p| VersionSource::Learned { proposal_id: p };
    // (name, given, expected latest runnable)
    let cases: Vec<(&str, Vec<WorkflowEvent>, Picked)> = vec![
        ("nothing recorded", vec![], None),
        ("only an open proposal", path(State::Proposed), None),
        (
            "one user version",
            path(State::Registered),
            Some((v1(), user)),
        ),
        (
            "a higher learned version does not beat a user version",
            path(State::Approved),
            Some((v1(), user)),
        ),
        (
            "the highest user version by precedence, not by registration order",
            vec![
                registered(v("1.10.0"), 'a', t(0)),
                registered(v("1.9.3"), 'b', t(1)),
                registered(v("1.2.0"), 'c', t(2)),
            ],
            Some((v("1.10.0"), user)),
        ),
        (
            "a retired version is skipped",
            vec![
                registered(v("1.0.0"), 'a', t(0)),
                registered(v("1.1.0"), 'b', t(1)),
                version_retired(v("1.1.0"), t(2)),
            ],
            Some((v("1.0.0"), user)),
        ),
        (
            "a learned version runs when no user version can",
            after(State::Approved, [version_retired(v1(), t(5))]),
            Some((v2(), learned(p1()))),
        ),
        (
            "the highest learned version when there are only learned ones",
            vec![
                proposed(p1(), 'd', t(0)),
                proposed(p2(), 'e', t(1)),
                approved(p1(), v("0.2.0"), t(2)),
                registered_learned(v("0.2.0"), p1(), 'd', t(2)),
                approved(p2(), v("0.1.0"), t(3)),
                registered_learned(v("0.1.0"), p2(), 'e', t(3)),
            ],
            Some((v("0.2.0"), learned(p1()))),
        ),
        (
            "an approved proposal that is not runnable any more falls back to another",
            vec![
                proposed(p1(), 'd', t(0)),
                proposed(p2(), 'e', t(1)),
                approved(p1(), v("0.2.0"), t(2)),
                registered_learned(v("0.2.0"), p1(), 'd', t(2)),
                approved(p2(), v("0.1.0"), t(3)),
                registered_learned(v("0.1.0"), p2(), 'e', t(3)),
                version_retired(v("0.2.0"), t(4)),
            ],
            Some((v("0.1.0"), learned(p2()))),
        ),
        ("every version retired", path(State::VersionRetired), None),
        ("the workflow retired", path(State::WorkflowRetired), None),
        (
            "the workflow retired with a learned version too",
            after(State::Approved, [retired(t(5))]),
            None,
        ),
    ];
    for (name, given, expected) in cases {
        assert_eq!(latest(given), expected, "case: {name}");
    }
}

#[test]
fn a_version_is_runnable_only_when_registered_and_nothing_is_retired() {
    let workflow = fold(path(State::Approved));
    assert_eq!(workflow.runnable(&v1()).map(|r| r.version), Ok(v1()));
    assert_eq!(workflow.runnable(&v2()).map(|r| r.version), Ok(v2()));
    assert_eq!(
        workflow.runnable(&v3()),
        Err(NotRunnable::UnknownVersion {
            workflow: deploy(),
            version: v3(),
        })
    );
    // An open proposal is not runnable under any version.
    let proposed = fold(path(State::Proposed));
    assert_eq!(
        proposed.runnable(&v1()),
        Err(NotRunnable::UnknownVersion {
            workflow: deploy(),
            version: v1(),
        })
    );
    assert_eq!(
        fold(path(State::VersionRetired)).runnable(&v1()),
        Err(NotRunnable::VersionRetired {
            workflow: deploy(),
            version: v1(),
            retirement: Retirement {
                by: "carol".into(),
                reason: "broken".into(),
                at: t(3),
            },
        })
    );
    assert_eq!(
        fold(path(State::WorkflowRetired)).runnable(&v1()),
        Err(NotRunnable::WorkflowRetired {
            workflow: deploy(),
            retirement: workflow_retirement(),
        })
    );
    assert_eq!(
        WorkflowDefinition::default().runnable(&v1()),
        Err(NotRunnable::NotFound)
    );
}

#[test]
fn a_version_keeps_its_definition_hash_and_source() {
    let workflow = fold(path(State::Approved));
    let user = workflow.version(&v1()).unwrap();
    assert_eq!(user.definition, def('a'));
    assert_eq!(user.content_hash, hash('a'));
    assert_eq!(user.source, VersionSource::UserSubmitted);
    assert_eq!(user.registered_by, "alice");
    assert_eq!(user.registered_at, t(0));
    assert_eq!(user.retirement, None);

    // A learned version is the proposal's definition, registered by its approver.
    let learned = workflow.version(&v2()).unwrap();
    let proposal = workflow.proposal(&p1()).unwrap();
    assert_eq!(learned.definition, proposal.definition);
    assert_eq!(learned.content_hash, proposal.content_hash);
    assert_eq!(learned.source, VersionSource::Learned { proposal_id: p1() });
    assert!(learned.source.is_learned());
    assert_eq!(learned.registered_by, "bob");
    assert_eq!(workflow.version(&v3()), None);

    let versions: Vec<Version> = workflow.versions().map(|r| r.version).collect();
    assert_eq!(versions, vec![v1(), v2()]);
    assert_eq!(workflow.created_at(), Some(t(0)));
    assert_eq!(workflow.updated_at(), Some(t(2)));
}

#[test]
fn open_proposals_are_the_undecided_ones() {
    let ids = |events: Vec<WorkflowEvent>| -> Vec<ProposalId> {
        fold(events)
            .open_proposals()
            .map(|p| p.proposal_id)
            .collect()
    };
    assert_eq!(ids(vec![]), vec![]);
    assert_eq!(ids(path(State::Registered)), vec![p1()]);
    assert_eq!(ids(path(State::Approved)), vec![]);
    assert_eq!(ids(path(State::Rejected)), vec![]);
    assert_eq!(
        ids(after(State::Approved, [proposed(p2(), 'e', t(9))])),
        vec![p2()]
    );
    assert_eq!(
        ids(after(State::Registered, [proposed(p2(), 'e', t(9))])),
        vec![p1(), p2()]
    );
    // Still open, and listed, after the workflow is retired: someone must clear them.
    assert_eq!(ids(path(State::WorkflowRetired)), vec![p1()]);

    let workflow = fold(path(State::Rejected));
    assert_eq!(workflow.proposals().count(), 1);
    let proposal = workflow.proposal(&p1()).unwrap();
    assert!(!proposal.is_open());
    assert_eq!(proposal.confidence, 0.9);
    assert_eq!(proposal.evidence, evidence());
    assert_eq!(proposal.proposed_at, t(1));
    assert_eq!(
        proposal.decision,
        Some(ProposalDecision::Rejected {
            by: "bob".into(),
            reason: "too specific".into(),
            at: t(2),
        })
    );
    assert_eq!(workflow.proposal(&p9()), None);
}

#[test]
fn the_state_round_trips_through_serde() {
    for state in STATES {
        let workflow = fold(path(state));
        let json = serde_json::to_value(&workflow).unwrap();
        assert_eq!(
            serde_json::from_value::<WorkflowDefinition>(json).unwrap(),
            workflow,
            "{state:?}"
        );
    }
    assert_eq!(
        serde_json::to_value(ProposalStatus::ALL).unwrap(),
        json!(["OPEN", "APPROVED", "REJECTED", "SUPERSEDED"])
    );
}

// ---- versions and hashes -------------------------------------------------------------

#[test]
fn versions_are_major_minor_patch() {
    for good in ["0.0.0", "1.2.0", "10.20.30", "18446744073709551615.0.1"] {
        let version: Version = good.parse().unwrap();
        assert_eq!(version.to_string(), good);
        assert_eq!(serde_json::to_value(version).unwrap(), json!(good));
        assert_eq!(
            serde_json::from_value::<Version>(json!(good)).unwrap(),
            version
        );
    }
    assert_eq!(
        (v("1.2.3").major(), v("1.2.3").minor(), v("1.2.3").patch()),
        (1, 2, 3)
    );
    assert_eq!(Version::new(1, 2, 3), v("1.2.3"));
    let bad: Vec<(&str, &str)> = vec![
        ("", "it has 1 dot-separated part, not 3"),
        ("1", "it has 1 dot-separated part, not 3"),
        ("1.2", "it has 2 dot-separated parts, not 3"),
        ("1.2.3.4", "it has 4 dot-separated parts, not 3"),
        ("1..3", "the minor number is empty"),
        ("1.2.", "the patch number is empty"),
        (
            "v1.2.3",
            "the major number \"v1\" contains 'v' (only digits are allowed)",
        ),
        ("1.2.3-rc.1", "it has 4 dot-separated parts, not 3"),
        (
            "1.2.3-rc1",
            "the patch number \"3-rc1\" contains '-' (only digits are allowed)",
        ),
        (
            "1.2.3+build",
            "the patch number \"3+build\" contains '+' (only digits are allowed)",
        ),
        (
            " 1.2.3",
            "the major number \" 1\" contains ' ' (only digits are allowed)",
        ),
        ("01.2.3", "the major number \"01\" has a leading zero"),
        ("1.00.3", "the minor number \"00\" has a leading zero"),
        (
            "1.2.18446744073709551616",
            "the patch number \"18446744073709551616\" is too large",
        ),
    ];
    for (value, reason) in bad {
        assert_eq!(
            value.parse::<Version>(),
            Err(InvalidVersion {
                value: value.into(),
                reason: reason.into(),
            }),
            "{value:?}"
        );
    }
    assert_eq!(
        "1.2".parse::<Version>().unwrap_err().to_string(),
        "workflow version \"1.2\" is not MAJOR.MINOR.PATCH (e.g. 1.2.0): it has 2 \
         dot-separated parts, not 3"
    );
    assert_eq!(
        serde_json::from_value::<Version>(json!("1.02.0"))
            .unwrap_err()
            .to_string(),
        "workflow version \"1.02.0\" is not MAJOR.MINOR.PATCH (e.g. 1.2.0): the minor number \
         \"02\" has a leading zero"
    );
}

#[test]
fn versions_are_ordered_by_precedence() {
    let mut versions: Vec<Version> = ["1.10.0", "2.0.0", "1.9.3", "0.9.9", "1.10.1", "1.2.10"]
        .into_iter()
        .map(v)
        .collect();
    versions.sort();
    let sorted: Vec<String> = versions.iter().map(ToString::to_string).collect();
    assert_eq!(
        sorted,
        ["0.9.9", "1.2.10", "1.9.3", "1.10.0", "1.10.1", "2.0.0"]
    );
}

#[test]
fn content_hashes_are_sha256_hex() {
    let lower = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let hash = ContentHash::try_from(lower).unwrap();
    assert_eq!(hash.as_str(), lower);
    assert_eq!(hash.to_string(), lower);
    // One hash, one spelling.
    assert_eq!(ContentHash::try_from(lower.to_uppercase()).unwrap(), hash);
    assert_eq!(lower.parse::<ContentHash>().unwrap(), hash);
    assert_eq!(serde_json::to_value(&hash).unwrap(), json!(lower));
    assert_eq!(
        serde_json::from_value::<ContentHash>(json!(lower.to_uppercase())).unwrap(),
        hash
    );
    let bad: Vec<(String, &str)> = vec![
        (String::new(), "it has 0 characters, not 64"),
        (lower[..63].to_string(), "it has 63 characters, not 64"),
        (format!("{lower}0"), "it has 65 characters, not 64"),
        (
            format!("sha256:{}", &lower[7..]),
            "'s' is not a hexadecimal digit",
        ),
        (
            format!("{}g", &lower[..63]),
            "'g' is not a hexadecimal digit",
        ),
        (
            format!("{}é", &lower[..63]),
            "'é' is not a hexadecimal digit",
        ),
    ];
    for (value, reason) in bad {
        assert_eq!(
            ContentHash::try_from(value.clone()),
            Err(InvalidContentHash {
                value: value.clone(),
                reason: reason.into(),
            }),
            "{value:?}"
        );
    }
    assert_eq!(
        ContentHash::try_from("abc").unwrap_err().to_string(),
        "content hash \"abc\" is not a SHA-256 in hexadecimal: it has 3 characters, not 64"
    );
    assert_eq!(
        serde_json::from_value::<ContentHash>(json!("abc"))
            .unwrap_err()
            .to_string(),
        "content hash \"abc\" is not a SHA-256 in hexadecimal: it has 3 characters, not 64"
    );
}

// ---- messages ----------------------------------------------------------------------

#[test]
fn errors_say_what_and_why() {
    let message = |given: Vec<WorkflowEvent>, when: WorkflowCommand| {
        given_when::<WorkflowDefinition>(given, when)
            .unwrap_err()
            .to_string()
    };
    let now = t(LATE);
    let a = "a".repeat(64);
    let b = "b".repeat(64);
    let p1 = p1();
    let p9 = p9();
    let cases: Vec<(Vec<WorkflowEvent>, WorkflowCommand, String)> = vec![
        (
            vec![],
            retire_workflow(now),
            "the workflow does not exist: cannot retire the workflow (register a version or \
             propose a workflow first)"
                .into(),
        ),
        (
            path(State::Registered),
            register_as(release(), v3(), def('c'), 'c', "alice", now),
            "this stream belongs to workflow deploy: cannot register a version for workflow \
             release"
                .into(),
        ),
        (
            path(State::WorkflowRetired),
            register(v3(), 'c', now),
            "workflow deploy is retired (by carol at 2025-01-01 12:00:04 UTC: superseded): \
             cannot register a version (a retired workflow takes no new versions, proposals \
             or runs)"
                .into(),
        ),
        (
            vec![],
            register_as(deploy(), v1(), def('a'), 'a', "", now),
            "workflow deploy: cannot register a version with an empty by".into(),
        ),
        (
            vec![],
            register_as(deploy(), v1(), json!([]), 'a', "alice", now),
            "workflow deploy: cannot register a version: the definition must be a JSON object \
             (the parsed workflow file), found an array"
                .into(),
        ),
        (
            path(State::Registered),
            register(v1(), 'b', now),
            format!(
                "workflow deploy version 1.0.0 is already registered with content hash {a}: \
                 cannot register it again with content hash {b} (versions are immutable: give \
                 the changed definition a new version)"
            ),
        ),
        (
            path(State::Registered),
            approve(p1, v1(), now),
            format!(
                "workflow deploy already has version 1.0.0: cannot approve proposal {p1} as it \
                 (choose a version that is not registered)"
            ),
        ),
        (
            path(State::Registered),
            retire_version(v3(), now),
            "workflow deploy has no version 3.0.0: cannot retire a version".into(),
        ),
        (
            path(State::VersionRetired),
            retire_version(v1(), now),
            "workflow deploy version 1.0.0 is already retired (by carol at 2025-01-01 \
             12:00:03 UTC: broken): cannot retire a version"
                .into(),
        ),
        (
            path(State::Registered),
            reject(p9, now),
            format!("workflow deploy has no proposal {p9}: cannot reject a proposal"),
        ),
        (
            path(State::Proposed),
            propose(p1, 'b', now),
            format!(
                "proposal {p1} of workflow deploy was already made with content hash {p}: \
                 cannot propose it again with content hash {b} (a proposal never changes: \
                 propose the new definition under a new id)",
                p = "d".repeat(64),
            ),
        ),
        (
            path(State::Approved),
            reject(p1, now),
            format!(
                "proposal {p1} of workflow deploy was already approved as version 2.0.0 by bob \
                 at 2025-01-01 12:00:02 UTC: cannot reject a proposal (a proposal is decided \
                 once)"
            ),
        ),
        (
            path(State::Rejected),
            approve(p1, v3(), now),
            format!(
                "proposal {p1} of workflow deploy was already rejected by bob at 2025-01-01 \
                 12:00:02 UTC: too specific: cannot approve a proposal (a proposal is decided \
                 once)"
            ),
        ),
        (
            vec![],
            propose_with(deploy(), p1, def('d'), 'd', 1.5, evidence(), now),
            format!(
                "workflow deploy: cannot propose {p1} with confidence 1.5 (confidence is a \
                 fraction from 0 to 1)"
            ),
        ),
        (
            vec![],
            propose_with(
                deploy(),
                p1,
                def('d'),
                'd',
                0.5,
                Evidence {
                    successes: 4,
                    executions: 3,
                    example_runs: vec![],
                    tool_sequence: vec![],
                    sessions: vec![],
                    mean_ms: None,
                },
                now,
            ),
            format!(
                "workflow deploy: cannot propose {p1} with evidence of 4 successful out of 3 \
                 executions (there cannot be more successes than executions)"
            ),
        ),
    ];
    for (given, when, expected) in cases {
        assert_eq!(message(given, when), expected);
    }
}

#[test]
fn not_runnable_says_why() {
    let message = |state: State, version: Version| {
        fold(path(state))
            .runnable(&version)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        message(State::New, v1()),
        "the workflow does not exist: no version of it can run"
    );
    assert_eq!(
        message(State::Proposed, v1()),
        "workflow deploy has no version 1.0.0 (a learned workflow runs only once a person \
         approved it)"
    );
    assert_eq!(
        message(State::VersionRetired, v1()),
        "workflow deploy version 1.0.0 is retired (by carol at 2025-01-01 12:00:03 UTC: \
         broken): it takes no new runs (runs already started finish)"
    );
    assert_eq!(
        message(State::WorkflowRetired, v1()),
        "workflow deploy is retired (by carol at 2025-01-01 12:00:04 UTC: superseded): it \
         takes no new runs (runs already started finish)"
    );
}

// ---- cqrs-es ---------------------------------------------------------------------------

#[tokio::test]
async fn cqrs_es_drives_decide_through_handle() {
    let mut workflow = WorkflowDefinition::default();
    let sink = EventSink::default();
    workflow
        .handle(register(v1(), 'a', t(0)), &(), &sink)
        .await
        .unwrap();
    workflow
        .handle(register(v1(), 'a', t(1)), &(), &sink)
        .await
        .unwrap();
    workflow
        .handle(propose(p1(), 'd', t(2)), &(), &sink)
        .await
        .unwrap();
    workflow
        .handle(approve(p1(), v2(), t(3)), &(), &sink)
        .await
        .unwrap();
    let refused = workflow.handle(register(v1(), 'b', t(4)), &(), &sink).await;
    assert_eq!(refused, immutable(v1(), 'a', 'b').map(|_| ()));
    let mut expected = vec![registered(v1(), 'a', t(0)), proposed(p1(), 'd', t(2))];
    expected.extend(approval(p1(), 'd', v2(), t(3)));
    assert_eq!(sink.collect().await, expected);
    assert_eq!(workflow.latest_runnable().map(|r| r.version), Some(v1()));
    assert_eq!(WorkflowDefinition::TYPE, "workflow");
    assert_eq!(WorkflowDefinition::TYPE, StreamType::Workflow.as_str());
}

// ---- the wire format ---------------------------------------------------------------

/// One instance of every event variant.
fn every_event() -> Vec<WorkflowEvent> {
    let mut events = vec![
        registered(v1(), 'a', t(0)),
        proposed(p1(), 'd', t(1)),
        rejected(p1(), t(3)),
        superseded(p1(), p2(), t(3)),
        version_retired(v1(), t(4)),
        retired(t(5)),
        paused(t(6)),
        WorkflowEvent::Resumed {
            by: "erin".into(),
            at: t(7),
        },
    ];
    events.extend(approval(p1(), 'd', v2(), t(2)));
    events
}

#[test]
fn every_event_is_tagged_with_its_type_and_round_trips() {
    assert_wire_format(every_event(), |_| "1");
    assert_eq!(SCHEMA_VERSION, 1);
}

#[test]
fn payloads_read_as_documented() {
    let a = "a".repeat(64);
    let p = "d".repeat(64);
    let p1_id = p1().to_string();
    let cases: Vec<(WorkflowEvent, Value)> = vec![
        (
            registered(v1(), 'a', t(0)),
            json!({"workflow.version_registered": {
                "workflow": "deploy",
                "version": "1.0.0",
                "definition": {"name": "deploy", "steps": [{"id": "step-a", "type": "shell"}]},
                "content_hash": a,
                "source": {"kind": "user_submitted"},
                "by": "alice",
                "at": "2025-01-01T12:00:00Z",
            }}),
        ),
        (
            registered_learned(v2(), p1(), 'd', t(2)),
            json!({"workflow.version_registered": {
                "workflow": "deploy",
                "version": "2.0.0",
                "definition": {"name": "deploy", "steps": [{"id": "step-d", "type": "shell"}]},
                "content_hash": p,
                "source": {"kind": "learned", "proposal_id": p1_id},
                "by": "bob",
                "at": "2025-01-01T12:00:02Z",
            }}),
        ),
        (
            proposed(p1(), 'd', t(1)),
            json!({"workflow.proposed": {
                "workflow": "deploy",
                "proposal_id": p1_id,
                "definition": {"name": "deploy", "steps": [{"id": "step-d", "type": "shell"}]},
                "content_hash": p,
                "confidence": 0.9,
                "evidence": {
                    "successes": 9,
                    "executions": 10,
                    "example_runs": [run(1).to_string(), run(2).to_string()],
                    "tool_sequence": ["git_pull", "cargo_test", "deploy"],
                },
                "at": "2025-01-01T12:00:01Z",
            }}),
        ),
        (
            approved(p1(), v2(), t(2)),
            json!({"workflow.proposal_approved": {
                "proposal_id": p1_id,
                "version": "2.0.0",
                "by": "bob",
                "at": "2025-01-01T12:00:02Z",
            }}),
        ),
        (
            rejected(p1(), t(3)),
            json!({"workflow.proposal_rejected": {
                "proposal_id": p1_id,
                "by": "bob",
                "reason": "too specific",
                "at": "2025-01-01T12:00:03Z",
            }}),
        ),
        (
            superseded(p1(), p2(), t(3)),
            json!({"workflow.proposal_superseded": {
                "proposal_id": p1_id,
                "superseded_by": p2().to_string(),
                "at": "2025-01-01T12:00:03Z",
            }}),
        ),
        (
            paused(t(6)),
            json!({"workflow.paused": {
                "by": "dave",
                "reason": "the payments API is down",
                "at": "2025-01-01T12:00:06Z",
            }}),
        ),
        (
            version_retired(v1(), t(4)),
            json!({"workflow.version_retired": {
                "version": "1.0.0",
                "by": "carol",
                "reason": "broken",
                "at": "2025-01-01T12:00:04Z",
            }}),
        ),
        (
            retired(t(5)),
            json!({"workflow.retired": {
                "by": "carol",
                "reason": "superseded",
                "at": "2025-01-01T12:00:05Z",
            }}),
        ),
        (
            WorkflowEvent::Resumed {
                by: "erin".into(),
                at: t(7),
            },
            json!({"workflow.resumed": {
                "by": "erin",
                "at": "2025-01-01T12:00:07Z",
            }}),
        ),
    ];
    let covered: BTreeSet<usize> = cases.iter().map(|(e, _)| e.variant()).collect();
    assert_eq!(
        covered.len(),
        WorkflowEvent::VARIANTS,
        "every variant has a literal"
    );
    for (event, literal) in cases {
        assert_eq!(serde_json::to_value(&event).unwrap(), literal);
        // And the literal, as a stored row would hand it over, reads back as the event.
        assert_eq!(
            serde_json::from_value::<WorkflowEvent>(literal).unwrap(),
            event
        );
    }
}

#[test]
fn malformed_payloads_are_refused_when_read() {
    let payload = |version: &str, hash: &str| {
        json!({"workflow.version_registered": {
            "workflow": "deploy",
            "version": version,
            "definition": {},
            "content_hash": hash,
            "source": {"kind": "user_submitted"},
            "by": "alice",
            "at": "2025-01-01T12:00:00Z",
        }})
    };
    let a = "a".repeat(64);
    let reason = |value: Value| {
        serde_json::from_value::<WorkflowEvent>(value)
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        serde_json::from_value::<WorkflowEvent>(payload("1.0.0", &a)).unwrap(),
        WorkflowEvent::VersionRegistered {
            workflow: deploy(),
            version: v1(),
            definition: json!({}),
            content_hash: hash('a'),
            source: VersionSource::UserSubmitted,
            by: "alice".into(),
            at: t(0),
        }
    );
    assert_eq!(
        reason(payload("1.0", &a)),
        "workflow version \"1.0\" is not MAJOR.MINOR.PATCH (e.g. 1.2.0): it has 2 \
         dot-separated parts, not 3"
    );
    assert_eq!(
        reason(payload("1.0.0", "abc")),
        "content hash \"abc\" is not a SHA-256 in hexadecimal: it has 3 characters, not 64"
    );
    assert_eq!(
        serde_json::from_value::<VersionSource>(json!({"kind": "imported"}))
            .unwrap_err()
            .to_string(),
        "unknown variant `imported`, expected `user_submitted` or `learned`"
    );
}
