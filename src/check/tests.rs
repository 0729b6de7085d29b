use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;
use crate::log::{Metadata, StreamRef};

const RUN: &str = "01a20e6b-8945-711b-9472-ef7063836890";
const GATE: &str = "01a20e6b-8945-711b-9472-ef7063836891";

fn at() -> DateTime<Utc> {
    DateTime::<Utc>::UNIX_EPOCH
}

fn event(position: i64, version: i64, event_type: &str, payload: Value) -> RecordedEvent {
    RecordedEvent {
        position,
        stream: StreamRef::new(StreamType::Run, RUN),
        version,
        event_type: event_type.into(),
        event_version: 1,
        payload,
        metadata: Metadata::default(),
        recorded_at: at(),
    }
}

fn started(step: &str, attempt: u32) -> Value {
    json!({"step_id": step, "attempt": attempt, "idempotency_key": "k", "timeout_at": null, "at": at()})
}

fn succeeded(step: &str, attempt: u32) -> Value {
    json!({"step_id": step, "attempt": attempt, "output": {}, "cost_usd": null, "tokens": null, "at": at()})
}

fn failed(step: &str, attempt: u32) -> Value {
    json!({"step_id": step, "attempt": attempt, "error": {"class": "unknown", "message": "x"}, "at": at()})
}

fn check(events: &[RecordedEvent]) -> Vec<(&'static str, i64)> {
    let mut checker = Checker::default();
    for e in events {
        checker.observe(e);
    }
    checker
        .finish()
        .findings
        .into_iter()
        .map(|f| (f.rule, f.position))
        .collect()
}

#[test]
fn a_clean_history_has_no_findings() {
    let events = [
        event(1, 1, "run.step_started", started("a", 1)),
        event(2, 2, "run.step_failed", failed("a", 1)),
        event(3, 3, "run.step_started", started("a", 2)),
        event(4, 4, "run.step_succeeded", succeeded("a", 2)),
    ];
    assert_eq!(check(&events), vec![]);
}

#[test]
fn each_rule_names_the_event_it_found() {
    let opened = json!({"gate_id": GATE, "step_id": "g", "approvers": [], "message": "m", "expires_at": null, "at": at()});
    let approved = json!({"gate_id": GATE, "by": "ops", "comment": null, "at": at()});
    let expired = json!({"gate_id": GATE, "at": at()});
    let events = [
        event(1, 1, "run.step_started", started("a", 1)),
        event(2, 2, "run.step_succeeded", succeeded("a", 1)),
        event(3, 3, "run.step_failed", failed("a", 1)),
        event(4, 4, "run.step_succeeded", succeeded("b", 1)),
        event(5, 6, "run.gate_expired", expired.clone()),
        event(6, 7, "run.gate_opened", opened),
        event(7, 8, "run.gate_approved", approved),
        event(8, 9, "run.gate_expired", expired),
        event(9, 10, "run.no_such_event", json!({})),
    ];
    assert_eq!(
        check(&events),
        vec![
            ("outcome_twice", 3),
            ("outcome_without_start", 4),
            ("version_gap", 5),
            ("gate_decided_unopened", 5),
            ("gate_decided_twice", 8),
            ("undecodable", 9),
        ]
    );
}

const TASK: &str = "01a20e6b-8945-711b-9472-ef7063836892";

fn task_event(position: i64, version: i64, event_type: &str, payload: Value) -> RecordedEvent {
    RecordedEvent {
        stream: StreamRef::new(StreamType::Task, TASK),
        ..event(position, version, event_type, payload)
    }
}

#[test]
fn a_task_event_out_of_turn_is_named_with_what_was_allowed() {
    let queued = json!({"task_id": TASK, "prompt": "p", "required_capabilities": [],
        "workspace": null, "agent_hint": null, "priority": 0, "review_required": true,
        "run_step": null, "at": at()});
    let assigned = json!({"agent_id": "a1", "at": at()});
    let acknowledged = json!({"agent_id": "a1", "at": at()});
    let completed = json!({"by": {"user": "ops"}, "result": {}, "at": at()});
    let events = [
        task_event(1, 1, "task.queued", queued.clone()),
        // Acknowledged without a delivery: illegal from ASSIGNED.
        task_event(2, 2, "task.assigned", assigned),
        task_event(3, 3, "task.acknowledged", acknowledged),
        // Completed without the review it requires.
        task_event(4, 4, "task.completed", completed),
        // Queued again on a finished stream.
        task_event(5, 5, "task.queued", queued),
    ];
    let mut checker = Checker::default();
    for e in &events {
        checker.observe(e);
    }
    let findings = checker.finish().findings;
    let rules: Vec<(&str, i64)> = findings.iter().map(|f| (f.rule, f.position)).collect();
    assert_eq!(
        rules,
        vec![
            ("task_transition_illegal", 3),
            ("task_transition_illegal", 4),
            ("task_transition_illegal", 5),
        ],
        "{findings:#?}"
    );
    assert_eq!(
        findings[0].message,
        "task.acknowledged while the task is ASSIGNED (allowed from: PENDING_ACK)"
    );
    assert_eq!(
        findings[1].message,
        "task.completed while the task is IN_PROGRESS (allowed from: APPROVED)"
    );
    assert!(findings[2].message.contains("only a task not yet queued"));
    assert_eq!(findings[0].stream, format!("task/{TASK}"));
}

const SOLVE: &str = "01a20e6b-8945-711b-9472-ef7063836899";

fn solve_event(position: i64, version: i64, event_type: &str, payload: Value) -> RecordedEvent {
    RecordedEvent {
        stream: StreamRef::new(StreamType::Solve, SOLVE),
        ..event(position, version, event_type, payload)
    }
}

#[test]
fn a_solve_step_out_of_turn_is_named() {
    let started = json!({"agent": "a", "model": "m", "tools": ["echo"], "max_iterations": 2,
        "prompt": "p", "by": "u", "at": at()});
    let reply = |iteration: u32, calls: Value| {
        json!({"iteration": iteration, "phase": "plan",
        "model": "m", "tool_calls": calls, "tokens_in": 1, "tokens_out": 1, "cost_usd": 0.0,
        "latency_ms": 1, "attempts": 1, "at": at()})
    };
    let call = json!([{"id": "c1", "tool": "echo", "arguments": "{}"}]);
    let result = |id: &str| {
        json!({"iteration": 1, "call_id": id, "tool": "echo",
        "output": {}, "duration_ms": 1, "cost_usd": 0.0, "at": at()})
    };
    let events = [
        solve_event(1, 1, "solve.started", started),
        solve_event(2, 2, "solve.model_replied", reply(1, call.clone())),
        // A second model call while c1 has no result.
        solve_event(3, 3, "solve.model_replied", reply(2, json!([]))),
        // A result of a call nobody asked for.
        solve_event(4, 4, "solve.tool_finished", result("c9")),
    ];
    assert_eq!(
        check(&events),
        vec![("solve_step_illegal", 3), ("solve_step_illegal", 4)]
    );
    let clean = [
        solve_event(
            1,
            1,
            "solve.started",
            json!({"agent": "a", "model": "m", "tools": [],
            "max_iterations": 2, "prompt": "p", "by": "u", "at": at()}),
        ),
        solve_event(2, 2, "solve.model_replied", reply(1, call)),
        solve_event(3, 3, "solve.tool_finished", result("c1")),
    ];
    assert_eq!(check(&clean), vec![]);
}
