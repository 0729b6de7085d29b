//! Refusals that depend on a command's data, each with its exact typed error, and the
//! messages a person reads.

use super::fixtures::*;
use crate::domain::run::RunStatus::*;
use crate::domain::run::*;
use crate::domain::testing::given_when;

#[test]
fn refused_starts() {
    let now = t(LATE);
    let mut cases = vec![
        case(
            "start with an empty workflow version",
            vec![],
            start_with("", None, None, None, now),
            Err(empty(RunAction::Start, "workflow version")),
        ),
        case(
            "start with a blank workflow version",
            vec![],
            start_with(" \t", None, None, None, now),
            Err(empty(RunAction::Start, "workflow version")),
        ),
        case(
            "start with a negative budget",
            vec![],
            start_with("3", Some(-0.01), None, None, now),
            Err(invalid_amount(RunAction::Start, "budget_usd", -0.01)),
        ),
        case(
            "start with an infinite budget",
            vec![],
            start_with("3", Some(f64::INFINITY), None, None, now),
            Err(invalid_amount(
                RunAction::Start,
                "budget_usd",
                f64::INFINITY,
            )),
        ),
        case(
            "start with a deadline equal to the start",
            vec![],
            start_with("3", None, Some(now), None, now),
            Err(not_after(RunAction::Start, "timeout_at", now, now)),
        ),
        case(
            "start with a deadline in the past",
            vec![],
            start_with("3", None, Some(t(0)), None, now),
            Err(not_after(RunAction::Start, "timeout_at", t(0), now)),
        ),
    ];
    for status in [Running, Waiting, Compensating] {
        cases.push(case(
            &format!("start a run that is {status}"),
            path(status),
            start(now),
            Err(RunError::AlreadyStarted {
                run: run_id(),
                status,
            }),
        ));
    }
    check(cases);
}

#[test]
fn refused_step_starts() {
    let now = t(LATE);
    check(vec![
        case(
            "schedule a step twice",
            path(Running),
            schedule(verify(), now, now),
            Err(RunError::StepAlreadyScheduled {
                run: run_id(),
                step: verify(),
                now: situation(StepPhase::Scheduled, 1),
            }),
        ),
        case(
            "schedule a step that succeeded",
            path(Running),
            schedule(fetch(), now, now),
            Err(RunError::StepAlreadyScheduled {
                run: run_id(),
                step: fetch(),
                now: situation(StepPhase::Succeeded, 1),
            }),
        ),
        case(
            "start a step that was never scheduled",
            path(Running),
            start_step(notify(), 1, "notify-1", None, now),
            Err(unknown_step(notify(), RunAction::StartStep)),
        ),
        case(
            "start attempt 2 of a step scheduled for attempt 1",
            path(Running),
            start_step(verify(), 2, "verify-2", None, now),
            Err(attempt_not_in(
                verify(),
                2,
                StepPhase::Scheduled,
                situation(StepPhase::Scheduled, 1),
            )),
        ),
        case(
            "start attempt 1 of a step retried to attempt 2",
            after(Running, [step_retried(build(), 2, 1_000, t(30))]),
            start_step(build(), 1, "build-1", None, now),
            Err(attempt_not_in(
                build(),
                1,
                StepPhase::Scheduled,
                situation(StepPhase::Scheduled, 2),
            )),
        ),
        case(
            "start a failed attempt again",
            path(Running),
            start_step(build(), 1, "build-1", None, now),
            Err(attempt_not_in(
                build(),
                1,
                StepPhase::Scheduled,
                situation(StepPhase::Failed, 1),
            )),
        ),
        case(
            "start attempt 2 while attempt 1 runs",
            path(Running),
            start_step(deploy(), 2, "deploy-2", None, now),
            Err(attempt_not_in(
                deploy(),
                2,
                StepPhase::Scheduled,
                situation(StepPhase::Running, 1),
            )),
        ),
        case(
            "a succeeded step is never started again",
            path(Running),
            start_step(fetch(), 1, "fetch-1", None, now),
            Err(already_succeeded(fetch(), 1, RunAction::StartStep)),
        ),
        case(
            "restart a started attempt with a different key",
            path(Running),
            start_step(deploy(), 1, "deploy-1b", None, now),
            Err(RunError::IdempotencyKeyMismatch {
                run: run_id(),
                step: deploy(),
                attempt: 1,
                recorded: "deploy-1".into(),
                given: "deploy-1b".into(),
            }),
        ),
        case(
            "restart with a key that differs only in case",
            path(Running),
            start_step(deploy(), 1, "DEPLOY-1", None, now),
            Err(RunError::IdempotencyKeyMismatch {
                run: run_id(),
                step: deploy(),
                attempt: 1,
                recorded: "deploy-1".into(),
                given: "DEPLOY-1".into(),
            }),
        ),
        case(
            "restart with an empty key",
            path(Running),
            start_step(deploy(), 1, "", None, now),
            Err(empty(RunAction::StartStep, "idempotency key")),
        ),
        case(
            "start with an empty key",
            path(Running),
            start_step(verify(), 1, "", None, now),
            Err(empty(RunAction::StartStep, "idempotency key")),
        ),
        case(
            "start with a blank key",
            path(Waiting),
            start_step(verify(), 1, "  ", None, now),
            Err(empty(RunAction::StartStep, "idempotency key")),
        ),
        case(
            "start a step one second before it is due",
            path(Running),
            start_step(verify(), 1, "verify-1", None, t(VERIFY_DUE - 1)),
            Err(RunError::NotDue {
                run: run_id(),
                step: verify(),
                attempt: 1,
                due_at: t(VERIFY_DUE),
                at: t(VERIFY_DUE - 1),
            }),
        ),
        case(
            "start a retried attempt before its back-off ended",
            after(Running, [step_retried(build(), 2, 60_000, t(30))]),
            start_step(build(), 2, "build-2", None, t(89)),
            Err(RunError::NotDue {
                run: run_id(),
                step: build(),
                attempt: 2,
                due_at: t(90),
                at: t(89),
            }),
        ),
        case(
            "start with a step timeout equal to the start",
            path(Running),
            start_step(verify(), 1, "verify-1", Some(now), now),
            Err(not_after(RunAction::StartStep, "timeout_at", now, now)),
        ),
        case(
            "restart with a step timeout in the past",
            path(Running),
            start_step(deploy(), 1, "deploy-1", Some(t(50)), now),
            Err(not_after(RunAction::StartStep, "timeout_at", t(50), now)),
        ),
    ]);
}

#[test]
fn refused_outcomes() {
    let now = t(LATE);
    check(vec![
        case(
            "succeed attempt 2 while attempt 1 runs",
            path(Running),
            succeed(deploy(), 2, None, None, now),
            Err(attempt_not_in(
                deploy(),
                2,
                StepPhase::Running,
                situation(StepPhase::Running, 1),
            )),
        ),
        case(
            "succeed a step that is only scheduled",
            path(Running),
            succeed(verify(), 1, None, None, now),
            Err(attempt_not_in(
                verify(),
                1,
                StepPhase::Running,
                situation(StepPhase::Scheduled, 1),
            )),
        ),
        case(
            "succeed a step twice",
            path(Running),
            succeed(fetch(), 1, None, None, now),
            Err(already_succeeded(fetch(), 1, RunAction::SucceedStep)),
        ),
        case(
            "succeed a step that was never scheduled",
            path(Running),
            succeed(notify(), 1, None, None, now),
            Err(unknown_step(notify(), RunAction::SucceedStep)),
        ),
        case(
            "succeed with a negative cost",
            path(Running),
            succeed(deploy(), 1, Some(-1.0), None, now),
            Err(invalid_amount(RunAction::SucceedStep, "cost_usd", -1.0)),
        ),
        case(
            "succeed with an infinite cost",
            path(Running),
            succeed(deploy(), 1, Some(f64::INFINITY), Some(3), now),
            Err(invalid_amount(
                RunAction::SucceedStep,
                "cost_usd",
                f64::INFINITY,
            )),
        ),
        case(
            "fail attempt 2 while attempt 1 runs",
            path(Running),
            fail_step(deploy(), 2, ErrorClass::Network, now),
            Err(attempt_not_in(
                deploy(),
                2,
                StepPhase::Running,
                situation(StepPhase::Running, 1),
            )),
        ),
        case(
            "fail an attempt twice",
            path(Running),
            fail_step(build(), 1, ErrorClass::Network, now),
            Err(attempt_not_in(
                build(),
                1,
                StepPhase::Running,
                situation(StepPhase::Failed, 1),
            )),
        ),
        case(
            "fail a step that succeeded",
            path(Running),
            fail_step(fetch(), 1, ErrorClass::Validation, now),
            Err(already_succeeded(fetch(), 1, RunAction::FailStep)),
        ),
    ]);
}

#[test]
fn refused_failure_handling() {
    let now = t(LATE);
    let aborted = after(
        Running,
        [recovery_applied(
            build(),
            ErrorClass::Network,
            RecoveryAction::Abort,
            t(30),
        )],
    );
    let recovering = after(
        Running,
        [recovery_applied(
            build(),
            ErrorClass::Network,
            RecoveryAction::Retry,
            t(30),
        )],
    );
    check(vec![
        case(
            "retry a running step",
            path(Running),
            retry(deploy(), 1_000, now),
            Err(step_not_in(
                deploy(),
                RunAction::RetryStep,
                situation(StepPhase::Running, 1),
                &[StepPhase::Failed],
            )),
        ),
        case(
            "retry a scheduled step",
            path(Running),
            retry(verify(), 1_000, now),
            Err(step_not_in(
                verify(),
                RunAction::RetryStep,
                situation(StepPhase::Scheduled, 1),
                &[StepPhase::Failed],
            )),
        ),
        case(
            "retry a step that was never scheduled",
            path(Running),
            retry(notify(), 1_000, now),
            Err(unknown_step(notify(), RunAction::RetryStep)),
        ),
        case(
            "retry a step that succeeded",
            path(Running),
            retry(fetch(), 1_000, now),
            Err(already_succeeded(fetch(), 1, RunAction::RetryStep)),
        ),
        case(
            "retry after the handler aborted",
            aborted.clone(),
            retry(build(), 1_000, now),
            Err(failure_is_final(build(), 1, RunAction::RetryStep)),
        ),
        case(
            "retry with a back-off that is no i64",
            path(Running),
            retry(build(), u64::MAX, now),
            Err(RunError::BackoffOutOfRange {
                run: run_id(),
                step: build(),
                backoff_ms: u64::MAX,
            }),
        ),
        case(
            "retry with a back-off beyond the supported dates",
            path(Running),
            retry(build(), i64::MAX as u64, now),
            Err(RunError::BackoffOutOfRange {
                run: run_id(),
                step: build(),
                backoff_ms: i64::MAX as u64,
            }),
        ),
        case(
            "skip a running step",
            path(Running),
            skip(deploy(), "no", now),
            Err(step_not_in(
                deploy(),
                RunAction::SkipStep,
                situation(StepPhase::Running, 1),
                &[StepPhase::Scheduled, StepPhase::Failed],
            )),
        ),
        case(
            "skip a step twice",
            after(Running, [step_skipped(verify(), "no", t(30))]),
            skip(verify(), "no", now),
            Err(step_not_in(
                verify(),
                RunAction::SkipStep,
                situation(StepPhase::Skipped, 1),
                &[StepPhase::Scheduled, StepPhase::Failed],
            )),
        ),
        case(
            "skip a step that succeeded",
            path(Running),
            skip(fetch(), "no", now),
            Err(already_succeeded(fetch(), 1, RunAction::SkipStep)),
        ),
        case(
            "skip after the handler aborted",
            aborted.clone(),
            skip(build(), "no", now),
            Err(failure_is_final(build(), 1, RunAction::SkipStep)),
        ),
        case(
            "skip without a reason",
            path(Running),
            skip(verify(), " ", now),
            Err(empty(RunAction::SkipStep, "reason")),
        ),
        case(
            "recover a running step",
            path(Running),
            apply_recovery(deploy(), RecoveryAction::Retry, now),
            Err(step_not_in(
                deploy(),
                RunAction::ApplyRecovery,
                situation(StepPhase::Running, 1),
                &[StepPhase::Failed],
            )),
        ),
        case(
            "recover a skipped step",
            after(Running, [step_skipped(build(), "no", t(30))]),
            apply_recovery(build(), RecoveryAction::Retry, now),
            Err(step_not_in(
                build(),
                RunAction::ApplyRecovery,
                situation(StepPhase::Skipped, 1),
                &[StepPhase::Failed],
            )),
        ),
        case(
            "recover a step that was never scheduled",
            path(Running),
            apply_recovery(notify(), RecoveryAction::Retry, now),
            Err(unknown_step(notify(), RunAction::ApplyRecovery)),
        ),
        case(
            "a second recovery for the same failed attempt",
            recovering,
            apply_recovery(build(), RecoveryAction::Abort, now),
            Err(RunError::RecoveryAlreadyApplied {
                run: run_id(),
                step: build(),
                attempt: 1,
                applied: RecoveryAction::Retry,
            }),
        ),
        case(
            "a recovery after the handler aborted",
            aborted,
            apply_recovery(build(), RecoveryAction::Retry, now),
            Err(RunError::RecoveryAlreadyApplied {
                run: run_id(),
                step: build(),
                attempt: 1,
                applied: RecoveryAction::Abort,
            }),
        ),
        case(
            "increase the timeout to 0 s",
            path(Running),
            apply_recovery(
                build(),
                RecoveryAction::IncreaseTimeout {
                    new_timeout_seconds: 0,
                },
                now,
            ),
            Err(RunError::ZeroTimeout {
                run: run_id(),
                step: build(),
            }),
        ),
        case(
            "fall back to a tool without a name",
            path(Running),
            apply_recovery(build(), RecoveryAction::Fallback { tool: " ".into() }, now),
            Err(empty(RunAction::ApplyRecovery, "fallback tool")),
        ),
        case(
            "escalate to a gate id already used",
            path(Running),
            apply_recovery(build(), RecoveryAction::Escalate { gate_id: g1() }, now),
            Err(gate_exists(g1(), None)),
        ),
    ]);
}

#[test]
fn refused_gates() {
    let now = t(LATE);
    let approved = after(Running, [gate_approved(g1(), "alice", Some("ok"), t(30))]);
    let rejected = after(Running, [gate_rejected(g1(), "bob", "no", t(30))]);
    let expired = after(Running, [gate_expired(g2(), t(60))]);
    let approval = GateDecision::Approved {
        by: "alice".into(),
        comment: Some("ok".into()),
        at: t(30),
    };
    let rejection = GateDecision::Rejected {
        by: "bob".into(),
        comment: "no".into(),
        at: t(30),
    };
    let expiry = GateDecision::Expired { at: t(60) };
    check(vec![
        case(
            "open a gate with the id of an open gate",
            path(Running),
            open_gate(g1(), deploy(), &[], None, now),
            Err(gate_exists(g1(), None)),
        ),
        case(
            "open a gate with the id of an approved gate",
            approved.clone(),
            open_gate(g1(), deploy(), &[], None, now),
            Err(gate_exists(g1(), Some(approval.clone()))),
        ),
        case(
            "open a gate on a step that was never scheduled",
            path(Running),
            open_gate(g3(), notify(), &[], None, now),
            Err(unknown_step(notify(), RunAction::OpenGate)),
        ),
        case(
            "open a gate on a step that succeeded",
            path(Running),
            open_gate(g3(), fetch(), &[], None, now),
            Err(already_succeeded(fetch(), 1, RunAction::OpenGate)),
        ),
        case(
            "open a gate on a skipped step",
            after(Running, [step_skipped(verify(), "no", t(30))]),
            open_gate(g3(), verify(), &[], None, now),
            Err(step_not_in(
                verify(),
                RunAction::OpenGate,
                situation(StepPhase::Skipped, 1),
                &[StepPhase::Scheduled, StepPhase::Running, StepPhase::Failed],
            )),
        ),
        case(
            "open a gate with an empty approver",
            path(Running),
            open_gate(g3(), verify(), &["alice", ""], None, now),
            Err(empty(RunAction::OpenGate, "approver")),
        ),
        case(
            "open a gate with a blank approver",
            path(Running),
            open_gate(g3(), verify(), &[" "], None, now),
            Err(empty(RunAction::OpenGate, "approver")),
        ),
        case(
            "open a gate that expires as it opens",
            path(Running),
            open_gate(g3(), verify(), &[], Some(now), now),
            Err(not_after(RunAction::OpenGate, "expires_at", now, now)),
        ),
        case(
            "approve a gate the run does not have",
            path(Running),
            approve(g3(), "alice", None, now),
            Err(unknown_gate(g3(), RunAction::ApproveGate)),
        ),
        case(
            "approve as someone who is not an approver",
            path(Running),
            approve(g1(), "carol", None, now),
            Err(RunError::NotAnApprover {
                run: run_id(),
                gate: g1(),
                action: RunAction::ApproveGate,
                by: "carol".into(),
                approvers: strings(&["alice", "bob"]),
            }),
        ),
        case(
            "approve as nobody",
            path(Running),
            approve(g2(), " ", None, t(G2_EXPIRY - 1)),
            Err(empty(RunAction::ApproveGate, "by")),
        ),
        case(
            "approve a gate exactly when it expires",
            path(Running),
            approve(g2(), "carol", None, t(G2_EXPIRY)),
            Err(RunError::GateHasExpired {
                run: run_id(),
                gate: g2(),
                action: RunAction::ApproveGate,
                expires_at: t(G2_EXPIRY),
                at: t(G2_EXPIRY),
            }),
        ),
        case(
            "approve a gate twice",
            approved.clone(),
            approve(g1(), "bob", None, now),
            Err(gate_closed(g1(), RunAction::ApproveGate, approval.clone())),
        ),
        case(
            "approve a rejected gate",
            rejected.clone(),
            approve(g1(), "alice", None, now),
            Err(gate_closed(g1(), RunAction::ApproveGate, rejection.clone())),
        ),
        case(
            "approve an expired gate",
            expired.clone(),
            approve(g2(), "alice", None, now),
            Err(gate_closed(g2(), RunAction::ApproveGate, expiry.clone())),
        ),
        case(
            "reject without a comment",
            path(Running),
            reject(g1(), "bob", "", now),
            Err(empty(RunAction::RejectGate, "comment")),
        ),
        case(
            "reject as someone who is not an approver",
            path(Waiting),
            reject(g1(), "mallory", "no", now),
            Err(RunError::NotAnApprover {
                run: run_id(),
                gate: g1(),
                action: RunAction::RejectGate,
                by: "mallory".into(),
                approvers: strings(&["alice", "bob"]),
            }),
        ),
        case(
            "reject a gate after it expired",
            path(Running),
            reject(g2(), "carol", "no", now),
            Err(RunError::GateHasExpired {
                run: run_id(),
                gate: g2(),
                action: RunAction::RejectGate,
                expires_at: t(G2_EXPIRY),
                at: now,
            }),
        ),
        case(
            "reject an approved gate",
            approved.clone(),
            reject(g1(), "bob", "changed my mind", now),
            Err(gate_closed(g1(), RunAction::RejectGate, approval)),
        ),
        case(
            "reject a gate the run does not have",
            path(Running),
            reject(g3(), "bob", "no", now),
            Err(unknown_gate(g3(), RunAction::RejectGate)),
        ),
        case(
            "expire a gate one second before its expiry",
            path(Running),
            expire(g2(), t(G2_EXPIRY - 1)),
            Err(RunError::GateNotDue {
                run: run_id(),
                gate: g2(),
                expires_at: t(G2_EXPIRY),
                at: t(G2_EXPIRY - 1),
            }),
        ),
        case(
            "expire a gate that has no expiry",
            path(Running),
            expire(g1(), now),
            Err(RunError::GateNeverExpires {
                run: run_id(),
                gate: g1(),
            }),
        ),
        case(
            "expire a gate twice",
            expired,
            expire(g2(), now),
            Err(gate_closed(g2(), RunAction::ExpireGate, expiry)),
        ),
        case(
            "expire a rejected gate",
            rejected,
            expire(g1(), now),
            Err(gate_closed(g1(), RunAction::ExpireGate, rejection)),
        ),
        case(
            "expire a gate the run does not have",
            path(Running),
            expire(g3(), now),
            Err(unknown_gate(g3(), RunAction::ExpireGate)),
        ),
    ]);
}

#[test]
fn refused_charges() {
    let now = t(LATE);
    check(vec![
        case(
            "charge a negative amount",
            path(Running),
            charge(None, -0.5, 0, now),
            Err(invalid_amount(RunAction::ChargeCost, "usd", -0.5)),
        ),
        case(
            "charge an infinite amount",
            path(Running),
            charge(None, f64::NEG_INFINITY, 0, now),
            Err(invalid_amount(
                RunAction::ChargeCost,
                "usd",
                f64::NEG_INFINITY,
            )),
        ),
        case(
            "charge a step that was never scheduled",
            path(Running),
            charge(Some(notify()), 1.0, 0, now),
            Err(unknown_step(notify(), RunAction::ChargeCost)),
        ),
    ]);
}

/// NaN is not equal to itself, so these are matched rather than compared.
#[test]
fn amounts_that_are_not_a_number_are_refused() {
    let refusals = [
        given_when::<Run>(vec![], start_with("3", Some(f64::NAN), None, None, t(0))),
        given_when::<Run>(
            path(Running),
            succeed(deploy(), 1, Some(f64::NAN), None, t(LATE)),
        ),
        given_when::<Run>(path(Running), charge(None, f64::NAN, 0, t(LATE))),
    ];
    let expected = [
        (RunAction::Start, "budget_usd"),
        (RunAction::SucceedStep, "cost_usd"),
        (RunAction::ChargeCost, "usd"),
    ];
    for (got, (action, field)) in refusals.into_iter().zip(expected) {
        match got {
            Err(RunError::InvalidAmount {
                run,
                action: got_action,
                field: got_field,
                value,
            }) => {
                assert_eq!(run, run_id());
                assert_eq!((got_action, got_field), (action, field));
                assert!(value.is_nan(), "{value}");
            }
            other => panic!("{action:?}: expected InvalidAmount, got {other:?}"),
        }
    }
}

#[test]
fn refused_sagas() {
    let now = t(LATE);
    let deploy_succeeded = after(Running, [step_succeeded(deploy(), 1, None, None, t(30))]);
    let settled_with = |more: Vec<RunEvent>| then(settled(), more);
    let nothing_failed = || Err(RunError::NothingFailed { run: run_id() });
    check(vec![
        case(
            "compensate when nothing failed",
            settled(),
            start_compensation("why not", vec![fetch()], now),
            nothing_failed(),
        ),
        case(
            "compensate one second before the run's deadline",
            vec![
                started_with(None, Some(t(50)), None, t(0)),
                step_scheduled(fetch(), t(1), t(1)),
            ],
            start_compensation("timed out", vec![], t(49)),
            nothing_failed(),
        ),
        case(
            "a failed step that was retried is no failure any more",
            settled_with(vec![
                step_scheduled(build(), t(4), t(4)),
                step_started(build(), 1, "build-1", None, t(5)),
                step_failed(build(), 1, ErrorClass::Network, t(6)),
                step_retried(build(), 2, 1_000, t(7)),
            ]),
            start_compensation("build failed", vec![fetch()], now),
            nothing_failed(),
        ),
        case(
            "a failed step that was skipped is no failure any more",
            settled_with(vec![
                step_scheduled(build(), t(4), t(4)),
                step_started(build(), 1, "build-1", None, t(5)),
                step_failed(build(), 1, ErrorClass::Network, t(6)),
                step_skipped(build(), "optional", t(7)),
            ]),
            start_compensation("build failed", vec![fetch()], now),
            nothing_failed(),
        ),
        case(
            "an approved gate is no failure",
            settled_with(vec![
                step_scheduled(verify(), t(4), t(4)),
                gate_opened(g1(), verify(), &[], None, t(5)),
                gate_approved(g1(), "alice", None, t(6)),
            ]),
            start_compensation("why not", vec![fetch()], now),
            nothing_failed(),
        ),
        case(
            "compensate without a reason",
            path(Running),
            start_compensation("", vec![fetch()], now),
            Err(empty(RunAction::StartCompensation, "reason")),
        ),
        case(
            "compensate a step that never ran",
            path(Running),
            start_compensation("build failed", vec![notify()], now),
            Err(RunError::NotCompensable {
                run: run_id(),
                step: notify(),
                now: None,
            }),
        ),
        case(
            "compensate the step that failed",
            path(Running),
            start_compensation("build failed", vec![fetch(), build()], now),
            Err(RunError::NotCompensable {
                run: run_id(),
                step: build(),
                now: Some(situation(StepPhase::Failed, 1)),
            }),
        ),
        case(
            "compensate a running step",
            path(Running),
            start_compensation("build failed", vec![deploy()], now),
            Err(RunError::NotCompensable {
                run: run_id(),
                step: deploy(),
                now: Some(situation(StepPhase::Running, 1)),
            }),
        ),
        case(
            "compensate a step twice",
            deploy_succeeded.clone(),
            start_compensation("build failed", vec![deploy(), fetch(), deploy()], now),
            Err(RunError::DuplicateCompensation {
                run: run_id(),
                step: deploy(),
            }),
        ),
        case(
            "compensate in the order of success",
            deploy_succeeded.clone(),
            start_compensation("build failed", vec![fetch(), deploy()], now),
            Err(RunError::CompensationOutOfOrder {
                run: run_id(),
                first: fetch(),
                second: deploy(),
            }),
        ),
        case(
            "record a compensation out of turn",
            then(
                deploy_succeeded.clone(),
                [compensation_started(
                    "build failed",
                    vec![deploy(), fetch()],
                    t(40),
                )],
            ),
            record_compensation(fetch(), true, None, now),
            Err(RunError::UnexpectedCompensation {
                run: run_id(),
                step: fetch(),
                expected: Some(deploy()),
            }),
        ),
        case(
            "record a compensation twice",
            after(Compensating, [compensation_step_ran(fetch(), None, t(30))]),
            record_compensation(fetch(), true, None, now),
            Err(RunError::UnexpectedCompensation {
                run: run_id(),
                step: fetch(),
                expected: None,
            }),
        ),
        case(
            "record the compensation of a step not in the saga",
            path(Compensating),
            record_compensation(deploy(), true, None, now),
            Err(RunError::UnexpectedCompensation {
                run: run_id(),
                step: deploy(),
                expected: Some(fetch()),
            }),
        ),
        case(
            "a compensation that succeeded with an error",
            path(Compensating),
            record_compensation(fetch(), true, Some("oops"), now),
            Err(RunError::InconsistentCompensation {
                run: run_id(),
                step: fetch(),
                succeeded: true,
            }),
        ),
        case(
            "a compensation that failed without an error",
            path(Compensating),
            record_compensation(fetch(), false, None, now),
            Err(RunError::InconsistentCompensation {
                run: run_id(),
                step: fetch(),
                succeeded: false,
            }),
        ),
        case(
            "a compensation that failed with a blank error",
            path(Compensating),
            record_compensation(fetch(), false, Some("  "), now),
            Err(RunError::InconsistentCompensation {
                run: run_id(),
                step: fetch(),
                succeeded: false,
            }),
        ),
    ]);
}

/// `settled`, then `build` failed on attempt 1 at t(6), then `more`.
fn build_failed_with(more: Vec<RunEvent>) -> Vec<RunEvent> {
    let failed = [
        step_scheduled(build(), t(4), t(4)),
        step_started(build(), 1, "b", None, t(5)),
        step_failed(build(), 1, ErrorClass::Network, t(6)),
    ];
    then(then(settled(), failed), more)
}

#[test]
fn refused_endings() {
    let now = t(LATE);
    let saga_of_two = then(
        after(Running, [step_succeeded(deploy(), 1, None, None, t(30))]),
        [compensation_started(
            "build failed",
            vec![deploy(), fetch()],
            t(40),
        )],
    );
    check(vec![
        case(
            "complete while a step runs, steps are scheduled, gates are open and a step failed",
            path(Running),
            complete(now),
            Err(unfinished(
                vec![deploy()],
                vec![verify()],
                vec![g1(), g2()],
                vec![build()],
            )),
        ),
        case(
            "complete while waiting",
            path(Waiting),
            complete(now),
            Err(unfinished(
                vec![],
                vec![deploy(), verify()],
                vec![g1(), g2()],
                vec![build()],
            )),
        ),
        case(
            "complete while one step runs",
            then(
                settled(),
                [
                    step_scheduled(build(), t(4), t(4)),
                    step_started(build(), 1, "b", None, t(5)),
                ],
            ),
            complete(now),
            Err(unfinished(vec![build()], vec![], vec![], vec![])),
        ),
        case(
            "complete while one step is scheduled for a retry",
            then(
                settled(),
                [
                    step_scheduled(build(), t(4), t(4)),
                    step_started(build(), 1, "b", None, t(5)),
                    step_failed(build(), 1, ErrorClass::Network, t(6)),
                    step_retried(build(), 2, 1_000, t(7)),
                ],
            ),
            complete(now),
            Err(unfinished(vec![], vec![build()], vec![], vec![])),
        ),
        case(
            "complete while a gate is open on a failed step",
            then(
                settled(),
                [
                    step_scheduled(build(), t(4), t(4)),
                    step_started(build(), 1, "b", None, t(5)),
                    step_failed(build(), 1, ErrorClass::Network, t(6)),
                    gate_opened(g3(), build(), &[], None, t(7)),
                ],
            ),
            complete(now),
            Err(unfinished(vec![], vec![], vec![g3()], vec![build()])),
        ),
        case(
            "complete while a step failed and no recovery was chosen",
            build_failed_with(vec![]),
            complete(now),
            Err(unfinished(vec![], vec![], vec![], vec![build()])),
        ),
        case(
            "complete while a step failed and its retry is not queued yet",
            build_failed_with(vec![recovery_applied(
                build(),
                ErrorClass::Network,
                RecoveryAction::Retry,
                t(7),
            )]),
            complete(now),
            Err(unfinished(vec![], vec![], vec![], vec![build()])),
        ),
        case(
            "complete while a retry with back-off is not queued yet",
            build_failed_with(vec![recovery_applied(
                build(),
                ErrorClass::Network,
                RecoveryAction::RetryWithBackoff,
                t(7),
            )]),
            complete(now),
            Err(unfinished(vec![], vec![], vec![], vec![build()])),
        ),
        case(
            "complete after an escalation was approved but before the retry",
            build_failed_with(vec![
                recovery_applied(
                    build(),
                    ErrorClass::Network,
                    RecoveryAction::Escalate { gate_id: g3() },
                    t(7),
                ),
                gate_opened(g3(), build(), &[], None, t(7)),
                gate_approved(g3(), "alice", None, t(8)),
            ]),
            complete(now),
            Err(unfinished(vec![], vec![], vec![], vec![build()])),
        ),
        case(
            "fail before any compensation ran",
            saga_of_two.clone(),
            fail("build failed", None, now),
            Err(RunError::CompensationUnfinished {
                run: run_id(),
                remaining: vec![deploy(), fetch()],
            }),
        ),
        case(
            "fail before the last compensation ran",
            then(saga_of_two, [compensation_step_ran(deploy(), None, t(41))]),
            fail("build failed", None, now),
            Err(RunError::CompensationUnfinished {
                run: run_id(),
                remaining: vec![fetch()],
            }),
        ),
        case(
            "fail without a reason",
            path(Running),
            fail("", Some(ErrorClass::Unknown), now),
            Err(empty(RunAction::Fail, "reason")),
        ),
        case(
            "cancel as nobody",
            path(Waiting),
            cancel(" ", now),
            Err(empty(RunAction::Cancel, "by")),
        ),
    ]);
}

// ---- messages --------------------------------------------------------------------------

#[test]
fn errors_say_what_and_why() {
    let id = run_id();
    let message = |given: Vec<RunEvent>, when: RunCommand| {
        given_when::<Run>(given, when).unwrap_err().to_string()
    };
    let now = t(LATE);
    assert_eq!(
        message(vec![], complete(now)),
        "the run does not exist: cannot complete (a run must be started first)"
    );
    assert_eq!(
        message(path(Cancelled), cancel("alice", now)),
        format!("run {id} is finished (CANCELLED): cannot cancel, a finished run never changes")
    );
    assert_eq!(
        message(path(Compensating), schedule(notify(), now, now)),
        format!(
            "run {id} is COMPENSATING: cannot schedule a step (schedule a step is only allowed \
             in RUNNING, WAITING or PAUSED)"
        )
    );
    assert_eq!(
        message(path(Running), skip(deploy(), "no", now)),
        format!(
            "run {id}: cannot skip step `deploy`: attempt 1 is running (only allowed when the \
             step is scheduled or has failed)"
        )
    );
    assert_eq!(
        message(path(Running), succeed(verify(), 1, None, None, now)),
        format!("run {id}: step `verify` attempt 1 is not running (it is scheduled)")
    );
    assert_eq!(
        message(path(Running), succeed(deploy(), 2, None, None, now)),
        format!("run {id}: step `deploy` attempt 2 is not running (attempt 1 is running)")
    );
    assert_eq!(
        message(path(Running), start_step(fetch(), 1, "k", None, now)),
        format!(
            "run {id}: cannot start step `fetch`: it already succeeded on attempt 1, and \
             completed steps are never re-executed"
        )
    );
    assert_eq!(
        message(path(Running), start_step(deploy(), 1, "other", None, now)),
        format!(
            "run {id}: step `deploy` attempt 1 was started with idempotency key \"deploy-1\": \
             it may only be started again with that key, not \"other\""
        )
    );
    assert_eq!(
        message(path(Running), complete(now)),
        format!(
            "run {id} cannot complete yet: `deploy` still running; `verify` still scheduled; \
             gate {}, {} still open; `build` failed and was not settled (a retry or a recovery is still to come)",
            g1(),
            g2()
        )
    );
    assert_eq!(
        message(path(Running), approve(g1(), "carol", None, now)),
        format!(
            "run {id}: carol may not approve gate {}: only alice, bob may decide it",
            g1()
        )
    );
    assert_eq!(
        message(
            after(Running, [gate_rejected(g1(), "bob", "no", t(30))]),
            open_gate(g1(), verify(), &[], None, now)
        ),
        format!(
            "run {id}: gate {} already exists (it was rejected by bob): gate ids are never reused",
            g1()
        )
    );
    assert_eq!(
        message(
            after(
                Running,
                [
                    step_succeeded(deploy(), 1, None, None, t(30)),
                    compensation_started("build failed", vec![deploy(), fetch()], t(40)),
                ]
            ),
            fail("build failed", None, now)
        ),
        format!("run {id} cannot fail yet: the compensation of `deploy`, `fetch` has not run")
    );
    assert_eq!(
        message(path(Running), start_compensation("x", vec![notify()], now)),
        format!(
            "run {id}: cannot compensate step `notify`: it never ran (only a succeeded step is \
             compensated)"
        )
    );
}
