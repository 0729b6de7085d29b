//! Scenarios: a workflow, a simulated worker that carries out effects as told, and
//! the events the engine decides, tick by tick, with an injected clock.

use std::collections::BTreeSet;
use std::path::Path;

use chrono::{DateTime, Duration, TimeZone, Utc};
use cqrs_es::Aggregate;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::domain::Decide;
use crate::domain::ids::{RunId, StepId};
use crate::domain::run::{
    ErrorClass, GateDecision, RecoveryAction, Rules, Run, RunCommand, RunEvent, RunStatus,
    StepState,
};
use crate::workflow::model::Workflow;
use crate::workflow::validate::check;

use super::verify::{Decided, Recorded, ReplayContext, verify_history};
use super::*;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 9, 0, 0).unwrap()
}

fn workflow(yaml: &str) -> Workflow {
    match check(Path::new("test.awl.yaml"), yaml) {
        Ok(checked) => checked.workflow,
        Err(d) => panic!("test workflow is invalid:\n{d}"),
    }
}

fn sid(s: &str) -> StepId {
    StepId::try_from(s).unwrap()
}

/// A run, the clock, and what the worker is doing.
struct Sim {
    def: Workflow,
    run: Run,
    now: DateTime<Utc>,
    in_flight: BTreeSet<String>,
    outcomes: Vec<StepOutcome>,
    compensations: Vec<CompensationOutcome>,
    env: std::collections::BTreeMap<String, String>,
    /// The run's secrets and personal data, as the executor protects them.
    protection: std::sync::Arc<crate::vault::Protection>,
    /// Every event, in order (as the log records it: protected).
    log: Vec<RunEvent>,
}

impl Sim {
    fn start(yaml: &str, inputs: Value) -> Self {
        Self::from_def(workflow(yaml), inputs)
    }

    fn from_def(def: Workflow, inputs: Value) -> Self {
        Self::under(def, inputs, Rules::CURRENT)
    }

    /// A run recorded under `rules` (the first: as runs started before rules had
    /// versions, every step scheduled before it starts).
    fn under(def: Workflow, inputs: Value, rules: Rules) -> Self {
        let mut run = Run::default();
        let Value::Object(inputs) = inputs else {
            panic!("inputs must be an object")
        };
        let inputs = crate::workflow::inputs::resolve(
            &def.inputs,
            inputs,
            crate::workflow::inputs::Given::Json,
        )
        .unwrap_or_else(|p| panic!("{p:?}"));
        let flow = super::flow::flow(&def, &inputs, None).unwrap_or_else(|e| panic!("{e}"));
        let mut start = start_command(
            &def,
            "1.0.0",
            RunId::from_uuid(Uuid::from_u128(42)),
            inputs,
            None,
            t0(),
        )
        .unwrap();
        if let RunCommand::Start { flow: f, .. } = &mut start {
            *f = flow;
        }
        let mut log = Vec::new();
        for mut e in run.decide(start).unwrap() {
            if let RunEvent::Started { rules: r, .. } = &mut e {
                *r = rules;
            }
            run.apply(e.clone());
            log.push(e);
        }
        Sim {
            def,
            run,
            now: t0(),
            in_flight: BTreeSet::new(),
            outcomes: Vec::new(),
            compensations: Vec::new(),
            env: Default::default(),
            protection: Default::default(),
            log,
        }
    }

    fn at(&mut self, seconds: i64) -> &mut Self {
        self.now = t0() + Duration::seconds(seconds);
        self
    }

    /// One tick: apply its events, mark its performed work in flight.
    fn tick(&mut self) -> Tick {
        let input = TickInput {
            now: self.now,
            outcomes: std::mem::take(&mut self.outcomes),
            compensations: std::mem::take(&mut self.compensations),
            in_flight: self.in_flight.clone(),
            env: self.env.clone(),
            protection: self.protection.clone(),
        };
        let tick = super::tick(&self.def, &self.run, &input).unwrap_or_else(|e| panic!("{e}"));
        for e in &tick.events {
            self.run.apply(e.clone());
            self.log.push(e.clone());
        }
        for effect in &tick.effects {
            if let Effect::Perform { key, .. } | Effect::Compensate { key, .. } = effect {
                self.in_flight.insert(key.clone());
            }
        }
        assert_eq!(
            self.run, tick.state,
            "the tick's state is the fold of its events"
        );
        tick
    }

    /// The worker reports an attempt's outcome.
    fn report(&mut self, step: &str, result: Result<Value, (ErrorClass, &str)>) -> &mut Self {
        let attempt = self.run.step(&sid(step)).map(|s| s.attempt()).unwrap_or(1);
        self.in_flight
            .retain(|k| !k.ends_with(&format!("/{step}/{attempt}")));
        self.outcomes.push(StepOutcome {
            step_id: sid(step),
            attempt,
            result: result
                .map(|output| Done {
                    output: output.into(),
                    ..Done::default()
                })
                .map_err(|(class, message)| Failure {
                    class,
                    message: message.into(),
                }),
        });
        self
    }

    fn succeed(&mut self, step: &str) -> Tick {
        self.report(step, Ok(json!({"step": step})));
        self.tick()
    }

    fn fail(&mut self, step: &str, class: ErrorClass) -> Tick {
        self.report(step, Err((class, "boom")));
        self.tick()
    }

    fn status(&self, step: &str) -> Option<&'static str> {
        self.run.step(&sid(step)).map(|s| s.phase().as_str())
    }

    fn decide(&mut self, command: RunCommand) {
        for e in self.run.decide(command).unwrap() {
            self.run.apply(e.clone());
            self.log.push(e);
        }
    }
}

/// Every scenario's history must replay through the engine to the same decisions
/// (`verify.rs`): the scenarios double as histories for the non-determinism check.
impl Drop for Sim {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let history: Vec<Recorded> = self.log.iter().cloned().map(Recorded::plain).collect();
        let context = ReplayContext {
            env: self.env.clone(),
            protection: self.protection.clone(),
        };
        if let Err(divergence) = verify_history(&self.def, &history, &context) {
            panic!(
                "the scenario's history does not replay: {divergence}\n{:#?}",
                types(&self.log)
            );
        }
    }
}

/// The step ids of the Perform effects of a tick.
fn performed(tick: &Tick) -> Vec<String> {
    tick.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Perform { step_id, .. } => Some(step_id.to_string()),
            _ => None,
        })
        .collect()
}

fn types(events: &[RunEvent]) -> Vec<String> {
    use cqrs_es::DomainEvent;
    events.iter().map(|e| e.event_type()).collect()
}

const THREE: &str = r#"
name: three
version: "1.0.0"
inputs:
  who: {type: string, default: world}
steps:
  - id: a
    tool: echo
    inputs: {message: "hello ${{ inputs.who }}"}
  - id: b
    tool: noop
    inputs: {from_a: "${{ steps.a.outputs.step }}"}
  - id: c
    tool: noop
outputs:
  greeting: "${{ steps.a.outputs }}"
  count: 3
"#;

#[test]
fn steps_run_in_order_each_started_once_its_predecessor_succeeded() {
    let mut sim = Sim::start(THREE, json!({"who": "ada"}));
    let first = sim.tick();
    assert_eq!(types(&first.events), vec!["run.step_started"]);
    assert_eq!(performed(&first), vec!["a"]);
    match &first.effects[0] {
        Effect::Perform {
            work: Work::Builtin { tool, inputs },
            key,
            ..
        } => {
            assert_eq!(tool, "echo");
            assert_eq!(inputs["message"], "hello ada");
            assert!(key.ends_with("/a/1"));
        }
        other => panic!("{other:?}"),
    }
    // Nothing new while a is in flight.
    let idle = sim.tick();
    assert!(
        idle.events.is_empty() && idle.effects.is_empty(),
        "{idle:?}"
    );
    assert_eq!(idle.wake_at, None);

    let second = sim.succeed("a");
    assert_eq!(
        types(&second.events),
        vec!["run.step_succeeded", "run.step_started"]
    );
    match &second.effects[0] {
        Effect::Perform {
            work: Work::Builtin { inputs, .. },
            ..
        } => assert_eq!(inputs["from_a"], "a"),
        other => panic!("{other:?}"),
    }
    sim.succeed("b");
    let last = sim.succeed("c");
    assert_eq!(types(&last.events).last().unwrap(), "run.completed");
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
    match sim.run.outcome() {
        Some(crate::domain::run::RunOutcome::Succeeded { outputs, .. }) => {
            assert_eq!(outputs, &json!({"greeting": {"step": "a"}, "count": 3}));
        }
        other => panic!("{other:?}"),
    }
    assert!(last.is_finished());
    assert_eq!(last.wake_at, None);
}

/// A run started before rules had versions goes on as it began: each step
/// scheduled, then started. Its history replays; the same history under the second
/// rules does not (the start names the rules its steps were decided by).
#[test]
fn a_run_under_the_first_rules_schedules_every_step_before_it_starts() {
    let mut sim = Sim::under(workflow(THREE), json!({"who": "ada"}), Rules::FIRST);
    let first = sim.tick();
    assert_eq!(
        types(&first.events),
        vec!["run.step_scheduled", "run.step_started"]
    );
    let second = sim.succeed("a");
    assert_eq!(
        types(&second.events),
        vec![
            "run.step_succeeded",
            "run.step_scheduled",
            "run.step_started"
        ]
    );
    sim.succeed("b");
    sim.succeed("c");
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
    assert_eq!(sim.log.len(), 1 + 3 * 3 + 1);
    let mut relabelled: Vec<Recorded> = sim.log.iter().cloned().map(Recorded::plain).collect();
    if let RunEvent::Started { rules, .. } = &mut relabelled[0].logged {
        *rules = Rules::CURRENT;
    }
    relabelled[0].opened = relabelled[0].logged.clone();
    let divergence = verify_history(&sim.def, &relabelled, &ReplayContext::default()).unwrap_err();
    assert_eq!(divergence.version, 2, "{divergence}");
    assert_eq!(divergence.step, Some(sid("a")));
}

/// Under the current rules a run of performed steps is two events a step (a step
/// held back by a spent budget is still scheduled: see the budget escalation's
/// scenario), each attempt queued when it started.
#[test]
fn a_run_under_the_current_rules_records_two_events_a_step() {
    let mut sim = Sim::start(THREE, json!({"who": "ada"}));
    for step in ["a", "b", "c"] {
        sim.tick();
        sim.succeed(step);
    }
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
    assert_eq!(sim.log.len(), 1 + 3 * 2 + 1, "{:?}", types(&sim.log));
    for step in ["a", "b", "c"] {
        let attempts = sim.run.attempts(&sid(step));
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].scheduled_at, attempts[0].started_at.unwrap());
    }
}

#[test]
fn a_false_guard_skips_the_step_and_later_steps_see_it() {
    let mut sim = Sim::start(
        r#"
name: guard
version: "1.0.0"
inputs:
  deploy: {type: boolean, default: false}
steps:
  - id: ship
    tool: noop
    if: "inputs.deploy"
  - id: report
    tool: echo
    inputs: {message: "ship was ${{ steps.ship.status }}"}
"#,
        json!({}),
    );
    let tick = sim.tick();
    assert_eq!(sim.status("ship"), Some("skipped"));
    match &tick.effects[..] {
        [
            Effect::Perform {
                step_id,
                work: Work::Builtin { inputs, .. },
                ..
            },
        ] => {
            assert_eq!(step_id.as_str(), "report");
            assert_eq!(inputs["message"], "ship was skipped");
        }
        other => panic!("{other:?}"),
    }
}

const RETRY: &str = r#"
name: retry
version: "1.0.0"
steps:
  - id: call
    tool: noop
    retry: {max_attempts: 3, backoff: exponential, base_seconds: 2}
  - id: after
    tool: noop
"#;

#[test]
fn retries_wait_for_their_back_off_in_the_log_not_in_a_worker() {
    let mut sim = Sim::start(RETRY, json!({}));
    sim.tick();
    let failed = sim.fail("call", ErrorClass::Network);
    assert_eq!(
        types(&failed.events),
        vec![
            "run.step_failed",
            "run.recovery_applied",
            "run.step_retried"
        ]
    );
    assert_eq!(failed.wake_at, Some(t0() + Duration::seconds(2)));
    assert!(
        failed.effects.is_empty(),
        "nothing runs before the back-off"
    );

    let early = sim.at(1).tick();
    assert!(early.events.is_empty() && early.effects.is_empty());
    assert_eq!(early.wake_at, Some(t0() + Duration::seconds(2)));

    let due = sim.at(2).tick();
    assert_eq!(types(&due.events), vec!["run.step_started"]);
    assert_eq!(performed(&due), vec!["call"]);
    match &due.effects[0] {
        Effect::Perform { attempt, key, .. } => {
            assert_eq!(*attempt, 2);
            assert!(key.ends_with("/call/2"), "a new attempt, a new key");
        }
        other => panic!("{other:?}"),
    }
    // Second failure: 4 s (exponential); third: out of attempts, the run fails.
    let again = sim.at(3).fail("call", ErrorClass::Network);
    assert_eq!(again.wake_at, Some(t0() + Duration::seconds(7)));
    sim.at(7).tick();
    let last = sim.at(8).fail("call", ErrorClass::Network);
    assert!(
        types(&last.events).contains(&"run.failed".to_string()),
        "{:?}",
        types(&last.events)
    );
    assert_eq!(sim.run.status(), Some(RunStatus::Failed));
    assert_eq!(sim.status("after"), None, "later steps never ran");
    assert_eq!(sim.run.attempts(&sid("call")).len(), 3);
}

#[test]
fn on_error_decides_what_a_failure_means_for_the_run() {
    for (mode, run_status, step_status, after_runs) in [
        ("abort", RunStatus::Failed, "failed", false),
        ("skip", RunStatus::Succeeded, "skipped", true),
        ("continue", RunStatus::Succeeded, "failed", true),
        ("retry", RunStatus::Failed, "failed", false),
    ] {
        let yaml = format!(
            r#"
name: modes
version: "1.0.0"
steps:
  - id: flaky
    tool: noop
    on_error: {mode}
  - id: after
    tool: echo
    inputs: {{message: "flaky ${{{{ steps.flaky.status }}}}"}}
"#
        );
        let mut sim = Sim::start(&yaml, json!({}));
        sim.tick();
        let mut tick = sim.fail("flaky", ErrorClass::Unknown);
        if mode == "retry" {
            // Three attempts with exponential back-off from 1 s, then abort.
            sim.at(1).tick();
            sim.at(1).fail("flaky", ErrorClass::Unknown);
            sim.at(3).tick();
            tick = sim.at(3).fail("flaky", ErrorClass::Unknown);
            assert_eq!(sim.run.attempts(&sid("flaky")).len(), 3);
        }
        if after_runs {
            match &tick.effects[..] {
                [
                    Effect::Perform {
                        step_id,
                        work: Work::Builtin { inputs, .. },
                        ..
                    },
                ] => {
                    assert_eq!(step_id.as_str(), "after", "{mode}");
                    assert_eq!(inputs["message"], format!("flaky {step_status}"), "{mode}");
                }
                other => panic!("{mode}: {other:?}"),
            }
            sim.succeed("after");
        }
        assert_eq!(sim.run.status(), Some(run_status), "{mode}");
        assert_eq!(sim.status("flaky"), Some(step_status), "{mode}");
    }
}

const GATED: &str = r#"
name: gated
version: "1.0.0"
steps:
  - id: approve
    type: gate
    message: "Ship ${{ inputs.what }}?"
    approvers: [ops]
    timeout_seconds: 60
    on_timeout: fail
  - id: ship
    tool: noop
inputs:
  what: {type: string, default: v2}
"#;

fn open_gate(sim: &Sim) -> crate::domain::run::Gate {
    sim.run.open_gates().next().cloned().expect("an open gate")
}

#[test]
fn a_gate_waits_for_a_person_and_an_approval_moves_the_run_on() {
    let mut sim = Sim::start(GATED, json!({}));
    let tick = sim.tick();
    assert_eq!(
        types(&tick.events),
        vec!["run.step_started", "run.gate_opened"]
    );
    assert_eq!(sim.run.status(), Some(RunStatus::Waiting));
    let gate = open_gate(&sim);
    assert_eq!(gate.message, "Ship v2?");
    assert_eq!(gate.expires_at, Some(t0() + Duration::seconds(60)));
    assert_eq!(
        tick.wake_at,
        Some(t0() + Duration::seconds(60)),
        "woken at expiry"
    );

    sim.at(10).decide(RunCommand::ApproveGate {
        gate_id: gate.gate_id,
        by: "ops".into(),
        comment: Some("go".into()),
        at: t0() + Duration::seconds(10),
    });
    let moved = sim.tick();
    assert_eq!(performed(&moved), vec!["ship"]);
    assert_eq!(
        sim.run.succeeded_output(&sid("approve")).unwrap()["by"],
        "ops"
    );
}

#[test]
fn a_rejected_or_expired_gate_fails_the_run() {
    let mut sim = Sim::start(GATED, json!({}));
    sim.tick();
    let gate = open_gate(&sim);
    sim.decide(RunCommand::RejectGate {
        gate_id: gate.gate_id,
        by: "ops".into(),
        comment: "not today".into(),
        at: t0() + Duration::seconds(5),
    });
    sim.at(5).tick();
    assert_eq!(sim.run.status(), Some(RunStatus::Failed));
    match sim.run.outcome() {
        Some(crate::domain::run::RunOutcome::Failed {
            reason,
            error_class,
            ..
        }) => {
            assert!(reason.contains("rejected by ops: not today"), "{reason}");
            assert_eq!(*error_class, Some(ErrorClass::Validation));
        }
        other => panic!("{other:?}"),
    }

    let mut late = Sim::start(GATED, json!({}));
    late.tick();
    let tick = late.at(59).tick();
    assert!(tick.events.is_empty());
    late.at(60).tick();
    assert!(matches!(
        late.run.gates()[0].decision,
        Some(GateDecision::Expired { .. })
    ));
    assert_eq!(late.run.status(), Some(RunStatus::Failed));
}

const BRANCHING: &str = r#"
name: branching
version: "1.0.0"
inputs:
  big: {type: boolean, required: true}
steps:
  - id: choose
    type: conditional
    condition: "inputs.big"
    if_true:
      - {id: big_one, tool: noop}
      - {id: big_two, tool: noop}
    if_false:
      - {id: small, tool: noop}
  - id: after
    tool: echo
    inputs: {message: "${{ steps.small.status }}"}
"#;

#[test]
fn a_conditional_records_its_branch_and_skips_the_other() {
    let mut sim = Sim::start(BRANCHING, json!({"big": true}));
    let tick = sim.tick();
    assert_eq!(
        sim.run.succeeded_output(&sid("choose")).unwrap()["branch"],
        "if_true"
    );
    assert_eq!(sim.status("small"), Some("skipped"));
    assert_eq!(performed(&tick), vec!["big_one"]);
    sim.succeed("big_one");
    let tick = sim.succeed("big_two");
    match &tick.effects[..] {
        [
            Effect::Perform {
                step_id,
                work: Work::Builtin { inputs, .. },
                ..
            },
        ] => {
            assert_eq!(step_id.as_str(), "after");
            assert_eq!(inputs["message"], "skipped");
        }
        other => panic!("{other:?}"),
    }

    let mut small = Sim::start(BRANCHING, json!({"big": false}));
    let tick = small.tick();
    assert_eq!(performed(&tick), vec!["small"]);
    assert_eq!(small.status("big_one"), Some("skipped"));
    assert_eq!(small.status("big_two"), Some("skipped"));
}

const PARALLEL: &str = r#"
name: fan
version: "1.0.0"
steps:
  - id: fan
    type: parallel
    wait_for: all
    branches:
      - name: left
        steps: [{id: l1, tool: noop}, {id: l2, tool: noop}]
      - name: right
        steps: [{id: r1, tool: noop}]
  - id: join
    tool: noop
"#;

#[test]
fn parallel_branches_start_together_and_join() {
    let mut sim = Sim::start(PARALLEL, json!({}));
    let tick = sim.tick();
    assert_eq!(performed(&tick), vec!["l1", "r1"]);
    assert_eq!(performed(&sim.succeed("r1")), Vec::<String>::new());
    assert_eq!(performed(&sim.succeed("l1")), vec!["l2"]);
    let joined = sim.succeed("l2");
    assert_eq!(performed(&joined), vec!["join"]);
    assert_eq!(
        sim.run.succeeded_output(&sid("fan")).unwrap(),
        &json!({"branches": {"left": "succeeded", "right": "succeeded"}})
    );
}

#[test]
fn a_failed_branch_fails_the_parallel_step() {
    let mut sim = Sim::start(PARALLEL, json!({}));
    sim.tick();
    sim.fail("r1", ErrorClass::Network);
    assert_eq!(
        sim.status("fan"),
        Some("running"),
        "waits for the other branch"
    );
    sim.succeed("l1");
    sim.succeed("l2");
    assert_eq!(sim.status("fan"), Some("failed"));
    assert_eq!(sim.run.status(), Some(RunStatus::Failed));
}

#[test]
fn max_concurrency_and_wait_for_any() {
    let yaml = r#"
name: race
version: "1.0.0"
steps:
  - id: race
    type: parallel
    wait_for: any
    max_concurrency: 1
    branches:
      - name: a
        steps: [{id: a1, tool: noop}]
      - name: b
        steps: [{id: b1, tool: noop}]
  - id: next
    tool: noop
"#;
    let mut sim = Sim::start(yaml, json!({}));
    assert_eq!(performed(&sim.tick()), vec!["a1"], "one branch at a time");
    let tick = sim.succeed("a1");
    assert_eq!(
        sim.run.succeeded_output(&sid("race")).unwrap()["winner"],
        "a"
    );
    assert_eq!(performed(&tick), vec!["next"]);
    assert_eq!(sim.status("b1"), None, "the loser never started");
}

const SAGA: &str = r#"
name: saga
version: "1.0.0"
steps:
  - id: reserve
    tool: echo
    inputs: {message: reserved}
    compensate:
      id: release
      tool: echo
      inputs: {message: "release ${{ steps.reserve.outputs.step }}"}
  - id: charge
    tool: noop
    compensate: {id: refund, tool: noop}
  - id: ship
    tool: noop
on_failure:
  - id: alert
    type: notify
    message: "saga failed at ${{ steps.ship.status }}"
"#;

#[test]
fn a_failed_run_runs_its_hooks_then_compensates_in_reverse_order() {
    let mut sim = Sim::start(SAGA, json!({}));
    sim.tick();
    sim.succeed("reserve");
    sim.succeed("charge");
    let failed = sim.fail("ship", ErrorClass::Dependency);
    // The on_failure hook runs first, as a step.
    match &failed.effects[..] {
        [
            Effect::Perform {
                step_id,
                work: Work::Notify(n),
                ..
            },
        ] => {
            assert_eq!(step_id.as_str(), "alert");
            assert_eq!(n.message, "saga failed at failed");
        }
        other => panic!("{other:?}"),
    }
    let compensating = sim.succeed("alert");
    assert_eq!(sim.run.status(), Some(RunStatus::Compensating));
    assert_eq!(
        sim.run.compensation().unwrap().steps,
        vec![sid("charge"), sid("reserve")],
        "most recent first"
    );
    match &compensating.effects[..] {
        [Effect::Compensate { step_id, key, .. }] => {
            assert_eq!(step_id.as_str(), "charge");
            assert!(key.ends_with("/charge/compensate"));
        }
        other => panic!("{other:?}"),
    }
    sim.compensations.push(CompensationOutcome {
        step_id: sid("charge"),
        error: None,
    });
    let next = sim.tick();
    match &next.effects[..] {
        [
            Effect::Compensate {
                step_id,
                work: Work::Builtin { inputs, .. },
                ..
            },
        ] => {
            assert_eq!(step_id.as_str(), "reserve");
            assert_eq!(inputs["message"], "release reserve");
        }
        other => panic!("{other:?}"),
    }
    sim.compensations.push(CompensationOutcome {
        step_id: sid("reserve"),
        error: Some("gone".into()),
    });
    sim.tick();
    assert_eq!(sim.run.status(), Some(RunStatus::Failed));
    match sim.run.outcome() {
        Some(crate::domain::run::RunOutcome::Failed {
            reason,
            error_class,
            ..
        }) => {
            assert_eq!(reason, "step `ship` failed: boom");
            assert_eq!(*error_class, Some(ErrorClass::Dependency));
        }
        other => panic!("{other:?}"),
    }
    let ran = &sim.run.compensation().unwrap().ran;
    assert!(ran[0].succeeded && !ran[1].succeeded);
}

#[test]
fn on_success_hooks_run_before_the_run_completes() {
    let yaml = r#"
name: hooked
version: "1.0.0"
steps:
  - {id: work, tool: noop}
on_success:
  - {id: tell, type: notify, message: done}
"#;
    let mut sim = Sim::start(yaml, json!({}));
    sim.tick();
    let tick = sim.succeed("work");
    assert_eq!(performed(&tick), vec!["tell"]);
    assert_eq!(sim.run.status(), Some(RunStatus::Running));
    // A failing hook does not fail the run.
    sim.fail("tell", ErrorClass::Network);
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
}

#[test]
fn a_running_attempt_whose_worker_died_is_started_again_with_the_same_key() {
    let mut sim = Sim::start(THREE, json!({}));
    let first = sim.tick();
    let Effect::Perform { key, .. } = &first.effects[0] else {
        panic!()
    };
    let key = key.clone();
    // A new worker picks the run up: nothing is in flight there.
    sim.in_flight.clear();
    let again = sim.at(30).tick();
    assert_eq!(types(&again.events), vec!["run.step_started"]);
    match &again.effects[..] {
        [
            Effect::Perform {
                key: k, attempt, ..
            },
        ] => {
            assert_eq!(k, &key, "same attempt, same idempotency key");
            assert_eq!(*attempt, 1);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        sim.run.attempts(&sid("a"))[0].restarted_at,
        vec![t0() + Duration::seconds(30)]
    );
    // Its outcome is recorded once.
    sim.succeed("a");
    let succeeded = sim
        .log
        .iter()
        .filter(|e| matches!(e, RunEvent::StepSucceeded { step_id, .. } if step_id.as_str() == "a"))
        .count();
    assert_eq!(succeeded, 1);
}

#[test]
fn step_and_run_timeouts() {
    let yaml = r#"
name: slow
version: "1.0.0"
timeout_seconds: 100
steps:
  - {id: slow, tool: sleep, inputs: {seconds: 5}, timeout_seconds: 10, on_error: continue}
  - {id: slower, tool: noop}
"#;
    let mut sim = Sim::start(yaml, json!({}));
    let tick = sim.tick();
    assert_eq!(tick.wake_at, Some(t0() + Duration::seconds(10)));
    match &tick.effects[0] {
        Effect::Perform { timeout_ms, .. } => assert_eq!(*timeout_ms, Some(10_000)),
        other => panic!("{other:?}"),
    }
    let timed_out = sim.at(10).tick();
    assert_eq!(types(&timed_out.events)[0], "run.step_failed");
    assert_eq!(sim.status("slow"), Some("failed"));
    assert_eq!(performed(&timed_out), vec!["slower"], "on_error: continue");
    // A late outcome of the timed-out attempt is ignored.
    sim.report("slow", Ok(json!({})));
    // The whole run times out at 100 s.
    let deadline = sim.at(100).tick();
    assert!(types(&deadline.events).contains(&"run.failed".to_string()));
    match sim.run.outcome() {
        Some(crate::domain::run::RunOutcome::Failed { error_class, .. }) => {
            assert_eq!(*error_class, Some(ErrorClass::Timeout))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_step_cost_over_the_budget_stops_the_run() {
    let yaml = r#"
name: costly
version: "1.0.0"
cost_budget_usd: 1.0
steps:
  - {id: think, tool: noop}
  - {id: more, tool: noop}
"#;
    let mut sim = Sim::start(yaml, json!({}));
    sim.tick();
    sim.outcomes.push(StepOutcome {
        step_id: sid("think"),
        attempt: 1,
        result: Ok(Done {
            output: json!({}).into(),
            cost_usd: Some(1.5),
            tokens: Some(900),
        }),
    });
    let tick = sim.tick();
    assert!(types(&tick.events).contains(&"run.budget_exceeded".to_string()));
    assert!(performed(&tick).is_empty(), "nothing more is started");
    assert_eq!(sim.run.status(), Some(RunStatus::Failed));
    match sim.run.outcome() {
        Some(crate::domain::run::RunOutcome::Failed { error_class, .. }) => {
            assert_eq!(*error_class, Some(ErrorClass::Budget))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn handlers_escalate_fall_back_and_increase_timeouts() {
    let yaml = r#"
name: healing
version: "1.0.0"
error_handlers:
  - {class: authentication, action: escalate, approvers: [ops]}
steps:
  - id: fetch
    tool: echo
    inputs: {message: hi}
    timeout_seconds: 10
    error_handlers:
      - {class: network, action: fallback, fallback_tool: noop}
      - {class: timeout, action: increase_timeout, timeout_factor: 3}
"#;
    let mut sim = Sim::start(yaml, json!({}));
    sim.tick();
    // network -> fallback to noop, at once.
    let fallback = sim.fail("fetch", ErrorClass::Network);
    match &fallback.effects[..] {
        [
            Effect::Perform {
                attempt: 2,
                work: Work::Builtin { tool, .. },
                ..
            },
        ] => assert_eq!(tool, "noop"),
        other => panic!("{other:?}"),
    }
    // timeout -> a longer timeout.
    let longer = sim.fail("fetch", ErrorClass::Timeout);
    match &longer.effects[..] {
        [
            Effect::Perform {
                attempt: 3,
                timeout_ms,
                ..
            },
        ] => assert_eq!(*timeout_ms, Some(30_000)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        sim.run.attempts(&sid("fetch"))[1].recovery,
        Some(RecoveryAction::IncreaseTimeout {
            new_timeout_seconds: 30
        })
    );
    // authentication -> (workflow handler) a person is asked.
    let asked = sim.fail("fetch", ErrorClass::Authentication);
    assert!(asked.effects.is_empty());
    let gate = open_gate(&sim);
    assert_eq!(gate.approvers, vec!["ops".to_string()]);
    assert!(
        gate.message.contains("step `fetch` failed"),
        "{}",
        gate.message
    );
    sim.decide(RunCommand::ApproveGate {
        gate_id: gate.gate_id,
        by: "ops".into(),
        comment: None,
        at: t0(),
    });
    let retried = sim.tick();
    assert_eq!(performed(&retried), vec!["fetch"]);
    assert!(matches!(
        &retried.effects[0],
        Effect::Perform { attempt: 4, .. }
    ));
}

#[test]
fn agent_and_workflow_steps_wait_for_what_they_started() {
    let dir = tempfile::tempdir().unwrap();
    let child = dir.path().join("child.awl.yaml");
    std::fs::write(
        &child,
        "name: child\nversion: \"1.0.0\"\nsteps: [{id: x, tool: noop}]\n",
    )
    .unwrap();
    let yaml = r#"
name: delegate
version: "1.0.0"
steps:
  - id: code
    type: agent
    prompt: "implement ${{ inputs.feature }}"
    capabilities: [rust]
    workspace: {repository: org/app, branch: main}
  - id: sub
    type: workflow
    workflow: ./child.awl.yaml
    inputs: {from: "${{ steps.code.outputs.pr }}"}
inputs:
  feature: {type: string, default: health}
"#;
    let def = match check(&dir.path().join("parent.awl.yaml"), yaml) {
        Ok(c) => c.workflow,
        Err(d) => panic!("{d}"),
    };
    let mut sim = Sim::from_def(def, json!({}));
    let tick = sim.tick();
    match &tick.effects[..] {
        [
            Effect::QueueTask {
                task_id: id,
                prompt,
                capabilities,
                repository,
                branch,
                ..
            },
        ] => {
            assert_eq!(prompt, "implement health");
            assert_eq!(capabilities, &vec!["rust".to_string()]);
            assert_eq!(repository.as_deref(), Some("org/app"));
            assert_eq!(branch.as_deref(), Some("main"));
            assert_eq!(
                *id,
                task_id(RunId::from_uuid(Uuid::from_u128(42)), &sid("code"), 1)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(sim.tick().effects.is_empty(), "the task is queued once");
    sim.report("code", Ok(json!({"pr": 17})));
    let tick = sim.tick();
    match &tick.effects[..] {
        [
            Effect::StartChild {
                workflow,
                inputs,
                run_id,
                ..
            },
        ] => {
            assert_eq!(workflow, "./child.awl.yaml");
            assert_eq!(
                inputs["from"],
                json!(17),
                "a lone expression keeps its type"
            );
            assert_eq!(
                *run_id,
                child_run_id(RunId::from_uuid(Uuid::from_u128(42)), &sid("sub"), 1)
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_child_run_that_ends_wakes_its_parent() {
    let def = workflow("name: child\nversion: \"1.0.0\"\nsteps: [{id: x, tool: noop}]\n");
    let parent = crate::domain::run::ParentRef {
        run_id: RunId::from_uuid(Uuid::from_u128(1)),
        step_id: sid("sub"),
    };
    let mut run = Run::default();
    let start = start_command(
        &def,
        "1.0.0",
        RunId::from_uuid(Uuid::from_u128(2)),
        Map::new(),
        Some(parent.clone()),
        t0(),
    )
    .unwrap();
    for e in run.decide(start).unwrap() {
        run.apply(e);
    }
    let input = TickInput {
        now: t0(),
        ..TickInput::default()
    };
    let first = tick(&def, &run, &input).unwrap();
    let mut run = first.state.clone();
    let input = TickInput {
        now: t0(),
        outcomes: vec![StepOutcome {
            step_id: sid("x"),
            attempt: 1,
            result: Ok(Done::default()),
        }],
        ..TickInput::default()
    };
    let done = tick(&def, &run, &input).unwrap();
    assert!(done.effects.contains(&Effect::WakeParent(parent)));
    run = done.state;
    assert!(run.is_terminal());
}

#[test]
fn replaying_a_finished_run_decides_nothing_new() {
    let mut sim = Sim::start(SAGA, json!({}));
    sim.tick();
    sim.succeed("reserve");
    sim.succeed("charge");
    sim.succeed("ship");
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
    // Fold the log again from scratch: same state, and a tick adds nothing.
    let mut replayed = Run::default();
    for e in &sim.log {
        replayed.apply(e.clone());
    }
    assert_eq!(replayed, sim.run);
    let tick = super::tick(
        &sim.def,
        &replayed,
        &TickInput {
            now: t0() + Duration::days(1),
            ..Default::default()
        },
    )
    .unwrap();
    assert!(tick.events.is_empty() && tick.effects.is_empty());
    // The succeeded steps' outputs are the recorded ones.
    assert!(matches!(
        replayed.step(&sid("reserve")),
        Some(StepState::Succeeded { .. })
    ));
}

#[test]
fn over_budget_a_budget_escalation_asks_a_person() {
    let yaml = r#"
name: costly
version: "1.0.0"
cost_budget_usd: 1.0
error_handlers:
  - {class: budget, action: escalate, approvers: [finance]}
steps:
  - {id: think, tool: noop}
  - {id: more, tool: noop}
"#;
    let over = |sim: &mut Sim| {
        sim.tick();
        sim.outcomes.push(StepOutcome {
            step_id: sid("think"),
            attempt: 1,
            result: Ok(Done {
                output: json!({}).into(),
                cost_usd: Some(1.5),
                tokens: None,
            }),
        });
        sim.tick()
    };
    let mut sim = Sim::start(yaml, json!({}));
    let tick = over(&mut sim);
    assert!(performed(&tick).is_empty(), "nothing starts over budget");
    assert_eq!(
        sim.status("more"),
        Some("scheduled"),
        "held by the budget, a step is scheduled (and waits) under any rules"
    );
    assert_eq!(sim.run.status(), Some(RunStatus::Waiting));
    let gate = open_gate(&sim);
    assert_eq!(gate.approvers, vec!["finance".to_string()]);
    assert!(gate.message.contains("over its budget"), "{}", gate.message);
    sim.decide(RunCommand::ApproveGate {
        gate_id: gate.gate_id,
        by: "finance".into(),
        comment: None,
        at: t0(),
    });
    assert_eq!(
        performed(&sim.tick()),
        vec!["more"],
        "approved: the run goes on"
    );
    sim.succeed("more");
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));

    let mut refused = Sim::start(yaml, json!({}));
    over(&mut refused);
    let gate = open_gate(&refused);
    refused.decide(RunCommand::RejectGate {
        gate_id: gate.gate_id,
        by: "finance".into(),
        comment: "no".into(),
        at: t0(),
    });
    refused.tick();
    assert_eq!(refused.run.status(), Some(RunStatus::Failed));
    match refused.run.outcome() {
        Some(crate::domain::run::RunOutcome::Failed { error_class, .. }) => {
            assert_eq!(*error_class, Some(ErrorClass::Budget))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_first_failure_is_the_reason_a_run_failed() {
    let mut sim = Sim::start(PARALLEL, json!({}));
    sim.tick();
    // r1 fails first; l1 (which sorts first by name) fails later.
    sim.at(1).fail("r1", ErrorClass::Network);
    sim.at(5).fail("l1", ErrorClass::Validation);
    assert_eq!(sim.run.status(), Some(RunStatus::Failed));
    match sim.run.outcome() {
        Some(crate::domain::run::RunOutcome::Failed {
            reason,
            error_class,
            ..
        }) => {
            assert_eq!(reason, "step `r1` failed: boom");
            assert_eq!(*error_class, Some(ErrorClass::Network));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_refresh_auth_retry_carries_its_hook() {
    let yaml = r#"
name: hooked
version: "1.0.0"
tools:
  - name: login
    type: shell
    command: [sh, -c, 'echo refreshed']
steps:
  - id: call
    tool: fail
    inputs: {class: authentication, message: "token expired"}
    error_handlers:
      - {class: authentication, action: refresh_auth, hook: login, max_attempts: 2}
"#;
    let mut sim = Sim::start(yaml, json!({}));
    sim.tick();
    let retry = sim.fail("call", ErrorClass::Authentication);
    match &retry.effects[..] {
        [
            Effect::Perform {
                attempt: 2,
                before: Some(Work::Shell(hook)),
                work: Work::Builtin { tool, .. },
                ..
            },
        ] => {
            assert_eq!(tool, "fail");
            assert_eq!(
                hook.command.as_deref(),
                Some(&["sh".to_string(), "-c".into(), "echo refreshed".into()][..])
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_losing_branch_that_fails_after_the_race_does_not_fail_the_run() {
    let yaml = r#"
name: race
version: "1.0.0"
steps:
  - id: race
    type: parallel
    wait_for: any
    branches:
      - name: a
        steps: [{id: a1, tool: noop}]
      - name: b
        steps: [{id: b1, tool: noop}]
  - id: next
    tool: noop
"#;
    let mut sim = Sim::start(yaml, json!({}));
    assert_eq!(performed(&sim.tick()), vec!["a1", "b1"]);
    assert_eq!(performed(&sim.succeed("a1")), vec!["next"]);
    sim.succeed("next");
    assert_eq!(sim.run.status(), Some(RunStatus::Running), "b1 still runs");
    // The loser fails after the race was decided and the rest of the run is done.
    sim.fail("b1", ErrorClass::Network);
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
    assert_eq!(sim.status("b1"), Some("failed"));
    assert_eq!(
        sim.run.attempts(&sid("b1"))[0].recovery,
        Some(RecoveryAction::Continue),
        "its failure is recorded and set aside"
    );
}

#[test]
fn a_losing_branch_that_failed_before_the_winner_does_not_fail_the_run() {
    let yaml = r#"
name: race
version: "1.0.0"
steps:
  - id: race
    type: parallel
    wait_for: any
    branches:
      - name: a
        steps: [{id: a1, tool: noop}]
      - name: b
        steps: [{id: b1, tool: noop}]
"#;
    let mut sim = Sim::start(yaml, json!({}));
    sim.tick();
    sim.fail("b1", ErrorClass::Network);
    assert_eq!(
        sim.run.status(),
        Some(RunStatus::Running),
        "a may still win"
    );
    sim.succeed("a1");
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
    assert_eq!(sim.status("b1"), Some("failed"));
}

#[test]
fn expressions_that_use_steps_as_a_whole_see_every_step() {
    let yaml = r#"
name: whole
version: "1.0.0"
inputs:
  which: {type: string, default: a}
steps:
  - {id: a, tool: echo, inputs: {message: from a}}
  - id: b
    tool: echo
    if: "size(steps) == 2"
    inputs: {message: "${{ steps[inputs.which].outputs.message }}"}
"#;
    let mut sim = Sim::start(yaml, json!({}));
    sim.tick();
    sim.report("a", Ok(json!({"message": "from a"})));
    let tick = sim.tick();
    match &tick.effects[..] {
        [
            Effect::Perform {
                step_id,
                work: Work::Builtin { inputs, .. },
                ..
            },
        ] => {
            assert_eq!(step_id.as_str(), "b", "the guard saw both steps");
            assert_eq!(inputs["message"], "from a");
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- secrets and personal data

const PROTECTED: &str = r#"
name: protected
version: "1.0.0"
subject: "customer:${{ inputs.customer }}"
inputs:
  customer: { type: string, required: true }
  token: { type: string, required: true, secret: true }
  email: { type: string, required: true, personal: true }
steps:
  - id: call
    type: shell
    command: ["call", "${{ inputs.token }}", "${{ inputs.email }}"]
outputs:
  to: "mail ${{ inputs.email }}"
"#;

#[test]
fn secrets_are_masked_in_state_and_log_and_personal_data_sealed_in_the_log_only() {
    use crate::vault::{Keys, Reveal, SubjectKey, reveal};
    let def = workflow(PROTECTED);
    let run_id = RunId::from_uuid(Uuid::from_u128(42)).to_string();
    let mut inputs = Map::new();
    inputs.insert("customer".into(), json!("42"));
    inputs.insert("token".into(), json!("tok-abcdef123"));
    inputs.insert("email".into(), json!("a@example.com"));
    let ids = protect::start_keys(&def, &run_id, &inputs).unwrap();
    assert_eq!(
        ids.len(),
        2,
        "a key for the run's secrets and one for its subject"
    );
    let mut keys = Keys::new();
    for (i, id) in ids.iter().enumerate() {
        keys.insert(
            id.clone(),
            SubjectKey::from_bytes(&[i as u8 + 1; 32]).unwrap(),
        );
    }
    let mut sealed = inputs.clone();
    protect::seal_inputs(&def, &run_id, &mut sealed, &keys).unwrap();
    assert_eq!(sealed["customer"], json!("42"), "a plain input stays plain");
    assert!(
        !Value::Object(sealed.clone())
            .to_string()
            .contains("tok-abcdef123")
    );
    assert!(
        !Value::Object(sealed.clone())
            .to_string()
            .contains("a@example.com")
    );

    // The executor opens the start event, then ticks with the run's protection.
    let mut sim = Sim::from_def(def.clone(), Value::Object(inputs));
    let protection = std::sync::Arc::new(protect::protection(
        &def,
        &sim.run,
        &keys,
        &crate::vault::Mask::default(),
        None,
    ));
    sim.protection = protection.clone();
    let first = sim.tick();
    let started = serde_json::to_string(&first.events).unwrap();
    assert!(started.contains(r#""tool":"shell""#), "{started}");
    assert!(
        !started.contains("tok-abcdef123") && !started.contains("a@example.com"),
        "the step's recorded call is protected like its output: {started}"
    );
    let Some(Effect::Perform {
        work: Work::Shell(step),
        ..
    }) = first.effects.first()
    else {
        panic!("the step runs: {:?}", first.effects)
    };
    assert_eq!(
        step.command.as_deref().unwrap(),
        ["call", "tok-abcdef123", "a@example.com"],
        "the work itself gets the values"
    );
    sim.report(
        "call",
        Ok(json!({"stdout": "sent tok-abcdef123 to a@example.com", "exit_code": 0})),
    );
    let input = TickInput {
        now: sim.now,
        outcomes: std::mem::take(&mut sim.outcomes),
        in_flight: sim.in_flight.clone(),
        protection: protection.clone(),
        ..TickInput::default()
    };
    let tick = super::tick(&sim.def, &sim.run, &input).unwrap();
    let logged = serde_json::to_string(&tick.events).unwrap();
    assert!(!logged.contains("tok-abcdef123"), "{logged}");
    assert!(!logged.contains("a@example.com"), "{logged}");
    let output = tick.state.succeeded_output(&sid("call")).unwrap();
    assert_eq!(
        output["stdout"],
        json!("sent [redacted] to a@example.com"),
        "the state masks the secret and keeps personal data"
    );
    assert!(
        serde_json::to_string(tick.state.outcome().unwrap())
            .unwrap()
            .contains("mail a@example.com"),
        "the run's outputs keep personal data in the state"
    );

    // Replaying the recorded events, opened, gives the same state.
    let mut replayed = sim.run.clone();
    for event in &tick.events {
        let mut value = serde_json::to_value(event).unwrap();
        reveal(&mut value, &keys, Reveal::Plain);
        replayed.apply(serde_json::from_value(value).unwrap());
    }
    assert_eq!(
        serde_json::to_value(&replayed).unwrap(),
        serde_json::to_value(&tick.state).unwrap()
    );
    // And the same decision sealed twice is the same text.
    let again = super::tick(&sim.def, &sim.run, &input).unwrap();
    assert_eq!(serde_json::to_string(&again.events).unwrap(), logged);

    // So the history, sealed in the log and opened for the fold, replays to the same
    // decisions with the run's keys, and not without them.
    let mut recorded: Vec<Recorded> = sim.log.iter().cloned().map(Recorded::plain).collect();
    for event in &tick.events {
        let mut value = serde_json::to_value(event).unwrap();
        reveal(&mut value, &keys, Reveal::Plain);
        recorded.push(Recorded {
            logged: event.clone(),
            opened: serde_json::from_value(value).unwrap(),
        });
    }
    let with_keys = ReplayContext {
        protection: protection.clone(),
        ..ReplayContext::default()
    };
    verify_history(&sim.def, &recorded, &with_keys).unwrap();
    let divergence = verify_history(&sim.def, &recorded, &ReplayContext::default()).unwrap_err();
    assert_eq!(divergence.step, Some(sid("call")), "{divergence}");
}

// ---------------------------------------------------------------- replay verification

/// A finished scenario's history, for the verifier.
fn history(sim: &Sim) -> Vec<Recorded> {
    sim.log.iter().cloned().map(Recorded::plain).collect()
}

#[test]
fn a_history_replays_clean_and_a_changed_back_off_is_named_at_its_step() {
    let mut sim = Sim::start(RETRY, json!({}));
    sim.tick();
    sim.fail("call", ErrorClass::Network);
    sim.at(2).tick();
    sim.succeed("call");
    sim.succeed("after");
    assert!(sim.run.is_terminal());
    let recorded = history(&sim);
    let verified = verify_history(&sim.def, &recorded, &ReplayContext::default()).unwrap();
    assert_eq!(verified.outside, 1, "only the start came from outside");
    assert_eq!(verified.decisions, recorded.len() - 1);

    // The same history under a definition whose back-off doubled.
    let changed = workflow(&RETRY.replace("base_seconds: 2", "base_seconds: 4"));
    let divergence = verify_history(&changed, &recorded, &ReplayContext::default()).unwrap_err();
    assert_eq!(divergence.step, Some(sid("call")));
    assert_eq!(
        types(std::slice::from_ref(&divergence.recorded)),
        vec!["run.step_retried"]
    );
    let message = divergence.to_string();
    assert!(
        message.starts_with("non-determinism at event ") && message.contains("(step `call`)"),
        "{message}"
    );
    assert!(message.contains("\"backoff_ms\":2000"), "{message}");
    assert!(message.contains("\"backoff_ms\":4000"), "{message}");
}

#[test]
fn a_step_the_history_never_ran_is_a_divergence_naming_it() {
    let mut sim = Sim::start(THREE, json!({}));
    sim.tick();
    sim.succeed("a");
    sim.succeed("b");
    sim.succeed("c");
    assert!(sim.run.is_terminal());
    let recorded = history(&sim);
    // A new step between `a` and `b`: the history starts `b` where the code starts it.
    let changed = workflow(&THREE.replace(
        "  - id: b\n",
        "  - id: inserted\n    tool: noop\n  - id: b\n",
    ));
    let divergence = verify_history(&changed, &recorded, &ReplayContext::default()).unwrap_err();
    assert_eq!(divergence.step, Some(sid("b")), "{divergence}");
    match &divergence.decided {
        Decided::Event(event) => assert!(
            serde_json::to_string(event).unwrap().contains("inserted"),
            "{divergence}"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_history_that_ends_early_or_holds_a_person_s_decisions_replays() {
    // A gate approved by a person: applied as recorded, then the engine goes on.
    let mut sim = Sim::start(GATED, json!({}));
    sim.tick();
    let gate = open_gate(&sim);
    sim.at(5).decide(RunCommand::ApproveGate {
        gate_id: gate.gate_id,
        by: "ops".into(),
        comment: None,
        at: t0() + Duration::seconds(5),
    });
    sim.tick();
    let recorded = history(&sim);
    let verified = verify_history(&sim.def, &recorded, &ReplayContext::default()).unwrap();
    assert_eq!(verified.outside, 2, "the start and the approval");
    // Any prefix of a history replays too (a run in flight).
    for end in 1..recorded.len() {
        verify_history(&sim.def, &recorded[..end], &ReplayContext::default())
            .unwrap_or_else(|d| panic!("prefix of {end} events: {d}"));
    }
}

// ---------------------------------------------------------------- flow control

const LIMITED: &str = r#"
name: limited
version: "1.0.0"
priority: 7
concurrency: {limit: 10, key: inputs.customer, per_key: 2}
inputs:
  customer: {type: string}
steps:
  - id: a
    tool: echo
    inputs: {message: "for ${{ inputs.customer }}"}
"#;

#[test]
fn a_run_with_concurrency_slots_starts_queued_and_nothing_moves_until_admitted() {
    let mut sim = Sim::start(LIMITED, json!({"customer": "acme"}));
    assert_eq!(sim.run.status(), Some(RunStatus::Queued));
    assert!(sim.run.awaiting_admission());
    let flow = sim.run.flow().clone();
    assert_eq!(flow.priority, 7);
    let scopes: Vec<(&str, u32)> = flow
        .slots
        .iter()
        .map(|s| (s.scope.as_str(), s.limit))
        .collect();
    assert_eq!(
        scopes,
        [("workflow:limited", 10), ("workflow:limited:key:acme", 2)]
    );
    let idle = sim.at(60).tick();
    assert!(
        idle.events.is_empty() && idle.effects.is_empty(),
        "{idle:?}"
    );
    assert_eq!(idle.wake_at, None, "only an admission moves a queued run");
    // Waiting on a full scope is recorded once per scope.
    sim.decide(RunCommand::Queue {
        scope: "workflow:limited:key:acme".into(),
        limit: 2,
        at: t0(),
    });
    let again = sim
        .run
        .decide(RunCommand::Queue {
            scope: "workflow:limited:key:acme".into(),
            limit: 2,
            at: t0() + Duration::seconds(60),
        })
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(
        sim.run.queued_on().map(|q| q.scope.as_str()),
        Some("workflow:limited:key:acme")
    );
    // A step command is refused while queued, whoever asks.
    let refused = sim.run.decide(RunCommand::ScheduleStep {
        step_id: sid("a"),
        due_at: t0(),
        at: t0(),
    });
    assert!(refused.is_err(), "{refused:?}");
    sim.decide(RunCommand::Admit {
        at: t0() + Duration::seconds(90),
    });
    assert_eq!(sim.run.status(), Some(RunStatus::Running));
    assert!(sim.run.queued_on().is_none());
    assert_eq!(performed(&sim.at(90).tick()), vec!["a"]);
    sim.succeed("a");
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
}

#[test]
fn a_queued_run_can_be_paused_cancelled_or_time_out() {
    let mut sim = Sim::start(LIMITED, json!({"customer": "acme"}));
    sim.decide(RunCommand::Pause {
        by: "ops".into(),
        reason: "hold".into(),
        at: t0(),
        workflow: false,
    });
    assert_eq!(sim.run.status(), Some(RunStatus::Paused));
    assert!(
        !sim.run.awaiting_admission(),
        "a paused run is not admitted"
    );
    sim.decide(RunCommand::Resume {
        by: "ops".into(),
        at: t0(),
    });
    assert_eq!(sim.run.status(), Some(RunStatus::Queued));
    sim.decide(RunCommand::Cancel {
        by: "ops".into(),
        reason: "not needed".into(),
        at: t0(),
    });
    assert_eq!(sim.run.status(), Some(RunStatus::Cancelled));
    assert!(!sim.run.awaiting_admission());
}

#[test]
fn the_key_of_a_flow_is_the_text_of_its_value() {
    use super::flow::key_value;
    let inputs = |v: Value| v.as_object().cloned().unwrap();
    assert_eq!(
        key_value("inputs.customer", &inputs(json!({"customer": "acme"}))).unwrap(),
        "acme"
    );
    assert_eq!(
        key_value("inputs.n + 1", &inputs(json!({"n": 41}))).unwrap(),
        "42"
    );
    let long = "x".repeat(500);
    let hashed = key_value("inputs.c", &inputs(json!({ "c": long }))).unwrap();
    assert!(
        hashed.starts_with("sha256:") && hashed.len() == 71,
        "{hashed}"
    );
    let missing = key_value("inputs.nope", &inputs(json!({}))).unwrap_err();
    assert!(missing.contains("inputs.nope"), "{missing}");
    let def = workflow(LIMITED);
    let refused = super::flow::flow(&def, &inputs(json!({"customer": "a"})), Some(5000));
    assert!(refused.unwrap_err().contains("out of range"));
    let given = super::flow::flow(&def, &inputs(json!({"customer": "a"})), Some(-3)).unwrap();
    assert_eq!(given.priority, -3);
}

// ---------------------------------------------------------------- pause and resume

#[test]
fn a_paused_run_starts_nothing_new_and_its_step_in_flight_finishes() {
    let mut sim = Sim::start(THREE, json!({}));
    assert_eq!(performed(&sim.tick()), vec!["a"]);
    sim.decide(RunCommand::Pause {
        by: "ops".into(),
        reason: "the database is being migrated".into(),
        at: t0(),
        workflow: false,
    });
    assert_eq!(sim.run.status(), Some(RunStatus::Paused));
    // The attempt in flight finishes and is recorded; nothing after it starts.
    let done = sim.succeed("a");
    assert_eq!(types(&done.events), vec!["run.step_succeeded"]);
    assert!(done.effects.is_empty(), "{:?}", done.effects);
    assert_eq!(done.wake_at, None, "only a resume moves a paused run");
    assert_eq!(sim.status("b"), None, "b is not even scheduled");
    let later = sim.at(600).tick();
    assert!(later.events.is_empty() && later.effects.is_empty());
    assert_eq!(sim.run.status(), Some(RunStatus::Paused));
    // A second pause is refused; a resume lets the run go on where it was.
    let again = sim.run.decide(RunCommand::Pause {
        by: "ops".into(),
        reason: "again".into(),
        at: t0(),
        workflow: false,
    });
    assert!(again.is_err(), "{again:?}");
    sim.decide(RunCommand::Resume {
        by: "ops".into(),
        at: t0() + Duration::seconds(600),
    });
    assert_eq!(sim.run.status(), Some(RunStatus::Running));
    assert_eq!(performed(&sim.tick()), vec!["b"]);
    sim.succeed("b");
    sim.succeed("c");
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
    assert!(sim.run.paused().is_none());
}

#[test]
fn a_paused_run_can_be_cancelled_and_resume_needs_a_pause() {
    let mut sim = Sim::start(THREE, json!({}));
    sim.tick();
    let refused = sim.run.decide(RunCommand::Resume {
        by: "ops".into(),
        at: t0(),
    });
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("RUNNING")),
        "{refused:?}"
    );
    sim.decide(RunCommand::Pause {
        by: "ops".into(),
        reason: "hold".into(),
        at: t0(),
        workflow: false,
    });
    sim.decide(RunCommand::Cancel {
        by: "ops".into(),
        reason: "not needed".into(),
        at: t0(),
    });
    assert_eq!(sim.run.status(), Some(RunStatus::Cancelled));
    assert!(sim.run.paused().is_none());
}

const POLLING: &str = r#"
name: polling
version: "1.0.0"
steps:
  - id: poll
    tool: echo
    inputs: {message: ready?}
    timeout_seconds: 10
    retry: {max_attempts: 40, backoff: constant, base_seconds: 1}
    error_handlers:
      - {class: timeout, action: increase_timeout, timeout_factor: 2}
  - id: after
    tool: noop
"#;

#[test]
fn a_run_continued_as_new_decides_what_it_would_have_decided() {
    let mut long = Sim::start(POLLING, json!({}));
    let mut continued = Sim::start(POLLING, json!({}));
    let mut continuations = 0;
    for round in 0..30_i64 {
        for sim in [&mut long, &mut continued] {
            sim.at(round * 2);
        }
        let (a, b) = (long.tick(), continued.tick());
        assert_eq!(
            (&a.events, &a.effects),
            (&b.events, &b.effects),
            "round {round}"
        );
        // One timeout early (its handler raises the timeout for good), then network
        // failures; the continued run continues as new every few rounds.
        let class = if round == 1 {
            ErrorClass::Timeout
        } else {
            ErrorClass::Network
        };
        let (a, b) = (long.fail("poll", class), continued.fail("poll", class));
        assert_eq!(
            (&a.events, &a.effects),
            (&b.events, &b.effects),
            "round {round}"
        );
        if round % 4 == 3 {
            continued.decide(RunCommand::Continue { at: continued.now });
            continuations += 1;
            assert_eq!(continued.run.history_len(), 1);
        }
    }
    // Attempts were compacted: the raised timeout is still what a new attempt gets.
    assert!(continued.run.attempts(&sid("poll")).len() <= 5);
    assert_eq!(long.run.attempts(&sid("poll")).len(), 31);
    let next = |sim: &mut Sim| {
        sim.at(70);
        sim.tick()
    };
    let (a, b) = (next(&mut long), next(&mut continued));
    assert_eq!(a.effects, b.effects);
    assert!(
        matches!(
            &b.effects[..],
            [Effect::Perform {
                attempt: 31,
                timeout_ms: Some(20_000),
                ..
            }]
        ),
        "{:?}",
        b.effects
    );
    long.succeed("poll");
    continued.succeed("poll");
    let (a, b) = (long.succeed("after"), continued.succeed("after"));
    assert_eq!(a.events, b.events);
    assert_eq!(continued.run.status(), Some(RunStatus::Succeeded));
    assert_eq!(continuations, 7);
    // Drop replays both histories, checking each continuation carries the state its
    // history folds to.
}

#[test]
fn a_continuation_that_carries_another_state_is_a_divergence() {
    let mut sim = Sim::start(POLLING, json!({}));
    sim.tick();
    sim.fail("poll", ErrorClass::Network);
    let mut forged = sim.run.compacted();
    forged.apply(RunEvent::Cancelled {
        by: "mallory".into(),
        reason: "forged".into(),
        at: t0(),
    });
    let mut history = history(&sim);
    history.push(Recorded::plain(RunEvent::Continued {
        state: Box::new(forged),
        at: t0(),
    }));
    let divergence = verify_history(&sim.def, &history, &ReplayContext::default())
        .expect_err("a forged continuation");
    assert_eq!(divergence.version, history.len());
    assert!(
        divergence.to_string().contains("run.continued"),
        "{divergence}"
    );
}

// ---------------------------------------------------------------- rate limits

const RATED: &str = r#"
name: rated
version: "1.0.0"
inputs:
  customer: {type: string}
rate_limits:
  - {name: crm, per_second: 2, burst: 3, key: inputs.customer}
  - {name: echoes, per_second: 10, tools: [echo]}
steps:
  - id: a
    tool: echo
    rate_limit: crm
    inputs: {message: "for ${{ inputs.customer }}"}
  - id: b
    tool: noop
"#;

/// The rate buckets of the Perform effect of `step` in `tick`.
fn rate_of(tick: &Tick, step: &str) -> Vec<(String, f64, u32)> {
    tick.effects
        .iter()
        .find_map(|e| match e {
            Effect::Perform { step_id, rate, .. } if step_id.as_str() == step => Some(
                rate.iter()
                    .map(|b| (b.scope.clone(), b.per_second, b.burst))
                    .collect(),
            ),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{step} is not performed: {tick:?}"))
}

#[test]
fn a_rate_limited_step_asks_for_its_tokens_and_waits_when_throttled() {
    let mut sim = Sim::start(RATED, json!({"customer": "acme"}));
    let first = sim.tick();
    assert_eq!(
        rate_of(&first, "a"),
        [
            ("rate:crm:key:acme".to_string(), 2.0, 3),
            ("rate:echoes".to_string(), 10.0, 1)
        ],
        "the limit it names, keyed, and the one listing its tool; sorted"
    );
    // The worker found no token before t0+5s: the attempt is held back.
    let key = idempotency_key(sim.run.id().unwrap(), &sid("a"), 1);
    sim.in_flight.remove(&key);
    sim.decide(RunCommand::ThrottleStep {
        step_id: sid("a"),
        attempt: 1,
        limit: "rate:crm:key:acme".into(),
        until: t0() + Duration::seconds(5),
        at: t0(),
    });
    assert_eq!(sim.status("a"), Some("scheduled"));
    let early = sim.at(1).tick();
    assert!(
        early.effects.is_empty() && early.events.is_empty(),
        "{early:?}"
    );
    assert_eq!(early.wake_at, Some(t0() + Duration::seconds(5)));
    // At its token's time the same attempt starts again, holding its token.
    let due = sim.at(5).tick();
    assert_eq!(performed(&due), vec!["a"]);
    assert!(rate_of(&due, "a").is_empty(), "no second token: {due:?}");
    assert!(matches!(
        due.events.as_slice(),
        [RunEvent::StepStarted { attempt: 1, .. }]
    ));
    let next = sim.succeed("a");
    assert!(
        rate_of(&next, "b").is_empty(),
        "a step no limit names takes no token"
    );
    sim.succeed("b");
    assert_eq!(sim.run.status(), Some(RunStatus::Succeeded));
    assert_eq!(
        sim.run.attempts(&sid("a")).len(),
        1,
        "a throttle is not a retry"
    );
}

#[test]
fn an_attempt_started_again_after_a_crash_takes_a_new_token() {
    let mut sim = Sim::start(RATED, json!({"customer": "acme"}));
    sim.tick();
    // Its worker died before reporting: the same attempt starts again and calls again.
    sim.in_flight.clear();
    let again = sim.at(30).tick();
    assert_eq!(performed(&again), vec!["a"]);
    assert_eq!(rate_of(&again, "a").len(), 2);
}

#[test]
fn a_key_that_cannot_be_computed_fails_the_attempt_as_invalid() {
    let yaml = r#"
name: rated
version: "1.0.0"
inputs:
  customer: {type: object, required: false}
rate_limits:
  - {name: crm, per_second: 2, key: inputs.customer.id}
steps:
  - {id: a, tool: noop, rate_limit: crm}
"#;
    let mut sim = Sim::start(yaml, json!({"customer": {}}));
    sim.tick();
    match sim.run.step(&sid("a")) {
        Some(StepState::Failed { error, .. }) => {
            assert_eq!(error.class, ErrorClass::Validation);
            assert!(
                error.message.contains("rate limit crm key"),
                "{}",
                error.message
            );
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------- recorded calls

const CALLS: &str = r#"
name: calls
version: "1.0.0"
inputs:
  id: {type: string, required: true}
tools:
  - name: lookup
    type: shell
    inputs:
      key: {type: string, required: true}
      limit: {type: integer, default: 5}
    command: [grep, "${{ inputs.key }}"]
steps:
  - id: fetch
    type: http
    method: POST
    url: "http://example.test/items/${{ inputs.id }}"
    headers: {Authorization: "Bearer not-recorded"}
    body: {id: "${{ inputs.id }}"}
  - id: find
    tool: lookup
    inputs: {key: "${{ steps.fetch.outputs.body.name }}"}
  - id: count
    type: shell
    command: [wc, "-l", "${{ inputs.id }}"]
    env: {API_KEY: "not-recorded-either"}
  - id: say
    tool: echo
    inputs: {message: hi}
  - id: child
    type: workflow
    workflow: other
    inputs: {id: "${{ inputs.id }}"}
"#;

/// The call `step`'s start recorded.
fn call_of(sim: &Sim, step: &str) -> Option<crate::domain::run::StepCall> {
    sim.log.iter().find_map(|e| match e {
        RunEvent::StepStarted { step_id, call, .. } if step_id.as_str() == step => call.clone(),
        _ => None,
    })
}

#[test]
fn a_step_that_reaches_outside_records_what_it_calls_as_it_starts() {
    let mut sim = Sim::start(CALLS, json!({"id": "a-7"}));
    sim.tick();
    let fetch = call_of(&sim, "fetch").expect("the http step's call");
    assert_eq!(fetch.tool, "http");
    assert_eq!(
        fetch.inputs,
        json!({"method": "POST", "url": "http://example.test/items/a-7", "body": {"id": "a-7"}}),
        "rendered, and without its headers"
    );
    sim.report(
        "fetch",
        Ok(json!({"status": 200, "body": {"name": "widget"}})),
    );
    sim.tick();
    let find = call_of(&sim, "find").expect("the declared tool's call");
    assert_eq!(find.tool, "lookup", "a declared tool by its own name");
    assert_eq!(find.inputs, json!({"key": "widget"}), "its inputs as given");
    sim.report("find", Ok(json!({"stdout": "widget\n", "exit_code": 0})));
    sim.tick();
    let count = call_of(&sim, "count").expect("the shell step's call");
    assert_eq!(count.tool, "shell");
    assert_eq!(
        count.inputs,
        json!({"command": ["wc", "-l", "a-7"]}),
        "without its environment"
    );
    sim.report("count", Ok(json!({"stdout": "3\n", "exit_code": 0})));
    sim.tick();
    assert_eq!(
        call_of(&sim, "say"),
        None,
        "a built-in calls nothing outside"
    );
    sim.report("say", Ok(json!({"message": "hi"})));
    sim.tick();
    let child = call_of(&sim, "child").expect("the sub-workflow's call");
    assert_eq!(child.tool, "workflow:other");
    assert_eq!(child.inputs, json!({"id": "a-7"}));
}

#[test]
fn a_step_whose_call_cannot_be_rendered_starts_without_one_and_fails() {
    let yaml = r#"
name: broken
version: "1.0.0"
inputs:
  cfg: {type: object, default: {}}
steps:
  - id: count
    type: shell
    command: [wc, "${{ inputs.cfg.missing.deeper }}"]
"#;
    let mut sim = Sim::start(yaml, json!({}));
    let tick = sim.tick();
    assert_eq!(types(&tick.events)[..1], ["run.step_started"]);
    assert!(
        types(&tick.events).contains(&"run.step_failed".to_string()),
        "{:?}",
        types(&tick.events)
    );
    assert_eq!(call_of(&sim, "count"), None);
}

#[test]
fn a_history_recorded_before_starts_carried_their_call_still_replays() {
    let mut sim = Sim::start(CALLS, json!({"id": "a-7"}));
    sim.tick();
    sim.report(
        "fetch",
        Ok(json!({"status": 200, "body": {"name": "widget"}})),
    );
    sim.tick();
    let rewritten = |change: &dyn Fn(&mut Option<crate::domain::run::StepCall>)| {
        sim.log
            .iter()
            .cloned()
            .map(|mut e| {
                if let RunEvent::StepStarted { call, .. } = &mut e {
                    change(call);
                }
                Recorded::plain(e)
            })
            .collect::<Vec<_>>()
    };
    let old = rewritten(&|call| *call = None);
    verify_history(&sim.def, &old, &ReplayContext::default()).expect("an older history replays");
    let changed = rewritten(&|call| {
        if let Some(c) = call {
            c.inputs = json!({"url": "http://elsewhere.test"});
        }
    });
    let divergence = verify_history(&sim.def, &changed, &ReplayContext::default()).unwrap_err();
    assert_eq!(divergence.step, Some(sid("fetch")), "{divergence}");
}

#[test]
fn a_declared_tool_s_timeout_applies_when_its_step_sets_none() {
    const TIMED: &str = r#"
name: timed
version: "1.0.0"
tools:
  - name: slow
    type: shell
    timeout_seconds: 7
    command: [sleep, "1"]
steps:
  - id: own
    tool: slow
  - id: set
    tool: slow
    timeout_seconds: 3
"#;
    let mut sim = Sim::start(TIMED, json!({}));
    let first = sim.tick();
    assert!(
        matches!(
            &first.effects[..],
            [Effect::Perform {
                timeout_ms: Some(7_000),
                ..
            }]
        ),
        "the tool's own: {:?}",
        first.effects
    );
    let second = sim.succeed("own");
    assert!(
        matches!(
            &second.effects[..],
            [Effect::Perform {
                timeout_ms: Some(3_000),
                ..
            }]
        ),
        "the step's wins: {:?}",
        second.effects
    );
}

#[test]
fn a_registry_tool_is_performed_through_the_registry_and_a_fallback_reaches_it_too() {
    const REGISTRY: &str = r#"
name: registry
version: "1.0.0"
tools:
  - name: priced
    type: shell
    cost_usd: 0.5
    command: [echo, "${{ inputs.text }}"]
    inputs:
      text: {type: string, default: none}
steps:
  - id: sum
    tool: py__add
    inputs: {a: 1, b: 2}
    error_handlers:
      - {class: unknown, action: fallback, fallback_tool: priced}
  - id: shout
    tool: py__shout
    inputs: {text: "${{ steps.sum.outputs.json }}"}
    error_handlers:
      - {class: timeout, action: fallback, fallback_tool: py__slow}
"#;
    let mut known = crate::workflow::KnownTools::default();
    known
        .external
        .extend(["py__add", "py__shout", "py__slow"].map(String::from));
    let def = crate::workflow::validate::check_with(Path::new("r.awl.yaml"), REGISTRY, &known)
        .unwrap_or_else(|d| panic!("{d}"))
        .workflow;
    let mut sim = Sim::from_def(def, json!({}));
    let first = sim.tick();
    match &first.effects[..] {
        [
            Effect::Perform {
                work: Work::External { tool, inputs },
                cost_usd: None,
                ..
            },
        ] => {
            assert_eq!(tool, "py__add");
            assert_eq!(Value::Object(inputs.clone()), json!({"a": 1, "b": 2}));
        }
        other => panic!("{other:?}"),
    }
    let call = call_of(&sim, "sum").expect("an MCP tool's call is recorded");
    assert_eq!(
        (call.tool.as_str(), call.inputs),
        ("py__add", json!({"a": 1, "b": 2}))
    );
    // The MCP tool failed (an error result): the fallback is the declared tool, with
    // its cost per call.
    let fallback = sim.fail("sum", ErrorClass::Unknown);
    match &fallback.effects[..] {
        [
            Effect::Perform {
                work: Work::Shell(shell),
                cost_usd: Some(cost),
                ..
            },
        ] => {
            assert_eq!(
                shell.command.as_deref(),
                Some(&["echo".to_string(), "none".to_string()][..])
            );
            assert_eq!(*cost, 0.5);
        }
        other => panic!("{other:?}"),
    }
    sim.report("sum", Ok(json!({"json": 3})));
    let second = sim.tick();
    assert!(
        matches!(
            &second.effects[..],
            [Effect::Perform { work: Work::External { tool, inputs }, .. }]
                if tool == "py__shout" && inputs["text"] == 3
        ),
        "{:?}",
        second.effects
    );
    // A timeout falls back to another MCP tool.
    let third = sim.fail("shout", ErrorClass::Timeout);
    assert!(
        matches!(
            &third.effects[..],
            [Effect::Perform { work: Work::External { tool, .. }, .. }] if tool == "py__slow"
        ),
        "{:?}",
        third.effects
    );
    let done = sim.succeed("shout");
    assert!(done.is_finished(), "{:?}", types(&done.events));
}
