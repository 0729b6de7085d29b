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

use crate::log::{AppendRequest, Appended, NewEvent, Payload, StreamRef};

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
        if let Some(at) = nul_in(&event.payload) {
            return Err(invalid(format!(
                "event {i} ({}) holds a NUL character (\\u0000) in its payload at `{at}`, \
                 which the log cannot store",
                event.event_type
            )));
        }
    }
    Ok(())
}

/// Where a NUL character (`\u0000`) is in a payload, as a JSON pointer
/// (`text::nul_in`), if it holds one: the log cannot store it. serde_json writes a
/// NUL only as `\u0000`; most payloads have no such text, and those that do are read
/// back to say exactly where (the text may be an escaped backslash and `u0000`).
pub(crate) fn nul_in(payload: &Payload) -> Option<String> {
    if !payload.as_str().contains("\\u0000") {
        return None;
    }
    match payload.to_value() {
        Ok(value) => crate::text::nul_in(&value),
        Err(_) => Some(String::new()),
    }
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

/// Whether a page read after `after` with `limit`, which returned `returned` events
/// and scanned up to `scanned`, ended at the head: its window was cut short by it
/// and not by its own size or the limit. A follower that got such a page has read
/// everything committed when it was read, and can wait for the next commit instead
/// of asking again to find nothing.
pub(crate) fn reached_head(
    after: i64,
    limit: i64,
    filter: &crate::log::EventFilter,
    returned: usize,
    scanned: i64,
) -> bool {
    (returned as i64) < limit && scanned < scan_upper_bound(after, limit, i64::MAX, filter)
}

/// A group commit's answers, one per request, and when its events were recorded
/// (none if nothing was written).
pub(crate) struct Recorded {
    pub results: Vec<Result<Appended, StoreError>>,
    pub recorded_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// The distinct streams named in a batch, for the version lookup.
pub(crate) fn distinct_streams<'a>(requests: &[&'a AppendRequest]) -> Vec<&'a StreamRef> {
    let mut seen: Vec<&StreamRef> = requests.iter().map(|r| &r.stream).collect();
    seen.sort();
    seen.dedup();
    seen
}

#[cfg(test)]
mod tests;
