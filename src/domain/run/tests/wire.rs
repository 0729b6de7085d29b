//! The permanent event format: every event is tagged with its dotted type, round-trips,
//! and literal payloads load as documented.

use std::str::FromStr;

use cqrs_es::DomainEvent;
use serde_json::{Value, json};

use super::fixtures::*;
use crate::domain::run::*;
use crate::domain::testing::assert_wire_format;

/// One instance of every event variant (and of the optional parts of some).
fn every_event() -> Vec<RunEvent> {
    vec![
        started(t(0)),
        under(Rules::CURRENT, started(t(0))),
        started_with(None, None, Some(parent()), t(0)),
        step_scheduled(build(), t(2), t(1)),
        step_started(build(), 1, "build-1", Some(t(60)), t(2)),
        step_started(build(), 1, "build-1", None, t(3)),
        step_succeeded(build(), 1, Some(0.5), Some(20), t(4)),
        step_succeeded(fetch(), 1, None, None, t(4)),
        step_failed(deploy(), 1, ErrorClass::RateLimit, t(5)),
        step_retried(deploy(), 2, 2_500, t(6)),
        step_skipped(verify(), "condition is false", t(7)),
        recovery_applied(deploy(), ErrorClass::RateLimit, RecoveryAction::Retry, t(8)),
        recovery_applied(
            deploy(),
            ErrorClass::Timeout,
            RecoveryAction::IncreaseTimeout {
                new_timeout_seconds: 300,
            },
            t(8),
        ),
        recovery_applied(
            deploy(),
            ErrorClass::Dependency,
            RecoveryAction::Fallback {
                tool: "curl".into(),
            },
            t(8),
        ),
        recovery_applied(
            deploy(),
            ErrorClass::Validation,
            RecoveryAction::Escalate { gate_id: g3() },
            t(8),
        ),
        gate_opened(g1(), deploy(), &["alice", "bob"], Some(t(60)), t(9)),
        gate_opened(g2(), deploy(), &[], None, t(9)),
        gate_approved(g1(), "alice", Some("ok"), t(10)),
        gate_approved(g1(), "alice", None, t(10)),
        gate_rejected(g2(), "bob", "no", t(11)),
        gate_expired(g3(), t(12)),
        cost_charged(Some(build()), 0.5, 20, 2.5, t(13)),
        cost_charged(None, 0.0, 0, 2.5, t(13)),
        budget_exceeded(BUDGET, 10.5, t(14)),
        compensation_started("build failed", vec![fetch(), build()], t(15)),
        compensation_step_ran(fetch(), None, t(16)),
        compensation_step_ran(build(), Some("refund API down"), t(17)),
        completed(t(18)),
        failed("build failed", Some(ErrorClass::Budget), t(19)),
        failed("gave up", None, t(19)),
        cancelled("alice", t(20)),
        paused("ops", t(0)),
        resumed("ops", t(0)),
        step_carried(build(), t(0)),
        derived("ops", t(0)),
        continued(RunStatus::Waiting, t(21)),
        RunEvent::Paused {
            by: "ops".into(),
            reason: "workflow paused".into(),
            at: t(22),
            workflow: true,
        },
        started_queued(t(23)),
        queued(SCOPE, t(23)),
        admitted(t(24)),
        step_throttled(build(), 1, 1_500, t(25)),
    ]
}

#[test]
fn every_event_is_tagged_with_its_type_and_round_trips() {
    assert_wire_format(every_event(), |_| "1");
}

#[test]
fn the_event_types_are_the_documented_names() {
    let types: Vec<String> = [
        started(t(0)),
        step_scheduled(build(), t(0), t(0)),
        step_started(build(), 1, "k", None, t(0)),
        step_succeeded(build(), 1, None, None, t(0)),
        step_failed(build(), 1, ErrorClass::Network, t(0)),
        step_retried(build(), 2, 0, t(0)),
        step_skipped(build(), "r", t(0)),
        recovery_applied(build(), ErrorClass::Network, RecoveryAction::Abort, t(0)),
        gate_opened(g1(), build(), &[], None, t(0)),
        gate_approved(g1(), "a", None, t(0)),
        gate_rejected(g1(), "a", "c", t(0)),
        gate_expired(g1(), t(0)),
        cost_charged(None, 0.0, 0, 0.0, t(0)),
        budget_exceeded(1.0, 2.0, t(0)),
        compensation_started("r", vec![], t(0)),
        compensation_step_ran(build(), None, t(0)),
        completed(t(0)),
        failed("r", None, t(0)),
        cancelled("a", t(0)),
        paused("ops", t(0)),
        resumed("ops", t(0)),
        step_carried(build(), t(0)),
        derived("ops", t(0)),
        continued(RunStatus::Running, t(0)),
        queued(SCOPE, t(0)),
        admitted(t(0)),
        step_throttled(build(), 1, 1, t(0)),
    ]
    .iter()
    .map(DomainEvent::event_type)
    .collect();
    assert_eq!(
        types,
        [
            "run.started",
            "run.step_scheduled",
            "run.step_started",
            "run.step_succeeded",
            "run.step_failed",
            "run.step_retried",
            "run.step_skipped",
            "run.recovery_applied",
            "run.gate_opened",
            "run.gate_approved",
            "run.gate_rejected",
            "run.gate_expired",
            "run.cost_charged",
            "run.budget_exceeded",
            "run.compensation_started",
            "run.compensation_step_ran",
            "run.completed",
            "run.failed",
            "run.cancelled",
            "run.paused",
            "run.resumed",
            "run.step_carried",
            "run.derived",
            "run.continued",
            "run.queued",
            "run.admitted",
            "run.step_throttled",
        ]
    );
}

#[test]
fn a_started_payload_reads_as_documented() {
    assert_eq!(
        serde_json::to_value(started(t(0))).unwrap(),
        json!({"run.started": {
            "run_id": "00000000-0000-0000-0000-000000000001",
            "workflow": "release",
            "workflow_version": "3",
            "inputs": {"branch": "main"},
            "budget_usd": 10.0,
            "timeout_at": "2025-01-01T14:46:40Z",
            "parent": null,
            "at": "2025-01-01T12:00:00Z",
        }})
    );
    let sub_run: RunEvent = serde_json::from_value(json!({"run.started": {
        "run_id": "00000000-0000-0000-0000-000000000001",
        "workflow": "release",
        "workflow_version": "3",
        "inputs": {"branch": "main"},
        "budget_usd": null,
        "timeout_at": null,
        "parent": {"run_id": "00000000-0000-0000-0000-000000000099", "step_id": "spawn"},
        "at": "2025-01-01T12:00:00Z",
    }}))
    .unwrap();
    assert_eq!(sub_run, started_with(None, None, Some(parent()), t(0)));
}

/// A start recorded before rules had versions carries none and reads as the first
/// rules; a later one names its rules, and a continuation's state keeps them.
#[test]
fn a_runs_rules_are_recorded_on_its_start_and_default_to_the_first() {
    let current = serde_json::to_value(under(Rules::CURRENT, started(t(0)))).unwrap();
    assert_eq!(current["run.started"]["rules"], json!(2));
    let first = serde_json::to_value(started(t(0))).unwrap();
    assert!(first["run.started"].get("rules").is_none(), "{first}");
    let run: Run = fold(vec![under(Rules(2), started(t(0)))]);
    assert_eq!(run.rules(), Rules(2));
    let carried: Run = serde_json::from_value(serde_json::to_value(&run).unwrap()).unwrap();
    assert_eq!(carried.rules(), Rules(2));
    let before: Run = fold(vec![started(t(0))]);
    assert_eq!(before.rules(), Rules::FIRST);
    let state = serde_json::to_value(&before).unwrap();
    assert!(state.get("rules").is_none(), "{state}");
    let carried: Run = serde_json::from_value(state).unwrap();
    assert_eq!(carried.rules(), Rules::FIRST);
}

/// Literal payloads, as a store row holds them, and the events they are.
fn literal_payloads() -> Vec<(Value, RunEvent)> {
    vec![
        (
            json!({"run.step_failed": {
                "step_id": "deploy",
                "attempt": 2,
                "error": {"class": "rate_limit", "message": "rate_limit trouble"},
                "at": "2025-01-01T12:01:40Z",
            }}),
            step_failed(deploy(), 2, ErrorClass::RateLimit, t(100)),
        ),
        (
            json!({"run.step_retried": {
                "step_id": "deploy",
                "next_attempt": 3,
                "due_at": "2025-01-01T12:01:42.500Z",
                "backoff_ms": 2500,
                "at": "2025-01-01T12:01:40Z",
            }}),
            step_retried(deploy(), 3, 2_500, t(100)),
        ),
        (
            json!({"run.recovery_applied": {
                "step_id": "deploy",
                "error_class": "dependency",
                "action": {"kind": "fallback", "tool": "curl"},
                "at": "2025-01-01T12:00:08Z",
            }}),
            recovery_applied(
                deploy(),
                ErrorClass::Dependency,
                RecoveryAction::Fallback {
                    tool: "curl".into(),
                },
                t(8),
            ),
        ),
        (
            json!({"run.recovery_applied": {
                "step_id": "deploy",
                "error_class": "timeout",
                "action": {"kind": "increase_timeout", "new_timeout_seconds": 120},
                "at": "2025-01-01T12:00:08Z",
            }}),
            recovery_applied(
                deploy(),
                ErrorClass::Timeout,
                RecoveryAction::IncreaseTimeout {
                    new_timeout_seconds: 120,
                },
                t(8),
            ),
        ),
        (
            json!({"run.recovery_applied": {
                "step_id": "deploy",
                "error_class": "authentication",
                "action": {"kind": "escalate", "gate_id": "00000000-0000-0000-0000-000000000013"},
                "at": "2025-01-01T12:00:08Z",
            }}),
            recovery_applied(
                deploy(),
                ErrorClass::Authentication,
                RecoveryAction::Escalate { gate_id: g3() },
                t(8),
            ),
        ),
        (
            json!({"run.recovery_applied": {
                "step_id": "deploy",
                "error_class": "network",
                "action": {"kind": "retry_with_backoff"},
                "at": "2025-01-01T12:00:08Z",
            }}),
            recovery_applied(
                deploy(),
                ErrorClass::Network,
                RecoveryAction::RetryWithBackoff,
                t(8),
            ),
        ),
        (
            json!({"run.gate_opened": {
                "gate_id": "00000000-0000-0000-0000-000000000012",
                "step_id": "verify",
                "approvers": [],
                "message": "ship it?",
                "expires_at": null,
                "at": "2025-01-01T12:00:09Z",
            }}),
            gate_opened(g2(), verify(), &[], None, t(9)),
        ),
        (
            json!({"run.cost_charged": {
                "step_id": null,
                "usd": 0.25,
                "tokens": 40,
                "total_usd": 2.25,
                "at": "2025-01-01T12:01:40Z",
            }}),
            cost_charged(None, 0.25, 40, 2.25, t(100)),
        ),
        (
            json!({"run.compensation_step_ran": {
                "step_id": "fetch",
                "succeeded": false,
                "error": "refund API down",
                "at": "2025-01-01T12:00:21Z",
            }}),
            compensation_step_ran(fetch(), Some("refund API down"), t(21)),
        ),
        (
            json!({"run.completed": {"outputs": {"released": true}, "at": "2025-01-01T12:00:20Z"}}),
            completed(t(20)),
        ),
        (
            json!({"run.failed": {"reason": "build failed", "error_class": "budget", "at": "2025-01-01T12:00:22Z"}}),
            failed("build failed", Some(ErrorClass::Budget), t(22)),
        ),
    ]
}

#[test]
fn literal_payloads_load_as_documented() {
    for (value, event) in literal_payloads() {
        let loaded: RunEvent =
            serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{value}: {e}"));
        assert_eq!(loaded, event, "{value}");
        assert_eq!(serde_json::to_value(&event).unwrap(), value);
    }
}

#[test]
fn optional_fields_may_be_absent() {
    let loaded: RunEvent = serde_json::from_value(json!({"run.step_succeeded": {
        "step_id": "fetch",
        "attempt": 1,
        "output": {"step": "fetch", "artifact": "fetch.tar"},
        "at": "2025-01-01T12:00:03Z",
    }}))
    .unwrap();
    assert_eq!(loaded, step_succeeded(fetch(), 1, None, None, t(3)));
}

#[test]
fn malformed_payloads_are_refused() {
    // (payload, the start of the reason it is refused with)
    let refused = [
        (
            json!({"run.exploded": {"at": "2025-01-01T12:00:00Z"}}),
            "unknown variant `run.exploded`, expected one of `run.started`, ",
        ),
        (
            json!({"run.step_failed": {
                "step_id": "deploy",
                "attempt": 1,
                "error": {"class": "cosmic_ray", "message": "?"},
                "at": "2025-01-01T12:00:00Z",
            }}),
            "unknown variant `cosmic_ray`, expected one of `network`, ",
        ),
        (
            json!({"run.step_skipped": {"step_id": "not a step", "reason": "r", "at": "2025-01-01T12:00:00Z"}}),
            "step id \"not a step\" may contain only letters, digits, '-', '_', '.', ':' and '/' \
             (found ' ')",
        ),
        (
            json!({"run.recovery_applied": {
                "step_id": "deploy",
                "error_class": "network",
                "action": {"kind": "pray"},
                "at": "2025-01-01T12:00:00Z",
            }}),
            "unknown variant `pray`, expected one of `retry`, ",
        ),
        (
            json!({"run.step_started": {
                "step_id": "deploy",
                "attempt": -1,
                "idempotency_key": "k",
                "at": "2025-01-01T12:00:00Z",
            }}),
            "invalid value: integer `-1`, expected u32",
        ),
    ];
    for (value, reason) in refused {
        let err = serde_json::from_value::<RunEvent>(value.clone()).unwrap_err();
        assert!(err.to_string().starts_with(reason), "{value}: {err}");
    }
}

#[test]
fn error_classes_and_recovery_kinds_use_their_wire_names() {
    let names: Vec<&str> = ErrorClass::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(
        names,
        [
            "network",
            "rate_limit",
            "authentication",
            "dependency",
            "validation",
            "timeout",
            "budget",
            "unknown",
        ]
    );
    for class in ErrorClass::ALL {
        assert_eq!(serde_json::to_value(class).unwrap(), json!(class.as_str()));
        assert_eq!(class.to_string(), class.as_str());
        assert_eq!(ErrorClass::from_str(class.as_str()), Ok(class));
    }
    assert_eq!(
        ErrorClass::from_str("RateLimit"),
        Err(UnknownErrorClass("RateLimit".into()))
    );
    assert!(
        UnknownErrorClass("x".into())
            .to_string()
            .starts_with("unknown error class \"x\" (expected one of network, rate_limit")
    );

    let actions = [
        (RecoveryAction::Retry, "retry", "retry"),
        (
            RecoveryAction::RetryWithBackoff,
            "retry_with_backoff",
            "retry_with_backoff",
        ),
        (
            RecoveryAction::IncreaseTimeout {
                new_timeout_seconds: 90,
            },
            "increase_timeout",
            "increase_timeout to 90 s",
        ),
        (RecoveryAction::RefreshAuth, "refresh_auth", "refresh_auth"),
        (
            RecoveryAction::Fallback {
                tool: "wget".into(),
            },
            "fallback",
            "fallback to `wget`",
        ),
        (
            RecoveryAction::Escalate { gate_id: g1() },
            "escalate",
            "escalate to gate 00000000-0000-0000-0000-000000000011",
        ),
        (RecoveryAction::Abort, "abort", "abort"),
    ];
    for (action, kind, shown) in actions {
        assert_eq!(action.kind(), kind);
        assert_eq!(serde_json::to_value(&action).unwrap()["kind"], json!(kind));
        assert_eq!(action.to_string(), shown);
    }
}

#[test]
fn state_values_are_tagged_as_documented() {
    assert_eq!(
        serde_json::to_value(StepState::Failed {
            attempt: 2,
            error: step_error(ErrorClass::Network),
            is_final: true,
        })
        .unwrap(),
        json!({
            "status": "FAILED",
            "attempt": 2,
            "error": {"class": "network", "message": "network trouble"},
            "final": true,
        })
    );
    assert_eq!(
        serde_json::to_value(StepState::Running {
            attempt: 1,
            idempotency_key: "k".into(),
            started_at: t(0),
            timeout_at: None,
        })
        .unwrap(),
        json!({
            "status": "RUNNING",
            "attempt": 1,
            "idempotency_key": "k",
            "started_at": "2025-01-01T12:00:00Z",
            "timeout_at": null,
        })
    );
    assert_eq!(
        serde_json::to_value(GateDecision::Approved {
            by: "alice".into(),
            comment: None,
            at: t(0),
        })
        .unwrap(),
        json!({"decision": "APPROVED", "by": "alice", "comment": null, "at": "2025-01-01T12:00:00Z"})
    );
    assert_eq!(
        serde_json::to_value(RunOutcome::Cancelled {
            by: "alice".into(),
            reason: "r".into(),
            at: t(0),
        })
        .unwrap(),
        json!({"status": "CANCELLED", "by": "alice", "reason": "r", "at": "2025-01-01T12:00:00Z"})
    );
    assert_eq!(
        serde_json::to_value(StepPhase::Skipped).unwrap(),
        json!("SKIPPED")
    );
    assert_eq!(
        serde_json::to_value(AttemptOutcome::Succeeded).unwrap(),
        json!("SUCCEEDED")
    );
}

#[test]
fn compensation_started_keeps_the_failure_class_and_reads_without_it() {
    let with = RunEvent::CompensationStarted {
        reason: "step `ship` failed: boom".into(),
        error_class: Some(ErrorClass::Dependency),
        steps: vec![fetch()],
        at: t(15),
    };
    let value = serde_json::to_value(&with).unwrap();
    assert_eq!(
        value["run.compensation_started"]["error_class"],
        "dependency"
    );
    assert_eq!(serde_json::from_value::<RunEvent>(value).unwrap(), with);
    // Written before the class was recorded: it reads as none.
    let old: RunEvent = serde_json::from_value(json!({"run.compensation_started": {
        "reason": "r", "steps": [], "at": "2025-01-01T12:00:00Z"
    }}))
    .unwrap();
    assert!(matches!(
        old,
        RunEvent::CompensationStarted {
            error_class: None,
            ..
        }
    ));
    // The fold keeps it for the run's failure.
    let run = fold([started(t(0)), with_event(t(1))]);
    assert_eq!(
        run.compensation().unwrap().error_class,
        Some(ErrorClass::Budget)
    );
}

fn with_event(at: DateTime<Utc>) -> RunEvent {
    RunEvent::CompensationStarted {
        reason: "over budget".into(),
        error_class: Some(ErrorClass::Budget),
        steps: vec![],
        at,
    }
}

/// The store tells finished runs by these types alone: exactly the events that end a
/// run carry them.
#[test]
fn finished_event_types_are_the_events_that_end_a_run() {
    let mut seen = Vec::new();
    for event in every_event() {
        let ends = matches!(
            event,
            RunEvent::Completed { .. } | RunEvent::Failed { .. } | RunEvent::Cancelled { .. }
        );
        let kind = event.event_type();
        assert_eq!(
            FINISHED_EVENT_TYPES.contains(&kind.as_str()),
            ends,
            "{kind}"
        );
        if ends {
            seen.push(kind);
        }
    }
    for kind in FINISHED_EVENT_TYPES {
        assert!(
            seen.iter().any(|s| s == kind),
            "{kind} is not an event type"
        );
    }
}
