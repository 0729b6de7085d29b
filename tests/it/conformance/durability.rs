//! What survives a restart, and what a damaged row does.

use awl::log::{EventFilter, ExpectedVersion, StreamType};
use awl::store::{StoreError, TxConnection};

use crate::support::{Backend, TestStore, append, events, stream};

pub async fn reopening_the_store_finds_everything(backend: Backend) {
    let t = TestStore::new(backend).await;
    let s = stream(StreamType::Workflow, "deploy");
    t.store
        .append(append(&s, ExpectedVersion::NoStream, events(0, 5)))
        .await
        .unwrap();
    let before = t.store.read_stream(&s).await.unwrap();

    let reopened = t.reopen().await;
    assert_eq!(reopened.head().await.unwrap(), 5);
    assert_eq!(reopened.read_stream(&s).await.unwrap(), before);
    // The new instance continues the log where the old one left off.
    let next = reopened
        .append(append(&s, ExpectedVersion::Exactly(5), events(5, 1)))
        .await
        .unwrap();
    assert_eq!((next.first_position, next.stream_version), (6, 6));
    assert_eq!(t.store.read_stream(&s).await.unwrap().len(), 6);
}

pub async fn migrations_are_idempotent(backend: Backend) {
    let t = TestStore::new(backend).await;
    t.store
        .append(append(
            &stream(StreamType::Run, "r"),
            ExpectedVersion::Any,
            events(0, 2),
        ))
        .await
        .unwrap();
    t.store.migrate().await.unwrap();
    t.store.migrate().await.unwrap();
    let again = t.reopen().await;
    again.migrate().await.unwrap();
    assert_eq!(again.head().await.unwrap(), 2);
}

/// Insert a row by hand, bypassing the store's checks, as a damaged database would
/// hold it. `payload` and `metadata` are SQL literals.
async fn insert_raw(t: &TestStore, stream_type: &str, payload: &str, metadata: &str) -> i64 {
    let position = t.store.head().await.unwrap() + 1;
    let mut tx = t.store.begin().await.unwrap();
    match tx.connection() {
        TxConnection::Postgres(c) => {
            sqlx::query(
                "INSERT INTO events (position, stream_type, stream_id, version, event_type, event_version, payload, metadata) \
                 VALUES ($1, $2, 'damaged', $1, 'test.happened', 1, $3::jsonb, $4::jsonb)",
            )
            .bind(position)
            .bind(stream_type)
            .bind(payload)
            .bind(metadata)
            .execute(&mut *c)
            .await
            .unwrap();
        }
        TxConnection::Sqlite(c) => {
            sqlx::query(
                "INSERT INTO events (position, stream_type, stream_id, version, event_type, event_version, payload, metadata, recorded_at) \
                 VALUES (?1, ?2, 'damaged', ?1, 'test.happened', 1, ?3, ?4, 0)",
            )
            .bind(position)
            .bind(stream_type)
            .bind(payload)
            .bind(metadata)
            .execute(&mut *c)
            .await
            .unwrap();
        }
    }
    tx.commit().await.unwrap();
    position
}

fn assert_corrupt(result: Result<impl std::fmt::Debug, StoreError>, names: &str, reason: &str) {
    match result {
        Err(StoreError::Corrupt { event, reason: r }) => {
            assert!(event.contains(names), "{event:?} should name {names:?}");
            assert!(r.contains(reason), "{r:?} should say {reason:?}");
        }
        other => panic!("expected a corrupt-event error, got {other:?}"),
    }
}

pub async fn corrupt_rows_are_errors_that_name_the_event(backend: Backend) {
    let t = TestStore::new(backend).await;
    let damaged = stream(StreamType::Task, "damaged");

    // Metadata of the wrong shape (both backends store JSON, but not this JSON).
    let p = insert_raw(&t, "task", "{}", "[1, 2]").await;
    assert_corrupt(
        t.store.read_stream(&damaged).await,
        &format!("task/damaged#{p} test.happened (position {p})"),
        "metadata has the wrong shape",
    );
    assert_corrupt(
        t.store.read_page(0, 10, &EventFilter::default()).await,
        &format!("(position {p})"),
        "metadata",
    );

    // A stream type that does not exist.
    let t = TestStore::new(backend).await;
    let p = insert_raw(&t, "job", "{}", "{}").await;
    assert_corrupt(
        t.store.read_page(0, 10, &EventFilter::default()).await,
        &format!("job/damaged#{p}"),
        "unknown stream type",
    );

    // Text that is not JSON at all (only SQLite can hold it: JSONB refuses it).
    if backend == Backend::Sqlite {
        let t = TestStore::new(backend).await;
        let p = insert_raw(&t, "task", "{\"prompt\": ", "{}").await;
        assert_corrupt(
            t.store.read_stream(&damaged).await,
            &format!("task/damaged#{p}"),
            "payload is not valid JSON",
        );
    }
}
