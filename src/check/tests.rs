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
