//! Every command against every run status, every step situation and every gate
//! situation. What is allowed where is declared here, independently of `decide.rs`;
//! the refusal expected elsewhere follows from the order in which a run checks a
//! command: the run (exists, not finished, status), then the step or gate, then the
//! command's data (which the rows below always get right).

use super::fixtures::*;
use crate::domain::ids::{GateId, StepId};
use crate::domain::run::RunStatus::*;
use crate::domain::run::*;

/// Exhaustive on purpose: a new command does not compile until it is listed here, and
/// each matrix then fails until it has a row for it.
fn action_index(action: RunAction) -> usize {
    match action {
        RunAction::Start => 0,
        RunAction::ScheduleStep => 1,
        RunAction::StartStep => 2,
        RunAction::SucceedStep => 3,
        RunAction::FailStep => 4,
        RunAction::RetryStep => 5,
        RunAction::SkipStep => 6,
        RunAction::ApplyRecovery => 7,
        RunAction::OpenGate => 8,
        RunAction::ApproveGate => 9,
        RunAction::RejectGate => 10,
        RunAction::ExpireGate => 11,
        RunAction::ChargeCost => 12,
        RunAction::StartCompensation => 13,
        RunAction::RecordCompensationStep => 14,
        RunAction::Complete => 15,
        RunAction::Fail => 16,
        RunAction::Cancel => 17,
        RunAction::Pause => 18,
        RunAction::Resume => 19,
        RunAction::CarryStep => 20,
        RunAction::NoteDerived => 21,
        RunAction::Continue => 22,
        RunAction::Queue => 23,
        RunAction::Admit => 24,
        RunAction::ThrottleStep => 25,
    }
}
const ACTIONS: usize = 26;

// ---- every command in every run status --------------------------------------------------

/// Where steps and gates move.
const ACTIVE: &[RunStatus] = &[Running, Waiting, Paused];
/// Where a run can still be stopped.
const STOPPABLE: &[RunStatus] = &[Queued, Running, Waiting, Paused, Compensating];

/// One command, the statuses it is allowed in, what it emits there, and the statuses
/// among those where the path (see `fixtures::path`) refuses it for a reason of its
/// own, with that refusal.
struct StatusRow {
    name: &'static str,
    when: RunCommand,
    allowed: &'static [RunStatus],
    emits: Vec<RunEvent>,
    blocked: Vec<(RunStatus, RunError)>,
}

fn status_row(
    name: &'static str,
    when: RunCommand,
    allowed: &'static [RunStatus],
    emits: Vec<RunEvent>,
) -> StatusRow {
    StatusRow {
        name,
        when,
        allowed,
        emits,
        blocked: Vec::new(),
    }
}

/// Every command, aimed at what the paths hold: `deploy` running (attempt 1, key
/// `deploy-1`) in RUNNING and only scheduled in WAITING, `verify` scheduled and due,
/// `build` failed, `fetch` succeeded, g1 open for alice and bob, g2 open until
/// `G2_EXPIRY`, the compensation of `fetch` pending in COMPENSATING.
fn status_rows() -> Vec<StatusRow> {
    let now = t(LATE);
    // No step runs while a run waits: the WAITING path has `deploy` scheduled.
    let deploy_scheduled =
        |expected| attempt_not_in(deploy(), 1, expected, situation(StepPhase::Scheduled, 1));
    vec![
        status_row(
            "start",
            start(now),
            &[],
            vec![under(Rules::CURRENT, started(now))],
        ),
        status_row(
            "schedule a step",
            schedule(notify(), now, now),
            ACTIVE,
            vec![step_scheduled(notify(), now, now)],
        ),
        status_row(
            "start a due step",
            start_step(verify(), 1, "verify-1", None, now),
            ACTIVE,
            vec![step_started(verify(), 1, "verify-1", None, now)],
        ),
        status_row(
            "start deploy with its key (a restart in RUNNING, a first start in WAITING)",
            start_step(deploy(), 1, "deploy-1", None, now),
            ACTIVE,
            vec![step_started(deploy(), 1, "deploy-1", None, now)],
        ),
        StatusRow {
            blocked: vec![(Waiting, deploy_scheduled(StepPhase::Running))],
            ..status_row(
                "succeed the running step",
                succeed(deploy(), 1, None, None, now),
                ACTIVE,
                vec![step_succeeded(deploy(), 1, None, None, now)],
            )
        },
        StatusRow {
            blocked: vec![(Waiting, deploy_scheduled(StepPhase::Running))],
            ..status_row(
                "throttle the running step",
                throttle(deploy(), 1, 2_000, now),
                ACTIVE,
                vec![step_throttled(deploy(), 1, 2_000, now)],
            )
        },
        StatusRow {
            blocked: vec![(Waiting, deploy_scheduled(StepPhase::Running))],
            ..status_row(
                "fail the running step",
                fail_step(deploy(), 1, ErrorClass::Dependency, now),
                ACTIVE,
                vec![step_failed(deploy(), 1, ErrorClass::Dependency, now)],
            )
        },
        status_row(
            "retry the failed step",
            retry(build(), 1_000, now),
            ACTIVE,
            vec![step_retried(build(), 2, 1_000, now)],
        ),
        status_row(
            "skip the scheduled step",
            skip(verify(), "not needed", now),
            ACTIVE,
            vec![step_skipped(verify(), "not needed", now)],
        ),
        status_row(
            "apply a recovery to the failed step",
            apply_recovery(build(), RecoveryAction::RetryWithBackoff, now),
            ACTIVE,
            vec![recovery_applied(
                build(),
                ErrorClass::Network,
                RecoveryAction::RetryWithBackoff,
                now,
            )],
        ),
        status_row(
            "open a new gate",
            open_gate(g3(), verify(), &["carol"], None, now),
            ACTIVE,
            vec![gate_opened(g3(), verify(), &["carol"], None, now)],
        ),
        status_row(
            "approve the open gate",
            approve(g1(), "alice", Some("go"), now),
            ACTIVE,
            vec![gate_approved(g1(), "alice", Some("go"), now)],
        ),
        status_row(
            "reject the open gate",
            reject(g1(), "bob", "not now", now),
            ACTIVE,
            vec![gate_rejected(g1(), "bob", "not now", now)],
        ),
        status_row(
            "expire the gate past its expiry",
            expire(g2(), now),
            ACTIVE,
            vec![gate_expired(g2(), now)],
        ),
        status_row(
            "charge cost",
            charge(None, 0.5, 10, now),
            ACTIVE,
            vec![cost_charged(None, 0.5, 10, FETCH_USD + 0.5, now)],
        ),
        status_row(
            "start compensation",
            start_compensation("build failed", vec![fetch()], now),
            ACTIVE,
            vec![compensation_started("build failed", vec![fetch()], now)],
        ),
        status_row(
            "record the pending compensation",
            record_compensation(fetch(), true, None, now),
            &[Compensating],
            vec![compensation_step_ran(fetch(), None, now)],
        ),
        StatusRow {
            // The busy paths always have something left; `transitions` completes runs.
            blocked: vec![
                (
                    Running,
                    unfinished(
                        vec![deploy()],
                        vec![verify()],
                        vec![g1(), g2()],
                        vec![build()],
                    ),
                ),
                (
                    Waiting,
                    unfinished(
                        vec![],
                        vec![deploy(), verify()],
                        vec![g1(), g2()],
                        vec![build()],
                    ),
                ),
                (
                    Paused,
                    unfinished(
                        vec![deploy()],
                        vec![verify()],
                        vec![g1(), g2()],
                        vec![build()],
                    ),
                ),
            ],
            ..status_row("complete", complete(now), ACTIVE, vec![completed(now)])
        },
        StatusRow {
            blocked: vec![(
                Compensating,
                RunError::CompensationUnfinished {
                    run: run_id(),
                    remaining: vec![fetch()],
                },
            )],
            ..status_row(
                "fail",
                fail("gave up", None, now),
                STOPPABLE,
                vec![failed("gave up", None, now)],
            )
        },
        status_row(
            "cancel",
            cancel("alice", now),
            STOPPABLE,
            vec![cancelled("alice", now)],
        ),
        status_row(
            "pause",
            pause("ops", now),
            &[Queued, Running, Waiting],
            vec![paused("ops", now)],
        ),
        status_row(
            "resume",
            resume("ops", now),
            &[Paused],
            vec![resumed("ops", now)],
        ),
        StatusRow {
            // None of the paths is a rerun: a step is never carried into them.
            blocked: [Running, Waiting, Paused]
                .into_iter()
                .map(|s| {
                    (
                        s,
                        RunError::CannotCarry {
                            run: run_id(),
                            step: notify(),
                            reason: "the run is not a rerun or fork",
                        },
                    )
                })
                .collect(),
            ..status_row(
                "carry a step",
                carry_step(notify(), now),
                ACTIVE,
                vec![step_carried(notify(), now)],
            )
        },
        status_row(
            "note a derived run",
            note_derived("ops", now),
            &RunStatus::ALL,
            vec![derived("ops", now)],
        ),
        status_row(
            "queue",
            queue(&format!("{SCOPE}:key:acme"), now),
            &[Queued],
            vec![queued(&format!("{SCOPE}:key:acme"), now)],
        ),
        status_row("admit", admit(now), &[Queued], vec![admitted(now)]),
        // What it emits is the state of each path: see `expected_in_status`.
        status_row(
            "continue as new",
            RunCommand::Continue { at: now },
            STOPPABLE,
            vec![],
        ),
    ]
}

/// What a row must do in `state` (`None`: never started).
fn expected_in_status(row: &StatusRow, state: Option<RunStatus>) -> Then {
    let action = row.when.action();
    let is_start = action == RunAction::Start;
    let Some(status) = state else {
        return if is_start {
            Ok(row.emits.clone())
        } else {
            Err(RunError::NotStarted { action })
        };
    };
    // A finished run takes one command more: noting the runs made from it.
    if matches!(status, Succeeded | Failed | Cancelled) && action != RunAction::NoteDerived {
        return Err(finished(status, action));
    }
    if is_start {
        return Err(RunError::AlreadyStarted {
            run: run_id(),
            status,
        });
    }
    if !row.allowed.contains(&status) {
        return Err(invalid_status(status, action, row.allowed));
    }
    match row.blocked.iter().find(|(s, _)| *s == status) {
        Some((_, refusal)) => Err(refusal.clone()),
        None => match row.when {
            RunCommand::Continue { at } => Ok(vec![continued(status, at)]),
            _ => Ok(row.emits.clone()),
        },
    }
}

#[test]
fn every_command_in_every_run_status() {
    let rows = status_rows();
    let covered: std::collections::BTreeSet<usize> =
        rows.iter().map(|r| action_index(r.when.action())).collect();
    assert_eq!(covered, (0..ACTIONS).collect(), "a row for every command");
    for row in &rows {
        for (status, _) in &row.blocked {
            assert!(row.allowed.contains(status), "{}: {status}", row.name);
        }
    }
    let mut cases = Vec::new();
    let states = std::iter::once(None).chain(RunStatus::ALL.into_iter().map(Some));
    for state in states {
        for row in status_rows() {
            let given = state.map_or_else(Vec::new, path);
            let name = format!(
                "{} in {}",
                row.name,
                state.map_or("no run".to_string(), |s| s.to_string())
            );
            let then = expected_in_status(&row, state);
            cases.push((name, given, row.when, then));
        }
    }
    // 27 rows x (8 statuses + no run).
    assert_eq!(check(cases), 27 * 9);
}

#[test]
fn the_paths_reach_the_statuses_they_are_named_after() {
    assert_eq!(Run::default().status(), None);
    for status in RunStatus::ALL {
        let run = fold(path(status));
        assert_eq!(run.status(), Some(status));
        assert_eq!(run.is_terminal(), status.is_terminal(), "{status}");
        assert_eq!(run.id(), Some(run_id()));
    }
}

// ---- every step command in every step situation -------------------------------------------

/// Where the step under test (`build`) is; the run is RUNNING throughout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepSit {
    /// Never scheduled.
    Unknown,
    Scheduled,
    Running,
    Succeeded,
    /// Attempt 1 failed and the handler has not chosen yet.
    Failed,
    /// Attempt 1 failed and the handler chose to retry (the retry is not queued yet).
    FailedRecovering,
    /// Attempt 1 failed and the handler aborted: final.
    FailedFinal,
    /// Attempt 2 is queued after attempt 1 failed.
    Retried,
    /// Attempt 2 runs.
    RunningAgain,
    /// Skipped before it started.
    Skipped,
    /// Skipped after attempt 1 failed.
    SkippedAfterFailure,
}

const STEP_SITS: [StepSit; 11] = [
    StepSit::Unknown,
    StepSit::Scheduled,
    StepSit::Running,
    StepSit::Succeeded,
    StepSit::Failed,
    StepSit::FailedRecovering,
    StepSit::FailedFinal,
    StepSit::Retried,
    StepSit::RunningAgain,
    StepSit::Skipped,
    StepSit::SkippedAfterFailure,
];

/// The run's events, then `build`'s, up to t(20).
fn step_path(sit: StepSit) -> Vec<RunEvent> {
    use StepSit::*;
    let mut events = match sit {
        Unknown => return vec![started(t(0))],
        Scheduled => return vec![started(t(0)), step_scheduled(build(), t(10), t(1))],
        Running => step_path(Scheduled),
        Succeeded | Failed => step_path(Running),
        FailedRecovering | FailedFinal | SkippedAfterFailure => step_path(Failed),
        Retried => step_path(FailedRecovering),
        RunningAgain => step_path(Retried),
        Skipped => step_path(Scheduled),
    };
    events.push(match sit {
        Unknown | Scheduled => unreachable!(),
        Running => step_started(build(), 1, "build-1", None, t(11)),
        Succeeded => step_succeeded(build(), 1, None, None, t(12)),
        Failed => step_failed(build(), 1, ErrorClass::Network, t(12)),
        FailedRecovering => {
            recovery_applied(build(), ErrorClass::Network, RecoveryAction::Retry, t(13))
        }
        FailedFinal => recovery_applied(build(), ErrorClass::Network, RecoveryAction::Abort, t(13)),
        Retried => step_retried(build(), 2, 1_000, t(14)),
        RunningAgain => step_started(build(), 2, "build-2", None, t(20)),
        Skipped => step_skipped(build(), "not needed", t(12)),
        SkippedAfterFailure => step_skipped(build(), "on_error: skip", t(13)),
    });
    events
}

/// Where an error says the step is.
fn now_of(sit: StepSit) -> Option<StepSituation> {
    use StepPhase as P;
    let (phase, attempt) = match sit {
        StepSit::Unknown => return None,
        StepSit::Scheduled => (P::Scheduled, 1),
        StepSit::Running => (P::Running, 1),
        StepSit::Succeeded => (P::Succeeded, 1),
        StepSit::Failed | StepSit::FailedRecovering | StepSit::FailedFinal => (P::Failed, 1),
        StepSit::Retried => (P::Scheduled, 2),
        StepSit::RunningAgain => (P::Running, 2),
        StepSit::Skipped | StepSit::SkippedAfterFailure => (P::Skipped, 1),
    };
    Some(situation(phase, attempt))
}

/// How a step command is refused outside its situations.
#[derive(Debug, Clone, Copy)]
enum StepRule {
    /// Scheduling: any step that exists was already scheduled.
    Schedule,
    /// Start, succeed or fail one attempt, which must be in `expected`.
    Attempt { attempt: u32, expected: StepPhase },
    /// Retry or skip: the step must be in one of `phases`, and a failure must not be final.
    FollowUp { phases: &'static [StepPhase] },
    /// One recovery per failed attempt.
    Recovery,
    /// A gate may not be opened on a skipped step.
    Gate,
    /// Any step that exists may be charged.
    Charge,
}

struct StepRow {
    name: &'static str,
    when: RunCommand,
    allowed: &'static [StepSit],
    rule: StepRule,
    emits: Vec<RunEvent>,
}

fn step_rows() -> Vec<StepRow> {
    use StepSit::*;
    let now = t(LATE);
    vec![
        StepRow {
            name: "schedule build",
            when: schedule(build(), now, now),
            allowed: &[Unknown],
            rule: StepRule::Schedule,
            emits: vec![step_scheduled(build(), now, now)],
        },
        StepRow {
            name: "start build attempt 1 with key build-1",
            when: start_step(build(), 1, "build-1", None, now),
            allowed: &[Scheduled, Running],
            rule: StepRule::Attempt {
                attempt: 1,
                expected: StepPhase::Scheduled,
            },
            emits: vec![step_started(build(), 1, "build-1", None, now)],
        },
        StepRow {
            name: "start build attempt 2 with key build-2",
            when: start_step(build(), 2, "build-2", None, now),
            allowed: &[Retried, RunningAgain],
            rule: StepRule::Attempt {
                attempt: 2,
                expected: StepPhase::Scheduled,
            },
            emits: vec![step_started(build(), 2, "build-2", None, now)],
        },
        StepRow {
            name: "succeed build attempt 1",
            when: succeed(build(), 1, None, None, now),
            allowed: &[Running],
            rule: StepRule::Attempt {
                attempt: 1,
                expected: StepPhase::Running,
            },
            emits: vec![step_succeeded(build(), 1, None, None, now)],
        },
        StepRow {
            name: "succeed build attempt 2",
            when: succeed(build(), 2, None, None, now),
            allowed: &[RunningAgain],
            rule: StepRule::Attempt {
                attempt: 2,
                expected: StepPhase::Running,
            },
            emits: vec![step_succeeded(build(), 2, None, None, now)],
        },
        StepRow {
            name: "fail build attempt 1",
            when: fail_step(build(), 1, ErrorClass::Timeout, now),
            allowed: &[Running],
            rule: StepRule::Attempt {
                attempt: 1,
                expected: StepPhase::Running,
            },
            emits: vec![step_failed(build(), 1, ErrorClass::Timeout, now)],
        },
        StepRow {
            name: "fail build attempt 2",
            when: fail_step(build(), 2, ErrorClass::Timeout, now),
            allowed: &[RunningAgain],
            rule: StepRule::Attempt {
                attempt: 2,
                expected: StepPhase::Running,
            },
            emits: vec![step_failed(build(), 2, ErrorClass::Timeout, now)],
        },
        StepRow {
            name: "throttle build attempt 1",
            when: throttle(build(), 1, 500, now),
            allowed: &[Running],
            rule: StepRule::Attempt {
                attempt: 1,
                expected: StepPhase::Running,
            },
            emits: vec![step_throttled(build(), 1, 500, now)],
        },
        StepRow {
            name: "throttle build attempt 2",
            when: throttle(build(), 2, 500, now),
            allowed: &[RunningAgain],
            rule: StepRule::Attempt {
                attempt: 2,
                expected: StepPhase::Running,
            },
            emits: vec![step_throttled(build(), 2, 500, now)],
        },
        StepRow {
            name: "retry build",
            when: retry(build(), 1_000, now),
            allowed: &[Failed, FailedRecovering],
            rule: StepRule::FollowUp {
                phases: &[StepPhase::Failed],
            },
            emits: vec![step_retried(build(), 2, 1_000, now)],
        },
        StepRow {
            name: "skip build",
            when: skip(build(), "not needed", now),
            allowed: &[Scheduled, Failed, FailedRecovering, Retried],
            rule: StepRule::FollowUp {
                phases: &[StepPhase::Scheduled, StepPhase::Failed],
            },
            emits: vec![step_skipped(build(), "not needed", now)],
        },
        StepRow {
            name: "apply a recovery to build",
            when: apply_recovery(
                build(),
                RecoveryAction::IncreaseTimeout {
                    new_timeout_seconds: 600,
                },
                now,
            ),
            allowed: &[Failed],
            rule: StepRule::Recovery,
            emits: vec![recovery_applied(
                build(),
                ErrorClass::Network,
                RecoveryAction::IncreaseTimeout {
                    new_timeout_seconds: 600,
                },
                now,
            )],
        },
        StepRow {
            name: "open a gate on build",
            when: open_gate(g1(), build(), &["alice"], None, now),
            allowed: &[
                Scheduled,
                Running,
                Failed,
                FailedRecovering,
                FailedFinal,
                Retried,
                RunningAgain,
            ],
            rule: StepRule::Gate,
            emits: vec![gate_opened(g1(), build(), &["alice"], None, now)],
        },
        StepRow {
            name: "charge build",
            when: charge(Some(build()), 0.5, 5, now),
            allowed: &[
                Scheduled,
                Running,
                Succeeded,
                Failed,
                FailedRecovering,
                FailedFinal,
                Retried,
                RunningAgain,
                Skipped,
                SkippedAfterFailure,
            ],
            rule: StepRule::Charge,
            emits: vec![cost_charged(Some(build()), 0.5, 5, 0.5, now)],
        },
    ]
}

fn expected_for_step(row: &StepRow, sit: StepSit) -> Then {
    if row.allowed.contains(&sit) {
        return Ok(row.emits.clone());
    }
    let action = row.when.action();
    let Some(now) = now_of(sit) else {
        return Err(unknown_step(build(), action));
    };
    if let StepRule::Schedule = row.rule {
        return Err(RunError::StepAlreadyScheduled {
            run: run_id(),
            step: build(),
            now,
        });
    }
    if sit == StepSit::Succeeded {
        return Err(already_succeeded(build(), 1, action));
    }
    Err(match row.rule {
        StepRule::Attempt { attempt, expected } => attempt_not_in(build(), attempt, expected, now),
        StepRule::FollowUp { .. } if sit == StepSit::FailedFinal => {
            failure_is_final(build(), 1, action)
        }
        StepRule::FollowUp { phases } => step_not_in(build(), action, now, phases),
        StepRule::Recovery => match sit {
            StepSit::FailedRecovering | StepSit::FailedFinal => RunError::RecoveryAlreadyApplied {
                run: run_id(),
                step: build(),
                attempt: 1,
                applied: if sit == StepSit::FailedFinal {
                    RecoveryAction::Abort
                } else {
                    RecoveryAction::Retry
                },
            },
            _ => step_not_in(build(), action, now, &[StepPhase::Failed]),
        },
        StepRule::Gate => step_not_in(
            build(),
            action,
            now,
            &[StepPhase::Scheduled, StepPhase::Running, StepPhase::Failed],
        ),
        StepRule::Schedule | StepRule::Charge => {
            panic!("{}: no refusal expected in {sit:?}", row.name)
        }
    })
}

#[test]
fn every_step_command_in_every_step_situation() {
    let mut cases = Vec::new();
    for sit in STEP_SITS {
        for row in step_rows() {
            let name = format!("{} when build is {sit:?}", row.name);
            let then = expected_for_step(&row, sit);
            cases.push((name, step_path(sit), row.when, then));
        }
    }
    assert_eq!(check(cases), 14 * 11);
}

#[test]
fn the_step_paths_reach_the_situations_they_are_named_after() {
    for sit in STEP_SITS {
        let run = fold(step_path(sit));
        assert_eq!(run.status(), Some(Running), "{sit:?}");
        assert_eq!(
            run.step(&build()).map(StepSituation::from),
            now_of(sit),
            "{sit:?}"
        );
        let is_final = matches!(
            run.step(&build()),
            Some(StepState::Failed { is_final: true, .. })
        );
        assert_eq!(is_final, sit == StepSit::FailedFinal, "{sit:?}");
        let recovery = run
            .attempts(&build())
            .first()
            .and_then(|a| a.recovery.clone());
        let expected_recovery = match sit {
            StepSit::FailedRecovering | StepSit::Retried | StepSit::RunningAgain => {
                Some(RecoveryAction::Retry)
            }
            StepSit::FailedFinal => Some(RecoveryAction::Abort),
            _ => None,
        };
        assert_eq!(recovery, expected_recovery, "{sit:?}");
    }
}

// ---- every gate command in every gate situation -------------------------------------------

/// Where gate g1 (on the failed step `build`, for alice) is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GateSit {
    /// Never opened.
    Unknown,
    /// Open, without expiry.
    Open,
    /// Open until after the commands are issued.
    OpenUntilLater,
    /// Open, but its expiry has passed.
    OpenPastExpiry,
    Approved,
    Rejected,
    Expired,
}

const GATE_SITS: [GateSit; 7] = [
    GateSit::Unknown,
    GateSit::Open,
    GateSit::OpenUntilLater,
    GateSit::OpenPastExpiry,
    GateSit::Approved,
    GateSit::Rejected,
    GateSit::Expired,
];

const GATE_EXPIRY: i64 = 50;
const GATE_LATER: i64 = 200;

/// A run whose `build` failed, then g1's events, up to t(60).
fn gate_path(sit: GateSit) -> Vec<RunEvent> {
    use GateSit::*;
    let mut events = vec![
        started(t(0)),
        step_scheduled(build(), t(1), t(1)),
        step_started(build(), 1, "build-1", None, t(2)),
        step_failed(build(), 1, ErrorClass::Network, t(3)),
    ];
    let opened = |expires_at| gate_opened(g1(), build(), &["alice"], expires_at, t(10));
    events.extend(match sit {
        Unknown => vec![],
        Open => vec![opened(None)],
        OpenUntilLater => vec![opened(Some(t(GATE_LATER)))],
        OpenPastExpiry => vec![opened(Some(t(GATE_EXPIRY)))],
        Approved => vec![
            opened(None),
            gate_approved(g1(), "alice", Some("ok"), t(20)),
        ],
        Rejected => vec![opened(None), gate_rejected(g1(), "alice", "no", t(20))],
        Expired => vec![opened(Some(t(GATE_EXPIRY))), gate_expired(g1(), t(60))],
    });
    events
}

/// How g1 was closed, as errors report it.
fn decision_of(sit: GateSit) -> Option<GateDecision> {
    match sit {
        GateSit::Approved => Some(GateDecision::Approved {
            by: "alice".into(),
            comment: Some("ok".into()),
            at: t(20),
        }),
        GateSit::Rejected => Some(GateDecision::Rejected {
            by: "alice".into(),
            comment: "no".into(),
            at: t(20),
        }),
        GateSit::Expired => Some(GateDecision::Expired { at: t(60) }),
        _ => None,
    }
}

fn is_open(sit: GateSit) -> bool {
    matches!(
        sit,
        GateSit::Open | GateSit::OpenUntilLater | GateSit::OpenPastExpiry
    )
}

#[derive(Debug, Clone, Copy)]
enum GateRule {
    /// The command names a new gate: g1 must never have been opened.
    New,
    /// Approve or reject: g1 must be open and not past its expiry, and `by` may decide it.
    Decide { by: &'static str },
    /// Expire: g1 must be open and past its expiry.
    Expire,
    /// Complete: no gate may be open.
    Complete,
    /// Another gate: g1 does not matter.
    Other,
}

struct GateRow {
    name: &'static str,
    /// Events after g1's, before the command.
    also: Vec<RunEvent>,
    when: RunCommand,
    allowed: &'static [GateSit],
    rule: GateRule,
    emits: Vec<RunEvent>,
}

fn gate_rows() -> Vec<GateRow> {
    use GateSit::*;
    let now = t(LATE);
    let row = |name, when, allowed, rule, emits| GateRow {
        name,
        also: vec![],
        when,
        allowed,
        rule,
        emits,
    };
    vec![
        row(
            "open g1",
            open_gate(g1(), build(), &["alice"], None, now),
            &[Unknown],
            GateRule::New,
            vec![gate_opened(g1(), build(), &["alice"], None, now)],
        ),
        row(
            "escalate to g1",
            apply_recovery(build(), RecoveryAction::Escalate { gate_id: g1() }, now),
            &[Unknown],
            GateRule::New,
            vec![recovery_applied(
                build(),
                ErrorClass::Network,
                RecoveryAction::Escalate { gate_id: g1() },
                now,
            )],
        ),
        row(
            "approve g1 as alice",
            approve(g1(), "alice", None, now),
            &[Open, OpenUntilLater],
            GateRule::Decide { by: "alice" },
            vec![gate_approved(g1(), "alice", None, now)],
        ),
        row(
            "reject g1 as alice",
            reject(g1(), "alice", "no", now),
            &[Open, OpenUntilLater],
            GateRule::Decide { by: "alice" },
            vec![gate_rejected(g1(), "alice", "no", now)],
        ),
        row(
            "approve g1 as mallory",
            approve(g1(), "mallory", None, now),
            &[],
            GateRule::Decide { by: "mallory" },
            vec![],
        ),
        row(
            "expire g1",
            expire(g1(), now),
            &[OpenPastExpiry],
            GateRule::Expire,
            vec![gate_expired(g1(), now)],
        ),
        row(
            "open another gate",
            open_gate(g2(), build(), &[], None, now),
            &GATE_SITS,
            GateRule::Other,
            vec![gate_opened(g2(), build(), &[], None, now)],
        ),
        GateRow {
            // The failed step is given up first, so only the gate can stand in the way.
            also: vec![step_skipped(build(), "handled", t(70))],
            ..row(
                "complete",
                complete(now),
                &[Unknown, Approved, Rejected, Expired],
                GateRule::Complete,
                vec![completed(now)],
            )
        },
    ]
}

fn expected_for_gate(row: &GateRow, sit: GateSit) -> Then {
    if row.allowed.contains(&sit) {
        return Ok(row.emits.clone());
    }
    let action = row.when.action();
    let gate: GateId = g1();
    Err(match row.rule {
        GateRule::New => gate_exists(gate, decision_of(sit)),
        GateRule::Complete => unfinished(Vec::<StepId>::new(), vec![], vec![gate], vec![]),
        GateRule::Other => panic!("{}: no refusal expected in {sit:?}", row.name),
        GateRule::Decide { .. } | GateRule::Expire if sit == GateSit::Unknown => {
            unknown_gate(gate, action)
        }
        GateRule::Decide { .. } | GateRule::Expire if !is_open(sit) => {
            gate_closed(gate, action, decision_of(sit).unwrap())
        }
        GateRule::Decide { .. } if sit == GateSit::OpenPastExpiry => RunError::GateHasExpired {
            run: run_id(),
            gate,
            action,
            expires_at: t(GATE_EXPIRY),
            at: t(LATE),
        },
        GateRule::Decide { by } => RunError::NotAnApprover {
            run: run_id(),
            gate,
            action,
            by: by.into(),
            approvers: strings(&["alice"]),
        },
        GateRule::Expire if sit == GateSit::Open => RunError::GateNeverExpires {
            run: run_id(),
            gate,
        },
        GateRule::Expire => RunError::GateNotDue {
            run: run_id(),
            gate,
            expires_at: t(GATE_LATER),
            at: t(LATE),
        },
    })
}

#[test]
fn every_gate_command_in_every_gate_situation() {
    let mut cases = Vec::new();
    for sit in GATE_SITS {
        for row in gate_rows() {
            let name = format!("{} when g1 is {sit:?}", row.name);
            let expected = expected_for_gate(&row, sit);
            let given = then(gate_path(sit), row.also);
            cases.push((name, given, row.when, expected));
        }
    }
    assert_eq!(check(cases), 8 * 7);
}

#[test]
fn the_gate_paths_reach_the_situations_they_are_named_after() {
    for sit in GATE_SITS {
        let run = fold(gate_path(sit));
        let gate = run.gate(&g1());
        assert_eq!(gate.is_some(), sit != GateSit::Unknown, "{sit:?}");
        assert_eq!(gate.is_some_and(Gate::is_open), is_open(sit), "{sit:?}");
        assert_eq!(
            gate.and_then(|g| g.decision.clone()),
            decision_of(sit),
            "{sit:?}"
        );
        // A failed step and an open gate: the run waits for a person.
        let status = if is_open(sit) { Waiting } else { Running };
        assert_eq!(run.status(), Some(status), "{sit:?}");
    }
}
