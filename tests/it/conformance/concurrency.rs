//! Optimistic concurrency under contention, and a follower's lease among processes.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use awl::clock::system_clock;
use awl::log::{ExpectedVersion, NewEvent, StreamType};
use awl::store::{FollowerLease, StoreError};
use chrono::Utc;
use serde_json::json;
use tokio::sync::{Barrier, watch};

use crate::support::{Backend, TestStore, append, stream, within};

const WRITERS: usize = 16;
const EACH: usize = 20;

/// 16 tasks append to one stream with expected versions: in a simultaneous round,
/// exactly one wins and 15 get conflicts; then, retrying on conflict, every version
/// is taken exactly once and no event is written twice.
pub async fn sixteen_tasks_race_on_one_stream(backend: Backend) {
    let t = TestStore::new(backend).await;
    let s = stream(StreamType::Run, "contended");
    let barrier = Arc::new(Barrier::new(WRITERS));

    // Round one: everybody expects an empty stream at the same moment.
    let mut handles = Vec::new();
    for w in 0..WRITERS {
        let (store, s, barrier) = (t.store.clone(), s.clone(), barrier.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .append(append(
                    &s,
                    ExpectedVersion::NoStream,
                    vec![NewEvent::new("race.won", 1, json!({ "writer": w }))],
                ))
                .await
        }));
    }
    let mut winners = 0;
    let mut losers = 0;
    for h in handles {
        match h.await.unwrap() {
            Ok(appended) => {
                assert_eq!(appended.stream_version, 1);
                winners += 1;
            }
            Err(StoreError::Conflict { actual: 1, .. }) => losers += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!((winners, losers), (1, WRITERS - 1));

    // Round two: each writer appends EACH events, retrying from the version a
    // conflict reports.
    let mut handles = Vec::new();
    for w in 0..WRITERS {
        let (store, s) = (t.store.clone(), s.clone());
        handles.push(tokio::spawn(async move {
            let mut expected = 1;
            let mut conflicts = 0;
            for seq in 0..EACH {
                loop {
                    let event = NewEvent::new("race.step", 1, json!({ "writer": w, "seq": seq }));
                    match store
                        .append(append(&s, ExpectedVersion::Exactly(expected), vec![event]))
                        .await
                    {
                        Ok(appended) => {
                            expected = appended.stream_version;
                            break;
                        }
                        Err(StoreError::Conflict { actual, .. }) => {
                            conflicts += 1;
                            expected = actual;
                        }
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                }
            }
            conflicts
        }));
    }
    let mut conflicts = 0;
    for h in handles {
        conflicts += within(120, "the writers", h).await.unwrap();
    }
    assert!(
        conflicts > 0,
        "16 writers on one stream must collide at least once"
    );

    let read = t.store.read_stream(&s).await.unwrap();
    let total = 1 + WRITERS * EACH;
    assert_eq!(read.len(), total);
    let versions: Vec<i64> = read.iter().map(|e| e.version).collect();
    assert_eq!(versions, (1..=total as i64).collect::<Vec<_>>());
    let mut seen = HashSet::new();
    for e in &read[1..] {
        let key = (
            e.payload["writer"].as_u64().unwrap(),
            e.payload["seq"].as_u64().unwrap(),
        );
        assert!(seen.insert(key), "event {key:?} written twice");
    }
    assert_eq!(seen.len(), WRITERS * EACH);
    assert_eq!(t.store.head().await.unwrap(), total as i64);
}

/// Two stores over one database (two processes' appenders, each group-committing
/// its own requests: once each sees the other's commits, it forms its batches under
/// the log's lock) take turns on one stream: every version is taken once, no event
/// is written twice or lost, positions stay dense, and each event is at the
/// position its append answered.
pub async fn two_processes_race_on_one_stream(backend: Backend) {
    let t = TestStore::new(backend).await;
    let other = awl::store::EventStore::open(&t.location, Default::default())
        .await
        .unwrap();
    let s = stream(StreamType::Run, "two-processes");
    let mut handles = Vec::new();
    for w in 0..WRITERS {
        let store = if w % 2 == 0 {
            t.store.clone()
        } else {
            other.clone()
        };
        let s = s.clone();
        handles.push(tokio::spawn(async move {
            let (mut expected, mut at) = (0, Vec::new());
            for seq in 0..EACH {
                loop {
                    let event = NewEvent::new("race.step", 1, json!({ "writer": w, "seq": seq }));
                    let exact = ExpectedVersion::Exactly(expected);
                    match store.append(append(&s, exact, vec![event])).await {
                        Ok(appended) => {
                            expected = appended.stream_version;
                            at.push((appended.first_position, w, seq));
                            break;
                        }
                        Err(StoreError::Conflict { actual, .. }) => expected = actual,
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                }
            }
            at
        }));
    }
    let mut answered = Vec::new();
    for h in handles {
        answered.extend(within(120, "the writers", h).await.unwrap());
    }
    let total = WRITERS * EACH;
    let read = t.store.read_stream(&s).await.unwrap();
    assert_eq!(read.len(), total);
    let versions: Vec<i64> = read.iter().map(|e| e.version).collect();
    assert_eq!(versions, (1..=total as i64).collect::<Vec<_>>());
    let positions: Vec<i64> = read.iter().map(|e| e.position).collect();
    assert_eq!(positions, (1..=total as i64).collect::<Vec<_>>());
    answered.sort();
    for ((position, w, seq), e) in answered.iter().zip(&read) {
        assert_eq!(e.position, *position);
        assert_eq!(
            (e.payload["writer"].as_u64(), e.payload["seq"].as_u64()),
            (Some(*w as u64), Some(*seq as u64))
        );
    }
    assert_eq!(answered.len(), total, "every append answered once");
}

/// 16 tasks reserve a rate-limit token of the same buckets at the same moment: each
/// gets a time of its own, exactly the times the rate allows in some order (the
/// bucket's row serialises them), and every bucket moved past the last of them.
pub async fn rate_tokens_reserved_at_once_are_spaced_by_the_rate(backend: Backend) {
    use awl::domain::rate::RateBucket;
    use chrono::{DateTime, TimeDelta, Utc};

    let t = TestStore::new(backend).await;
    let now = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(20_000);
    let buckets = vec![
        RateBucket {
            scope: "rate:api".into(),
            per_second: 10.0,
            burst: 3,
        },
        RateBucket {
            scope: "rate:api:key:acme".into(),
            per_second: 100.0,
            burst: 1,
        },
    ];
    let barrier = Arc::new(Barrier::new(WRITERS));
    let mut handles = Vec::new();
    for _ in 0..WRITERS {
        let (store, buckets, barrier) = (t.store.clone(), buckets.clone(), barrier.clone());
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            store.reserve_rate(&buckets, now).await
        }));
    }
    let mut went = Vec::new();
    for h in handles {
        let r = within(30, "a reservation", h)
            .await
            .expect("join")
            .expect("a reservation");
        went.push((r.go - now).num_milliseconds());
    }
    went.sort_unstable();
    // The burst of the slow bucket goes as fast as the keyed bucket lets it (one
    // every 10 ms), then the slow bucket rules: one every 100 ms.
    let expected: Vec<i64> = (0..WRITERS as i64)
        .map(|i| if i < 3 { i * 10 } else { (i - 2) * 100 })
        .collect();
    assert_eq!(went, expected);
    let one_more = t.store.reserve_rate(&buckets, now).await.expect("one more");
    assert_eq!((one_more.go - now).num_milliseconds(), 1_400);
    assert_eq!(
        buckets[one_more.by].scope, "rate:api",
        "the slow bucket held it back"
    );
    // Nothing to take: go now.
    let none = t.store.reserve_rate(&[], now).await.expect("no buckets");
    assert_eq!(none.go, now);
}

/// A follower's lease is kept by a task of its own: while the follower is busy for
/// twice as long as the lease lasts, the keeper renews it and another process's claims
/// fail; once stopped, it gives the lease up and the other's next claim takes it.
pub async fn a_follower_lease_is_renewed_by_its_keeper_and_given_up(backend: Backend) {
    let t = TestStore::new(backend).await;
    let lease = FollowerLease {
        name: "test-follower",
        owner: "busy".into(),
        lease: Duration::from_secs(2),
        renew: Duration::from_millis(100),
        clock: system_clock(),
    };
    let (stop, stop_rx) = watch::channel(false);
    let (mut held, keeper) = lease.spawn(t.store.clone(), 7, stop_rx);
    within(10, "the lease", held.wait_for(|h| *h))
        .await
        .unwrap();
    let other = async || {
        let now = Utc::now();
        let until = now + chrono::Duration::seconds(2);
        t.store
            .claim_follower("test-follower", "other", now, until, 0)
            .await
            .unwrap()
    };
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!other().await, "the lease lapsed while its keeper ran");
        assert!(*held.borrow());
    }
    stop.send(true).unwrap();
    within(10, "the keeper to stop", keeper).await.unwrap();
    assert!(!*held.borrow(), "a stopped keeper says it holds nothing");
    assert!(other().await, "the lease was given up");
    let start = t.store.follower_checkpoint("test-follower").await.unwrap();
    assert_eq!(start, Some(7), "the row made at the keeper's start");
}
