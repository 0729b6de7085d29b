//! This process's latest commits, kept for its own followers.
//!
//! Every follower of the log in a process (the board's view, the projections, the
//! live streams of a dashboard) used to read back from the database the events this
//! same process had just appended: one page per commit per follower, each a query
//! and a decoding of rows awl had encoded moments before. The appender now keeps each
//! commit it makes, decoded as a reader would see it, in a short ring; a follower
//! whose position ends right before one of them takes the events from memory.
//!
//! Why this is the log and not a copy of it: positions are dense and assigned under
//! the log's write lock, so a commit's events hold consecutive positions, and
//! everything before a commit's first position had committed before it. A commit
//! that starts right after a follower's position is therefore exactly what the log
//! holds next, and a run of commits that follow each other without a gap is a
//! stretch of the log. Whether anything was committed after them (by a transaction
//! of this process, which is not kept here, or by another process) is for the
//! caller to tell from the head it knows ([`super::signals`]): this module only
//! answers "what follows `after`, if I hold it".
//!
//! Bounded by events and by an estimate of their size: a follower that falls behind
//! the ring reads the database, as before.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::log::{EventFilter, RecordedEvent};

/// Most events kept.
pub(crate) const KEPT_EVENTS: usize = 4_096;

/// Most bytes kept (estimated from the payloads' text).
pub(crate) const KEPT_BYTES: usize = 8 * 1024 * 1024;

/// One commit's events, in position order, without a gap.
#[derive(Debug)]
struct Commit {
    events: Vec<RecordedEvent>,
    bytes: usize,
}

impl Commit {
    fn first(&self) -> i64 {
        self.events.first().map_or(0, |e| e.position)
    }
    fn last(&self) -> i64 {
        self.events.last().map_or(0, |e| e.position)
    }
}

#[derive(Debug, Default)]
struct Ring {
    commits: VecDeque<Arc<Commit>>,
    events: usize,
    bytes: usize,
}

/// The latest commits of this process, newest last.
#[derive(Debug, Default)]
pub(crate) struct Feed {
    ring: Mutex<Ring>,
}

/// What the feed holds right after a position.
#[derive(Debug, PartialEq)]
pub(crate) struct Fed {
    /// The events past the position that pass the filter, in order.
    pub events: Vec<RecordedEvent>,
    /// The last position covered: every event up to it was considered.
    pub scanned: i64,
    /// The page stopped at the limit, not at the end of what the feed holds.
    pub limited: bool,
}

impl Feed {
    /// Keep a commit's events (any order; they must hold consecutive positions, or
    /// they are not kept). The oldest commits make room.
    pub(crate) fn push(&self, mut events: Vec<RecordedEvent>) {
        if events.is_empty() {
            return;
        }
        events.sort_by_key(|e| e.position);
        let consecutive = events
            .windows(2)
            .all(|w| w[1].position == w[0].position + 1);
        let bytes: usize = events.iter().map(event_bytes).sum();
        let mut ring = self.ring();
        let after_last = ring
            .commits
            .back()
            .is_none_or(|c| c.last() < events[0].position);
        if !consecutive || !after_last || events.len() > KEPT_EVENTS || bytes > KEPT_BYTES {
            return;
        }
        ring.events += events.len();
        ring.bytes += bytes;
        ring.commits.push_back(Arc::new(Commit { events, bytes }));
        while ring.events > KEPT_EVENTS || ring.bytes > KEPT_BYTES {
            let Some(old) = ring.commits.pop_front() else {
                break;
            };
            ring.events -= old.events.len();
            ring.bytes -= old.bytes;
        }
    }

    /// The events after `after` that pass `filter`, at most `limit` of them, if the
    /// feed holds position `after + 1`: taken from the commits that follow on from
    /// there without a gap. `None` if it does not hold that position.
    pub(crate) fn after(&self, after: i64, limit: i64, filter: &EventFilter) -> Option<Fed> {
        let run = self.run_after(after)?;
        let limit = usize::try_from(limit.max(0)).unwrap_or(usize::MAX);
        let mut events = Vec::new();
        let mut scanned = after;
        for commit in &run {
            for event in commit.events.iter().filter(|e| e.position > after) {
                if events.len() >= limit {
                    return Some(Fed {
                        events,
                        scanned,
                        limited: true,
                    });
                }
                if filter.matches(event) {
                    events.push(event.clone());
                }
                scanned = event.position;
            }
        }
        Some(Fed {
            events,
            scanned,
            limited: false,
        })
    }

    /// The commits from the one holding `after + 1` on, while each starts right
    /// after the one before.
    fn run_after(&self, after: i64) -> Option<Vec<Arc<Commit>>> {
        let ring = self.ring();
        let from = ring.commits.partition_point(|c| c.last() <= after);
        let first = ring.commits.get(from)?;
        if first.first() > after + 1 {
            return None;
        }
        let mut run = vec![first.clone()];
        for commit in ring.commits.range(from + 1..) {
            if commit.first() != run.last().map_or(0, |c| c.last()) + 1 {
                break;
            }
            run.push(commit.clone());
        }
        Some(run)
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        // Every update leaves the ring consistent; a poisoned lock is still usable.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// About how much memory an event holds: its payload's text and its names.
fn event_bytes(event: &RecordedEvent) -> usize {
    128 + event.stream.id.len() + event.event_type.len() + value_bytes(&event.payload)
}

fn value_bytes(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(s) => s.len() + 24,
        Value::Array(items) => 24 + items.iter().map(value_bytes).sum::<usize>(),
        Value::Object(map) => {
            24 + map
                .iter()
                .map(|(k, v)| k.len() + 24 + value_bytes(v))
                .sum::<usize>()
        }
    }
}

#[cfg(test)]
mod tests;
