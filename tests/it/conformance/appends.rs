//! Appending and reading back.

use awl::log::{AppendRequest, EventFilter, ExpectedVersion, Metadata, NewEvent, StreamType};
use awl::store::{StoreError, TxConnection};
use serde_json::json;

use crate::support::{Backend, TestStore, append, events, stream};

pub async fn appends_and_reads_back_a_stream(backend: Backend) {
    let t = TestStore::new(backend).await;
    let s = stream(StreamType::Task, "t-1");
    let meta = Metadata {
        actor: Some("ada".into()),
        correlation_id: Some(uuid::Uuid::now_v7()),
        causation_id: None,
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        command_id: Some(uuid::Uuid::now_v7()),
        scope: Some("team:platform".into()),
    };
    let first = t
        .store
        .append(append(
            &s,
            ExpectedVersion::NoStream,
            vec![
                NewEvent::new("test.happened", 3, json!({"a": [1, 2], "b": "ü"}))
                    .with_metadata(meta.clone()),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(
        (
            first.first_position,
            first.last_position,
            first.stream_version
        ),
        (1, 1, 1)
    );
    let second = t
        .store
        .append(append(&s, ExpectedVersion::Exactly(1), events(1, 3)))
        .await
        .unwrap();
    assert_eq!(
        (
            second.first_position,
            second.last_position,
            second.stream_version
        ),
        (2, 4, 4)
    );

    let read = t.store.read_stream(&s).await.unwrap();
    assert_eq!(read.len(), 4);
    assert_eq!(
        read.iter().map(|e| e.version).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(
        read.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(read[0].event_type, "test.happened");
    assert_eq!(read[0].event_version, 3);
    assert_eq!(read[0].payload, json!({"a": [1, 2], "b": "ü"}));
    assert_eq!(read[0].metadata, meta);
    assert_eq!(read[0].stream, s);
    assert_eq!(read[2].payload, json!({"n": 2}));
    let age = chrono::Utc::now() - read[0].recorded_at;
    assert!(
        age.num_seconds().abs() < 60,
        "recorded_at is now-ish: {age}"
    );
    assert_eq!(t.store.read_stream_after(&s, 2).await.unwrap().len(), 2);
    assert!(
        t.store
            .read_stream(&stream(StreamType::Task, "nope"))
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(t.store.head().await.unwrap(), 4);
}

pub async fn wrong_expected_version_is_a_conflict_and_writes_nothing(backend: Backend) {
    let t = TestStore::new(backend).await;
    let s = stream(StreamType::Run, "r-1");
    t.store
        .append(append(&s, ExpectedVersion::NoStream, events(0, 2)))
        .await
        .unwrap();
    for expected in [
        ExpectedVersion::NoStream,
        ExpectedVersion::Exactly(1),
        ExpectedVersion::Exactly(3),
    ] {
        match t.store.append(append(&s, expected, events(10, 2))).await {
            Err(StoreError::Conflict {
                stream,
                expected: e,
                actual,
            }) => {
                assert_eq!((stream, e, actual), (s.clone(), expected, 2));
            }
            other => panic!("expected a conflict for {expected:?}, got {other:?}"),
        }
    }
    let err = t
        .store
        .append(append(&s, ExpectedVersion::Exactly(0), events(0, 1)))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "conflict on stream run/r-1: expected version 0, but the stream is at version 2"
    );
    assert_eq!(t.store.read_stream(&s).await.unwrap().len(), 2);
    assert_eq!(t.store.head().await.unwrap(), 2);
    // Any always appends.
    let any = t
        .store
        .append(append(&s, ExpectedVersion::Any, events(0, 1)))
        .await
        .unwrap();
    assert_eq!(any.stream_version, 3);
}

pub async fn invalid_appends_are_refused_before_the_database(backend: Backend) {
    let t = TestStore::new(backend).await;
    let s = stream(StreamType::Agent, "a");
    let err = t
        .store
        .append(append(&s, ExpectedVersion::Any, vec![]))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidAppend { .. }), "{err}");
    let err = t
        .store
        .append(append(
            &stream(StreamType::Agent, " "),
            ExpectedVersion::Any,
            events(0, 1),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid append to agent/ : the stream id is empty"
    );
    // A NUL character: Postgres's JSONB cannot hold it, and SQLite refuses it too, so
    // both stores keep the same log.
    let nul = || NewEvent::new("test.happened", 1, json!({"out": ["ok", "a\u{0}b"]}));
    let err = t
        .store
        .append(append(&s, ExpectedVersion::Any, vec![nul()]))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid append to agent/a: event 0 (test.happened) holds a NUL character (\\u0000) \
         in its payload at `/out/1`, which the log cannot store"
    );
    assert_eq!(
        awl::error::Classified::kind(&err),
        awl::error::ErrorKind::Invalid
    );
    // In a transaction's batch, only that request is refused.
    let mut tx = t.store.begin().await.unwrap();
    let results = tx
        .append_each(&[
            append(&s, ExpectedVersion::Any, vec![nul()]),
            append(&s, ExpectedVersion::Any, events(0, 1)),
        ])
        .await
        .unwrap();
    assert!(
        matches!(results[0], Err(StoreError::InvalidAppend { .. })),
        "{results:?}"
    );
    assert!(results[1].is_ok(), "{results:?}");
    tx.commit().await.unwrap();
    let stored = t.store.read_stream(&s).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].payload, json!({"n": 0}));
}

pub async fn transactions_append_many_streams_all_or_nothing(backend: Backend) {
    let t = TestStore::new(backend).await;
    let a = stream(StreamType::Run, "a");
    let b = stream(StreamType::Task, "b");
    let mut tx = t.store.begin().await.unwrap();
    let done = tx
        .append(&[
            append(&a, ExpectedVersion::NoStream, events(0, 2)),
            append(&b, ExpectedVersion::NoStream, events(0, 1)),
        ])
        .await
        .unwrap();
    assert_eq!(
        done.iter().map(|d| d.last_position).collect::<Vec<_>>(),
        vec![2, 3]
    );
    tx.commit().await.unwrap();

    // One conflicting request refuses the whole call, and the transaction rolls back.
    let mut tx = t.store.begin().await.unwrap();
    let err = tx
        .append(&[
            append(&a, ExpectedVersion::Exactly(2), events(2, 1)),
            append(&b, ExpectedVersion::Exactly(0), events(1, 1)),
        ])
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err}");
    tx.rollback().await.unwrap();

    // A rolled-back append leaves nothing, not even a hole.
    let mut tx = t.store.begin().await.unwrap();
    tx.append(&[append(&a, ExpectedVersion::Exactly(2), events(2, 5))])
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(t.store.head().await.unwrap(), 3);
    let next = t
        .store
        .append(append(&a, ExpectedVersion::Exactly(2), events(2, 1)))
        .await
        .unwrap();
    assert_eq!(next.first_position, 4);

    // Other rows in the same transaction commit with the events.
    let mut tx = t.store.begin().await.unwrap();
    match tx.connection() {
        TxConnection::Postgres(c) => {
            sqlx::query("CREATE TABLE side (n BIGINT)")
                .execute(&mut *c)
                .await
                .unwrap();
            sqlx::query("INSERT INTO side VALUES (1)")
                .execute(&mut *c)
                .await
                .unwrap();
        }
        TxConnection::Sqlite(c) => {
            sqlx::query("CREATE TABLE side (n INTEGER)")
                .execute(&mut *c)
                .await
                .unwrap();
            sqlx::query("INSERT INTO side VALUES (1)")
                .execute(&mut *c)
                .await
                .unwrap();
        }
    }
    tx.append(&[append(&b, ExpectedVersion::Exactly(1), events(1, 1))])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(t.store.head().await.unwrap(), 5);
}

pub async fn pages_and_filters_the_whole_log(backend: Backend) {
    let t = TestStore::new(backend).await;
    for i in 0..5 {
        let kind = if i % 2 == 0 {
            StreamType::Run
        } else {
            StreamType::Task
        };
        t.store
            .append(AppendRequest::new(
                stream(kind, format!("s{i}")),
                ExpectedVersion::NoStream,
                vec![
                    NewEvent::new("x.started", 1, json!({"i": i})),
                    NewEvent::new("x.finished", 1, json!({"i": i})),
                ],
            ))
            .await
            .unwrap();
    }
    let all = EventFilter::default();
    let (page, next) = t.store.read_page(0, 4, &all).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(next, 4);
    let (page, next) = t.store.read_page(next, 100, &all).await.unwrap();
    assert_eq!(page.len(), 6);
    assert_eq!(next, 10);
    let (page, next) = t.store.read_page(10, 100, &all).await.unwrap();
    assert!(page.is_empty());
    assert_eq!(next, 10);

    let tasks_finished = EventFilter {
        stream_types: vec![StreamType::Task],
        event_types: vec!["x.finished".into()],
        ..EventFilter::default()
    };
    let (page, next) = t.store.read_page(0, 100, &tasks_finished).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![4, 8]
    );
    assert_eq!(next, 10, "the reader moves past what it scanned");
    let one = EventFilter {
        stream_id: Some("s2".into()),
        ..EventFilter::default()
    };
    let (page, _) = t.store.read_page(0, 100, &one).await.unwrap();
    assert_eq!(
        page.iter().map(|e| e.position).collect::<Vec<_>>(),
        vec![5, 6]
    );
    let future = EventFilter {
        since: Some(chrono::Utc::now() + chrono::Duration::hours(1)),
        ..EventFilter::default()
    };
    assert!(
        t.store
            .read_page(0, 100, &future)
            .await
            .unwrap()
            .0
            .is_empty()
    );
    let past = EventFilter {
        since: Some(chrono::Utc::now() - chrono::Duration::hours(1)),
        until: Some(chrono::Utc::now() + chrono::Duration::hours(1)),
        ..EventFilter::default()
    };
    assert_eq!(t.store.read_page(0, 100, &past).await.unwrap().0.len(), 10);
    for e in t.store.read_page(0, 100, &tasks_finished).await.unwrap().0 {
        assert!(tasks_finished.matches(&e));
    }
}

pub async fn the_log_is_append_only(backend: Backend) {
    let t = TestStore::new(backend).await;
    let s = stream(StreamType::Task, "t");
    t.store
        .append(append(&s, ExpectedVersion::NoStream, events(0, 1)))
        .await
        .unwrap();
    let mut tx = t.store.begin().await.unwrap();
    let (update, delete) = match tx.connection() {
        TxConnection::Postgres(c) => (
            sqlx::query("UPDATE events SET payload = '{}'")
                .execute(&mut *c)
                .await
                .map(|_| ()),
            Ok(()),
        ),
        TxConnection::Sqlite(c) => (
            sqlx::query("UPDATE events SET payload = '{}'")
                .execute(&mut *c)
                .await
                .map(|_| ()),
            sqlx::query("DELETE FROM events")
                .execute(&mut *c)
                .await
                .map(|_| ()),
        ),
    };
    let update = update.unwrap_err().to_string();
    assert!(update.contains("append-only"), "{update}");
    if let Err(e) = delete {
        assert!(e.to_string().contains("append-only"), "{e}");
    }
    tx.rollback().await.unwrap();
    if backend == Backend::Postgres {
        let mut tx = t.store.begin().await.unwrap();
        if let TxConnection::Postgres(c) = tx.connection() {
            let err = sqlx::query("DELETE FROM events")
                .execute(&mut *c)
                .await
                .unwrap_err();
            assert!(err.to_string().contains("append-only"), "{err}");
        }
        tx.rollback().await.unwrap();
        let mut tx = t.store.begin().await.unwrap();
        if let TxConnection::Postgres(c) = tx.connection() {
            let err = sqlx::query("TRUNCATE events")
                .execute(&mut *c)
                .await
                .unwrap_err();
            assert!(err.to_string().contains("append-only"), "{err}");
        }
        tx.rollback().await.unwrap();
    }
    assert_eq!(t.store.read_stream(&s).await.unwrap().len(), 1);
}

/// Several streams read at once for folding: each from its last `run.continued` (the
/// event that carries the whole state) on, or whole when it has none; an id asked
/// twice read once, an unknown id empty, another kind's stream of the same id not
/// mixed in.
pub async fn streams_are_read_from_their_last_continuation(backend: Backend) {
    let t = TestStore::new(backend).await;
    let continued = |n: usize| NewEvent::new(awl::log::CONTINUED_EVENT_TYPE, 1, json!({ "n": n }));
    let mut long = events(0, 2);
    long.push(continued(2));
    long.extend(events(3, 1));
    long.push(continued(4));
    long.extend(events(5, 2));
    t.store
        .append(append(
            &stream(StreamType::Run, "r-long"),
            ExpectedVersion::NoStream,
            long,
        ))
        .await
        .expect("append the continued run");
    t.store
        .append(append(
            &stream(StreamType::Run, "r-short"),
            ExpectedVersion::NoStream,
            events(0, 2),
        ))
        .await
        .expect("append the plain run");
    // The same id in another kind, continued: not a run's event.
    t.store
        .append(append(
            &stream(StreamType::Task, "r-short"),
            ExpectedVersion::NoStream,
            vec![continued(0)],
        ))
        .await
        .expect("append the task");

    let ids = ["r-short", "r-long", "r-long", "r-none"].map(String::from);
    let read = t
        .store
        .read_streams(StreamType::Run, &ids)
        .await
        .expect("read");
    let versions = |id: &str| read[id].iter().map(|e| e.version).collect::<Vec<_>>();
    assert_eq!(
        versions("r-long"),
        vec![5, 6, 7],
        "from the last continuation on"
    );
    assert_eq!(read["r-long"][0].event_type, awl::log::CONTINUED_EVENT_TYPE);
    assert_eq!(
        versions("r-short"),
        vec![1, 2],
        "no continuation: the whole stream"
    );
    assert!(read["r-none"].is_empty(), "an unknown id reads empty");
    assert_eq!(read.len(), 3);
    let current = t
        .store
        .read_current(&stream(StreamType::Run, "r-long"))
        .await
        .expect("current");
    assert_eq!(current, read["r-long"]);
}

/// Group commit's many-stream appends, mixing run streams (their own partitions on
/// Postgres) and task streams, call after call: each finds its stream's version.
/// On Postgres `awl_append` plans its statements once per connection (a generic
/// plan that prunes partitions as it runs, migration 0017), so this is the plan
/// every call after the first uses.
pub async fn many_stream_appends_find_each_version_call_after_call(backend: Backend) {
    let t = TestStore::new(backend).await;
    let streams: Vec<_> = (0..6)
        .map(|i| match i % 2 {
            0 => stream(StreamType::Run, format!("r-{i}")),
            _ => stream(StreamType::Task, format!("t-{i}")),
        })
        .collect();
    for round in 0..8i64 {
        let requests: Vec<AppendRequest> = streams
            .iter()
            .map(|s| {
                let expected = match round {
                    0 => ExpectedVersion::NoStream,
                    n => ExpectedVersion::Exactly(n),
                };
                append(
                    s,
                    expected,
                    vec![NewEvent::new("x.happened", 1, json!({"round": round}))],
                )
            })
            .collect();
        let mut tx = t.store.begin().await.unwrap();
        let appended = tx.append(&requests).await.unwrap();
        tx.commit().await.unwrap();
        let versions: Vec<i64> = appended.iter().map(|a| a.stream_version).collect();
        assert_eq!(versions, vec![round + 1; streams.len()], "round {round}");
    }
    // A stale expectation is still a conflict under the same plan.
    let mut tx = t.store.begin().await.unwrap();
    let stale = tx
        .append(&[append(
            &streams[0],
            ExpectedVersion::Exactly(3),
            vec![NewEvent::new("x.happened", 1, json!({}))],
        )])
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { .. })),
        "{stale:?}"
    );
    if backend == Backend::Postgres {
        let rows = t
            .store
            .query_rows(
                "SELECT array_to_string(proconfig, ',') AS config FROM pg_proc \
                 WHERE proname = 'awl_append'",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(
            rows[0]["config"].as_str(),
            Some("plan_cache_mode=force_generic_plan,enable_seqscan=off")
        );
    }
}

/// Postgres plans `awl_append()`'s statements once per connection and keeps the plan
/// (migration 0017) until the log is analyzed again. A plan made while the log's
/// partitions were one page small (a new database, statistics from an early
/// autovacuum) must still probe the streams' index after a burst of growth, not scan
/// them for every stream (0018). Counted by Postgres's own statistics of sequential
/// scans on the hot partitions (`pg_stat_force_next_flush`: Postgres 15 or later).
/// Postgres only: SQLite makes no plan from statistics to keep.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_append_planned_on_a_small_log_probes_the_index_once_it_grows() {
    use sqlx::Connection;
    let t = TestStore::new(Backend::Postgres).await;
    let awl::store::StoreLocation::Postgres(url) = &t.location else {
        panic!("a Postgres test store")
    };
    let connect = || async { sqlx::PgConnection::connect(url).await.unwrap() };
    // One stream of each kind (the run makes its period's partition), and statistics
    // that say so.
    let mut planned = connect().await;
    append_sql(&mut planned, &[("task", "a"), ("run", "b")]).await;
    sqlx::raw_sql("VACUUM ANALYZE events")
        .execute(&mut planned)
        .await
        .unwrap();
    // This connection plans its appends now, on one-page partitions.
    append_sql(&mut planned, &[("task", "a")]).await;
    append_sql(&mut planned, &[("task", "a"), ("run", "b")]).await;
    // The log grows, through another connection.
    let many: Vec<(&str, String)> = (0..6000)
        .map(|i| (if i % 2 == 0 { "task" } else { "run" }, format!("g-{i}")))
        .collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, id)| (*k, id.as_str())).collect();
    append_sql(&mut connect().await, &many).await;
    let before = hot_seq_scans(&mut planned).await;
    append_sql(&mut planned, &[("task", "a")]).await;
    append_sql(&mut planned, &[("task", "a"), ("run", "b")]).await;
    assert_eq!(
        hot_seq_scans(&mut planned).await,
        before,
        "the appends planned on a small log scanned its partitions"
    );
}

/// One `awl_append()` call on `conn`, one event for each `(kind, id)` stream, at any
/// version.
async fn append_sql(conn: &mut sqlx::PgConnection, streams: &[(&str, &str)]) {
    let n = streams.len();
    let kinds: Vec<&str> = streams.iter().map(|(k, _)| *k).collect();
    let ids: Vec<&str> = streams.iter().map(|(_, id)| *id).collect();
    let index: Vec<i32> = (1..=n as i32).collect();
    sqlx::query(
        "SELECT count(*) FROM awl_append($1, $2, $3, array_fill(NULL::bigint, ARRAY[$4]), \
           array_fill(1, ARRAY[$4]), $3, array_fill('x.happened'::text, ARRAY[$4]), \
           array_fill(1, ARRAY[$4]), array_fill('{}'::jsonb, ARRAY[$4]), \
           array_fill('{}'::jsonb, ARRAY[$4]), true)",
    )
    .bind(&kinds)
    .bind(&ids)
    .bind(&index)
    .bind(n as i32)
    .execute(conn)
    .await
    .unwrap();
}

/// Sequential scans of the hot log's partitions so far, as Postgres counts them (this
/// session's counts flushed first).
async fn hot_seq_scans(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::raw_sql("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::raw_sql("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT coalesce(sum(seq_scan), 0)::int8 FROM pg_stat_user_tables \
          WHERE relname = 'events_streams' OR relname LIKE 'events\\_runs\\_%'",
    )
    .fetch_one(conn)
    .await
    .unwrap()
}
