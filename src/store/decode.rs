//! Turning a stored row back into a [`RecordedEvent`], through the upcasters.
//!
//! Both backends produce a [`RawEvent`]; everything that can be wrong with a stored
//! row (an unknown stream type, JSON that does not parse, metadata of the wrong shape,
//! an upcaster that refuses) becomes [`StoreError::Corrupt`] naming the event.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::log::{Metadata, RecordedEvent, StreamRef, StreamType, Upcasters, describe_event};

use super::StoreError;

/// A row as read from either backend, before checks.
pub(crate) struct RawEvent {
    pub position: i64,
    pub stream_type: String,
    pub stream_id: String,
    pub version: i64,
    pub event_type: String,
    pub event_version: i32,
    pub payload: RawJson,
    pub metadata: RawMetadata,
    pub recorded_at: DateTime<Utc>,
}

/// JSON as the backend hands it over: parsed already (Postgres JSONB) or as text
/// (SQLite).
pub(crate) enum RawJson {
    Parsed(Value),
    Text(String),
}

/// Metadata as the backend hands it over: decoded straight from JSONB (Postgres; an
/// error means the shape is wrong), or as text (SQLite).
pub(crate) enum RawMetadata {
    Decoded(Result<Metadata, String>),
    Text(String),
}

impl RawMetadata {
    fn into_metadata(self) -> Result<Metadata, String> {
        let shape = |e: String| format!("metadata has the wrong shape: {e}");
        match self {
            RawMetadata::Decoded(m) => m.map_err(shape),
            RawMetadata::Text(t) => {
                let value: Value = serde_json::from_str(&t)
                    .map_err(|e| format!("metadata is not valid JSON: {e}"))?;
                serde_json::from_value(value).map_err(|e| shape(e.to_string()))
            }
        }
    }
}

impl RawEvent {
    pub(crate) fn decode(self, upcasters: &Upcasters) -> Result<RecordedEvent, StoreError> {
        let corrupt = |stream: &StreamRef, reason: String| StoreError::Corrupt {
            event: describe_event(stream, self.version, &self.event_type, self.position),
            reason,
        };
        let kind = self.stream_type.parse::<StreamType>();
        let stream = StreamRef {
            // A placeholder kind only for the message when the type itself is bad.
            kind: *kind.as_ref().unwrap_or(&StreamType::Workflow),
            id: self.stream_id.clone(),
        };
        let kind = kind.map_err(|e| StoreError::Corrupt {
            event: format!(
                "{}/{}#{} {} (position {})",
                self.stream_type, self.stream_id, self.version, self.event_type, self.position
            ),
            reason: e.to_string(),
        })?;
        let stream = StreamRef { kind, ..stream };
        let payload = match self.payload {
            RawJson::Parsed(v) => v,
            RawJson::Text(t) => serde_json::from_str(&t)
                .map_err(|e| corrupt(&stream, format!("payload is not valid JSON: {e}")))?,
        };
        let metadata = self
            .metadata
            .into_metadata()
            .map_err(|e| corrupt(&stream, e))?;
        let (event_version, payload) = upcasters
            .upcast(&self.event_type, self.event_version, payload)
            .map_err(|e| corrupt(&stream, e.to_string()))?;
        Ok(RecordedEvent {
            position: self.position,
            stream,
            version: self.version,
            event_type: self.event_type,
            event_version,
            payload,
            metadata,
            recorded_at: self.recorded_at,
        })
    }
}

#[cfg(test)]
mod tests;
