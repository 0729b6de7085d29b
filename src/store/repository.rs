//! cqrs-es on top of awl's log: a [`PersistedEventRepository`] over [`EventStore`].
//!
//! cqrs-es's stock Postgres table has no global position, so aggregates are stored in
//! our `events` table instead: the aggregate type is the stream type, the aggregate id
//! the stream id, the sequence the stream version. cqrs-es serialises an event enum
//! as `{"task.queued": {...}}`; the log keeps the tag in `event_type` and the inner
//! object as the payload, and the wrapper is put back on load. Each loaded event is
//! checked against the aggregate's event type here, so a corrupt row is reported with
//! its stream, version, type and position rather than as a bare serde message.

use std::collections::HashMap;

use cqrs_es::persist::{
    PersistedEventRepository, PersistedEventStore, PersistenceError, ReplayStream, SerializedEvent,
    SerializedSnapshot,
};
use cqrs_es::{Aggregate, CqrsFramework};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::log::{
    AppendRequest, EventFilter, ExpectedVersion, Metadata, NewEvent, Payload, RecordedEvent,
    StreamRef, StreamType,
};

use super::{EventStore, StoreError, TAIL_PAGE};

/// The cqrs-es repository backed by the log.
#[derive(Clone)]
pub struct LogRepository {
    store: EventStore,
}

/// A cqrs-es framework for aggregate `A`, persisting to `store`, with no in-process
/// queries (views are durable projections of the log, not cqrs-es queries).
pub fn framework<A>(
    store: &EventStore,
    services: A::Services,
) -> CqrsFramework<A, PersistedEventStore<LogRepository, A>>
where
    A: Aggregate,
{
    let repository = LogRepository::new(store.clone());
    CqrsFramework::new(
        PersistedEventStore::new_event_store(repository),
        vec![],
        services,
    )
}

impl LogRepository {
    pub fn new(store: EventStore) -> Self {
        Self { store }
    }

    fn stream<A: Aggregate>(aggregate_id: &str) -> Result<StreamRef, PersistenceError> {
        let kind = A::TYPE.parse::<StreamType>().map_err(unknown)?;
        Ok(StreamRef::new(kind, aggregate_id))
    }
}

fn unknown(e: impl std::error::Error + Send + Sync + 'static) -> PersistenceError {
    PersistenceError::UnknownError(Box::new(e))
}

fn from_store(e: StoreError) -> PersistenceError {
    match e {
        StoreError::Conflict { .. } => PersistenceError::OptimisticLockError,
        StoreError::Database { .. } | StoreError::Closed => {
            PersistenceError::ConnectionError(Box::new(e))
        }
        StoreError::Corrupt { .. } => PersistenceError::DeserializationError(Box::new(e)),
        other => PersistenceError::UnknownError(Box::new(other)),
    }
}

/// A recorded event as cqrs-es expects it, checked against `A::Event`.
fn to_serialized<A: Aggregate>(event: RecordedEvent) -> Result<SerializedEvent, PersistenceError> {
    let describe = event.describe();
    let mut wrapped = Map::with_capacity(1);
    wrapped.insert(event.event_type.clone(), event.payload);
    let payload = Value::Object(wrapped);
    if let Err(e) = A::Event::deserialize(&payload) {
        return Err(from_store(StoreError::Corrupt {
            event: describe,
            reason: format!("payload does not match the event type: {e}"),
        }));
    }
    let metadata = serde_json::to_value(&event.metadata)?;
    Ok(SerializedEvent::new(
        event.stream.id,
        usize::try_from(event.version).map_err(unknown)?,
        A::TYPE.to_string(),
        event.event_type,
        event.event_version.to_string(),
        payload,
        metadata,
    ))
}

/// A cqrs-es event as a log event: unwrap the tag, convert metadata.
fn to_new_event(event: &SerializedEvent) -> Result<NewEvent, PersistenceError> {
    let bad = |reason: String| {
        from_store(StoreError::InvalidAppend {
            stream: StreamRef::new(
                event.aggregate_type.parse().unwrap_or(StreamType::Workflow),
                event.aggregate_id.clone(),
            ),
            reason,
        })
    };
    let payload = match &event.payload {
        Value::Object(map) if map.len() == 1 && map.contains_key(&event.event_type) => {
            Payload::from_value(map.get(&event.event_type).unwrap_or(&Value::Null))
        }
        other => {
            return Err(bad(format!(
                "event {} must serialise as {{\"{}\": {{...}}}}, got {other}",
                event.event_type, event.event_type
            )));
        }
    };
    let version: i32 = event.event_version.parse().map_err(|_| {
        bad(format!(
            "event {} has schema version {:?}; expected a positive integer",
            event.event_type, event.event_version
        ))
    })?;
    let pairs: HashMap<String, String> = serde_json::from_value(event.metadata.clone())?;
    let mut metadata = Metadata::default();
    for (key, value) in pairs {
        match key.as_str() {
            "actor" => metadata.actor = Some(value),
            "correlation_id" => {
                metadata.correlation_id =
                    Some(value.parse().map_err(|_| {
                        bad(format!("metadata correlation_id {value:?} is not a UUID"))
                    })?)
            }
            "causation_id" => {
                metadata.causation_id =
                    Some(value.parse().map_err(|_| {
                        bad(format!("metadata causation_id {value:?} is not a UUID"))
                    })?)
            }
            "trace_id" => metadata.trace_id = Some(value),
            "command_id" => {
                metadata.command_id = Some(
                    value
                        .parse()
                        .map_err(|_| bad(format!("metadata command_id {value:?} is not a UUID")))?,
                )
            }
            "traceparent" => metadata.traceparent = Some(value),
            other => {
                return Err(bad(format!(
                    "unsupported metadata key {other:?} (expected actor, correlation_id, causation_id, trace_id, traceparent, command_id)"
                )));
            }
        }
    }
    Ok(NewEvent {
        event_type: event.event_type.clone(),
        event_version: version,
        payload,
        metadata,
    })
}

impl PersistedEventRepository for LogRepository {
    async fn get_events<A: Aggregate>(
        &self,
        aggregate_id: &str,
    ) -> Result<Vec<SerializedEvent>, PersistenceError> {
        self.get_last_events::<A>(aggregate_id, 0).await
    }

    async fn get_last_events<A: Aggregate>(
        &self,
        aggregate_id: &str,
        last_sequence: usize,
    ) -> Result<Vec<SerializedEvent>, PersistenceError> {
        let stream = Self::stream::<A>(aggregate_id)?;
        let after = i64::try_from(last_sequence).map_err(unknown)?;
        self.store
            .read_stream_after(&stream, after)
            .await
            .map_err(from_store)?
            .into_iter()
            .map(to_serialized::<A>)
            .collect()
    }

    async fn get_snapshot<A: Aggregate>(
        &self,
        _aggregate_id: &str,
    ) -> Result<Option<SerializedSnapshot>, PersistenceError> {
        // Streams are replayed in full: snapshots are not stored.
        Ok(None)
    }

    async fn persist<A: Aggregate>(
        &self,
        events: &[SerializedEvent],
        snapshot_update: Option<(String, Value, usize)>,
    ) -> Result<(), PersistenceError> {
        if snapshot_update.is_some() {
            return Err(unknown(std::io::Error::other(
                "awl does not store snapshots: use PersistedEventStore::new_event_store",
            )));
        }
        let Some(first) = events.first() else {
            return Ok(());
        };
        let stream = Self::stream::<A>(&first.aggregate_id)?;
        let expected = match first.sequence {
            0 => {
                return Err(unknown(std::io::Error::other(
                    "cqrs-es sequences start at 1",
                )));
            }
            1 => ExpectedVersion::NoStream,
            n => ExpectedVersion::Exactly(n as i64 - 1),
        };
        let new_events = events
            .iter()
            .map(to_new_event)
            .collect::<Result<Vec<_>, _>>()?;
        self.store
            .append(AppendRequest::new(stream, expected, new_events))
            .await
            .map_err(from_store)?;
        Ok(())
    }

    async fn stream_events<A: Aggregate>(
        &self,
        aggregate_id: &str,
    ) -> Result<ReplayStream, PersistenceError> {
        let events = self.get_events::<A>(aggregate_id).await?;
        let (mut feed, stream) = ReplayStream::new(events.len().max(1));
        for event in events {
            feed.push(Ok(event)).await?;
        }
        Ok(stream)
    }

    async fn stream_all_events<A: Aggregate>(&self) -> Result<ReplayStream, PersistenceError> {
        let kind = A::TYPE.parse::<StreamType>().map_err(unknown)?;
        let store = self.store.clone();
        let (mut feed, stream) = ReplayStream::new(TAIL_PAGE as usize);
        tokio::spawn(async move {
            let filter = EventFilter {
                stream_types: vec![kind],
                ..EventFilter::default()
            };
            let mut after = 0;
            loop {
                match store.read_page(after, TAIL_PAGE, &filter).await {
                    Ok((events, scanned)) => {
                        for event in events {
                            if feed.push(to_serialized::<A>(event)).await.is_err() {
                                return;
                            }
                        }
                        if scanned == after {
                            return;
                        }
                        after = scanned;
                    }
                    Err(e) => {
                        let _ = feed.push(Err(from_store(e))).await;
                        return;
                    }
                }
            }
        });
        Ok(stream)
    }
}
