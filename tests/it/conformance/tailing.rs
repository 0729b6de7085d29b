//! Gap-free tailing under concurrent writers, including the hard cases.

use std::collections::HashSet;
use std::time::Duration;

use awl::log::{EventFilter, ExpectedVersion, NewEvent, StreamType};
use awl::store::{StoreOptions, TxConnection};
use futures_util::StreamExt;
use serde_json::json;

use crate::support::{Backend, TestStore, append, stream, within};

const WRITERS: usize = 16;
const ROUNDS: usize = 25;

/// One `wake.up` event appended to `s` at whatever version it is.
fn wake_up(s: &awl::log::StreamRef, payload: serde_json::Value) -> awl::log::AppendRequest {
    append(
        s,
        ExpectedVersion::Any,
        vec![NewEvent::new("wake.up", 1, payload)],
    )
}

/// This test's store and a second one on the same database, opened as another
/// process would. Caught-up tails poll once a minute, so a prompt wake-up can only
/// come from a commit.
async fn two_processes(backend: Backend) -> (TestStore, awl::store::EventStore) {
    let options = || StoreOptions {
        tail_poll: Some(Duration::from_secs(60)),
        ..StoreOptions::default()
    };
    let t = TestStore::with_options(backend, options()).await;
    let other = awl::store::EventStore::open(&t.location, options())
        .await
        .unwrap();
    (t, other)
}

/// Follow the log from `after`, page by page, until a page says it reached the head:
/// the events and the position it ended at.
async fn follow_to_head(
    store: &awl::store::EventStore,
    mut after: i64,
    filter: &EventFilter,
    following: &mut awl::store::Following,
) -> (Vec<awl::log::RecordedEvent>, i64) {
    let mut followed = Vec::new();
    loop {
        let page = store
            .read_following(after, 1_000, filter, following)
            .await
            .unwrap();
        followed.extend(page.events);
        after = page.scanned;
        if page.reached_head {
            return (followed, after);
        }
    }
}

fn tagged(kind: &str, writer: usize, round: usize, n: usize) -> Vec<NewEvent> {
    (0..n)
        .map(|i| {
            NewEvent::new(
                "tail.test",
                1,
                json!({ "kind": kind, "w": writer, "r": round, "i": i }),
            )
        })
        .collect()
}

/// 16 writers append to their own streams while a reader tails from 0. Beside them:
/// a transaction that takes its positions and then commits late, one that writes
/// another table before appending (as the executor does with wake-up rows), and
/// transactions that roll back. The reader must see every committed event exactly
/// once, in global order, never a rolled-back one, and must not stall.
pub async fn a_tail_sees_every_event_once_in_order_under_concurrent_writers(backend: Backend) {
    let t = TestStore::new(backend).await;
    let reader = {
        let tail = t.store.tail(0, EventFilter::default());
        tokio::spawn(async move {
            let mut tail = std::pin::pin!(tail);
            let mut seen = Vec::new();
            while let Some(event) = tail.next().await {
                let event = event.expect("tail error");
                let done = event.payload["kind"] == "end";
                seen.push(event);
                if done {
                    break;
                }
            }
            seen
        })
    };

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store = t.store.clone();
        writers.push(tokio::spawn(async move {
            let s = stream(StreamType::Run, format!("w{w}"));
            for r in 0..ROUNDS {
                store
                    .append(append(
                        &s,
                        ExpectedVersion::Any,
                        tagged("plain", w, r, 1 + (w + r) % 3),
                    ))
                    .await
                    .expect("plain append");
            }
        }));
    }
    // Takes its positions, then holds the transaction open while others try to write.
    let late = {
        let store = t.store.clone();
        tokio::spawn(async move {
            let s = stream(StreamType::Run, "late");
            for r in 0..5 {
                let mut tx = store.begin().await.unwrap();
                tx.append(&[append(&s, ExpectedVersion::Any, tagged("late", 0, r, 2))])
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(40)).await;
                tx.commit().await.unwrap();
            }
        })
    };
    // Writes another table first, dawdles, then appends.
    let side_first = {
        let store = t.store.clone();
        tokio::spawn(async move {
            let s = stream(StreamType::Task, "side-first");
            for r in 0..5 {
                let mut tx = store.begin().await.unwrap();
                match tx.connection() {
                    TxConnection::Postgres(c) => {
                        sqlx::query("CREATE TABLE IF NOT EXISTS wakeups (n BIGINT)")
                            .execute(&mut *c)
                            .await
                            .unwrap();
                        sqlx::query("INSERT INTO wakeups VALUES ($1)")
                            .bind(r as i64)
                            .execute(&mut *c)
                            .await
                            .unwrap();
                    }
                    TxConnection::Sqlite(c) => {
                        sqlx::query("CREATE TABLE IF NOT EXISTS wakeups (n INTEGER)")
                            .execute(&mut *c)
                            .await
                            .unwrap();
                        sqlx::query("INSERT INTO wakeups VALUES (?1)")
                            .bind(r as i64)
                            .execute(&mut *c)
                            .await
                            .unwrap();
                    }
                }
                tokio::time::sleep(Duration::from_millis(25)).await;
                tx.append(&[append(&s, ExpectedVersion::Any, tagged("side", 0, r, 1))])
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            }
        })
    };
    // Appends and rolls back: what it wrote must never be seen.
    let rollbacks = {
        let store = t.store.clone();
        tokio::spawn(async move {
            let s = stream(StreamType::Agent, "rollback");
            for r in 0..10 {
                let mut tx = store.begin().await.unwrap();
                tx.append(&[append(
                    &s,
                    ExpectedVersion::Any,
                    tagged("rolled-back", 0, r, 3),
                )])
                .await
                .unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
                tx.rollback().await.unwrap();
            }
        })
    };

    for h in writers {
        within(120, "writers", h).await.unwrap();
    }
    within(60, "late committer", late).await.unwrap();
    within(60, "side-table writer", side_first).await.unwrap();
    within(60, "rollbacks", rollbacks).await.unwrap();
    t.store
        .append(append(
            &stream(StreamType::Run, "end"),
            ExpectedVersion::NoStream,
            vec![NewEvent::new("tail.test", 1, json!({ "kind": "end" }))],
        ))
        .await
        .unwrap();

    let seen = within(60, "the tail to reach the end marker", reader)
        .await
        .unwrap();
    let head = t.store.head().await.unwrap();
    let positions: Vec<i64> = seen.iter().map(|e| e.position).collect();
    assert_eq!(
        positions,
        (1..=head).collect::<Vec<_>>(),
        "every position once, in order"
    );
    assert!(seen.iter().all(|e| e.payload["kind"] != "rolled-back"));
    let mut keys = HashSet::new();
    for e in &seen {
        assert!(
            keys.insert((e.stream.clone(), e.version)),
            "{} seen twice",
            e.describe()
        );
    }
    let plain = seen.iter().filter(|e| e.payload["kind"] == "plain").count();
    let expected_plain: usize = (0..WRITERS)
        .flat_map(|w| (0..ROUNDS).map(move |r| 1 + (w + r) % 3))
        .sum();
    assert_eq!(plain, expected_plain);
    assert_eq!(
        seen.iter().filter(|e| e.payload["kind"] == "late").count(),
        10
    );
    assert_eq!(
        seen.iter().filter(|e| e.payload["kind"] == "side").count(),
        5
    );
    // And the tail agrees with a plain read of the whole log.
    let (all, _) = t
        .store
        .read_page(0, i64::MAX, &EventFilter::default())
        .await
        .unwrap();
    assert_eq!(all, seen);
}

/// With the fallback poll set to a minute, a caught-up tail still sees a new event
/// at once: it is woken by NOTIFY (Postgres) or the in-process signal (SQLite).
pub async fn a_tail_is_woken_by_a_commit_not_by_its_poll(backend: Backend) {
    let options = StoreOptions {
        tail_poll: Some(Duration::from_secs(60)),
        ..StoreOptions::default()
    };
    let t = TestStore::with_options(backend, options).await;
    let s = stream(StreamType::Task, "wake");
    let mut tail = Box::pin(t.store.tail(0, EventFilter::default()));
    for n in 0..3 {
        // Let the tail catch up and go to sleep before the next append.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let appended = t
            .store
            .append(wake_up(&s, json!({ "n": n })))
            .await
            .unwrap();
        let event = within(10, "the woken tail", tail.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(event.position, appended.last_position);
    }
    // A transaction's commit wakes it too.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut tx = t.store.begin().await.unwrap();
    tx.append(&[wake_up(&s, json!({}))]).await.unwrap();
    tx.commit().await.unwrap();
    let event = within(10, "the woken tail", tail.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(event.position, 4);
}

/// Another process's commit wakes a caught-up tail at once (Postgres: its NOTIFY;
/// the process's own notifications are dropped, as its followers were woken when it
/// committed). The hard case: a transaction of this process takes positions and
/// rolls back, and the other process's commit then takes those same positions; it
/// must not be mistaken for this process's. On SQLite other processes' commits are
/// seen by the poll, so there is nothing to check there.
pub async fn a_tail_is_woken_by_another_process_commit(backend: Backend) {
    if backend == Backend::Sqlite {
        return;
    }
    let (t, other) = two_processes(backend).await;
    let s = stream(StreamType::Task, "elsewhere");
    // Followed all along in the background, as a server's followers are (a tail
    // polled only when asked would take any signal left pending meanwhile).
    let (seen, mut received) = tokio::sync::mpsc::unbounded_channel();
    let mut tail = Box::pin(t.store.tail(0, EventFilter::default()));
    let follower = tokio::spawn(async move {
        while let Some(event) = tail.next().await {
            if seen.send(event).is_err() {
                return;
            }
        }
    });
    for n in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if n == 1 {
            // Positions this process took and gave back.
            let mut tx = t.store.begin().await.unwrap();
            let rolled_back = stream(StreamType::Task, "rolled-back");
            tx.append(&[wake_up(&rolled_back, json!({}))])
                .await
                .unwrap();
            tx.rollback().await.unwrap();
            // The tail settles again before the other process takes those positions.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let appended = other.append(wake_up(&s, json!({ "n": n }))).await.unwrap();
        let event = within(10, "the tail woken by another process", received.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(event.position, appended.last_position);
    }
    follower.abort();
}

/// Payloads of every JSON shape, to show the feed's events are the log's own.
fn varied(n: usize) -> serde_json::Value {
    json!({
        "n": n,
        "float": 0.1 + n as f64,
        "tiny": 0.30000000000000004,
        "huge": 1e300,
        "zero": 0.0,
        "negative": -42,
        "big": u64::MAX,
        "small": i64::MIN,
        "text": format!("ünïcødé \"quoted\" \\ back\nslash {n} ✓"),
        "nested": { "b": [1, 2.5, null, true, "x"], "a": {}, "empty": [] },
    })
}

/// A follower of the log takes this process's own commits from memory, and what it
/// takes is exactly what a read of the log gives: positions, versions, payloads of
/// every JSON shape, metadata, `recorded_at`. Commits of many requests (one refused
/// for a stale version) and of several events per request; a transaction's commit
/// in between is not kept in memory and is read from the database.
pub async fn a_follower_reads_its_own_commits_from_memory_as_the_log_holds_them(backend: Backend) {
    let t = TestStore::new(backend).await;
    let filter = EventFilter::default();
    let mut following = awl::store::Following::default();
    // The first read goes to the database.
    let page = t
        .store
        .read_following(0, 100, &filter, &mut following)
        .await
        .unwrap();
    assert!(page.events.is_empty() && page.reached_head);
    assert_eq!(following.pages(), (0, 1));

    let mut after = 0;
    for round in 0..4usize {
        // Concurrent appends: group-committed, several requests per commit.
        let mut appends = Vec::new();
        for w in 0..8usize {
            let store = t.store.clone();
            let s = stream(StreamType::Task, format!("feed-{w}"));
            let expected = if w == 7 && round > 0 {
                // Stale on purpose: refused, and it must not show up.
                ExpectedVersion::Exactly(0)
            } else {
                ExpectedVersion::Any
            };
            let metadata = awl::log::Metadata {
                correlation_id: Some(uuid::Uuid::now_v7()),
                ..awl::log::Metadata::actor(format!("writer {w}"))
            };
            let events = (0..1 + w % 3)
                .map(|i| {
                    NewEvent::new("feed.test", 1, varied(round * 100 + w * 10 + i))
                        .with_metadata(metadata.clone())
                })
                .collect();
            appends.push(tokio::spawn(async move {
                store.append(append(&s, expected, events)).await
            }));
        }
        let mut refused = 0;
        for a in appends {
            if within(30, "an append", a).await.unwrap().is_err() {
                refused += 1;
            }
        }
        assert_eq!(refused, usize::from(round > 0));
        if round == 2 {
            // A transaction's commit: not in memory, read from the log.
            let mut tx = t.store.begin().await.unwrap();
            tx.append(&[wake_up(&stream(StreamType::Run, "tx"), varied(7))])
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
        let head = t.store.head().await.unwrap();
        let (logged, _) = t.store.read_page(after, 1_000, &filter).await.unwrap();
        let (followed, end) = follow_to_head(&t.store, after, &filter, &mut following).await;
        after = end;
        assert_eq!(after, head, "round {round}: caught up to the head");
        assert_eq!(followed, logged, "round {round}: the log's own events");
    }
    let (fed, read) = following.pages();
    assert!(
        fed >= 4,
        "own commits came from memory: {fed} fed, {read} read"
    );
    assert!(
        read >= 2,
        "the transaction's commit was read: {fed} fed, {read} read"
    );

    // A filtered follower gets the same as a filtered read.
    let runs = EventFilter {
        stream_types: vec![StreamType::Run],
        ..EventFilter::default()
    };
    let before = t.store.head().await.unwrap();
    t.store
        .append(wake_up(&stream(StreamType::Task, "other"), json!({})))
        .await
        .unwrap();
    t.store
        .append(wake_up(&stream(StreamType::Run, "mine"), varied(9)))
        .await
        .unwrap();
    let (followed, _) = follow_to_head(&t.store, before, &runs, &mut following).await;
    let (logged, _) = t.store.read_page(before, 1_000, &runs).await.unwrap();
    assert_eq!(followed, logged);
    assert_eq!(followed.len(), 1);
}

/// Own commits are taken from memory only while nothing else is known to follow
/// them: another process's commit, announced by its notification, is read from the
/// database, even when it lands right after a commit the follower takes from memory.
/// (SQLite has no announcements: another process's commits are found by the poll.)
pub async fn a_follower_reads_another_process_commit_from_the_log(backend: Backend) {
    if backend == Backend::Sqlite {
        return;
    }
    let (t, other) = two_processes(backend).await;
    let theirs = stream(StreamType::Task, "theirs");
    // A tail starts this process's listener. Once it has been woken for another
    // process's commit after its first read, the listener is listening.
    let mut tail = Box::pin(t.store.tail(0, EventFilter::default()));
    for n in 0..2 {
        other
            .append(wake_up(&theirs, json!({ "n": n })))
            .await
            .unwrap();
        within(10, "the tail", tail.next()).await.unwrap().unwrap();
    }
    let filter = EventFilter::default();
    let mut following = awl::store::Following::default();
    let start = t.store.head().await.unwrap();
    let page = t
        .store
        .read_following(0, 100, &filter, &mut following)
        .await
        .unwrap();
    assert_eq!((page.scanned, page.reached_head), (start, true));

    let s = stream(StreamType::Task, "mine");
    let first = t
        .store
        .append(wake_up(&s, json!({ "n": 1 })))
        .await
        .unwrap();
    let page = t
        .store
        .read_following(start, 100, &filter, &mut following)
        .await
        .unwrap();
    assert_eq!(following.pages().0, 1, "an own commit from memory");
    assert_eq!(page.scanned, first.last_position);
    assert!(page.reached_head);

    // This process commits, then the other; the other's notification arrives.
    let second = t
        .store
        .append(wake_up(&s, json!({ "n": 2 })))
        .await
        .unwrap();
    let elsewhere = other.append(wake_up(&theirs, json!({}))).await.unwrap();
    assert_eq!(elsewhere.last_position, second.last_position + 1);
    within(10, "the tail to hear of it", async {
        loop {
            let e = tail.next().await.unwrap().unwrap();
            if e.position == elsewhere.last_position {
                return;
            }
        }
    })
    .await;
    let page = t
        .store
        .read_following(first.last_position, 100, &filter, &mut following)
        .await
        .unwrap();
    assert_eq!(following.pages().0, 2, "the own commit from memory");
    assert_eq!(page.scanned, second.last_position);
    assert!(
        !page.reached_head,
        "another process's commit is known to follow"
    );
    let page = t
        .store
        .read_following(page.scanned, 100, &filter, &mut following)
        .await
        .unwrap();
    assert_eq!(following.pages().0, 2, "read from the log");
    assert_eq!(page.events.len(), 1);
    assert_eq!(page.events[0].stream.id, "theirs");
    assert!(page.reached_head);

    // And after it, own commits come from memory again.
    let third = t
        .store
        .append(wake_up(&s, json!({ "n": 3 })))
        .await
        .unwrap();
    let page = t
        .store
        .read_following(elsewhere.last_position, 100, &filter, &mut following)
        .await
        .unwrap();
    assert_eq!(following.pages().0, 3);
    assert_eq!(page.scanned, third.last_position);
    assert!(page.reached_head);
}
