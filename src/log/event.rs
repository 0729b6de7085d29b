//! Events before they are stored ([`NewEvent`]) and after ([`RecordedEvent`]).

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::Payload;

/// The kinds of stream in awl's log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamType {
    Workflow,
    Run,
    Task,
    Agent,
    /// A bulk action over many runs.
    Bulk,
    /// A schedule: the times it fired and skipped.
    Schedule,
    /// The starts of a workflow with one value of its debounce key.
    Debounce,
    /// One question worked by awl's own agent: its model calls, tool calls, answer.
    Solve,
    /// One notice's message in one chat channel: posted, updated, failed deliveries.
    Chat,
}

impl StreamType {
    pub const ALL: [StreamType; 9] = [
        Self::Workflow,
        Self::Run,
        Self::Task,
        Self::Agent,
        Self::Bulk,
        Self::Schedule,
        Self::Debounce,
        Self::Solve,
        Self::Chat,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Workflow => "workflow",
            Self::Run => "run",
            Self::Task => "task",
            Self::Agent => "agent",
            Self::Bulk => "bulk",
            Self::Schedule => "schedule",
            Self::Debounce => "debounce",
            Self::Solve => "solve",
            Self::Chat => "chat",
        }
    }
}

impl fmt::Display for StreamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the stream types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown stream type {0:?} (expected one of: {list})", list = StreamType::ALL.map(StreamType::as_str).join(", "))]
pub struct UnknownStreamType(pub String);

impl FromStr for StreamType {
    type Err = UnknownStreamType;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| UnknownStreamType(s.to_string()))
    }
}

/// One stream: its type and its id (a run id, a task id, an agent's name...).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct StreamRef {
    #[serde(rename = "stream_type")]
    pub kind: StreamType,
    #[serde(rename = "stream_id")]
    pub id: String,
}

impl StreamRef {
    pub fn new(kind: StreamType, id: impl Into<String>) -> Self {
        Self {
            kind,
            id: id.into(),
        }
    }
}

impl fmt::Display for StreamRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.kind, self.id)
    }
}

/// What the writer of an append expects the stream's version to be.
///
/// A stream's version is the number of events in it: 0 for a stream that does not
/// exist yet, and the version of its last event otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ExpectedVersion {
    /// Append whatever the version is (no concurrency check).
    Any,
    /// The stream must not exist yet.
    NoStream,
    /// The stream's last event must have exactly this version.
    Exactly(i64),
}

impl ExpectedVersion {
    /// Does a stream currently at `actual` satisfy this expectation?
    pub fn admits(self, actual: i64) -> bool {
        match self {
            Self::Any => true,
            Self::NoStream => actual == 0,
            Self::Exactly(v) => v == actual,
        }
    }
}

impl fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("any version"),
            Self::NoStream => f.write_str("no stream"),
            Self::Exactly(v) => write!(f, "version {v}"),
        }
    }
}

/// Who caused an event and in answer to what: the audit half of every event.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// Who did it: a user, a token's name, an agent, or `awl` for the system itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The request or run this event belongs to, shared by everything it caused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<Uuid>,
    /// The command or event that directly caused this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<Uuid>,
    /// The OpenTelemetry trace the write happened in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The W3C `traceparent` of the span the write happened in. A run's first event
    /// carries its trace: every worker puts the run's steps under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The command that wrote this event: every event of one command carries it, so
    /// a command tried again after an unknown outcome (its connection died during the
    /// commit) can see that it was recorded, and is recorded once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command_id: Option<Uuid>,
    /// Whose history it belongs to when that is not the actor's own: the team a
    /// token acts for (`team:NAME`), or `user:NAME`. Set on a run's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

impl Metadata {
    pub fn actor(actor: impl Into<String>) -> Self {
        Self {
            actor: Some(actor.into()),
            ..Self::default()
        }
    }

    /// The same metadata on behalf of `scope` (`None` leaves it as is).
    pub fn with_scope(mut self, scope: Option<String>) -> Self {
        if scope.is_some() {
            self.scope = scope;
        }
        self
    }

    /// The same metadata in the trace `traceparent` names (`None` leaves it as is).
    pub fn with_trace(mut self, traceparent: Option<String>) -> Self {
        if let Some(tp) = traceparent {
            self.trace_id = tp.split('-').nth(1).map(str::to_string);
            self.traceparent = Some(tp);
        }
        self
    }
}

/// An event about to be appended.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_type: String,
    pub event_version: i32,
    /// Its payload, already written as the JSON text the log stores.
    pub payload: Payload,
    pub metadata: Metadata,
}

impl NewEvent {
    pub fn new(event_type: impl Into<String>, event_version: i32, payload: Value) -> Self {
        Self {
            event_type: event_type.into(),
            event_version,
            payload: Payload::from_value(&payload),
            metadata: Metadata::default(),
        }
    }

    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = metadata;
        self
    }
}

/// Events to append to one stream, atomically, if the stream is at `expected`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendRequest {
    pub stream: StreamRef,
    pub expected: ExpectedVersion,
    pub events: Vec<NewEvent>,
}

impl AppendRequest {
    pub fn new(stream: StreamRef, expected: ExpectedVersion, events: Vec<NewEvent>) -> Self {
        Self {
            stream,
            expected,
            events,
        }
    }
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Appended {
    /// Global position of the first event written.
    pub first_position: i64,
    /// Global position of the last event written.
    pub last_position: i64,
    /// The stream's version after the append.
    pub stream_version: i64,
}

/// An event as stored: everything a reader of the log sees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedEvent {
    /// Position in the whole log: dense, starting at 1, in commit order.
    pub position: i64,
    #[serde(flatten)]
    pub stream: StreamRef,
    /// Version within the stream: dense, starting at 1.
    pub version: i64,
    pub event_type: String,
    /// The schema version the payload is in (after upcasting).
    pub event_version: i32,
    pub payload: Value,
    pub metadata: Metadata,
    pub recorded_at: DateTime<Utc>,
}

impl RecordedEvent {
    /// A short, human description used in error messages: `task/0193…#4 task.queued (position 17)`.
    pub fn describe(&self) -> String {
        describe_event(&self.stream, self.version, &self.event_type, self.position)
    }
}

/// The one way events are named in error messages.
pub fn describe_event(stream: &StreamRef, version: i64, event_type: &str, position: i64) -> String {
    format!("{stream}#{version} {event_type} (position {position})")
}

/// Which events a reader of the whole log wants. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    pub stream_types: Vec<StreamType>,
    pub stream_id: Option<String>,
    pub event_types: Vec<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

impl EventFilter {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// Does `event` pass? (The stores push the same test into SQL; this is the
    /// reference used by tests and by in-memory tails.)
    pub fn matches(&self, event: &RecordedEvent) -> bool {
        (self.stream_types.is_empty() || self.stream_types.contains(&event.stream.kind))
            && self
                .stream_id
                .as_ref()
                .is_none_or(|id| *id == event.stream.id)
            && (self.event_types.is_empty() || self.event_types.contains(&event.event_type))
            && self.since.is_none_or(|t| event.recorded_at >= t)
            && self.until.is_none_or(|t| event.recorded_at < t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_types_parse_and_print() {
        for t in StreamType::ALL {
            assert_eq!(t.as_str().parse::<StreamType>(), Ok(t));
        }
        assert_eq!(
            "job".parse::<StreamType>().unwrap_err().to_string(),
            "unknown stream type \"job\" (expected one of: workflow, run, task, agent, bulk, schedule, debounce, solve, chat)"
        );
    }

    #[test]
    fn expected_version_admits() {
        assert!(ExpectedVersion::Any.admits(7));
        assert!(ExpectedVersion::NoStream.admits(0));
        assert!(!ExpectedVersion::NoStream.admits(1));
        assert!(ExpectedVersion::Exactly(3).admits(3));
        assert!(!ExpectedVersion::Exactly(3).admits(4));
    }

    #[test]
    fn metadata_omits_what_is_unknown() {
        let m = Metadata::actor("ada");
        assert_eq!(
            serde_json::to_value(&m).unwrap(),
            serde_json::json!({"actor": "ada"})
        );
        let back: Metadata = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(back, Metadata::default());
    }
}
