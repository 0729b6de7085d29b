//! Domain events in and out of the log, without cqrs-es's framework: how the executor,
//! the CLI and the board load an aggregate, decide, and append in their own
//! transactions (with wake-ups and other rows beside the events).
//!
//! A domain event enum serialises externally tagged (`{"task.queued": {...}}`); the
//! log keeps the tag in `event_type` and the inner object as the payload.

use cqrs_es::{Aggregate, DomainEvent};
use serde_json::{Map, Value};

use crate::log::{
    AppendRequest, ExpectedVersion, Metadata, NewEvent, Payload, RecordedEvent, StreamRef,
};

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

/// A domain event as a new log event: written straight to JSON text (no `Value` in
/// between: a step's output is not copied), its tag kept as the event type.
pub fn encode<E: DomainEvent>(
    stream: &StreamRef,
    event: &E,
    metadata: &Metadata,
) -> Result<NewEvent, StoreError> {
    let bad = |reason: String| StoreError::InvalidAppend {
        stream: stream.clone(),
        reason,
    };
    let event_type = event.event_type();
    let payload = match Payload::of_tagged(event, &event_type) {
        Ok(Some(payload)) => payload,
        Ok(None) => return Err(bad(untagged(event, &event_type))),
        Err(e) => return Err(bad(format!("cannot serialise: {e}"))),
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

/// What is wrong with an event that is not written as `{"<its type>": ...}`.
fn untagged<E: DomainEvent>(event: &E, event_type: &str) -> String {
    match serde_json::to_value(event) {
        Ok(Value::Object(map)) if map.len() == 1 => match map.keys().next() {
            Some(tag) if tag != event_type => {
                format!("event {event_type} is written with the tag {tag:?}")
            }
            _ => format!("event {event_type} cannot be written with its tag"),
        },
        Ok(other) => format!("not an externally tagged event: {other}"),
        Err(e) => format!("cannot serialise: {e}"),
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use chrono::Utc;
    use serde::{Deserialize, Serialize};
    use serde_json::json;

    use super::*;
    use crate::domain::run::{Run, RunEvent};
    use crate::log::StreamType;

    fn stream() -> StreamRef {
        StreamRef::new(StreamType::Run, "r1")
    }

    #[test]
    fn an_event_is_written_as_its_inner_object_and_read_back_the_same() {
        let event = RunEvent::StepSucceeded {
            step_id: "fetch".parse().unwrap(),
            attempt: 2,
            output: Arc::new(json!({"status": 200, "body": {"quote": "a \"b\" }"}})),
            cost_usd: None,
            tokens: Some(7),
            at: Utc::now(),
        };
        let new = encode(&stream(), &event, &Metadata::actor("awl")).unwrap();
        assert_eq!(new.event_type, "run.step_succeeded");
        let wrapped = serde_json::to_value(&event).unwrap();
        assert_eq!(new.payload, wrapped["run.step_succeeded"]);
        let recorded = RecordedEvent {
            position: 1,
            stream: stream(),
            version: 1,
            event_type: new.event_type.clone(),
            event_version: new.event_version,
            payload: new.payload.to_value().unwrap(),
            metadata: new.metadata.clone(),
            recorded_at: Utc::now(),
        };
        assert_eq!(decode::<Run>(&recorded).unwrap(), event);
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    enum Misnamed {
        #[serde(rename = "thing.done")]
        Done { n: u32 },
    }

    impl DomainEvent for Misnamed {
        fn event_type(&self) -> String {
            "thing.finished".into()
        }
        fn event_version(&self) -> String {
            "1".into()
        }
    }

    #[test]
    fn an_event_whose_type_is_not_its_tag_is_refused_saying_so() {
        let err = encode(&stream(), &Misnamed::Done { n: 1 }, &Metadata::default()).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("thing.finished") && message.contains("\"thing.done\""),
            "{message}"
        );
    }
}
