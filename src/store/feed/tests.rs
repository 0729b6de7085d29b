use super::*;
use crate::log::{Metadata, StreamRef, StreamType};
use chrono::{DateTime, Utc};
use serde_json::json;

fn event(position: i64, kind: StreamType) -> RecordedEvent {
    RecordedEvent {
        position,
        stream: StreamRef::new(kind, format!("s{position}")),
        version: 1,
        event_type: "test.happened".into(),
        event_version: 1,
        payload: json!({ "n": position }),
        metadata: Metadata::default(),
        recorded_at: DateTime::<Utc>::UNIX_EPOCH,
    }
}

fn commit(positions: std::ops::RangeInclusive<i64>) -> Vec<RecordedEvent> {
    positions.map(|p| event(p, StreamType::Task)).collect()
}

fn positions(fed: &Fed) -> Vec<i64> {
    fed.events.iter().map(|e| e.position).collect()
}

const ALL: EventFilter = EventFilter {
    stream_types: Vec::new(),
    stream_id: None,
    event_types: Vec::new(),
    since: None,
    until: None,
};

#[test]
fn a_follower_takes_the_commits_that_follow_on_from_its_position() {
    let feed = Feed::default();
    feed.push(commit(11..=13));
    feed.push(commit(14..=14));
    // 15..=19 went elsewhere (another process, or a transaction): a gap.
    feed.push(commit(20..=21));

    let fed = feed.after(10, 100, &ALL).unwrap();
    assert_eq!(positions(&fed), vec![11, 12, 13, 14]);
    assert_eq!(fed.scanned, 14, "stops at the gap");
    assert!(!fed.limited);

    // From inside a commit (a page cut it short): the rest of it.
    let fed = feed.after(12, 100, &ALL).unwrap();
    assert_eq!(positions(&fed), vec![13, 14]);

    // Past the gap.
    assert_eq!(positions(&feed.after(19, 100, &ALL).unwrap()), vec![20, 21]);
    // At the end: nothing more, but the feed does hold up to there.
    let fed = feed.after(21, 100, &ALL);
    assert_eq!(fed, None, "position 22 is not held");
}

#[test]
fn positions_it_does_not_hold_are_for_the_database() {
    let feed = Feed::default();
    assert_eq!(feed.after(0, 10, &ALL), None, "empty");
    feed.push(commit(11..=13));
    assert_eq!(feed.after(9, 10, &ALL), None, "10 was never held");
    assert_eq!(feed.after(14, 10, &ALL), None, "past the newest");
    for after in [15, 16, 17] {
        assert_eq!(feed.after(after, 10, &ALL), None);
    }
}

#[test]
fn the_filter_and_the_limit_apply_as_in_a_read_of_the_log() {
    let feed = Feed::default();
    feed.push(vec![
        event(1, StreamType::Task),
        event(2, StreamType::Run),
        event(3, StreamType::Task),
        event(4, StreamType::Agent),
        event(5, StreamType::Task),
    ]);
    let tasks = EventFilter {
        stream_types: vec![StreamType::Task],
        ..EventFilter::default()
    };
    let fed = feed.after(0, 100, &tasks).unwrap();
    assert_eq!(positions(&fed), vec![1, 3, 5]);
    assert_eq!(fed.scanned, 5);

    let fed = feed.after(0, 2, &tasks).unwrap();
    assert_eq!(positions(&fed), vec![1, 3]);
    assert_eq!(fed.scanned, 3, "scanned up to the last event taken");
    assert!(fed.limited);
    let rest = feed.after(fed.scanned, 2, &tasks).unwrap();
    assert_eq!(positions(&rest), vec![5]);
    assert!(!rest.limited);

    // Nothing passes: still a page, scanned to the end of what is held.
    let bulk = EventFilter {
        stream_types: vec![StreamType::Bulk],
        ..EventFilter::default()
    };
    let fed = feed.after(0, 100, &bulk).unwrap();
    assert!(fed.events.is_empty());
    assert_eq!(fed.scanned, 5);
}

#[test]
fn commits_out_of_order_or_with_holes_are_not_kept() {
    let feed = Feed::default();
    feed.push(commit(11..=12));
    feed.push(vec![
        event(20, StreamType::Task),
        event(22, StreamType::Task),
    ]);
    assert_eq!(feed.after(19, 10, &ALL), None, "a commit with a hole");
    feed.push(commit(5..=6));
    assert_eq!(feed.after(4, 10, &ALL), None, "older than the newest kept");
    // Given in any order, a commit's events are kept by position.
    feed.push(vec![
        event(31, StreamType::Task),
        event(30, StreamType::Task),
    ]);
    assert_eq!(positions(&feed.after(29, 10, &ALL).unwrap()), vec![30, 31]);
}

#[test]
fn the_oldest_commits_make_room() {
    let feed = Feed::default();
    let per = 100;
    let commits = (KEPT_EVENTS / per) as i64 + 3;
    for c in 0..commits {
        let first = c * per as i64 + 1;
        feed.push(commit(first..=first + per as i64 - 1));
    }
    assert_eq!(feed.after(0, 10, &ALL), None, "the first commit is gone");
    let newest_first = (commits - 1) * per as i64 + 1;
    let fed = feed.after(newest_first - 1, i64::MAX, &ALL).unwrap();
    assert_eq!(fed.events.len(), per);
    let ring = feed.ring();
    assert!(ring.events <= KEPT_EVENTS);
    assert_eq!(
        ring.events,
        ring.commits.iter().map(|c| c.events.len()).sum::<usize>()
    );
}

#[test]
fn large_payloads_are_bounded_by_size() {
    let feed = Feed::default();
    let big = "x".repeat(KEPT_BYTES / 4);
    for p in 1..=6 {
        let mut e = event(p, StreamType::Task);
        e.payload = json!({ "text": big });
        feed.push(vec![e]);
    }
    let ring = feed.ring();
    assert!(ring.bytes <= KEPT_BYTES, "{} bytes kept", ring.bytes);
    assert!(ring.commits.len() < 6);
    drop(ring);
    assert!(feed.after(5, 10, &ALL).is_some(), "the newest is kept");
    assert_eq!(feed.after(0, 10, &ALL), None, "the oldest is not");

    // One commit larger than the whole budget is not kept at all.
    let mut huge = event(7, StreamType::Task);
    huge.payload = json!({ "text": "x".repeat(KEPT_BYTES + 1) });
    feed.push(vec![huge]);
    assert_eq!(feed.after(6, 10, &ALL), None);
}
