//! Deciding what an append batch writes, without touching the database.
//!
//! The SQLite backend reads the log head and the current version of every stream in
//! the batch (inside its `BEGIN IMMEDIATE` transaction), then calls [`plan`], which
//! checks each request's expected version, assigns versions and dense global
//! positions, and says which requests conflict. The Postgres backend applies the same
//! rules inside `awl_append()` (migration 0002), so that an append is one round trip;
//! the conformance suite holds both to the same behaviour, and these rules are
//! unit-tested here without a database. [`validate`] (what is refused before any
//! database is asked) is shared by both.

use std::collections::HashMap;

use crate::log::{AppendRequest, Appended, NewEvent, StreamRef};

use super::StoreError;

/// One event row to insert.
#[derive(Debug, PartialEq)]
pub(crate) struct PlannedRow<'a> {
    pub position: i64,
    pub stream: &'a StreamRef,
    pub version: i64,
    pub event: &'a NewEvent,
}

/// What a batch will write, and each request's result.
#[derive(Debug)]
pub(crate) struct Plan<'a> {
    pub rows: Vec<PlannedRow<'a>>,
    pub results: Vec<Result<Appended, StoreError>>,
    /// The log head after the batch (unchanged when nothing is written).
    #[cfg_attr(not(test), allow(dead_code))]
    pub new_head: i64,
}

/// How conflicts inside a batch are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Atomicity {
    /// Requests are independent: a conflicting one is refused, the others written
    /// (group commit of unrelated callers).
    PerRequest,
    /// One conflict or invalid request refuses the whole batch (a caller's
    /// transaction).
    AllOrNothing,
}

/// Check a request before any database work: what the store refuses outright.
pub(crate) fn validate(request: &AppendRequest) -> Result<(), StoreError> {
    let invalid = |reason: String| StoreError::InvalidAppend {
        stream: request.stream.clone(),
        reason,
    };
    if request.stream.id.trim().is_empty() {
        return Err(invalid("the stream id is empty".into()));
    }
    if request.events.is_empty() {
        return Err(invalid("there are no events to append".into()));
    }
    for (i, event) in request.events.iter().enumerate() {
        if event.event_type.trim().is_empty() {
            return Err(invalid(format!("event {i} has an empty event type")));
        }
        if event.event_version < 1 {
            return Err(invalid(format!(
                "event {i} ({}) has schema version {}; versions start at 1",
                event.event_type, event.event_version
            )));
        }
    }
    Ok(())
}

/// Plan a batch. `current` holds the version of every stream named in `requests`
/// (0 for a stream with no events), read under the write lock.
pub(crate) fn plan<'a>(
    head: i64,
    current: &HashMap<StreamRef, i64>,
    requests: &[&'a AppendRequest],
    atomicity: Atomicity,
) -> Plan<'a> {
    let mut versions: HashMap<&StreamRef, i64> = HashMap::new();
    let mut rows = Vec::new();
    let mut results = Vec::with_capacity(requests.len());
    let mut position = head;
    for request in requests {
        if let Err(e) = validate(request) {
            results.push(Err(e));
            continue;
        }
        let stream = &request.stream;
        let actual = versions
            .get(stream)
            .copied()
            .unwrap_or_else(|| current.get(stream).copied().unwrap_or(0));
        if !request.expected.admits(actual) {
            results.push(Err(StoreError::Conflict {
                stream: stream.clone(),
                expected: request.expected,
                actual,
            }));
            continue;
        }
        let first_position = position + 1;
        for (i, event) in request.events.iter().enumerate() {
            position += 1;
            rows.push(PlannedRow {
                position,
                stream,
                version: actual + 1 + i as i64,
                event,
            });
        }
        let stream_version = actual + request.events.len() as i64;
        versions.insert(stream, stream_version);
        results.push(Ok(Appended {
            first_position,
            last_position: position,
            stream_version,
        }));
    }
    if atomicity == Atomicity::AllOrNothing && results.iter().any(Result::is_err) {
        return Plan {
            rows: Vec::new(),
            results,
            new_head: head,
        };
    }
    Plan {
        rows,
        results,
        new_head: position,
    }
}

/// Most positions one filtered page scans: a sparse filter moves through the log in
/// windows this wide rather than asking the database for rows past the head.
pub(crate) const FILTERED_SCAN_WINDOW: i64 = 10_000;

/// The last position a page read after `after` may look at. Positions are dense (a
/// rolled-back append leaves no hole), so the next `limit` events are exactly
/// `after + 1 ..= after + limit`: bounding the range keeps every page an index range
/// scan of `limit` rows, whatever plan the database picks.
pub(crate) fn scan_upper_bound(
    after: i64,
    limit: i64,
    head: i64,
    filter: &crate::log::EventFilter,
) -> i64 {
    let window = if filter.is_empty() {
        limit
    } else {
        limit.max(FILTERED_SCAN_WINDOW)
    };
    after.saturating_add(window).min(head)
}

/// The distinct streams named in a batch, for the version lookup.
pub(crate) fn distinct_streams<'a>(requests: &[&'a AppendRequest]) -> Vec<&'a StreamRef> {
    let mut seen: Vec<&StreamRef> = requests.iter().map(|r| &r.stream).collect();
    seen.sort();
    seen.dedup();
    seen
}

#[cfg(test)]
mod tests {
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
}
