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
