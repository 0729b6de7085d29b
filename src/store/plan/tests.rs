use super::*;
use crate::log::{ExpectedVersion, NewEvent, StreamType};
use serde_json::json;

fn req(id: &str, expected: ExpectedVersion, n: usize) -> AppendRequest {
    AppendRequest::new(
        StreamRef::new(StreamType::Task, id),
        expected,
        (0..n)
            .map(|i| NewEvent::new("test.happened", 1, json!({ "i": i })))
            .collect(),
    )
}

#[test]
fn assigns_dense_positions_and_versions_across_requests() {
    let a = req("a", ExpectedVersion::Exactly(2), 2);
    let b = req("b", ExpectedVersion::NoStream, 1);
    let a2 = req("a", ExpectedVersion::Exactly(4), 1);
    let current = HashMap::from([(a.stream.clone(), 2)]);
    let plan = plan(10, &current, &[&a, &b, &a2], Atomicity::PerRequest);
    let rows: Vec<(i64, &str, i64)> = plan
        .rows
        .iter()
        .map(|r| (r.position, r.stream.id.as_str(), r.version))
        .collect();
    assert_eq!(
        rows,
        vec![(11, "a", 3), (12, "a", 4), (13, "b", 1), (14, "a", 5)]
    );
    assert_eq!(plan.new_head, 14);
    assert_eq!(
        plan.results[0].as_ref().unwrap(),
        &Appended {
            first_position: 11,
            last_position: 12,
            stream_version: 4
        }
    );
}

#[test]
fn a_conflict_refuses_only_its_request_per_request() {
    let win = req("s", ExpectedVersion::Exactly(0), 1);
    let lose = req("s", ExpectedVersion::Exactly(0), 1);
    let plan = plan(0, &HashMap::new(), &[&win, &lose], Atomicity::PerRequest);
    assert_eq!(plan.rows.len(), 1);
    assert!(plan.results[0].is_ok());
    match &plan.results[1] {
        Err(StoreError::Conflict { actual, .. }) => assert_eq!(*actual, 1),
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert_eq!(plan.new_head, 1);
}

#[test]
fn all_or_nothing_writes_nothing_on_any_conflict() {
    let ok = req("x", ExpectedVersion::Any, 1);
    let bad = req("y", ExpectedVersion::Exactly(5), 1);
    let plan = plan(3, &HashMap::new(), &[&ok, &bad], Atomicity::AllOrNothing);
    assert!(plan.rows.is_empty());
    assert_eq!(plan.new_head, 3);
    assert!(plan.results[1].as_ref().unwrap_err().is_conflict());
}

#[test]
fn expected_version_too_high_is_a_conflict_not_a_gap() {
    let ahead = req("s", ExpectedVersion::Exactly(3), 1);
    let current = HashMap::from([(ahead.stream.clone(), 1)]);
    let plan = plan(0, &current, &[&ahead], Atomicity::PerRequest);
    assert!(plan.rows.is_empty());
    assert!(plan.results[0].as_ref().unwrap_err().is_conflict());
}

#[test]
fn invalid_requests_are_refused_with_a_reason() {
    let empty = req("s", ExpectedVersion::Any, 0);
    let mut bad_version = req("s", ExpectedVersion::Any, 1);
    bad_version.events[0].event_version = 0;
    let plan = plan(
        0,
        &HashMap::new(),
        &[&empty, &bad_version],
        Atomicity::PerRequest,
    );
    let messages: Vec<String> = plan
        .results
        .iter()
        .map(|r| r.as_ref().unwrap_err().to_string())
        .collect();
    assert_eq!(
        messages,
        vec![
            "invalid append to task/s: there are no events to append",
            "invalid append to task/s: event 0 (test.happened) has schema version 0; versions start at 1",
        ]
    );
}

#[test]
fn a_page_cut_by_the_head_has_reached_it() {
    let all = crate::log::EventFilter::default();
    // 1,000 positions after 500 end at 1,500: a page scanned only to 1,200 stopped
    // at the head.
    assert!(reached_head(500, 1_000, &all, 700, 1_200));
    // A page that ended at its window's end, or filled its limit, may have more.
    assert!(!reached_head(500, 1_000, &all, 1_000, 1_500));
    assert!(!reached_head(500, 1_000, &all, 999, 1_500));
    // An empty page of a caught-up follower.
    assert!(reached_head(500, 1_000, &all, 0, 500));
    // A filtered page scans a wider window: 10,000 positions.
    let tasks = crate::log::EventFilter {
        stream_types: vec![crate::log::StreamType::Task],
        ..Default::default()
    };
    assert!(!reached_head(500, 1_000, &tasks, 3, 10_500));
    assert!(reached_head(500, 1_000, &tasks, 3, 10_499));
}

#[test]
fn a_nul_is_found_where_it_is_and_only_there() {
    let nul = |v: serde_json::Value| nul_in(&Payload::from_value(&v));
    assert_eq!(nul(json!({"a": [1, "x\u{0}y"]})).as_deref(), Some("/a/1"));
    assert_eq!(nul(json!({"k\u{0}": 1})).as_deref(), Some("/k\u{0}"));
    // A backslash followed by the letters `u0000`: its text holds `\u0000`, no NUL.
    let lookalike = Payload::from_value(&json!({"a": "\\u0000"}));
    assert!(lookalike.as_str().contains("\\u0000"));
    assert_eq!(nul_in(&lookalike), None);
    assert_eq!(nul(json!({"a": "plain"})), None);
}
