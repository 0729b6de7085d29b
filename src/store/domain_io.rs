//! Domain events in and out of the log, without cqrs-es's framework: how the executor,
//! the CLI and the board load an aggregate, decide, and append in their own
//! transactions (with wake-ups and other rows beside the events).
//!
//! A domain event enum serialises externally tagged (`{"task.queued": {...}}`); the
//! log keeps the tag in `event_type` and the inner object as the payload.

use cqrs_es::{Aggregate, DomainEvent};
use serde_json::{Map, Value};

use crate::log::{AppendRequest, ExpectedVersion, Metadata, NewEvent, RecordedEvent, StreamRef};

use super::{EventStore, StoreError};

/// A recorded event as a domain event of `A`.
pub fn decode<A: Aggregate>(event: &RecordedEvent) -> Result<A::Event, StoreError> {
    let mut wrapped = Map::with_capacity(1);
    wrapped.insert(event.event_type.clone(), event.payload.clone());
    serde_json::from_value(Value::Object(wrapped)).map_err(|e| StoreError::Corrupt {
        event: event.describe(),
        reason: format!("payload does not match the event type: {e}"),
    })
}

/// A domain event as a new log event.
pub fn encode<E: DomainEvent>(
    stream: &StreamRef,
    event: &E,
    metadata: &Metadata,
) -> Result<NewEvent, StoreError> {
    let bad = |reason: String| StoreError::InvalidAppend {
        stream: stream.clone(),
        reason,
    };
    let value = serde_json::to_value(event).map_err(|e| bad(format!("cannot serialise: {e}")))?;
    let (event_type, payload) = match value {
        Value::Object(map) if map.len() == 1 => map
            .into_iter()
            .next()
            .ok_or_else(|| bad("empty event".into()))?,
        other => return Err(bad(format!("not an externally tagged event: {other}"))),
    };
    let event_version: i32 = event
        .event_version()
        .parse()
        .map_err(|_| bad(format!("event {event_type} has a non-numeric version")))?;
    Ok(NewEvent {
        event_type,
        event_version,
        payload,
        metadata: metadata.clone(),
    })
}

/// The request that appends `events` to `stream` at `version`.
pub fn append_request<E: DomainEvent>(
    stream: &StreamRef,
    version: i64,
    events: &[E],
    metadata: &Metadata,
) -> Result<AppendRequest, StoreError> {
    let new = events
        .iter()
        .map(|e| encode(stream, e, metadata))
        .collect::<Result<Vec<_>, _>>()?;
    let expected = if version == 0 {
        ExpectedVersion::NoStream
    } else {
        ExpectedVersion::Exactly(version)
    };
    Ok(AppendRequest::new(stream.clone(), expected, new))
}

/// Fold recorded events into `A`; returns it and the stream's version.
pub fn fold<A: Aggregate>(events: &[RecordedEvent]) -> Result<(A, i64), StoreError> {
    let mut aggregate = A::default();
    let mut version = 0;
    for event in events {
        aggregate.apply(decode::<A>(event)?);
        version = event.version;
    }
    Ok((aggregate, version))
}

/// Load one aggregate from its stream.
pub async fn load<A: Aggregate>(
    store: &EventStore,
    stream: &StreamRef,
) -> Result<(A, i64), StoreError> {
    fold(&store.read_current(stream).await?)
}
