//! Retention's part of the store contract: a stream moved into the archive reads the
//! same (history, current state, the whole log), is moved once however many times a
//! move is asked, never takes another append, and the log's head never goes back.

use awl::log::{EventFilter, ExpectedVersion, StreamType};
use awl::store::StoreError;

use crate::support::{Backend, TestStore, append, events, stream};

pub async fn an_archived_stream_reads_the_same_and_takes_no_append(backend: Backend) {
    let t = TestStore::new(backend).await;
    let old = stream(StreamType::Task, "old");
    let live = stream(StreamType::Task, "live");
    t.store
        .append(append(&old, ExpectedVersion::NoStream, events(0, 3)))
        .await
        .expect("append old");
    t.store
        .append(append(&live, ExpectedVersion::NoStream, events(3, 1)))
        .await
        .expect("append live");
    let history = t.store.read_stream(&old).await.expect("read");
    let current = t.store.read_current(&old).await.expect("current");
    let (log, _) = t
        .store
        .read_page(0, 100, &EventFilter::default())
        .await
        .expect("log");
    let bytes = t.store.stream_bytes(&old, 1).await.expect("bytes");
    assert!(bytes >= 3 * r#"{"n":0}"#.len() as u64, "{bytes}");
    assert!(!t.store.is_archived(&old).await.expect("is archived"));

    let now = chrono::Utc::now();
    let ids = vec!["old".to_string(), "live".to_string()];
    let moved = t
        .store
        .archive_streams(StreamType::Task, &ids, now)
        .await
        .expect("archive");
    // `live` holds the log's head: it stays, so positions never go back.
    assert_eq!((moved.streams, moved.events), (vec!["old".to_string()], 3));
    let again = t
        .store
        .archive_streams(StreamType::Task, &["old".to_string()], now)
        .await
        .expect("archive again");
    assert_eq!(again.events, 0, "moved once");
    assert!(t.store.is_archived(&old).await.expect("is archived"));
    assert!(!t.store.is_archived(&live).await.expect("is archived"));

    assert_eq!(t.store.read_stream(&old).await.expect("read"), history);
    assert_eq!(t.store.read_current(&old).await.expect("current"), current);
    let (after, _) = t
        .store
        .read_page(0, 100, &EventFilter::default())
        .await
        .expect("log");
    assert_eq!(
        after, log,
        "the whole log reads the same, in position order"
    );
    assert_eq!(t.store.stream_bytes(&old, 1).await.expect("bytes"), 0);

    // An append where the stream was is refused by name, and writes nothing.
    let refused = t
        .store
        .append(append(&old, ExpectedVersion::Exactly(3), events(9, 1)))
        .await
        .expect_err("an archived stream takes no append");
    assert!(
        matches!(&refused, StoreError::Archived(s) if *s == old),
        "{refused}"
    );
    assert!(refused.to_string().contains("archived"), "{refused}");
    assert_eq!(t.store.read_stream(&old).await.expect("read"), history);
    // Other streams go on from the head.
    let next = t
        .store
        .append(append(&live, ExpectedVersion::Exactly(1), events(10, 1)))
        .await
        .expect("append after the move");
    assert_eq!(next.first_position, 5);
}

/// The ids of one kind's streams, hot and archived, sorted and each once; with an
/// event type, only the streams holding such an event.
pub async fn stream_ids_lists_a_kinds_streams_hot_and_archived(backend: Backend) {
    use awl::log::NewEvent;
    let t = TestStore::new(backend).await;
    let marked = || vec![NewEvent::new("test.marked", 1, serde_json::json!({}))];
    for (kind, id, n) in [
        (StreamType::Task, "b", 2),
        (StreamType::Task, "a", 3),
        (StreamType::Run, "r", 1),
        (StreamType::Task, "c", 1),
    ] {
        t.store
            .append(append(
                &stream(kind, id),
                ExpectedVersion::NoStream,
                events(0, n),
            ))
            .await
            .expect("append");
    }
    for (id, version) in [("a", 3), ("c", 1)] {
        t.store
            .append(append(
                &stream(StreamType::Task, id),
                ExpectedVersion::Exactly(version),
                marked(),
            ))
            .await
            .expect("mark");
    }
    let moved = t
        .store
        .archive_streams(StreamType::Task, &["a".to_string()], chrono::Utc::now())
        .await
        .expect("archive");
    assert_eq!(moved.streams, vec!["a".to_string()], "a is archived");

    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        t.store
            .stream_ids(StreamType::Task, None)
            .await
            .expect("list"),
        ids(&["a", "b", "c"])
    );
    assert_eq!(
        t.store
            .stream_ids(StreamType::Task, Some("test.marked"))
            .await
            .expect("list marked"),
        ids(&["a", "c"])
    );
    assert_eq!(
        t.store
            .stream_ids(StreamType::Run, None)
            .await
            .expect("runs"),
        ids(&["r"])
    );
    assert!(
        t.store
            .stream_ids(StreamType::Agent, None)
            .await
            .expect("agents")
            .is_empty()
    );
}

/// A run stream's events, as the executor records them (only the types matter here).
fn run_events(types: &[&str]) -> Vec<awl::log::NewEvent> {
    types
        .iter()
        .map(|ty| awl::log::NewEvent::new(*ty, 1, serde_json::json!({})))
        .collect()
}

/// Wait until the next run period (one second here) has just begun, so that the
/// few appends that follow fall in one period even on a loaded machine (the
/// database reads the same clock).
async fn next_period() {
    let into_second = chrono::Utc::now().timestamp_subsec_millis();
    let wait = 1_000 - u64::from(into_second.min(999)) + 20;
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
}

/// On Postgres a run's events sit in the partition of the period it started in; a
/// partition whose period is over and whose every run finished leaves the hot log
/// whole, reading the same afterwards; one that held an unfinished run is drained run
/// by run and dropped once empty. SQLite has no partitions and moves nothing whole.
pub async fn run_partitions_leave_whole_once_every_run_finished(backend: Backend) {
    use awl::domain::run::FINISHED_EVENT_TYPES;
    let t = TestStore::new(backend).await;
    if backend == Backend::Postgres {
        t.pg_execute("UPDATE event_partitioning SET run_period = 1")
            .await
            .expect("one-second periods on a fresh log");
    }
    let run = |id: &str| stream(StreamType::Run, id);
    let agent = stream(StreamType::Agent, "a1");
    let write = |s: awl::log::StreamRef, v: i64, types: &'static [&'static str]| {
        let store = t.store.clone();
        async move {
            let expected = if v == 0 {
                ExpectedVersion::NoStream
            } else {
                ExpectedVersion::Exactly(v)
            };
            store
                .append(append(&s, expected, run_events(types)))
                .await
                .expect("append");
        }
    };
    // Period A: r1 finishes, r2 does not yet.
    next_period().await;
    write(run("r1"), 0, &["run.started", "run.completed"]).await;
    write(run("r2"), 0, &["run.started"]).await;
    next_period().await;
    // Period B: r3, finished; the agent's stream is no run's.
    write(run("r3"), 0, &["run.started", "run.failed"]).await;
    write(agent.clone(), 0, &["test.happened"]).await;
    next_period().await;
    write(agent.clone(), 1, &["test.happened"]).await;

    let partitions = t.store.run_partitions().await.expect("partitions");
    let archive = |cutoff| {
        let store = t.store.clone();
        async move {
            store
                .archive_run_partitions(cutoff, chrono::Utc::now(), &FINISHED_EVENT_TYPES)
                .await
                .expect("archive partitions")
        }
    };
    if backend == Backend::Sqlite {
        assert!(partitions.is_empty(), "{partitions:?}");
        assert_eq!(archive(chrono::Utc::now()).await, Default::default());
        return;
    }
    assert_eq!(partitions.len(), 2, "periods A and B: {partitions:?}");
    assert!(
        partitions
            .iter()
            .all(|p| p.name.starts_with("events_runs_"))
    );
    let r1 = t.store.read_stream(&run("r1")).await.expect("read r1");

    // A cutoff before B's end moves nothing of B; A holds r2, unfinished: its
    // finished run r1 is left for retention to move row by row.
    let moved = archive(partitions[0].end).await;
    assert_eq!(
        moved,
        awl::store::PartitionsArchived {
            left: vec!["r1".to_string()],
            ..Default::default()
        },
        "A waits for r2"
    );
    // r2 finishes (in A, its partition): A and B both go, every run in them. (The
    // agent's event keeps the log's head out of them: the head never moves.)
    write(run("r2"), 1, &["run.cancelled"]).await;
    write(agent.clone(), 2, &["test.happened"]).await;
    let (log, _) = t
        .store
        .read_page(0, 100, &EventFilter::default())
        .await
        .expect("log");
    let moved = archive(chrono::Utc::now()).await;
    assert_eq!(moved.partitions.len(), 2, "{moved:?}");
    let mut runs = moved.runs.clone();
    runs.sort();
    assert_eq!(runs, ["r1", "r2", "r3"], "{moved:?}");
    assert_eq!(moved.events, 6);
    assert!(t.store.run_partitions().await.expect("list").is_empty());
    assert!(t.store.is_archived(&run("r1")).await.expect("is archived"));
    assert_eq!(t.store.read_stream(&run("r1")).await.expect("read"), r1);
    let (after, _) = t
        .store
        .read_page(0, 100, &EventFilter::default())
        .await
        .expect("log");
    assert_eq!(
        after, log,
        "the whole log reads the same, in position order"
    );
    let refused = t
        .store
        .append(append(
            &run("r1"),
            ExpectedVersion::Exactly(2),
            run_events(&["run.derived"]),
        ))
        .await
        .expect_err("an archived run takes no append");
    assert!(matches!(refused, StoreError::Archived(_)), "{refused}");
    // The moved partitions are the archive's now, and append-only there too.
    let err = t
        .pg_execute(&format!(
            "TRUNCATE {}",
            moved.partitions[0].replacen("events_", "events_archive_", 1)
        ))
        .await
        .expect_err("truncating an archived partition");
    assert!(err.contains("append-only"), "{err}");

    // Period C: r4 is moved early, row by row (`awl archive` does that); r5 runs on.
    write(run("r4"), 0, &["run.started", "run.completed"]).await;
    write(run("r5"), 0, &["run.started"]).await;
    next_period().await;
    write(agent.clone(), 3, &["test.happened"]).await;
    let rows = t
        .store
        .archive_streams(StreamType::Run, &["r4".to_string()], chrono::Utc::now())
        .await
        .expect("row move");
    assert_eq!(rows.events, 2);
    // The hot partition is append-only as a table of its own as well.
    let c = &t.store.run_partitions().await.expect("list")[0].name;
    for sql in [format!("TRUNCATE {c}"), format!("DELETE FROM {c}")] {
        let err = t.pg_execute(&sql).await.expect_err(&sql);
        assert!(err.contains("append-only"), "{sql}: {err}");
    }
    let err = t
        .pg_execute("UPDATE event_partitioning SET run_period = 60")
        .await
        .expect_err("the period is fixed once partitions exist");
    assert!(err.contains("run_period can only change"), "{err}");
    write(run("r5"), 1, &["run.completed"]).await;
    write(agent.clone(), 4, &["test.happened"]).await;
    // C's archive partition exists (r4 went row by row): C is not attached over it,
    // it is drained (its finished run r5 is left to move row by row), and goes once
    // empty.
    assert_eq!(
        archive(chrono::Utc::now()).await,
        awl::store::PartitionsArchived {
            left: vec!["r5".to_string()],
            ..Default::default()
        }
    );
    t.store
        .archive_streams(StreamType::Run, &["r5".to_string()], chrono::Utc::now())
        .await
        .expect("row move");
    let moved = archive(chrono::Utc::now()).await;
    assert_eq!((moved.partitions.len(), moved.events), (1, 0), "{moved:?}");
    assert!(t.store.run_partitions().await.expect("list").is_empty());
    for id in ["r4", "r5"] {
        assert!(
            t.store.is_archived(&run(id)).await.expect("is archived"),
            "{id}"
        );
    }

    // A cutoff in the future never takes the current period's partition (30 days by
    // default, on a log of its own): runs may still start in it.
    let fresh = TestStore::new(backend).await;
    for (s, types) in [
        (run("r1"), &["run.started", "run.completed"][..]),
        (agent.clone(), &["test.happened"][..]),
    ] {
        fresh
            .store
            .append(append(&s, ExpectedVersion::NoStream, run_events(types)))
            .await
            .expect("append");
    }
    // (Past the period's end, and the caller's clock as far ahead: the database's
    // own clock decides.)
    let later = chrono::Utc::now() + chrono::Duration::days(31);
    let moved = fresh
        .store
        .archive_run_partitions(later, later, &FINISHED_EVENT_TYPES)
        .await
        .expect("archive");
    assert_eq!(moved, Default::default());
    assert_eq!(fresh.store.run_partitions().await.expect("list").len(), 1);
}

/// A log written before the partitions (migration 15 on Postgres) reads the same
/// after migrating: every event in place, each run in the partition of its first
/// event's period, the archive's too, and appends going on from the head.
pub async fn a_log_from_before_the_partitions_reads_the_same_after(backend: Backend) {
    let options = awl::store::StoreOptions {
        migrate: false,
        ..Default::default()
    };
    let t = TestStore::with_options(backend, options).await;
    t.store.migrate_to(15).await.expect("migrations up to 15");
    let (r1, r2, t1) = (
        stream(StreamType::Run, "r1"),
        stream(StreamType::Run, "r2"),
        stream(StreamType::Task, "t1"),
    );
    for (s, types) in [
        (&r1, &["run.started", "run.step_scheduled"][..]),
        (&t1, &["test.happened", "test.happened"][..]),
        (&r2, &["run.started", "run.completed"][..]),
        (&t1, &["test.happened"][..]),
    ] {
        t.store
            .append(append(s, ExpectedVersion::Any, run_events(types)))
            .await
            .expect("append");
    }
    // r2 archived the way the old schema moved rows.
    if backend == Backend::Postgres {
        t.pg_execute(
            "INSERT INTO events_archive (position, stream_type, stream_id, version, event_type, \
               event_version, payload, metadata, recorded_at) \
             SELECT position, stream_type, stream_id, version, event_type, event_version, payload, \
               metadata, recorded_at FROM events WHERE stream_type = 'run' AND stream_id = 'r2'; \
             DELETE FROM events WHERE stream_type = 'run' AND stream_id = 'r2'",
        )
        .await
        .expect("the old move");
    } else {
        t.store
            .archive_streams(StreamType::Run, &["r2".to_string()], chrono::Utc::now())
            .await
            .expect("move");
    }
    // (This build's read of the whole log needs the new schema: the stream reads
    // do not, and the whole log is compared by its streams' events.)
    let (h1, h2, ht) = (
        t.store.read_stream(&r1).await.expect("r1"),
        t.store.read_stream(&r2).await.expect("r2"),
        t.store.read_stream(&t1).await.expect("t1"),
    );
    let mut log: Vec<_> = h1.iter().chain(&h2).chain(&ht).cloned().collect();
    log.sort_by_key(|e| e.position);
    assert_eq!(log.len(), 7);

    t.store.migrate().await.expect("the rest of the migrations");
    let (after, _) = t
        .store
        .read_page(0, 100, &EventFilter::default())
        .await
        .expect("log");
    assert_eq!(after, log, "every event in place");
    assert_eq!(t.store.read_stream(&r1).await.expect("r1"), h1);
    assert_eq!(t.store.read_stream(&r2).await.expect("r2"), h2);
    assert!(t.store.is_archived(&r2).await.expect("is archived"));
    let partitions = t.store.run_partitions().await.expect("partitions");
    if backend == Backend::Postgres {
        assert_eq!(partitions.len(), 1, "r1's period: {partitions:?}");
        let started = h1[0].recorded_at;
        assert!(
            partitions[0].start <= started && started < partitions[0].end,
            "{partitions:?} holds {started}"
        );
    } else {
        assert!(partitions.is_empty());
    }
    let next = t
        .store
        .append(append(
            &r1,
            ExpectedVersion::Exactly(2),
            run_events(&["run.completed"]),
        ))
        .await
        .expect("append after the migration");
    assert_eq!(next.first_position, 8);
    t.store
        .append(append(
            &stream(StreamType::Run, "r3"),
            ExpectedVersion::NoStream,
            run_events(&["run.started"]),
        ))
        .await
        .expect("a new run");
}
