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

use crate::support::{Backend, TestStore, append, events, stream, within};

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

/// A batch that waits for the log's writer behind another batch on the same streams
/// is judged on the versions that batch left, whatever it read while it waited: an
/// expected version the other batch moved on is a conflict that reports the version
/// as it now is, and a batch expecting any version lands after it. (awl reads the
/// versions under the log's lock; a store that read them before it, as the variant in
/// benches/pgbench/variants/ does, must check them under it to pass.)
pub async fn a_batch_waiting_behind_another_is_judged_on_what_that_one_wrote(backend: Backend) {
    let t = TestStore::new(backend).await;
    let a = stream(StreamType::Run, "a");
    let b = stream(StreamType::Run, "b");
    let mut setup = t.store.begin().await.unwrap();
    setup
        .append(&[
            append(&a, ExpectedVersion::NoStream, events(0, 1)),
            append(&b, ExpectedVersion::NoStream, events(0, 1)),
        ])
        .await
        .unwrap();
    setup.commit().await.unwrap();

    // What the waiting batch expects of each stream: the versions as they were
    // (refused), the versions the other batch leaves (it lands), any (it lands).
    for case in ["as they were", "as they will be", "any"] {
        let before = t.store.read_stream(&a).await.unwrap().len() as i64;
        let expected = match case {
            "as they were" => ExpectedVersion::Exactly(before),
            "as they will be" => ExpectedVersion::Exactly(before + 2),
            _ => ExpectedVersion::Any,
        };
        let mut first = t.store.begin().await.unwrap();
        first
            .append(&[
                append(&a, ExpectedVersion::Exactly(before), events(0, 2)),
                append(&b, ExpectedVersion::Exactly(before), events(0, 2)),
            ])
            .await
            .unwrap();
        let (store, a2, b2) = (t.store.clone(), a.clone(), b.clone());
        let second = tokio::spawn(async move {
            let mut tx = store.begin().await?;
            let results = tx
                .append_each(&[
                    append(&a2, expected, events(0, 1)),
                    append(&b2, expected, events(0, 1)),
                ])
                .await?;
            tx.commit().await?;
            Ok::<_, StoreError>(results)
        });
        second_batch_waits(&t, backend).await;
        assert!(
            !second.is_finished(),
            "{case}: a batch cannot land while another holds the log's writer"
        );
        first.commit().await.unwrap();
        let results = within(10, "the waiting batch", second)
            .await
            .unwrap()
            .unwrap();
        for r in &results {
            if case == "as they were" {
                assert!(
                    matches!(r, Err(StoreError::Conflict { actual, .. }) if *actual == before + 2),
                    "{case}: {results:?}"
                );
            } else {
                let appended = r.as_ref().expect(case);
                assert_eq!(appended.stream_version, before + 3, "{case}");
            }
        }
    }
    assert_positions_dense(&t).await;
    for s in [&a, &b] {
        let versions: Vec<i64> = t
            .store
            .read_stream(s)
            .await
            .unwrap()
            .iter()
            .map(|e| e.version)
            .collect();
        assert_eq!(versions, (1..=9).collect::<Vec<_>>());
    }
}

/// Eight writers append batches to two shared streams and one of their own at once,
/// retrying each refused request from the version its conflict reports: every event
/// lands exactly once, each stream's versions run 1..n, and positions are dense.
pub async fn batches_race_on_shared_streams(backend: Backend) {
    const BATCH_WRITERS: usize = 8;
    const BATCHES: usize = 12;
    let t = TestStore::new(backend).await;
    let shared = [
        stream(StreamType::Run, "shared-1"),
        stream(StreamType::Run, "shared-2"),
    ];
    let barrier = Arc::new(Barrier::new(BATCH_WRITERS));
    let mut handles = Vec::new();
    for w in 0..BATCH_WRITERS {
        let (store, shared, barrier) = (t.store.clone(), shared.clone(), barrier.clone());
        handles.push(tokio::spawn(async move {
            let own = stream(StreamType::Run, format!("own-{w}"));
            // What each stream is believed to hold, and how many events each has
            // landed of this writer's.
            let mut expected = [0i64; 2];
            let mut landed = [0usize; 2];
            let mut conflicts = 0usize;
            barrier.wait().await;
            while landed.iter().any(|&n| n < BATCHES) {
                let pending: Vec<usize> = (0..2).filter(|&i| landed[i] < BATCHES).collect();
                let mut requests: Vec<_> = pending
                    .iter()
                    .map(|&i| {
                        let event = NewEvent::new(
                            "race.batch",
                            1,
                            json!({ "writer": w, "seq": landed[i] }),
                        );
                        let version = match expected[i] {
                            0 => ExpectedVersion::NoStream,
                            v => ExpectedVersion::Exactly(v),
                        };
                        append(&shared[i], version, vec![event])
                    })
                    .collect();
                requests.push(append(
                    &own,
                    ExpectedVersion::Any,
                    vec![NewEvent::new("race.own", 1, json!({}))],
                ));
                let mut tx = store.begin().await?;
                let results = tx.append_each(&requests).await?;
                tx.commit().await?;
                for (&i, result) in pending.iter().zip(&results) {
                    match result {
                        Ok(appended) => {
                            expected[i] = appended.stream_version;
                            landed[i] += 1;
                        }
                        Err(StoreError::Conflict { actual, .. }) => {
                            assert!(*actual > expected[i], "a conflict reports a newer version");
                            expected[i] = *actual;
                            conflicts += 1;
                        }
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                }
                assert!(results.last().is_some_and(|r| r.is_ok()), "{results:?}");
            }
            Ok::<_, StoreError>(conflicts)
        }));
    }
    let mut conflicts = 0;
    for h in handles {
        conflicts += within(60, "the batch writers", h).await.unwrap().unwrap();
    }
    assert!(
        conflicts > 0,
        "eight writers on two streams must collide at least once"
    );
    for s in &shared {
        let stored = t.store.read_stream(s).await.unwrap();
        assert_eq!(
            stored.iter().map(|e| e.version).collect::<Vec<_>>(),
            (1..=(BATCH_WRITERS * BATCHES) as i64).collect::<Vec<_>>()
        );
        let distinct: HashSet<(u64, u64)> = stored
            .iter()
            .map(|e| {
                (
                    e.payload["writer"].as_u64().unwrap(),
                    e.payload["seq"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(distinct.len(), BATCH_WRITERS * BATCHES, "no event twice");
    }
    assert_positions_dense(&t).await;
}

/// Until the second batch of the test above is waiting for the log's writer: on
/// Postgres, a backend of this database waiting on the log's advisory lock (having
/// read the versions it will be judged on, if it reads them first); on SQLite, where
/// the writer's lock is not visible, long enough for it to have asked.
async fn second_batch_waits(t: &TestStore, backend: Backend) {
    if backend != Backend::Postgres {
        tokio::time::sleep(Duration::from_millis(300)).await;
        return;
    }
    within(10, "the second batch waiting for the log's lock", async {
        loop {
            let rows = t
                .store
                .query_rows(
                    "SELECT count(*) AS waiting FROM pg_stat_activity \
                     WHERE datname = current_database() \
                       AND wait_event_type = 'Lock' AND wait_event = 'advisory'",
                    &[],
                )
                .await
                .unwrap();
            if rows[0]["waiting"].as_i64().unwrap_or(0) > 0 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// The whole log's positions run 1..n with no hole.
async fn assert_positions_dense(t: &TestStore) {
    let all = t
        .store
        .read_page(0, 100_000, &awl::log::EventFilter::default())
        .await
        .unwrap()
        .0;
    assert_eq!(
        all.iter().map(|e| e.position).collect::<Vec<_>>(),
        (1..=all.len() as i64).collect::<Vec<_>>(),
        "positions are dense"
    );
}
