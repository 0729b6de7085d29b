//! What the fold keeps for the executor (which picks a run up from its stream alone) and
//! for the views: step states and outputs, attempts, the order of success for the saga,
//! gates, costs, timestamps and how the run ended.

use cqrs_es::Aggregate;
use cqrs_es::event_sink::EventSink;

use super::fixtures::*;
use crate::domain::ids::StepId;
use crate::domain::run::RunStatus::*;
use crate::domain::run::*;

fn ids<'a>(steps: impl Iterator<Item = (&'a StepId, &'a StepState)>) -> Vec<StepId> {
    steps.map(|(id, _)| id.clone()).collect()
}

/// An attempt record with nothing but its queueing filled in.
fn queued_attempt(attempt: u32, scheduled_at: i64, due_at: i64) -> Attempt {
    Attempt {
        attempt,
        scheduled_at: t(scheduled_at),
        due_at: t(due_at),
        backoff_ms: None,
        started_at: None,
        restarted_at: vec![],
        idempotency_key: None,
        timeout_at: None,
        ended_at: None,
        outcome: None,
        error: None,
        cost_usd: None,
        tokens: None,
        recovery: None,
    }
}

#[test]
fn a_busy_run_keeps_what_the_executor_needs() {
    let run = fold(path(Running));
    assert_eq!(run.id(), Some(run_id()));
    assert_eq!(run.status(), Some(Running));
    assert!(!run.is_terminal());
    assert_eq!(run.workflow(), Some(&workflow()));
    assert_eq!(run.workflow_version(), "3");
    assert_eq!(run.inputs(), &inputs());
    assert_eq!(run.budget_usd(), Some(BUDGET));
    assert_eq!(run.timeout_at(), Some(t(RUN_DEADLINE)));
    assert_eq!(run.parent(), None);
    assert_eq!(run.started_at(), Some(t(0)));
    assert_eq!(run.updated_at(), Some(t(11)));

    let known: Vec<&StepId> = run.steps().keys().collect();
    assert_eq!(known, [&build(), &deploy(), &fetch(), &verify()]);
    assert_eq!(ids(run.running_steps()), [deploy()]);
    assert_eq!(ids(run.scheduled_steps()), [verify()]);
    assert_eq!(
        run.step(&deploy()),
        Some(&StepState::Running {
            attempt: 1,
            idempotency_key: "deploy-1".into(),
            started_at: t(11),
            timeout_at: None,
        })
    );
    assert_eq!(
        run.step(&build()),
        Some(&StepState::Failed {
            attempt: 1,
            error: step_error(ErrorClass::Network),
            is_final: false,
        })
    );
    assert_eq!(
        run.step(&verify()),
        Some(&StepState::Scheduled {
            attempt: 1,
            due_at: t(VERIFY_DUE),
            throttled: None,
        })
    );
    assert_eq!(run.step(&notify()), None);

    // Completed steps are never re-executed: replay uses the recorded output.
    assert_eq!(run.succeeded_output(&fetch()), Some(&output_of(&fetch())));
    assert_eq!(run.succeeded_output(&build()), None);
    assert_eq!(run.succeeded_output(&deploy()), None);
    assert_eq!(run.succeeded_output(&notify()), None);
    assert_eq!(run.succeeded_steps(), [fetch()]);

    let gate_ids: Vec<_> = run.gates().iter().map(|g| g.gate_id).collect();
    assert_eq!(gate_ids, [g1(), g2()]);
    let open: Vec<_> = run.open_gates().map(|g| g.gate_id).collect();
    assert_eq!(open, [g1(), g2()]);
    assert_eq!(run.total_cost_usd(), FETCH_USD);
    assert_eq!(run.total_tokens(), FETCH_TOKENS);
    assert_eq!(run.budget_exceeded_at(), None);
    assert_eq!(run.compensation(), None);
    assert_eq!(run.outcome(), None);
    assert!(run.has_failure(t(LATE)), "build failed");
}

#[test]
fn attempts_record_each_start_and_outcome() {
    let run = fold(path(Running));
    assert_eq!(
        run.attempts(&fetch()),
        [Attempt {
            started_at: Some(t(2)),
            idempotency_key: Some("fetch-1".into()),
            ended_at: Some(t(3)),
            outcome: Some(AttemptOutcome::Succeeded),
            cost_usd: Some(FETCH_USD),
            tokens: Some(FETCH_TOKENS),
            ..queued_attempt(1, 1, 1)
        }]
    );
    assert_eq!(
        run.attempts(&build()),
        [Attempt {
            started_at: Some(t(5)),
            idempotency_key: Some("build-1".into()),
            ended_at: Some(t(6)),
            outcome: Some(AttemptOutcome::Failed),
            error: Some(step_error(ErrorClass::Network)),
            ..queued_attempt(1, 4, 4)
        }]
    );
    assert_eq!(
        run.attempts(&build())[0].error_class(),
        Some(ErrorClass::Network)
    );
    assert_eq!(run.attempts(&verify()), [queued_attempt(1, 7, VERIFY_DUE)]);
    assert!(run.attempts(&notify()).is_empty());
}

#[test]
fn a_restart_after_a_crash_keeps_the_first_start() {
    let run = fold(after(
        Running,
        [
            step_started(deploy(), 1, "deploy-1", Some(t(300)), t(30)),
            step_started(deploy(), 1, "deploy-1", Some(t(400)), t(40)),
        ],
    ));
    assert_eq!(
        run.step(&deploy()),
        Some(&StepState::Running {
            attempt: 1,
            idempotency_key: "deploy-1".into(),
            started_at: t(11),
            timeout_at: Some(t(400)),
        })
    );
    assert_eq!(
        run.attempts(&deploy()),
        [Attempt {
            started_at: Some(t(11)),
            restarted_at: vec![t(30), t(40)],
            idempotency_key: Some("deploy-1".into()),
            timeout_at: Some(t(400)),
            ..queued_attempt(1, 10, 10)
        }]
    );
    assert_eq!(run.status(), Some(Running));
}

#[test]
fn retries_add_attempts_and_the_last_one_counts() {
    let run = fold(after(
        Running,
        [
            recovery_applied(build(), ErrorClass::Network, RecoveryAction::Retry, t(25)),
            step_retried(build(), 2, 1_000, t(30)),
            step_started(build(), 2, "build-2", Some(t(90)), t(40)),
            step_succeeded(build(), 2, Some(0.25), Some(7), t(50)),
        ],
    ));
    assert_eq!(
        run.attempts(&build()),
        [
            Attempt {
                started_at: Some(t(5)),
                idempotency_key: Some("build-1".into()),
                ended_at: Some(t(6)),
                outcome: Some(AttemptOutcome::Failed),
                error: Some(step_error(ErrorClass::Network)),
                recovery: Some(RecoveryAction::Retry),
                ..queued_attempt(1, 4, 4)
            },
            Attempt {
                backoff_ms: Some(1_000),
                started_at: Some(t(40)),
                idempotency_key: Some("build-2".into()),
                timeout_at: Some(t(90)),
                ended_at: Some(t(50)),
                outcome: Some(AttemptOutcome::Succeeded),
                cost_usd: Some(0.25),
                tokens: Some(7),
                due_at: plus_ms(t(30), 1_000),
                ..queued_attempt(2, 30, 30)
            },
        ]
    );
    assert_eq!(
        run.step(&build()),
        Some(&StepState::Succeeded {
            attempt: 2,
            output: output_of(&build()).into(),
        })
    );
    assert_eq!(run.succeeded_output(&build()), Some(&output_of(&build())));
    assert!(
        !run.has_failure(t(LATE)),
        "the failure was answered by a retry"
    );

    let waiting_for_retry = fold(after(Running, [step_retried(build(), 2, 1_000, t(30))]));
    assert_eq!(
        waiting_for_retry.step(&build()),
        Some(&StepState::Scheduled {
            attempt: 2,
            due_at: plus_ms(t(30), 1_000),
            throttled: None,
        })
    );
    assert_eq!(
        ids(waiting_for_retry.scheduled_steps()),
        [build(), verify()]
    );
}

#[test]
fn succeeded_steps_keep_the_order_of_success_for_the_saga() {
    // Not the order of the step ids: build < deploy < fetch.
    let run = fold(after(
        Running,
        [
            step_succeeded(deploy(), 1, None, None, t(30)),
            step_retried(build(), 2, 0, t(31)),
            step_started(build(), 2, "build-2", None, t(32)),
            step_succeeded(build(), 2, None, None, t(33)),
        ],
    ));
    assert_eq!(run.succeeded_steps(), [fetch(), deploy(), build()]);
    let compensating = fold(then(
        after(Running, [step_succeeded(deploy(), 1, None, None, t(30))]),
        [compensation_started(
            "build failed",
            vec![deploy(), fetch()],
            t(40),
        )],
    ));
    assert_eq!(compensating.succeeded_steps(), [fetch(), deploy()]);
}

#[test]
fn costs_add_up_and_the_budget_is_exceeded_once() {
    let run = fold(after(
        Running,
        [
            step_succeeded(deploy(), 1, Some(3.0), Some(400), t(30)),
            cost_charged(Some(deploy()), 3.0, 400, 5.0, t(30)),
            cost_charged(None, 6.0, 0, 11.0, t(40)),
            budget_exceeded(BUDGET, 11.0, t(40)),
        ],
    ));
    assert_eq!(run.total_cost_usd(), 11.0);
    assert_eq!(run.total_tokens(), FETCH_TOKENS + 400);
    assert_eq!(run.budget_exceeded_at(), Some(t(40)));
    assert!(run.has_failure(t(LATE)));
    assert_eq!(run.attempts(&deploy())[0].cost_usd, Some(3.0));
    assert_eq!(run.attempts(&deploy())[0].tokens, Some(400));

    // The first time it went over is kept.
    let mut again = run.clone();
    again.apply(budget_exceeded(BUDGET, 12.0, t(50)));
    assert_eq!(again.budget_exceeded_at(), Some(t(40)));
}

#[test]
fn the_status_follows_steps_and_gates() {
    let events = vec![
        started(t(0)),
        step_scheduled(verify(), t(1), t(1)),
        gate_opened(g1(), verify(), &["alice"], None, t(2)),
        step_scheduled(deploy(), t(3), t(3)),
        step_started(deploy(), 1, "deploy-1", None, t(4)),
        step_succeeded(deploy(), 1, None, None, t(5)),
        gate_approved(g1(), "alice", None, t(6)),
        gate_opened(g2(), verify(), &[], None, t(7)),
        step_started(verify(), 1, "verify-1", None, t(8)),
        gate_rejected(g2(), "bob", "no", t(9)),
        step_failed(verify(), 1, ErrorClass::Validation, t(10)),
    ];
    let expected = [
        Running, // started
        Running, // a step scheduled
        Waiting, // a gate opened, nothing runs
        Waiting, // a step scheduled
        Running, // a step started
        Waiting, // it succeeded, the gate is still open
        Running, // the gate was approved
        Waiting, // another gate opened
        Waiting, // the gate's own step started: it waits at its gate
        Running, // the gate was rejected
        Running, // the step failed: nothing runs, no gate is open
    ];
    assert_eq!(events.len(), expected.len());
    for n in 1..=events.len() {
        let run = fold(events[..n].to_vec());
        assert_eq!(run.status(), Some(expected[n - 1]), "after {n} events");
        assert_eq!(run.updated_at(), Some(t(n as i64 - 1)), "after {n} events");
    }
}

#[test]
fn skipping_ends_an_attempt_that_had_not_ended() {
    let run = fold(after(
        Running,
        [
            step_skipped(verify(), "condition is false", t(30)),
            step_skipped(build(), "on_error: skip", t(31)),
        ],
    ));
    assert_eq!(
        run.step(&verify()),
        Some(&StepState::Skipped {
            attempt: 1,
            reason: "condition is false".into(),
        })
    );
    assert_eq!(
        run.attempts(&verify()),
        [Attempt {
            ended_at: Some(t(30)),
            outcome: Some(AttemptOutcome::Skipped),
            ..queued_attempt(1, 7, VERIFY_DUE)
        }]
    );
    // The failed attempt keeps its outcome.
    assert_eq!(
        run.attempts(&build())[0].outcome,
        Some(AttemptOutcome::Failed)
    );
    assert_eq!(run.attempts(&build())[0].ended_at, Some(t(6)));
    assert!(run.step(&build()).is_some_and(StepState::is_done));
    assert!(!run.has_failure(t(LATE)), "a skipped step is no failure");

    // A retried attempt that is skipped: attempt 2 is the one skipped.
    let retried = fold(after(
        Running,
        [
            step_retried(build(), 2, 1_000, t(30)),
            step_skipped(build(), "gave up", t(40)),
        ],
    ));
    assert_eq!(
        retried.step(&build()),
        Some(&StepState::Skipped {
            attempt: 2,
            reason: "gave up".into(),
        })
    );
    let attempts = retried.attempts(&build());
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[1].outcome, Some(AttemptOutcome::Skipped));
    assert_eq!(attempts[0].outcome, Some(AttemptOutcome::Failed));
}

#[test]
fn an_abort_makes_the_failure_final() {
    let run = fold(after(
        Running,
        [recovery_applied(
            build(),
            ErrorClass::Network,
            RecoveryAction::Abort,
            t(30),
        )],
    ));
    assert_eq!(
        run.step(&build()),
        Some(&StepState::Failed {
            attempt: 1,
            error: step_error(ErrorClass::Network),
            is_final: true,
        })
    );
    assert_eq!(
        run.attempts(&build())[0].recovery,
        Some(RecoveryAction::Abort)
    );
    // `on_error: continue` gives up on the step too (the run goes on).
    let run = fold(after(
        Running,
        [recovery_applied(
            build(),
            ErrorClass::Network,
            RecoveryAction::Continue,
            t(30),
        )],
    ));
    assert_eq!(
        run.step(&build()),
        Some(&StepState::Failed {
            attempt: 1,
            error: step_error(ErrorClass::Network),
            is_final: true,
        })
    );
    // Any other recovery leaves the door open.
    let run = fold(after(
        Running,
        [recovery_applied(
            build(),
            ErrorClass::Network,
            RecoveryAction::Fallback {
                tool: "curl".into(),
            },
            t(30),
        )],
    ));
    assert_eq!(
        run.step(&build()),
        Some(&StepState::Failed {
            attempt: 1,
            error: step_error(ErrorClass::Network),
            is_final: false,
        })
    );
}

#[test]
fn gates_record_who_may_decide_and_what_was_decided() {
    let run = fold(path(Running));
    assert_eq!(
        run.gate(&g1()),
        Some(&Gate {
            gate_id: g1(),
            step_id: verify(),
            approvers: strings(&["alice", "bob"]),
            message: "ship it?".into(),
            opened_at: t(8),
            expires_at: None,
            decision: None,
        })
    );
    let g1_gate = run.gate(&g1()).unwrap();
    assert!(g1_gate.may_decide("alice") && g1_gate.may_decide("bob"));
    assert!(!g1_gate.may_decide("carol"));
    let g2_gate = run.gate(&g2()).unwrap();
    assert!(
        g2_gate.may_decide("anyone"),
        "no approvers: anyone may decide"
    );
    assert_eq!(g2_gate.expires_at, Some(t(G2_EXPIRY)));
    assert_eq!(run.gate(&g3()), None);

    let decided = fold(after(
        Running,
        [
            gate_rejected(g1(), "bob", "too risky", t(30)),
            gate_expired(g2(), t(60)),
        ],
    ));
    assert_eq!(
        decided.gate(&g1()).unwrap().decision,
        Some(GateDecision::Rejected {
            by: "bob".into(),
            comment: "too risky".into(),
            at: t(30),
        })
    );
    assert_eq!(
        decided.gate(&g2()).unwrap().decision,
        Some(GateDecision::Expired { at: t(60) })
    );
    assert_eq!(decided.open_gates().count(), 0);
    assert_eq!(decided.gates().len(), 2);

    let approved = fold(after(
        Waiting,
        [gate_approved(g2(), "carol", Some("ok"), t(30))],
    ));
    let open: Vec<_> = approved.open_gates().map(|g| g.gate_id).collect();
    assert_eq!(open, [g1()]);
    assert_eq!(approved.status(), Some(Waiting), "g1 is still open");
}

#[test]
fn the_saga_is_followed_step_by_step() {
    let given = then(
        after(Running, [step_succeeded(deploy(), 1, None, None, t(30))]),
        [compensation_started(
            "build failed",
            vec![deploy(), fetch()],
            t(40),
        )],
    );
    let run = fold(given.clone());
    assert_eq!(run.status(), Some(Compensating));
    let saga = run.compensation().unwrap();
    assert_eq!(saga.reason, "build failed");
    assert_eq!(saga.steps, [deploy(), fetch()]);
    assert_eq!(saga.started_at, t(40));
    assert_eq!(saga.next_step(), Some(&deploy()));
    assert_eq!(saga.remaining(), [deploy(), fetch()]);
    // No failed attempt is followed by another once the run is failing.
    assert_eq!(
        run.step(&build()),
        Some(&StepState::Failed {
            attempt: 1,
            error: step_error(ErrorClass::Network),
            is_final: true,
        })
    );

    let run = fold(then(
        given.clone(),
        [compensation_step_ran(deploy(), Some("already gone"), t(41))],
    ));
    let saga = run.compensation().unwrap();
    assert_eq!(
        saga.ran,
        [CompensationRan {
            step_id: deploy(),
            succeeded: false,
            error: Some("already gone".into()),
            at: t(41),
        }]
    );
    assert_eq!(saga.next_step(), Some(&fetch()));
    assert_eq!(saga.remaining(), [fetch()]);
    assert_eq!(run.status(), Some(Compensating));

    let run = fold(then(
        given,
        [
            compensation_step_ran(deploy(), None, t(41)),
            compensation_step_ran(fetch(), None, t(42)),
        ],
    ));
    let saga = run.compensation().unwrap();
    assert_eq!(saga.next_step(), None);
    assert!(saga.remaining().is_empty());
    assert_eq!(saga.ran.len(), 2);
}

#[test]
fn a_finished_run_says_how_it_ended() {
    let run = fold(path(Succeeded));
    assert_eq!(
        run.outcome(),
        Some(&RunOutcome::Succeeded {
            outputs: run_outputs(),
            at: t(20),
        })
    );
    assert!(run.is_terminal());

    let run = fold(path(Failed));
    assert_eq!(
        run.outcome(),
        Some(&RunOutcome::Failed {
            reason: "build failed".into(),
            error_class: Some(ErrorClass::Network),
            at: t(22),
        })
    );
    assert_eq!(run.compensation().map(|c| c.ran.len()), Some(1));
    assert_eq!(run.updated_at(), Some(t(22)));

    let run = fold(path(Cancelled));
    assert_eq!(
        run.outcome(),
        Some(&RunOutcome::Cancelled {
            by: "alice".into(),
            reason: "not needed any more".into(),
            at: t(20),
        })
    );
    // A stopped run's failures are final; its running step stays as it was.
    assert_eq!(
        run.step(&build()),
        Some(&StepState::Failed {
            attempt: 1,
            error: step_error(ErrorClass::Network),
            is_final: true,
        })
    );
    assert_eq!(ids(run.running_steps()), [deploy()]);
    for status in [Succeeded, Failed, Cancelled] {
        assert_eq!(
            fold(path(status)).outcome().map(RunOutcome::status),
            Some(status)
        );
    }
    for status in [Running, Waiting, Compensating] {
        assert_eq!(fold(path(status)).outcome(), None, "{status}");
    }
}

#[test]
fn what_counts_as_a_failure_for_the_saga() {
    assert!(!fold(settled()).has_failure(t(LATE)));
    assert!(fold(path(Waiting)).has_failure(t(LATE)), "a failed step");
    let gate = |decision: RunEvent| {
        fold(then(
            settled(),
            [
                step_scheduled(verify(), t(4), t(4)),
                gate_opened(g1(), verify(), &[], Some(t(60)), t(5)),
                decision,
            ],
        ))
    };
    assert!(gate(gate_rejected(g1(), "bob", "no", t(6))).has_failure(t(LATE)));
    assert!(gate(gate_expired(g1(), t(60))).has_failure(t(LATE)));
    assert!(!gate(gate_approved(g1(), "bob", None, t(6))).has_failure(t(LATE)));
    let over_budget = fold(then(
        settled(),
        [
            cost_charged(None, 9.0, 0, 11.0, t(30)),
            budget_exceeded(BUDGET, 11.0, t(30)),
        ],
    ));
    assert!(over_budget.has_failure(t(LATE)), "the budget was exceeded");
    let with_deadline = fold([started_with(None, Some(t(50)), None, t(0))]);
    assert!(!with_deadline.has_failure(t(49)));
    assert!(with_deadline.has_failure(t(50)));
    assert!(!fold([started_with(None, None, None, t(0))]).has_failure(t(1_000_000)));
}

#[test]
fn a_sub_workflow_run_knows_its_parent() {
    let run = fold([started_with(None, None, Some(parent()), t(0))]);
    assert_eq!(run.parent(), Some(&parent()));
    assert_eq!(run.budget_usd(), None);
    assert_eq!(run.timeout_at(), None);
}

#[test]
fn status_helpers() {
    let terminal: Vec<RunStatus> = RunStatus::ALL
        .into_iter()
        .filter(|s| s.is_terminal())
        .collect();
    assert_eq!(terminal, [Succeeded, Failed, Cancelled]);
    let active: Vec<RunStatus> = RunStatus::ALL
        .into_iter()
        .filter(|s| s.is_active())
        .collect();
    assert_eq!(active, [Queued, Running, Paused, Waiting]);
    assert!(!Compensating.is_terminal() && !Compensating.is_active());
    for status in RunStatus::ALL {
        assert_eq!(status.to_string(), status.as_str());
        assert_eq!(
            serde_json::to_value(status).unwrap(),
            serde_json::json!(status.as_str())
        );
    }
    assert_eq!(Compensating.to_string(), "COMPENSATING");
    assert!(!Run::default().is_terminal());
    assert_eq!(Run::default().status(), None);
}

#[test]
fn the_state_round_trips_through_serde() {
    let mut runs: Vec<Run> = RunStatus::ALL.into_iter().map(|s| fold(path(s))).collect();
    runs.push(fold(after(
        Running,
        [
            recovery_applied(build(), ErrorClass::Network, RecoveryAction::Retry, t(25)),
            step_retried(build(), 2, 1_000, t(30)),
            step_started(deploy(), 1, "deploy-1", None, t(31)),
            cost_charged(None, 9.0, 0, 11.0, t(40)),
            budget_exceeded(BUDGET, 11.0, t(40)),
        ],
    )));
    for run in runs {
        let json = serde_json::to_value(&run).unwrap();
        assert_eq!(serde_json::from_value::<Run>(json).unwrap(), run);
    }
}

#[tokio::test]
async fn cqrs_es_drives_decide_through_handle() {
    let mut run = Run::default();
    let sink = EventSink::default();
    run.handle(start(t(0)), &(), &sink).await.unwrap();
    run.handle(schedule(deploy(), t(1), t(1)), &(), &sink)
        .await
        .unwrap();
    run.handle(start_step(deploy(), 1, "deploy-1", None, t(2)), &(), &sink)
        .await
        .unwrap();
    run.handle(succeed(deploy(), 1, Some(11.0), None, t(3)), &(), &sink)
        .await
        .unwrap();
    let refused = run.handle(start(t(4)), &(), &sink).await;
    assert_eq!(
        refused,
        Err(RunError::AlreadyStarted {
            run: run_id(),
            status: Running,
        })
    );
    assert_eq!(run.budget_exceeded_at(), Some(t(3)));
    assert_eq!(
        sink.collect().await,
        vec![
            under(Rules::CURRENT, started(t(0))),
            step_scheduled(deploy(), t(1), t(1)),
            step_started(deploy(), 1, "deploy-1", None, t(2)),
            step_succeeded(deploy(), 1, Some(11.0), None, t(3)),
            cost_charged(Some(deploy()), 11.0, 0, 11.0, t(3)),
            budget_exceeded(BUDGET, 11.0, t(3)),
        ]
    );
    assert_eq!(Run::TYPE, "run");
}
