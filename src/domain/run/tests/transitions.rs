//! The legal moves, one by one: what each command emits from a state that allows it.

use chrono::Duration;

use super::fixtures::*;
use crate::domain::run::RunStatus::*;
use crate::domain::run::*;

#[test]
fn starting_a_run() {
    let now = t(LATE);
    check(vec![
        case(
            "start a run with a budget and a deadline",
            vec![],
            start(now),
            Ok(vec![under(Rules::CURRENT, started(now))]),
        ),
        case(
            "start a sub-workflow run without budget or deadline",
            vec![],
            start_with("3", None, None, Some(parent()), now),
            Ok(vec![under(
                Rules::CURRENT,
                started_with(None, None, Some(parent()), now),
            )]),
        ),
        case(
            "a budget of zero is a budget",
            vec![],
            start_with("3", Some(0.0), None, None, now),
            Ok(vec![under(
                Rules::CURRENT,
                started_with(Some(0.0), None, None, now),
            )]),
        ),
        case(
            "a deadline one second ahead",
            vec![],
            start_with("3", None, Some(t(LATE + 1)), None, now),
            Ok(vec![under(
                Rules::CURRENT,
                started_with(None, Some(t(LATE + 1)), None, now),
            )]),
        ),
    ]);
}

#[test]
fn scheduling_and_starting_steps() {
    let now = t(LATE);
    check(vec![
        case(
            "schedule a step for its first attempt",
            path(Running),
            schedule(notify(), t(150), now),
            Ok(vec![step_scheduled(notify(), t(150), now)]),
        ),
        case(
            "schedule a step while the run waits",
            path(Waiting),
            schedule(notify(), now, now),
            Ok(vec![step_scheduled(notify(), now, now)]),
        ),
        case(
            "schedule a step already overdue",
            path(Running),
            schedule(notify(), t(0), now),
            Ok(vec![step_scheduled(notify(), t(0), now)]),
        ),
        case(
            "start a due step with its idempotency key",
            path(Running),
            start_step(verify(), 1, "verify-1", None, now),
            Ok(vec![step_started(verify(), 1, "verify-1", None, now)]),
        ),
        case(
            "start a step exactly at its due time",
            path(Running),
            start_step(verify(), 1, "verify-1", None, t(VERIFY_DUE)),
            Ok(vec![step_started(
                verify(),
                1,
                "verify-1",
                None,
                t(VERIFY_DUE),
            )]),
        ),
        case(
            "start a step with a step timeout",
            path(Running),
            start_step(verify(), 1, "verify-1", Some(t(160)), now),
            Ok(vec![step_started(
                verify(),
                1,
                "verify-1",
                Some(t(160)),
                now,
            )]),
        ),
        case(
            "start a step while the run waits",
            path(Waiting),
            start_step(deploy(), 1, "deploy-1", None, now),
            Ok(vec![step_started(deploy(), 1, "deploy-1", None, now)]),
        ),
        case(
            "restart a started attempt after a crash, with the same key",
            path(Running),
            start_step(deploy(), 1, "deploy-1", None, now),
            Ok(vec![step_started(deploy(), 1, "deploy-1", None, now)]),
        ),
        case(
            "restart with the same key and a new timeout",
            path(Running),
            start_step(deploy(), 1, "deploy-1", Some(t(300)), now),
            Ok(vec![step_started(
                deploy(),
                1,
                "deploy-1",
                Some(t(300)),
                now,
            )]),
        ),
        case(
            "restart a second time",
            after(
                Running,
                [step_started(deploy(), 1, "deploy-1", None, t(30))],
            ),
            start_step(deploy(), 1, "deploy-1", None, now),
            Ok(vec![step_started(deploy(), 1, "deploy-1", None, now)]),
        ),
        case(
            "start the retried attempt 2 with a key of its own",
            after(Running, [step_retried(build(), 2, 1_000, t(30))]),
            start_step(build(), 2, "build-2", None, now),
            Ok(vec![step_started(build(), 2, "build-2", None, now)]),
        ),
    ]);
}

#[test]
fn succeeding_and_charging_in_the_same_decision() {
    let now = t(LATE);
    let over_budget = after(
        Running,
        [
            cost_charged(None, 9.0, 0, FETCH_USD + 9.0, t(30)),
            budget_exceeded(BUDGET, FETCH_USD + 9.0, t(30)),
        ],
    );
    let unlimited = vec![
        started_with(None, None, None, t(0)),
        step_scheduled(deploy(), t(1), t(1)),
        step_started(deploy(), 1, "deploy-1", None, t(2)),
    ];
    check(vec![
        case(
            "succeed with an output and no cost: nothing is charged",
            path(Running),
            succeed(deploy(), 1, None, None, now),
            Ok(vec![step_succeeded(deploy(), 1, None, None, now)]),
        ),
        case(
            "succeed with a cost: the run is charged its new total",
            path(Running),
            succeed(deploy(), 1, Some(1.5), Some(300), now),
            Ok(vec![
                step_succeeded(deploy(), 1, Some(1.5), Some(300), now),
                cost_charged(Some(deploy()), 1.5, 300, 3.5, now),
            ]),
        ),
        case(
            "tokens without money: a charge of 0 usd",
            path(Running),
            succeed(deploy(), 1, None, Some(50), now),
            Ok(vec![
                step_succeeded(deploy(), 1, None, Some(50), now),
                cost_charged(Some(deploy()), 0.0, 50, FETCH_USD, now),
            ]),
        ),
        case(
            "money without tokens: a charge of 0 tokens",
            path(Running),
            succeed(deploy(), 1, Some(0.5), None, now),
            Ok(vec![
                step_succeeded(deploy(), 1, Some(0.5), None, now),
                cost_charged(Some(deploy()), 0.5, 0, 2.5, now),
            ]),
        ),
        case(
            "a total equal to the budget is not over it",
            path(Running),
            succeed(deploy(), 1, Some(8.0), None, now),
            Ok(vec![
                step_succeeded(deploy(), 1, Some(8.0), None, now),
                cost_charged(Some(deploy()), 8.0, 0, BUDGET, now),
            ]),
        ),
        case(
            "a total over the budget: budget exceeded in the same decision",
            path(Running),
            succeed(deploy(), 1, Some(8.5), Some(10), now),
            Ok(vec![
                step_succeeded(deploy(), 1, Some(8.5), Some(10), now),
                cost_charged(Some(deploy()), 8.5, 10, 10.5, now),
                budget_exceeded(BUDGET, 10.5, now),
            ]),
        ),
        case(
            "over the budget again: exceeded is recorded only once",
            over_budget,
            succeed(deploy(), 1, Some(1.0), None, now),
            Ok(vec![
                step_succeeded(deploy(), 1, Some(1.0), None, now),
                cost_charged(Some(deploy()), 1.0, 0, 12.0, now),
            ]),
        ),
        case(
            "a run without a budget is never over it",
            unlimited,
            succeed(deploy(), 1, Some(1_000.0), None, now),
            Ok(vec![
                step_succeeded(deploy(), 1, Some(1_000.0), None, now),
                cost_charged(Some(deploy()), 1_000.0, 0, 1_000.0, now),
            ]),
        ),
        case(
            "succeed the retried attempt 2",
            after(
                Running,
                [
                    step_retried(build(), 2, 1_000, t(30)),
                    step_started(build(), 2, "build-2", None, t(40)),
                ],
            ),
            succeed(build(), 2, None, None, now),
            Ok(vec![step_succeeded(build(), 2, None, None, now)]),
        ),
    ]);
}

#[test]
fn failing_an_attempt_with_each_error_class() {
    let now = t(LATE);
    let mut cases: Vec<Case> = ErrorClass::ALL
        .into_iter()
        .map(|class| {
            case(
                &format!("fail with a {class} error"),
                path(Running),
                fail_step(deploy(), 1, class, now),
                Ok(vec![step_failed(deploy(), 1, class, now)]),
            )
        })
        .collect();
    cases.push(case(
        "fail the retried attempt 2",
        after(
            Running,
            [
                step_retried(build(), 2, 1_000, t(30)),
                step_started(build(), 2, "build-2", None, t(40)),
            ],
        ),
        fail_step(build(), 2, ErrorClass::Timeout, now),
        Ok(vec![step_failed(build(), 2, ErrorClass::Timeout, now)]),
    ));
    assert_eq!(check(cases), 9);
}

#[test]
fn retrying_and_skipping() {
    let now = t(LATE);
    check(vec![
        case(
            "retry a failed step: attempt 2 is due after the back-off",
            path(Running),
            retry(build(), 1_500, now),
            Ok(vec![RunEvent::StepRetried {
                step_id: build(),
                next_attempt: 2,
                due_at: now + Duration::milliseconds(1_500),
                backoff_ms: 1_500,
                at: now,
            }]),
        ),
        case(
            "retry at once: due now",
            path(Running),
            retry(build(), 0, now),
            Ok(vec![RunEvent::StepRetried {
                step_id: build(),
                next_attempt: 2,
                due_at: now,
                backoff_ms: 0,
                at: now,
            }]),
        ),
        case(
            "retry after the handler chose retry_with_backoff",
            after(
                Running,
                [recovery_applied(
                    build(),
                    ErrorClass::Network,
                    RecoveryAction::RetryWithBackoff,
                    t(30),
                )],
            ),
            retry(build(), 60_000, now),
            Ok(vec![step_retried(build(), 2, 60_000, now)]),
        ),
        case(
            "retry a failed attempt 2: attempt 3",
            after(
                Running,
                [
                    step_retried(build(), 2, 1_000, t(30)),
                    step_started(build(), 2, "build-2", None, t(40)),
                    step_failed(build(), 2, ErrorClass::RateLimit, t(50)),
                ],
            ),
            retry(build(), 2_000, now),
            Ok(vec![step_retried(build(), 3, 2_000, now)]),
        ),
        case(
            "retry while the run waits",
            path(Waiting),
            retry(build(), 1_000, now),
            Ok(vec![step_retried(build(), 2, 1_000, now)]),
        ),
        case(
            "skip a scheduled step",
            path(Running),
            skip(verify(), "condition is false", now),
            Ok(vec![step_skipped(verify(), "condition is false", now)]),
        ),
        case(
            "skip a failed step (on_error: skip)",
            path(Running),
            skip(build(), "on_error: skip", now),
            Ok(vec![step_skipped(build(), "on_error: skip", now)]),
        ),
        case(
            "skip a failed step after a recovery was chosen",
            after(
                Running,
                [recovery_applied(
                    build(),
                    ErrorClass::Network,
                    RecoveryAction::Retry,
                    t(30),
                )],
            ),
            skip(build(), "gave up", now),
            Ok(vec![step_skipped(build(), "gave up", now)]),
        ),
        case(
            "skip a retried step waiting for attempt 2",
            after(Running, [step_retried(build(), 2, 1_000, t(30))]),
            skip(build(), "not needed", now),
            Ok(vec![step_skipped(build(), "not needed", now)]),
        ),
    ]);
}

#[test]
fn every_recovery_action() {
    let now = t(LATE);
    let actions = [
        RecoveryAction::Retry,
        RecoveryAction::RetryWithBackoff,
        RecoveryAction::IncreaseTimeout {
            new_timeout_seconds: 120,
        },
        RecoveryAction::RefreshAuth,
        RecoveryAction::Fallback {
            tool: "curl".into(),
        },
        RecoveryAction::Escalate { gate_id: g3() },
        RecoveryAction::Abort,
    ];
    let mut cases: Vec<Case> = actions
        .into_iter()
        .map(|action| {
            case(
                &format!("recover from a network failure: {action}"),
                path(Running),
                apply_recovery(build(), action.clone(), now),
                Ok(vec![recovery_applied(
                    build(),
                    ErrorClass::Network,
                    action,
                    now,
                )]),
            )
        })
        .collect();
    let attempt_2_failed = after(
        Running,
        [
            recovery_applied(build(), ErrorClass::Network, RecoveryAction::Retry, t(25)),
            step_retried(build(), 2, 1_000, t(30)),
            step_started(build(), 2, "build-2", None, t(40)),
            step_failed(build(), 2, ErrorClass::RateLimit, t(50)),
        ],
    );
    cases.extend([
        case(
            "a new failed attempt gets a recovery of its own, with its own error class",
            attempt_2_failed,
            apply_recovery(build(), RecoveryAction::RetryWithBackoff, now),
            Ok(vec![recovery_applied(
                build(),
                ErrorClass::RateLimit,
                RecoveryAction::RetryWithBackoff,
                now,
            )]),
        ),
        case(
            "recover while the run waits",
            path(Waiting),
            apply_recovery(build(), RecoveryAction::RefreshAuth, now),
            Ok(vec![recovery_applied(
                build(),
                ErrorClass::Network,
                RecoveryAction::RefreshAuth,
                now,
            )]),
        ),
        case(
            "after escalating, the gate named by the recovery opens on the step",
            after(
                Running,
                [recovery_applied(
                    build(),
                    ErrorClass::Network,
                    RecoveryAction::Escalate { gate_id: g3() },
                    t(30),
                )],
            ),
            open_gate(g3(), build(), &["ops"], None, now),
            Ok(vec![gate_opened(g3(), build(), &["ops"], None, now)]),
        ),
    ]);
    assert_eq!(check(cases), 10);
}

#[test]
fn gates() {
    let now = t(LATE);
    check(vec![
        case(
            "open a gate on a scheduled step, with an expiry",
            path(Running),
            open_gate(g3(), verify(), &["carol"], Some(t(200)), now),
            Ok(vec![gate_opened(
                g3(),
                verify(),
                &["carol"],
                Some(t(200)),
                now,
            )]),
        ),
        case(
            "open a gate on a running step, for anyone",
            path(Running),
            open_gate(g3(), deploy(), &[], None, now),
            Ok(vec![gate_opened(g3(), deploy(), &[], None, now)]),
        ),
        case(
            "open a gate on a failed step",
            path(Waiting),
            open_gate(g3(), build(), &["alice"], None, now),
            Ok(vec![gate_opened(g3(), build(), &["alice"], None, now)]),
        ),
        case(
            "approve as one of the approvers, with a comment",
            path(Running),
            approve(g1(), "alice", Some("lgtm"), now),
            Ok(vec![gate_approved(g1(), "alice", Some("lgtm"), now)]),
        ),
        case(
            "approve as the other approver, without a comment",
            path(Waiting),
            approve(g1(), "bob", None, now),
            Ok(vec![gate_approved(g1(), "bob", None, now)]),
        ),
        case(
            "anyone may approve a gate without approvers, until just before it expires",
            path(Running),
            approve(g2(), "carol", None, t(G2_EXPIRY - 1)),
            Ok(vec![gate_approved(g2(), "carol", None, t(G2_EXPIRY - 1))]),
        ),
        case(
            "reject with a comment",
            path(Running),
            reject(g1(), "bob", "too risky", now),
            Ok(vec![gate_rejected(g1(), "bob", "too risky", now)]),
        ),
        case(
            "anyone may reject a gate without approvers",
            path(Waiting),
            reject(g2(), "carol", "no", t(G2_EXPIRY - 1)),
            Ok(vec![gate_rejected(g2(), "carol", "no", t(G2_EXPIRY - 1))]),
        ),
        case(
            "expire a gate exactly at its expiry",
            path(Running),
            expire(g2(), t(G2_EXPIRY)),
            Ok(vec![gate_expired(g2(), t(G2_EXPIRY))]),
        ),
        case(
            "expire a gate after its expiry",
            path(Waiting),
            expire(g2(), now),
            Ok(vec![gate_expired(g2(), now)]),
        ),
        case(
            "gates are independent: decide g1 after g2 expired",
            after(Waiting, [gate_expired(g2(), t(60))]),
            approve(g1(), "alice", None, now),
            Ok(vec![gate_approved(g1(), "alice", None, now)]),
        ),
    ]);
}

#[test]
fn charging_costs() {
    let now = t(LATE);
    check(vec![
        case(
            "charge the run itself",
            path(Running),
            charge(None, 0.25, 40, now),
            Ok(vec![cost_charged(None, 0.25, 40, 2.25, now)]),
        ),
        case(
            "charge a step that already succeeded (a late bill)",
            path(Running),
            charge(Some(fetch()), 1.0, 0, now),
            Ok(vec![cost_charged(Some(fetch()), 1.0, 0, 3.0, now)]),
        ),
        case(
            "charge a failed step",
            path(Waiting),
            charge(Some(build()), 0.5, 7, now),
            Ok(vec![cost_charged(Some(build()), 0.5, 7, 2.5, now)]),
        ),
        case(
            "charge nothing",
            path(Running),
            charge(None, 0.0, 0, now),
            Ok(vec![cost_charged(None, 0.0, 0, FETCH_USD, now)]),
        ),
        case(
            "a charge that goes over the budget",
            path(Waiting),
            charge(None, 8.5, 0, now),
            Ok(vec![
                cost_charged(None, 8.5, 0, 10.5, now),
                budget_exceeded(BUDGET, 10.5, now),
            ]),
        ),
        case(
            "a charge after the budget was exceeded",
            after(
                Running,
                [
                    cost_charged(None, 9.0, 0, 11.0, t(30)),
                    budget_exceeded(BUDGET, 11.0, t(30)),
                ],
            ),
            charge(None, 1.0, 0, now),
            Ok(vec![cost_charged(None, 1.0, 0, 12.0, now)]),
        ),
    ]);
}

#[test]
fn the_saga() {
    let now = t(LATE);
    let deploy_succeeded = after(Running, [step_succeeded(deploy(), 1, None, None, t(30))]);
    let gate_on_settled = |decision: RunEvent| {
        then(
            settled(),
            [
                step_scheduled(verify(), t(4), t(4)),
                gate_opened(g1(), verify(), &["alice"], Some(t(60)), t(5)),
                decision,
            ],
        )
    };
    let over_budget = then(
        settled(),
        [
            cost_charged(None, 9.0, 0, 11.0, t(30)),
            budget_exceeded(BUDGET, 11.0, t(30)),
        ],
    );
    let with_deadline = vec![
        started_with(None, Some(t(50)), None, t(0)),
        step_scheduled(fetch(), t(1), t(1)),
        step_started(fetch(), 1, "fetch-1", None, t(2)),
        step_succeeded(fetch(), 1, None, None, t(3)),
    ];
    let saga = |steps: Vec<RunEvent>| then(deploy_succeeded.clone(), steps);
    check(vec![
        case(
            "compensate after a failed step, most recently succeeded first",
            deploy_succeeded.clone(),
            start_compensation("build failed", vec![deploy(), fetch()], now),
            Ok(vec![compensation_started(
                "build failed",
                vec![deploy(), fetch()],
                now,
            )]),
        ),
        case(
            "compensate only the steps that have a compensation",
            deploy_succeeded.clone(),
            start_compensation("build failed", vec![fetch()], now),
            Ok(vec![compensation_started(
                "build failed",
                vec![fetch()],
                now,
            )]),
        ),
        case(
            "a saga with nothing to compensate",
            path(Running),
            start_compensation("build failed", vec![], now),
            Ok(vec![compensation_started("build failed", vec![], now)]),
        ),
        case(
            "compensate while the run waits",
            path(Waiting),
            start_compensation("build failed", vec![fetch()], now),
            Ok(vec![compensation_started(
                "build failed",
                vec![fetch()],
                now,
            )]),
        ),
        case(
            "compensate after a rejected gate",
            gate_on_settled(gate_rejected(g1(), "alice", "no", t(20))),
            start_compensation("rejected", vec![fetch()], now),
            Ok(vec![compensation_started("rejected", vec![fetch()], now)]),
        ),
        case(
            "compensate after an expired gate",
            gate_on_settled(gate_expired(g1(), t(60))),
            start_compensation("expired", vec![fetch()], now),
            Ok(vec![compensation_started("expired", vec![fetch()], now)]),
        ),
        case(
            "compensate after the budget was exceeded",
            over_budget,
            start_compensation("over budget", vec![fetch()], now),
            Ok(vec![compensation_started(
                "over budget",
                vec![fetch()],
                now,
            )]),
        ),
        case(
            "compensate exactly at the run's deadline",
            with_deadline,
            start_compensation("timed out", vec![fetch()], t(50)),
            Ok(vec![compensation_started(
                "timed out",
                vec![fetch()],
                t(50),
            )]),
        ),
        case(
            "record a compensation that succeeded",
            path(Compensating),
            record_compensation(fetch(), true, None, now),
            Ok(vec![compensation_step_ran(fetch(), None, now)]),
        ),
        case(
            "record a compensation that failed, with its error",
            path(Compensating),
            record_compensation(fetch(), false, Some("refund API down"), now),
            Ok(vec![compensation_step_ran(
                fetch(),
                Some("refund API down"),
                now,
            )]),
        ),
        case(
            "record the second compensation after the first",
            saga(vec![
                compensation_started("build failed", vec![deploy(), fetch()], t(40)),
                compensation_step_ran(deploy(), None, t(41)),
            ]),
            record_compensation(fetch(), true, None, now),
            Ok(vec![compensation_step_ran(fetch(), None, now)]),
        ),
        case(
            "record the next compensation after one failed",
            saga(vec![
                compensation_started("build failed", vec![deploy(), fetch()], t(40)),
                compensation_step_ran(deploy(), Some("already gone"), t(41)),
            ]),
            record_compensation(fetch(), true, None, now),
            Ok(vec![compensation_step_ran(fetch(), None, now)]),
        ),
    ]);
}

#[test]
fn ending_a_run() {
    let now = t(LATE);
    let all_done = then(
        settled(),
        [
            step_scheduled(verify(), t(4), t(4)),
            gate_opened(g1(), verify(), &["alice"], None, t(5)),
            gate_approved(g1(), "alice", None, t(6)),
            step_started(verify(), 1, "verify-1", None, t(7)),
            step_succeeded(verify(), 1, None, None, t(8)),
            step_scheduled(notify(), t(9), t(9)),
            step_skipped(notify(), "nobody to tell", t(10)),
        ],
    );
    let continued_past_a_failure = then(
        settled(),
        [
            step_scheduled(build(), t(4), t(4)),
            step_started(build(), 1, "build-1", None, t(5)),
            step_failed(build(), 1, ErrorClass::Network, t(6)),
            recovery_applied(build(), ErrorClass::Network, RecoveryAction::Continue, t(7)),
        ],
    );
    let failed_with = |more: Vec<RunEvent>| {
        let mut events = then(
            settled(),
            [
                step_scheduled(build(), t(4), t(4)),
                step_started(build(), 1, "build-1", None, t(5)),
                step_failed(build(), 1, ErrorClass::Network, t(6)),
            ],
        );
        events.extend(more);
        events
    };
    check(vec![
        case(
            "complete past a step that was given up (a branch that lost a race)",
            failed_with(vec![recovery_applied(
                build(),
                ErrorClass::Network,
                RecoveryAction::Abort,
                t(7),
            )]),
            complete(now),
            Ok(vec![completed(now)]),
        ),
        case(
            "complete past a step whose escalation was rejected",
            failed_with(vec![
                recovery_applied(
                    build(),
                    ErrorClass::Network,
                    RecoveryAction::Escalate { gate_id: g3() },
                    t(7),
                ),
                gate_opened(g3(), build(), &[], None, t(7)),
                gate_rejected(g3(), "alice", "not worth it", t(8)),
            ]),
            complete(now),
            Ok(vec![completed(now)]),
        ),
        case(
            "complete a run with nothing left to do",
            settled(),
            complete(now),
            Ok(vec![completed(now)]),
        ),
        case(
            "complete past a failed step whose recovery was continue",
            continued_past_a_failure,
            complete(now),
            Ok(vec![completed(now)]),
        ),
        case(
            "complete once every step succeeded or was skipped and every gate decided",
            all_done,
            complete(now),
            Ok(vec![completed(now)]),
        ),
        case(
            "fail a running run directly",
            path(Running),
            fail("gave up", Some(ErrorClass::Timeout), now),
            Ok(vec![failed("gave up", Some(ErrorClass::Timeout), now)]),
        ),
        case(
            "fail a waiting run without an error class",
            path(Waiting),
            fail("nobody approved", None, now),
            Ok(vec![failed("nobody approved", None, now)]),
        ),
        case(
            "fail once every compensation ran",
            after(Compensating, [compensation_step_ran(fetch(), None, t(30))]),
            fail("build failed", Some(ErrorClass::Network), now),
            Ok(vec![failed("build failed", Some(ErrorClass::Network), now)]),
        ),
        case(
            "fail once every compensation ran, even when one failed",
            after(
                Compensating,
                [compensation_step_ran(
                    fetch(),
                    Some("refund API down"),
                    t(30),
                )],
            ),
            fail("build failed", None, now),
            Ok(vec![failed("build failed", None, now)]),
        ),
        case(
            "fail after a saga with nothing to compensate",
            after(
                Running,
                [compensation_started("build failed", vec![], t(30))],
            ),
            fail("build failed", None, now),
            Ok(vec![failed("build failed", None, now)]),
        ),
        case(
            "cancel a running run",
            path(Running),
            cancel("alice", now),
            Ok(vec![cancelled("alice", now)]),
        ),
        case(
            "cancel a waiting run",
            path(Waiting),
            cancel("bob", now),
            Ok(vec![cancelled("bob", now)]),
        ),
        case(
            "cancel during compensation",
            path(Compensating),
            cancel("alice", now),
            Ok(vec![cancelled("alice", now)]),
        ),
    ]);
}

#[test]
fn noting_a_derived_run_once() {
    let now = t(LATE);
    let mut noted = path(Failed);
    noted.push(derived("ops", t(40)));
    check(vec![
        case(
            "a failed run notes the run rerun from it",
            path(Failed),
            note_derived("ops", now),
            Ok(vec![derived("ops", now)]),
        ),
        case(
            "noted again (an attempt carried on after a crash): nothing new",
            noted,
            note_derived("ops", now),
            Ok(vec![]),
        ),
    ]);
}

#[test]
fn a_throttled_attempt_waits_for_its_token_and_starts_again() {
    let now = t(LATE);
    let throttled = after(Running, [step_throttled(deploy(), 1, 2_000, now)]);
    check(vec![
        case(
            "the same attempt starts again, with its key, once its token is due",
            throttled.clone(),
            start_step(deploy(), 1, "deploy-1", None, plus_ms(now, 2_000)),
            Ok(vec![step_started(
                deploy(),
                1,
                "deploy-1",
                None,
                plus_ms(now, 2_000),
            )]),
        ),
        case(
            "not before its token's time",
            throttled.clone(),
            start_step(deploy(), 1, "deploy-1", None, plus_ms(now, 1_999)),
            Err(RunError::NotDue {
                run: run_id(),
                step: deploy(),
                attempt: 1,
                due_at: plus_ms(now, 2_000),
                at: plus_ms(now, 1_999),
            }),
        ),
        case(
            "a throttled attempt is not running: it has no outcome to record",
            throttled.clone(),
            succeed(deploy(), 1, None, None, plus_ms(now, 2_000)),
            Err(attempt_not_in(
                deploy(),
                1,
                StepPhase::Running,
                situation(StepPhase::Scheduled, 1),
            )),
        ),
        case(
            "a token's time is after the throttle",
            path(Running),
            throttle(deploy(), 1, 0, now),
            Err(RunError::DeadlineNotAfter {
                run: run_id(),
                action: RunAction::ThrottleStep,
                field: "until",
                deadline: now,
                at: now,
            }),
        ),
    ]);
    let run = fold(throttled);
    assert_eq!(
        run.step(&deploy()),
        Some(&StepState::Scheduled {
            attempt: 1,
            due_at: plus_ms(now, 2_000),
            throttled: Some(LIMIT.into()),
        }),
        "held back, not failed: the attempt keeps its number"
    );
    let reason = run.waiting_reason().expect("a reason");
    assert!(
        reason.starts_with("throttled: step deploy by rate:github until "),
        "{reason}"
    );
    let ran = fold(then(
        after(Running, [step_throttled(deploy(), 1, 2_000, now)]),
        [step_started(
            deploy(),
            1,
            "deploy-1",
            None,
            plus_ms(now, 2_000),
        )],
    ));
    assert_eq!(
        ran.waiting_reason(),
        None,
        "started again: nothing holds it"
    );
}

/// Under rules 2 a step's first attempt starts (or is skipped) without being
/// scheduled first; under rules 1 the same commands find no such step. Scheduled
/// steps keep their rules either way.
#[test]
fn steps_start_unscheduled_under_the_second_rules() {
    let now = t(LATE);
    let second = |events: Vec<RunEvent>| -> Vec<RunEvent> {
        events.into_iter().map(|e| under(Rules(2), e)).collect()
    };
    check(vec![
        case(
            "start the first attempt of a step never scheduled",
            second(path(Running)),
            start_step(notify(), 1, "notify-1", Some(t(160)), now),
            Ok(vec![step_started(
                notify(),
                1,
                "notify-1",
                Some(t(160)),
                now,
            )]),
        ),
        case(
            "a later attempt of a step never scheduled is unknown",
            second(path(Running)),
            start_step(notify(), 2, "notify-2", None, now),
            Err(unknown_step(notify(), RunAction::StartStep)),
        ),
        case(
            "an unscheduled start still needs its idempotency key",
            second(path(Running)),
            start_step(notify(), 1, " ", None, now),
            Err(empty(RunAction::StartStep, "idempotency key")),
        ),
        case(
            "an unscheduled start's timeout must come after it",
            second(path(Running)),
            start_step(notify(), 1, "notify-1", Some(now), now),
            Err(not_after(RunAction::StartStep, "timeout_at", now, now)),
        ),
        case(
            "skip a step never scheduled",
            second(path(Waiting)),
            skip(notify(), "`if` is false", now),
            Ok(vec![step_skipped(notify(), "`if` is false", now)]),
        ),
        case(
            "a step may still be scheduled (over budget, it waits for the gate)",
            second(path(Running)),
            schedule(notify(), now, now),
            Ok(vec![step_scheduled(notify(), now, now)]),
        ),
        case(
            "a scheduled step still waits for its due time",
            second(path(Running)),
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
            "under the first rules a step never scheduled is unknown",
            path(Running),
            start_step(notify(), 1, "notify-1", None, now),
            Err(unknown_step(notify(), RunAction::StartStep)),
        ),
        case(
            "and cannot be skipped",
            path(Running),
            skip(notify(), "`if` is false", now),
            Err(unknown_step(notify(), RunAction::SkipStep)),
        ),
        case(
            "nor start unscheduled in a queued run",
            second(path(Queued)),
            start_step(notify(), 1, "notify-1", None, now),
            Err(invalid_status(
                Queued,
                RunAction::StartStep,
                &[Running, Waiting, Paused],
            )),
        ),
    ]);
}

/// A step started or skipped unscheduled has its attempt on the timeline all the
/// same, queued when it started.
#[test]
fn an_unscheduled_step_has_its_attempt_recorded() {
    let base = |more: Vec<RunEvent>| {
        let mut events = vec![under(Rules(2), started(t(0)))];
        events.extend(more);
        fold(events)
    };
    let run: Run = base(vec![step_started(build(), 1, "build-1", None, t(3))]);
    let attempts = run.attempts(&build());
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].scheduled_at, t(3));
    assert_eq!(attempts[0].started_at, Some(t(3)));
    assert!(matches!(
        run.step(&build()),
        Some(StepState::Running { attempt: 1, .. })
    ));
    let run: Run = base(vec![step_skipped(build(), "`if` is false", t(4))]);
    let attempts = run.attempts(&build());
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].outcome, Some(AttemptOutcome::Skipped));
    assert_eq!(attempts[0].ended_at, Some(t(4)));
    assert!(matches!(
        run.step(&build()),
        Some(StepState::Skipped { attempt: 1, .. })
    ));
}
